//! One metric event, as receivers and the pipeline record them: the typed families (an atomic
//! add at an index) against the string-keyed map they replaced (one global mutex and a
//! label vector allocated per event), measured in the same run.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;

use criterion::{criterion_group, criterion_main, Criterion};
use spanprof_server::metrics::{Metrics, Receiver, RejectReason};

/// The map `Metrics` kept until typed families replaced it, as it recorded an event: the
/// label set copied into owned strings (with the tenant's, if any), then one lock.
/// A metric's name and label set, as the map keyed them.
type Key = (&'static str, Vec<(&'static str, String)>);

#[derive(Default)]
struct StringKeyed {
    counters: Mutex<BTreeMap<Key, f64>>,
    tenant: Option<String>,
}

impl StringKeyed {
    fn add(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let mut labels: Vec<(&'static str, String)> =
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        if let Some(t) = &self.tenant {
            labels.push(("tenant", t.clone()));
        }
        *self
            .counters
            .lock()
            .expect("lock")
            .entry((name, labels))
            .or_default() += v;
    }
}

fn increment(c: &mut Criterion) {
    let mut g = c.benchmark_group("metric_increment");
    let before = StringKeyed::default();
    // A registry with the series a running server has, so the map lookups are not trivial.
    for receiver in [
        "otlp_grpc",
        "otlp_profiles",
        "otlp_traces",
        "pyroscope_ingest",
    ] {
        for reason in ["invalid", "busy", "too_large", "queue_full"] {
            before.add(
                "spanprof_rejected_total",
                &[("receiver", receiver), ("reason", reason)],
                0.0,
            );
        }
        before.add(
            "spanprof_received_samples_total",
            &[("receiver", receiver)],
            0.0,
        );
    }
    g.bench_function("string_keyed_map", |b| {
        b.iter(|| {
            before.add(
                black_box("spanprof_rejected_total"),
                black_box(&[("receiver", "otlp_grpc"), ("reason", "busy")]),
                1.0,
            )
        })
    });
    let after = Metrics::default();
    g.bench_function("typed_family", |b| {
        b.iter(|| {
            after.rejected.add(
                black_box((Receiver::OtlpGrpc, RejectReason::Busy)),
                black_box(1.0),
            )
        })
    });
    // An open-ended label (a forwarder, a scrape target): a read lock and a short scan.
    after.forward_queued_records.set(&["collector"], (), 0.0);
    g.bench_function("typed_open_family", |b| {
        b.iter(|| {
            after
                .forward_queued_records
                .set(black_box(&["collector"]), (), black_box(1.0))
        })
    });
    g.finish();
}

criterion_group!(benches, increment);
criterion_main!(benches);
