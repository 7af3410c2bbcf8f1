//! The span side of trace ingest, on an export as an instrumented HTTP service sends it: 512
//! spans of 64 traces from one resource (9 attributes: host, process, SDK), each span with 5
//! attributes and one in 8 with an exception event. Stages: OTLP → records
//! (`spans_from_otlp`), records → the log's block (`encode_spans`), the block → records
//! (`decode_spans`, as replay does), and records into the active segment's index. The peer in
//! the same run is the protobuf decode of the same request: what the receiver does before
//! any of these.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

// The binary's allocator: allocation is much of what these stages do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use prost::Message;
use spanprof_format::otlp::{any_value::Value, string_kv, AnyValue, KeyValue, Resource};
use spanprof_format::trace::span::Event;
use spanprof_format::trace::{
    decode_request, ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status,
};
use spanprof_store::spans::{decode_spans, encode_spans, spans_from_otlp, SpanIndex};

const SPANS: u64 = 512;
const SPANS_PER_TRACE: u64 = 8;

fn int_kv(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn request() -> ExportTraceServiceRequest {
    let start = 1_764_000_000_000_000_000u64;
    let spans = (0..SPANS)
        .map(|i| {
            let trace = i / SPANS_PER_TRACE;
            let root = i % SPANS_PER_TRACE == 0;
            let mut trace_id = [0x5bu8; 16];
            trace_id[..8].copy_from_slice(&(trace + 1).to_be_bytes());
            let span_id = (i + 1).to_be_bytes();
            let begin = start + i * 1_000_000;
            Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
                parent_span_id: if root {
                    Vec::new()
                } else {
                    (trace * SPANS_PER_TRACE + 1).to_be_bytes().to_vec()
                },
                name: if root {
                    "GET /cart/{id}"
                } else {
                    "SELECT cart_items"
                }
                .into(),
                kind: if root { 2 } else { 3 },
                start_time_unix_nano: begin,
                end_time_unix_nano: begin + 25_000_000 + i * 1_000,
                attributes: vec![
                    string_kv("http.request.method", "GET"),
                    string_kv("http.route", "/cart/{id}"),
                    int_kv("http.response.status_code", 200),
                    string_kv("url.path", &format!("/cart/{}", i % 97)),
                    string_kv("db.system", "postgresql"),
                ],
                events: (i % 8 == 0)
                    .then(|| Event {
                        time_unix_nano: begin + 20_000_000,
                        name: "exception".into(),
                        attributes: vec![
                            string_kv("exception.type", "TimeoutError"),
                            string_kv("exception.message", "inventory timed out"),
                            string_kv(
                                "exception.stacktrace",
                                &"  at inventory.reserve (inventory.js:12:7)\n".repeat(12),
                            ),
                        ],
                        dropped_attributes_count: 0,
                    })
                    .into_iter()
                    .collect(),
                status: (i % 8 == 0).then(|| Status {
                    message: "inventory timed out".into(),
                    code: 2,
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    string_kv("service.name", "checkout"),
                    string_kv("service.version", "1.42.0"),
                    string_kv("host.name", "checkout-7f9c6d-x2k4p"),
                    string_kv("k8s.pod.name", "checkout-7f9c6d-x2k4p"),
                    int_kv("process.pid", 4242),
                    string_kv("process.runtime.name", "nodejs"),
                    string_kv("telemetry.sdk.name", "opentelemetry"),
                    string_kv("telemetry.sdk.language", "nodejs"),
                    string_kv("telemetry.sdk.version", "1.30.0"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

fn spans(c: &mut Criterion) {
    let request = request();
    let protobuf = request.encode_to_vec();
    let (records, report) = spans_from_otlp(&request.resource_spans);
    assert_eq!(report.accepted, SPANS);
    let mut block = Vec::new();
    encode_spans(&records, &mut block);
    eprintln!(
        "spans bench: {SPANS} spans, {} B of OTLP protobuf, a {} B log block ({:.1} B a span)",
        protobuf.len(),
        block.len(),
        block.len() as f64 / SPANS as f64
    );

    let mut g = c.benchmark_group("spans");
    g.throughput(Throughput::Elements(SPANS));
    g.bench_function("peer: protobuf decode of the request", |b| {
        b.iter(|| decode_request(&protobuf).expect("decodes"))
    });
    g.bench_function("OTLP to records", |b| {
        b.iter(|| spans_from_otlp(&request.resource_spans))
    });
    g.bench_function("encode the log block", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(block.len());
            encode_spans(&records, &mut out);
            out
        })
    });
    g.bench_function("decode the log block", |b| {
        b.iter(|| decode_spans(&block).expect("decodes"))
    });
    g.bench_function("insert into the span index", |b| {
        b.iter_batched(
            || records.clone(),
            |records| {
                let mut index = SpanIndex::new();
                for r in records {
                    index.insert(r);
                }
                index
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(name = benches; config = Criterion::default().sample_size(30); targets = spans);
criterion_main!(benches);
