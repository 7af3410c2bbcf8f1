//! OTLP spans → [`SpanRecord`]s: ids checked, times made consistent, attributes bounded.

use spanprof_format::otlp::{any_value::Value, Resource};
use spanprof_format::trace::{ExportTracePartialSuccess, ResourceSpans, Span};

use super::record::{
    bounded_attributes, bounded_pairs, bounded_to, stringify, SpanEvent, SpanRecord, SpanResource,
    MAX_EVENTS, MAX_EVENT_ATTRIBUTES, MAX_EVENT_VALUE_BYTES, MAX_NAME_BYTES, UNKNOWN_SERVICE,
};

/// Most reasons a [`SpanIngestReport`] keeps; the counts cover everything.
pub const MAX_REASONS: usize = 8;

/// What happened to the spans of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanIngestReport {
    /// Spans turned into records (including those whose end time was clamped).
    pub accepted: u64,
    /// Spans dropped for an invalid trace, span or parent id.
    pub rejected: u64,
    /// The first [`MAX_REASONS`] problems, each naming the span's position, e.g.
    /// `resource_spans[0].scope_spans[0].spans[3].span_id: 7 bytes, a span id has 8`.
    pub reasons: Vec<String>,
}

impl SpanIngestReport {
    /// The OTLP partial-success answer: `None` when nothing was rejected or noted, else the
    /// rejected count and the reasons joined by `"; "`.
    pub fn partial_success(&self) -> Option<ExportTracePartialSuccess> {
        if self.rejected == 0 && self.reasons.is_empty() {
            return None;
        }
        Some(ExportTracePartialSuccess {
            rejected_spans: i64::try_from(self.rejected).unwrap_or(i64::MAX),
            error_message: self.reasons.join("; "),
        })
    }

    fn note(&mut self, reason: impl FnOnce() -> String) {
        if self.reasons.len() < MAX_REASONS {
            self.reasons.push(reason());
        }
    }
}

/// Converts the spans of an OTLP export into records.
///
/// A span is rejected when its trace id is not 16 bytes, its span id not 8 bytes, either is
/// all zeros, or its parent span id is neither empty nor 8 bytes. An all-zero parent id means
/// "no parent" (some exporters write one for roots). A span that ends before it starts is
/// kept with `end_ns = start_ns`, and the report says so. The service is the resource's
/// `service.name` (stringified when not a string), or [`UNKNOWN_SERVICE`]; the resource's
/// other attributes are kept, bounded as a span's are, in one list its spans share.
pub fn spans_from_otlp(resource_spans: &[ResourceSpans]) -> (Vec<SpanRecord>, SpanIngestReport) {
    convert(resource_spans, |_| {})
}

/// [`spans_from_otlp`], taking the rejected spans out of `resource_spans` (and the scopes and
/// resources they leave empty): what is left is the request as it came for what was accepted,
/// to send on to another backend whole (a record keeps attributes as text, a bounded number
/// of events, and no links or scopes).
pub fn spans_from_otlp_retaining(
    resource_spans: &mut Vec<ResourceSpans>,
) -> (Vec<SpanRecord>, SpanIngestReport) {
    let mut rejected = Vec::new();
    let out = convert(resource_spans, |at| rejected.push(at));
    if !rejected.is_empty() {
        for (r, rs) in resource_spans.iter_mut().enumerate() {
            for (s, ss) in rs.scope_spans.iter_mut().enumerate() {
                let mut i = 0;
                ss.spans.retain(|_| {
                    i += 1;
                    !rejected.contains(&[r, s, i - 1])
                });
            }
            rs.scope_spans.retain(|ss| !ss.spans.is_empty());
        }
        resource_spans.retain(|rs| !rs.scope_spans.is_empty());
    }
    out
}

