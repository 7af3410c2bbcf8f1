//! `/api/v1/timeseries` of spans or a trace over the remote: Pyroscope's `SelectSeries`
//! selects by labels only, so each time step's total is asked of `SelectMergeStacktraces`
//! with the spans as `span_selector` (the trace as `trace_id_selector`) over the step.
//!
//! Pyroscope keeps one time per profile (ms), not per sample; the embedded store buckets a
//! span's samples by their profile's time too, so the steps' values are the same. Steps are
//! whole ms (a step boundary inside a ms would count that ms's profiles in two steps).
//! Each step's total is the difference of the totals up to its two boundaries
//! (`step_totals`), the boundaries found by halving: a span whose samples lie in a few of
//! 120 steps costs about 2 + 7 calls per step with samples, not 120.
//! Exemplars (each step's largest spans, with their first profile's time) would need every
//! profile's time: not answered, said in `remote.not_available`. Averages (per profile) are
//! not answered either: a step's total does not say how many profiles it adds up.

use std::sync::Arc;

use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::series::{Aggregation, SeriesPoint};
use spanprof_store::store::Selection;

use super::series::{RemoteSeries, SeriesAsk};
use super::{not_remote, Remote};
use crate::answer::ApiError;

/// Most calls one series of spans may make: halving costs about log2(steps) calls per step
/// with samples (27 for a span's step over all time at 15 s), so this is tens of steps with
/// samples over all time, hundreds over an hour; past it the answer is refused rather than
/// the remote flooded.
pub const MAX_CALLS: usize = 2_000;

/// Step totals asked of Pyroscope at once.
const CONCURRENT_CALLS: usize = 8;

/// What a series of spans over the remote leaves out, said in the answer.
pub const NOT_AVAILABLE: &str = "exemplars of a series of spans or a trace: Pyroscope keeps \
     no time per sample, and each profile's time would be one call more per profile";

impl Remote {
    /// The series of `sel`'s spans or trace: one point per step with samples, at Pyroscope's
    /// resolution (a profile's time), without exemplars.
    pub async fn span_series(
        self: &Arc<Self>,
        sel: &Selection,
        ask: &SeriesAsk,
    ) -> Result<RemoteSeries, ApiError> {
        if ask.group_by.is_some() {
            return Err(not_remote(
                "/api/v1/timeseries of spans or a trace with group_by (each group would be \
                 its own span_selector calls)",
            ));
        }
        if sel.include_child_spans {
            return Err(not_remote(
                "/api/v1/timeseries with include_child_spans (the span's trace would be read \
                 from Tempo for each series)",
            ));
        }
        if ask.step_ns % 1_000_000 != 0 {
            return Err(ApiError::bad_request(
                "step: over the remote backend a step is whole milliseconds (Pyroscope's time \
                 resolution)",
            ));
        }
        let mut sel = sel.clone();
        if let Some(f) = sel.span_filter.take() {
            let ids = self.filtered_spans(&sel, &f).await?;
            if ids.is_empty() {
                let types = self.profile_types(&sel).await?;
                let profile_type = Self::resolve_type(&types, sel.profile_type.as_deref())
                    .map_err(ApiError::bad_request)?;
                return Ok(empty(profile_type, ask));
            }
            sel.span_ids.extend(ids);
        }
        if !sel.span_ids.is_empty() {
            // Spans are chosen by id (Pyroscope takes spans or a trace, not both).
            sel.trace_id = None;
        }
        let types = self.profile_types(&sel).await?;
        let profile_type = Self::resolve_type(&types, sel.profile_type.as_deref())
            .map_err(ApiError::bad_request)?;
        let Some(t) = profile_type.clone() else {
            return Ok(empty(profile_type, ask));
        };
        let aggregation = ask.aggregation.unwrap_or(if t.is_snapshot() {
            Aggregation::Average
        } else {
            Aggregation::Sum
        });
        if aggregation == Aggregation::Average {
            return Err(not_remote(
                "/api/v1/timeseries of spans or a trace averaged (the default of snapshot \
                 types; a step's total over the remote does not say how many profiles it \
                 adds up): ask aggregation=sum",
            ));
        }
        // The grid of the embedded answer, from the range's start in whole ms.
        let from_ns = sel.from_ns.max(0) / 1_000_000 * 1_000_000;
        let to_ns = match sel.to_ns {
            0 => crate::clock::now_ns().saturating_add(1),
            to => to,
        };
        let span_ns = to_ns.saturating_sub(from_ns).max(0) as u64;
        let steps = span_ns.div_ceil(ask.step_ns as u64);
        let grid = Grid {
            from_ns,
            to_ns,
            step_ns: ask.step_ns,
        };
        let values = step_totals(self, &sel, &t, &grid, steps as usize).await?;
        let points = values
            .into_iter()
            .map(|(i, v)| SeriesPoint {
                timestamp_ms: grid.boundary(i) / 1_000_000,
                value: v as f64,
                exemplars: Vec::new(),
            })
            .collect();
        Ok(RemoteSeries {
            profile_type,
            aggregation,
            series: vec![(String::new(), points)],
        })
    }
}

