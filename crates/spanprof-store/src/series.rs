//! Time series of totals, as answered by Pyroscope's `SelectSeries`: values bucketed by a
//! fixed step, each point with the spans that contributed most as exemplars.
//!
//! Buckets are half-open `[from_ns + i·step_ns, from_ns + (i+1)·step_ns)`, clipped to
//! `to_ns` (exclusive), and a point carries its bucket's *start* as timestamp. Pyroscope
//! instead labels a bucket by its end (`(T − step, T]` becomes `T`); the values are the same,
//! shifted by one step. Empty buckets are omitted, as Pyroscope omits them.

use std::collections::{BTreeMap, HashMap, HashSet};

/// One input value: a sample's or profile's value at a time, in the profile's unit
/// (nanoseconds, bytes, count), with the span it belongs to if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// When, in nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// The value, in the profile's unit.
    pub value: i64,
    /// `(trace_id, span_id)` of the span the value belongs to; an all-zero span ID counts as
    /// none (as Pyroscope stores "no span").
    pub span: Option<([u8; 16], [u8; 8])>,
}

/// One bucket of a series.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesPoint {
    /// Start of the bucket, in milliseconds since the Unix epoch (rounded down).
    pub timestamp_ms: i64,
    /// Sum or average of the bucket's values, in the profile's unit.
    pub value: f64,
    /// The spans with the largest summed value in the bucket, largest first.
    pub exemplars: Vec<Exemplar>,
}

/// A span that contributed to a [`SeriesPoint`] (Pyroscope exemplar type `SPAN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exemplar {
    /// Time of the span's first point in the bucket, in milliseconds since the Unix epoch
    /// (rounded down).
    pub timestamp_ms: i64,
    /// The span's summed value in the bucket, in the profile's unit (saturating).
    pub value: i64,
    /// Trace ID of the span.
    pub trace_id: [u8; 16],
    /// Span ID of the span.
    pub span_id: [u8; 8],
}

/// How a bucket's values combine (`types.v1.TimeSeriesAggregationType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Aggregation {
    /// The sum of the values (`SUM`, Pyroscope's default).
    #[default]
    Sum,
    /// The sum divided by the number of distinct point times (`AVERAGE`): the average over
    /// the bucket's profiles, whatever number of points each gave (one per span and series).
    Average,
}

/// Why a series could not be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SeriesError {
    /// The step is zero or negative: there is no bucketing to do.
    #[error("series step must be positive, got {step_ns} ns")]
    NonPositiveStep {
        /// The step given, in nanoseconds.
        step_ns: i64,
    },
}

/// Buckets `points` into a series over `[from_ns, to_ns)` with buckets of `step_ns`
/// nanoseconds aligned to `from_ns`; see the [module docs](self) for the exact rules.
///
/// Points outside the range are ignored; an empty or inverted range gives no points; a step
/// longer than the range gives at most one bucket. Each point keeps up to
/// `max_exemplars_per_point` spans (0: none), ties broken by trace and span ID.
///
/// # Errors
/// [`SeriesError::NonPositiveStep`] if `step_ns <= 0` (refused rather than clamped: a
/// caller converting a float step of seconds should see its mistake).
pub fn bucket(
    points: impl IntoIterator<Item = Point>,
    from_ns: i64,
    to_ns: i64,
    step_ns: i64,
    agg: Aggregation,
    max_exemplars_per_point: usize,
) -> Result<Vec<SeriesPoint>, SeriesError> {
    let grid = Grid::new(from_ns, to_ns, step_ns)?;
    let mut buckets = Buckets::default();
    for point in points {
        if let Some(start) = grid.bucket_start(point.time_ns) {
            buckets.add(start, &point);
        }
    }
    Ok(buckets.finish(agg, max_exemplars_per_point))
}

/// Like [`bucket`], with one series per group key (for `group_by`: e.g. the label values
/// joined by the caller). Returns the groups sorted by key; a group none of whose points
/// fall in the range is left out.
///
/// # Errors
/// [`SeriesError::NonPositiveStep`] if `step_ns <= 0`.
pub fn bucket_grouped(
    points: impl IntoIterator<Item = (String, Point)>,
    from_ns: i64,
    to_ns: i64,
    step_ns: i64,
    agg: Aggregation,
    max_exemplars_per_point: usize,
) -> Result<Vec<(String, Vec<SeriesPoint>)>, SeriesError> {
    let grid = Grid::new(from_ns, to_ns, step_ns)?;
    let mut groups: BTreeMap<String, Buckets> = BTreeMap::new();
    for (key, point) in points {
        if let Some(start) = grid.bucket_start(point.time_ns) {
            groups.entry(key).or_default().add(start, &point);
        }
    }
    Ok(groups
        .into_iter()
        .map(|(key, buckets)| (key, buckets.finish(agg, max_exemplars_per_point)))
        .collect())
}

