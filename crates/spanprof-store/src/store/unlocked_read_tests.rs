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
