//! Hand-written OTLP JSON: what real senders write (the Go test program's exporter among
//! them), the leniencies of the OTLP JSON rules, the exact output, and the error paths.

use super::span::{Event, Link, SpanKind};
use super::status::StatusCode;
use super::*;
use crate::otlp::{any_value::Value, AnyValue};

fn decode(json: &str) -> ExportTraceServiceRequest {
    decode_request_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}\nin {json}"))
}

fn error(json: &str) -> String {
    match decode_request_json(json.as_bytes()) {
        Ok(request) => panic!("decoded {request:?} from {json}"),
        Err(e) => e.to_string(),
    }
}

/// Wraps span JSON objects in one resource and one scope.
fn with_spans(spans: &str) -> String {
    format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{spans}]}}]}}]}}"#)
}

fn only_span(request: &ExportTraceServiceRequest) -> &Span {
    &request.resource_spans[0].scope_spans[0].spans[0]
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// A body that `testprograms/goapp` POSTed for one `/cpu-heavy` request (captured from the real
/// program): the request span and its child.
const GO_APP_BODY: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"goapp"}}]},"scopeSpans":[{"scope":{"name":"spanprof.test/goapp"},"spans":[{"traceId":"83645149bd870b50b18c61b3a1bffae0","spanId":"3d5d240d7d262a28","name":"GET /cpu-heavy","kind":2,"startTimeUnixNano":"1795945079507854997","endTimeUnixNano":"1795945079507914015"},{"traceId":"83645149bd870b50b18c61b3a1bffae0","spanId":"a100dd7958011ae3","parentSpanId":"3d5d240d7d262a28","name":"sortWork","kind":1,"startTimeUnixNano":"1795945079507870901","endTimeUnixNano":"1795945079507913884"}]}]}]}"#;

#[test]
fn trace_json_decodes_what_the_go_test_program_sends() {
    let request = decode(GO_APP_BODY);
    let trace_id = vec![
        0x83, 0x64, 0x51, 0x49, 0xbd, 0x87, 0x0b, 0x50, 0xb1, 0x8c, 0x61, 0xb3, 0xa1, 0xbf, 0xfa,
        0xe0,
    ];
    let root_id = vec![0x3d, 0x5d, 0x24, 0x0d, 0x7d, 0x26, 0x2a, 0x28];
    let expected = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![string_kv("service.name", "goapp")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "spanprof.test/goapp".into(),
                    ..Default::default()
                }),
                spans: vec![
                    Span {
                        trace_id: trace_id.clone(),
                        span_id: root_id.clone(),
                        name: "GET /cpu-heavy".into(),
                        kind: SpanKind::Server as i32,
                        start_time_unix_nano: 1_795_945_079_507_854_997,
                        end_time_unix_nano: 1_795_945_079_507_914_015,
                        ..Default::default()
                    },
                    Span {
                        trace_id,
                        span_id: vec![0xa1, 0x00, 0xdd, 0x79, 0x58, 0x01, 0x1a, 0xe3],
                        parent_span_id: root_id,
                        name: "sortWork".into(),
                        kind: SpanKind::Internal as i32,
                        start_time_unix_nano: 1_795_945_079_507_870_901,
                        end_time_unix_nano: 1_795_945_079_507_913_884,
                        ..Default::default()
                    },
                ],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    assert_eq!(request, expected);
    // Our encoding of it is the Go program's, byte for byte (same field order, same omissions).
    assert_eq!(encode_request_json(&request), GO_APP_BODY);
}

