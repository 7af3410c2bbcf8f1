//! Forwarding and faults, with real processes: spanprof A takes the real Go CPU profile and
//! spans over OTLP/HTTP and forwards them over OTLP gRPC to spanprof B. B is stopped while
//! more arrives at A, A is restarted with the backlog on disk, B comes back: B ends up with
//! exactly what A stored, so both answer the same flame graphs (whole service, single spans,
//! a parent span with its children).

use spanprof_testkit as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::serve::{free_port, Server};
use support::{go_cpu_otlp, process_dir, spanprof};

/// OTLP/JSON traces for service `goapp`: (trace id, span id, parent span id, name).
fn spans_json(spans: &[(&str, &str, &str, &str)]) -> Vec<u8> {
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .enumerate()
        .map(|(i, (trace, span, parent, name))| {
            let start = 1_700_000_000_000_000_000u64 + i as u64 * 1_000_000;
            serde_json::json!({
                "traceId": trace, "spanId": span, "parentSpanId": parent, "name": name,
                "kind": 2,
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": (start + 250_000_000).to_string(),
                "attributes": [{"key": "http.route", "value": {"stringValue": *name}}],
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "goapp"}}]},
        "scopeSpans": [{"spans": spans}],
    }]}))
    .unwrap()
}

/// `spanprof flame --data DATA --type cpu ARGS` as stack → value.
pub(crate) fn flame(data: &Path, args: &[&str]) -> BTreeMap<String, i64> {
    let mut all = vec!["flame", "--data", data.to_str().unwrap(), "--type", "cpu"];
    all.extend_from_slice(args);
    let run = spanprof(&all);
    run.assert_no_panic().assert_success();
    run.stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), v.parse().unwrap())
        })
        .collect()
}

const FORWARDED: &str = "spanprof_forwarded_records_total{forwarder=\"b\",signal=";
const QUEUED: &str = "spanprof_forward_queued_records{forwarder=\"b\"}";
const FAILING: &str = "spanprof_forward_failing{forwarder=\"b\"}";

#[test]
fn forwarded_over_grpc_through_outage_and_restart_loses_nothing() {
    let dir = process_dir("forward");
    let (a_data, b_data) = (dir.join("a"), dir.join("b"));
    let otlp: PathBuf = go_cpu_otlp(&dir);
    let profile = std::fs::read(&otlp).unwrap();

    let b_grpc = format!("127.0.0.1:{}", free_port());
    let b_args = ["--otlp-grpc-addr", b_grpc.as_str()];
    let forward = format!("b=http://{b_grpc}");
    let a_args = [
        "--otlp-grpc-addr",
        "off",
        "--forward-otlp-grpc",
        forward.as_str(),
        "--forward-batch-age",
        "100ms",
        "--forward-retry-max",
        "1s",
    ];
    let b = Server::start(&b_data, "127.0.0.1:0", &b_args);
    let a = Server::start(&a_data, "127.0.0.1:0", &a_args);

    // Spans whose ids label samples of the real profile (see `spanprof inspect`), and a
    // parent (sent later) of the first.
    let trace = "8d436a4758e64f45f8cc086da251209b";
    let (child, parent) = ("1991fb31dff3b9ba", "a1a1a1a1a1a1a1a1");
    let linked = [
        (trace, child, parent, "GET /primes"),
        (
            "d9ce5df850408f22878fd00e65d55cbf",
            "613d07d76201bee5",
            "",
            "GET /sort",
        ),
        (
            "4d227a46239b460d99b9a1a57594e544",
            "6f76fbc364543787",
            "",
            "GET /hash",
        ),
    ];
    a.post(
        "/v1development/profiles",
        "application/x-protobuf",
        &profile,
    );
    a.post("/v1/traces", "application/json", &spans_json(&linked));
    a.wait_for("live forwarding to B", Duration::from_secs(60), |a| {
        a.metric(&format!("{FORWARDED}\"profiles\"}}")) >= 1.0
            && a.metric(&format!("{FORWARDED}\"traces\"}}")) >= 1.0
            && a.metric(QUEUED) == 0.0
    });

    // B goes away; A keeps accepting, queues and retries.
    b.stop();
    // Two profiles in a row: the backlog sends them merged into one export.
    for _ in 0..2 {
        a.post(
            "/v1development/profiles",
            "application/x-protobuf",
            &profile,
        );
    }
    a.post(
        "/v1/traces",
        "application/json",
        &spans_json(&[(trace, parent, "", "GET /outer")]),
    );
    a.wait_for(
        "failed exports while B is down",
        Duration::from_secs(60),
        |a| {
            a.metric("spanprof_forward_failed_total{forwarder=\"b\",signal=\"profiles\"}") >= 1.0
                && a.metric(QUEUED) >= 3.0
        },
    );
    assert_eq!(a.metric(FAILING), 1.0, "the forwarder says it is failing");

    // A restarts with its backlog on disk, then B comes back on the same port and data.
    let a_first_log = a.stop();
    let a = Server::start(&a_data, "127.0.0.1:0", &a_args);
    assert!(
        a.metric(QUEUED) >= 3.0,
        "the backlog survived A's restart:\n{a_first_log}"
    );
    let b = Server::start(&b_data, "127.0.0.1:0", &b_args);
    a.wait_for(
        "the backlog to drain into B",
        Duration::from_secs(90),
        |a| a.metric(QUEUED) == 0.0 && a.metric(&format!("{FORWARDED}\"profiles\"}}")) >= 1.0,
    );
    assert_eq!(a.metric(FAILING), 0.0, "no longer failing");
    let a_log = a.stop();
    let b_log = b.stop();
    // Nothing was dropped, refused or sent unmerged on the way (retries are expected).
    let a_logs = format!("{a_first_log}{a_log}");
    let forward_lines = a_logs
        .lines()
        .filter(|l| l.contains("spanprof_server::forward"));
    assert!(
        a_logs.contains("export failed; will retry"),
        "A retried while B was down"
    );
    for line in forward_lines {
        let bad = ["ERROR", "dropped", "do not merge", "is gone", "damage"];
        assert!(!bad.iter().any(|b| line.contains(b)), "A: {line}\n{a_logs}");
    }

    // Both stores answer the same: the whole service, single spans, a parent with children.
    let whole_a = flame(&a_data, &["--service", "goapp"]);
    let whole_b = flame(&b_data, &["--service", "goapp"]);
    assert_eq!(
        whole_a.values().sum::<i64>(),
        3 * 8_530_000_000,
        "A stored the three pushes"
    );
    assert_eq!(whole_a, whole_b, "whole service\nA:\n{a_log}\nB:\n{b_log}");
    for (_, span, _, _) in &linked {
        let on_a = flame(&a_data, &["--span-id", span]);
        assert!(!on_a.is_empty(), "span {span} has samples");
        assert_eq!(on_a, flame(&b_data, &["--span-id", span]), "span {span}");
    }
    let family = ["--span-id", parent, "--include-child-spans"];
    let on_a = flame(&a_data, &family);
    assert!(!on_a.is_empty(), "the parent's children have samples");
    assert_eq!(on_a, flame(&a_data, &["--span-id", child]));
    assert_eq!(
        on_a,
        flame(&b_data, &family),
        "parent {parent} with children"
    );
}

