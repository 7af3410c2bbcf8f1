//! When the first and last stored profiles were taken (Pyroscope's `GetProfileStats`), over
//! sealed segments and the active one, and after reopening.

use crate::common;

use common::{sample, DictionaryBuilder, S1, T1};
use spanprof_format::otlp::ProfilesData;
use spanprof_store::store::{Store, StoreConfig};

const SEC: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600 * SEC;

/// A one-sample CPU profile taken at `time_ns`.
fn profile_at(time_ns: u64) -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let mut p = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(stack, link, &[10])],
    );
    p.time_unix_nano = time_ns;
    p.duration_nano = 10 * SEC;
    b.finish(vec![vec![p]])
}

#[test]
fn the_profile_time_range_covers_sealed_and_active_segments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        segment_max_bytes: 8 << 10,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg()).unwrap();
    assert_eq!(store.profile_time_range(), None, "an empty store");
    // Out of order: the middle first, then the earliest and the latest.
    let times: Vec<u64> = (100..400).chain(0..100).chain(400..500).collect();
    for &t in &times {
        store
            .ingest(&[&profile_at(T0 + t * SEC)], Vec::new())
            .unwrap();
    }
    assert!(store.stats().segments > 2, "{:?}", store.stats());
    let want = Some((T0 as i64, (T0 + 499 * SEC) as i64));
    assert_eq!(store.profile_time_range(), want);
    drop(store);
    let (store, _) = Store::open(cfg()).unwrap();
    assert_eq!(store.profile_time_range(), want, "after reopening");
}