#[test]
fn trace_json_accepts_snake_case_numbers_upper_case_hex_nulls_and_unknown_fields() {
    let camel = decode(&with_spans(
        r#"{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718",
            "parentSpanId":"2122232425262728","traceState":"a=b","flags":257,"name":"op",
            "kind":3,"startTimeUnixNano":"10","endTimeUnixNano":"20",
            "droppedAttributesCount":1,"droppedEventsCount":2,"droppedLinksCount":3,
            "status":{"message":"m","code":2}}"#,
    ));
    let snake = decode(&with_spans(
        r#"{"trace_id":"0102030405060708090A0B0C0D0E0F10","span_id":"1112131415161718",
            "parent_span_id":"2122232425262728","trace_state":"a=b","flags":"257","name":"op",
            "kind":"SPAN_KIND_CLIENT","start_time_unix_nano":10,"end_time_unix_nano":2e1,
            "dropped_attributes_count":"1","dropped_events_count":2,"dropped_links_count":3,
            "status":{"message":"m","code":"STATUS_CODE_ERROR","deprecated_code":1},
            "links":null,"events":[],"newFieldFromTheFuture":{"deep":[1,{"x":null}]}}"#,
    ));
    assert_eq!(camel, snake);
    let span = only_span(&camel);
    assert_eq!(span.kind(), SpanKind::Client);
    assert_eq!(span.status.as_ref().unwrap().code(), StatusCode::Error);
    assert_eq!((span.flags, span.dropped_links_count), (257, 3));
    // Unknown enum numbers are kept (proto3 enums are open).
    let future = decode(&with_spans(r#"{"kind":9,"status":{"code":"7"}}"#));
    assert_eq!(only_span(&future).kind, 9);
    assert_eq!(only_span(&future).status.as_ref().unwrap().code, 7);
}

#[test]
fn trace_json_decodes_events_links_and_attribute_values() {
    let request = decode(
        r#"{"resource_spans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},
            "schemaUrl":"rs","scope_spans":[{"scope":{"name":"lib","version":"2"},"schema_url":"ss",
            "spans":[{"attributes":[{"key":"n","value":{"intValue":"-5"}},{"key":"d","value":{"doubleValue":"NaN"}},
                                    {"key":"b","value":{"boolValue":false}},{"key":"a","value":{"arrayValue":{"values":[{"intValue":1}]}}}],
                      "events":[{"timeUnixNano":"18446744073709551615","name":"e","attributes":[{"key":"k","value":{"stringValue":"v"}}],"droppedAttributesCount":4}],
                      "links":[{"traceId":"ffffffffffffffffffffffffffffffff","spanId":"eeeeeeeeeeeeeeee","traceState":"t","flags":4294967295,
                                "attributes":[],"dropped_attributes_count":6}]}]}]}]}"#,
    );
    let rs = &request.resource_spans[0];
    assert_eq!(
        (
            rs.schema_url.as_str(),
            rs.scope_spans[0].schema_url.as_str()
        ),
        ("rs", "ss")
    );
    let scope = rs.scope_spans[0].scope.as_ref().unwrap();
    assert_eq!((scope.name.as_str(), scope.version.as_str()), ("lib", "2"));
    let span = only_span(&request);
    assert_eq!(span.attributes.len(), 4);
    assert!(matches!(
        span.attributes[1].value.as_ref().unwrap().value,
        Some(Value::DoubleValue(d)) if d.is_nan()
    ));
    assert_eq!(
        span.events,
        [Event {
            time_unix_nano: u64::MAX,
            name: "e".into(),
            attributes: vec![string_kv("k", "v")],
            dropped_attributes_count: 4,
        }]
    );
    assert_eq!(
        span.links,
        [Link {
            trace_id: vec![0xff; 16],
            span_id: vec![0xee; 8],
            trace_state: "t".into(),
            attributes: vec![],
            dropped_attributes_count: 6,
            flags: u32::MAX,
        }]
    );
}

#[test]
fn trace_json_encodes_every_field_in_proto_order() {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![string_kv("service.name", "api")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans: vec![Span {
                    trace_id: vec![0xab; 16],
                    span_id: vec![0x01; 8],
                    trace_state: "t".into(),
                    parent_span_id: vec![0x02; 8],
                    flags: 0x100,
                    name: "q\"uote".into(),
                    kind: 5,
                    start_time_unix_nano: 1,
                    end_time_unix_nano: u64::MAX,
                    attributes: vec![],
                    dropped_attributes_count: 1,
                    events: vec![Event::default()],
                    dropped_events_count: 2,
                    links: vec![Link {
                        span_id: vec![0x03; 8],
                        flags: 1,
                        ..Default::default()
                    }],
                    dropped_links_count: 3,
                    status: Some(Status::default()),
                }],
                schema_url: "s".into(),
            }],
            schema_url: String::new(),
        }],
    };
    let json = encode_request_json(&request);
    assert_eq!(
        json,
        concat!(
            r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},"#,
            r#""scopeSpans":[{"spans":[{"traceId":"abababababababababababababababab","spanId":"0101010101010101","#,
            r#""traceState":"t","parentSpanId":"0202020202020202","name":"q\"uote","kind":5,"#,
            r#""startTimeUnixNano":"1","endTimeUnixNano":"18446744073709551615","droppedAttributesCount":1,"#,
            r#""events":[{}],"droppedEventsCount":2,"links":[{"spanId":"0303030303030303","flags":1}],"#,
            r#""droppedLinksCount":3,"status":{},"flags":256}],"schemaUrl":"s"}]}]}"#
        )
    );
    assert_eq!(decode(&json), request);
    assert_eq!(
        encode_request_json(&ExportTraceServiceRequest::default()),
        "{}"
    );
}

