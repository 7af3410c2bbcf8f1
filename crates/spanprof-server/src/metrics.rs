//! Self-metrics in Prometheus text format: counts per receiver and sink, queue depth, store
//! size, scrape durations and errors, and how long durable writes take (a histogram).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A metric's name and label set.
type Key = (&'static str, Vec<(&'static str, String)>);

/// Counters and gauges, by name and label set; histograms by name. A tenant's view
/// ([`Metrics::for_tenant`]) labels what it records `tenant="<id>"` and renders only that.
#[derive(Debug, Default)]
pub struct Metrics {
    shared: Arc<Registry>,
    /// The tenant whose view this is; `None`: the default tenant's, which renders every
    /// tenant's series (it is the operator's).
    tenant: Option<Arc<str>>,
}

/// What every tenant's view shares.
#[derive(Debug, Default)]
struct Registry {
    counters: Mutex<BTreeMap<Key, f64>>,
    histograms: Mutex<BTreeMap<&'static str, Histogram>>,
    refusals_logged: Mutex<BTreeMap<(&'static str, &'static str), LastLogged>>,
}

/// The label a tenant's series carry.
const TENANT_LABEL: &str = "tenant";

/// Per receiver and reason: when a refused request was last logged, and how many have not
/// been since.
type LastLogged = (Instant, u64);

