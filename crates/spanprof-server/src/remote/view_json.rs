//! The trace view's spans written straight to JSON: building each of 1,000 spans as a
//! `serde_json::Value` map (`views::span_json`) and then writing it took 3–11 ms, most of
//! the view's own time over the remote. The fields and their order (sorted, as a `Value`
//! map writes them) are `span_json`'s; a test holds the two equal.

use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use spanprof_format::link::to_hex;
use spanprof_store::spans::{SpanEvent, SpanRecord};

use crate::answer::SAMPLED;

/// Key-value pairs as a JSON object: sorted by key, the last of a repeated key kept (as a
/// `Value` map collects them).
struct Pairs<'a>(&'a [(String, String)]);

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let sorted: BTreeMap<&str, &str> = self
            .0
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut map = s.serialize_map(Some(sorted.len()))?;
        for (k, v) in sorted {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct Event<'a> {
    attributes: Pairs<'a>,
    name: &'a str,
    time_ns: String,
}

/// The coverage of a span without samples over the remote backend: whether a profile watched
/// it cannot be told without the profile windows, which Pyroscope does not keep.
pub const REMOTE_NO_SAMPLES: &str =
    "no samples (the remote backend keeps no profile windows to say why)";

/// One span of the remote trace view, as `views::span_json` with `offset_ns` and `depth`.
#[derive(serde::Serialize)]
pub(crate) struct ViewSpan<'a> {
    attributes: Pairs<'a>,
    coverage: &'static str,
    covered_ns: Option<u64>,
    depth: usize,
    duration_ns: u64,
    events: Vec<Event<'a>>,
    has_samples: bool,
    kind: i32,
    name: &'a str,
    offset_ns: u64,
    parent_span_id: Option<String>,
    period: Option<u64>,
    possible_samples: Option<u64>,
    profile_type: Option<&'a str>,
    resource: Pairs<'a>,
    sampled_ancestor: Option<String>,
    samples: Option<u64>,
    self_ns: Option<u64>,
    service: &'a str,
    span_id: String,
    start_ns: String,
    status_code: i32,
    status_message: &'a str,
    total: u64,
    trace_id: String,
    unit: Option<&'a str>,
}

impl<'a> ViewSpan<'a> {
    /// `span` with its own `total`, `offset_ns` from the trace's start and `depth`; the type
    /// (`profile_type`, `unit`) as strings.
    pub(crate) fn new(
        span: &'a SpanRecord,
        (profile_type, unit): (Option<&'a str>, Option<&'a str>),
        total: u64,
        offset_ns: u64,
        depth: usize,
    ) -> Self {
        let event = |e: &'a SpanEvent| Event {
            attributes: Pairs(&e.attributes),
            name: &e.name,
            time_ns: e.time_ns.to_string(),
        };
        ViewSpan {
            attributes: Pairs(&span.attributes),
            coverage: if total > 0 {
                SAMPLED
            } else {
                REMOTE_NO_SAMPLES
            },
            covered_ns: None,
            depth,
            duration_ns: span.duration_ns(),
            events: span.events.iter().map(event).collect(),
            has_samples: total > 0,
            kind: span.kind,
            name: &span.name,
            offset_ns,
            parent_span_id: span.parent_span_id.map(|p| to_hex(&p)),
            period: None,
            possible_samples: None,
            profile_type,
            resource: Pairs(&span.resource),
            sampled_ancestor: None,
            samples: None,
            self_ns: None,
            service: &span.service,
            span_id: to_hex(&span.span_id),
            start_ns: span.start_ns.to_string(),
            status_code: span.status_code,
            status_message: &span.status_message,
            total,
            trace_id: to_hex(&span.trace_id),
            unit,
        }
    }
}

/// The remote trace view (`/api/v1/traces/{id}`), its fields in a `Value` map's order.
#[derive(serde::Serialize)]
pub struct TraceView<'a> {
    pub(crate) duration_ns: u64,
    pub(crate) profile_type: Option<&'a str>,
    pub(crate) remote: Value,
    pub(crate) samples: Option<u64>,
    pub(crate) spans: Vec<ViewSpan<'a>>,
    pub(crate) spans_total: usize,
    pub(crate) start_ns: String,
    pub(crate) total: u64,
    pub(crate) trace_id: String,
    pub(crate) truncated: bool,
    pub(crate) unit: Option<&'a str>,
    pub(crate) unknown_spans_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::profile_type::ProfileTypeId;

    #[test]
    fn a_view_span_writes_what_span_json_writes() {
        let t = ProfileTypeId::parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds").unwrap();
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let span = SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: Some([3; 8]),
            name: "GET \"/x\"<b>".into(),
            service: "svc".into(),
            start_ns: 100,
            end_ns: 250,
            kind: 2,
            status_code: 1,
            status_message: "fine".into(),
            // Unsorted and repeated: a map sorts them and keeps the last.
            attributes: pairs(&[("z", "1"), ("a", "2"), ("z", "3")]),
            resource: pairs(&[("service.name", "svc")]).into(),
            events: vec![SpanEvent {
                time_ns: 120,
                name: "e".into(),
                attributes: pairs(&[("k", "v")]),
            }],
        };
        for total in [0, 7] {
            let mut want = super::super::views::span_json(&span, Some(&t), total);
            want.insert("offset_ns".into(), 40.into());
            want.insert("depth".into(), 2.into());
            let (id, unit) = (t.to_string(), t.sample_unit.clone());
            let got = ViewSpan::new(&span, (Some(&id), Some(&unit)), total, 40, 2);
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&Value::Object(want)).unwrap()
            );
        }
        let root = SpanRecord {
            parent_span_id: None,
            events: Vec::new(),
            ..span
        };
        let mut want = super::super::views::span_json(&root, None, 0);
        want.insert("offset_ns".into(), 0.into());
        want.insert("depth".into(), 0.into());
        let got = ViewSpan::new(&root, (None, None), 0, 0, 0);
        assert_eq!(
            serde_json::to_string(&got).unwrap(),
            serde_json::to_string(&Value::Object(want)).unwrap()
        );
    }
}
