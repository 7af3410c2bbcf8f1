//! Stored spans back to OTLP traces, for forwarding: one `ResourceSpans` per service (its
//! `service.name`), attributes as the string values they were stored as.

use spanprof_format::otlp::{any_value::Value, AnyValue, KeyValue, Resource};
use spanprof_format::trace::{ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status};
use spanprof_store::spans::SpanRecord;

/// The OTLP export request carrying `spans`, grouped by service in first-seen order.
pub fn export_request(spans: &[SpanRecord]) -> ExportTraceServiceRequest {
    let mut resource_spans: Vec<ResourceSpans> = Vec::new();
    let mut services: Vec<&str> = Vec::new();
    for s in spans {
        let i = match services.iter().position(|&name| name == s.service) {
            Some(i) => i,
            None => {
                services.push(&s.service);
                resource_spans.push(ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![string_kv("service.name", &s.service)],
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
        resource_spans[i].scope_spans[0].spans.push(span(s));
    }
    ExportTraceServiceRequest { resource_spans }
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
        events: Vec::new(),
        dropped_events_count: 0,
        links: Vec::new(),
        dropped_links_count: 0,
        status,
    }
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_store::spans::spans_from_otlp;

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
            },
        ];
        let request = export_request(&records);
        assert_eq!(request.resource_spans.len(), 2);
        let (back, report) = spans_from_otlp(&request.resource_spans);
        assert_eq!(report.rejected, 0);
        assert_eq!(back, records);
    }
}
