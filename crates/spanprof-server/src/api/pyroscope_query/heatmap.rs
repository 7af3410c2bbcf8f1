//! `SelectHeatmap` (Pyroscope 2.2, read in grafana/pyroscope v2.2.1: `pkg/model/heatmap`,
//! `pkg/querybackend/query_heatmap.go`, `pkg/frontend/readpath/queryfrontend/query_heatmap.go`):
//! how the values of the selected spans are spread over time and size.
//!
//! A point of the SPAN query type is one span in one profile: the summed value of its
//! samples there (span id 0, no span, gives none). Time columns are `(t - step, t]`, labelled
//! by their right edge `t`, the first ending at `start` (points up to one step before `start`
//! are read into it, points past the last edge go to the last column). Value buckets are
//! [`Y_BUCKETS`] even slices between the smallest and the largest point of every series
//! (integer bounds, the last one closed); a slot lists every bucket's lower bound and count,
//! and with span exemplars the largest point of each non-empty bucket (ties: the earliest,
//! then the smallest span id), its span and trace ids.
//!
//! Not as upstream: the INDIVIDUAL query type (one point per stored profile, exemplars
//! carrying the profile's UUID) is refused, spanprof keeping no profile ids; `group_by` takes
//! one label; exemplars carry no labels.

use std::collections::BTreeMap;

use spanprof_format::link::to_hex;

use super::messages::*;
use super::methods::{blocking, selection};
use super::{Codec, ConnectError};
use crate::api::Queries;
use spanprof_store::store::{Selection, Store};

/// Value buckets per time column (upstream's `DefaultYAxisBuckets`).
pub const Y_BUCKETS: usize = 20;

/// One point: a span's summed value in one profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeatPoint {
    /// The profile's time, ms since the epoch.
    timestamp_ms: i64,
    span_id: [u8; 8],
    trace_id: [u8; 16],
    /// In the profile's unit.
    value: i64,
}

/// A series' labels and points.
type LabelledPoints = (Vec<LabelPair>, Vec<HeatPoint>);

/// A value bucket: `[min, max)`, the last one `[min, max]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct YBucket {
    min: i64,
    max: i64,
}

/// [`Y_BUCKETS`] even buckets from `min` to `max`, bounds truncated to integers as upstream.
fn y_buckets(min: i64, max: i64) -> Vec<YBucket> {
    let size = (max as f64 - min as f64) / Y_BUCKETS as f64;
    let at = |i: usize| min.saturating_add((i as f64 * size) as i64);
    let mut out: Vec<YBucket> = (0..Y_BUCKETS)
        .map(|i| YBucket {
            min: at(i),
            max: at(i + 1),
        })
        .collect();
    if let Some(last) = out.last_mut() {
        last.max = max;
    }
    out
}

fn y_bucket(value: i64, buckets: &[YBucket]) -> Option<usize> {
    if let Some(i) = buckets.iter().position(|b| value >= b.min && value < b.max) {
        return Some(i);
    }
    buckets
        .last()
        .filter(|b| value >= b.min)
        .map(|_| buckets.len() - 1)
}

/// `t` rounded up to the next column edge `start + k·step`.
fn round_up(t: i64, start: i64, step: i64) -> i64 {
    let offset = start % step;
    let t = t - offset;
    let t = if t % step != 0 {
        (t / step + 1) * step
    } else {
        t
    };
    t + offset
}

/// The right edge of the column holding `t`, within `start ..= end`'s last edge.
fn column(t: i64, start: i64, end: i64, step: i64) -> i64 {
    round_up(t, start, step).clamp(start, round_up(end, start, step).max(start))
}