/// The records of `resource_spans`, telling `rejected` where each rejected span is.
fn convert(
    resource_spans: &[ResourceSpans],
    mut rejected: impl FnMut([usize; 3]),
) -> (Vec<SpanRecord>, SpanIngestReport) {
    let mut records = Vec::new();
    let mut report = SpanIngestReport::default();
    for (r, rs) in resource_spans.iter().enumerate() {
        let service = service_name(rs.resource.as_ref());
        let resource = resource_attributes(rs.resource.as_ref());
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            for (i, span) in ss.spans.iter().enumerate() {
                let at = || format!("resource_spans[{r}].scope_spans[{s}].spans[{i}]");
                match record(span, &service, &resource) {
                    Ok((record, clamped)) => {
                        if clamped {
                            report.note(|| {
                                format!(
                                    "{}: end_time_unix_nano {} is before start_time_unix_nano \
                                     {}; end set to start",
                                    at(),
                                    span.end_time_unix_nano,
                                    span.start_time_unix_nano
                                )
                            });
                        }
                        report.accepted += 1;
                        records.push(record);
                    }
                    Err(problem) => {
                        report.rejected += 1;
                        report.note(|| format!("{}.{problem}", at()));
                        rejected([r, s, i]);
                    }
                }
            }
        }
    }
    (records, report)
}

/// The resource's `service.name`, or [`UNKNOWN_SERVICE`] when absent or empty.
fn service_name(resource: Option<&Resource>) -> String {
    resource
        .into_iter()
        .flat_map(|r| &r.attributes)
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref())
        .map(|v| match &v.value {
            Some(Value::StringValue(s)) => s.clone(),
            _ => stringify(v),
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| UNKNOWN_SERVICE.to_owned())
}

/// The resource's attributes other than `service.name`, bounded as a span's are.
fn resource_attributes(resource: Option<&Resource>) -> SpanResource {
    let others = resource
        .into_iter()
        .flat_map(|r| &r.attributes)
        .filter(|kv| kv.key != "service.name");
    bounded_attributes(others).into()
}

/// Why a span is not stored (shown after its position in the request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpanRejected {
    /// An id of the wrong length.
    #[error("{field}: {len} bytes, {rule}")]
    IdLength {
        /// The field (`span_id`).
        field: &'static str,
        /// Its length, bytes.
        len: usize,
        /// What it must be (`a span id has 8`).
        rule: &'static str,
    },
    /// An id of zeros.
    #[error("{0}: all zeros, which is not a valid id")]
    ZeroId(&'static str),
    /// A time past what the store keeps (signed ns).
    #[error(
        "{field}: {time} is past the latest time the store keeps ({} ns since the epoch, in \
         the year 2262)",
        i64::MAX
    )]
    PastLatestTime {
        /// The field (`end_time_unix_nano`).
        field: &'static str,
        /// Its value, ns since the epoch.
        time: u64,
    },
}

/// The record of `span`, and whether its end time was clamped; or what is wrong with its ids.
fn record(
    span: &Span,
    service: &str,
    resource: &SpanResource,
) -> Result<(SpanRecord, bool), SpanRejected> {
    let trace_id: [u8; 16] = id(&span.trace_id, "trace_id", "a trace id has 16")?;
    let span_id: [u8; 8] = id(&span.span_id, "span_id", "a span id has 8")?;
    let parent_span_id = match span.parent_span_id.len() {
        0 => None,
        8 if span.parent_span_id.iter().all(|&b| b == 0) => None,
        _ => Some(id(
            &span.parent_span_id,
            "parent_span_id",
            "a span id has 8 (or none for a root span)",
        )?),
    };
    let start_ns = span.start_time_unix_nano;
    // As profiles' (signed nanoseconds): a later time is no time a query asks for, and a
    // trace of such a span lasted 584 years.
    for (field, t) in [
        ("start_time_unix_nano", start_ns),
        ("end_time_unix_nano", span.end_time_unix_nano),
    ] {
        if t > i64::MAX as u64 {
            return Err(SpanRejected::PastLatestTime { field, time: t });
        }
    }
    let clamped = span.end_time_unix_nano < start_ns;
    let status = span.status.as_ref();
    let record = SpanRecord {
        trace_id,
        span_id,
        parent_span_id,
        name: bounded_to(&span.name, MAX_NAME_BYTES),
        service: bounded_to(service, MAX_NAME_BYTES),
        start_ns,
        end_ns: span.end_time_unix_nano.max(start_ns),
        kind: span.kind,
        status_code: status.map_or(0, |s| s.code),
        status_message: status
            .map(|s| bounded_to(&s.message, MAX_NAME_BYTES))
            .unwrap_or_default(),
        attributes: bounded_attributes(&span.attributes),
        resource: resource.clone(),
        events: span.events.iter().take(MAX_EVENTS).map(event).collect(),
    };
    Ok((record, clamped))
}

