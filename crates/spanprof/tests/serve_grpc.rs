//! `spanprof serve`'s OTLP gRPC receiver with a real gRPC client (Python grpcio and the
//! official opentelemetry-proto stubs): profiles (plain and gzip) and spans are stored, bad
//! payloads get INVALID_ARGUMENT, and SIGTERM stops the server cleanly.

mod support;

use std::process::Command;

use support::serve::{free_port, Server};
use support::{process_dir, python, spanprof, workspace_root};

fn send(args: &[&str]) -> serde_json::Value {
    let script = workspace_root().join("python/otlp_grpc_send.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn otlp_grpc_from_a_real_client_is_stored() {
    let dir = process_dir("serve-grpc");
    let data = dir.join("data");
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let server = Server::start(&data, "127.0.0.1:0", &["--otlp-grpc-addr", &grpc_addr]);

    // Our OTLP bytes of the real Go profile, sent by the official client, plain and gzip.
    let otlp = dir.join("cpu.otlp");
    let cpu = workspace_root().join("testdata/go/cpu-10s.pb.gz");
    spanprof([
        "convert".as_ref(),
        cpu.as_os_str(),
        "--service-name".as_ref(),
        "goapp".as_ref(),
        "-o".as_ref(),
        otlp.as_os_str(),
    ])
    .assert_success();
    for extra in [&[][..], &["--gzip"][..]] {
        let mut args = vec![grpc_addr.as_str(), "profiles", otlp.to_str().unwrap()];
        args.extend_from_slice(extra);
        let r = send(&args);
        assert_eq!(r["ok"], true, "{r}");
    }
    // A span, and a payload that is no protobuf message.
    let (trace, span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let r = send(&[&grpc_addr, "traces", trace, span, "GET /x", "1000", "5000"]);
    assert_eq!(r["ok"], true, "{r}");
    let r = send(&[&grpc_addr, "garbage"]);
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
