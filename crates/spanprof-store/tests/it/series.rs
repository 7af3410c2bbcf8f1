//! `SelectSeries`-style bucketing: edges, empty buckets, aggregation, exemplars, groups.

use proptest::prelude::*;
use spanprof_store::series::{
    bucket, bucket_grouped, Aggregation, Exemplar, Point, SeriesError, SeriesPoint,
};

const SEC: i64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z in nanoseconds.
const T0: i64 = 1_767_225_600 * SEC;

const TRACE: [u8; 16] = [0x11; 16];

fn span(n: u8) -> Option<([u8; 16], [u8; 8])> {
    Some((TRACE, [n; 8]))
}

fn p(time_ns: i64, value: i64) -> Point {
    Point {
        time_ns,
        value,
        span: None,
    }
}

fn ps(time_ns: i64, value: i64, span_n: u8) -> Point {
    Point {
        time_ns,
        value,
        span: span(span_n),
    }
}

fn values(series: &[SeriesPoint]) -> Vec<(i64, f64)> {
    series.iter().map(|s| (s.timestamp_ms, s.value)).collect()
}

fn sum(points: Vec<Point>, from: i64, to: i64, step: i64) -> Vec<(i64, f64)> {
    values(&bucket(points, from, to, step, Aggregation::Sum, 0).unwrap())
}

#[test]
fn buckets_are_half_open_and_aligned_to_from() {
    let t0_ms = T0 / 1_000_000;
    let points = vec![
        p(T0, 1),                // first instant: first bucket
        p(T0 + 10 * SEC - 1, 2), // last nanosecond of the first bucket
        p(T0 + 10 * SEC, 4),     // exactly on an edge: the later bucket
        p(T0 + 35 * SEC, 8),     // bucket [30 s, 40 s)
        p(T0 + 40 * SEC, 16),    // == to_ns: excluded
        p(T0 - 1, 32),           // before from_ns: excluded
    ];
    assert_eq!(
        sum(points, T0, T0 + 40 * SEC, 10 * SEC),
        // The empty bucket [20 s, 30 s) is omitted.
        [(t0_ms, 3.0), (t0_ms + 10_000, 4.0), (t0_ms + 30_000, 8.0)]
    );
}

#[test]
fn unaligned_from_and_a_partial_last_bucket() {
    // from = 3 s, step 10 s: buckets start at 3, 13, 23; the last is cut at to = 25 s.
    let points = vec![
        p(3 * SEC, 1),
        p(12 * SEC, 1),
        p(13 * SEC, 5),
        p(24 * SEC, 7),
    ];
    assert_eq!(
        sum(points, 3 * SEC, 25 * SEC, 10 * SEC),
        [(3_000, 2.0), (13_000, 5.0), (23_000, 7.0)]
    );
}

#[test]
fn step_larger_than_the_range_gives_one_bucket() {
    let points = vec![p(T0 + SEC, 2), p(T0 + 59 * SEC, 3)];
    assert_eq!(
        sum(points, T0, T0 + 60 * SEC, 3600 * SEC),
        [(T0 / 1_000_000, 5.0)]
    );
}

#[test]
fn empty_and_inverted_ranges_give_nothing() {
    assert!(sum(vec![p(T0, 1)], T0, T0, SEC).is_empty());
    assert!(sum(vec![p(T0, 1)], T0 + SEC, T0, SEC).is_empty());
    assert!(sum(vec![], T0, T0 + SEC, SEC).is_empty());
}

#[test]
fn non_positive_steps_are_refused() {
    for step in [0, -SEC] {
        let err = bucket(vec![p(T0, 1)], T0, T0 + SEC, step, Aggregation::Sum, 0).unwrap_err();
        assert_eq!(err, SeriesError::NonPositiveStep { step_ns: step });
        let err = bucket_grouped(
            vec![("a".to_string(), p(T0, 1))],
            T0,
            T0 + SEC,
            step,
            Aggregation::Sum,
            0,
        );
        assert!(err.is_err());
    }
    assert_eq!(
        SeriesError::NonPositiveStep { step_ns: 0 }.to_string(),
        "series step must be positive, got 0 ns"
    );
}

#[test]
fn average_divides_by_the_profiles_in_the_bucket() {
    let points = vec![p(T0, 1), p(T0 + 1, 2), p(T0 + 2, 6), p(T0 + SEC, 5)];
    let series = bucket(points, T0, T0 + 2 * SEC, SEC, Aggregation::Average, 0).unwrap();
    assert_eq!(
        values(&series),
        [(T0 / 1_000_000, 3.0), (T0 / 1_000_000 + 1000, 5.0)]
    );
    // A profile gives a point per span and series, all at its time: two profiles of 10
    // and 30 average 20, whatever their number of points.
    let points = vec![ps(T0, 4, 1), ps(T0, 6, 2), p(T0 + 7, 10), ps(T0 + 7, 20, 3)];
    let series = bucket(points, T0, T0 + SEC, SEC, Aggregation::Average, 0).unwrap();
    assert_eq!(values(&series), [(T0 / 1_000_000, 20.0)]);
}

