//! A call whose record would be larger than a record may be is written as several records,
//! its requests split in halves, with the same answers as one record and each refused
//! profile named with the request it came in.

use std::path::Path;

use spanprof_format::otlp::{string_kv, ProfilesData, Resource};
use spanprof_format::{pprof, Batch, LinkConfig};

use super::ingest::MAX_RECORD;
use super::{IngestReport, Selection, Store, StoreConfig};
use crate::spans::SpanRecord;

const CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.sync = false;
    c
}

/// Five requests, a fifth of the profile each, for services s0..s4; the one at `bad` names a
/// stack its dictionary does not hold.
fn requests(bad: usize) -> Vec<ProfilesData> {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    (0..5)
        .map(|i| {
            let mut part = p.clone();
            part.sample = p.sample.iter().skip(i).step_by(5).cloned().collect();
            let mut batch = Batch::new(Some(LinkConfig::default()));
            let resource = Resource {
                attributes: vec![string_kv("service.name", &format!("s{i}"))],
                ..Default::default()
            };
            batch.add_pprof(&part, resource).unwrap();
            let mut data = batch.finish().0;
            if i == bad {
                let profile = &mut data.resource_profiles[0].scope_profiles[0].profiles[0];
                profile.samples[0].stack_index = 1 << 30;
            }
            data
        })
        .collect()
}

fn spans() -> Vec<SpanRecord> {
    (1..=3u8)
        .map(|i| SpanRecord {
            trace_id: [i; 16],
            span_id: [i; 8],
            name: format!("span {i}"),
            start_ns: 1,
            end_ns: 2,
            ..Default::default()
        })
        .collect()
}

fn ingest(dir: &Path, max_record: usize) -> (IngestReport, u64) {
    let (store, _) = Store::open(config(dir)).unwrap();
    let data = requests(3);
    let refs: Vec<&ProfilesData> = data.iter().collect();
    let before = store.log.active_bytes();
    MAX_RECORD.with(|m| m.set(max_record));
    let report = store.ingest(&refs, spans());
    MAX_RECORD.with(|m| m.set(crate::log::MAX_RECORD_LEN as usize));
    (report.unwrap(), store.log.active_bytes() - before)
}

/// The ingest records in the log.
fn ingest_records(store: &Store) -> usize {
    let mut n = 0;
    for segment in store.log.segments() {
        store
            .log
            .scan(segment.id, |_, payload| {
                n += usize::from(payload.first() == Some(&super::INGEST));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    n
}

/// Per service, the collapsed flame graph; and the spans.
fn answers(store: &Store) -> (Vec<String>, Vec<Option<SpanRecord>>) {
    let flames = (0..5)
        .map(|i| {
            let sel = Selection {
                service: Some(format!("s{i}")),
                ..Default::default()
            };
            store.flame_graph(&sel).unwrap().0.to_collapsed()
        })
        .collect();
    let spans = spans()
        .iter()
        .map(|s| store.span(&s.span_id).unwrap())
        .collect();
    (flames, spans)
}

#[test]
fn a_record_too_large_is_written_in_halves_with_the_same_answers() {
    let whole = tempfile::tempdir().unwrap();
    let (one, one_bytes) = ingest(whole.path(), usize::MAX);
    let split = tempfile::tempdir().unwrap();
    // Smaller than any one request's record: split down to single requests.
    let (many, many_bytes) = ingest(split.path(), 1_000);
    for r in [&one, &many] {
        // Two sample types a request: the bad one refuses the first only.
        assert_eq!(
            (r.profiles, r.rejected_profiles),
            (9, 1),
            "{:?}",
            r.problems
        );
        assert_eq!(r.problem_sources, [3], "the refused profile's request");
        assert_eq!(r.spans, 3);
    }
    assert_eq!(many.samples, one.samples);
    assert_eq!(many.new_series, one.new_series);
    assert_eq!(many.problems, one.problems);
    // Five records instead of one: more headers and symbol deltas, not the data twice.
    assert!(
        many_bytes > one_bytes && many_bytes < one_bytes * 2,
        "{many_bytes} B split, {one_bytes} B in one"
    );
    let want = answers(&Store::open(config(whole.path())).unwrap().0);
    assert!(want.0.iter().all(|f| f.len() > 100));
    assert!(want.1.iter().all(Option::is_some));
    let (store, report) = Store::open(config(split.path())).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(answers(&store) == want, "answers of the split call differ");
}

#[test]
fn spans_too_many_for_one_record_are_written_in_halves() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(config(dir.path())).unwrap();
    let data = requests(usize::MAX);
    // One request and 1,000 spans of about 100 bytes each in 2 KB records: the spans are
    // split until each record fits (or holds the request and one span): 67 records.
    let spans: Vec<SpanRecord> = (0..1_000u32)
        .map(|i| SpanRecord {
            trace_id: [7; 16],
            span_id: [&i.to_be_bytes()[..], &[1; 4]].concat().try_into().unwrap(),
            name: format!("span {i:060}"),
            start_ns: 1,
            end_ns: 2,
            ..Default::default()
        })
        .collect();
    MAX_RECORD.with(|m| m.set(2_000));
    let report = store.ingest(&[&data[0]], spans.clone());
    MAX_RECORD.with(|m| m.set(crate::log::MAX_RECORD_LEN as usize));
    let report = report.unwrap();
    assert_eq!((report.profiles, report.spans), (2, 1_000));
    let records = ingest_records(&store);
    assert!((32..=128).contains(&records), "{records} records");
    drop(store);
    let (store, _) = Store::open(config(dir.path())).unwrap();
    assert_eq!(store.stats().spans, 1_000);
    assert_eq!(store.trace(&[7; 16]).unwrap().len(), 1_000);
    assert_eq!(
        store.span(&spans[999].span_id).unwrap().as_ref(),
        Some(&spans[999])
    );
}
