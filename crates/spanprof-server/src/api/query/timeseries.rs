//! `/api/v1/timeseries`: the selection's totals per time step, with exemplar spans.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::series::{Aggregation, SeriesPoint};

use super::error::{blocking, ApiError};
use super::params::{self, BadValue, QueryParams};
use super::selection::{SelectionQuery, SELECTION_PARAMS};
use crate::api::Queries;
use crate::remote::series::SeriesAsk;

/// Default bucket width, in nanoseconds (15 s, Pyroscope's default step).
const DEFAULT_STEP_NS: u64 = 15_000_000_000;
/// Most exemplars per point a client may ask for.
const MAX_EXEMPLARS: usize = 100;

/// `GET /api/v1/timeseries`.
pub async fn timeseries(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/timeseries",
        &[
            SELECTION_PARAMS,
            &["step", "group_by", "aggregation", "exemplars"],
        ]
        .concat(),
    )?;
    let q = SelectionQuery::parse(&p, params::now_ns())?;
    let step_ns = p
        .parsed("step", |s| match params::duration(s)? {
            0 => Err(BadValue::Refused("must be longer than 0")),
            d => i64::try_from(d).map_err(|_| BadValue::Refused("is too long")),
        })?
        .unwrap_or(DEFAULT_STEP_NS as i64);
    let group_by = p.one("group_by")?.map(|x| x.value.to_owned());
    let aggregation = p.parsed("aggregation", |s| match s {
        "sum" => Ok(Aggregation::Sum),
        "average" => Ok(Aggregation::Average),
        _ => Err(BadValue::Refused("expected sum or average")),
    })?;
    let exemplars = p
        .parsed("exemplars", params::count(0, MAX_EXEMPLARS))?
        .unwrap_or(0);
    let label = group_by.clone();
    if let Some(remote) = &queries.remote {
        let ask = SeriesAsk {
            step_ns,
            group_by,
            aggregation,
            exemplars,
        };
        let of_spans = !q.selection.span_ids.is_empty()
            || q.selection.trace_id.is_some()
            || q.selection.span_filter.is_some();
        let found = remote.time_series(&q.selection, &ask).await?;
        let mut body = answer(
            &found.series,
            label.as_deref(),
            found.aggregation,
            found.profile_type.as_ref(),
            step_ns,
        );
        // Pyroscope keeps no profile windows: the longest one is not known.
        body["profile_duration_ns"] = Value::Null;
        let mut not_available = vec!["profile_duration_ns: Pyroscope keeps no profile windows"];
        if of_spans {
            not_available.push(crate::remote::span_series::NOT_AVAILABLE);
        }
        body["remote"] = json!({
            "backend": "remote (Pyroscope + Tempo)",
            "not_available": not_available,
        });
        return Ok(axum::Json(body).into_response());
    }
    let (groups, aggregation, profile_type, longest) = blocking(&queries, move |store| {
        q.check_type(store)?;
        // Resolved once for both (a span filter reads every segment's spans to resolve).
        let (profile_type, longest) = store.type_and_longest_window(&q.selection)?;
        // Snapshots (the heap in use, goroutines) are averaged per step by default: a step
        // holding four scrapes of a 10 MB heap is 10 MB, not 40. (Of the type the selection
        // resolves to: with no `type` given, a service without CPU profiles defaults to one.)
        let aggregation = aggregation.unwrap_or(match &profile_type {
            Some(t) if t.is_snapshot() => Aggregation::Average,
            _ => Aggregation::Sum,
        });
        let groups = store.time_series(
            &q.selection,
            step_ns,
            group_by.as_deref(),
            aggregation,
            exemplars,
        )?;
        Ok((groups, aggregation, profile_type, longest))
    })
    .await?;
    let mut body = answer(
        &groups,
        label.as_deref(),
        aggregation,
        profile_type.as_ref(),
        step_ns,
    );
    body["profile_duration_ns"] = json!(longest);
    Ok(axum::Json(body).into_response())
}

/// The answer of `groups` (each series' label value and points), either backend's.
fn answer(
    groups: &[(String, Vec<SeriesPoint>)],
    label: Option<&str>,
    aggregation: Aggregation,
    profile_type: Option<&ProfileTypeId>,
    step_ns: i64,
) -> Value {
    let series: Vec<Value> = groups
        .iter()
        .map(|(group, points)| {
            let labels = match label {
                Some(name) => json!({ name: group }),
                None => json!({}),
            };
            json!({
                "labels": labels,
                "points": points.iter().map(point_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let aggregation = match aggregation {
        Aggregation::Sum => "sum",
        Aggregation::Average => "average",
    };
    json!({
        "profile_type": profile_type.map(ToString::to_string),
        "unit": profile_type.map(|t| t.sample_unit.clone()),
        "step_ns": step_ns,
        "profile_duration_ns": null,
        "aggregation": aggregation,
        "series": series,
    })
}

fn point_json(p: &SeriesPoint) -> Value {
    let exemplars: Vec<Value> = p
        .exemplars
        .iter()
        .map(|e| {
            json!({
                "timestamp_ms": e.timestamp_ms,
                "value": e.value,
                "trace_id": (e.trace_id != [0; 16]).then(|| to_hex(&e.trace_id)),
                "span_id": to_hex(&e.span_id),
            })
        })
        .collect();
    json!({ "timestamp_ms": p.timestamp_ms, "value": number(p.value), "exemplars": exemplars })
}

/// `v` as a JSON integer when it is whole (a sum, and most averages), as the other endpoints
/// write values; else as it is.
fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}
