//! Pyroscope's legacy HTTP query API (`pyroscope-compat.md` §4.4):
//!
//! - `GET /pyroscope/render?query=…&from=…&until=…[&format=json][&maxNodes=N|&max-nodes=N]
//!   [&aggregation=sum|avg][&groupBy=label]`: the flamebearer JSON of the selection with its
//!   timeline (`{"version":1,"flamebearer":{…},"metadata":{…},"timeline":{…},"groups":…}`).
//! - `GET /pyroscope/render-diff?leftQuery=…&leftFrom=…&leftUntil=…&rightQuery=…&rightFrom=…
//!   &rightUntil=…[&maxNodes=N]`: the diff of two selections of one profile type (`left` the
//!   baseline) as flamebearer JSON of `"format": "double"` (7-tuples, `leftTicks`,
//!   `rightTicks`), no timeline; the queries and times read as `query`, `from` and `until` do.
//! - `GET /pyroscope/label-values?label=…[&query=…][&from=…&until=…]`: a JSON array of values;
//!   `label=__name__` lists profile type ids, as Pyroscope does.
//!
//! `query` is `<profile type id>{matchers}` (`process_cpu:cpu:nanoseconds:cpu:nanoseconds{
//! service_name="goapp"}`), the same with the id in a `__name__="…"` matcher, or the
//! Pyroscope 0.x form `<app>.<type>{matchers}` (`goapp.cpu{}`), which selects
//! `service_name="<app>"` and the type its suffix names (`cpu`, `alloc_objects`,
//! `alloc_space`, `inuse_objects`, `inuse_space`, `goroutines`, `mutex_count`,
//! `mutex_duration`, `block_count`, `block_duration`).
//!
//! `from`/`until`: `now`, `now-1h`, unix seconds, ms, µs or ns (by magnitude) or RFC 3339;
//! default `now-1h` … `now`; `until` is inclusive to the millisecond, as in Pyroscope.
//!
//! The timeline has one sample per step from `startTime` (`from` in unix seconds), the step
//! (`durationDelta`, seconds) being Pyroscope's `CalcPointInterval`: range / 1500 rounded to
//! Grafana's interval ladder, at least 10 s. `samples[i]` is the total (or, with
//! `aggregation=avg`, the average) in the profile's unit of `[from + i·step, from + (i+1)·step)`,
//! 0 where there is no data.
//!
//! Bad parameters are HTTP 400 with a plain-text message; `format=dot` is 501.

use std::collections::BTreeSet;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::diff::diff_layout;
use spanprof_store::matchers::{parse_selector, LabelMatcher, MatchOp, Selector};
use spanprof_store::series::{Aggregation, SeriesPoint};
use spanprof_store::store::{Selection, Store, StoreError};
use spanprof_store::{ProfileType, DEFAULT_MAX_NODES};

use crate::api::query::params::decode_component;
use crate::api::Queries;
use crate::auth::Access;
use crate::clock::now_ns;
use crate::routes::Routes;

/// Largest `maxNodes` accepted (Pyroscope's limit).
const MAX_NODES_LIMIT: i64 = 1 << 20;
/// Pyroscope's timeline resolution (points per range) and minimum step.
const TIMELINE_RESOLUTION: i64 = 1500;
const MIN_STEP_MS: i64 = 10_000;

/// An error answer: status and plain-text message.
#[derive(Debug)]
struct HttpError(StatusCode, String);

impl HttpError {
    fn bad(message: impl Into<String>) -> Self {
        HttpError(StatusCode::BAD_REQUEST, message.into())
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (
            self.0,
            [("content-type", "text/plain; charset=utf-8")],
            format!("{}\n", self.1),
        )
            .into_response()
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Matcher(m) => HttpError::bad(format!("query: {m}")),
            StoreError::Select(s) => HttpError::bad(s.to_string()),
            StoreError::Stopped(s) => HttpError(
                StatusCode::SERVICE_UNAVAILABLE,
                crate::api::stopped_message(s),
            ),
            other => {
                tracing::warn!(error = %other, "legacy render query failed in the store");
                HttpError(StatusCode::INTERNAL_SERVER_ERROR, format!("store: {other}"))
            }
        }
    }
}

