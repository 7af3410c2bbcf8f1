//! What the store says about its data: profile types, services over time ranges, series and
//! their labels, and the spans themselves.

use spanprof_store::spans::{SpanQuery, SpanRecord};
use spanprof_store::store::Selection;

use super::fixture::*;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn metadata_profile_types_services_series_and_labels() {
    let dir = temp_dir();
    let store = open(dir.path());
    let c = Copy::new(0, 0, 1);
    c.ingest(&store);
    let types: Vec<String> = store
        .profile_types(None)
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert!(types.contains(&CPU_TYPE.to_owned()), "{types:?}");
    assert!(types.contains(&COUNT_TYPE.to_owned()), "{types:?}");
    assert_eq!(types.len(), 2, "{types:?}");
    assert_eq!(store.profile_types(Some(SERVICE)).len(), 2);
    assert!(store.profile_types(Some("other")).is_empty());

    // Services over time ranges: the profile covers [t, t + 10.18 s], and is taken at t (a
    // range holds the profiles taken in it, as the profile queries count them).
    let t = c.time_ns;
    let end = t + c.pprof.duration_nanos;
    assert_eq!(store.services(0, 0), [SERVICE]);
    assert_eq!(
        store.services(t - 100 * SEC, t - 50 * SEC),
        Vec::<String>::new()
    );
    assert_eq!(
        store.services(t - SEC, t),
        Vec::<String>::new(),
        "to_ns is exclusive"
    );
    assert_eq!(store.services(t, t + 1), [SERVICE]);
    assert_eq!(
        store.services(t + 5 * SEC, t + 6 * SEC),
        Vec::<String>::new(),
        "inside the window, after it began"
    );
    assert_eq!(
        store.services(end + SEC, end + 60 * SEC),
        Vec::<String>::new()
    );

    // Series: five label sets per type (span names under both conventions, goapp's worker
    // label, and none); never a span or trace id.
    let base = [
        ("__name__", "process_cpu"),
        ("__profile_type__", CPU_TYPE),
        (ENVIRONMENT.0, ENVIRONMENT.1),
        ("service_name", SERVICE),
    ];
    let with = |extra: &[(&str, &str)]| {
        let mut l: Vec<(&str, &str)> = base.to_vec();
        l.extend_from_slice(extra);
        labels(&l)
    };
    let mut want = vec![
        with(&[]),
        with(&[("otel.profile.span_name", HEAVY)]),
        with(&[("otel.profile.span_name", SORT)]),
        with(&[("span_name", LIGHT)]),
        with(&[("worker", "contention-0")]),
    ];
    want.sort();
    let cpu_sel = Selection {
        profile_type: Some(CPU_TYPE.into()),
        ..Default::default()
    };
    assert_eq!(store.series(&cpu_sel).unwrap(), want);
    assert_eq!(
        store.series(&Selection::default()).unwrap().len(),
        10,
        "both types"
    );
    let before = Selection {
        from_ns: t - 100 * SEC,
        to_ns: t - 50 * SEC,
        ..Default::default()
    };
    assert!(store.series(&before).unwrap().is_empty());
    let sorted = Selection {
        label_selector: Some(r#"{otel.profile.span_name="sortWork"}"#.into()),
        ..Default::default()
    };
    let mut types_of_sort: Vec<String> = store
        .series(&sorted)
        .unwrap()
        .iter()
        .map(|l| {
            l.iter()
                .find(|(k, _)| k == "__profile_type__")
                .unwrap()
                .1
                .clone()
        })
        .collect();
    types_of_sort.sort();
    assert_eq!(types_of_sort, [CPU_TYPE, COUNT_TYPE]);

    let all = Selection::default();
    assert_eq!(
        store.label_names(&all).unwrap(),
        [
            "__name__",
            "__profile_type__",
            ENVIRONMENT.0,
            "otel.profile.span_name",
            "service_name",
            "span_name",
            "worker",
        ]
    );
    assert_eq!(
        store.label_values(&all, "otel.profile.span_name").unwrap(),
        [HEAVY, SORT]
    );
    assert_eq!(store.label_values(&all, "span_name").unwrap(), [LIGHT]);
    assert_eq!(store.label_values(&all, "service_name").unwrap(), [SERVICE]);
    assert_eq!(
        store.label_values(&all, "__profile_type__").unwrap(),
        [CPU_TYPE, COUNT_TYPE]
    );
    for id_key in [
        "otel.profile.span_id",
        "span_id",
        "trace_id",
        "otel.profile.trace_id",
    ] {
        assert!(
            store.label_values(&all, id_key).unwrap().is_empty(),
            "{id_key}"
        );
    }
    assert!(store.label_names(&before).unwrap().is_empty());

    // Bounded answers: what fits the byte budget, and whether anything was left out.
    let (values, cut) = store
        .label_values_limited(&all, "otel.profile.span_name", usize::MAX)
        .unwrap();
    assert_eq!(values, [HEAVY, SORT]);
    assert!(!cut);
    let (values, cut) = store
        .label_values_limited(&all, "otel.profile.span_name", HEAVY.len().max(SORT.len()))
        .unwrap();
    assert!(cut && values.len() == 1, "{values:?}");
    let (series, cut) = store.series_limited(&all, usize::MAX).unwrap();
    assert!(!cut && series == store.series(&all).unwrap());
    let (series, cut) = store.series_limited(&all, 1).unwrap();
    assert!(cut && series.is_empty(), "{series:?}");

    // A query past its time stops in the store's scans, naming why.
    use spanprof_store::query_limit::{within, QueryLimit, Stopped};
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let expired = QueryLimit::new(std::time::Duration::ZERO, flag);
    for answer in [
        within(expired.clone(), || store.flame_graph(&all).map(|_| ())),
        within(expired, || store.series(&all).map(|_| ())),
    ] {
        match answer {
            Err(spanprof_store::store::StoreError::Stopped(Stopped::Deadline(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(store.flame_graph(&all).is_ok(), "outside the limit");
}

#[test]
fn metadata_spans_and_traces_meet_their_samples() {
    let dir = temp_dir();
    let store = open(dir.path());
    let c = Copy::new(0, 0, 1);
    c.ingest(&store);
    assert_eq!(store.stats().spans, c.spans.len());
    let heavy = c.span(HEAVY);
    assert_eq!(stored_span(&store, &heavy.span_id).as_ref(), Some(heavy));
    let mut trace: Vec<_> = c
        .spans
        .iter()
        .filter(|s| s.trace_id == heavy.trace_id)
        .collect();
    trace.sort_by_key(|s| (s.start_ns, s.span_id));
    assert_eq!(
        stored_trace(&store, &heavy.trace_id)
            .iter()
            .collect::<Vec<_>>(),
        trace
    );
    // Every span id of the samples has samples; the two idle spans have none.
    for id in c.sums.by_span.keys() {
        assert!(has_samples(&store, id), "{}", hex(id));
    }
    assert!(!has_samples(&store, &c.span(IDLE).span_id));
    let found = store
        .search_spans(&SpanQuery {
            name: Some(LIGHT.into()),
            service: Some(SERVICE.into()),
            ..Default::default()
        })
        .expect("search spans");
    assert_eq!(found.len(), c.named(LIGHT).len());
    assert!(found
        .windows(2)
        .all(|w| w[0].duration_ns() >= w[1].duration_ns()));
    // The same spans visited in place, twice once sent again into another segment, and no
    // further once the visitor stops.
    store.rotate().unwrap();
    store
        .ingest(&[], c.spans.clone())
        .expect("spans sent again");
    let query = SpanQuery {
        name: Some(LIGHT.into()),
        ..Default::default()
    };
    let mut visited = Vec::new();
    store
        .for_each_segment_span(&query, |s| {
            if query.matches_view(s) {
                visited.push(s.span_id);
            }
            std::ops::ControlFlow::Continue(())
        })
        .expect("visit spans");
    visited.sort_unstable();
    let mut expected: Vec<_> = found.iter().flat_map(|s| [s.span_id, s.span_id]).collect();
    expected.sort_unstable();
    assert_eq!(visited, expected);
    let mut seen = 0;
    store
        .for_each_segment_span(&query, |_| {
            seen += 1;
            std::ops::ControlFlow::Break(())
        })
        .expect("visit one span");
    assert_eq!(seen, 1);
}

#[test]
fn metadata_segment_spans_and_traces_outside_a_time_range() {
    let dir = temp_dir();
    let store = open(dir.path());
    let span = |trace: u8, id: u8, start_s: u64| SpanRecord {
        trace_id: [trace; 16],
        span_id: [id; 8],
        name: format!("s{id}"),
        service: SERVICE.into(),
        start_ns: start_s * 1_000_000_000,
        end_ns: start_s * 1_000_000_000 + 1_000,
        ..Default::default()
    };
    // Trace 1 starts in an old segment and goes on in the next; trace 2 is only in the next.
    store.ingest(&[], vec![span(1, 1, 100)]).unwrap();
    store.rotate().unwrap();
    store
        .ingest(&[], vec![span(1, 2, 5_000), span(2, 3, 5_000)])
        .unwrap();
    store.rotate().unwrap();
    let recent = SpanQuery {
        from_ns: 4_000 * 1_000_000_000,
        to_ns: 6_000 * 1_000_000_000,
        ..Default::default()
    };
    let mut visited = Vec::new();
    store
        .for_each_segment_span(&recent, |s| {
            visited.push(s.span_id[0]);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    visited.sort_unstable();
    assert_eq!(visited, [2, 3], "only the segment of the time range");
    assert!(store.trace_may_be_outside(&[1; 16], &recent));
    assert!(!store.trace_may_be_outside(&[2; 16], &recent));
    assert!(!store.trace_may_be_outside(&[1; 16], &SpanQuery::default()));
}

/// A visit of every segment's spans (a span search) holds no lock while it goes: an ingest
/// started from inside it finishes (it waited for the whole search, seconds on a large
/// store, stalling every receiver), and sees the segments as they are.
#[test]
fn metadata_span_visits_let_ingest_go_on() {
    let dir = temp_dir();
    let store = std::sync::Arc::new(open(dir.path()));
    let span = |id: u8| SpanRecord {
        trace_id: [id; 16],
        span_id: [id; 8],
        name: "s".into(),
        service: SERVICE.into(),
        start_ns: 1_000_000_000,
        end_ns: 2_000_000_000,
        ..Default::default()
    };
    for id in 1..=3 {
        store.ingest(&[], vec![span(id)]).unwrap();
        store.rotate().unwrap();
    }
    let mut visited = 0;
    store
        .for_each_segment_span(&SpanQuery::default(), |_| {
            visited += 1;
            if visited == 1 {
                let writer = std::sync::Arc::clone(&store);
                let (done, finished) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = done.send(writer.ingest(&[], vec![span(9)]).is_ok());
                });
                assert_eq!(
                    finished.recv_timeout(std::time::Duration::from_secs(30)),
                    Ok(true),
                    "an ingest waited for the span visit"
                );
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert!(visited >= 3, "{visited}");
    assert_eq!(
        stored_span(&store, &[9; 8]).map(|s| s.span_id),
        Some([9; 8])
    );
}
