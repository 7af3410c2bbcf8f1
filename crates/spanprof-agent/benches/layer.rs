//! The writer's cost: entering and exiting a span with [`SpanSlotLayer`] installed, against the
//! same enter/exit with a bare registry and with a registry plus a layer that does nothing (the
//! peers: the second is what any layer costs `tracing`), and the slot's part alone.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use spanprof_agent::slot::{self, SpanContextIds};
use spanprof_agent::SpanSlotLayer;
use tracing::Subscriber;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// A layer with empty enter/exit hooks: the cost of being a layer at all.
struct NoopLayer;

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for NoopLayer {
    fn on_enter(&self, id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        std::hint::black_box(id);
    }
    fn on_exit(&self, id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        std::hint::black_box(id);
    }
}

fn enter_exit(c: &mut Criterion) {
    let mut group = c.benchmark_group("span_enter_exit");
    let bare = tracing_subscriber::registry();
    tracing::subscriber::with_default(bare, || {
        let span = tracing::info_span!("request");
        group.bench_function("registry", |b| b.iter(|| drop(span.enter())));
    });
    let noop = tracing_subscriber::registry().with(NoopLayer);
    tracing::subscriber::with_default(noop, || {
        let span = tracing::info_span!("request");
        group.bench_function("registry+NoopLayer", |b| b.iter(|| drop(span.enter())));
    });
    let with_layer = tracing_subscriber::registry().with(SpanSlotLayer::new());
    tracing::subscriber::with_default(with_layer, || {
        let span = tracing::info_span!("request");
        group.bench_function("registry+SpanSlotLayer", |b| b.iter(|| drop(span.enter())));
        // A child entered inside its parent: the enter publishes the child, the exit the parent.
        let parent = tracing::info_span!("parent");
        let _p = parent.enter();
        let child = tracing::info_span!("child");
        group.bench_function("registry+SpanSlotLayer/nested", |b| {
            b.iter(|| drop(child.enter()))
        });
    });
    let ids = SpanContextIds {
        trace_id: [7; 16],
        span_id: [9; 8],
        trace_flags: 1,
        name: "request",
    };
    // The layer's own work on a poll: a cache hit (tag compare, pointer swap) and the exit.
    slot::enter_caching(2, 0, &ids);
    slot::exit(2);
    group.bench_function("slot_enter_cached_exit", |b| {
        b.iter(|| {
            assert!(slot::enter_cached(std::hint::black_box(2), 0));
            slot::exit(2);
        })
    });
    // The record built at every enter (the path of spans not cached).
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