/// The routes of this module.
pub fn routes() -> Routes {
    Routes::new()
        .get("/pyroscope/render", Access::Read, render)
        .get("/pyroscope/render-diff", Access::Read, render_diff)
        .get("/pyroscope/label-values", Access::Read, label_values)
}

// ---- query string --------------------------------------------------------------------------

/// Decoded `name=value` pairs in order.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: Option<&str>) -> Result<Params, HttpError> {
        let mut out = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let k = decode_component(k).map_err(|e| HttpError::bad(format!("{k:?}: {e}")))?;
            let v = decode_component(v).map_err(|e| HttpError::bad(format!("{v:?}: {e}")))?;
            out.push((k, v));
        }
        Ok(Params(out))
    }

    /// The last value of the first of `names` present (Go's `Get` takes the first; the last
    /// of one name and the first name listed are what a caller overriding one means).
    fn get(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| {
            self.0
                .iter()
                .rev()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        })
    }
}

/// `from`/`until` as whole milliseconds, `from ≤ until`.
fn time_range(p: &Params, now: i64) -> Result<(i64, i64), HttpError> {
    time_range_of(p, now, "from", "until")
}

/// The parameters `from_name`/`until_name` as whole milliseconds, `from ≤ until`.
fn time_range_of(
    p: &Params,
    now: i64,
    from_name: &str,
    until_name: &str,
) -> Result<(i64, i64), HttpError> {
    let parse = |name: &str, default: &str| -> Result<i64, HttpError> {
        let v = p.get(&[name]).filter(|v| !v.trim().is_empty());
        let v = v.unwrap_or(default);
        spanprof_store::time::parse_time(v, now)
            .map(|ns| ns.div_euclid(1_000_000))
            .map_err(|e| HttpError::bad(format!("{name}: {e}")))
    };
    let from = parse(from_name, "now-1h")?;
    let until = parse(until_name, "now")?;
    if from < 0 {
        return Err(HttpError::bad(format!(
            "{from_name}: must not be before 1970"
        )));
    }
    if until < from {
        return Err(HttpError::bad(format!(
            "{until_name} ({until} ms) is before {from_name} ({from} ms)"
        )));
    }
    Ok((from, until))
}

/// `maxNodes` (or `max-nodes`): absent or 0 = the default.
fn max_nodes(p: &Params) -> Result<usize, HttpError> {
    match p.get(&["maxNodes", "max-nodes"]).filter(|v| !v.is_empty()) {
        None => Ok(DEFAULT_MAX_NODES),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(0) => Ok(DEFAULT_MAX_NODES),
            Ok(n) if (1..=MAX_NODES_LIMIT).contains(&n) => Ok(n as usize),
            Ok(n) => Err(HttpError::bad(format!(
                "maxNodes: {n} is outside 0..={MAX_NODES_LIMIT}"
            ))),
            Err(_) => Err(HttpError::bad(format!("maxNodes: {v:?} is not a number"))),
        },
    }
}

/// The selection of the required query parameter `name` over `[from_ms, until_ms]`, and its
/// profile type.
fn selection_of(
    p: &Params,
    name: &str,
    (from_ms, until_ms): (i64, i64),
) -> Result<(ProfileTypeId, Selection), HttpError> {
    let q = p
        .get(&[name])
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| HttpError::bad(format!("'{name}' is required")))?;
    let query = parse_query(q, true).map_err(|HttpError(status, message)| {
        HttpError(status, message.replace("'query'", &format!("'{name}'")))
    })?;
    let type_id = query.profile_type.expect("required above");
    let sel = Selection {
        profile_type: Some(type_id.to_string()),
        label_selector: Some(query.selector),
        from_ns: from_ms.saturating_mul(1_000_000),
        to_ns: until_ms.saturating_add(1).saturating_mul(1_000_000),
        ..Default::default()
    };
    Ok((type_id, sel))
}

/// The flame tree of `sel`; empty when its profile type is not `known` to the store (which
/// refuses a selection of a type it never stored, where Pyroscope answers nothing).
fn tree_of(
    store: &Store,
    sel: &Selection,
    known: bool,
) -> Result<spanprof_store::FlameTree, HttpError> {
    if !known {
        return Ok(spanprof_store::FlameTree::new());
    }
    Ok(store.flame_graph(sel)?.0)
}