/// The heatmap of `series` (labels, points) over `start ..= end` (ms) in columns of
/// `step_ms`, one value-bucket scale for all.
fn heatmap(
    series: Vec<LabelledPoints>,
    start: i64,
    end: i64,
    step_ms: i64,
    exemplars: bool,
) -> Vec<HeatmapSeries> {
    let values = || series.iter().flat_map(|(_, p)| p.iter().map(|p| p.value));
    let (Some(min), Some(max)) = (values().min(), values().max()) else {
        return Vec::new();
    };
    let buckets = y_buckets(min, if min == max { min + 1 } else { max });
    let mut out = Vec::new();
    for (labels, mut points) in series {
        if points.is_empty() {
            continue;
        }
        points.sort_by_key(|p| (p.timestamp_ms, p.span_id, p.trace_id));
        // (column, bucket) → (count, largest point).
        let mut cells: BTreeMap<(i64, usize), (i32, HeatPoint)> = BTreeMap::new();
        for p in points {
            let Some(y) = y_bucket(p.value, &buckets) else {
                continue;
            };
            let cell = cells
                .entry((column(p.timestamp_ms, start, end, step_ms), y))
                .or_insert((0, p));
            cell.0 = cell.0.saturating_add(1);
            if p.value > cell.1.value {
                cell.1 = p;
            }
        }
        let mut slots: Vec<HeatmapSlot> = Vec::new();
        for ((t, y), (count, best)) in cells {
            if slots.last().is_none_or(|s| s.timestamp != t) {
                slots.push(HeatmapSlot {
                    timestamp: t,
                    y_min: buckets.iter().map(|b| b.min as f64).collect(),
                    counts: vec![0; buckets.len()],
                    exemplars: Vec::new(),
                });
            }
            let slot = slots.last_mut().expect("pushed above");
            slot.counts[y] = count;
            if exemplars {
                slot.exemplars.push(Exemplar {
                    timestamp: best.timestamp_ms,
                    profile_id: String::new(),
                    span_id: to_hex(&best.span_id),
                    value: best.value,
                    labels: Vec::new(),
                    trace_id: if best.trace_id == [0; 16] {
                        String::new()
                    } else {
                        to_hex(&best.trace_id)
                    },
                });
            }
        }
        out.push(HeatmapSeries { labels, slots });
    }
    out
}

/// The `limit` series with the most points (ties by labels), as upstream's `TopSeries`.
fn top_series(mut series: Vec<HeatmapSeries>, limit: usize) -> Vec<HeatmapSeries> {
    if limit == 0 || series.len() <= limit {
        return series;
    }
    let count = |s: &HeatmapSeries| -> i64 {
        s.slots
            .iter()
            .flat_map(|s| &s.counts)
            .map(|&c| i64::from(c))
            .sum()
    };
    let key = |s: &HeatmapSeries| -> Vec<(String, String)> {
        s.labels
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect()
    };
    series.sort_by(|a, b| count(b).cmp(&count(a)).then_with(|| key(a).cmp(&key(b))));
    series.truncate(limit);
    series
}

/// A request's checked settings.
struct Checked {
    /// Series kept (0: all).
    limit: usize,
    exemplars: bool,
    step_ms: i64,
}

/// Checks `req` as upstream does, in its order and words.
fn check(req: &SelectHeatmapRequest) -> Result<Checked, ConnectError> {
    if !(req.step.is_finite() && req.step >= 0.001) {
        return Err(ConnectError::invalid(format!(
            "step must be >= 1ms, got {}",
            req.step
        )));
    }
    let limit = match req.limit {
        Some(n) if n < 0 => {
            return Err(ConnectError::invalid(format!(
                "limit must be non-negative, got {n}"
            )))
        }
        n => usize::try_from(n.unwrap_or(0)).unwrap_or(usize::MAX),
    };
    if req.start >= req.end {
        return Err(ConnectError::invalid(format!(
            "start time must be before end time, got start={} end={}",
            req.start, req.end
        )));
    }
    match HeatmapQueryType::try_from(req.query_type) {
        Ok(HeatmapQueryType::Span) => {}
        Ok(HeatmapQueryType::Individual) => {
            return Err(ConnectError::unimplemented(
                "HEATMAP_QUERY_TYPE_INDIVIDUAL is not supported: spanprof keeps no profile ids; \
                 use HEATMAP_QUERY_TYPE_SPAN",
            ))
        }
        _ => {
            return Err(ConnectError::invalid(
                "valid heatmap query type must be specified",
            ))
        }
    }
    let exemplars = match ExemplarType::try_from(req.exemplar_type) {
        Ok(ExemplarType::Unspecified | ExemplarType::None) => false,
        Ok(ExemplarType::Span) => true,
        Ok(ExemplarType::Individual) => {
            return Err(ConnectError::invalid(
                "individual exemplars only available for individual query type",
            ))
        }
        Err(_) => {
            return Err(ConnectError::invalid(format!(
                "unknown exemplar type: {}",
                req.exemplar_type
            )))
        }
    };
    if req.group_by.len() > 1 {
        return Err(ConnectError::unimplemented(
            "group_by takes at most one label",
        ));
    }
    Ok(Checked {
        limit,
        exemplars,
        // Whole milliseconds, truncated as upstream; at least 1 by the check above.
        step_ms: ((req.step * 1e9) as i64 / 1_000_000).max(1),
    })
}

