//! Retention keeps the disk from filling up: while the data directory's volume has less
//! available than both `min_free_disk_bytes` and `min_free_disk_ratio` of its size, the
//! oldest sealed segments are deleted (never the active one). The volume is the real one
//! (statvfs); the settings put the bar above or below what it has.

use crate::common;

use common::checkout;
use spanprof_store::store::{Store, StoreConfig};

#[test]
fn a_nearly_full_disk_deletes_the_oldest_segments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |bytes, ratio| StoreConfig {
        segment_max_bytes: 8 << 10,
        min_free_disk_bytes: bytes,
        min_free_disk_ratio: ratio,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg(0, 1.0)).unwrap();
    for _ in 0..800 {
        store.ingest(&[&checkout()], Vec::new()).unwrap();
    }
    let full = store.stats();
    assert!(full.segments > 3, "{full:?}");
    // Off.
    assert_eq!(store.enforce_retention(0).unwrap(), 0);
    drop(store);
    // Less available than the bytes but not than the ratio (0 %), then the other way round
    // (1 byte): the volume is not nearly full.
    for (bytes, ratio) in [(u64::MAX, 0.0), (1, 1.0)] {
        let (store, _) = Store::open(cfg(bytes, ratio)).unwrap();
        assert_eq!(store.enforce_retention(0).unwrap(), 0, "{bytes} {ratio}");
        assert_eq!(store.stats().samples, full.samples);
    }
    // Less than both: every sealed segment goes, the newest data stays and takes more.
    let (store, _) = Store::open(cfg(u64::MAX, 1.0)).unwrap();
    assert_eq!(
        store.enforce_retention(0).unwrap(),
        full.segments - 1,
        "{full:?}"
    );
    let left = store.stats();
    assert_eq!(left.segments, 1);
    assert!(0 < left.samples && left.samples < full.samples, "{left:?}");
    store.ingest(&[&checkout()], Vec::new()).unwrap();
    drop(store);
    let (store, _) = Store::open(cfg(0, 1.0)).unwrap();
    assert!(store.stats().samples > left.samples);
}
