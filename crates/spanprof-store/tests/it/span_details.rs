//! A span's resource attributes (host, process, version) and events are stored with it and
//! read back the same wherever the span lives: the active segment, the log replayed at open, a sealed
//! segment, and a segment compaction wrote.

use std::path::Path;
use std::sync::Arc;

use spanprof_format::otlp::{string_kv, AnyValue, KeyValue, Resource};
use spanprof_format::trace::span::Event;
use spanprof_format::trace::{ResourceSpans, ScopeSpans, Span};
use spanprof_store::spans::{spans_from_otlp, SpanRecord};
use spanprof_store::store::{Store, StoreConfig};

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.sync = false;
    c
}

/// `spans` spans (ids from `first`) of one trace, from a resource on `host`.
fn resource_spans(host: &str, first: u8, spans: u8) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                string_kv("host.name", host),
                string_kv("service.name", "checkout"),
                KeyValue {
                    key: "process.pid".into(),
                    value: Some(AnyValue {
                        value: Some(spanprof_format::otlp::any_value::Value::IntValue(4242)),
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans: (first..first + spans)
                .map(|i| Span {
                    trace_id: vec![first; 16],
                    span_id: vec![i; 8],
                    name: format!("op {i}"),
                    start_time_unix_nano: 1_000 + u64::from(i),
                    end_time_unix_nano: 2_000,
                    events: vec![Event {
                        time_unix_nano: 1_500,
                        name: "retry".into(),
                        attributes: vec![string_kv("attempt", "2")],
                        dropped_attributes_count: 0,
                    }],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        schema_url: String::new(),
    }
}

fn host_of(span: &SpanRecord) -> Vec<(&str, &str)> {
    span.resource
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// What the store answers for both traces: each span's service and resource, and whether
/// the spans of one trace share one resource list.
fn check(store: &Store, when: &str) {
    for (first, host) in [(1u8, "web-1"), (10, "web-2")] {
        let trace = store.trace(&[first; 16]).unwrap();
        assert_eq!(trace.len(), 3, "{when}: spans of trace {first}");
        for span in &trace {
            assert_eq!(span.service, "checkout", "{when}");
            assert_eq!(
                host_of(span),
                [("host.name", host), ("process.pid", "4242")],
                "{when}: resource of span {:?}",
                span.span_id
            );
        }
        for span in &trace {
            let e = &span.events[..];
            assert!(
                e.len() == 1
                    && (e[0].time_ns, e[0].name.as_str()) == (1_500, "retry")
                    && e[0].attributes == [("attempt".to_owned(), "2".to_owned())],
                "{when}: events of span {:?}: {e:?}",
                span.span_id
            );
        }
        let one = store.span(&[first + 1; 8]).unwrap().expect("the span");
        assert_eq!(one.resource, trace[0].resource, "{when}: span by id");
    }
}

#[test]
fn span_resources_and_events_survive_replay_sealing_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = Store::open(config(dir.path())).unwrap();
        // Two requests from web-1 (one span each is how many SDKs send), one from web-2.
        for request in [
            vec![resource_spans("web-1", 1, 2)],
            vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: resource_spans("web-1", 1, 3).scope_spans[0].spans[2..].to_vec(),
                    ..Default::default()
                }],
                ..resource_spans("web-1", 1, 0)
            }],
            vec![resource_spans("web-2", 10, 3)],
        ] {
            let (spans, report) = spans_from_otlp(&request);
            assert_eq!(report.rejected, 0);
            store.ingest(&[], spans).unwrap();
        }
        check(&store, "in the active segment");
        // The spans of web-1's two requests hold one list.
        let trace = store.trace(&[1; 16]).unwrap();
        assert!(Arc::ptr_eq(&trace[0].resource, &trace[2].resource));
    }
    {
        let (store, _) = Store::open(config(dir.path())).unwrap();
        check(&store, "after replaying the log");
        store.rotate().unwrap();
        check(&store, "in a sealed segment");
        // A second small segment, for compaction to merge with the first.
        let (spans, _) = spans_from_otlp(&[resource_spans("web-3", 20, 1)]);
        store.ingest(&[], spans).unwrap();
        store.rotate().unwrap();
        let report = store.compact(u64::MAX).unwrap();
        assert_eq!(report.merged_segments, 2, "{report:?}");
        check(&store, "after compaction");
    }
    let (store, _) = Store::open(config(dir.path())).unwrap();
    check(&store, "after reopening the compacted store");
}