/// A group's span points: (time ms, span id, trace id) → summed value.
type SpanValues = BTreeMap<(i64, [u8; 8], [u8; 16]), i64>;

/// The span points of `sel` per value of label `group_by` (labels, points).
fn span_points(
    store: &Store,
    sel: &Selection,
    group_by: Option<&str>,
) -> Result<Vec<LabelledPoints>, ConnectError> {
    // A span's points of one time and group summed: several series of a group are one
    // point upstream too.
    let mut grouped: BTreeMap<String, SpanValues> = BTreeMap::new();
    for (group, p) in store.points(sel, group_by)? {
        let Some((trace_id, span_id)) = p.span.filter(|(_, s)| *s != [0; 8]) else {
            continue;
        };
        let v = grouped
            .entry(group.unwrap_or_default())
            .or_default()
            .entry((p.time_ns.div_euclid(1_000_000), span_id, trace_id))
            .or_default();
        *v = v.saturating_add(p.value);
    }
    Ok(grouped
        .into_iter()
        .map(|(value, points)| {
            let labels = match group_by {
                Some(name) if !value.is_empty() => vec![LabelPair {
                    name: name.to_owned(),
                    value,
                }],
                _ => Vec::new(),
            };
            let points = points
                .into_iter()
                .map(|((timestamp_ms, span_id, trace_id), value)| HeatPoint {
                    timestamp_ms,
                    span_id,
                    trace_id,
                    value,
                })
                .collect();
            (labels, points)
        })
        .collect())
}