/// The validated bucket grid.
struct Grid {
    from_ns: i64,
    to_ns: i64,
    step_ns: i64,
}

impl Grid {
    fn new(from_ns: i64, to_ns: i64, step_ns: i64) -> Result<Self, SeriesError> {
        if step_ns <= 0 {
            return Err(SeriesError::NonPositiveStep { step_ns });
        }
        Ok(Self {
            from_ns,
            to_ns,
            step_ns,
        })
    }

    /// Start of the bucket holding `time_ns`, if it is in range. The start never exceeds
    /// `time_ns`, so it fits in i64.
    fn bucket_start(&self, time_ns: i64) -> Option<i64> {
        if time_ns < self.from_ns || time_ns >= self.to_ns {
            return None;
        }
        // i128: `time_ns - from_ns` can exceed i64 when the range spans both signs.
        let offset = i128::from(time_ns) - i128::from(self.from_ns);
        let step = i128::from(self.step_ns);
        i64::try_from(i128::from(self.from_ns) + offset / step * step).ok()
    }
}

/// A span's share of one bucket.
struct SpanShare {
    sum: i128,
    first_ns: i64,
}

#[derive(Default)]
struct Bucket {
    /// Exact sum (i128 cannot overflow for fewer than 2^64 points).
    sum: i128,
    /// The distinct times of its points (its profiles).
    times: HashSet<i64>,
    spans: HashMap<([u8; 16], [u8; 8]), SpanShare>,
}

/// Buckets by start time (ns).
#[derive(Default)]
struct Buckets(BTreeMap<i64, Bucket>);

impl Buckets {
    fn add(&mut self, start_ns: i64, point: &Point) {
        let bucket = self.0.entry(start_ns).or_default();
        bucket.sum += i128::from(point.value);
        bucket.times.insert(point.time_ns);
        if let Some(span) = point.span.filter(|(_, span_id)| *span_id != [0; 8]) {
            let share = bucket.spans.entry(span).or_insert(SpanShare {
                sum: 0,
                first_ns: point.time_ns,
            });
            share.sum += i128::from(point.value);
            share.first_ns = share.first_ns.min(point.time_ns);
        }
    }

    fn finish(self, agg: Aggregation, max_exemplars: usize) -> Vec<SeriesPoint> {
        self.0
            .into_iter()
            .map(|(start_ns, bucket)| {
                let value = match agg {
                    Aggregation::Sum => bucket.sum as f64,
                    Aggregation::Average => bucket.sum as f64 / bucket.times.len().max(1) as f64,
                };
                let mut spans: Vec<_> = bucket.spans.into_iter().collect();
                spans.sort_unstable_by(|(ka, a), (kb, b)| b.sum.cmp(&a.sum).then(ka.cmp(kb)));
                spans.truncate(max_exemplars);
                let exemplars = spans
                    .into_iter()
                    .map(|((trace_id, span_id), share)| Exemplar {
                        timestamp_ms: ns_to_ms(share.first_ns),
                        value: saturate(share.sum),
                        trace_id,
                        span_id,
                    })
                    .collect();
                SeriesPoint {
                    timestamp_ms: ns_to_ms(start_ns),
                    value,
                    exemplars,
                }
            })
            .collect()
    }
}

fn ns_to_ms(ns: i64) -> i64 {
    ns.div_euclid(1_000_000)
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_start_is_aligned_to_from() {
        let grid = Grid::new(5, 100, 10).unwrap();
        assert_eq!(grid.bucket_start(4), None);
        assert_eq!(grid.bucket_start(5), Some(5));
        assert_eq!(grid.bucket_start(14), Some(5));
        assert_eq!(grid.bucket_start(15), Some(15));
        assert_eq!(grid.bucket_start(99), Some(95));
        assert_eq!(grid.bucket_start(100), None);
        let wide = Grid::new(i64::MIN, i64::MAX, i64::MAX).unwrap();
        assert_eq!(wide.bucket_start(i64::MAX - 1), Some(i64::MAX - 1));
        assert_eq!(wide.bucket_start(-2), Some(i64::MIN));
        assert_eq!(wide.bucket_start(-1), Some(-1));
    }

    #[test]
    fn milliseconds_round_down_before_the_epoch() {
        assert_eq!(ns_to_ms(-1), -1);
        assert_eq!(ns_to_ms(1_999_999), 1);
    }
}
