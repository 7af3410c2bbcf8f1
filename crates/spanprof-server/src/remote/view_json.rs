//! Remote spans written straight to JSON: building each of a trace view's 1,000 spans as a
//! `serde_json::Value` map and then writing it took 3–11 ms, most of the view's own time over
//! the remote. The fields and their order (sorted, as a `Value` map writes them) are the
//! embedded answers' (`answer::span_fields`); a test holds the bytes equal.

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

/// One span over the remote, as the embedded answers write a span (`answer::span_fields` and
/// the totals), with `offset_ns` and `depth` in the trace view. The one writer of a remote
/// span: `views::span_json` is this as a map.
#[derive(serde::Serialize)]
pub(crate) struct ViewSpan<'a> {
    attributes: Pairs<'a>,
    coverage: &'static str,
    covered_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depth: Option<usize>,
    duration_ns: u64,
    events: Vec<Event<'a>>,
    has_samples: bool,
    kind: i32,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset_ns: Option<u64>,
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
    /// `span` with its own `total`, the type (`profile_type`, `unit`) as strings, and in a
    /// trace view its place: `offset_ns` from the trace's start and `depth`.
    pub(crate) fn new(
        span: &'a SpanRecord,
        (profile_type, unit): (Option<&'a str>, Option<&'a str>),
        total: u64,
        place: Option<(u64, usize)>,
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
            depth: place.map(|(_, depth)| depth),
            duration_ns: span.duration_ns(),
            events: span.events.iter().map(event).collect(),
            has_samples: total > 0,
            kind: span.kind,
            name: &span.name,
            offset_ns: place.map(|(offset, _)| offset),
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

    /// A span as the embedded answers write it (`answer::span_fields`) with the remote's
    /// totals, built as a `Value` map: what `ViewSpan` must write, byte for byte.
    fn want(
        span: &SpanRecord,
        t: Option<&ProfileTypeId>,
        total: u64,
    ) -> serde_json::Map<String, Value> {
        crate::answer::with_fields(
            crate::answer::span_fields(span),
            serde_json::json!({
                "self_ns": null,
                "profile_type": t.map(ToString::to_string),
                "unit": t.map(|t| t.sample_unit.as_str()),
                "total": total,
                "samples": null,
                "possible_samples": null,
                "covered_ns": null,
                "period": null,
                "has_samples": total > 0,
                "coverage": if total > 0 { SAMPLED } else { REMOTE_NO_SAMPLES },
                "sampled_ancestor": null,
            }),
        )
    }

    #[test]
    fn a_view_span_writes_what_the_embedded_answers_write() {
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
        let (id, unit) = (t.to_string(), t.sample_unit.clone());
        for total in [0, 7] {
            // The span view and span lists: no place in a trace.
            let plain = want(&span, Some(&t), total);
            assert_eq!(
                super::super::views::span_json(&span, Some(&t), total),
                plain
            );
            let got = ViewSpan::new(&span, (Some(&id), Some(&unit)), total, None);
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&Value::Object(plain.clone())).unwrap()
            );
            // The trace view.
            let mut placed = plain;
            placed.insert("offset_ns".into(), 40.into());
            placed.insert("depth".into(), 2.into());
            let got = ViewSpan::new(&span, (Some(&id), Some(&unit)), total, Some((40, 2)));
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&Value::Object(placed)).unwrap()
            );
        }
        let root = SpanRecord {
            parent_span_id: None,
            events: Vec::new(),
            ..span
        };
        let mut placed = want(&root, None, 0);
        assert_eq!(super::super::views::span_json(&root, None, 0), placed);
        placed.insert("offset_ns".into(), 0.into());
        placed.insert("depth".into(), 0.into());
        let got = ViewSpan::new(&root, (None, None), 0, Some((0, 0)));
        assert_eq!(
            serde_json::to_string(&got).unwrap(),
            serde_json::to_string(&Value::Object(placed)).unwrap()
        );
    }
}
