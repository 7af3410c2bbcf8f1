//! Span search filters and ordering, and duration percentiles at their edges.

use super::{
    duration_percentile, encode_spans, scan_spans, search, CompareOp, Longest, SpanQuery,
    SpanRecord, TextCondition, TextField,
};

fn span(n: u8, service: &str, name: &str, start_ns: u64, duration_ns: u64) -> SpanRecord {
    SpanRecord {
        trace_id: [1; 16],
        span_id: [n; 8],
        name: name.into(),
        service: service.into(),
        start_ns,
        end_ns: start_ns + duration_ns,
        ..Default::default()
    }
}

fn spans() -> Vec<SpanRecord> {
    let mut with_attrs = span(6, "api", "GET /a", 500, 40);
    with_attrs.attributes = vec![
        ("http.method".into(), "GET".into()),
        ("http.status_code".into(), "500".into()),
    ];
    vec![
        span(1, "api", "GET /a", 100, 10),
        span(2, "api", "GET /a", 200, 30),
        span(3, "api", "GET /b", 300, 30),
        span(4, "db", "SELECT", 150, 80),
        span(5, "db", "GET /a", 400, 20),
        with_attrs,
    ]
}

fn ids(found: &[&SpanRecord]) -> Vec<u8> {
    found.iter().map(|s| s.span_id[0]).collect()
}

fn query(edit: impl FnOnce(&mut SpanQuery)) -> SpanQuery {
    let mut q = SpanQuery::default();
    edit(&mut q);
    q
}

#[test]
fn spans_search_orders_longest_first_then_by_start() {
    let all = spans();
    // 2 and 3 both last 30 ns: 2 started first.
    assert_eq!(
        ids(&search(all.iter(), &SpanQuery::default())),
        [4, 6, 2, 3, 5, 1]
    );
    assert_eq!(ids(&search(all.iter(), &query(|q| q.limit = 3))), [4, 6, 2]);
    assert_eq!(ids(&search(all.iter(), &query(|q| q.limit = 0))), [0u8; 0]);
}

#[test]
fn spans_search_filters_by_service_name_and_duration() {
    let all = spans();
    let by = |edit: fn(&mut SpanQuery)| ids(&search(all.iter(), &query(edit)));
    assert_eq!(by(|q| q.service = Some("db".into())), [4, 5]);
    assert_eq!(by(|q| q.name = Some("GET /a".into())), [6, 2, 5, 1]);
    assert_eq!(
        by(|q| {
            q.service = Some("api".into());
            q.name = Some("GET /a".into());
        }),
        [6, 2, 1]
    );
    // Both duration bounds are inclusive.
    assert_eq!(by(|q| q.min_duration_ns = Some(30)), [4, 6, 2, 3]);
    assert_eq!(by(|q| q.max_duration_ns = Some(30)), [2, 3, 5, 1]);
    assert_eq!(
        by(|q| {
            q.min_duration_ns = Some(20);
            q.max_duration_ns = Some(30);
        }),
        [2, 3, 5]
    );
    assert_eq!(by(|q| q.service = Some("nope".into())), [0u8; 0]);
}

#[test]
fn spans_search_keeps_spans_overlapping_the_time_range() {
    let all = spans();
    // Span 1 runs [100, 110], 4 [150, 230], 2 [200, 230].
    let range = |from_ns, to_ns| {
        ids(&search(
            all.iter(),
            &query(|q| {
                q.from_ns = from_ns;
                q.to_ns = to_ns;
            }),
        ))
    };
    assert_eq!(range(110, 110), [1]);
    assert_eq!(range(111, 149), [0u8; 0]);
    assert_eq!(range(111, 150), [4]);
    assert_eq!(range(225, 235), [4, 2]);
    assert_eq!(range(0, 99), [0u8; 0]);
    assert_eq!(range(540, u64::MAX), [6]);
}

#[test]
fn spans_search_filters_by_status() {
    let mut all = spans();
    all[1].status_code = 2;
    all[5].status_code = 2;
    all[2].status_code = 1;
    let by = |code| ids(&search(all.iter(), &query(|q| q.status_code = Some(code))));
    assert_eq!(by(2), [6, 2]);
    assert_eq!(by(1), [3]);
    assert_eq!(by(0), [4, 5, 1]);
    let any = ids(&search(all.iter(), &SpanQuery::default()));
    assert_eq!(any.len(), all.len());
}

