//! A store that cannot write, as on a full disk (here the server's file size limit, which
//! fails writes the same way, with no root needed): every receiver answers that nothing of
//! the request was kept and when to retry, in its own protocol — 503 with `Retry-After` over
//! HTTP (OTLP's `google.rpc.Status`, Connect's `unavailable`, Pyroscope's text), UNAVAILABLE
//! with a `RetryInfo` to a real gRPC client (Python grpcio) — while the server keeps serving
//! and logs the failure a few times rather than once per request, and `/health` answers 503
//! naming the sink and the error. Once writes work again, requests are stored and `/health`
//! is `ok`; after a restart the store holds exactly what was acknowledged. A forwarder's
//! queue that cannot write is answered the same way when nothing was kept, and with a 500
//! that says so when the store kept the request (a retry would store it twice), `/health`
//! naming the forwarder. A failed write brings retention forward, so a full disk makes room
//! within seconds. And the OpenTelemetry SDK's own exporter, told to retry, sends the span
//! again once the store can write: nothing is lost.

use spanprof_testkit as support;

use std::path::Path;
use std::time::Duration;

use support::http::Response;
use support::serve::{free_port, Server};
use support::{go_cpu_otlp, otlp_grpc_send, process_dir, python, workspace_root};

/// Sets the soft `RLIMIT_FSIZE` of process `pid` (the hard limit stays).
// prlimit has no safe wrapper in std.
#[allow(unsafe_code)]
fn set_file_size_limit(pid: u32, soft: u64) {
    let pid = pid as libc::pid_t;
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit writes the current limits to `old` and reads nothing else.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, std::ptr::null(), &mut old) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: prlimit reads `new` and writes nothing (no old-limit pointer).
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, &new, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Bytes of the active segment (the newest) of the log in `dir`, which grows.
fn active_segment_bytes(dir: &Path) -> u64 {
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .unwrap();
    std::fs::metadata(newest).unwrap().len()
}

/// A `push.v1` request in Connect's JSON form: one sample of `pprof` for service `gopush`.
fn push_json(pprof: &[u8]) -> Vec<u8> {
    let mut raw = String::new();
    spanprof_format::json::base64::encode_into(pprof, &mut raw);
    serde_json::to_vec(&serde_json::json!({"series": [{
        "labels": [
            {"name": "__name__", "value": "process_cpu"},
            {"name": "service_name", "value": "gopush"},
        ],
        "samples": [{"rawProfile": raw}],
    }]}))
    .unwrap()
}

/// OTLP/JSON traces: one server span of service `goapp` with span id `span` (16 hex digits).
fn span_json(trace: &str, span: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "goapp"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": trace, "spanId": span, "name": "GET /work", "kind": 2,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000250000000",
        }]}],
    }]}))
    .unwrap()
}

const TRACE: &str = "5b8efff798038103d269b633813fc60c";

/// Span id of round `round`.
fn span_id(round: usize) -> String {
    format!("{:016x}", 0x1000 + round)
}

/// One request to each HTTP receiver (round `round`'s span): (what, answer).
fn send_each(
    server: &Server,
    round: usize,
    otlp: &[u8],
    pprof: &[u8],
) -> Vec<(&'static str, Response)> {
    let json = [("content-type", "application/json")];
    vec![
        (
            "OTLP/HTTP profiles",
            server.send(
                "/v1development/profiles",
                &[("content-type", "application/x-protobuf")],
                otlp,
            ),
        ),
        (
            "Pyroscope /ingest",
            server.send("/ingest?name=goingest&format=pprof", &[], pprof),
        ),
        (
            "push.v1",
            server.send("/push.v1.PusherService/Push", &json, &push_json(pprof)),
        ),
        (
            "OTLP/HTTP traces",
            server.send("/v1/traces", &json, &span_json(TRACE, &span_id(round))),
        ),
    ]
}

