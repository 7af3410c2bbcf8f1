//! Compaction merges small segments without changing any answer, and a crash at either
//! dangerous moment (before the output is complete, after it but before the sources are
//! deleted) neither loses nor doubles data.

use std::path::{Path, PathBuf};

use spanprof_format::otlp::Resource;
use spanprof_format::{pprof, Batch, LinkConfig};
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, Store, StoreConfig};

const CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.sync = false;
    c
}

/// The real profile, split into `parts` profiles by sample, each ingested and sealed on its
/// own (one small segment each), with a span per part.
fn fill(dir: &Path, parts: usize) {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let (store, _) = Store::open(config(dir)).unwrap();
    for i in 0..parts {
        let mut part = p.clone();
        part.sample = p.sample.iter().skip(i).step_by(parts).cloned().collect();
        let mut batch = Batch::new(Some(LinkConfig::default()));
        batch.add_pprof(&part, Resource::default()).unwrap();
        let span = SpanRecord {
            trace_id: [i as u8 + 1; 16],
            span_id: [i as u8 + 1; 8],
            name: format!("part {i}"),
            start_ns: 1,
            end_ns: 2,
            ..Default::default()
        };
        store.ingest(&[&batch.finish().0], vec![span]).unwrap();
        store.rotate().unwrap();
    }
}

/// Every answer the test compares: the whole flame graph, two spans', and the span count.
fn answers(dir: &Path) -> (String, String, usize, usize) {
    let (store, report) = Store::open(config(dir)).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let all = store
        .flame_graph(&Selection::default())
        .unwrap()
        .0
        .to_collapsed();
    let first_span = store
        .flame_graph(&Selection {
            span_ids: vec![busiest_span()],
            ..Default::default()
        })
        .unwrap()
        .0
        .to_collapsed();
    (all, first_span, store.stats().spans, store.stats().segments)
}

fn busiest_span() -> [u8; 8] {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let key = p
        .string_table
        .iter()
        .position(|s| s == "otel.profile.span_id")
        .unwrap() as i64;
    let label = p
        .sample
        .iter()
        .flat_map(|s| &s.label)
        .find(|l| l.key == key)
        .unwrap();
    spanprof_format::link::parse_id::<8>(&p.string_table[label.str as usize]).unwrap()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn compaction_keeps_every_answer_and_merges_segments() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 12);
    let (all, span, spans, segments) = answers(dir.path());
    assert!(!all.is_empty() && !span.is_empty());
    assert_eq!(spans, 12);
    let report = {
        let (store, _) = Store::open(config(dir.path())).unwrap();
        store.compact(1 << 20).unwrap()
    };
    assert_eq!(report.merged_segments, 12, "{report:?}");
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    let after = answers(dir.path());
    assert_eq!((&after.0, &after.1, after.2), (&all, &span, spans));
    assert!(
        after.3 < segments,
        "{} segments before, {} after",
        segments,
        after.3
    );
}

#[test]
fn a_crash_during_or_after_compaction_neither_loses_nor_doubles() {
    // Sources restored after a completed compaction (crash before they were deleted).
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 6);
    let before = answers(dir.path());
    let saved: Vec<(PathBuf, Vec<u8>)> = segment_files(dir.path())
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    {
        let (store, _) = Store::open(config(dir.path())).unwrap();
        assert_eq!(store.compact(1 << 20).unwrap().merged_segments, 6);
    }
    let output: Vec<PathBuf> = segment_files(dir.path())
        .into_iter()
        .filter(|p| !saved.iter().any(|(s, _)| s == p))
        .collect();
    for (p, bytes) in &saved {
        if !p.exists() {
            std::fs::write(p, bytes).unwrap();
        }
    }
    let after = answers(dir.path());
    assert_eq!(
        (&after.0, &after.1, after.2),
        (&before.0, &before.1, before.2),
        "sources left behind were counted again"
    );
    assert!(
        saved.iter().filter(|(p, _)| p.exists()).count() <= 1,
        "replaced sources are deleted on open"
    );

    // An output without its END record (crash while copying), sources all still there.
    let dir2 = tempfile::tempdir().unwrap();
    fill(dir2.path(), 6);
    let before2 = answers(dir2.path());
    let saved2: Vec<(PathBuf, Vec<u8>)> = segment_files(dir2.path())
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    {
        let (store, _) = Store::open(config(dir2.path())).unwrap();
        store.compact(1 << 20).unwrap();
    }
    // A crash while copying: the output is still the last (active) segment and its last
    // record (END) is torn. Drop the segment opened after compaction and tear the output.
    let mut outputs: Vec<PathBuf> = segment_files(dir2.path())
        .into_iter()
        .filter(|p| !saved2.iter().any(|(s, _)| s == p))
        .collect();
    outputs.sort();
    assert_eq!(
        outputs.len(),
        2,
        "the output and the segment after it: {outputs:?}"
    );
    std::fs::remove_file(&outputs[1]).unwrap();
    let out = &outputs[0];
    let len = std::fs::metadata(out).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(out)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    for (p, bytes) in &saved2 {
        if !p.exists() {
            std::fs::write(p, bytes).unwrap();
        }
    }
    let after2 = answers(dir2.path());
    assert_eq!(
        (&after2.0, &after2.1, after2.2),
        (&before2.0, &before2.1, before2.2),
        "copies of an unfinished compaction were counted"
    );
    let _ = output;
}
