//! Several sample types in one scope: a profile with the samples of the one before it (the
//! next sample type of one pprof) is stored from that one's blocks with its own values; one
//! with other samples, even as many, is stored on its own.

use crate::common;

use common::{sample, DictionaryBuilder, S1, S2, T1};
use spanprof_store::store::{Selection, Store, StoreConfig};

fn flame(store: &Store, profile_type: &str, span: Option<[u8; 8]>) -> String {
    let sel = Selection {
        profile_type: Some(profile_type.into()),
        span_ids: span.into_iter().collect(),
        ..Default::default()
    };
    store.flame_graph(&sel).unwrap().0.to_collapsed()
}

#[test]
fn each_sample_type_keeps_its_own_values_and_stacks() {
    let mut b = DictionaryBuilder::new();
    let (main, work, gc, io) = (
        b.location(&["main.main"]),
        b.location(&["main.work"]),
        b.location(&["runtime.gc"]),
        b.location(&["main.io"]),
    );
    let (to_work, to_gc, to_io) = (b.stack(&[work, main]), b.stack(&[gc]), b.stack(&[io, main]));
    let (l1, l2) = (b.link(&T1, &S1), b.link(&T1, &S2));
    // Values that are not proportional across types, so a mixed-up value shows.
    let cpu = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![
            sample(to_work, l1, &[30]),
            sample(to_gc, 0, &[10]),
            sample(to_work, l2, &[7]),
        ],
    );
    let count = b.profile(
        ("samples", "count"),
        ("cpu", "nanoseconds"),
        vec![
            sample(to_work, l1, &[1]),
            sample(to_gc, 0, &[5]),
            sample(to_work, l2, &[2]),
        ],
    );
    // As many samples as the profile before, but others.
    let alloc = b.profile(
        ("alloc_space", "bytes"),
        ("space", "bytes"),
        vec![
            sample(to_io, l2, &[4096]),
            sample(to_gc, l1, &[512]),
            sample(to_work, 0, &[64]),
        ],
    );
    let data = b.finish(vec![vec![cpu, count, alloc]]);

    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(report.profiles, 3, "{:?}", report.problems);
    assert_eq!(report.samples, 9);

    assert_eq!(
        flame(&store, "cpu", None),
        "main.main;main.work 37\nruntime.gc 10\n"
    );
    assert_eq!(
        flame(&store, "samples", None),
        "main.main;main.work 3\nruntime.gc 5\n"
    );
    assert_eq!(
        flame(&store, "alloc_space", None),
        "main.main;main.io 4096\nmain.main;main.work 64\nruntime.gc 512\n"
    );
    // Per span, the links follow their samples in every type.
    assert_eq!(flame(&store, "cpu", Some(S2)), "main.main;main.work 7\n");
    assert_eq!(
        flame(&store, "samples", Some(S2)),
        "main.main;main.work 2\n"
    );
    assert_eq!(
        flame(&store, "alloc_space", Some(S2)),
        "main.main;main.io 4096\n"
    );
    assert_eq!(flame(&store, "alloc_space", Some(S1)), "runtime.gc 512\n");
}
