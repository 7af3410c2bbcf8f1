//! Tempo's trace query API on the main listener, so Grafana's Tempo data source (and any
//! Tempo client) reads spans straight from spanprof, and each span with samples carries
//! `pyroscope.profile.id` for Grafana's "Profiles for this span" link.
//!
//! Endpoints, parameters and answers: `docs/api/tempo.md`.

mod search;
mod tags;
mod trace;
mod traceql;

use axum::extract::Query;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use spanprof_store::store::Store;

use super::query::ApiError;
use crate::api::Queries;
use crate::auth::Access;
use crate::routes::Routes;
use search::search;
use tags::{tag_values_v1, tag_values_v2, tags_v1, tags_v2};
use trace::{trace_v1, trace_v2};

/// The span attribute Grafana reads the profile span selector from.
pub const PROFILE_ID_ATTRIBUTE: &str = "pyroscope.profile.id";

/// The Tempo routes.
pub fn routes() -> Routes {
    Routes::new()
        .get("/api/traces/{trace_id}", Access::Read, trace_v1)
        .get("/api/v2/traces/{trace_id}", Access::Read, trace_v2)
        .get("/api/search", Access::Read, search)
        .get("/api/search/tags", Access::Read, tags_v1)
        .get("/api/v2/search/tags", Access::Read, tags_v2)
        .get("/api/search/tag/{name}/values", Access::Read, tag_values_v1)
        .get(
            "/api/v2/search/tag/{name}/values",
            Access::Read,
            tag_values_v2,
        )
        .get("/api/echo", Access::Read, echo)
}

type Params = Query<Vec<(String, String)>>;

async fn echo() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "echo",
    )
        .into_response()
}

// Trace by id

/// Whether the client asked for protobuf (Tempo: `Accept: application/protobuf`).
fn wants_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.split(';').next().unwrap_or("").trim())
        .any(|t| t.eq_ignore_ascii_case("application/protobuf"))
}

fn protobuf(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/protobuf")], body).into_response()
}

fn json_text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn json_value(v: Value) -> Response {
    json_text(v.to_string())
}

/// Runs `query` on a blocking thread (store calls read from disk).
async fn blocking<T: Send + 'static>(
    queries: &Queries,
    query: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::api::run_app_query(queries, query)
        .await
        .map_err(|e| ApiError::internal(format!("the query failed: {e}")))?
}

// Search

// Tags
