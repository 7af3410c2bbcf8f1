//! `pprof()` read back by the real `go tool pprof`: per-span totals equal the store's flame
//! graphs and the sums of the original samples' labels.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use spanprof_format::link::parse_id;
use spanprof_format::pprof;
use spanprof_store::store::{Selection, SpanFilter, Store};

use super::fixture::*;
use super::raw;
use spanprof_testkit::go_tool_pprof;

/// Writes `p` gzipped (as `go tool pprof` reads it) into `dir`.
fn write_gz(dir: &Path, name: &str, p: &pprof::Profile) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pprof::encode_gzip(p)).unwrap();
    path
}

/// Per `span_id` label ("" for none), the first value column summed, as `go tool pprof -raw`
/// reads the file; also the trace id each span id is labelled with.
fn raw_totals(file: &Path) -> (BTreeMap<String, i64>, BTreeMap<String, String>) {
    let parsed = raw::parse(&go_tool_pprof([OsStr::new("-raw"), file.as_os_str()]));
    let mut totals = BTreeMap::new();
    let mut traces = BTreeMap::new();
    for s in &parsed.samples {
        let (trace, span) = raw::link_of(&s.labels).unwrap_or_default();
        *totals.entry(span.clone()).or_default() += s.values[0];
        if !span.is_empty() {
            traces.insert(span, trace);
        }
    }
    (totals, traces)
}

fn store_with(c: &Copy) -> (tempfile::TempDir, Store) {
    let dir = temp_dir();
    let store = open(dir.path());
    c.ingest(&store);
    (dir, store)
}

/// The fixture's sums are what `go tool pprof` reads from the original file.
#[test]
fn fixture_sums_agree_with_go_tool_pprof_on_the_original() {
    let parsed = raw::parse(&go_tool_pprof([OsStr::new("-raw"), testdata().as_os_str()]));
    let (cpu_col, count_col) = (
        parsed.value_index("cpu/nanoseconds"),
        parsed.value_index("samples/count"),
    );
    let mut by_span: BTreeMap<[u8; 8], (i64, i64)> = BTreeMap::new();
    for s in &parsed.samples {
        if let Some((_, span)) = s.link() {
            let e = by_span.entry(parse_id(&span).unwrap()).or_default();
            e.0 += s.values[cpu_col];
            e.1 += s.values[count_col];
        }
    }
    let sums = sums(original());
    let ours: BTreeMap<[u8; 8], (i64, i64)> = sums
        .by_span
        .iter()
        .map(|(id, s)| (*id, (s.cpu_ns, s.ticks)))
        .collect();
    assert_eq!(ours, by_span);
    assert_eq!(ours.len(), 81 + 76 + 78);
    assert_eq!((sums.cpu_total, sums.ticks_total), (8_530_000_000, 853));
}

#[test]
fn pprof_export_is_read_by_go_tool_pprof() {
    let c = Copy::new(0, 0, 1);
    let (dir, store) = store_with(&c);
    let all = Selection::default();
    let file = write_gz(dir.path(), "all.pb.gz", &store.pprof(&all).unwrap());
    let (totals, traces) = raw_totals(&file);

    let mut want: BTreeMap<String, i64> = c
        .sums
        .by_span
        .iter()
        .map(|(id, s)| (hex(id), s.cpu_ns))
        .collect();
    want.insert(String::new(), c.sums.unlinked_cpu);
    assert_eq!(
        totals, want,
        "per span_id label: go tool pprof vs the original's labels"
    );
    for (id, s) in &c.sums.by_span {
        assert_eq!(
            cpu(&store, &of_spans([id])),
            s.cpu_ns,
            "flame graph of {}",
            hex(id)
        );
        assert_eq!(
            traces[&hex(id)],
            hex(&s.trace_id),
            "trace_id label of {}",
            hex(id)
        );
    }
    assert_eq!(totals.values().sum::<i64>(), cpu(&store, &all));

    let top = go_tool_pprof([OsStr::new("-top"), file.as_os_str()]);
    assert!(top.contains("main.countPrimes"), "{top}");
    assert!(top.contains("of 8.53s total"), "{top}");
}

#[test]
fn pprof_export_of_slow_spans_and_children_equals_their_flame_graphs() {
    let c = Copy::new(0, 0, 1);
    let (dir, store) = store_with(&c);
    let sel = Selection {
        span_filter: Some(SpanFilter {
            name: Some(HEAVY.into()),
            above_percentile: Some(75.0),
            ..Default::default()
        }),
        include_child_spans: true,
        ..Default::default()
    };
    let file = write_gz(dir.path(), "slow.pb.gz", &store.pprof(&sel).unwrap());
    let (totals, _) = raw_totals(&file);
    assert!(!totals.contains_key(""), "only linked samples");
    let names: BTreeMap<&str, usize> = totals.keys().fold(BTreeMap::new(), |mut m, id| {
        let span = stored_span(&store, &parse_id(id).unwrap()).unwrap();
        *m.entry(if span.name == HEAVY { HEAVY } else { SORT })
            .or_default() += 1;
        m
    });
    assert_eq!(
        names.len(),
        2,
        "slow spans and their sortWork children: {names:?}"
    );
    for (id, v) in &totals {
        let id = parse_id::<8>(id).unwrap();
        assert_eq!(*v, cpu(&store, &of_spans([&id])));
        assert_eq!(*v, c.sampled(&id).cpu_ns);
    }
    assert_eq!(totals.values().sum::<i64>(), cpu(&store, &sel));
    let top = go_tool_pprof([OsStr::new("-top"), file.as_os_str()]);
    assert!(top.contains("main.countPrimes"), "{top}");
    assert!(top.contains("main.sortWork"), "{top}");
}
