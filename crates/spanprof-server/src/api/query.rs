//! The JSON query API under `/api/v1/`, for the web UI and scripts.
//!
//! Every endpoint, parameter and answer: `docs/api/spanprof.md`.

mod catalog;
mod diff;
mod error;
mod flame;
pub(crate) mod params;
mod selection;
mod span_search;
mod spans;
mod timeseries;

use axum::http::Uri;
use axum::routing::get;
use axum::Router;

pub use error::ApiError;
pub use spans::{
    verdict, NOT_PROFILED, NO_CPU, NO_SAMPLES, ON_ANCESTOR, PARTLY_PROFILED, PENDING, SAMPLED,
    TOO_SHORT,
};

use crate::AppState;

/// The endpoints under `/api/v1/`, for the 404 answer.
const ENDPOINTS: &str = "status, services, profile-types, label-names, label-values, series, \
     flamegraph, diff, top, timeseries, spans, span-points, span-names, traces/{trace_id}, pprof, svg";

/// The query routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/status", get(catalog::status))
        .route("/api/v1/services", get(catalog::services))
        .route("/api/v1/profile-types", get(catalog::profile_types))
        .route("/api/v1/label-names", get(catalog::label_names))
        .route("/api/v1/label-values", get(catalog::label_values))
        .route("/api/v1/series", get(catalog::series))
        .route("/api/v1/flamegraph", get(flame::flamegraph))
        .route("/api/v1/top", get(flame::top))
        .route("/api/v1/pprof", get(flame::pprof))
        .route("/api/v1/svg", get(flame::svg))
        .route("/api/v1/diff", get(diff::diff))
        .route("/api/v1/timeseries", get(timeseries::timeseries))
        .route("/api/v1/spans", get(span_search::search))
        .route("/api/v1/span-points", get(span_search::points))
        .route("/api/v1/span-names", get(span_search::names))
        .route("/api/v1/traces/{trace_id}", get(spans::trace))
        .route("/api/v1/{*rest}", get(unknown_endpoint))
}

async fn unknown_endpoint(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {}; /api/v1/ has: {ENDPOINTS}",
        uri.path()
    ))
}
