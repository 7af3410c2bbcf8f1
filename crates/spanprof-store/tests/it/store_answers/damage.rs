//! A sealed segment damaged on disk: reopening names the file, does not panic, and answers
//! from everything that is intact.

use std::os::unix::fs::FileExt;

use spanprof_store::store::Selection;

use super::fixture::*;

fn len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_damaged_sealed_segment_is_reported_and_the_rest_answered() {
    let dir = temp_dir();
    let copies: Vec<Copy> = (0..5)
        .map(|n| Copy::new(n, i64::from(n) * 15 * SEC, 1))
        .collect();
    // Segment A: c0. Segment B (sealed, damaged): c1, c2, c3. Segment C (active): c4.
    let (damaged_file, record) = {
        let store = open(dir.path());
        copies[0].ingest(&store);
        store.rotate().unwrap();
        let active = || {
            let segs = std::fs::read_dir(dir.path().join("segments")).unwrap();
            let mut paths: Vec<_> = segs.map(|e| e.unwrap().path()).collect();
            paths.sort();
            paths.pop().unwrap()
        };
        let b = active();
        copies[1].ingest(&store);
        let start = len(&b);
        copies[2].ingest(&store);
        let end = len(&b);
        copies[3].ingest(&store);
        store.rotate().unwrap();
        copies[4].ingest(&store);
        assert_ne!(active(), b);
        (b, start..end)
    };
    // Flip 64 bytes in the middle of c2's record, which is in the middle of the file.
    let middle = (record.start + record.end) / 2;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&damaged_file)
        .unwrap();
    let mut bytes = [0u8; 64];
    file.read_exact_at(&mut bytes, middle).unwrap();
    bytes.iter_mut().for_each(|b| *b ^= 0xa5);
    file.write_all_at(&bytes, middle).unwrap();
    drop(file);

    let (store, report) = open_with(spanprof_store::store::StoreConfig::new(dir.path()));
    let name = damaged_file.file_name().unwrap().to_str().unwrap();
    assert!(
        report.problems.iter().any(|p| p.contains(name)),
        "no problem names {name}: {:?}",
        report.problems
    );
    assert_eq!(report.segments, 3);
    // c2 is gone; the records before and after it in the same segment are intact.
    let kept = [&copies[0], &copies[1], &copies[3], &copies[4]];
    let total: i64 = kept.iter().map(|c| c.sums.cpu_total).sum();
    assert_eq!(cpu(&store, &Selection::default()), total);
    for c in kept {
        for name in [HEAVY, SORT, LIGHT] {
            let ids = c.named(name);
            let got = cpu(&store, &of_spans(ids.iter().map(|s| &s.span_id)));
            assert_eq!(got, c.cpu_named(name), "{name} of copy at {}", c.time_ns);
        }
        assert!(stored_span(&store, &c.span(HEAVY).span_id).is_some());
    }
    let lost: Vec<[u8; 8]> = copies[2].sums.by_span.keys().copied().collect();
    assert_eq!(
        cpu(&store, &of_spans(&lost)),
        0,
        "samples of the damaged record"
    );
    // Still writable, and the new data is answered.
    let c5 = Copy::new(5, 100 * SEC, 1);
    c5.ingest(&store);
    assert_eq!(
        cpu(&store, &Selection::default()),
        total + c5.sums.cpu_total
    );
}
