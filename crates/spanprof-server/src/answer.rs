//! Pieces of the query API's answers that both the embedded store's handlers (`api`) and the
//! remote backend (`remote`) build: the error answer, flame graph layouts, bounds and words.
//! Below both, so that neither imports the other's internals.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::diff::diff_layout;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{SpanMatches, StoreError, TraceGroup};
use spanprof_store::FlameTree;

/// Most spans a trace answer holds (the earliest ones): a trace of a million spans was a
/// 389 MB answer built in 5.3 GB. Tempo refuses traces past 5 MB at ingest
/// (`max_bytes_per_trace`), some 20,000 spans.
pub const MAX_TRACE_SPANS: usize = 20_000;

/// Most label text (names and values, bytes) a label-values or series answer holds; past it the
/// answer is cut and says so (`truncated`): over 100,000 series with 2,000-byte values, one
/// label-values answer was 200 MB and took 1.16 GB to build.
pub const MAX_ANSWER_LABEL_BYTES: usize = 16 << 20;

/// What a stopped query's answer says (every query API words it the same way).
pub fn stopped_message(s: spanprof_store::query_limit::Stopped) -> String {
    format!(
        "{s} (server.query_timeout): narrow the time range, the service or the label \
         selector, or raise the setting"
    )
}

/// A request the API could not answer: the status and a message naming what is wrong.
#[derive(Debug)]
pub struct ApiError {
    /// 400 for a bad parameter, 404 for something unknown, 500 for a store failure.
    pub status: StatusCode,
    /// What is wrong, for people; a bad parameter is named first.
    pub message: String,
}

impl ApiError {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 400 for parameter `name` (as the client spelled it) with `value`: `name "value": reason`.
    pub fn bad_param(name: &str, value: &str, reason: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("{name} {value:?}: {reason}"))
    }

    /// 404 with `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 500 with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            // Selectors are checked before the store sees them; this is a second line.
            StoreError::Matcher(m) => ApiError::bad_request(format!("query: {m}")),
            StoreError::Stopped(s) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: stopped_message(s),
            },
            other => {
                tracing::warn!(error = %other, "query failed in the store");
                ApiError::internal(format!("store: {other}"))
            }
        }
    }
}

impl ApiError {
    /// The answer for `go tool pprof`: the message as text, marked with `X-Go-Pprof`, which
    /// is how pprof knows to show a failed fetch's body (otherwise it prints only the status).
    pub fn for_go_pprof(self) -> Response {
        (
            self.status,
            [
                ("content-type", "text/plain; charset=utf-8"),
                ("x-go-pprof", "1"),
            ],
            format!("{}\n", self.message),
        )
            .into_response()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        (self.status, [("content-type", "application/json")], body).into_response()
    }
}

/// `{"names","levels","total","maxSelf"}` with numbers as JSON numbers.
pub fn layout_json(tree: &FlameTree, max_nodes: usize) -> Value {
    let layout = tree.to_pyroscope_layout(max_nodes);
    json!({
        "names": layout.names,
        "levels": layout.levels,
        "total": layout.total,
        "maxSelf": layout.max_self,
    })
}

/// The diff flame graph's layout (`flamegraph` of the answer).
pub fn diff_layout_json(left: &FlameTree, right: &FlameTree, max_nodes: usize) -> Value {
    let d = diff_layout(left, right, max_nodes);
    json!({
        "names": d.names,
        "levels": d.levels,
        "total": d.total,
        "maxSelf": d.max_self,
        "leftTicks": d.left_ticks,
        "rightTicks": d.right_ticks,
    })
}

/// Full type ids, comma-separated, for messages.
pub fn type_list(types: &[ProfileTypeId]) -> String {
    if types.is_empty() {
        return "(none)".to_owned();
    }
    types
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdict of a span whose samples were found (`api::query::verdict`'s first word).
pub const SAMPLED: &str = "sampled";

/// A span's own fields as the span and trace views answer them (ids, names, status, times,
/// attributes, resource and events); the figures of its samples are the caller's to add.
pub fn span_fields(span: &SpanRecord) -> Map<String, Value> {
    let object = |pairs: &[(String, String)]| -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    let v = json!({
        "trace_id": to_hex(&span.trace_id),
        "span_id": to_hex(&span.span_id),
        "parent_span_id": span.parent_span_id.map(|p| to_hex(&p)),
        "service": span.service,
        "name": span.name,
        "kind": span.kind,
        "status_code": span.status_code,
        "status_message": span.status_message,
        "start_ns": span.start_ns.to_string(),
        "duration_ns": span.duration_ns(),
        "attributes": object(&span.attributes),
        "resource": object(&span.resource),
        "events": span.events.iter().map(|e| json!({
            "time_ns": e.time_ns.to_string(),
            "name": e.name,
            "attributes": object(&e.attributes),
        })).collect::<Vec<_>>(),
    });
    let Value::Object(map) = v else {
        unreachable!("json! of an object")
    };
    map
}

/// `map` with the fields of `more` (a JSON object) added.
pub fn with_fields(mut map: Map<String, Value>, more: Value) -> Map<String, Value> {
    if let Value::Object(more) = more {
        map.extend(more);
    }
    map
}

/// Writes the `group=trace` page into `body`: the count, the type of the `cpu` values (`t`)
/// and the traces from `offset`, at most `limit`.
pub fn put_trace_page(
    body: &mut Value,
    groups: &[TraceGroup],
    t: Option<&ProfileTypeId>,
    (offset, limit): (usize, usize),
) {
    body["count"] = groups.len().into();
    body["unit"] = t.map(|t| t.sample_unit.clone()).into();
    body["profile_type"] = t.map(ToString::to_string).into();
    body["traces"] = groups
        .iter()
        .skip(offset)
        .take(limit)
        .map(trace_group_json)
        .collect::<Vec<_>>()
        .into();
}

/// One trace of the span list's `group=trace` answer, as both data sources write it.
fn trace_group_json(g: &TraceGroup) -> Value {
    json!({
        "trace_id": to_hex(&g.trace_id),
        "root_name": g.root.as_ref().map(|r| &r.0),
        "root_service": g.root.as_ref().map(|r| &r.1),
        "services": g.services,
        "spans": g.spans,
        "matched": g.matched,
        "start_ns": g.start_ns.to_string(),
        "duration_ns": g.duration_ns,
        "cpu": g.cpu,
    })
}

/// `/api/v1/span-points`' answer: `found`'s spans (cut and in start order) as columns;
/// `count` the matches before the cut, `t` the type of their `cpu` values.
pub fn span_points_json(count: usize, found: &SpanMatches, t: Option<&ProfileTypeId>) -> Value {
    let m = &found.matches;
    json!({
        "count": count,
        "more": found.more,
        "shown": m.len(),
        "unit": t.map(|t| t.sample_unit.clone()),
        "profile_type": t.map(ToString::to_string),
        "names": found.names,
        "start_ms": m.iter().map(|s| s.start_ns as f64 / 1e6).collect::<Vec<_>>(),
        "duration_ns": m.iter().map(|s| s.duration_ns).collect::<Vec<_>>(),
        "cpu": m.iter().map(|s| s.cpu).collect::<Vec<_>>(),
        "name": m.iter().map(|s| s.name).collect::<Vec<_>>(),
        "service": m.iter().map(|s| s.service).collect::<Vec<_>>(),
        "span_id": m.iter().map(|s| to_hex(&s.span_id)).collect::<Vec<_>>(),
        "trace_id": m.iter().map(|s| to_hex(&s.trace_id)).collect::<Vec<_>>(),
    })
}