/// The CPU total of `service` over all time, from the query API.
fn cpu_total(server: &Server, service: &str) -> i64 {
    let path = format!("/api/v1/flamegraph?service={service}&from=0&max_nodes=8");
    let r = support::http::get(&server.addr, &path, Duration::from_secs(30)).unwrap();
    assert_eq!(
        r.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["flamegraph"]["total"].as_i64().unwrap()
}

/// `GET /health`: its status and text.
fn health(server: &Server) -> (u16, String) {
    let r = support::http::get(&server.addr, "/health", Duration::from_secs(30)).unwrap();
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Whether span `span` of [`TRACE`] is in the store.
fn has_span(server: &Server, span: &str) -> bool {
    let path = format!("/api/v1/traces/{TRACE}");
    let r = support::http::get(&server.addr, &path, Duration::from_secs(30)).unwrap();
    r.status == 200 && String::from_utf8_lossy(&r.body).contains(span)
}

#[test]
fn a_store_that_cannot_write_answers_retry_later_and_loses_nothing() {
    let dir = process_dir("store-write-failure");
    let data = dir.join("data");
    let otlp_file = go_cpu_otlp(&dir);
    let otlp = std::fs::read(&otlp_file).unwrap();
    let pprof = std::fs::read(workspace_root().join("testdata/go/cpu-10s.pb.gz")).unwrap();
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let args = ["--otlp-grpc-addr", grpc_addr.as_str()];
    let server = Server::start(&data, "127.0.0.1:0", &args);

    // Round 0 is stored; its CPU total is what one request of each profile adds.
    for (what, r) in send_each(&server, 0, &otlp, &pprof) {
        assert_eq!(
            r.status,
            200,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let one = cpu_total(&server, "goapp");
    assert!(one > 0);
    for service in ["goingest", "gopush"] {
        assert_eq!(cpu_total(&server, service), one, "{service}");
    }
    assert_eq!(health(&server), (200, "ok\n".to_owned()));

    // The log cannot grow past its size now: every write fails (EFBIG, as ENOSPC would).
    set_file_size_limit(server.pid(), active_segment_bytes(&data.join("segments")));
    let failed_rounds = 1..=20;
    for round in failed_rounds.clone() {
        for (what, r) in send_each(&server, round, &otlp, &pprof) {
            let body = String::from_utf8_lossy(&r.body);
            assert_eq!(r.status, 503, "{what}: {body}");
            assert_eq!(r.header("retry-after"), Some("5"), "{what}");
            assert!(
                body.contains("none of it was kept; retry later")
                    && body.contains("File too large"),
                "{what}: {body}"
            );
            match what {
                // google.rpc.Status: UNAVAILABLE, in the request's encoding.
                "OTLP/HTTP profiles" => assert_eq!(r.body[..2], [0x08, 14], "{what}"),
                "OTLP/HTTP traces" => assert!(body.starts_with(r#"{"code":14,"#), "{body}"),
                "push.v1" => assert!(body.contains(r#""code":"unavailable""#), "{body}"),
                _ => {}
            }
        }
    }
    let r = otlp_grpc_send(&[&grpc_addr, "profiles", otlp_file.to_str().unwrap()]);
    assert_eq!(r["code"], "UNAVAILABLE", "{r}");
    assert_eq!(r["status_code"], 14, "{r}");
    assert_eq!(r["retry_delay_s"], 5.0, "{r}");
    assert!(
        r["details"]
            .as_str()
            .unwrap()
            .contains("none of it was kept"),
        "{r}"
    );
    // Still serving: what was stored answers as before.
    assert_eq!(cpu_total(&server, "goapp"), one);
    assert!(has_span(&server, &span_id(0)));
    assert!(server.metric("spanprof_store_errors_total") >= 81.0);
    // Not ready, saying why, while writes fail: a load balancer sends elsewhere.
    let (status, text) = health(&server);
    assert_eq!(status, 503, "{text}");
    assert!(
        text.starts_with("not ready: the store could not write the last ")
            && text.contains("File too large")
            && text.contains("until a write works"),
        "{text}"
    );
    assert_eq!(server.metric("spanprof_pipeline_write_failing"), 1.0);
    // Alive all the same: a liveness probe must not restart it over a full disk.
    let live = support::http::get(&server.addr, "/live", Duration::from_secs(30)).unwrap();
    assert_eq!(live.status, 200);
    // gRPC health checks say so too.
    let r = otlp_grpc_send(&[&grpc_addr, "health"]);
    assert_eq!(r["response"], "NOT_SERVING", "{r}");

    // Writes work again.
    set_file_size_limit(server.pid(), libc::RLIM_INFINITY);
    for (what, r) in send_each(&server, 21, &otlp, &pprof) {
        assert_eq!(
            r.status,
            200,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_eq!(health(&server), (200, "ok\n".to_owned()));
    assert_eq!(server.metric("spanprof_pipeline_write_failing"), 0.0);
    let log = server.stop();
    // 81 failed writes (one request each at least), logged once each 10 s: a few lines.
    let lines = log.matches("store write failed").count();
    assert!((1..=3).contains(&lines), "{lines} lines:\n{log}");
    assert!(log.contains("suppressed="), "{log}");
    // And the end of the run is said, as its start was.
    assert!(
        log.contains("writing again: requests are taken again")
            && log.contains("sink=the store failed_batches="),
        "{log}"
    );

    // Exactly what was acknowledged: rounds 0 and 21, none of the failed ones.
    let server = Server::start(&data, "127.0.0.1:0", &[]);
    for service in ["goapp", "goingest", "gopush"] {
        assert_eq!(cpu_total(&server, service), 2 * one, "{service}");
    }
    assert!(has_span(&server, &span_id(0)) && has_span(&server, &span_id(21)));
    for round in failed_rounds {
        assert!(!has_span(&server, &span_id(round)), "round {round}");
    }
    server.stop();
}

/// `POST /v1development/profiles` of `otlp`.
fn send_otlp(server: &Server, otlp: &[u8]) -> Response {
    let proto = [("content-type", "application/x-protobuf")];
    server.send("/v1development/profiles", &proto, otlp)
}

#[test]
fn a_forward_queue_that_cannot_write_says_what_was_kept() {
    let dir = process_dir("forward-queue-write-failure");
    let otlp = std::fs::read(go_cpu_otlp(&dir)).unwrap();
    // A downstream that is not there: the queue only grows.
    let forward = ["--forward-otlp-http", "b=http://127.0.0.1:1"];

    // Store and forwarder: the store's log takes about a quarter of the queue's bytes (blocks
    // compressed, symbols once), so a limit between them fails the queue's write only.
    let data = dir.join("both");
    let server = Server::start(&data, "127.0.0.1:0", &forward);
    for _ in 0..2 {
        assert_eq!(send_otlp(&server, &otlp).status, 200);
    }
    let one = cpu_total(&server, "goapp") / 2;
    let (store, queue) = (
        active_segment_bytes(&data.join("segments")),
        active_segment_bytes(&data.join("forward/b/log")),
    );
    assert!(queue > store + 40_000, "store {store} B, queue {queue} B");
    set_file_size_limit(server.pid(), store + 20_000);
    let r = send_otlp(&server, &otlp);
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 500, "{body}");
    assert_eq!(r.header("retry-after"), None);
    assert!(
        body.contains("stored but could not be queued for forwarding")
            && body.contains("would store it twice")
            && body.contains("forwarder b"),
        "{body}"
    );
    assert_eq!(cpu_total(&server, "goapp"), 3 * one, "stored once");
    let (status, text) = health(&server);
    assert_eq!(status, 503, "{text}");
    assert!(
        text.starts_with("not ready: forwarder b's queue could not write the last batch"),
        "{text}"
    );
    server.stop();

    // Forwarder only: nothing was kept, so the client is asked to retry.
    let data = dir.join("forward-only");
    let mut args = vec!["--no-store"];
    args.extend_from_slice(&forward);
    let server = Server::start(&data, "127.0.0.1:0", &args);
    assert_eq!(send_otlp(&server, &otlp).status, 200);
    set_file_size_limit(
        server.pid(),
        active_segment_bytes(&data.join("forward/b/log")),
    );
    let r = send_otlp(&server, &otlp);
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 503, "{body}");
    assert_eq!(r.header("retry-after"), Some("5"));
    assert!(body.contains("none of it was kept; retry later"), "{body}");
    server.stop();
}

/// A store past `storage.max_size` is trimmed within seconds, not at the minute's run (a
/// store under heavy ingest grew a minute of data past its limit), and a failed write brings
/// the next run forward too (a full disk makes room within seconds): both are counted in
/// `spanprof_retention_runs_total` by trigger.
#[test]
fn a_failed_write_or_the_size_limit_brings_retention_forward() {
    let dir = process_dir("early-retention");
    let config = dir.join("spanprof.yaml");
    std::fs::write(
        &config,
        "storage:\n  segment_size: 64KiB\n  max_size: 256KiB\n",
    )
    .unwrap();
    let data = dir.join("data");
    let server = Server::start(
        &data,
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap()],
    );
    let runs = |s: &Server, trigger: &str| {
        s.metric(&format!(
            "spanprof_retention_runs_total{{trigger=\"{trigger}\"}}"
        ))
    };
    let otlp = std::fs::read(go_cpu_otlp(&dir)).unwrap();
    for _ in 0..60 {
        assert_eq!(send_otlp(&server, &otlp).status, 200);
    }
    // The minute's run would come 60 s after the start.
    server.wait_for(
        "retention at the size limit",
        Duration::from_secs(30),
        |s| {
            runs(s, "over_limit") >= 1.0
                && s.metric("spanprof_store_disk_bytes") <= (256 << 10) as f64
        },
    );
    assert_eq!(runs(&server, "schedule"), 0.0);
    set_file_size_limit(server.pid(), active_segment_bytes(&data.join("segments")));
    assert_eq!(send_otlp(&server, &otlp).status, 503);
    server.wait_for("retention brought forward", Duration::from_secs(30), |s| {
        runs(s, "write_failed") >= 1.0
    });
    // The newest data stays (four segments fit the limit).
    assert!(server.metric("spanprof_store_samples") > 0.0);
    let log = server.stop();
    assert!(log.contains("retention deleted old data"), "{log}");
    // The settings are logged at start; four segments of 64 KiB fit without a warning.
    assert!(
        log.contains(
            "retention: whole segments past the age or the size are deleted, oldest first, \
             and while the disk has less than min_free_disk and 5 % free \
             retention=none max_size=256KiB segment_size=64KiB min_free_disk="
        ),
        "{log}"
    );
    assert!(!log.contains("fewer than 4 segments"), "{log}");
}

/// A size limit of fewer than four segments is warned about at start: retention deletes
/// whole segments, so such a store may keep nothing (a review saw it keep nothing).
#[test]
fn a_size_limit_of_a_few_segments_is_warned_about() {
    let dir = process_dir("tiny-retention");
    let config = dir.join("spanprof.yaml");
    std::fs::write(
        &config,
        "storage:\n  segment_size: 64KiB\n  max_size: 100KiB\n",
    )
    .unwrap();
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap()],
    );
    let log = server.stop();
    assert!(
        log.contains("storage.max_size holds fewer than 4 segments of storage.segment_size"),
        "{log}"
    );
}

/// The real OpenTelemetry SDK exporter (Python, OTLP/HTTP) retries a span the store could not
/// write: it waits the 5 s of `Retry-After`, sends it again, and it is stored once writes
/// work. (Answered 500, as before, the SDK dropped it.)
#[test]
fn the_sdk_exporter_retries_a_span_the_store_could_not_write() {
    let dir = process_dir("sdk-retry");
    let data = dir.join("data");
    let server = Server::start(&data, "127.0.0.1:0", &[]);
    set_file_size_limit(server.pid(), active_segment_bytes(&data.join("segments")));
    let script = workspace_root().join("python/otlp_sdk_export_span.py");
    let endpoint = format!("http://{}/v1/traces", server.addr);
    let export = std::process::Command::new(python())
        .arg(script)
        .arg(&endpoint)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let failed = r#"spanprof_rejected_total{receiver="otlp_traces",reason="failed"}"#;
    server.wait_for(
        "the SDK's first try to be refused",
        Duration::from_secs(60),
        |s| s.metric(failed) >= 1.0,
    );
    set_file_size_limit(server.pid(), libc::RLIM_INFINITY);
    let out = export.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(r["ok"], true, "{r}");
    // It waited as asked before trying again.
    assert!(r["seconds"].as_f64().unwrap() >= 4.5, "{r}");
    let path = format!("/api/v1/traces/{}", r["trace_id"].as_str().unwrap());
    let trace = support::http::get(&server.addr, &path, Duration::from_secs(30)).unwrap();
    let body = String::from_utf8_lossy(&trace.body);
    assert_eq!(trace.status, 200, "{body}");
    assert!(body.contains(r["span_id"].as_str().unwrap()), "{body}");
    assert_eq!(server.metric(failed), 1.0, "refused once, then stored");
    server.stop();
}