#[test]
fn spans_search_matches_attributes_exactly() {
    let all = spans();
    let with = |attrs: &[(&str, &str)]| {
        let attributes = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ids(&search(all.iter(), &query(|q| q.attributes = attributes)))
    };
    assert_eq!(with(&[("http.status_code", "500")]), [6]);
    assert_eq!(
        with(&[("http.status_code", "500"), ("http.method", "GET")]),
        [6]
    );
    assert_eq!(with(&[("http.status_code", "50")]), [0u8; 0]);
    assert_eq!(
        with(&[("http.status_code", "500"), ("http.method", "POST")]),
        [0u8; 0]
    );
}

#[test]
fn spans_search_compares_texts_with_each_operator() {
    let mut all = spans();
    all[1].status_code = 2;
    all[3].resource = vec![("host.name".to_string(), "db-1".to_string())].into();
    let mut get = span(7, "api", "GET /c", 600, 5);
    get.attributes = vec![("http.method".into(), "POST".into())];
    get.resource = vec![("http.method".into(), "GET".into())].into();
    all.push(get);
    let with = |field: TextField, op: CompareOp, value: &str| {
        let conditions = vec![TextCondition::new(field, op, value).unwrap()];
        ids(&search(all.iter(), &query(|q| q.conditions = conditions)))
    };
    use CompareOp::{Eq, Ne, Nre, Re};
    use TextField::{Attribute, Either, Name, Resource, Service, Status};
    assert_eq!(with(Name, Re, "GET /[ab]"), [6, 2, 3, 5, 1]);
    // Anchored: "GET" alone is no span's whole name.
    assert_eq!(with(Name, Re, "GET"), [0u8; 0]);
    assert_eq!(with(Name, Nre, "GET .*"), [4]);
    assert_eq!(with(Name, Ne, "GET /a"), [4, 3, 7]);
    assert_eq!(with(Service, Ne, "api"), [4, 5]);
    assert_eq!(with(Status, Eq, "error"), [2]);
    assert_eq!(with(Status, Ne, "error"), [4, 6, 3, 5, 1, 7]);
    // An attribute must be there for != and !~ too (as in Tempo).
    assert_eq!(with(Attribute("http.method".into()), Ne, "GET"), [7]);
    assert_eq!(with(Attribute("http.method".into()), Nre, "G.*"), [7]);
    assert_eq!(with(Attribute("http.status_code".into()), Re, "5.."), [6]);
    assert_eq!(with(Attribute("nope".into()), Ne, "x"), [0u8; 0]);
    assert_eq!(with(Resource("host.name".into()), Re, "db-.*"), [4]);
    assert_eq!(with(Resource("host.name".into()), Ne, "db-1"), [0u8; 0]);
    // Span 7 holds http.method twice (POST on the span, GET on its resource): `=` takes
    // either, `!=` neither.
    assert_eq!(with(Either("http.method".into()), Eq, "GET"), [6, 7]);
    assert_eq!(with(Either("http.method".into()), Ne, "GET"), [0u8; 0]);
    assert_eq!(with(Either("http.method".into()), Ne, "PUT"), [6, 7]);
}

