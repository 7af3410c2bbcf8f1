//! `time_series`: three copies of the profile 10 s apart (values ×1, ×2, ×3), bucketed by 10 s
//! and grouped by the span-name label; every bucket's total and exemplars come out of the
//! pprof samples' labels.

use std::collections::BTreeMap;

use spanprof_store::series::{Aggregation, SeriesPoint};
use spanprof_store::store::{Selection, Store};

use super::fixture::*;

const GROUP: &str = "otel.profile.span_name";
const STEP_NS: i64 = 10 * SEC;

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    copies: Vec<Copy>,
}

fn setup() -> Setup {
    let dir = temp_dir();
    let store = open(dir.path());
    let copies: Vec<Copy> = (0..3u16)
        .map(|k| Copy::new(k, i64::from(k) * STEP_NS, i64::from(k) + 1))
        .collect();
    for c in &copies {
        c.ingest(&store);
    }
    Setup {
        _dir: dir,
        store,
        copies,
    }
}

/// Per group value (the `otel.profile.span_name` label, "" without it): CPU per span
/// (trace id, span id), unlinked CPU under `None`.
type ByGroup = BTreeMap<String, BTreeMap<Option<([u8; 16], [u8; 8])>, i64>>;

fn by_group(c: &Copy) -> ByGroup {
    let p = &c.pprof;
    let col = column(p, "cpu");
    let mut out = ByGroup::new();
    for s in &p.sample {
        let group = label(p, s, &[GROUP]).unwrap_or("").to_owned();
        let span = label(p, s, &["otel.profile.span_id", "span_id"]).map(|id| {
            let id = spanprof_format::link::parse_id::<8>(id).unwrap();
            (c.sampled(&id).trace_id, id)
        });
        *out.entry(group).or_default().entry(span).or_default() += s.value[col];
    }
    out
}

fn ms(ns: i64) -> i64 {
    ns.div_euclid(1_000_000)
}

fn series(s: &Setup, exemplars: usize) -> Vec<(String, Vec<SeriesPoint>)> {
    let t0 = s.copies[0].time_ns;
    let sel = Selection {
        from_ns: t0,
        to_ns: t0 + 3 * STEP_NS,
        ..Default::default()
    };
    s.store
        .time_series(&sel, STEP_NS, Some(GROUP), Aggregation::Sum, exemplars)
        .unwrap()
}

#[test]
fn time_series_totals_per_bucket_and_group_equal_the_label_sums() {
    let s = setup();
    let groups: Vec<ByGroup> = s.copies.iter().map(by_group).collect();
    let mut want: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for (c, g) in s.copies.iter().zip(&groups) {
        for (name, spans) in g {
            let total: i64 = spans.values().sum();
            want.entry(name.clone())
                .or_default()
                .push((ms(c.time_ns), total as f64));
        }
    }
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        ["", HEAVY, SORT],
        "cpu-light, worker and unlabelled samples have no {GROUP}"
    );
    let got: BTreeMap<String, Vec<(i64, f64)>> = series(&s, 0)
        .into_iter()
        .map(|(g, points)| {
            let values = points.iter().map(|p| (p.timestamp_ms, p.value)).collect();
            (g, values)
        })
        .collect();
    assert_eq!(got, want);
    // Whole buckets without grouping: each copy's total, ×1, ×2, ×3.
    let t0 = s.copies[0].time_ns;
    let sel = Selection {
        from_ns: t0,
        to_ns: t0 + 3 * STEP_NS,
        ..Default::default()
    };
    let all = s
        .store
        .time_series(&sel, STEP_NS, None, Aggregation::Sum, 0)
        .unwrap();
    assert_eq!(all.len(), 1);
    let totals: Vec<(i64, f64)> = all[0].1.iter().map(|p| (p.timestamp_ms, p.value)).collect();
    let base = s.copies[0].sums.cpu_total as f64;
    let want: Vec<(i64, f64)> = (0..3)
        .map(|k| (ms(t0 + k * STEP_NS), base * (k + 1) as f64))
        .collect();
    assert_eq!(totals, want);
    // One step over all three: one bucket holding the sum.
    let wide = s
        .store
        .time_series(&sel, 3 * STEP_NS, None, Aggregation::Sum, 0)
        .unwrap();
    assert_eq!(wide[0].1.len(), 1);
    assert_eq!(wide[0].1[0].value, base * 6.0);
}

/// Each point names the spans that contributed most to it, largest first (ties by trace and
/// span id), each with its own value.
#[test]
fn time_series_exemplars_name_the_spans_with_the_largest_values() {
    const EXEMPLARS: usize = 3;
    let s = setup();
    let got = series(&s, EXEMPLARS);
    for (c, groups) in s.copies.iter().zip(s.copies.iter().map(by_group)) {
        for (name, spans) in groups {
            let mut ranked: Vec<(i64, [u8; 16], [u8; 8])> = spans
                .into_iter()
                .filter_map(|(span, v)| span.map(|(t, id)| (v, t, id)))
                .collect();
            ranked.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            ranked.truncate(EXEMPLARS);
            let want: Vec<(i64, String, String)> = ranked
                .iter()
                .map(|(v, t, s)| (*v, hex(t), hex(s)))
                .collect();
            let point = got
                .iter()
                .find(|(g, _)| *g == name)
                .and_then(|(_, points)| points.iter().find(|p| p.timestamp_ms == ms(c.time_ns)))
                .unwrap_or_else(|| panic!("no point for {name:?} at {}", c.time_ns));
            let exemplars: Vec<(i64, String, String)> = point
                .exemplars
                .iter()
                .map(|e| (e.value, hex(&e.trace_id), hex(&e.span_id)))
                .collect();
            assert_eq!(
                exemplars, want,
                "group {name:?} at {}: exemplars (value, trace, span)",
                c.time_ns
            );
        }
    }
}
