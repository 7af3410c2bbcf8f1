//! Span pages straight from a store: a span stored in two segments is one match, orders and
//! their ties, records in page order, names offered, and substring regexes taken literally.

use spanprof_format::otlp::ProfilesData;

use super::test_data::unsynced_store;
use super::{contains_regex, SpanOrder};
use crate::spans::{CompareOp, SpanQuery, SpanRecord, TextCondition, TextField};

fn span(id: u8, trace: u8, name: &str, start_ns: u64, duration_ns: u64) -> SpanRecord {
    SpanRecord {
        trace_id: [trace; 16],
        span_id: [id; 8],
        parent_span_id: (id != trace).then_some([trace; 8]),
        name: name.into(),
        service: "shop".into(),
        start_ns,
        end_ns: start_ns + duration_ns,
        ..Default::default()
    }
}

fn spans() -> Vec<SpanRecord> {
    vec![
        span(1, 1, "GET /cart", 100, 50),
        span(2, 1, "SELECT cart", 110, 30),
        span(3, 3, "GET /a.b(c)", 90, 50),
        span(4, 3, "get axb", 95, 10),
    ]
}

#[test]
fn a_span_in_two_segments_is_one_match_and_its_trace_has_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = unsynced_store(dir.path());
    let none: [&ProfilesData; 0] = [];
    store.ingest(&none, spans()).unwrap();
    store.rotate().unwrap();
    store.ingest(&none, vec![spans()[0].clone()]).unwrap();
    let q = SpanQuery::default();
    let mut m = store.span_matches(&q).unwrap();
    assert_eq!((m.matches.len(), m.more), (4, false));
    let (groups, _) = store.trace_groups(&q, &m, None).unwrap();
    let cart = groups.iter().find(|g| g.trace_id == [1; 16]).unwrap();
    assert_eq!((cart.spans, cart.matched), (2, 2));
    assert_eq!(cart.root, Some(("GET /cart".into(), "shop".into())));
    assert_eq!((cart.start_ns, cart.duration_ns), (100, 50));
    // Duration ties go by start: 3 (90) before 1 (100); names in byte order.
    m.sort(SpanOrder::Duration, true);
    let order: Vec<u8> = m.matches.iter().map(|s| s.span_id[0]).collect();
    assert_eq!(order, [3, 1, 2, 4]);
    m.sort(SpanOrder::Name, false);
    let order: Vec<u8> = m.matches.iter().map(|s| s.span_id[0]).collect();
    assert_eq!(order, [3, 1, 2, 4]);
    m.sort(SpanOrder::Start, false);
    let order: Vec<u8> = m.matches.iter().map(|s| s.span_id[0]).collect();
    assert_eq!(order, [3, 4, 1, 2]);
    // Records come in the order asked, each once.
    let records = store.span_records(&q, &[[2; 8], [1; 8], [9; 8]]).unwrap();
    let got: Vec<u8> = records.iter().map(|s| s.span_id[0]).collect();
    assert_eq!(got, [2, 1]);
}

#[test]
fn names_offered_start_with_the_text_first_and_substrings_are_literal() {
    let dir = tempfile::tempdir().unwrap();
    let store = unsynced_store(dir.path());
    let none: [&ProfilesData; 0] = [];
    store.ingest(&none, spans()).unwrap();
    let q = SpanQuery::default();
    let offered = store.span_names(&q, "get", 10).unwrap();
    assert_eq!(offered.names, ["GET /a.b(c)", "GET /cart", "get axb"]);
    assert!(!offered.more);
    let cut = store.span_names(&q, "cart", 1).unwrap();
    assert_eq!((cut.names, cut.more), (vec!["GET /cart".to_owned()], true));
    // `.` and `(` are themselves: "a.b(" is in one name, not in "get axb".
    let contains = SpanQuery {
        conditions: vec![TextCondition::new(
            TextField::Name,
            CompareOp::Re,
            &contains_regex("A.B("),
        )
        .unwrap()],
        ..SpanQuery::default()
    };
    let found = store.span_matches(&contains).unwrap();
    let got: Vec<u8> = found.matches.iter().map(|s| s.span_id[0]).collect();
    assert_eq!(got, [3]);
}