/// `SelectHeatmap` over the store; see the module docs.
pub async fn select_heatmap(
    queries: Queries,
    req: SelectHeatmapRequest,
    _codec: Codec,
) -> Result<SelectHeatmapResponse, ConnectError> {
    let c = check(&req)?;
    // Read one step before `start`: those points fall in the first column.
    let sel = selection(
        &req.profile_type_id,
        &req.label_selector,
        req.start.saturating_sub(c.step_ms).max(0),
        req.end,
    )?;
    blocking(&queries, move |store| {
        let series = span_points(store, &sel, req.group_by.first().map(String::as_str))?;
        let series = heatmap(series, req.start, req.end, c.step_ms, c.exemplars);
        Ok(SelectHeatmapResponse {
            series: top_series(series, c.limit),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(timestamp_ms: i64, span: u8, value: i64) -> HeatPoint {
        HeatPoint {
            timestamp_ms,
            span_id: [span; 8],
            trace_id: [span; 16],
            value,
        }
    }

    /// Columns are `(t - step, t]` from `start`; earlier points go to the first, later ones
    /// to the last (upstream's `normalizeTimestamp`).
    #[test]
    fn columns_are_labelled_by_their_right_edge() {
        let (start, end, step) = (1_000, 5_000, 1_000);
        assert_eq!(column(1_000, start, end, step), 1_000);
        assert_eq!(column(1_001, start, end, step), 2_000);
        assert_eq!(column(2_000, start, end, step), 2_000);
        assert_eq!(column(500, start, end, step), 1_000);
        assert_eq!(column(9_999, start, end, step), 5_000);
        // Edges aligned to start, not to the epoch.
        assert_eq!(column(1_300, 250, 5_000, 1_000), 2_250);
        // An end between edges: the last column is the edge after it.
        assert_eq!(column(9_999, 1_000, 4_500, 1_000), 5_000);
    }

    /// Twenty even buckets between the extremes, truncated bounds, the largest value in the
    /// last; one value alone spans 1.
    #[test]
    fn value_buckets_span_the_extremes() {
        let b = y_buckets(0, 100);
        assert_eq!(b.len(), Y_BUCKETS);
        assert_eq!((b[0].min, b[0].max, b[19].min, b[19].max), (0, 5, 95, 100));
        assert_eq!(y_bucket(4, &b), Some(0));
        assert_eq!(y_bucket(5, &b), Some(1));
        assert_eq!(y_bucket(100, &b), Some(19));
        assert_eq!(y_bucket(-1, &b), None);
        let b = y_buckets(7, 10);
        assert_eq!(b[0], YBucket { min: 7, max: 7 });
        assert_eq!(
            y_bucket(7, &b),
            Some(6),
            "the first non-empty bucket holding 7"
        );
    }

    #[test]
    fn slots_count_points_and_keep_the_largest_as_exemplar() {
        let series = vec![(
            vec![],
            vec![
                point(1_500, 1, 10),
                point(1_600, 2, 90),
                point(1_700, 3, 100),
                point(2_500, 4, 10),
                point(1_800, 5, 10),
            ],
        )];
        let out = heatmap(series, 1_000, 3_000, 1_000, true);
        assert_eq!(out.len(), 1);
        let slots = &out[0].slots;
        assert_eq!(
            slots.iter().map(|s| s.timestamp).collect::<Vec<_>>(),
            [2_000, 3_000]
        );
        let s = &slots[0];
        assert_eq!(s.y_min.len(), Y_BUCKETS);
        assert_eq!((s.y_min[0], s.y_min[19]), (10.0, 95.0));
        // 10, 10 in bucket 0; 90 in bucket 17 ((90-10)/4.5 = 17.8); 100 in the last.
        assert_eq!((s.counts[0], s.counts[17], s.counts[19]), (2, 1, 1));
        assert_eq!(s.counts.iter().sum::<i32>(), 4);
        let ids: Vec<(&str, i64)> = s
            .exemplars
            .iter()
            .map(|e| (e.span_id.as_str(), e.value))
            .collect();
        assert_eq!(
            ids,
            [
                ("0101010101010101", 10),
                ("0202020202020202", 90),
                ("0303030303030303", 100)
            ],
            "ties: the earliest"
        );
        assert_eq!(s.exemplars[0].trace_id, "01".repeat(16));
        assert_eq!(slots[1].counts.iter().sum::<i32>(), 1);
        // No exemplars unless asked.
        let out = heatmap(
            vec![(vec![], vec![point(1_500, 1, 10)])],
            1_000,
            3_000,
            1_000,
            false,
        );
        assert!(out[0].slots[0].exemplars.is_empty());
        // One value alone: buckets [10, 10) but the last, [10, 11], holds it (as upstream).
        assert_eq!(out[0].slots[0].counts[19], 1);
        assert_eq!(out[0].slots[0].counts.iter().sum::<i32>(), 1);
    }

    #[test]
    fn the_top_series_are_those_with_most_points() {
        let pair = |v: &str| {
            vec![LabelPair {
                name: "k".into(),
                value: v.into(),
            }]
        };
        let series = vec![
            (pair("a"), vec![point(1_500, 1, 10)]),
            (pair("b"), vec![point(1_500, 1, 10), point(1_500, 2, 10)]),
            (pair("c"), vec![point(1_500, 3, 10)]),
        ];
        let out = top_series(heatmap(series, 1_000, 3_000, 1_000, false), 2);
        let names: Vec<&str> = out.iter().map(|s| s.labels[0].value.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
    }
}
