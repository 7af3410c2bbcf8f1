//! The span and trace views over the remote pair (`/api/v1/spans/{id}`,
//! `/api/v1/traces/{id}`): the spans from Tempo, each span's own total from Pyroscope
//! (`span_selector` totals of halved groups of spans, [`own_totals`]), in the embedded
//! answers' shapes. What needs the profile windows Pyroscope does not keep (coverage
//! verdicts other than "sampled", sample counts, windows) is null and said in
//! `remote.not_available`.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::Selection;

use super::client::Peer;
use super::{Remote, RemoteError};
use crate::answer::ApiError;
use crate::answer::SAMPLED;

/// The coverage of a span without samples over the remote backend: whether a profile watched
/// it cannot be told without the profile windows, which Pyroscope does not keep.
pub const REMOTE_NO_SAMPLES: &str =
    "no samples (the remote backend keeps no profile windows to say why)";

/// Span totals asked of Pyroscope at once (calls of one round of [`own_totals`]).
const CONCURRENT_CALLS: usize = 8;

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

/// Each of `spans`' own total of `profile_type`, in order; all 0 without a call when `whole`
/// (the trace's total) is 0. Exact, in few calls when few spans have samples: the total of
/// all the spans is asked, then of the first half of each part with samples, the second half
/// being the part's total minus the first (a sample has one span id, so the parts' totals
/// add up). A part without samples is settled at once; with every span sampled this is one
/// call per span, as asking each span would be. Calls of a round go [`CONCURRENT_CALLS`] at
/// a time.
async fn own_totals(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    spans: &[SpanRecord],
    whole: u64,
) -> Result<Vec<u64>, ApiError> {
    let mut totals = vec![0u64; spans.len()];
    if whole == 0 || spans.is_empty() {
        return Ok(totals);
    }
    let ids: Arc<Vec<[u8; 8]>> = Arc::new(spans.iter().map(|s| s.span_id).collect());
    let whole_part = std::iter::once(0..ids.len()).collect();
    let all = part_totals(remote, profile_type, &ids, whole_part).await?;
    // Parts (index ranges into `ids`) with their totals, still to settle.
    let mut parts: Vec<(std::ops::Range<usize>, u64)> = vec![(0..ids.len(), all[0])];
    while !parts.is_empty() {
        let (settled, split): (Vec<_>, Vec<_>) = parts
            .into_iter()
            .filter(|(_, total)| *total > 0)
            .partition(|(r, _)| r.len() == 1);
        for (r, total) in settled {
            totals[r.start] = total;
        }
        let halves: Vec<std::ops::Range<usize>> = split
            .iter()
            .map(|(r, _)| r.start..r.start + r.len() / 2)
            .collect();
        let firsts = part_totals(remote, profile_type, &ids, halves).await?;
        parts = Vec::with_capacity(split.len() * 2);
        for ((r, total), first) in split.into_iter().zip(firsts) {
            let mid = r.start + r.len() / 2;
            let second = total.checked_sub(first).ok_or_else(|| {
                ApiError::from(RemoteError::malformed(
                    Peer::Pyroscope,
                    "SelectMergeStacktraces",
                    format!(
                        "spans' total {first} exceeds the total {total} of spans including them"
                    ),
                ))
            })?;
            parts.push((r.start..mid, first));
            parts.push((mid..r.end, second));
        }
    }
    Ok(totals)
}

/// The total of each part's spans (`span_selector` of them), in order.
async fn part_totals(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    ids: &Arc<Vec<[u8; 8]>>,
    parts: Vec<std::ops::Range<usize>>,
) -> Result<Vec<u64>, ApiError> {
    let mut out = vec![0u64; parts.len()];
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CALLS));
    let mut calls = tokio::task::JoinSet::new();
    for (i, r) in parts.into_iter().enumerate() {
        let (remote, t, ids, permits) = (
            Arc::clone(remote),
            profile_type.clone(),
            Arc::clone(ids),
            Arc::clone(&permits),
        );
        calls.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let total = remote.total(&Selection::default(), &t, &ids[r]).await;
            (i, total)
        });
    }
    while let Some(done) = calls.join_next().await {
        let (i, total) = done.map_err(|e| ApiError::internal(format!("a span total: {e}")))?;
        out[i] = total?;
    }
    Ok(out)
}