/// Traces are forwarded as they came, not as the store keeps them: a collector or Tempo behind
/// spanprof gets the spans' events, typed attributes and scope (a stored span keeps its and
/// its resource's attributes as text only, and no events), without the spans spanprof
/// rejected.
#[test]
fn traces_are_forwarded_as_they_came() {
    use spanprof_format::trace::decode_request;
    let dir = process_dir("forward-traces");
    let collector = support::http::Recorder::start();
    let forward = format!("collector={}", collector.url());
    let a = Server::start(
        &dir.join("a"),
        "127.0.0.1:0",
        &[
            "--otlp-grpc-addr",
            "off",
            "--forward-otlp-http",
            forward.as_str(),
            "--forward-batch-age",
            "100ms",
        ],
    );
    let sent = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "shop"}},
            {"key": "k8s.pod.name", "value": {"stringValue": "shop-7d9f"}},
        ]},
        "scopeSpans": [{
            "scope": {"name": "io.opentelemetry.okhttp", "version": "1.2.3"},
            "spans": [
                {
                    "traceId": "8d436a4758e64f45f8cc086da251209b", "spanId": "1991fb31dff3b9ba",
                    "name": "GET /cart", "kind": 2,
                    "startTimeUnixNano": "1700000000000000000",
                    "endTimeUnixNano": "1700000000250000000",
                    "attributes": [{"key": "http.response.status_code", "value": {"intValue": "503"}}],
                    "events": [{"name": "exception", "timeUnixNano": "1700000000100000000",
                        "attributes": [{"key": "exception.type", "value": {"stringValue": "Timeout"}}]}],
                },
                // Rejected (a 7-byte span id): not sent on.
                {
                    "traceId": "8d436a4758e64f45f8cc086da251209b", "spanId": "1991fb31dff3b9",
                    "name": "bad", "startTimeUnixNano": "1700000000000000000",
                    "endTimeUnixNano": "1700000000000000001",
                },
            ],
        }],
    }]});
    a.post(
        "/v1/traces",
        "application/json",
        &serde_json::to_vec(&sent).unwrap(),
    );
    let got = loop {
        let r = collector
            .next(Duration::from_secs(30))
            .expect("the forwarded export");
        if r.path == "/v1/traces" {
            break r;
        }
    };
    let body = match got
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-encoding") && v == "gzip")
    {
        true => spanprof_format::gzip::gunzip(&got.body, 64 << 20).unwrap(),
        false => got.body,
    };
    let request = decode_request(&body).unwrap();
    let rs = &request.resource_spans;
    assert_eq!(rs.len(), 1, "{request:?}");
    let pod = rs[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .any(|kv| kv.key == "k8s.pod.name");
    assert!(pod, "the resource attributes: {request:?}");
    let scope = &rs[0].scope_spans[0];
    assert_eq!(
        scope
            .scope
            .as_ref()
            .map(|s| (s.name.as_str(), s.version.as_str())),
        Some(("io.opentelemetry.okhttp", "1.2.3"))
    );
    assert_eq!(scope.spans.len(), 1, "the rejected span is not sent on");
    let span = &scope.spans[0];
    assert_eq!(span.events.len(), 1, "{span:?}");
    assert_eq!(
        span.attributes[0].value.as_ref().unwrap().value,
        Some(spanprof_format::otlp::any_value::Value::IntValue(503)),
        "typed attributes"
    );
    a.stop();
}
