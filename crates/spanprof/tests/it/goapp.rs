//! The Go test program (`testprograms/goapp`) and the harness around it, on their own: these
//! must pass whatever state the CLI is in, since every other integration test relies on them.

use spanprof_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::http::Recorder;
use support::raw;
use support::{capture, pprof_raw, GoApp, ProfileKind};

/// The harness on its own: every profile kind is gzipped pprof with samples, and the Go app
/// labels its work the way the other tests assume.
#[test]
fn go_app_serves_all_profiles() {
    let cap = capture();
    for kind in ProfileKind::ALL {
        let path = cap.profile(kind);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(&[0x1f, 0x8b]), "{kind:?} is not gzip");
        let profile = pprof_raw(&path, &[]);
        assert_eq!(profile.sample_types, kind.sample_types(), "{kind:?}");
        assert!(!profile.samples.is_empty(), "{kind:?} has no samples");
    }

    let heavy: BTreeMap<&str, &str> = cap
        .requests
        .iter()
        .filter(|r| r.path == "/cpu-heavy")
        .map(|r| (r.span_id.as_str(), r.trace_id.as_str()))
        .collect();
    let children: BTreeMap<&str, &str> = cap
        .requests
        .iter()
        .filter_map(|r| Some((r.child_span_id.as_deref()?, r.trace_id.as_str())))
        .collect();
    let light: BTreeMap<&str, &str> = cap
        .requests
        .iter()
        .filter(|r| r.path.starts_with("/cpu-light"))
        .map(|r| (r.span_id.as_str(), r.trace_id.as_str()))
        .collect();
    for r in &cap.requests {
        assert!(raw::is_hex_id(&r.trace_id, 32), "{r:?}");
        assert!(raw::is_hex_id(&r.span_id, 16), "{r:?}");
    }

    // Each function runs under the labels of the request (or child span) that called it.
    let cpu = pprof_raw(&cap.profile(ProfileKind::Cpu), &[]);
    let mut seen = BTreeSet::new();
    for sample in &cpu.samples {
        let functions = sample.functions_root_first();
        let has = |f: &str| functions.iter().any(|g| g == f);
        let label = |k: &str| sample.labels.get(k).map(String::as_str);
        let (span_key, trace_key, spans) = if has("main.sortWork") {
            ("otel.profile.span_id", "otel.profile.trace_id", &children)
        } else if has("main.countPrimes") {
            ("otel.profile.span_id", "otel.profile.trace_id", &heavy)
        } else if has("main.hashLoop") && label("custom.span_id").is_some() {
            ("custom.span_id", "custom.trace_id", &light)
        } else if has("main.hashLoop") {
            ("span_id", "trace_id", &light)
        } else {
            continue;
        };
        let span = label(span_key).unwrap_or_else(|| panic!("no {span_key}: {sample:?}"));
        let trace = spans
            .get(span)
            .unwrap_or_else(|| panic!("{span_key} {span} was never answered: {sample:?}"));
        assert_eq!(label(trace_key), Some(*trace), "{sample:?}");
        seen.insert(span_key);
        if has("main.sortWork") {
            seen.insert("child");
        }
    }
    assert_eq!(
        seen,
        BTreeSet::from(["otel.profile.span_id", "span_id", "custom.span_id", "child"]),
        "CPU profile lacks samples of some label convention"
    );

    let goroutines = pprof_raw(&cap.profile(ProfileKind::Goroutine), &[]);
    assert!(
        goroutines
            .samples
            .iter()
            .any(|s| s.labels.contains_key("worker")),
        "no labelled background goroutine"
    );
    let mutex = pprof_raw(&cap.profile(ProfileKind::Mutex), &[]);
    assert!(
        mutex.samples.iter().any(|s| s
            .functions_root_first()
            .iter()
            .any(|f| f == "main.holdLock")),
        "mutex profile lacks main.holdLock"
    );
    let heap = pprof_raw(&cap.profile(ProfileKind::Heap), &[]);
    assert!(
        heap.samples.iter().any(|s| s
            .functions_root_first()
            .iter()
            .any(|f| f == "main.allocWork")),
        "heap profile lacks main.allocWork"
    );
}

/// With `-otlp URL`, each request's spans reach `URL/v1/traces` as OTLP/HTTP JSON: the server
/// span with the ids from the response headers, and /cpu-heavy's child span under it.
#[test]
fn go_app_exports_spans_as_otlp_json() {
    let collector = Recorder::start();
    let app = GoApp::start(&["-otlp", &collector.url()]);
    let response = app.get("/cpu-heavy?n=20000");
    let trace = response.header("X-Trace-Id").unwrap().to_string();
    let span = response.header("X-Span-Id").unwrap().to_string();
    let child = response.header("X-Child-Span-Id").unwrap().to_string();

    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let request = collector
            .next(left)
            .expect("no OTLP export within 30 s of the request");
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/v1/traces")
        );
        let content_type = request
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.as_str());
        assert_eq!(content_type, Some("application/json"));
        let body: Value = serde_json::from_slice(&request.body).expect("JSON body");
        let resource = &body["resourceSpans"][0];
        assert_eq!(
            resource["resource"]["attributes"][0],
            serde_json::json!({"key": "service.name", "value": {"stringValue": "goapp"}})
        );
        let spans = resource["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap()
            .clone();
        if spans.iter().any(|s| s["traceId"] == trace.as_str()) {
            break spans;
        }
    };
    let find = |id: &str| {
        spans
            .iter()
            .find(|s| s["spanId"] == id)
            .unwrap_or_else(|| panic!("span {id} not exported: {spans:?}"))
    };
    let server = find(&span);
    assert_eq!(server["traceId"], trace.as_str());
    assert_eq!(server["name"], "GET /cpu-heavy");
    assert_eq!(server["kind"], 2);
    assert!(server.get("parentSpanId").is_none(), "{server}");
    let sub = find(&child);
    assert_eq!(sub["traceId"], trace.as_str());
    assert_eq!(sub["parentSpanId"], span.as_str());
    assert_eq!(sub["name"], "sortWork");
    for s in [server, sub] {
        let start: u64 = s["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u64 = s["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 0 && start <= end, "{s}");
    }
}

/// With `-load DURATION`, the app keeps itself busy: a CPU profile taken without any client
/// shows its handlers at work under their span labels.
#[test]
fn go_app_generates_its_own_load() {
    let app = GoApp::start(&["-load", "30s"]);
    let dir = tempfile::tempdir_in(support::scratch_dir()).unwrap();
    let path = dir.path().join("cpu.pb.gz");
    std::fs::write(&path, app.get("/debug/pprof/profile?seconds=1").body).unwrap();
    let profile = pprof_raw(&path, &[]);
    for (function, key) in [
        ("main.countPrimes", "otel.profile.span_id"),
        ("main.hashLoop", "span_id"),
    ] {
        assert!(
            profile.samples.iter().any(|s| {
                s.functions_root_first().iter().any(|f| f == function)
                    && s.labels.get(key).is_some_and(|v| raw::is_hex_id(v, 16))
            }),
            "no {function} sample labelled {key} under -load"
        );
    }
}