#[test]
fn spans_search_orders_numbers_and_compares_kinds_and_status_messages() {
    let mut all = spans();
    let code = |n: u8, values: &[&str]| {
        let mut s = span(n, "api", "GET /n", 700 + u64::from(n), 1);
        s.attributes = values
            .iter()
            .map(|v| ("http.response.status_code".to_string(), v.to_string()))
            .collect();
        s
    };
    // 7: 503; 8: 200; 9: 499 and 500 (a key held twice); 10: not a number; 11: a double.
    all.extend([
        code(7, &["503"]),
        code(8, &["200"]),
        code(9, &["499", "500"]),
        code(10, &["teapot"]),
        code(11, &[" 500.5"]),
    ]);
    all[0].kind = 2;
    all[3].kind = 3;
    all[1].status_message = "connection reset".into();
    let key = || TextField::Attribute("http.response.status_code".into());
    let with = |field: TextField, op: CompareOp, value: &str| {
        let conditions = vec![TextCondition::new(field, op, value).unwrap()];
        let mut found = ids(&search(all.iter(), &query(|q| q.conditions = conditions)));
        found.sort();
        found
    };
    use CompareOp::{Eq, Ge, Gt, Le, Lt, Ne, Re};
    assert_eq!(with(key(), Ge, "500"), [7, 9, 11]);
    assert_eq!(with(key(), Gt, "500"), [7, 11]);
    assert_eq!(with(key(), Gt, "5e2"), [7, 11]);
    assert_eq!(with(key(), Lt, "500"), [8, 9]);
    assert_eq!(with(key(), Le, "200.0"), [8]);
    assert_eq!(with(key(), Lt, "-1"), [0u8; 0]);
    // Span 6's http.status_code is another key.
    assert_eq!(
        with(TextField::Attribute("http.status_code".into()), Ge, "500"),
        [6]
    );
    // Names are no numbers: no order holds for them.
    assert_eq!(with(TextField::Name, Gt, "0"), [0u8; 0]);
    for bad in ["fast", "NaN", "inf", ""] {
        let e = TextCondition::new(key(), Gt, bad).unwrap_err();
        assert!(e.to_string().contains("is not a number"), "{bad}: {e}");
    }
    assert!(TextCondition::new(key(), Re, "(").is_err());

    assert_eq!(with(TextField::Kind, Eq, "server"), [1]);
    assert_eq!(with(TextField::Kind, Re, "server|client"), [1, 4]);
    assert_eq!(
        with(TextField::Kind, Eq, "unspecified").len(),
        all.len() - 2
    );
    assert_eq!(with(TextField::StatusMessage, Re, "connection.*"), [2]);
    assert_eq!(with(TextField::StatusMessage, Ne, ""), [2]);

    for (text, op) in CompareOp::ALL {
        assert_eq!(CompareOp::parse(text), Some(op));
        assert_eq!(op.to_string(), text);
    }
    assert_eq!(CompareOp::parse("=="), None);
}

#[test]
fn spans_duration_percentile_uses_nearest_rank() {
    // Durations 10, 20, …, 100 ns for "op" in "api".
    let mut all: Vec<SpanRecord> = (1..=10)
        .map(|i| span(i, "api", "op", 0, u64::from(i) * 10))
        .collect();
    all.push(span(11, "db", "op", 0, 1000));
    let p = |p: f64| duration_percentile(all.iter(), "op", Some("api"), p);
    assert_eq!(p(0.0), Some(10));
    assert_eq!(p(10.0), Some(10));
    assert_eq!(p(10.1), Some(20));
    assert_eq!(p(50.0), Some(50));
    assert_eq!(p(90.0), Some(90));
    assert_eq!(p(99.0), Some(100));
    assert_eq!(p(100.0), Some(100));
    // Out of range or NaN: no answer rather than a guess.
    assert_eq!(p(-0.1), None);
    assert_eq!(p(100.1), None);
    assert_eq!(p(f64::NAN), None);
    // Any service: the db span joins in.
    assert_eq!(
        duration_percentile(all.iter(), "op", None, 100.0),
        Some(1000)
    );
    assert_eq!(duration_percentile(all.iter(), "op", None, 50.0), Some(60));
    // Nothing to rank.
    assert_eq!(duration_percentile(all.iter(), "other", None, 50.0), None);
    assert_eq!(duration_percentile([].iter(), "op", None, 50.0), None);
    let one = [span(1, "api", "op", 5, 7)];
    for q in [0.0, 1.0, 50.0, 100.0] {
        assert_eq!(duration_percentile(one.iter(), "op", None, q), Some(7));
    }
}

/// Searching views of encoded spans, keeping the longest as they come, answers what
/// `search` answers of the records, for every limit and filter, and a span offered twice
/// (sent into two segments) is kept once.
#[test]
fn spans_search_of_views_keeps_the_longest_once_each() {
    let all = spans();
    let mut block = Vec::new();
    encode_spans(&all, &mut block);
    let queries = [
        query(|_| {}),
        query(|q| q.name = Some("GET /a".into())),
        query(|q| q.min_duration_ns = Some(30)),
        query(|q| q.attributes = vec![("http.method".into(), "GET".into())]),
    ];
    for base in queries {
        for limit in 0..=7 {
            let q = SpanQuery {
                limit,
                ..base.clone()
            };
            let mut longest = Longest::new(limit);
            for _ in 0..2 {
                let flow = scan_spans(&block, |v| {
                    if q.matches_view(v) {
                        longest.offer(v);
                    }
                    std::ops::ControlFlow::Continue(())
                });
                assert_eq!(flow, Ok(std::ops::ControlFlow::Continue(())));
            }
            let kept = longest.into_sorted();
            assert_eq!(
                ids(&kept.iter().collect::<Vec<_>>()),
                ids(&search(all.iter(), &q)),
                "{q:?}"
            );
        }
    }
}