/// A span as the embedded views show it, with `total` its own samples' value.
fn span_json(span: &SpanRecord, t: Option<&ProfileTypeId>, total: u64) -> Map<String, Value> {
    crate::answer::with_fields(
        crate::answer::span_fields(span),
        json!({
            "self_ns": null,
            "profile_type": t.map(ToString::to_string),
            "unit": t.map(|t| t.sample_unit.as_str()),
            "total": total,
            "samples": null,
            "possible_samples": null,
            "covered_ns": null,
            "period": null,
            "has_samples": total > 0,
            "coverage": if total > 0 { SAMPLED } else { REMOTE_NO_SAMPLES },
            "sampled_ancestor": null,
        }),
    )
}

/// The profile type a view's totals are in: `type`, else the preferred one Pyroscope has.
async fn view_type(
    remote: &Remote,
    wanted: Option<&str>,
) -> Result<Option<ProfileTypeId>, ApiError> {
    let types = remote.profile_types(&Selection::default()).await?;
    Remote::resolve_type(&types, wanted).map_err(ApiError::bad_request)
}

/// `/api/v1/traces/{trace_id}`: the trace's spans from Tempo with their own totals.
pub async fn trace(
    remote: &Arc<Remote>,
    trace_id: [u8; 16],
    wanted: Option<&str>,
    depths: impl Fn(&[SpanRecord]) -> std::collections::HashMap<[u8; 8], usize>,
) -> Result<Value, ApiError> {
    let id = to_hex(&trace_id);
    let records = remote.trace(&trace_id).await?;
    if records.is_empty() {
        return Err(ApiError::not_found(format!(
            "trace {id}: Tempo does not know it (its samples, if any, are at \
             /api/v1/flamegraph?trace_id={id})"
        )));
    }
    let t = view_type(remote, wanted).await?;
    let whole = match &t {
        Some(t) => {
            let sel = Selection {
                trace_id: Some(trace_id),
                ..Default::default()
            };
            remote.total(&sel, t, &[]).await?
        }
        None => 0,
    };
    let totals = match &t {
        Some(t) => own_totals(remote, t, &records, whole).await?,
        None => vec![0; records.len()],
    };
    let start = records.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let end = records.iter().map(|s| s.end_ns).max().unwrap_or(start);
    let depths = depths(&records);
    let mut total = 0u64;
    let spans: Vec<Value> = records
        .iter()
        .zip(&totals)
        .map(|(s, &own)| {
            total += own;
            let mut span = span_json(s, t.as_ref(), own);
            span.insert("offset_ns".into(), (s.start_ns - start).into());
            span.insert("depth".into(), depths[&s.span_id].into());
            Value::Object(span)
        })
        .collect();
    Ok(json!({
        "trace_id": id,
        "start_ns": start.to_string(),
        "duration_ns": end.saturating_sub(start),
        "profile_type": t.as_ref().map(ToString::to_string),
        "unit": t.as_ref().map(|t| t.sample_unit.as_str()),
        "total": total,
        "samples": null,
        "unknown_spans_total": whole.saturating_sub(total),
        "spans_total": records.len(),
        // Tempo's answer is cut at MAX_TRACE_SPANS when read.
        "truncated": records.len() >= crate::answer::MAX_TRACE_SPANS,
        "spans": spans,
        "remote": views_note(),
    }))
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
    let t = view_type(remote, wanted).await?;
    let trace_id = match (trace_id, &t) {
        (Some(id), _) => id,
        (None, Some(t)) => {
            let sel = Selection {
                span_ids: vec![span_id],
                ..Default::default()
            };
            remote.trace_of_spans(&sel, t).await.map_err(|_| {
                ApiError::not_found(format!(
                    "span {hex}: no sample names its trace, and Tempo finds spans by their \
                     trace: give trace_id"
                ))
            })?
        }
        (None, None) => {
            return Err(ApiError::not_found(format!(
                "span {hex}: Pyroscope has no profiles to name its trace: give trace_id"
            )))
        }
    };
    let records = remote.trace(&trace_id).await?;
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
