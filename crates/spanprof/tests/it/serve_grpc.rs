//! `spanprof serve`'s OTLP gRPC receiver with a real gRPC client (Python grpcio and the
//! official opentelemetry-proto stubs): profiles (plain and gzip) and spans are stored, bad
//! payloads get INVALID_ARGUMENT, SIGTERM stops the server cleanly, and a busy server tells
//! the client when to retry.

use spanprof_testkit as support;

use std::time::Duration;

use support::serve::{free_port, Server};
use support::{go_cpu_otlp, otlp_grpc_send, process_dir, spanprof};

#[test]
fn otlp_grpc_from_a_real_client_is_stored() {
    let dir = process_dir("serve-grpc");
    let data = dir.join("data");
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let server = Server::start(&data, "127.0.0.1:0", &["--otlp-grpc-addr", &grpc_addr]);

    // Our OTLP bytes of the real Go profile, sent by the official client, plain and gzip.
    let otlp = go_cpu_otlp(&dir);
    for extra in [&[][..], &["--gzip"][..]] {
        let mut args = vec![grpc_addr.as_str(), "profiles", otlp.to_str().unwrap()];
        args.extend_from_slice(extra);
        let r = otlp_grpc_send(&args);
        assert_eq!(r["ok"], true, "{r}");
    }
    // A span, and a payload that is no protobuf message.
    let (trace, span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let r = otlp_grpc_send(&[&grpc_addr, "traces", trace, span, "GET /x", "1000", "5000"]);
    assert_eq!(r["ok"], true, "{r}");
    let r = otlp_grpc_send(&[&grpc_addr, "garbage"]);
    assert_eq!(
        (r["ok"].clone(), r["code"].as_str()),
        (false.into(), Some("INVALID_ARGUMENT")),
        "{r}"
    );
    assert!(
        r["details"]
            .as_str()
            .unwrap()
            .contains("invalid OTLP traces payload"),
        "{r}"
    );

    // The standard gRPC health check (Kubernetes gRPC probes) says the server serves.
    let r = otlp_grpc_send(&[&grpc_addr, "health"]);
    assert_eq!(
        (r["ok"].clone(), r["response"].clone()),
        (true.into(), "SERVING".into()),
        "{r}"
    );

    // SIGTERM: finish, flush, exit 0.
    server.stop();

    // Both profile requests and the span are in the store.
    let flame = spanprof([
        "flame".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--type".as_ref(),
        "cpu".as_ref(),
    ]);
    flame.assert_success();
    let total: i64 = flame
        .stdout
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.parse::<i64>().unwrap())
        .sum();
    assert_eq!(
        total,
        2 * 8_530_000_000,
        "twice the profile's 8.53 s of CPU"
    );
    let import = spanprof(["inspect".as_ref(), otlp.as_os_str()]);
    import.assert_success();
}

/// A refusal worth retrying tells a real gRPC client when, in the `google.rpc.RetryInfo` of
/// `grpc-status-details-bin` (OTLP clients retry RESOURCE_EXHAUSTED only with one): a busy
/// server (request bodies held at once past `server.max_inflight_size`) asks for 1 s. A
/// message past the size limit is RESOURCE_EXHAUSTED too, but without one: it would be
/// refused again.
#[test]
fn a_busy_server_tells_grpc_clients_when_to_retry() {
    let dir = process_dir("serve-grpc-busy");
    let config = dir.join("spanprof.yaml");
    std::fs::write(
        &config,
        "server:\n  max_body_size: 1MiB\n  max_decompressed_size: 1MiB\n  max_inflight_size: 2MiB\n",
    )
    .unwrap();
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &[
            "--otlp-grpc-addr",
            &grpc_addr,
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let otlp = go_cpu_otlp(&dir);

    // Two uploads that announce 1 MiB each and send all of it but a byte hold the whole
    // budget (a body is charged the memory it holds: once a mebibyte has come, all it
    // announced).
    const HELD: usize = (1 << 20) - 1;
    let held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
            let head = format!(
                "POST /ingest?name=slow&format=pprof HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                1 << 20
            );
            std::io::Write::write_all(&mut s, head.as_bytes()).unwrap();
            std::io::Write::write_all(&mut s, &vec![b'x'; HELD]).unwrap();
            s
        })
        .collect();
    server.wait_for(
        "the held uploads to be charged",
        Duration::from_secs(30),
        |s| s.metric("spanprof_inflight_bytes") == (2 << 20) as f64,
    );
    let r = otlp_grpc_send(&[&grpc_addr, "profiles", otlp.to_str().unwrap()]);
    assert_eq!(r["code"], "RESOURCE_EXHAUSTED", "{r}");
    assert_eq!(r["status_code"], 8, "{r}");
    assert_eq!(r["retry_delay_s"], 1.0, "{r}");
    drop(held);
    server.wait_for("the held uploads to end", Duration::from_secs(30), |s| {
        s.metric("spanprof_inflight_bytes") == 0.0
    });
    let r = otlp_grpc_send(&[&grpc_addr, "profiles", otlp.to_str().unwrap()]);
    assert_eq!(r["ok"], true, "{r}");

    // Protobuf messages concatenated are one message: 30 copies are past 1 MiB.
    let big = dir.join("big.otlp");
    std::fs::write(&big, std::fs::read(&otlp).unwrap().repeat(30)).unwrap();
    let r = otlp_grpc_send(&[&grpc_addr, "profiles", big.to_str().unwrap()]);
    assert_eq!(r["code"], "RESOURCE_EXHAUSTED", "{r}");
    assert!(r.get("retry_delay_s").is_none(), "{r}");
    assert!(
        r["details"].as_str().unwrap().contains("larger than"),
        "{r}"
    );
    server.stop();
}
