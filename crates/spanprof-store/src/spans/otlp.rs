//! Stored spans back to OTLP traces (for forwarding, for Tempo's trace API): one
//! `ResourceSpans` per service and resource (its `service.name` and the other attributes
//! stored), attributes as the string values they were stored as.

use super::SpanRecord;
use spanprof_format::otlp::{string_kv, Resource};
use spanprof_format::trace::span::Event;
use spanprof_format::trace::{ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status};

/// The OTLP export request carrying `spans`, grouped by resource in first-seen order.
pub fn export_request(spans: &[SpanRecord]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: by_resource(spans.iter().map(|s| (s, span(s)))),
    }
}

/// One `ResourceSpans` per service and resource, in first-seen order, each holding the
/// OTLP spans given for its records in the order given.
pub fn by_resource<'a>(
    spans: impl IntoIterator<Item = (&'a SpanRecord, Span)>,
) -> Vec<ResourceSpans> {
    let mut resource_spans: Vec<ResourceSpans> = Vec::new();
    let mut resources: Vec<&SpanRecord> = Vec::new();
    for (s, otlp) in spans {
        let same = |r: &&SpanRecord| r.service == s.service && r.resource == s.resource;
        let i = match resources.iter().position(same) {
            Some(i) => i,
            None => {
                resources.push(s);
                let mut attributes = vec![string_kv("service.name", &s.service)];
                attributes.extend(s.resource.iter().map(|(k, v)| string_kv(k, v)));
                resource_spans.push(ResourceSpans {
                    resource: Some(Resource {
                        attributes,
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        scope: None,
                        spans: Vec::new(),
                        schema_url: String::new(),
                    }],
                    schema_url: String::new(),
                });
                resource_spans.len() - 1
            }
        };
        resource_spans[i].scope_spans[0].spans.push(otlp);
    }
    resource_spans
}

fn span(s: &SpanRecord) -> Span {
    let status = (s.status_code != 0 || !s.status_message.is_empty()).then(|| Status {
        message: s.status_message.clone(),
        code: s.status_code,
    });
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        trace_state: String::new(),
        parent_span_id: s.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        flags: 0,
        name: s.name.clone(),
        kind: s.kind,
        start_time_unix_nano: s.start_ns,
        end_time_unix_nano: s.end_ns,
        attributes: s.attributes.iter().map(|(k, v)| string_kv(k, v)).collect(),
        dropped_attributes_count: 0,
        events: otlp_events(s),
        dropped_events_count: 0,
        links: Vec::new(),
        dropped_links_count: 0,
        status,
    }
}

/// A stored span's events as OTLP's, attributes as the string values they were stored as.
pub fn otlp_events(s: &SpanRecord) -> Vec<Event> {
    s.events
        .iter()
        .map(|e| Event {
            time_unix_nano: e.time_ns,
            name: e.name.clone(),
            attributes: e.attributes.iter().map(|(k, v)| string_kv(k, v)).collect(),
            dropped_attributes_count: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spans::{spans_from_otlp, SpanEvent};

    #[test]
    fn round_trips_through_the_span_ingest() {
        let records = vec![
            SpanRecord {
                trace_id: [1; 16],
                span_id: [2; 8],
                parent_span_id: Some([3; 8]),
                name: "GET /x".into(),
                service: "api".into(),
                start_ns: 10,
                end_ns: 20,
                kind: 2,
                status_code: 2,
                status_message: "boom".into(),
                attributes: vec![("http.route".into(), "/x".into())],
                resource: vec![("host.name".to_owned(), "web-1".to_owned())].into(),
                events: vec![SpanEvent {
                    time_ns: 15,
                    name: "exception".into(),
                    attributes: vec![("exception.message".into(), "boom".into())],
                }],
            },
            SpanRecord {
                trace_id: [4; 16],
                span_id: [5; 8],
                parent_span_id: None,
                name: "work".into(),
                service: "worker".into(),
                start_ns: 30,
                end_ns: 30,
                kind: 1,
                status_code: 0,
                status_message: String::new(),
                attributes: Vec::new(),
                resource: Default::default(),
                events: Vec::new(),
            },
            // The service of the first on another host: a resource of its own.
            SpanRecord {
                trace_id: [6; 16],
                span_id: [7; 8],
                name: "GET /y".into(),
                service: "api".into(),
                resource: vec![("host.name".to_owned(), "web-2".to_owned())].into(),
                ..Default::default()
            },
        ];
        let request = export_request(&records);
        assert_eq!(request.resource_spans.len(), 3);
        let (back, report) = spans_from_otlp(&request.resource_spans);
        assert_eq!(report.rejected, 0);
        assert_eq!(back, records);
    }
}
