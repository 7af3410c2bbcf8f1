//! The span and trace views over the remote pair (`/api/v1/spans/{id}`,
//! `/api/v1/traces/{id}`): the spans from Tempo, each span's own total from Pyroscope
//! (`span_values.rs`: heatmap exemplars, else a pprof by span, else halving), in the embedded
//! answers' shapes. What needs the profile windows Pyroscope does not keep (coverage
//! verdicts other than "sampled", sample counts, windows) is null and said in
//! `remote.not_available`.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::Selection;

use super::span_values::{self, ValuesFrom};
use super::view_json::{TraceView, ViewSpan};
use super::Remote;
use crate::answer::ApiError;
use axum::response::IntoResponse;

/// What the span and trace views over the remote cannot hold, said in them.
pub fn views_note() -> Value {
    json!({
        "backend": "remote (Pyroscope + Tempo)",
        "not_available": [
            "coverage of spans without samples: Pyroscope keeps no profile windows",
            "sample counts and sampling periods: Pyroscope answers summed values",
            "the span's profile windows: Pyroscope does not keep them",
        ],
    })
}

/// `note` with how the spans' values were found.
pub(crate) fn with_values_from(mut note: Value, from: ValuesFrom) -> Value {
    note["values_from"] = from.name().into();
    note
}

/// A span as the embedded views show it, with `total` its own samples' value.
pub(crate) fn span_json(
    span: &SpanRecord,
    t: Option<&ProfileTypeId>,
    total: u64,
) -> Map<String, Value> {
    let id = t.map(ToString::to_string);
    let types = (id.as_deref(), t.map(|t| t.sample_unit.as_str()));
    match serde_json::to_value(ViewSpan::new(span, types, total, None)) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a ViewSpan is written as a JSON object"),
    }
}

/// The profile type a view's totals are in: `type`, else the preferred one Pyroscope has.
pub(crate) async fn view_type(
    remote: &Remote,
    wanted: Option<&str>,
) -> Result<Option<ProfileTypeId>, ApiError> {
    let types = remote.profile_types(&Selection::default()).await?;
    Remote::resolve_type(&types, wanted).map_err(ApiError::bad_request)
}

