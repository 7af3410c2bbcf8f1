//! Each span's own value (the CPU column of span lists, the costly-spans order, the trace
//! view's totals) over the remote pair, exact and in few calls:
//!
//! 1. one `SelectHeatmap` (span points, span exemplars) over the spans' time: each exemplar
//!    is one span's value in one profile, and a cell holding one point shows it whole;
//! 2. when the exemplars of the wanted spans do not add up to their total (one
//!    `SelectMergeStacktraces` of them all: cells held other points too), one pprof of them,
//!    its samples summed by their `span_id` labels (a Pyroscope that keeps no such label
//!    answers none, and the next step is taken);
//! 3. else the halving of [`own_totals`]: exact against any Pyroscope, one call per sampled
//!    span at worst.
//!
//! Every step is checked against the wanted spans' total, so an answer is never a guess.

use std::collections::HashMap;
use std::sync::Arc;

use spanprof_format::link::parse_id;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::store::Selection;

use super::client::Peer;
use super::{Remote, RemoteError};
use crate::answer::ApiError;
use crate::pyroscope_proto::querier::v1 as q;
use crate::pyroscope_proto::types::v1 as t;

/// Span totals asked of Pyroscope at once (calls of one round of [`own_totals`]).
const CONCURRENT_CALLS: usize = 8;

/// Heatmap columns over the spans' time: finer columns split more profiles apart (each
/// profile's points share its time), so fewer cells hold several points.
const HEATMAP_COLUMNS: i64 = 2_000;

/// How long before a span its profile may begin (ms): a point has its profile's time, and a
/// profile window (a 60 s scrape, a long pprof) starts before the spans in it.
const PROFILE_LEAD_MS: i64 = 10 * 60 * 1000;

/// Most spans [`own_totals`] is asked to settle one by one: past this the calls would be
/// thousands; the caller says the values are not known exactly instead.
pub const MAX_HALVED_SPANS: usize = 2_000;

/// How a set of spans' values were found (said in answers as `remote.values_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValuesFrom {
    /// The wanted spans have no samples (one call).
    NoSamples,
    /// `SelectHeatmap`'s span exemplars held every point of the wanted spans.
    Heatmap,
    /// A pprof of the spans, summed by its `span_id` labels.
    PprofLabels,
    /// `span_selector` totals of halved groups of spans.
    Halving,
    /// Not exact: too many spans to halve; the heatmap's exemplars, a lower bound.
    LowerBound,
}

impl ValuesFrom {
    /// Its name in answers.
    pub fn name(self) -> &'static str {
        match self {
            ValuesFrom::NoSamples => "no samples",
            ValuesFrom::Heatmap => "SelectHeatmap span exemplars",
            ValuesFrom::PprofLabels => "SelectMergeStacktraces pprof by span_id label",
            ValuesFrom::Halving => "SelectMergeStacktraces span_selector totals",
            ValuesFrom::LowerBound => {
                "SelectHeatmap span exemplars, a lower bound: too many spans share heatmap \
                 cells to ask each (narrow the search for exact values)"
            }
        }
    }
}

/// Each of `spans`' own value of `profile_type` (in its unit), in order, for spans whose
/// time lies in `[from_ms, to_ms]` (ms since the epoch), and how it was found.
pub async fn span_values(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    spans: &[[u8; 8]],
    range: (i64, i64),
) -> Result<(Vec<u64>, ValuesFrom), ApiError> {
    let first = first_round(remote, profile_type, spans, range).await?;
    finish(remote, profile_type, spans, first).await
}

/// What the first round of [`span_values`] found: the spans' total and the heatmap's
/// exemplars (`None`: the spans have no samples).
pub struct FirstRound {
    whole: u64,
    seen: Option<HashMap<[u8; 8], u64>>,
}

/// The first round of [`span_values`]: the spans' total and `SelectHeatmap`, asked at once
/// (they do not depend on each other; a heatmap asked in vain when the spans have no
/// samples is one call, not a round trip more each time).
pub async fn first_round(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    spans: &[[u8; 8]],
    (from_ms, to_ms): (i64, i64),
) -> Result<FirstRound, ApiError> {
    if spans.is_empty() {
        return Ok(FirstRound {
            whole: 0,
            seen: None,
        });
    }
    let all = Selection::default();
    let (whole, seen) = tokio::join!(
        remote.total(&all, profile_type, spans),
        remote.heatmap_exemplars(profile_type, (from_ms - PROFILE_LEAD_MS, to_ms))
    );
    let whole = whole?;
    Ok(FirstRound {
        whole,
        seen: if whole == 0 { None } else { Some(seen?) },
    })
}