/// Pyroscope's `timeline.CalcPointInterval`, in ms.
fn point_interval_ms(from_ms: i64, until_ms: i64) -> i64 {
    let interval = (until_ms - from_ms) / TIMELINE_RESOLUTION;
    if interval < MIN_STEP_MS {
        return MIN_STEP_MS;
    }
    const S: i64 = 1000;
    const LADDER: &[(i64, i64)] = &[
        (12_500, 10 * S),
        (17_500, 15 * S),
        (25_000, 20 * S),
        (45_000, 30 * S),
        (90_000, 60 * S),
        (210_000, 120 * S),
        (450_000, 300 * S),
        (750_000, 600 * S),
        (1_050_000, 900 * S),
        (1_500_000, 1_200 * S),
        (2_700_000, 1_800 * S),
        (5_400_000, 3_600 * S),
        (9_000_000, 7_200 * S),
        (16_200_000, 10_800 * S),
        (32_400_000, 21_600 * S),
        (86_400_000, 43_200 * S),
        (604_800_000, 86_400 * S),
        (1_814_400_000, 604_800 * S),
    ];
    for &(upto, step) in LADDER {
        if interval <= upto {
            return step;
        }
    }
    if interval < 3_628_800_000 {
        2_592_000 * S
    } else {
        31_536_000 * S
    }
}

/// The legacy app-name suffixes of Pyroscope 0.x and the type each names.
fn legacy_type(suffix: &str) -> Option<&'static str> {
    Some(match suffix {
        "cpu" => "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "alloc_objects" => "memory:alloc_objects:count:space:bytes",
        "alloc_space" => "memory:alloc_space:bytes:space:bytes",
        "inuse_objects" => "memory:inuse_objects:count:space:bytes",
        "inuse_space" => "memory:inuse_space:bytes:space:bytes",
        "goroutines" => "goroutines:goroutine:count:goroutine:count",
        "mutex_count" => "mutex:contentions:count:contentions:count",
        "mutex_duration" => "mutex:delay:nanoseconds:contentions:count",
        "block_count" => "block:contentions:count:contentions:count",
        "block_duration" => "block:delay:nanoseconds:contentions:count",
        _ => return None,
    })
}

fn equal(name: &str, value: &str) -> Result<LabelMatcher, HttpError> {
    LabelMatcher::new(name, MatchOp::Eq, value).map_err(|e| HttpError::bad(format!("query: {e}")))
}

/// A parsed `query`: the profile type (if named) and the label selector (`{…}`).
struct Query {
    profile_type: Option<ProfileTypeId>,
    selector: String,
}

fn parse_query(q: &str, type_required: bool) -> Result<Query, HttpError> {
    let parsed: Selector = parse_selector(q.trim())
        .map_err(|e| HttpError::bad(format!("failed to parse 'query': {e}")))?;
    let mut matchers = parsed.matchers;
    let mut name = parsed.profile_type;
    if name.is_none() {
        if let Some(i) = matchers
            .iter()
            .position(|m| m.name == "__name__" && m.op == MatchOp::Eq)
        {
            name = Some(matchers.remove(i).value);
        }
    }
    let profile_type = match name.as_deref() {
        None => None,
        Some(n) if n.contains(':') => Some(ProfileTypeId::parse(n).ok_or_else(|| {
            HttpError::bad(format!(
                "failed to parse 'query': profile-type selection must be of the form \
                 <name>:<sample-type>:<sample-unit>:<period-type>:<period-unit>, got {n:?}"
            ))
        })?),
        Some(n) => {
            let (app, id) = n
                .rsplit_once('.')
                .and_then(|(app, suffix)| Some((app, legacy_type(suffix)?)))
                .filter(|(app, _)| !app.is_empty())
                .ok_or_else(|| {
                    HttpError::bad(format!(
                        "failed to parse 'query': {n:?} is neither a profile type id \
                         (process_cpu:cpu:nanoseconds:cpu:nanoseconds) nor <app>.<type> \
                         (goapp.cpu)"
                    ))
                })?;
            matchers.insert(0, equal("service_name", app)?);
            ProfileTypeId::parse(id)
        }
    };
    if type_required && profile_type.is_none() {
        return Err(HttpError::bad(
            "'query' must contain a profile-type selection",
        ));
    }
    let selector = Selector {
        profile_type: None,
        matchers,
    }
    .to_string();
    Ok(Query {
        profile_type,
        selector,
    })
}

