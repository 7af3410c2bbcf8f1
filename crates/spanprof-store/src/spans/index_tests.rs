//! The span index: lookups, replacement, descendants over a multi-level tree and a cycle,
//! and retention.

use super::{SpanIndex, SpanRecord};

fn id(n: u8) -> [u8; 8] {
    [n; 8]
}

fn span(n: u8, parent: Option<u8>, trace: u8, start_ns: u64, end_ns: u64) -> SpanRecord {
    SpanRecord {
        trace_id: [trace; 16],
        span_id: id(n),
        parent_span_id: parent.map(id),
        name: format!("op{n}"),
        service: "svc".into(),
        start_ns,
        end_ns,
        ..Default::default()
    }
}

/// ```text
/// 1 ─┬─ 2 ─┬─ 4 ── 7
///    │     └─ 5
///    └─ 3 ── 6
/// ```
/// plus 8 in another trace, all starting in id order except 3 before 2.
fn tree() -> SpanIndex {
    let mut index = SpanIndex::new();
    for s in [
        span(1, None, 1, 0, 100),
        span(2, Some(1), 1, 20, 90),
        span(3, Some(1), 1, 10, 50),
        span(4, Some(2), 1, 30, 60),
        span(5, Some(2), 1, 40, 80),
        span(6, Some(3), 1, 15, 45),
        span(7, Some(4), 1, 35, 55),
        span(8, None, 2, 5, 6),
    ] {
        index.insert(s);
    }
    index
}

#[test]
fn spans_index_finds_descendants_on_a_multi_level_tree() {
    let index = tree();
    assert_eq!(index.len(), 8);
    // Breadth first, siblings by start time: 3 started before 2.
    assert_eq!(
        index.descendants(&id(1)),
        [id(3), id(2), id(6), id(4), id(5), id(7)]
    );
    assert_eq!(index.descendants(&id(2)), [id(4), id(5), id(7)]);
    assert_eq!(index.descendants(&id(7)), Vec::<[u8; 8]>::new());
    assert_eq!(index.descendants(&id(99)), Vec::<[u8; 8]>::new());
}

#[test]
fn spans_index_finds_what_is_below_any_of_several_spans_in_one_walk() {
    let index = tree();
    let set = |ids: &[u8]| {
        ids.iter()
            .map(|&i| id(i))
            .collect::<hashbrown::HashSet<_>>()
    };
    assert_eq!(index.below_any(&[id(2), id(3)]), set(&[4, 5, 6, 7]));
    // A root below another is found below it, as it is.
    assert_eq!(index.below_any(&[id(4), id(2)]), set(&[4, 5, 7]));
    assert_eq!(index.below_any(&[id(7), id(99)]), set(&[]));
    assert_eq!(index.below_any(&[id(1)]).len(), 6);
}

#[test]
fn spans_index_descendants_survive_cycles() {
    let mut index = SpanIndex::new();
    // 1 → 2 → 3 → 1, and 4 is its own parent.
    index.insert(span(1, Some(3), 1, 0, 10));
    index.insert(span(2, Some(1), 1, 1, 10));
    index.insert(span(3, Some(2), 1, 2, 10));
    index.insert(span(4, Some(4), 1, 3, 10));
    assert_eq!(index.descendants(&id(1)), [id(2), id(3)]);
    assert_eq!(index.descendants(&id(3)), [id(1), id(2)]);
    assert_eq!(index.descendants(&id(4)), Vec::<[u8; 8]>::new());
}

#[test]
fn spans_index_finds_children_whose_parent_has_not_arrived() {
    let mut index = SpanIndex::new();
    index.insert(span(2, Some(1), 1, 0, 10));
    index.insert(span(3, Some(2), 1, 0, 10));
    assert!(index.get(&id(1)).is_none());
    assert_eq!(index.descendants(&id(1)), [id(2), id(3)]);
}

#[test]
fn spans_index_lists_a_trace_in_start_order() {
    let index = tree();
    let order: Vec<u8> = index.trace(&[1; 16]).iter().map(|s| s.span_id[0]).collect();
    assert_eq!(order, [1, 3, 6, 2, 4, 7, 5]);
    assert_eq!(index.trace(&[2; 16]).len(), 1);
    assert!(index.trace(&[3; 16]).is_empty());
}

#[test]
fn spans_index_replaces_a_span_sent_again() {
    let mut index = tree();
    // Span 5 comes again under another parent and in another trace.
    index.insert(span(5, Some(3), 2, 41, 81));
    assert_eq!(index.len(), 8);
    assert_eq!(index.get(&id(5)).unwrap().start_ns, 41);
    assert_eq!(index.descendants(&id(2)), [id(4), id(7)]);
    assert_eq!(index.descendants(&id(3)), [id(6), id(5)]);
    assert_eq!(index.trace(&[1; 16]).len(), 6);
    assert_eq!(index.trace(&[2; 16]).len(), 2);
}

#[test]
fn spans_index_drops_spans_that_ended_before_the_cutoff() {
    let mut index = tree();
    index.remove_older_than(55);
    let mut left: Vec<u8> = index.iter().map(|s| s.span_id[0]).collect();
    left.sort_unstable();
    // Ends: 1:100 2:90 3:50 4:60 5:80 6:45 7:55 8:6; 55 itself stays.
    assert_eq!(left, [1, 2, 4, 5, 7]);
    assert!(index.get(&id(3)).is_none());
    assert_eq!(index.descendants(&id(1)), [id(2), id(4), id(5), id(7)]);
    assert_eq!(index.descendants(&id(3)), Vec::<[u8; 8]>::new());
    assert!(index.trace(&[2; 16]).is_empty());
    index.remove_older_than(u64::MAX);
    assert!(index.is_empty());
    assert_eq!(index.descendants(&id(1)), Vec::<[u8; 8]>::new());
}

/// Spans of equal resources, each sent with its own copy (one span a request), hold one.
#[test]
fn spans_index_keeps_each_resource_once() {
    let resource = |host: &str| -> crate::spans::SpanResource {
        vec![("host.name".to_owned(), host.to_owned())].into()
    };
    let mut index = SpanIndex::new();
    for (n, host) in [(1, "web-1"), (2, "web-1"), (3, "web-2")] {
        let mut s = span(n, None, n, 0, 10);
        s.resource = resource(host);
        index.insert(s);
    }
    // Spans of one request come with one list: the index keeps the one it holds.
    let one_request = resource("web-1");
    for n in [4, 5] {
        let mut s = span(n, None, n, 0, 10);
        s.resource = one_request.clone();
        index.insert(s);
    }
    let held = |n: u8| index.get(&id(n)).unwrap().resource.clone();
    assert!(std::sync::Arc::ptr_eq(&held(1), &held(2)));
    assert!(std::sync::Arc::ptr_eq(&held(1), &held(4)));
    assert!(std::sync::Arc::ptr_eq(&held(1), &held(5)));
    assert!(!std::sync::Arc::ptr_eq(&held(1), &held(3)));
    assert_eq!(held(3), resource("web-2"));
}