/// The rest of [`span_values`] after `first`: the heatmap's values when they add up, else a
/// pprof by label, else halving.
pub async fn finish(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    spans: &[[u8; 8]],
    first: FirstRound,
) -> Result<(Vec<u64>, ValuesFrom), ApiError> {
    let (whole, Some(seen)) = (first.whole, first.seen) else {
        return Ok((vec![0; spans.len()], ValuesFrom::NoSamples));
    };
    let from_heatmap: Vec<u64> = spans
        .iter()
        .map(|id| seen.get(id).copied().unwrap_or(0))
        .collect();
    if from_heatmap.iter().sum::<u64>() == whole {
        return Ok((from_heatmap, ValuesFrom::Heatmap));
    }
    let labelled = remote.values_by_label(profile_type, spans).await?;
    let from_labels: Vec<u64> = spans
        .iter()
        .map(|id| labelled.get(id).copied().unwrap_or(0))
        .collect();
    if from_labels.iter().sum::<u64>() == whole {
        return Ok((from_labels, ValuesFrom::PprofLabels));
    }
    if spans.len() > MAX_HALVED_SPANS {
        return Ok((from_heatmap, ValuesFrom::LowerBound));
    }
    let halved = own_totals(remote, profile_type, spans, whole).await?;
    Ok((halved, ValuesFrom::Halving))
}

impl Remote {
    /// One `SelectHeatmap` of span points with span exemplars over `[from, to]` (ms): the
    /// exemplars' values summed per span id. Cells holding several points show only their
    /// largest, so this is a lower bound of each span's value (checked by the caller).
    pub async fn heatmap_exemplars(
        &self,
        profile_type: &ProfileTypeId,
        (from_ms, to_ms): (i64, i64),
    ) -> Result<HashMap<[u8; 8], u64>, RemoteError> {
        let (start, end) = (from_ms.max(0), to_ms.max(from_ms.max(0) + 1));
        let step_ms = ((end - start) / HEATMAP_COLUMNS).max(1);
        let req = q::SelectHeatmapRequest {
            profile_type_id: profile_type.to_string(),
            label_selector: "{}".to_owned(),
            start,
            end,
            step: step_ms as f64 / 1000.0,
            group_by: Vec::new(),
            query_type: q::HeatmapQueryType::Span as i32,
            exemplar_type: t::ExemplarType::Span as i32,
            limit: None,
        };
        let sel = Selection {
            from_ns: start.saturating_mul(1_000_000),
            to_ns: end.saturating_mul(1_000_000).saturating_add(1),
            ..Default::default()
        };
        let path = "SelectHeatmap";
        let answer: q::SelectHeatmapResponse = self.querier(path, &req, &sel).await?;
        let mut values: HashMap<[u8; 8], u64> = HashMap::new();
        for e in answer
            .series
            .iter()
            .flat_map(|s| &s.slots)
            .flat_map(|s| &s.exemplars)
        {
            let id = parse_id::<8>(&e.span_id).ok_or_else(|| {
                RemoteError::malformed(
                    Peer::Pyroscope,
                    path,
                    format!("an exemplar's span_id {:?} is not 16 hex digits", e.span_id),
                )
            })?;
            let v = u64::try_from(e.value).map_err(|_| {
                RemoteError::malformed(Peer::Pyroscope, path, "a negative exemplar value")
            })?;
            let sum = values.entry(id).or_default();
            *sum = sum.saturating_add(v);
        }
        Ok(values)
    }

    /// A pprof of `spans` (`span_selector`), its first values summed by `span_id` label;
    /// empty when the samples carry no such label.
    async fn values_by_label(
        &self,
        profile_type: &ProfileTypeId,
        spans: &[[u8; 8]],
    ) -> Result<HashMap<[u8; 8], u64>, RemoteError> {
        let p = self
            .pprof(&Selection::default(), profile_type, spans)
            .await?;
        let mut values: HashMap<[u8; 8], u64> = HashMap::new();
        let Some(key) = p.string_table.iter().position(|s| s == "span_id") else {
            return Ok(values);
        };
        for s in &p.sample {
            let Some(v) = s.value.first().and_then(|&v| u64::try_from(v).ok()) else {
                continue;
            };
            let id = s
                .label
                .iter()
                .find(|l| l.key == key as i64)
                .and_then(|l| p.str(l.str))
                .and_then(parse_id::<8>);
            if let Some(id) = id {
                let sum = values.entry(id).or_default();
                *sum = sum.saturating_add(v);
            }
        }
        Ok(values)
    }
}

/// Each of `ids`' own total of `profile_type`, in order, `whole` being theirs together
/// (not 0). Exact, in few calls when few spans have samples: the total of the first half of
/// each part with samples is asked, the second half being the part's total minus the first
/// (a sample has one span id, so the parts' totals add up). A part without samples is
/// settled at once; with every span sampled this is one call per span. Calls of a round go
/// `CONCURRENT_CALLS` at a time.
pub async fn own_totals(
    remote: &Arc<Remote>,
    profile_type: &ProfileTypeId,
    ids: &[[u8; 8]],
    whole: u64,
) -> Result<Vec<u64>, ApiError> {
    let mut totals = vec![0u64; ids.len()];
    let ids: Arc<Vec<[u8; 8]>> = Arc::new(ids.to_vec());
    // Parts (index ranges into `ids`) with their totals, still to settle.
    let mut parts: Vec<(std::ops::Range<usize>, u64)> = vec![(0..ids.len(), whole)];
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
