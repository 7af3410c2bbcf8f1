//! Retention deletes whole sealed segments, by age and by size, never the active one; what
//! they held disappears from every answer, what the others hold stays exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use spanprof_store::store::{Selection, Store, StoreConfig};

use super::fixture::*;

/// The segment files under `DIR/segments/`, oldest first, with their sizes in bytes.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<(PathBuf, u64)> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    out.sort();
    out
}

/// Every file under `dir`, recursively, with its size in bytes.
fn all_files(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            all_files(&path, out);
        } else {
            out.push((path.clone(), std::fs::metadata(&path).unwrap().len()));
        }
    }
}

/// What each segment costs on disk: the bytes of every file in the store named after it (its
/// `.seg` file and any per-segment file the store keeps beside it), by file stem.
fn bytes_per_segment(dir: &Path) -> BTreeMap<String, u64> {
    let mut files = Vec::new();
    all_files(dir, &mut files);
    let mut out = BTreeMap::new();
    for (path, len) in files {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        *out.entry(stem).or_default() += len;
    }
    out
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// `stats()` counts every byte the store keeps on disk.
fn assert_disk_bytes(store: &Store, dir: &Path) {
    let on_disk: u64 = bytes_per_segment(dir).values().sum();
    assert_eq!(
        store.stats().disk_bytes,
        on_disk,
        "stats().disk_bytes vs files"
    );
}

/// Answers that tell which copies a store still holds: total CPU, and per copy the CPU of its
/// spans and whether its spans are known.
fn assert_holds(store: &Store, kept: &[&Copy], gone: &[&Copy]) {
    let total: i64 = kept.iter().map(|c| c.sums.cpu_total).sum();
    assert_eq!(cpu(store, &Selection::default()), total, "total CPU");
    for c in kept {
        let heavy = c.named(HEAVY);
        let ids = heavy.iter().map(|s| &s.span_id);
        assert_eq!(
            cpu(store, &of_spans(ids)),
            c.cpu_named(HEAVY),
            "kept copy at {}",
            c.time_ns
        );
        assert!(
            stored_span(store, &heavy[0].span_id).is_some(),
            "span of a kept copy"
        );
    }
    for c in gone {
        let ids: Vec<[u8; 8]> = c.sums.by_span.keys().copied().collect();
        assert_eq!(
            cpu(store, &of_spans(&ids)),
            0,
            "deleted copy at {}",
            c.time_ns
        );
        assert!(
            stored_span(store, &ids[0]).is_none(),
            "span of a deleted copy"
        );
        assert!(!has_samples(store, &ids[0]));
    }
}

fn samples(c: &Copy) -> u64 {
    c.data.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter()
        .map(|p| p.samples.len() as u64)
        .sum()
}

#[test]
fn retention_by_age_deletes_sealed_segments_whose_data_is_all_older() {
    let dir = temp_dir();
    let age_ns = 30 * SEC as u64;
    let cfg = StoreConfig {
        retention_age_ns: Some(age_ns),
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg.clone());
    let c0 = Copy::new(0, 0, 1);
    let c1 = Copy::new(1, 40 * SEC, 1);
    let c2 = Copy::new(2, 100 * SEC, 2);
    let c3 = Copy::new(3, 200 * SEC, 1);
    let t0 = c0.time_ns as u64;
    // Segment A: c0. Segment B: c1 and c2 (c1 alone would be old enough). C (active): c3.
    c0.ingest(&store);
    store.rotate().unwrap();
    c1.ingest(&store);
    c2.ingest(&store);
    store.rotate().unwrap();
    c3.ingest(&store);
    let before = store.stats();
    let segs = files(dir.path());
    assert_eq!((before.segments, segs.len()), (3, 3));
    assert_disk_bytes(&store, dir.path());
    let cost_of_a = bytes_per_segment(dir.path())[&stem(&segs[0].0)];
    assert_eq!(
        before.samples,
        samples(&c0) + samples(&c1) + samples(&c2) + samples(&c3)
    );

    // Cut-off t0 + 60 s: A ends at t0 + 10.2 s; B's newest data (c2) at t0 + 110 s.
    let now = t0 + 90 * SEC as u64;
    assert_eq!(store.enforce_retention(now).unwrap(), 1);
    assert_eq!(
        files(dir.path()),
        segs[1..],
        "only segment A's file is gone"
    );
    let after = store.stats();
    assert_eq!(after.segments, 2);
    assert_eq!(after.disk_bytes, before.disk_bytes - cost_of_a);
    assert_disk_bytes(&store, dir.path());
    assert_eq!(after.samples, before.samples - samples(&c0));
    assert_eq!(after.spans, before.spans - c0.spans.len());
    assert_holds(&store, &[&c1, &c2, &c3], &[&c0]);
    let window = |from: i64, to: i64| store.services(c0.time_ns + from, c0.time_ns + to);
    assert_eq!(
        window(0, 20 * SEC),
        Vec::<String>::new(),
        "nothing left in A's time"
    );
    assert_eq!(
        window(40 * SEC, 50 * SEC),
        [SERVICE],
        "c1 kept with its segment"
    );

    // Again after reopening: the deletion is on disk, not only in memory.
    drop(store);
    let (store, report) = open_with(cfg);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_holds(&store, &[&c1, &c2, &c3], &[&c0]);

    // Far in the future every sealed segment goes, the active one stays with its data.
    assert_eq!(
        store.enforce_retention(t0 + 10_000 * SEC as u64).unwrap(),
        1
    );
    assert_eq!(files(dir.path()), segs[2..]);
    assert_eq!(store.stats().segments, 1);
    assert_disk_bytes(&store, dir.path());
    assert_holds(&store, &[&c3], &[&c0, &c1, &c2]);
    assert_eq!(store.enforce_retention(u64::MAX).unwrap(), 0);
    assert_holds(&store, &[&c3], &[]);
}

#[test]
fn retention_by_size_deletes_oldest_segments_until_under_the_limit() {
    let dir = temp_dir();
    let copies: Vec<Copy> = (0..4)
        .map(|n| Copy::new(n, i64::from(n) * 20 * SEC, 1))
        .collect();
    {
        let store = open(dir.path());
        for (i, c) in copies.iter().enumerate() {
            if i > 0 {
                store.rotate().unwrap();
            }
            c.ingest(&store);
        }
    }
    let segs = files(dir.path());
    assert_eq!(segs.len(), 4);
    let cost = bytes_per_segment(dir.path());
    let total: u64 = cost.values().sum();
    let cost_of = |i: usize| cost[&stem(&segs[i].0)];
    // Exactly what the two newest take: A and B must go, C and D fit.
    let limit = total - cost_of(0) - cost_of(1);
    let cfg = StoreConfig {
        retention_bytes: Some(limit),
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg);
    assert_eq!(store.stats().disk_bytes, total);
    // Size retention ignores time: a `now` before all data changes nothing.
    assert_eq!(store.enforce_retention(0).unwrap(), 2);
    assert_eq!(files(dir.path()), segs[2..]);
    let stats = store.stats();
    assert_eq!((stats.segments, stats.disk_bytes), (2, limit));
    assert_eq!(stats.samples, samples(&copies[2]) + samples(&copies[3]));
    assert_holds(&store, &[&copies[2], &copies[3]], &[&copies[0], &copies[1]]);
    assert_eq!(
        store.enforce_retention(0).unwrap(),
        0,
        "under the limit now"
    );
    drop(store);

    // A limit below the active segment's size: every sealed segment goes, the active stays.
    let cfg = StoreConfig {
        retention_bytes: Some(1),
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg);
    assert_eq!(store.enforce_retention(0).unwrap(), 1);
    assert_eq!(files(dir.path()), segs[3..]);
    assert_disk_bytes(&store, dir.path());
    assert_eq!(store.stats().segments, 1);
    assert_holds(&store, &[&copies[3]], &[&copies[0], &copies[1], &copies[2]]);
    // The store still takes data after all that.
    let c4 = Copy::new(4, 100 * SEC, 1);
    c4.ingest(&store);
    assert_holds(&store, &[&copies[3], &c4], &[&copies[2]]);
}

/// Spans arrive on their own (OTLP traces, `spanprof import`), so a sealed segment may hold
/// spans and no profile. Its data is the spans: recent spans are not "all older than now − age".
#[test]
fn retention_by_age_keeps_a_segment_of_recent_spans_without_profiles() {
    let dir = temp_dir();
    let cfg = StoreConfig {
        retention_age_ns: Some(30 * SEC as u64),
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg.clone());
    let old = Copy::new(0, 0, 1);
    let recent = Copy::new(1, 100 * SEC, 1);
    let newest = Copy::new(2, 200 * SEC, 1);
    old.ingest(&store);
    store.rotate().unwrap();
    let r = store.ingest(&[], recent.spans.clone()).unwrap();
    assert_eq!(r.spans, recent.spans.len() as u64);
    store.rotate().unwrap();
    newest.ingest(&store);
    let spans_segment = files(dir.path())[1].0.clone();

    // Cut-off t0 + 60 s; the spans-only segment's spans run from t0 + 100 s.
    let now = old.time_ns as u64 + 90 * SEC as u64;
    assert_eq!(
        store.enforce_retention(now).unwrap(),
        1,
        "only the old profile's segment"
    );
    assert!(
        spans_segment.exists(),
        "{} was deleted",
        spans_segment.display()
    );
    drop(store);
    let (store, _) = open_with(cfg);
    let heavy = recent.span(HEAVY);
    assert_eq!(stored_span(&store, &heavy.span_id).as_ref(), Some(heavy));
    assert_eq!(
        stored_trace(&store, &heavy.trace_id).len(),
        recent
            .spans
            .iter()
            .filter(|s| s.trace_id == heavy.trace_id)
            .count()
    );
}
