//! `/metrics`, and the answers to requests no route takes.

use axum::extract::State;
use axum::response::IntoResponse;

use std::sync::Arc;

use crate::metrics::{Label as _, Metrics, Receiver, RejectReason, SymbolTable};
use crate::{AppState, Bound};

/// Prometheus text: pipeline counters plus the store's sizes.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    let store = app.store.clone();
    let stats = tokio::task::spawn_blocking(move || store.stats())
        .await
        .unwrap_or_default();
    let m = &app.metrics;
    m.store_disk_bytes.set((), stats.disk_bytes as f64);
    m.store_segments.set((), stats.segments as f64);
    m.store_series.set((), stats.series as f64);
    // Its limit (storage.max_series; 0 = none), for an alert on the ratio.
    let max_series = app.config.storage.max_series as f64;
    m.store_max_series.set((), max_series);
    m.store_samples.set((), stats.samples as f64);
    m.store_spans.set((), stats.spans as f64);
    m.store_services.set((), stats.services as f64);
    // Symbols are kept in memory (each build's until retention deletes its data): these show
    // a program's symbols, or cardinality growing where it should not.
    for (table, n) in SymbolTable::ALL.iter().zip(stats.symbols) {
        m.store_symbols.set(*table, n as f64);
    }
    // A service's symbols start a new generation when a new build doubled them; the old one
    // is dropped once retention deleted its data.
    let generations = stats.symbol_generations as f64;
    m.store_symbol_generations.set((), generations);
    // Their bytes as counted against storage.max_symbols_size (0 = none), for an alert on the
    // ratio: past the limit, profiles that add symbols are refused.
    m.store_symbols_bytes.set((), stats.symbol_bytes as f64);
    let max_symbol_bytes = app.config.storage.max_symbols_size.0 as f64;
    m.store_max_symbols_bytes.set((), max_symbol_bytes);
    // Request bodies being received and decoded, against server.max_inflight_size (0 = none;
    // past it: spanprof_rejected_total{reason="inflight_full"}).
    m.inflight_bytes.set((), app.inflight.bytes() as f64);
    m.max_inflight_bytes.set((), app.inflight.max() as f64);
    (
        [("content-type", "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}

/// A path that exists, asked with a method it does not take: 405 saying so (the `Allow` header,
/// which axum adds, lists the methods it takes).
pub async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} {}: this path does not take {method} (the Allow header lists what it takes)\n",
            uri.path()
        ),
    )
        .into_response()
}

/// The main listener's fallback ([`not_found`]).
pub async fn not_found_main(
    State(metrics): State<Arc<Metrics>>,
    State(bound): State<Bound>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    not_found(&metrics, &bound, Listener::Main, &method, uri.path())
}

/// The OTLP/HTTP listener's fallback ([`not_found`]).
pub async fn not_found_otlp(
    State(metrics): State<Arc<Metrics>>,
    State(bound): State<Bound>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    not_found(&metrics, &bound, Listener::Otlp, &method, uri.path())
}

/// Which listener a request with no route came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The main one (`:4040`): UI, APIs, Pyroscope ingest, OTLP/HTTP.
    Main,
    /// The OTLP/HTTP one (`:4318`).
    Otlp,
}

/// A request no route takes: 404 saying what this listener serves (and, for a likely
/// misconfigured exporter, what to change), counted and logged as a refusal
/// (`receiver="http"`, `reason="not_found"`), so an exporter sending to the wrong path shows.
pub fn not_found(
    metrics: &Metrics,
    bound: &Bound,
    listener: Listener,
    method: &axum::http::Method,
    path: &str,
) -> axum::response::Response {
    let serves = match listener {
        Listener::Otlp => {
            "this is spanprof's OTLP/HTTP listener: POST /v1development/profiles (OTLP \
             Profiles), POST /v1/traces, GET /health (/ready) and /live"
        }
        Listener::Main => {
            "spanprof serves the UI at /, its API under /api/v1/ (services, flamegraph, spans, \
             traces/{id}, pprof, …), Pyroscope's /ingest, /push.v1.PusherService/Push and \
             query API, Tempo's /api/traces and /api/search, OTLP/HTTP POST \
             /v1development/profiles and /v1/traces, /health (/ready), /live and /metrics"
        }
    };
    let hint = match path {
        "/v1/profiles" | "/v1experimental/profiles" | "/v1alpha/profiles" => {
            "; OTLP Profiles are at /v1development/profiles (the signal is still in \
             development): set the exporter's profiles path to that"
                .to_owned()
        }
        "/v1/metrics" | "/v1/logs" => {
            "; spanprof takes profiles and traces, not metrics or logs".to_owned()
        }
        // A Pyroscope SDK, a browser or a script pointed at the OTLP port instead of the main.
        _ if listener == Listener::Otlp => format!(
            "; Pyroscope's /ingest and /push.v1.PusherService/Push, the UI and /api/v1/ are on \
             the main listener, port {}",
            bound.http.port()
        ),
        _ => String::new(),
    };
    let message = format!("no such endpoint: {method} {path}; {serves}{hint}");
    metrics.record_refused(Receiver::Http, RejectReason::NotFound, 404, &message);
    (axum::http::StatusCode::NOT_FOUND, format!("{message}\n")).into_response()
}
