//! Queries read a selection's blocks with the store's state unlocked (so that ingest goes on
//! meanwhile): a segment deleted between the selection's resolve and its read (by retention
//! or compaction) leaves its blocks out of the answer instead of failing it.

use super::test_data::{go_cpu_request, unsynced_store};
use super::{Selection, Store};

#[test]
fn blocks_of_a_segment_deleted_after_the_resolve_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = unsynced_store(dir.path());
    let data = go_cpu_request("api");
    // The same profile in two segments.
    store.ingest(&[&data], Vec::new()).unwrap();
    store.rotate().unwrap();
    store.ingest(&[&data], Vec::new()).unwrap();
    let sel = Selection {
        service: Some("api".into()),
        ..Default::default()
    };
    let r = store.state.read().unwrap().resolve(&sel).unwrap();
    let samples = |store: &Store| {
        let mut n = 0u64;
        store.for_each_sample(&r, |_, _| n += 1).map(|()| n)
    };
    let both = samples(&store).unwrap();
    let first = r
        .blocks
        .iter()
        .map(|(index, _)| index.segment)
        .min()
        .unwrap();
    assert!(r.blocks.iter().any(|(index, _)| index.segment != first));
    store.log.delete_segment(first).unwrap();
    let after = samples(&store).expect("the deleted segment's blocks are skipped");
    assert!(after > 0 && after * 2 == both, "{after} of {both}");
}

/// A series scan (a label regex over every series: 40 s over 10,000 long values) holds the
/// the store's lock only to copy a chunk's keys: while it matches their labels an ingest gets
/// in and ends, for label values and for a selection's resolve alike. With the lock held
/// while labels are matched the ingest waits and the hook below fails at its deadline.
#[test]
fn ingest_ends_while_a_series_scan_matches_labels() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(unsynced_store(dir.path()));
    let services = 3 * super::query::SERIES_CHUNK;
    for i in 0..services {
        let data = go_cpu_request(&format!("svc{i}"));
        store.ingest(&[&data], Vec::new()).unwrap();
    }
    // Ingests while the next chunks are matched, while any are left to do; and those done.
    let (to_do, ingested) = (Arc::new(AtomicUsize::new(2)), Arc::new(AtomicUsize::new(0)));
    let (s, left, done) = (
        Arc::clone(&store),
        Arc::clone(&to_do),
        Arc::clone(&ingested),
    );
    super::query::WHILE_MATCHING.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            if left.load(Ordering::SeqCst) == 0 {
                return;
            }
            left.fetch_sub(1, Ordering::SeqCst);
            let s = Arc::clone(&s);
            let n = done.load(Ordering::SeqCst);
            let late = std::thread::spawn(move || {
                let data = go_cpu_request(&format!("late{n}"));
                s.ingest(&[&data], Vec::new()).unwrap();
            });
            let deadline = Instant::now() + Duration::from_secs(30);
            while !late.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "an ingest waited for the series scan"
                );
                std::thread::park_timeout(Duration::from_millis(1));
            }
            late.join().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        }));
    });
    let values = store
        .label_values(&Selection::default(), "service_name")
        .unwrap();
    let after_values = ingested.load(Ordering::SeqCst);
    assert_eq!(after_values, 2, "ingests while matching");
    assert!(values.len() >= services, "{}", values.len());
    let sel = Selection {
        label_selector: Some("{service_name=~\"svc.*1\"}".into()),
        ..Default::default()
    };
    to_do.store(2, Ordering::SeqCst);
    assert!(store.profile_times(&sel).unwrap() > 0);
    assert_eq!(ingested.load(Ordering::SeqCst), 4);
    super::query::WHILE_MATCHING.with(|h| h.borrow_mut().take());
}