#[test]
fn trace_json_encodes_responses() {
    assert_eq!(
        encode_response_json(&ExportTraceServiceResponse::default()),
        "{}"
    );
    let partial = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 2,
            error_message: "spans[3].spanId: 7 bytes".into(),
        }),
    };
    assert_eq!(
        encode_response_json(&partial),
        r#"{"partialSuccess":{"rejectedSpans":"2","errorMessage":"spans[3].spanId: 7 bytes"}}"#
    );
}

#[test]
fn trace_json_errors_name_the_path_and_the_problem() {
    let cases = [
        (
            with_spans(r#"{"spanId":"81a2b3c4d5e6f"}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].spanId: invalid hex id \"81a2b3c4d5e6f\" (an odd number of digits: each byte is two)",
        ),
        (
            with_spans(r#"{},{"traceId":"zz1c2e3d4f5061728394a5b6c7d8e9f0"}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[1].traceId: invalid hex id \"zz1c2e3d4f5061728394a5b6c7d8e9f0\"",
        ),
        (
            // Python's json_format writes ids in base64, which is not OTLP JSON.
            with_spans(r#"{"traceId":"AQIDBAUGBwgJCgsMDQ4PEA=="}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].traceId: invalid hex id \"AQIDBAUGBwgJCgsMDQ4PEA==\" (base64, as protobuf's own JSON mapping writes bytes: OTLP/JSON writes ids in hex, 32 digits for 16 bytes)",
        ),
        (
            with_spans(r#"{"kind":"SERVER"}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].kind: unknown enum value \"SERVER\"",
        ),
        (
            with_spans(r#"{"startTimeUnixNano":"-1"}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano: -1 is out of range for uint64",
        ),
        (
            with_spans(r#"{"flags":4294967296}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].flags: 4294967296 is out of range for uint32",
        ),
        (
            with_spans(r#"{"status":{"code":1.5}}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].status.code: not an integer: \"1.5\"",
        ),
        (
            with_spans(r#"{"links":[{"spanId":""},{"spanId":1}]}"#),
            "OTLP JSON: resourceSpans[0].scopeSpans[0].spans[0].links[1].spanId: expected a string, found a number",
        ),
        (
            r#"{"resourceSpans":[]} []"#.to_string(),
            "OTLP JSON: invalid JSON at byte 21: unexpected data after the top-level value",
        ),
        (
            r#"[]"#.to_string(),
            "OTLP JSON: expected an object, found an array",
        ),
    ];
    for (json, want) in cases {
        assert_eq!(error(&json), want, "for {json}");
    }
}

#[test]
fn trace_protobuf_decode_errors_say_what_was_expected() {
    let message = decode_request(b"\x0a\x05\x0a").unwrap_err().to_string();
    assert!(
        message.starts_with("not a valid OTLP ExportTraceServiceRequest: "),
        "{message}"
    );
    assert_eq!(
        decode_request(&[]).unwrap(),
        ExportTraceServiceRequest::default()
    );
    // A resource attribute nested 200 arrays deep: prost names every level; said once.
    let len = |field: u8, payload: &[u8]| {
        let mut out = vec![(field << 3) | 2];
        let mut n = payload.len();
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(payload);
        out
    };
    let mut value = len(1, b"x");
    for _ in 0..200 {
        value = len(5, &len(1, &value));
    }
    let attribute = [len(1, b"k"), len(2, &value)].concat();
    let request = len(1, &len(1, &len(1, &attribute)));
    let message = decode_request(&request).unwrap_err().to_string();
    assert!(
        message.contains("(AnyValue.value: ArrayValue.values) x") && message.len() < 400,
        "{message}"
    );
}