/// `/api/v1/traces/{trace_id}`: the trace's spans from Tempo with their own totals, written
/// as JSON (`view_json.rs`).
pub async fn trace(
    remote: &Arc<Remote>,
    trace_id: [u8; 16],
    wanted: Option<&str>,
    depths: impl Fn(&[SpanRecord]) -> std::collections::HashMap<[u8; 8], usize>,
) -> Result<axum::response::Response, ApiError> {
    let id = to_hex(&trace_id);
    let began = std::time::Instant::now();
    // The trace and the type do not depend on each other: asked at once.
    let (records, t) = tokio::join!(remote.trace(&trace_id), view_type(remote, wanted));
    let records = records?;
    if records.is_empty() {
        return Err(ApiError::not_found(format!(
            "trace {id}: Tempo does not know it (its samples, if any, are at \
             /api/v1/flamegraph?trace_id={id})"
        )));
    }
    let t = t?;
    let start = records.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let end = records.iter().map(|s| s.end_ns).max().unwrap_or(start);
    // The trace's total and the first round of its spans' values, asked at once; the rest
    // of the values only when the trace has samples (as before the calls were made at once).
    let (whole, totals, from) = match &t {
        Some(t) => {
            let sel = Selection {
                trace_id: Some(trace_id),
                ..Default::default()
            };
            let ids: Vec<[u8; 8]> = records.iter().map(|s| s.span_id).collect();
            let range = ((start / 1_000_000) as i64, end.div_ceil(1_000_000) as i64);
            let (whole, first) = tokio::join!(
                remote.total(&sel, t, &[]),
                span_values::first_round(remote, t, &ids, range)
            );
            let (whole, first) = (whole?, first?);
            if whole > 0 {
                let (totals, from) = span_values::finish(remote, t, &ids, first).await?;
                (whole, totals, from)
            } else {
                (0, vec![0; records.len()], ValuesFrom::NoSamples)
            }
        }
        None => (0, vec![0; records.len()], ValuesFrom::NoSamples),
    };
    let asked = began.elapsed();
    let depths = depths(&records);
    let (type_id, unit) = (
        t.as_ref().map(ToString::to_string),
        t.as_ref().map(|t| t.sample_unit.clone()),
    );
    let type_strings = (type_id.as_deref(), unit.as_deref());
    let spans: Vec<ViewSpan> = records
        .iter()
        .zip(&totals)
        .map(|(s, &own)| {
            ViewSpan::new(
                s,
                type_strings,
                own,
                Some((s.start_ns - start, depths[&s.span_id])),
            )
        })
        .collect();
    let total = totals.iter().sum::<u64>();
    let view = TraceView {
        trace_id: id,
        start_ns: start.to_string(),
        duration_ns: end.saturating_sub(start),
        profile_type: type_strings.0,
        unit: type_strings.1,
        total,
        samples: None,
        unknown_spans_total: whole.saturating_sub(total),
        spans_total: records.len(),
        // Tempo's answer is cut at MAX_TRACE_SPANS when read.
        truncated: records.len() >= crate::answer::MAX_TRACE_SPANS,
        spans,
        remote: with_values_from(views_note(), from),
    };
    let body = serde_json::to_vec(&view)
        .map_err(|e| ApiError::internal(format!("writing the trace view: {e}")))?;
    // The remote's share against the frontend's own (writing 1,000 spans' JSON is ms).
    tracing::debug!(
        asked_us = asked.as_micros() as u64,
        written_us = began.elapsed().as_micros() as u64,
        bytes = body.len(),
        "remote trace view"
    );
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `/api/v1/spans/{span_id}`: the span from its trace in Tempo (the trace named by
/// `trace_id`, else by the span's samples in Pyroscope), its own total, and windows unknown.
pub async fn span(
    remote: &Arc<Remote>,
    span_id: [u8; 8],
    trace_id: Option<[u8; 16]>,
    wanted: Option<&str>,
) -> Result<Value, ApiError> {
    let hex = to_hex(&span_id);
    // With the trace named, its spans and the type are asked at once.
    let (t, given) = match trace_id {
        Some(id) => {
            let (t, records) = tokio::join!(view_type(remote, wanted), remote.trace(&id));
            (t?, Some((id, records?)))
        }
        None => (view_type(remote, wanted).await?, None),
    };
    let (trace_id, records) = match (given, &t) {
        (Some(given), _) => given,
        (None, Some(t)) => {
            let sel = Selection {
                span_ids: vec![span_id],
                ..Default::default()
            };
            let id = remote.trace_of_spans(&sel, t).await.map_err(|_| {
                ApiError::not_found(format!(
                    "span {hex}: no sample names its trace, and Tempo finds spans by their \
                     trace: give trace_id"
                ))
            })?;
            (id, remote.trace(&id).await?)
        }
        (None, None) => {
            return Err(ApiError::not_found(format!(
                "span {hex}: Pyroscope has no profiles to name its trace: give trace_id"
            )))
        }
    };
    let Some(record) = records.into_iter().find(|s| s.span_id == span_id) else {
        return Err(ApiError::not_found(format!(
            "span {hex}: not in trace {} in Tempo (its samples, if any, are at \
             /api/v1/flamegraph?span_id={hex})",
            to_hex(&trace_id)
        )));
    };
    let total = match &t {
        Some(t) => remote.total(&Selection::default(), t, &[span_id]).await?,
        None => 0,
    };
    Ok(json!({
        "span": Value::Object(span_json(&record, t.as_ref(), total)),
        "windows": {
            "state": "unknown",
            "in": null,
            "expected": null,
            "more_may_come": false,
            "expected_by_ns": null,
            "recorded": false,
            "services": [record.service],
            "profile_type": t.as_ref().map(ToString::to_string),
            "window_ns": null,
            "windows": [],
        },
        "retry_after_ms": null,
        "remote": views_note(),
    }))
}