async fn blocking<T: Send + 'static>(
    queries: &Queries,
    query: impl FnOnce(&Store) -> Result<T, HttpError> + Send + 'static,
) -> Result<T, HttpError> {
    crate::api::run_app_query(queries, query)
        .await
        .map_err(|e| {
            HttpError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the query failed: {e}"),
            )
        })?
}

// ---- /pyroscope/render ---------------------------------------------------------------------

/// Timeline of `points` (bucket starts aligned to `from_ms`): one value per step.
fn timeline(points: &[SeriesPoint], from_ms: i64, until_ms: i64, step_ms: i64) -> Value {
    let len = ((until_ms + 1 - from_ms) + step_ms - 1) / step_ms;
    let mut samples = vec![0u64; len.max(1) as usize];
    for p in points {
        let i = (p.timestamp_ms - from_ms).div_euclid(step_ms);
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| samples.get_mut(i)) {
            *slot = slot.saturating_add(p.value.max(0.0).round() as u64);
        }
    }
    json!({
        "startTime": from_ms.div_euclid(1000),
        "samples": samples,
        "durationDelta": step_ms / 1000,
        "watermarks": null,
    })
}

async fn render(State(queries): State<Queries>, RawQuery(raw): RawQuery) -> Response {
    match render_json(queries, raw).await {
        Ok(v) => ([("content-type", "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn render_json(queries: Queries, raw: Option<String>) -> Result<Value, HttpError> {
    let p = Params::parse(raw.as_deref())?;
    match p.get(&["format"]).unwrap_or("json") {
        "" | "json" => {}
        "dot" => {
            return Err(HttpError(
                StatusCode::NOT_IMPLEMENTED,
                "format=dot is not supported; use format=json".into(),
            ))
        }
        other => {
            return Err(HttpError::bad(format!(
                "format: unknown format {other:?} (json or dot)"
            )))
        }
    }
    let (from_ms, until_ms) = time_range(&p, now_ns())?;
    let (type_id, sel) = selection_of(&p, "query", (from_ms, until_ms))?;
    let max_nodes = max_nodes(&p)?;
    let aggregation = match p.get(&["aggregation"]).unwrap_or("sum") {
        "" | "sum" => Aggregation::Sum,
        "avg" | "average" => Aggregation::Average,
        other => {
            return Err(HttpError::bad(format!(
                "aggregation: unknown aggregation {other:?} (sum or avg)"
            )))
        }
    };
    let group_by = p
        .get(&["groupBy", "group_by"])
        .filter(|g| !g.is_empty())
        .map(str::to_owned);
    let step_ms = point_interval_ms(from_ms, until_ms);
    blocking(&queries, move |store| {
        let known = store.profile_types(None).contains(&type_id);
        let mut out = tree_of(store, &sel, known)?
            .to_pyroscope_layout(max_nodes)
            .to_flamebearer_json(&ProfileType::from(&type_id));
        let step_ns = step_ms * 1_000_000;
        let total: Vec<SeriesPoint> = if known {
            store
                .time_series(&sel, step_ns, None, aggregation, 0)?
                .into_iter()
                .flat_map(|(_, points)| points)
                .collect()
        } else {
            Vec::new()
        };
        out["timeline"] = timeline(&total, from_ms, until_ms, step_ms);
        if let Some(label) = group_by {
            let mut groups = Map::new();
            if known {
                for (key, points) in
                    store.time_series(&sel, step_ns, Some(&label), aggregation, 0)?
                {
                    groups.insert(key, timeline(&points, from_ms, until_ms, step_ms));
                }
            }
            out["groups"] = Value::Object(groups);
        }
        Ok(out)
    })
    .await
}

// ---- /pyroscope/render-diff ----------------------------------------------------------------

async fn render_diff(State(queries): State<Queries>, RawQuery(raw): RawQuery) -> Response {
    match render_diff_json(queries, raw).await {
        Ok(v) => ([("content-type", "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn render_diff_json(queries: Queries, raw: Option<String>) -> Result<Value, HttpError> {
    let p = Params::parse(raw.as_deref())?;
    let now = now_ns();
    let side = |query: &str, from: &str, until: &str| {
        selection_of(&p, query, time_range_of(&p, now, from, until)?)
    };
    let (left_type, left) = side("leftQuery", "leftFrom", "leftUntil")?;
    let (right_type, right) = side("rightQuery", "rightFrom", "rightUntil")?;
    if left_type != right_type {
        return Err(HttpError::bad(format!(
            "profile types must match: leftQuery selects {left_type}, rightQuery {right_type}"
        )));
    }
    let max_nodes = max_nodes(&p)?;
    blocking(&queries, move |store| {
        let known = store.profile_types(None).contains(&left_type);
        let (left, right) = (
            tree_of(store, &left, known)?,
            tree_of(store, &right, known)?,
        );
        Ok(diff_layout(&left, &right, max_nodes)
            .to_flamebearer_json(&ProfileType::from(&left_type)))
    })
    .await
}

// ---- /pyroscope/label-values ---------------------------------------------------------------

async fn label_values(State(queries): State<Queries>, RawQuery(raw): RawQuery) -> Response {
    match label_values_json(queries, raw).await {
        Ok(v) => ([("content-type", "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn label_values_json(queries: Queries, raw: Option<String>) -> Result<Value, HttpError> {
    let p = Params::parse(raw.as_deref())?;
    let label = p
        .get(&["label"])
        .filter(|l| !l.is_empty())
        .ok_or_else(|| HttpError::bad("label parameter is required"))?
        .to_owned();
    let query = match p.get(&["query"]).filter(|q| !q.trim().is_empty()) {
        Some(q) => parse_query(q, false)?,
        None => Query {
            profile_type: None,
            selector: "{}".into(),
        },
    };
    // Without from/until: everything stored (Pyroscope's handler passes no range).
    let (from_ns, to_ns) = if p.get(&["from"]).is_some() || p.get(&["until"]).is_some() {
        let (f, u) = time_range(&p, now_ns())?;
        (f * 1_000_000, (u + 1) * 1_000_000)
    } else {
        (0, 0)
    };
    // `__name__` lists profile type ids (Pyroscope's `/label-values?label=__name__`).
    let key = if label == "__name__" {
        "__profile_type__".to_owned()
    } else {
        label
    };
    let wanted_type = query.profile_type.map(|t| t.to_string());
    let sel = Selection {
        label_selector: Some(query.selector),
        from_ns,
        to_ns,
        ..Default::default()
    };
    let values = blocking(&queries, move |store| {
        let mut values = BTreeSet::new();
        let (series, _) = store.series_limited(&sel, crate::api::MAX_ANSWER_LABEL_BYTES)?;
        for labels in series {
            let of_type = |t: &str| {
                labels
                    .iter()
                    .any(|(k, v)| k == "__profile_type__" && v == t)
            };
            if wanted_type.as_deref().is_some_and(|t| !of_type(t)) {
                continue;
            }
            values.extend(
                labels
                    .iter()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, v)| v.clone()),
            );
        }
        Ok(values)
    })
    .await?;
    Ok(json!(values.into_iter().collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_interval_follows_pyroscope() {
        assert_eq!(point_interval_ms(0, 3_600_000), 10_000);
        // 24 h / 1500 = 57.6 s → 1 m.
        assert_eq!(point_interval_ms(0, 86_400_000), 60_000);
        // 7 d / 1500 = 403.2 s → 5 m.
        assert_eq!(point_interval_ms(0, 604_800_000), 300_000);
    }

    #[test]
    fn queries_map_to_a_type_and_a_selector() {
        let q = parse_query(
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name=\"goapp\"}",
            true,
        )
        .unwrap();
        assert_eq!(q.profile_type.unwrap().sample_type, "cpu");
        assert_eq!(q.selector, "{service_name=\"goapp\"}");
        let q = parse_query("goapp.cpu{}", true).unwrap();
        assert_eq!(
            q.profile_type.unwrap().to_string(),
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
        );
        assert_eq!(q.selector, "{service_name=\"goapp\"}");
        assert!(parse_query("{service_name=\"goapp\"}", true).is_err());
        assert!(parse_query("goapp.nothing{}", true).is_err());
    }
}
