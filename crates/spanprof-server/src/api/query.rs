//! The JSON query API under `/api/v1/`, for the web UI and scripts.
//!
//! # Parameters
//!
//! Query strings are form-encoded (`+` or `%20` for a space). Every endpoint rejects
//! parameters it does not know (400 naming them): a misspelt `span_id` must not widen a
//! flame graph to the whole service. An empty value (`from=`) counts as absent, but for the span selectors (see Errors).
//!
//! **Selection** (`/flamegraph`, `/top`, `/pprof`, `/svg`, `/timeseries`, each side of `/diff`):
//!
//! | parameter | meaning |
//! |---|---|
//! | `service` | service name (`service_name` label); absent = every service. With spans selected (`span_id`, `trace_id`, `span_name`, durations) it is the spans' service (the tracer's `service.name`), and their samples count whatever the profiles' service is called (a scrape target named otherwise, child spans in other services): it narrows a span filter (`span_name`, durations), while ids (`span_id`, `trace_id`) select on their own |
//! | `type` | profile type: full id `process_cpu:cpu:nanoseconds:cpu:nanoseconds`, `cpu:nanoseconds`, `cpu` or a name; absent = the CPU type, else CPU sample counts (`process_cpu:samples:count:cpu:nanoseconds`, the OpenTelemetry eBPF profiler's), else wall-clock time (`wall:wall:nanoseconds:…`, the Node.js SDK's), else the first type. A type the service does not have, or one naming several types (`memory`), is a 400 listing them; a name covering CPU (or wall-clock) time and its sample count (`process_cpu`, `wall`) means the time |
//! | `from`, `to` | RFC 3339 (a `+` offset written `%2B`), unix s (a fraction too)/ms/ns, `now`, `now-1h`; `to` exclusive; absent = all of time. The profiles taken in the range (a 15 s CPU window counts at its start, as the timeline buckets it); with spans or a trace selected, every profile window that overlaps it |
//! | `query` | label matchers, `{region="eu", pod=~"api-.*"}` (matchers only: a name before `{` is a 400 pointing to `type` or `service`) |
//! | `span_id` | repeatable; 16 hex characters |
//! | `trace_id` | 32 hex characters |
//! | `include_child_spans` | `true`/`false` (default false): add the samples of the spans' descendants |
//! | `span_name` | spans of this name (exact) |
//! | `min_duration`, `max_duration` | spans at least / at most this long (`250ms`, `1.5s`) |
//! | `above_percentile`, `below_percentile` | 0–100, of the durations of `span_name`'s spans (needs `span_name`) |
//!
//! The span filters combine with `span_id` (both must hold). `/label-names`,
//! `/label-values` and `/series` take only `service`, `type`, `from`, `to`, `query`.
//!
//! # Answers
//!
//! JSON objects. Times in ns since the epoch are **strings** (`"start_ns"`: too big for a
//! JavaScript number); durations (`*_ns`) and values are numbers; `*_ms` timestamps are
//! numbers. Ids are lower-case hex. Values (`total`, `self`, `value`) are in the profile
//! type's unit (`summary.unit`, e.g. nanoseconds of CPU).
//!
//! Errors: `{"error": "…"}` with 400 for a bad request, naming the parameter first
//! (`span_id "xyz": expected 16 hex characters (not all zero)`), 404 for an unknown trace or
//! endpoint (and for a `span_id` or `trace_id` selection that no stored span and no sample
//! has), 500 when the store fails; `/pprof` answers them as text with `X-Go-Pprof: 1`,
//! which `go tool pprof` prints. `span_id`, `trace_id` and `span_name` given empty
//! (`span_id=`, a script's unset variable) are a 400, not absent: absent would widen the
//! answer to the whole service.
//!
//! - `GET /api/v1/status` → `{"version", "listeners": {"http", "otlp_http", "otlp_grpc"}}`: the
//!   addresses bound (`null` when off), for the UI's "how to send data"
//! - `GET /api/v1/services?from&to&spans` → `{"services": ["checkout", …]}`: services with
//!   profiles taken in the range (as the profile endpoints count them; so do `/series` and
//!   the label endpoints); with `spans=true` also those with spans (a tracer's name for a
//!   service)
//! - `GET /api/v1/profile-types?service&span_id&trace_id&include_child_spans` →
//!   `{"profile_types": [{"id", "name", "sample_type", "sample_unit", "period_type",
//!   "period_unit", "is_cpu"}], "default": id|null}`: the service's types (every service's
//!   without one), or with spans or a trace those of their samples (none for spans without
//!   samples); `default` is the one a selection takes without `type`
//! - `GET /api/v1/label-names?…` → `{"names": ["__name__", "__profile_type__", "service_name", …]}`
//! - `GET /api/v1/label-values?name=…&…` → `{"name": "region", "values": ["eu", …]}`
//! - `GET /api/v1/series?…` → `{"series": [{"labels": {"service_name": "checkout", …}}]}`
//! - `GET /api/v1/flamegraph?…&max_nodes=8192` (0 = no limit) →
//!   `{"flamegraph": {"names": [..], "levels": [[x, total, self, name_index, …], …],
//!   "total", "maxSelf"}, "tree": {"name": "total", "total", "self", "children": [..]},
//!   "summary": Summary}` where `flamegraph` is Pyroscope's `FlameGraph` layout with numbers
//!   (x offsets delta-encoded per level), `tree` the nested tree, cut like `flamegraph` by
//!   `max_nodes` (the largest nodes kept, as Pyroscope's `max_nodes` does, and each parent's
//!   smaller children merged into a last child `other`, so the root and the `other` nodes come
//!   on top: `max_nodes=5` can answer 12 nodes;
//!   `max_nodes=0` for the whole tree, which can be millions of nodes, a gigabyte of JSON),
//!   and Summary = `{"profile_type": id|null, "unit": "nanoseconds"|null,
//!   "types_available": [id, …], "samples_selected", "value_selected", "averaged_over":
//!   n|null}`: `types_available` are the service's types, or with spans or a trace selected
//!   those of their samples; `samples_selected` counts stored sample rows (a stack with its series and
//!   link; a row of a Go CPU profile holds one or more 10 ms ticks), not sampling ticks as a
//!   span's `samples` does. A snapshot type (`inuse_space`, `inuse_objects`, goroutines: what
//!   was in use at each profile's time) over several profiles, without spans selected, is
//!   their average (on each side of `/diff` too; values divided by the `averaged_over`
//!   profiles and rounded down; frames that come to 0 left out), not their sum;
//!   `samples_selected` and `value_selected` count them all.
//!   `/svg` says so in its heading, `/pprof` in a comment (`go tool pprof -comments`).
//! - `GET /api/v1/top?…&order=self|total&limit=100` → `{"functions": [{"name", "self",
//!   "total"}], "total", "summary": Summary}`
//! - `GET /api/v1/diff?…` → `{"flamegraph": {"names", "levels": [[xl, totall, selfl, xr,
//!   totalr, selfr, name_index, …], …], "total", "maxSelf", "leftTicks", "rightTicks"},
//!   "tree": {"name", "left": {"total", "self"}, "right": {"total", "self"}, "children"},
//!   "left": Summary, "right": Summary}` (`tree` cut by `max_nodes` as for `/flamegraph`, a
//!   path kept when it is among the largest of either side). Two forms:
//!   - *side by side*: unprefixed selection parameters are shared; `left.<param>` /
//!     `right.<param>` replace a shared one on that side (all values of a repeatable one).
//!     Slow against fast spans of an endpoint:
//!     `service=api&span_name=GET+/users&left.below_percentile=50&right.above_percentile=90`.
//!   - *baseline*: the unprefixed (or `right.`) parameters are the right side and
//!     `baseline` derives the left from it: `span_name` = every span of the same name
//!     (`span_name`, or the one name of the selected `span_id`s) — one slow span against its
//!     endpoint; `fast` = that name's spans at or below the median duration, the right
//!     defaulting to `above_percentile=90` when it picks no span ids or durations — slow
//!     against fast; `service` = the same service, type, time and labels without any span or
//!     trace choice. `baseline` with `left.` parameters is a 400.
//!
//!   Both sides must resolve to one profile type.
//! - `GET /api/v1/timeseries?…&step=15s&group_by=region&aggregation=sum|average&exemplars=3`
//!   → `{"profile_type": id|null, "unit"|null, "step_ns", "profile_duration_ns",
//!   "aggregation", "series": [{"labels": {"region": "eu"}|{}, "points": [{"timestamp_ms",
//!   "value", "exemplars": [{"timestamp_ms", "value", "trace_id"|null, "span_id"}]}]}]}`;
//!   a profile counts at its time, whole: `profile_duration_ns` is the longest window one
//!   profile covers (a scraped CPU profile's 15 s), and a step shorter than it shows each
//!   window in one step and nothing in the next ones;
//!   buckets start at `from` (default 0: aligned to the epoch), empty ones are left out;
//!   `exemplars` defaults to 0. `average` divides a bucket's sum by its profiles (distinct
//!   times); it is the default for snapshot types, `sum` for the others.
//! - `GET /api/v1/spans?service&name&min_duration&max_duration&from&to&limit=100&type&status&kind&attribute&resource`
//!   (`status`: `error`, `ok` or `unset`; `kind`: `server`, `client`, `internal`,
//!   `producer`, `consumer` or `unspecified`; `attribute=k=v` and `resource=k=v`,
//!   repeatable: the span's attributes, and its resource's, hold every pair, values exactly;
//!   also `k!=v`, `k=~regex`, `k!~regex`, regexes whole, for spans that have `k`, and
//!   `k>n`, `k>=n`, `k<n`, `k<=n` for a value of `k` that is a number in that order to `n`
//!   (`attribute=http.response.status_code>=500`), as TraceQL) →
//!   `{"spans": [Span], "hint"?}` longest first (`hint`, when nothing matched and `service`
//!   has profiles but no spans at all: why, and the services that have spans), Span = `{"trace_id", "span_id", "parent_span_id"|null,
//!   "service", "name", "kind", "status_code", "status_message", "start_ns", "duration_ns", "self_ns",
//!   "profile_type"|null, "unit"|null, "total", "samples", "possible_samples"|null, "covered_ns"|null, "period"|null, "has_samples", "coverage",
//!   "attributes": {k: v}, "resource": {k: v}, "events": [{"time_ns", "name", "attributes"}]}`
//!   (`resource`: the attributes of the resource that sent the span, but `service.name`,
//!   which is `service`; `events`: what the span recorded, an exception say, at most 16):
//!   `total` and `samples` (sampling ticks, e.g. 10 ms each) are the
//!   span's own (children excluded) of `type` (default the CPU type of the span's samples;
//!   `profile_type` and `unit` name it), and so is `self_ns`, its time
//!   outside its stored child spans that have samples of their own (a parent waiting for a
//!   labelled child is not sampled; an unlabelled child, such as an auto-instrumented client
//!   span, stays the parent's time; an asynchronous child running beside it makes this too
//!   small); `possible_samples` =
//!   `self_ns` / period (for a span without samples: the part of its own time that profile
//!   windows cover, `covered_ns` (null when it has samples), / period; when no profile is
//!   stored under the span's service name, the windows of the services holding the samples of
//!   its service's other spans in its trace count); `coverage` is `"sampled"`,
//!   `"no CPU used"` (long enough, no sample: it waited),
//!   `"shorter than the sampling period"` (its own time), `"no samples"` (a non-CPU type),
//!   `"profiles cover too little of the span"` (less than a period or half of it: it fell
//!   between two profile windows) or
//!   `"profile not received yet"` (it ended less than 2 minutes ago, and no profile of its
//!   service, or none yet of a service profiled under another name, reaches its time: a
//!   scraped window is stored when it ends, a push SDK's with its next upload; ask again
//!   shortly), `"no profile covers the span"` (and no windows end
//!   and begin within 1 s of it: the profiler was off), or `"samples on an ancestor span"` (instead of `"no CPU used"` or
//!   `"no samples"`: an ancestor of the span's service has samples, no span of that service
//!   whose parent is of the same service has any in the trace, and none of the 50 longest
//!   spans of its service and name within 15 minutes of it has any, so its profiler seems to
//!   label only the first span of each request, as pyroscope-otel does; in a search, and for
//!   the spans of the same name, samples of any type count); `sampled_ancestor`: that
//!   ancestor's span id, else null;
//!   `has_samples`: any sample of any type names the span.
//! - `GET /api/v1/traces/{trace_id}?type` → `{"trace_id", "start_ns", "duration_ns",
//!   "profile_type"|null, "unit"|null, "total", "samples", "unknown_spans_total"|null,
//!   "spans_total", "truncated", "spans": [Span +
//!   "offset_ns" (from the trace start), "depth"]}` in start order, at most the first 20,000
//!   spans (`truncated` says when there were more; `total` and `samples` are of those shown,
//!   in `profile_type`: `type`, else the CPU type of the trace's samples, else of the
//!   store's; null when the store holds no profile);
//!   `unknown_spans_total`: the trace's samples in spans that are not stored (not received):
//!   in `flamegraph?trace_id=`, in no listed span (null when truncated); 404 when no span of
//!   the trace is stored.
//! - `GET /api/v1/pprof?…` → gzip pprof (`application/octet-stream`) with `span_id` /
//!   `trace_id` sample labels and the series' labels (`service_name`, `span_name`, an SDK's
//!   tags; not the internal `__…` ones), for
//!   `go tool pprof http://host:4040/api/v1/pprof?service=…` (`-tags`, `-tagfocus`).
//! - `GET /api/v1/svg?…` → the flame graph as a standalone SVG image (`image/svg+xml`,
//!   saved as `spanprof-flamegraph.svg`).

mod catalog;
mod diff;
mod error;
mod flame;
pub(crate) mod params;
mod selection;
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
     flamegraph, diff, top, timeseries, spans, traces/{trace_id}, pprof, svg";

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
        .route("/api/v1/spans", get(spans::search))
        .route("/api/v1/traces/{trace_id}", get(spans::trace))
        .route("/api/v1/{*rest}", get(unknown_endpoint))
}

async fn unknown_endpoint(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {}; /api/v1/ has: {ENDPOINTS}",
        uri.path()
    ))
}
