//! `/health` and `/metrics`.

use axum::extract::State;
use axum::response::IntoResponse;

use crate::AppState;

/// Ready: the listeners are bound and the store is open (handlers only run then).
pub async fn health() -> impl IntoResponse {
    "ok\n"
}

/// Prometheus text: pipeline counters plus the store's sizes.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    let store = app.store.clone();
    let stats = tokio::task::spawn_blocking(move || store.stats())
        .await
        .unwrap_or_default();
    app.metrics
        .set("spanprof_store_disk_bytes", &[], stats.disk_bytes as f64);
    app.metrics
        .set("spanprof_store_segments", &[], stats.segments as f64);
    app.metrics
        .set("spanprof_store_series", &[], stats.series as f64);
    // Its limit (storage.max_series; 0 = none), for an alert on the ratio.
    app.metrics.set(
        "spanprof_store_max_series",
        &[],
        app.config.limits.series.max_series as f64,
    );
    app.metrics
        .set("spanprof_store_samples", &[], stats.samples as f64);
    app.metrics
        .set("spanprof_store_spans", &[], stats.spans as f64);
    app.metrics
        .set("spanprof_store_services", &[], stats.services as f64);
    // Symbols are kept in memory (each build's until retention deletes its data): these show
    // a program's symbols, or cardinality growing where it should not.
    let tables = [
        "strings",
        "mappings",
        "functions",
        "locations",
        "stack_nodes",
    ];
    for (table, n) in tables.iter().zip(stats.symbols) {
        app.metrics
            .set("spanprof_store_symbols", &[("table", table)], n as f64);
    }
    // A service's symbols start a new generation when a new build doubled them; the old one
    // is dropped once retention deleted its data.
    app.metrics.set(
        "spanprof_store_symbol_generations",
        &[],
        stats.symbol_generations as f64,
    );
    // Their bytes as counted against storage.max_symbols_size (0 = none), for an alert on the
    // ratio: past the limit, profiles that add symbols are refused.
    app.metrics.set(
        "spanprof_store_symbols_bytes",
        &[],
        stats.symbol_bytes as f64,
    );
    app.metrics.set(
        "spanprof_store_max_symbols_bytes",
        &[],
        app.config.limits.max_symbol_bytes as f64,
    );
    // Request bodies being received and decoded, against server.max_inflight_size (0 = none;
    // past it: spanprof_rejected_total{reason="inflight_full"}).
    app.metrics
        .set("spanprof_inflight_bytes", &[], app.inflight.bytes() as f64);
    app.metrics.set(
        "spanprof_max_inflight_bytes",
        &[],
        app.inflight.max() as f64,
    );
    (
        [("content-type", "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