#[test]
fn sums_do_not_overflow_and_negative_values_count() {
    let points = vec![p(T0, i64::MAX), p(T0 + 1, i64::MAX), p(T0 + 2, -5)];
    let series = bucket(points, T0, T0 + SEC, SEC, Aggregation::Sum, 0).unwrap();
    assert_eq!(series[0].value, 2.0 * i64::MAX as f64 - 5.0);
}

#[test]
fn exemplars_are_the_spans_with_the_largest_summed_value() {
    let points = vec![
        ps(T0 + 5_000_000, 10, 1),
        ps(T0 + 2_000_000, 10, 1), // span 1 sums to 20, first seen at +2 ms
        ps(T0 + 1_000_000, 15, 2),
        ps(T0, 5, 3),
        p(T0, 100),         // no span: counts in the value only
        ps(T0, 50, 0),      // all-zero span ID: no span
        ps(T0 + SEC, 1, 3), // next bucket
    ];
    let series = bucket(points, T0, T0 + 2 * SEC, SEC, Aggregation::Sum, 2).unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0].value, 190.0);
    let t0_ms = T0 / 1_000_000;
    assert_eq!(
        series[0].exemplars,
        [
            Exemplar {
                timestamp_ms: t0_ms + 2,
                value: 20,
                trace_id: TRACE,
                span_id: [1; 8]
            },
            Exemplar {
                timestamp_ms: t0_ms + 1,
                value: 15,
                trace_id: TRACE,
                span_id: [2; 8]
            },
        ]
    );
    assert_eq!(series[1].exemplars.len(), 1);
    assert_eq!(series[1].exemplars[0].span_id, [3; 8]);
    // A limit of 0 keeps none; ties order by trace then span ID.
    let tied = vec![ps(T0, 1, 9), ps(T0, 1, 4)];
    let none = bucket(tied.clone(), T0, T0 + SEC, SEC, Aggregation::Sum, 0).unwrap();
    assert!(none[0].exemplars.is_empty());
    let both = bucket(tied, T0, T0 + SEC, SEC, Aggregation::Sum, 5).unwrap();
    let ids: Vec<[u8; 8]> = both[0].exemplars.iter().map(|e| e.span_id).collect();
    assert_eq!(ids, [[4; 8], [9; 8]]);
}

#[test]
fn groups_are_sorted_by_key_and_empty_groups_dropped() {
    let points = vec![
        ("web".to_string(), p(T0, 1)),
        ("api".to_string(), p(T0 + SEC, 2)),
        ("api".to_string(), p(T0, 3)),
        ("batch".to_string(), p(T0 - SEC, 4)), // out of range: the group disappears
        ("web".to_string(), ps(T0 + 1, 5, 7)),
    ];
    let groups = bucket_grouped(points, T0, T0 + 2 * SEC, SEC, Aggregation::Sum, 1).unwrap();
    let keys: Vec<&str> = groups.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["api", "web"]);
    let t0_ms = T0 / 1_000_000;
    assert_eq!(values(&groups[0].1), [(t0_ms, 3.0), (t0_ms + 1000, 2.0)]);
    assert_eq!(values(&groups[1].1), [(t0_ms, 6.0)]);
    assert_eq!(groups[1].1[0].exemplars[0].span_id, [7; 8]);
}

/// The obvious algorithm: walk every bucket of the range and sum what falls in it.
fn reference(points: &[Point], from: i64, to: i64, step: i64) -> Vec<(i64, f64)> {
    let mut want = Vec::new();
    let mut start = from;
    while start < to {
        let end = (start + step).min(to);
        let in_bucket: Vec<i64> = points
            .iter()
            .filter(|q| start <= q.time_ns && q.time_ns < end)
            .map(|q| q.value)
            .collect();
        if !in_bucket.is_empty() {
            want.push((
                start.div_euclid(1_000_000),
                in_bucket.iter().sum::<i64>() as f64,
            ));
        }
        start += step;
    }
    want
}

proptest! {
    #[test]
    fn matches_a_naive_reference(
        from in -3_000_000i64..3_000_000,
        len in 0i64..8_000_000,
        step in 1i64..2_500_000,
        raw in prop::collection::vec((-4_000_000i64..12_000_000, -50i64..100), 0..100),
    ) {
        let points: Vec<Point> = raw.iter().map(|&(t, v)| p(t, v)).collect();
        let got = bucket(points.clone(), from, from + len, step, Aggregation::Sum, 0).unwrap();
        prop_assert_eq!(values(&got), reference(&points, from, from + len, step));
    }
}