/// A receiver's refused requests are logged at most once this often per reason (with how
/// many more there were), so that a misbehaving client cannot flood the log.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Upper bounds, in seconds, of the buckets of duration histograms: from a write that only
/// waits for `fdatasync` on a fast disk to one stalled behind a slow disk.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// `# HELP` text of every metric, by name (a test checks that each name the server sets is
/// here).
const HELP: &[(&str, &str)] = &[
    ("spanprof_received_profiles_total", "Profiles received, per receiver (after decoding, before the store)."),
    ("spanprof_received_samples_total", "Samples received, per receiver."),
    ("spanprof_linked_samples_total", "Received samples linked to a span, per receiver."),
    ("spanprof_profile_level_id_samples_total", "Received samples with no id of their own that took their profile's span and trace ids (the upload's name tags, a push series' labels, OTLP resource or profile attributes), per receiver."),
    ("spanprof_unlinked_span_id_samples_total", "Received samples with a span-id-shaped label under a key that is no link key (e.g. custom.span_id), per key: they are linked to no span; spanprof serve --span-id-key KEY links them."),
    ("spanprof_nested_span_id_samples_total", "Received samples carrying several span ids (nested spans tagged one inside the other), per receiver and outcome: innermost (the known spans or the profile's samples told the innermost span, which the sample got), ambiguous (nothing told it: the sample got the first id in label order)."),
    ("spanprof_received_spans_total", "Spans received, per receiver."),
    ("spanprof_rejected_spans_total", "Spans refused (bad ids or times), per receiver."),
    ("spanprof_rejected_total", "Requests refused, per receiver and reason (the answer said why); receiver=\"store\" counts the profiles the store refused (a request is answered 400, or OTLP's partial_success names them)."),
    ("spanprof_stored_profiles_total", "Profiles written to the store."),
    (
        "spanprof_repeated_profiles_total",
        "Profiles not stored again: the same profile (OTLP profile_id, time, type) was stored lately, and a client sent it again.",
    ),
    ("spanprof_stored_samples_total", "Samples written to the store."),
    ("spanprof_stored_spans_total", "Spans written to the store."),
    ("spanprof_store_errors_total", "Batches the store could not write (their requests were answered 503)."),
    ("spanprof_queue_depth", "Requests in the pipeline (between receivers and sinks): queued, or being written."),
    ("spanprof_queue_bytes", "Bytes of the requests in the pipeline: queued, or being written."),
    ("spanprof_inflight_bytes", "Bytes of request bodies being received and decoded, with their decompressed copies and decoded messages."),
    ("spanprof_max_inflight_bytes", "Limit of spanprof_inflight_bytes (server.max_inflight_size; 0: none)."),
    ("spanprof_pipeline_batches_total", "Batches the pipeline wrote to its sinks."),
    ("spanprof_pipeline_batch_items_total", "Requests in the batches the pipeline wrote."),
    ("spanprof_pipeline_write_seconds", "Time to make one batch durable in every sink."),
    ("spanprof_pipeline_write_failing", "1 while batches fail to be written (/health answers 503 meanwhile), else 0."),
    ("spanprof_scrapes_total", "Successful scrapes, per target and profile kind."),
    ("spanprof_scrape_errors_total", "Failed scrapes, per target and profile kind."),
    ("spanprof_scrape_up", "1 if the last scrape of the target and profile kind succeeded, else 0."),
    ("spanprof_scrape_unprofiled_seconds_total", "Time between a target's CPU windows (in its clock) when it was not profiled: the target finishing a profile, the answer's transfer and the next request, or a lost window."),
    ("spanprof_scrape_duration_seconds", "Duration of the last scrape (a CPU scrape lasts its window)."),
    ("spanprof_forwarded_records_total", "Records (profile or trace requests) a forwarder delivered, per signal."),
    ("spanprof_forward_failed_total", "Export attempts that failed and will be retried, per forwarder."),
    ("spanprof_forward_failing", "1 while a forwarder's exports fail (it retries with backoff), else 0."),
    ("spanprof_forward_dropped_records_total", "Records a forwarder dropped, per reason (refused downstream, or the queue full)."),
    ("spanprof_forward_queued_records", "Records in a forwarder's disk queue not yet delivered."),
    ("spanprof_forward_queue_bytes", "Disk taken by a forwarder's queue (delivered records stay until their segment is reclaimed)."),
    ("spanprof_forward_queue_growth_bytes_per_second", "Net growth of a forwarder's undelivered records over the last minute, bytes/s (negative while it drains)."),
    ("spanprof_forward_queue_full_in_seconds", "Seconds until a forwarder's queue is full (and drops its oldest records) at its growth of the last minute; -1 while it does not grow. /health warns below 6 h."),
    ("spanprof_forward_queue_errors_total", "Batches the forwarders' disk queues could not take."),
    ("spanprof_tls_handshake_failures_total", "TLS handshakes that failed, per listener and reason: timeout (not finished within the header deadline), closed (the client left halfway), plaintext_http (plain HTTP sent to a TLS listener, answered 400), not_tls (other bytes), client_certificate (none shown where one is required, or one the client CAs did not sign), client_alert (the client refused, most often not trusting the server's certificate), protocol (no common version or cipher, a broken message)."),
    ("spanprof_build_info", "1, with the running spanprof's version as a label."),
    ("spanprof_store_disk_bytes", "Bytes the store takes on disk."),
    ("spanprof_tenant_requests_total", "Requests served, per tenant (the tenant label; none for the default tenant). Every series of a tenant's own is labelled tenant=<id>; a tenant's /metrics shows only those."),
    ("spanprof_retention_runs_total", "Retention runs, per trigger: schedule (once a minute, with compaction), write_failed (a store write failed: a full disk makes room), over_limit (the store grew past storage.max_size)."),
    ("spanprof_store_segments", "Segments of the store's log."),
    ("spanprof_store_series", "Series in the store."),
    ("spanprof_store_max_series", "Limit of spanprof_store_series (storage.max_series; 0: none)."),
    ("spanprof_store_samples", "Samples in the store."),
    ("spanprof_store_spans", "Spans in the store."),
    ("spanprof_store_services", "Services in the store."),
    ("spanprof_store_symbols", "Symbols in the store, per table."),
    ("spanprof_store_symbol_generations", "Symbol generations (a new one starts as old symbols fall out of use)."),
    ("spanprof_store_symbols_bytes", "Bytes of the store's symbols."),
    ("spanprof_store_max_symbols_bytes", "Limit of spanprof_store_symbols_bytes (storage.max_symbols_size; 0: none)."),
];

