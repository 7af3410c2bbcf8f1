//! Interop with an independent implementation: the Python `opentelemetry-proto` package builds
//! and parses the same request as [`expected_request`], so every field number and wire type
//! declared in `mod.rs` is checked in both directions.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use prost::Message;

use super::span::{Event, Link, SpanKind};
use super::status::StatusCode;
use super::*;
use crate::otlp::{any_value::Value, AnyValue};

const INSTALL_PYTHON: &str = "run `bash .ci/setup` (creates target/venv with \
     python/requirements.txt), or set SPANPROF_PYTHON to a python that has opentelemetry-proto";

/// Builds the request of [`expected_request`] with the Python package and prints its bytes in
/// hex; then parses the hex bytes on stdin (ours) and prints `equal` or both messages; then
/// prints the hex of a response with a partial success.
const SCRIPT: &str = r#"
import sys
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from opentelemetry.proto.common.v1 import common_pb2 as c
from opentelemetry.proto.resource.v1 import resource_pb2 as r
from opentelemetry.proto.trace.v1 import trace_pb2 as t

def kv(key, **value):
    return c.KeyValue(key=key, value=c.AnyValue(**value))

parent = t.Span(
    trace_id=bytes(range(1, 17)), span_id=bytes(range(17, 25)), trace_state="vendor=1",
    parent_span_id=bytes(range(25, 33)), flags=0x301, name="GET /cart",
    kind=t.Span.SPAN_KIND_SERVER,
    start_time_unix_nano=1700000000000000001, end_time_unix_nano=1700000000250000002,
    attributes=[kv("http.status_code", int_value=-200), kv("cached", bool_value=True),
                kv("ratio", double_value=0.25)],
    dropped_attributes_count=3,
    events=[t.Span.Event(time_unix_nano=1700000000100000000, name="retry",
                         attributes=[kv("attempt", int_value=2)], dropped_attributes_count=4)],
    dropped_events_count=5,
    links=[t.Span.Link(trace_id=bytes([0xff] * 16), span_id=bytes([0xee] * 8),
                       trace_state="other=2", attributes=[kv("why", string_value="batch")],
                       dropped_attributes_count=6, flags=0xffffffff)],
    dropped_links_count=7,
    status=t.Status(message="out of stock", code=t.Status.STATUS_CODE_ERROR))
child = t.Span(
    trace_id=bytes(range(1, 17)), span_id=bytes(range(33, 41)),
    parent_span_id=bytes(range(17, 25)), name="SELECT", kind=t.Span.SPAN_KIND_CLIENT,
    start_time_unix_nano=2**64 - 2, end_time_unix_nano=2**64 - 1,
    status=t.Status(code=t.Status.STATUS_CODE_OK))
request = ts.ExportTraceServiceRequest(resource_spans=[t.ResourceSpans(
    resource=r.Resource(attributes=[kv("service.name", string_value="checkout")],
                        dropped_attributes_count=1),
    scope_spans=[t.ScopeSpans(scope=c.InstrumentationScope(name="io.example", version="1.2.3"),
                              spans=[parent, child], schema_url="scope-schema")],
    schema_url="resource-schema")])

print(request.SerializeToString().hex())
ours = ts.ExportTraceServiceRequest.FromString(bytes.fromhex(sys.stdin.read().strip()))
print("equal" if ours == request else f"differ: ours\n{ours}\npython\n{request}".replace("\n", " | "))
response = ts.ExportTraceServiceResponse(
    partial_success=ts.ExportTracePartialSuccess(rejected_spans=2, error_message="two bad ids"))
print(response.SerializeToString().hex())
"#;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The request that [`SCRIPT`] builds, written with our types.
fn expected_request() -> ExportTraceServiceRequest {
    let parent = Span {
        trace_id: (1..17).collect(),
        span_id: (17..25).collect(),
        trace_state: "vendor=1".into(),
        parent_span_id: (25..33).collect(),
        flags: 0x301,
        name: "GET /cart".into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: 1_700_000_000_000_000_001,
        end_time_unix_nano: 1_700_000_000_250_000_002,
        attributes: vec![
            kv("http.status_code", Value::IntValue(-200)),
            kv("cached", Value::BoolValue(true)),
            kv("ratio", Value::DoubleValue(0.25)),
        ],
        dropped_attributes_count: 3,
        events: vec![Event {
            time_unix_nano: 1_700_000_000_100_000_000,
            name: "retry".into(),
            attributes: vec![kv("attempt", Value::IntValue(2))],
            dropped_attributes_count: 4,
        }],
        dropped_events_count: 5,
        links: vec![Link {
            trace_id: vec![0xff; 16],
            span_id: vec![0xee; 8],
            trace_state: "other=2".into(),
            attributes: vec![kv("why", Value::StringValue("batch".into()))],
            dropped_attributes_count: 6,
            flags: u32::MAX,
        }],
        dropped_links_count: 7,
        status: Some(Status {
            message: "out of stock".into(),
            code: StatusCode::Error as i32,
        }),
    };
    let child = Span {
        trace_id: (1..17).collect(),
        span_id: (33..41).collect(),
        parent_span_id: (17..25).collect(),
        name: "SELECT".into(),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: u64::MAX - 1,
        end_time_unix_nano: u64::MAX,
        status: Some(Status {
            message: String::new(),
            code: StatusCode::Ok as i32,
        }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue("checkout".into()))],
                dropped_attributes_count: 1,
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "io.example".into(),
                    version: "1.2.3".into(),
                    ..Default::default()
                }),
                spans: vec![parent, child],
                schema_url: "scope-schema".into(),
            }],
            schema_url: "resource-schema".into(),
        }],
    }
}

/// The Python with `opentelemetry-proto` (`$SPANPROF_PYTHON` or the workspace's `target/venv`).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SPANPROF_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/venv/bin/python");
    assert!(
        venv.exists(),
        "no Python venv at {}: {INSTALL_PYTHON}",
        venv.display()
    );
    venv
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex from Python"))
        .collect()
}

#[test]
fn trace_wire_types_match_the_python_opentelemetry_proto_package() {
    let expected = expected_request();
    let mut child = Command::new(python())
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_PYTHON}", python().display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    writeln!(stdin, "{}", hex(&expected.encode_to_vec())).expect("write to Python");
    drop(stdin);
    let out = child.wait_with_output().expect("Python output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Python failed ({}): {stderr}\n{}",
        out.status,
        if stderr.contains("ModuleNotFoundError") {
            INSTALL_PYTHON
        } else {
            ""
        }
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 from Python");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "unexpected Python output:\n{stdout}");

    // Python's bytes decode to our request, field for field.
    let theirs = decode_request(&unhex(lines[0])).expect("Python's request decodes");
    assert_eq!(theirs, expected);
    // `TracesData` has the same fields, so the same bytes decode as it too.
    let as_data = TracesData::decode(unhex(lines[0]).as_slice()).expect("decodes as TracesData");
    assert_eq!(as_data.resource_spans, expected.resource_spans);
    // Python parses our bytes to its own request.
    assert_eq!(lines[1], "equal");
    // And the response, partial success included.
    let response = ExportTraceServiceResponse::decode(unhex(lines[2]).as_slice()).unwrap();
    assert_eq!(
        response.partial_success,
        Some(ExportTracePartialSuccess {
            rejected_spans: 2,
            error_message: "two bad ids".into(),
        })
    );
    // Both sides wrote the same fields; only their order on the wire may differ.
    assert_eq!(unhex(lines[0]).len(), expected.encode_to_vec().len());
}
