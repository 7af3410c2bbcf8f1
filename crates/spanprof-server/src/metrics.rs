//! Self-metrics in Prometheus text format: counts per receiver and sink, queue depth, store
//! size, scrape durations and errors.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// A metric's name and label set.
type Key = (&'static str, Vec<(&'static str, String)>);

/// Counters and gauges, by name and label set.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<Key, f64>>,
}

impl Metrics {
    /// Adds `v` to counter `name{labels}`.
    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let key = (
            name,
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        );
        *self
            .counters
            .lock()
            .expect("metrics lock poisoned")
            .entry(key)
            .or_default() += v;
    }

    /// Sets gauge `name{labels}` to `v`.
    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let key = (
            name,
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        );
        self.counters
            .lock()
            .expect("metrics lock poisoned")
            .insert(key, v);
    }

    /// The current value of `name{labels}` (0 when never set).
    pub fn get(&self, name: &'static str, labels: &[(&'static str, &str)]) -> f64 {
        let key = (
            name,
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        );
        self.counters
            .lock()
            .expect("metrics lock poisoned")
            .get(&key)
            .copied()
            .unwrap_or(0.0)
    }

    /// Counts what a receiver took in: profiles, samples, and samples linked to spans.
    pub fn record_received(
        &self,
        receiver: &'static str,
        report: &spanprof_format::ConversionReport,
    ) {
        let labels = [("receiver", receiver)];
        self.add(
            "spanprof_received_profiles_total",
            &labels,
            report.profiles as f64,
        );
        self.add(
            "spanprof_received_samples_total",
            &labels,
            report.samples as f64,
        );
        self.add(
            "spanprof_linked_samples_total",
            &labels,
            report.linked_samples as f64,
        );
    }

    /// Everything in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let map = self.counters.lock().expect("metrics lock poisoned");
        let mut last = "";
        for ((name, labels), v) in map.iter() {
            if *name != last {
                let kind = if name.ends_with("_total") {
                    "counter"
                } else {
                    "gauge"
                };
                let _ = writeln!(out, "# TYPE {name} {kind}");
                last = name;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}=\"{}\"",
                        v.replace('\\', "\\\\")
                            .replace('"', "\\\"")
                            .replace('\n', "\\n")
                    )
                })
                .collect();
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
            }
        }
        out
    }
}