/// The `# HELP` text of metric `name`.
fn help(name: &str) -> Option<&'static str> {
    HELP.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
}

/// Observations counted into buckets, as Prometheus histograms are.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), then the observations above every bound.
    counts: Vec<u64>,
    sum: f64,
}

impl Metrics {
    /// Tenant `tenant`'s view of the same registry.
    pub fn for_tenant(&self, tenant: &str) -> Metrics {
        Metrics {
            shared: Arc::clone(&self.shared),
            tenant: Some(Arc::from(tenant)),
        }
    }

    /// The key of `name{labels}`, with this view's tenant label.
    fn key(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Key {
        let mut labels: Vec<(&'static str, String)> =
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        if let Some(t) = &self.tenant {
            labels.push((TENANT_LABEL, t.to_string()));
        }
        (name, labels)
    }

    /// Adds `v` to counter `name{labels}`.
    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let key = self.key(name, labels);
        *self
            .shared
            .counters
            .lock()
            .expect("metrics lock poisoned")
            .entry(key)
            .or_default() += v;
    }

    /// Sets gauge `name{labels}` to `v`.
    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let key = self.key(name, labels);
        self.shared
            .counters
            .lock()
            .expect("metrics lock poisoned")
            .insert(key, v);
    }

    /// The current value of `name{labels}` (0 when never set).
    pub fn get(&self, name: &'static str, labels: &[(&'static str, &str)]) -> f64 {
        let key = self.key(name, labels);
        self.shared
            .counters
            .lock()
            .expect("metrics lock poisoned")
            .get(&key)
            .copied()
            .unwrap_or(0.0)
    }

    /// Every series of gauge or counter `name` of this view's tenant (the default tenant's
    /// view: those with no tenant label), as the value of its label `label` and its value.
    pub fn series(&self, name: &'static str, label: &'static str) -> Vec<(String, f64)> {
        let map = self.shared.counters.lock().expect("metrics lock poisoned");
        let tenant = |labels: &[(&'static str, String)]| {
            labels
                .iter()
                .find(|(k, _)| *k == TENANT_LABEL)
                .map(|(_, v)| v.clone())
        };
        map.iter()
            .filter(|((n, labels), _)| {
                *n == name && tenant(labels).as_deref() == self.tenant.as_deref()
            })
            .filter_map(|((_, labels), v)| {
                let value = labels.iter().find(|(k, _)| *k == label)?;
                Some((value.1.clone(), *v))
            })
            .collect()
    }

    /// Adds observation `v` to histogram `name`, whose buckets are `bounds` (ascending; fixed
    /// by the first observation).
    pub fn observe(&self, name: &'static str, bounds: &'static [f64], v: f64) {
        let mut map = self
            .shared
            .histograms
            .lock()
            .expect("metrics lock poisoned");
        let h = map.entry(name).or_insert_with(|| Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        });
        let bucket = h.bounds.partition_point(|&b| b < v);
        h.counts[bucket] += 1;
        h.sum += v;
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
        let link = &report.link;
        if link.profile_level_ids > 0 {
            self.add(
                "spanprof_profile_level_id_samples_total",
                &labels,
                link.profile_level_ids as f64,
            );
        }
        for (outcome, n) in [
            ("innermost", link.nested_span_ids),
            ("ambiguous", link.ambiguous_span_ids),
        ] {
            if n > 0 {
                self.add(
                    "spanprof_nested_span_id_samples_total",
                    &[("receiver", receiver), ("outcome", outcome)],
                    n as f64,
                );
            }
        }
    }

    /// Counts a request `receiver` refused under `spanprof_rejected_total{receiver, reason}`
    /// (a full queue is counted by the pipeline itself, as `queue_full`) and logs it, at most
    /// once every [`REFUSAL_LOG_EVERY`] per receiver and reason: client errors (4xx) as
    /// warnings, the server's own failures as errors.
    pub fn record_refused(
        &self,
        receiver: &'static str,
        reason: &'static str,
        status: u16,
        message: &str,
    ) {
        if reason != "queue_full" {
            self.add(
                "spanprof_rejected_total",
                &[("receiver", receiver), ("reason", reason)],
                1.0,
            );
        }
        let Some(suppressed) = self.refusal_to_log(receiver, reason, Instant::now()) else {
            return;
        };
        // Who sent it (the last one, when others were suppressed).
        let client = crate::peer::peer().map(|p| p.to_string());
        let client = client.as_deref().unwrap_or("-");
        if status >= 500 {
            tracing::error!(
                target: "spanprof_server::receivers",
                receiver,
                reason,
                status,
                client,
                suppressed,
                "request failed: {message}"
            );
        } else {
            tracing::warn!(
                target: "spanprof_server::receivers",
                receiver,
                reason,
                status,
                client,
                suppressed,
                "request refused: {message}"
            );
        }
    }

    /// Whether a refusal by `receiver` for `reason` at `now` is logged: with how many were not
    /// since the last line, or `None` within [`REFUSAL_LOG_EVERY`] of it. The pipeline's own
    /// failures (a sink that cannot write) are limited the same way, under the sink's name.
    pub(crate) fn refusal_to_log(
        &self,
        receiver: &'static str,
        reason: &'static str,
        now: Instant,
    ) -> Option<u64> {
        let mut logged = self
            .shared
            .refusals_logged
            .lock()
            .expect("metrics lock poisoned");
        match logged.get_mut(&(receiver, reason)) {
            Some((at, n)) if now.duration_since(*at) < REFUSAL_LOG_EVERY => {
                *n += 1;
                None
            }
            Some((at, n)) => {
                *at = now;
                Some(std::mem::take(n))
            }
            None => {
                logged.insert((receiver, reason), (now, 0));
                Some(0)
            }
        }
    }

    /// Everything in Prometheus text exposition format: a tenant's view, only its own
    /// series (no histogram: they are the server's).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let map = self.shared.counters.lock().expect("metrics lock poisoned");
        let mut last = "";
        let mine = |labels: &[(&'static str, String)]| match &self.tenant {
            None => true,
            Some(t) => labels.iter().any(|(k, v)| *k == TENANT_LABEL && **v == **t),
        };
        for ((name, labels), v) in map.iter().filter(|((_, l), _)| mine(l)) {
            if *name != last {
                let kind = if name.ends_with("_total") {
                    "counter"
                } else {
                    "gauge"
                };
                if let Some(h) = help(name) {
                    let _ = writeln!(out, "# HELP {name} {h}");
                }
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
        drop(map);
        if self.tenant.is_some() {
            return out;
        }
        for (name, h) in self
            .shared
            .histograms
            .lock()
            .expect("metrics lock poisoned")
            .iter()
        {
            if let Some(h) = help(name) {
                let _ = writeln!(out, "# HELP {name} {h}");
            }
            let _ = writeln!(out, "# TYPE {name} histogram");
            let mut below = 0;
            for (bound, n) in h.bounds.iter().zip(&h.counts) {
                below += n;
                let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {below}");
            }
            let count = below + h.counts[h.bounds.len()];
            let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
            let _ = writeln!(out, "{name}_sum {}", h.sum);
            let _ = writeln!(out, "{name}_count {count}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_all_counted_and_logged_once_per_period_and_reason() {
        let m = Metrics::default();
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", t0), Some(0));
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", t0 + second), None);
        assert_eq!(
            m.refusal_to_log("otlp_grpc", "invalid", t0 + 2 * second),
            None
        );
        // Another reason or receiver has its own period.
        assert_eq!(m.refusal_to_log("otlp_grpc", "busy", t0 + second), Some(0));
        assert_eq!(m.refusal_to_log("pyroscope_push", "invalid", t0), Some(0));
        let later = t0 + REFUSAL_LOG_EVERY;
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", later), Some(2));
        assert_eq!(
            m.refusal_to_log("otlp_grpc", "invalid", later + second),
            None
        );

        for _ in 0..3 {
            m.record_refused("pyroscope_ingest", "invalid", 400, "not folded text");
        }
        m.record_refused("pyroscope_ingest", "queue_full", 429, "the queue is full");
        let text = m.render();
        assert!(
            text.contains(
                r#"spanprof_rejected_total{receiver="pyroscope_ingest",reason="invalid"} 3"#
            ),
            "{text}"
        );
        assert!(
            !text.contains("queue_full"),
            "the pipeline counts a full queue: {text}"
        );
    }

    /// Every metric name in the server's sources has its `# HELP` text.
    #[test]
    fn a_tenant_view_labels_its_series_and_renders_only_them() {
        let m = Metrics::default();
        m.add("spanprof_stored_spans_total", &[], 1.0);
        let a = m.for_tenant("a");
        a.add("spanprof_stored_spans_total", &[], 2.0);
        m.for_tenant("b")
            .add("spanprof_stored_spans_total", &[], 3.0);
        m.observe("spanprof_write_seconds", &[1.0], 0.5);
        assert_eq!(a.get("spanprof_stored_spans_total", &[]), 2.0);
        let own = a.render();
        assert!(
            own.contains("spanprof_stored_spans_total{tenant=\"a\"} 2"),
            "{own}"
        );
        assert!(
            !own.contains("tenant=\"b\"") && !own.contains(" 1\n"),
            "{own}"
        );
        assert!(!own.contains("spanprof_write_seconds"), "{own}");
        let all = m.render();
        assert!(
            all.contains("spanprof_stored_spans_total 1\n")
                && all.contains("{tenant=\"a\"} 2")
                && all.contains("{tenant=\"b\"} 3")
                && all.contains("spanprof_write_seconds_count 1"),
            "{all}"
        );
    }

    #[test]
    fn every_metric_has_help() {
        fn names(dir: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    names(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (at, _) in text.match_indices("\"spanprof_") {
                        let name: String = text[at + 1..]
                            .chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect();
                        // A whole string literal (not a path such as `spanprof_server::…`).
                        if text[at + 1 + name.len()..].starts_with('"') {
                            out.push(name);
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        names(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        // This module's tests' own names.
        found.retain(|n| {
            !n.ends_with('_')
                && !["spanprof_x_total", "spanprof_write_seconds"].contains(&n.as_str())
        });
        assert!(found.len() > 30, "{found:?}");
        let missing: Vec<&String> = found.iter().filter(|n| help(n).is_none()).collect();
        assert!(missing.is_empty(), "no # HELP for {missing:?}");
        let m = Metrics::default();
        m.add("spanprof_stored_spans_total", &[], 2.0);
        assert_eq!(
            m.render(),
            "# HELP spanprof_stored_spans_total Spans written to the store.\n\
             # TYPE spanprof_stored_spans_total counter\n\
             spanprof_stored_spans_total 2\n"
        );
    }

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let m = Metrics::default();
        m.add("spanprof_x_total", &[], 1.0);
        for v in [0.0005, 0.001, 0.003, 0.003, 20.0] {
            m.observe("spanprof_write_seconds", &[0.001, 0.005], v);
        }
        let text = m.render();
        let want = "# TYPE spanprof_x_total counter\n\
            spanprof_x_total 1\n\
            # TYPE spanprof_write_seconds histogram\n\
            spanprof_write_seconds_bucket{le=\"0.001\"} 2\n\
            spanprof_write_seconds_bucket{le=\"0.005\"} 4\n\
            spanprof_write_seconds_bucket{le=\"+Inf\"} 5\n\
            spanprof_write_seconds_sum 20.0075\n\
            spanprof_write_seconds_count 5\n";
        assert_eq!(text, want);
    }
}
