//! The JSON query API under `/api/v1/`, for the web UI and scripts.
//!
//! Every endpoint, parameter and answer: `docs/api/spanprof.md`.

mod catalog;
mod diff;
mod error;
mod flame;
mod focus;
pub(crate) mod params;
mod selection;
mod span_search;
mod span_view;
mod spans;
mod timeseries;

use axum::http::Uri;

pub use crate::answer::{diff_layout_json, layout_json, type_list, ApiError};
pub use spans::{
    verdict, NOT_PROFILED, NO_CPU, NO_SAMPLES, ON_ANCESTOR, PARTLY_PROFILED, PENDING, SAMPLED,
    TOO_SHORT,
};

use crate::auth::Access;
use crate::routes::Routes;

/// The endpoints under `/api/v1/`, for the 404 answer.
const ENDPOINTS: &str = "status, services, profile-types, label-names, label-values, series, \
     flamegraph, diff, top, timeseries, spans, span-points, span-names, spans/{span_id}, traces/{trace_id}, pprof, svg";

/// The query routes.
pub fn routes() -> Routes {
    Routes::new()
        .get("/api/v1/status", Access::Read, catalog::status)
        .get("/api/v1/services", Access::Read, catalog::services)
        .get(
            "/api/v1/profile-types",
            Access::Read,
            catalog::profile_types,
        )
        .get("/api/v1/label-names", Access::Read, catalog::label_names)
        .get("/api/v1/label-values", Access::Read, catalog::label_values)
        .get("/api/v1/series", Access::Read, catalog::series)
        .get("/api/v1/flamegraph", Access::Read, flame::flamegraph)
        .get("/api/v1/top", Access::Read, flame::top)
        .get("/api/v1/pprof", Access::Read, flame::pprof)
        .get("/api/v1/svg", Access::Read, flame::svg)
        .get("/api/v1/diff", Access::Read, diff::diff)
        .get("/api/v1/timeseries", Access::Read, timeseries::timeseries)
        .get("/api/v1/spans", Access::Read, span_search::search)
        .get("/api/v1/spans/{span_id}", Access::Read, span_view::span)
        .get("/api/v1/span-points", Access::Read, span_search::points)
        .get("/api/v1/span-names", Access::Read, span_search::names)
        .get("/api/v1/traces/{trace_id}", Access::Read, spans::trace)
        .get("/api/v1/{*rest}", Access::Read, unknown_endpoint)
}

async fn unknown_endpoint(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {}; /api/v1/ has: {ENDPOINTS}",
        uri.path()
    ))
}
