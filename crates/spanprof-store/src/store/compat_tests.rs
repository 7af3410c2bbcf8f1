//! Records written before record link tables existed (self-contained version 1 blocks, no
//! table) are still read, next to new ones, and compaction merges both into identical answers.

use std::path::Path;

use spanprof_format::link::IdRole;
use spanprof_format::otlp::Resource;
use spanprof_format::{pprof, Batch, LinkConfig};

use super::ingest::WRITE_SELF_CONTAINED;
use super::{Selection, Store, StoreConfig};
use crate::spans::SpanRecord;

const CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");
const PARTS: usize = 4;

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.sync = false;
    c
}

/// The (span, trace) ids of the profile's samples, each pair once.
fn links(p: &pprof::Profile) -> Vec<([u8; 8], Option<[u8; 16]>)> {
    let cfg = LinkConfig::default();
    let mut out: Vec<([u8; 8], Option<[u8; 16]>)> = Vec::new();
    for s in &p.sample {
        let (mut span, mut trace) = (None, None);
        for l in &s.label {
            match cfg.role(p.str(l.key).unwrap_or(""), p.str(l.str)) {
                IdRole::SpanId(id) => span = Some(id),
                IdRole::TraceId(id) => trace = Some(id),
                _ => {}
            }
        }
        if let Some(span) = span.filter(|s| !out.iter().any(|(x, _)| x == s)) {
            out.push((span, trace));
        }
    }
    out
}

/// The profile in `PARTS` parts, ingested part by part (records of the old layout where `old`
/// says so); parts 0 and 2 have their spans stored first (their links then carry no trace
/// ids). A segment is sealed after part 1.
fn fill(dir: &Path, old: [bool; PARTS]) {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let ids = links(&p);
    let (store, _) = Store::open(config(dir)).unwrap();
    for (i, &old) in old.iter().enumerate() {
        WRITE_SELF_CONTAINED.with(|w| w.set(old));
        let mut part = p.clone();
        part.sample = p.sample.iter().skip(i).step_by(PARTS).cloned().collect();
        let mut batch = Batch::new(Some(LinkConfig::default()));
        batch.add_pprof(&part, Resource::default()).unwrap();
        if i % 2 == 0 {
            let spans = ids
                .iter()
                .map(|&(span_id, trace)| SpanRecord {
                    trace_id: trace.unwrap_or([7; 16]),
                    span_id,
                    name: "s".into(),
                    start_ns: 1,
                    end_ns: 2,
                    ..Default::default()
                })
                .collect();
            store.ingest(&[], spans).unwrap();
        }
        let r = store.ingest(&[&batch.finish().0], Vec::new()).unwrap();
        assert_eq!(r.rejected_profiles, 0, "{:?}", r.problems);
        if i == 1 {
            store.rotate().unwrap();
        }
    }
    WRITE_SELF_CONTAINED.with(|w| w.set(false));
}

/// The whole flame graph, and every span's and trace's, with what the pprof export of each
/// span says.
fn answers(store: &Store) -> Vec<String> {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let flame = |sel: &Selection| store.flame_graph(sel).unwrap().0.to_collapsed();
    let mut out = vec![flame(&Selection::default())];
    for (span, trace) in links(&p) {
        let by_span = Selection {
            span_ids: vec![span],
            ..Default::default()
        };
        out.push(flame(&by_span));
        out.push(format!("{:?}", store.pprof(&by_span).unwrap().sample));
        if let Some(trace) = trace {
            out.push(flame(&Selection {
                trace_id: Some(trace),
                ..Default::default()
            }));
        }
    }
    out
}

#[test]
fn records_without_link_tables_are_read_and_compacted_with_the_same_answers() {
    let new = tempfile::tempdir().unwrap();
    fill(new.path(), [false; PARTS]);
    let mixed = tempfile::tempdir().unwrap();
    fill(mixed.path(), [true, false, true, false]);
    let old = tempfile::tempdir().unwrap();
    fill(old.path(), [true; PARTS]);
    let want = answers(&Store::open(config(new.path())).unwrap().0);
    assert!(!want[0].is_empty() && want.len() > 100);
    let new_bytes = Store::open(config(new.path()))
        .unwrap()
        .0
        .stats()
        .disk_bytes;
    for dir in [&mixed, &old] {
        let (store, report) = Store::open(config(dir.path())).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        // The old layout stores the ids once per block: it really was written.
        let bytes = store.stats().disk_bytes;
        assert!(
            bytes > new_bytes,
            "{bytes} B, {new_bytes} B with link tables"
        );
        assert!(answers(&store) == want, "answers of the old layout differ");
        store.rotate().unwrap();
        let compacted = store.compact(u64::MAX).unwrap();
        assert!(compacted.merged_segments >= 2, "{compacted:?}");
        assert!(answers(&store) == want, "answers after compaction differ");
        drop(store);
        let (store, report) = Store::open(config(dir.path())).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert!(answers(&store) == want, "answers after reopening differ");
    }
}
