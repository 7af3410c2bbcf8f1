//! What an OpenTelemetry SDK adds to the demo's recorded spans: the recording holds only
//! names, ids and times (the test program's exporter writes no more), so the demo's views
//! had no attributes, resource, events or status to show. Each span gets them here, as the
//! Go SDK (`go.opentelemetry.io/otel/sdk` with `otelhttp`) sends them for that kind of span,
//! decided by its id so that every start-up shows the same ones.

use spanprof_format::otlp::{any_value, string_kv, AnyValue, KeyValue, Resource};
use spanprof_format::trace::{span, status, ResourceSpans, Span, Status};

/// One request in this many ends in an error (a 500 with an exception event).
const ERROR_EVERY: u8 = 20;

/// The instance the recording was made on, as the SDK's resource detectors describe it.
fn resource_attributes() -> Vec<KeyValue> {
    vec![
        string_kv("service.name", super::SERVICE),
        string_kv("service.version", "1.4.2"),
        string_kv(
            "service.instance.id",
            "6f1c2a4e-3b7d-4c55-9e0a-2d8f1b7c9e31",
        ),
        string_kv("deployment.environment.name", "demo"),
        string_kv("telemetry.sdk.language", "go"),
        string_kv("telemetry.sdk.name", "opentelemetry"),
        string_kv("telemetry.sdk.version", "1.28.0"),
        string_kv("host.name", "demo-web-1"),
        string_kv("host.arch", "amd64"),
        string_kv("os.type", "linux"),
        int_kv("process.pid", 4242),
        string_kv("process.executable.name", "goapp"),
        string_kv("process.runtime.name", "go"),
        string_kv("process.runtime.version", "go1.22.2"),
        string_kv(
            "process.runtime.description",
            "go version go1.22.2 linux/amd64",
        ),
    ]
}

fn int_kv(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// Gives every span of `rs` (and its resource) what the SDK would have sent; attributes the
/// recording has already are kept, not doubled.
pub fn as_sdk_sends(rs: &mut ResourceSpans) {
    let resource = rs.resource.get_or_insert_with(Resource::default);
    for kv in resource_attributes() {
        if !resource.attributes.iter().any(|a| a.key == kv.key) {
            resource.attributes.push(kv);
        }
    }
    for scope in &mut rs.scope_spans {
        for s in &mut scope.spans {
            let (attributes, failed) = if s.kind == span::SpanKind::Server as i32 {
                server_attributes(s)
            } else {
                (internal_attributes(s), false)
            };
            for kv in attributes {
                if !s.attributes.iter().any(|a| a.key == kv.key) {
                    s.attributes.push(kv);
                }
            }
            if failed {
                fail(s);
            }
        }
    }
}

/// An `otelhttp` server span's attributes (HTTP semantic conventions 1.26), and whether the
/// request failed (`/alloc` answers 500 to one request in `ERROR_EVERY`, by the span's id).
fn server_attributes(s: &Span) -> (Vec<KeyValue>, bool) {
    let (method, path) = s.name.split_once(' ').unwrap_or(("GET", s.name.as_str()));
    let failed = path == "/alloc" && s.span_id.last().is_some_and(|b| b % ERROR_EVERY == 0);
    let status = if failed { 500 } else { 200 };
    let mut out = vec![
        string_kv("http.request.method", method),
        string_kv("url.scheme", "http"),
        string_kv("url.path", path),
        string_kv("http.route", path),
        string_kv("server.address", "demo-web-1"),
        int_kv("server.port", 8080),
        string_kv("network.protocol.version", "1.1"),
        string_kv("client.address", "10.0.3.17"),
        string_kv("user_agent.original", "Go-http-client/1.1"),
        int_kv("http.response.status_code", status),
        int_kv(
            "http.response.body.size",
            if failed {
                22
            } else {
                512 + i64::from(s.span_id[0]) * 4
            },
        ),
    ];
    if failed {
        out.push(string_kv("error.type", "500"));
    }
    (out, failed)
}

/// An internal span's: the code that ran it (its function), as the Go SDK's callers record.
fn internal_attributes(s: &Span) -> Vec<KeyValue> {
    vec![
        string_kv("code.function", &format!("main.{}", s.name)),
        string_kv("code.namespace", "main"),
        string_kv("code.filepath", "testprograms/goapp/main.go"),
        int_kv("sort.items", 20_000 + i64::from(s.span_id[0]) * 16),
    ]
}

/// Marks `s` failed as `otelhttp` and `span.RecordError` do: status Error with the
/// message, and an `exception` event with type, message and stack at its end.
fn fail(s: &mut Span) {
    let message = "allocation budget exceeded: 64 MiB requested";
    s.status = Some(Status {
        code: status::StatusCode::Error as i32,
        message: message.to_owned(),
    });
    s.events.push(span::Event {
        time_unix_nano: s.end_time_unix_nano.saturating_sub(200_000),
        name: "exception".to_owned(),
        attributes: vec![
            string_kv("exception.type", "*errors.errorString"),
            string_kv("exception.message", message),
            string_kv(
                "exception.stacktrace",
                "goroutine 57 [running]:\nmain.handler.func1()\n\t/src/testprograms/goapp/main.go:88 +0x1a5\n\
                 net/http.HandlerFunc.ServeHTTP(...)\n\t/usr/lib/go/src/net/http/server.go:2166\n\
                 go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp.(*middleware).serveHTTP(...)\n\
                 \t/root/go/pkg/mod/go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp@v0.53.0/handler.go:218",
            ),
        ],
        dropped_attributes_count: 0,
    });
}
