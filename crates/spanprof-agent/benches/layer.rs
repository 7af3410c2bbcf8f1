//! The writer's cost: entering and exiting a span with [`SpanSlotLayer`] installed, against the
//! same enter/exit with a bare registry (the peer), and the slot write alone.

use criterion::{criterion_group, criterion_main, Criterion};
use spanprof_agent::slot::{self, SpanContextIds};
use spanprof_agent::SpanSlotLayer;
use tracing_subscriber::prelude::*;

fn enter_exit(c: &mut Criterion) {
    let mut group = c.benchmark_group("span_enter_exit");
    let bare = tracing_subscriber::registry();
    tracing::subscriber::with_default(bare, || {
        let span = tracing::info_span!("request");
        group.bench_function("registry", |b| b.iter(|| drop(span.enter())));
    });
    let with_layer = tracing_subscriber::registry().with(SpanSlotLayer::new());
    tracing::subscriber::with_default(with_layer, || {
        let span = tracing::info_span!("request");
        group.bench_function("registry+SpanSlotLayer", |b| b.iter(|| drop(span.enter())));
    });
    let ids = SpanContextIds {
        trace_id: [7; 16],
        span_id: [9; 8],
        trace_flags: 1,
        name: "request",
    };
    group.bench_function("slot_enter_exit", |b| {
        b.iter(|| {
            slot::enter(1, std::hint::black_box(&ids));
            slot::exit(1);
        })
    });
    group.finish();
}

criterion_group!(benches, enter_exit);
criterion_main!(benches);
