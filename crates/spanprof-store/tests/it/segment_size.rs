//! A segment starts with a snapshot of every symbol and series, and is sealed once it holds
//! `segment_max_bytes` of data past that snapshot, and at least as much as the snapshot
//! (snapshots take at most half of the store). Counted in, a snapshot larger than a
//! segment (many series, a large program's symbols) sealed the segment at every ingest, and
//! each new segment started with the whole snapshot again: disk use grew with the square of
//! the series (measured on `spanprof serve` with 256 KiB segments: 3,000 one-line profiles of
//! distinct pods made 1,784 segments, 608 MB; now 3 segments, 1.2 MB).

use crate::common;

use common::{sample, DictionaryBuilder, S1, T1};
use spanprof_format::otlp::{string_kv, ProfilesData, Resource};
use spanprof_store::store::{Store, StoreConfig};

/// A one-sample CPU profile of pod `pod`.
fn profile_of(pod: usize) -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let p = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(stack, link, &[10])],
    );
    let mut data = b.finish(vec![vec![p]]);
    data.resource_profiles[0].resource = Some(Resource {
        attributes: vec![string_kv("pod", &format!("pod-{pod:05}"))],
        ..Default::default()
    });
    data
}

#[test]
fn a_snapshot_larger_than_a_segment_does_not_seal_it_at_every_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        segment_max_bytes: 8 << 10,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg()).unwrap();
    // 2,000 series: a snapshot of tens of KiB, several segments' worth.
    for pod in 0..2_000 {
        let r = store.ingest(&[&profile_of(pod)], Vec::new()).unwrap();
        assert_eq!(r.profiles, 1);
    }
    let stats = store.stats();
    assert_eq!((stats.series, stats.samples), (2_000, 2_000));
    // Each segment holds 8 KiB past its snapshot, and at least as much as the snapshot: 9
    // segments, 0.7 MB. Not one per ingest once the snapshot is past 8 KiB (1,916 segments,
    // 179 MB), nor one per 8 KiB of data with the whole snapshot each (40 segments, 3.9 MB).
    assert!(stats.segments < 15, "{stats:?}");
    assert!(stats.disk_bytes < 1 << 20, "{stats:?}");
    drop(store);
    // The same after reopening (the active segment's snapshot size is estimated on open).
    let (store, _) = Store::open(cfg()).unwrap();
    for pod in 0..200 {
        store.ingest(&[&profile_of(pod)], Vec::new()).unwrap();
    }
    let after = store.stats();
    assert!(
        after.segments - stats.segments < 10,
        "{stats:?} then {after:?}"
    );
    assert_eq!(after.samples, 2_200);
}

/// A full segment that cannot be sealed (here the next segment's file name is taken; on a
/// full disk its snapshot cannot be written) does not fail the ingest that filled it: that
/// ingest is stored, and its client, told otherwise, would send it again and have it stored
/// twice. The segment takes more, and a later ingest seals it.
#[test]
fn a_full_segment_that_cannot_be_sealed_does_not_fail_its_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        segment_max_bytes: 8 << 10,
        seal_retry: std::time::Duration::ZERO,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg()).unwrap();
    let taken = dir.path().join("segments/0000000000000002.seg");
    std::fs::create_dir(&taken).unwrap();
    for pod in 0..300 {
        let r = store.ingest(&[&profile_of(pod)], Vec::new()).unwrap();
        assert_eq!(r.profiles, 1, "pod {pod}");
    }
    let stats = store.stats();
    assert_eq!(stats.samples, 300);
    assert!(stats.segments >= 2, "{stats:?}");
    assert!(dir.path().join("segments/0000000000000003.seg").exists());
    drop(store);
    let (store, report) = Store::open(cfg()).unwrap();
    assert_eq!(store.stats().samples, 300, "{report:?}");
}