fn empty(profile_type: Option<ProfileTypeId>, ask: &SeriesAsk) -> RemoteSeries {
    RemoteSeries {
        profile_type,
        aggregation: ask.aggregation.unwrap_or_default(),
        series: Vec::new(),
    }
}

/// Steps `[from + i·step, from + (i+1)·step)` clipped to `to`, in ns.
struct Grid {
    from_ns: i64,
    to_ns: i64,
    step_ns: i64,
}

/// How far before the range the totals are counted from (ns): 10 minutes, longer than a
/// profile window (a 60 s scrape), so that [`step_totals`]' first boundary is a range of its
/// own and not empty.
const LEAD_NS: i64 = 10 * 60 * 1_000_000_000;

impl Grid {
    /// Boundary `i`: the start of step `i`, the last one `to`.
    fn boundary(&self, i: usize) -> i64 {
        self.from_ns
            .saturating_add((i as i64).saturating_mul(self.step_ns))
            .min(self.to_ns)
    }
}

/// The total of each step with samples among `steps`, in order.
///
/// Each step's total is the difference of two totals counted from before the range up to
/// its boundaries, not a range of its own: a Pyroscope selects a profile by its time, but a
/// spanprof playing one (as in the tests) selects a span's profiles by window overlap, so a
/// profile overlapping two steps would count in both; counted from the same start, either
/// way a profile is in a boundary's total when it began before the boundary. The boundaries
/// are found by halving: a part whose ends' totals are equal holds no samples.
async fn step_totals(
    remote: &Arc<Remote>,
    sel: &Selection,
    t: &ProfileTypeId,
    grid: &Grid,
    steps: usize,
) -> Result<Vec<(usize, u64)>, ApiError> {
    if steps == 0 {
        return Ok(Vec::new());
    }
    let lead = grid.from_ns.saturating_sub(LEAD_NS).max(0);
    let up_to = |i: usize| Selection {
        from_ns: lead,
        to_ns: grid.boundary(i),
        ..sel.clone()
    };
    // Nothing begins before the epoch: the first boundary's total is 0 when it is there.
    let ends = if grid.from_ns <= lead {
        vec![up_to(steps)]
    } else {
        vec![up_to(0), up_to(steps)]
    };
    let mut at = totals(remote, t, &sel.span_ids, ends).await?;
    let last = at.pop().unwrap_or(0);
    let first = at.pop().unwrap_or(0);
    let mut found = Vec::new();
    // Parts of steps with their boundaries' totals (data arriving between calls can make a
    // later total smaller for a moment: differences saturate at 0).
    let mut parts: Vec<(std::ops::Range<usize>, u64, u64)> = vec![(0..steps, first, last)];
    let mut calls = 2;
    while !parts.is_empty() {
        let (settled, split): (Vec<_>, Vec<_>) = parts
            .into_iter()
            .filter(|(_, lo, hi)| hi > lo)
            .partition(|(r, _, _)| r.len() == 1);
        found.extend(settled.into_iter().map(|(r, lo, hi)| (r.start, hi - lo)));
        calls += split.len();
        if calls > MAX_CALLS {
            return Err(ApiError::bad_request(format!(
                "the series of these spans would take over {MAX_CALLS} calls to Pyroscope \
                 (halving the range down to each step with samples): narrow from/to or take \
                 a longer step"
            )));
        }
        let mids: Vec<usize> = split
            .iter()
            .map(|(r, _, _)| r.start + r.len() / 2)
            .collect();
        let sels = mids.iter().map(|&m| up_to(m)).collect();
        let values = totals(remote, t, &sel.span_ids, sels).await?;
        parts = Vec::with_capacity(split.len() * 2);
        for (((r, lo, hi), mid), at_mid) in split.into_iter().zip(mids).zip(values) {
            parts.push((r.start..mid, lo, at_mid));
            parts.push((mid..r.end, at_mid, hi));
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The total of each selection, in order, [`CONCURRENT_CALLS`] at a time.
async fn totals(
    remote: &Arc<Remote>,
    t: &ProfileTypeId,
    span_ids: &[[u8; 8]],
    sels: Vec<Selection>,
) -> Result<Vec<u64>, ApiError> {
    let mut out = vec![0u64; sels.len()];
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CALLS));
    let span_ids: Arc<[[u8; 8]]> = span_ids.into();
    let mut calls = tokio::task::JoinSet::new();
    for (i, sel) in sels.into_iter().enumerate() {
        let (remote, t, ids, permits) = (
            Arc::clone(remote),
            t.clone(),
            Arc::clone(&span_ids),
            Arc::clone(&permits),
        );
        calls.spawn(async move {
            let _permit = permits.acquire_owned().await;
            (i, remote.total(&sel, &t, &ids).await)
        });
    }
    while let Some(done) = calls.join_next().await {
        let (i, total) = done.map_err(|e| ApiError::internal(format!("a step total: {e}")))?;
        out[i] = total?;
    }
    Ok(out)
}