/// An OTLP span event as a record keeps it, bounded.
fn event(e: &spanprof_format::trace::span::Event) -> SpanEvent {
    SpanEvent {
        time_ns: e.time_unix_nano,
        name: bounded_to(&e.name, MAX_NAME_BYTES),
        attributes: bounded_pairs(&e.attributes, MAX_EVENT_ATTRIBUTES, MAX_EVENT_VALUE_BYTES),
    }
}

/// `bytes` as an id of `N` bytes that is not all zeros.
fn id<const N: usize>(
    bytes: &[u8],
    field: &'static str,
    rule: &'static str,
) -> Result<[u8; N], SpanRejected> {
    let id = <[u8; N]>::try_from(bytes).map_err(|_| SpanRejected::IdLength {
        field,
        len: bytes.len(),
        rule,
    })?;
    if id.iter().all(|&b| b == 0) {
        return Err(SpanRejected::ZeroId(field));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::otlp::{AnyValue, KeyValue};
    use spanprof_format::trace::{decode_request_json, ScopeSpans, Status};

    fn span(trace: u8, id: u8, parent: Option<u8>) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
            name: format!("op{id}"),
            start_time_unix_nano: 100,
            end_time_unix_nano: 150,
            ..Default::default()
        }
    }

    fn service(name: Option<Value>) -> Option<Resource> {
        Some(Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: name.map(|v| AnyValue { value: Some(v) }),
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    fn one_scope(resource: Option<Resource>, spans: Vec<Span>) -> ResourceSpans {
        ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }
    }

    #[test]
    fn spans_from_the_go_test_programs_json_become_records() {
        let body = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"goapp"}}]},"scopeSpans":[{"scope":{"name":"spanprof.test/goapp"},"spans":[{"traceId":"83645149bd870b50b18c61b3a1bffae0","spanId":"3d5d240d7d262a28","name":"GET /cpu-heavy","kind":2,"startTimeUnixNano":"1795945079507854997","endTimeUnixNano":"1795945079507914015"},{"traceId":"83645149bd870b50b18c61b3a1bffae0","spanId":"a100dd7958011ae3","parentSpanId":"3d5d240d7d262a28","name":"sortWork","kind":1,"startTimeUnixNano":"1795945079507870901","endTimeUnixNano":"1795945079507913884"}]}]}]}"#;
        let request = decode_request_json(body).unwrap();
        let (records, report) = spans_from_otlp(&request.resource_spans);
        assert_eq!(
            report,
            SpanIngestReport {
                accepted: 2,
                ..Default::default()
            }
        );
        assert_eq!(report.partial_success(), None);
        let [root, child] = &records[..] else {
            panic!("{records:?}")
        };
        assert_eq!(root.service, "goapp");
        assert_eq!((root.name.as_str(), root.kind), ("GET /cpu-heavy", 2));
        assert_eq!(root.parent_span_id, None);
        assert_eq!(root.duration_ns(), 59_018);
        assert_eq!(child.parent_span_id, Some(root.span_id));
        assert_eq!(child.trace_id, root.trace_id);
        assert_eq!(
            child.span_id,
            [0xa1, 0x00, 0xdd, 0x79, 0x58, 0x01, 0x1a, 0xe3]
        );
    }

    #[test]
    fn long_names_service_names_and_status_messages_are_cut() {
        let long = format!("{}é", "n".repeat(MAX_NAME_BYTES - 1)); // é straddles the cut
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "x".repeat(1 << 20),
            status: Some(Status {
                message: long.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (records, _) = spans_from_otlp(&[one_scope(
            service(Some(Value::StringValue(long.clone()))),
            vec![span],
        )]);
        let r = &records[0];
        assert_eq!(r.name.len(), MAX_NAME_BYTES);
        assert_eq!(r.service, "n".repeat(MAX_NAME_BYTES - 1));
        assert_eq!(r.status_message, r.service);
    }

    #[test]
    fn spans_with_invalid_ids_are_rejected_with_their_position() {
        let mut short = span(1, 2, None);
        short.span_id.pop();
        let mut zero_trace = span(0, 3, None);
        zero_trace.trace_id = vec![0; 16];
        let zero_span = span(1, 0, None);
        let mut long_trace = span(1, 4, None);
        long_trace.trace_id.push(9);
        let mut bad_parent = span(1, 5, None);
        bad_parent.parent_span_id = vec![1, 2, 3];
        let zero_parent = span(1, 6, Some(0));
        let good = span(1, 7, Some(6));
        let spans = vec![
            short,
            zero_trace,
            zero_span,
            long_trace,
            bad_parent,
            zero_parent,
            good,
        ];
        let (records, report) =
            spans_from_otlp(&[one_scope(None, vec![]), one_scope(service(None), spans)]);
        assert_eq!((report.accepted, report.rejected), (2, 5));
        let at = "resource_spans[1].scope_spans[0].spans";
        assert_eq!(
            report.reasons,
            [
                format!("{at}[0].span_id: 7 bytes, a span id has 8"),
                format!("{at}[1].trace_id: all zeros, which is not a valid id"),
                format!("{at}[2].span_id: all zeros, which is not a valid id"),
                format!("{at}[3].trace_id: 17 bytes, a trace id has 16"),
                format!(
                    "{at}[4].parent_span_id: 3 bytes, a span id has 8 (or none for a root span)"
                ),
            ]
        );
        // An all-zero parent is a root; a missing service.name value is the default service.
        assert_eq!(records[0].parent_span_id, None);
        assert_eq!(records[1].parent_span_id, Some([6; 8]));
        assert!(records.iter().all(|r| r.service == UNKNOWN_SERVICE));
        let partial = report.partial_success().unwrap();
        assert_eq!(partial.rejected_spans, 5);
        assert!(partial.error_message.contains("; "));
    }

    #[test]
    fn retaining_takes_out_the_rejected_spans_and_what_they_leave_empty() {
        let mut short = span(1, 2, None);
        short.span_id.pop();
        let mut request = vec![
            one_scope(service(None), vec![span(1, 1, None), short.clone()]),
            one_scope(None, vec![short]),
        ];
        let (records, report) = spans_from_otlp_retaining(&mut request);
        assert_eq!((records.len(), report.rejected), (1, 2));
        assert_eq!(request.len(), 1);
        assert_eq!(request[0].scope_spans[0].spans, vec![span(1, 1, None)]);
        assert_eq!(request[0].resource, service(None));
    }

    #[test]
    fn spans_past_the_latest_time_kept_are_rejected() {
        let mut late_start = span(1, 1, None);
        late_start.start_time_unix_nano = u64::MAX - 1;
        late_start.end_time_unix_nano = u64::MAX;
        let mut late_end = span(1, 2, None);
        late_end.end_time_unix_nano = (1 << 63) + 5;
        let (records, report) = spans_from_otlp(&[one_scope(
            None,
            vec![late_start, late_end, span(1, 3, None)],
        )]);
        assert_eq!((records.len(), report.rejected), (1, 2));
        assert!(
            report.reasons[0].ends_with(&format!(
                "spans[0].start_time_unix_nano: {} is past the latest time the store keeps \
                 (9223372036854775807 ns since the epoch, in the year 2262)",
                u64::MAX - 1
            )),
            "{:?}",
            report.reasons
        );
        assert!(
            report.reasons[1].contains("spans[1].end_time_unix_nano"),
            "{:?}",
            report.reasons
        );
    }

    #[test]
    fn spans_ending_before_they_start_are_clamped_and_reported() {
        let mut backwards = span(1, 1, None);
        backwards.end_time_unix_nano = 40;
        let (records, report) = spans_from_otlp(&[one_scope(None, vec![backwards])]);
        assert_eq!((report.accepted, report.rejected), (1, 0));
        assert_eq!(
            report.reasons,
            [
                "resource_spans[0].scope_spans[0].spans[0]: end_time_unix_nano 40 is before \
              start_time_unix_nano 100; end set to start"
            ]
        );
        assert_eq!((records[0].start_ns, records[0].end_ns), (100, 100));
        // Nothing rejected, but the note still reaches the sender as a warning.
        assert_eq!(report.partial_success().unwrap().rejected_spans, 0);
    }

    #[test]
    fn spans_reasons_are_capped_but_counts_are_not() {
        let spans = (0..20).map(|_| span(1, 0, None)).collect();
        let (records, report) = spans_from_otlp(&[one_scope(None, spans)]);
        assert!(records.is_empty());
        assert_eq!(report.rejected, 20);
        assert_eq!(report.reasons.len(), MAX_REASONS);
    }

    #[test]
    fn spans_take_service_status_and_attributes_from_otlp() {
        let mut s = span(1, 1, None);
        s.kind = 3;
        s.status = Some(Status {
            message: "boom".into(),
            code: 2,
        });
        s.attributes = vec![KeyValue {
            key: "http.status_code".into(),
            value: Some(AnyValue {
                value: Some(Value::IntValue(503)),
            }),
            ..Default::default()
        }];
        let (records, _) = spans_from_otlp(&[
            one_scope(
                service(Some(Value::StringValue("cart".into()))),
                vec![s.clone()],
            ),
            one_scope(service(Some(Value::IntValue(7))), vec![s.clone()]),
            one_scope(service(Some(Value::StringValue(String::new()))), vec![s]),
        ]);
        let services: Vec<&str> = records.iter().map(|r| r.service.as_str()).collect();
        assert_eq!(services, ["cart", "7", UNKNOWN_SERVICE]);
        let r = &records[0];
        assert_eq!(
            (r.kind, r.status_code, r.status_message.as_str()),
            (3, 2, "boom")
        );
        assert_eq!(r.attribute("http.status_code"), Some("503"));
        assert_eq!(r.attribute("missing"), None);
    }

    /// Events are kept, the first [`MAX_EVENTS`], each with its first
    /// [`MAX_EVENT_ATTRIBUTES`] attributes, values (a stack trace) cut to
    /// [`MAX_EVENT_VALUE_BYTES`]; the resource's attributes but `service.name` are kept.
    #[test]
    fn spans_keep_bounded_events_and_the_resource() {
        use spanprof_format::trace::span::Event;
        let text = |key: &str, value: String| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value)),
            }),
            ..Default::default()
        };
        let mut s = span(1, 1, None);
        s.events = (0..20)
            .map(|i| Event {
                time_unix_nano: 120 + i,
                name: "exception".into(),
                attributes: std::iter::once(text("exception.stacktrace", "x".repeat(3000)))
                    .chain((0..10).map(|j| text(&format!("k{j}"), "v".into())))
                    .collect(),
                dropped_attributes_count: 0,
            })
            .collect();
        let mut resource = service(Some(Value::StringValue("cart".into()))).unwrap();
        resource.attributes.push(text("host.name", "web-1".into()));
        let (records, _) = spans_from_otlp(&[one_scope(Some(resource), vec![s])]);
        let events = &records[0].events;
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(
            (events[3].time_ns, events[3].name.as_str()),
            (123, "exception")
        );
        let attributes = &events[0].attributes;
        assert_eq!(attributes.len(), MAX_EVENT_ATTRIBUTES);
        assert_eq!(attributes[0].1.len(), MAX_EVENT_VALUE_BYTES);
        assert_eq!(attributes[7], ("k6".to_owned(), "v".to_owned()));
        assert_eq!(
            records[0].resource[..],
            [("host.name".to_owned(), "web-1".to_owned())]
        );
    }
}
