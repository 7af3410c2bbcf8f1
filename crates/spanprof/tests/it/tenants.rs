//! Two tenants fed at once by real clients, each reading only its own data, across a
//! restart:
//! - tenant a: the Go test program scraped with a bearer token (its pprof endpoints refuse
//!   requests without it), and spans sent by a real gRPC client (grpcio) with a bearer token
//!   in its metadata;
//! - tenant b: the Python Pyroscope SDK (pyroscope-io) with its tenant and basic-auth options,
//!   and the Python OpenTelemetry SDK's OTLP/HTTP exporter with the same headers.
//!
//! Every read of one tenant's credential is checked to hold none of the other's services,
//! functions, spans or traces. Then `spanprof tenant delete` removes tenant b's data (refused
//! while the server runs), and tenant a's stays.

use spanprof_testkit as support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::http::request;
use support::serve::Server;
use support::{process_dir, python, workspace_root, GoApp};

const READER_A: &str = "reader-of-tenant-a-7f3b9c2e61d84a05";
const READER_B: &str = "reader-of-tenant-b-0c5e8d1a94f27b63";
const WRITER_A: &str = "writer-of-tenant-a-b81f6e4d2a9c0357";
const GO_PPROF_TOKEN: &str = "go-pprof-token-19d3";
const PY_USER: &str = "py-b";
const PY_PASSWORD: &str = "py-b-password-4e7a";

fn get(server: &Server, token: &str, path: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let r = request(
        &server.addr,
        "GET",
        path,
        &[("Authorization", &auth)],
        b"",
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn json(server: &Server, token: &str, path: &str) -> Value {
    let (status, body) = get(server, token, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn services(server: &Server, token: &str) -> Vec<String> {
    let v = json(server, token, "/api/v1/services?spans=true");
    let mut s: Vec<String> = v["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    s.sort();
    s
}

/// Each tenant's reads hold its own data and none of the other's.
fn check_apart(server: &Server, py_trace: &str, grpc_trace: &str) {
    assert_eq!(services(server, READER_A), ["goapp-a", "grpc-a"]);
    assert_eq!(services(server, READER_B), ["py-b"]);
    // Tenant b's Python span profile and trace; tenant a cannot see them.
    let flame = get(server, READER_B, "/api/v1/flamegraph?service=py-b").1;
    assert!(flame.contains("burn"), "{flame}");
    assert_eq!(
        get(server, READER_B, &format!("/api/traces/{py_trace}")).0,
        200
    );
    let (status, body) = get(server, READER_A, &format!("/api/traces/{py_trace}"));
    assert_eq!(status, 404, "tenant a read tenant b's trace: {body}");
    let (status, body) = get(server, READER_A, "/api/v1/flamegraph?service=py-b");
    assert!(!body.contains("burn"), "{status} {body}");
    // Tenant a's Go heap and its gRPC span; tenant b cannot see them.
    let flame = get(
        server,
        READER_A,
        "/api/v1/flamegraph?service=goapp-a&type=heap",
    )
    .1;
    assert!(flame.contains("runtime."), "{flame}");
    assert_eq!(
        get(server, READER_A, &format!("/api/traces/{grpc_trace}")).0,
        200
    );
    assert_eq!(
        get(server, READER_B, &format!("/api/traces/{grpc_trace}")).0,
        404
    );
    for path in [
        "/api/v1/flamegraph?service=goapp-a&type=heap",
        "/api/v1/label-values?name=service_name",
        "/api/search?limit=100",
        "/api/search/tag/service.name/values",
        "/pyroscope/label-values?label=service_name",
    ] {
        // What the request itself names may be echoed ("no profiles of this service").
        let (_, body) = get(server, READER_B, path);
        let theirs_a = ["goapp-a", "grpc-a", "runtime.", grpc_trace];
        for theirs in theirs_a.into_iter().filter(|t| !path.contains(t)) {
            assert!(
                !body.contains(theirs),
                "{path} as tenant b holds {theirs}: {body}"
            );
        }
        let (_, body) = get(server, READER_A, path);
        for theirs in ["py-b", "burn", py_trace]
            .into_iter()
            .filter(|t| !path.contains(t))
        {
            assert!(
                !body.contains(theirs),
                "{path} as tenant a holds {theirs}: {body}"
            );
        }
    }
}

#[test]
fn real_clients_of_two_tenants_each_read_only_their_own() {
    let python = python();
    let dir = process_dir("tenants");
    let go = GoApp::start(&["-pprof-auth", &format!("Bearer {GO_PPROF_TOKEN}")]);
    let token_file = |name: &str, secret: &str| {
        let path = dir.join(name);
        std::fs::write(&path, secret).unwrap();
        path.display().to_string()
    };
    let config = dir.join("spanprof.yaml");
    std::fs::write(
        &config,
        format!(
            "receivers:\n  scrape:\n    - service: goapp-a\n      url: http://{go}\n      \
             profiles: [heap]\n      interval: 1s\n      tenant: a\n      \
             bearer_token_file: {go_token}\n\
             auth:\n  credentials:\n\
             \x20   - {{name: reader-a, scopes: [read], tenant: a, token_file: {ra}}}\n\
             \x20   - {{name: writer-a, scopes: [write], tenant: a, token_file: {wa}}}\n\
             \x20   - {{name: reader-b, scopes: [read], tenant: b, token_file: {rb}}}\n\
             \x20   - {{name: py-b, scopes: [write], tenant: b, username: {PY_USER}, password_file: {pw}}}\n",
            go = go.addr(),
            go_token = token_file("go.token", GO_PPROF_TOKEN),
            ra = token_file("ra.token", READER_A),
            wa = token_file("wa.token", WRITER_A),
            rb = token_file("rb.token", READER_B),
            pw = token_file("py.password", PY_PASSWORD),
        ),
    )
    .unwrap();
    let data = dir.join("data");
    let grpc_addr = format!("127.0.0.1:{}", support::serve::free_port());
    let extra = [
        "--config",
        config.to_str().unwrap(),
        "--otlp-grpc-addr",
        &grpc_addr,
    ];
    let server = Server::start(&data, "127.0.0.1:0", &extra);

    // Tenant b: the Python SDK and exporter, with the tenant and basic auth.
    let script =
        workspace_root().join("crates/spanprof-server/tests/pyroscope_python/span_profile.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}", server.addr))
        .env("SPANPROF_APP", "py-b")
        .env("SPANPROF_TENANT", "b")
        .env("SPANPROF_BASIC_AUTH", format!("{PY_USER}:{PY_PASSWORD}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script:?} failed (python/requirements.txt installed by .ci/setup?):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap();
    let py_trace = ids["trace_id"].as_str().unwrap().to_owned();

    // Tenant a: a span over gRPC with a bearer token; without one it is UNAUTHENTICATED.
    let grpc_trace = "a7".repeat(16);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let send = |metadata: &str| {
        let out = Command::new(&python)
            .arg(workspace_root().join("python/otlp_grpc_send.py"))
            .args([
                &grpc_addr,
                "traces",
                &grpc_trace,
                "a7a7a7a7a7a7a7a7",
                "GET /a",
            ])
            .args([(now - 20_000_000).to_string(), now.to_string()])
            .env("SPANPROF_GRPC_METADATA", metadata)
            .env("SPANPROF_SERVICE", "grpc-a")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused = send("");
    assert!(refused.contains("UNAUTHENTICATED"), "{refused}");
    let refused = send(&format!("authorization=Bearer {READER_A}"));
    assert!(refused.contains("PERMISSION_DENIED"), "{refused}");
    let sent = send(&format!("authorization=Bearer {WRITER_A}"));
    assert!(sent.contains("\"ok\": true"), "{sent}");

    server.wait_for("both tenants' data", Duration::from_secs(60), |s| {
        services(s, READER_A).len() == 2 && services(s, READER_B).len() == 1
    });
    check_apart(&server, &py_trace, &grpc_trace);
    let log = server.stop();
    for secret in [READER_A, READER_B, WRITER_A, PY_PASSWORD, GO_PPROF_TOKEN] {
        assert!(!log.contains(secret), "a secret is in the log:\n{log}");
    }
    assert!(data.join("tenants/a").is_dir() && data.join("tenants/b").is_dir());

    // Restarted on the same data: still apart.
    drop(go);
    let server = Server::start(&data, "127.0.0.1:0", &extra);
    check_apart(&server, &py_trace, &grpc_trace);

    // Deleting tenant b's data is one command, refused while the server runs.
    let data_arg = data.to_str().unwrap();
    let busy = support::spanprof(["tenant", "delete", "b", "--data", data_arg]);
    assert_eq!(busy.code(), Some(2), "{busy}");
    assert!(busy.stderr.contains("stop it first"), "{busy}");
    server.stop();
    let list = support::spanprof(["tenant", "list", "--data", data_arg]);
    assert!(
        list.stdout.contains("\na ") && list.stdout.contains("\nb "),
        "{list}"
    );
    let deleted = support::spanprof(["tenant", "delete", "b", "--data", data_arg]);
    assert_eq!(deleted.code(), Some(0), "{deleted}");
    for bad in ["..", "default", "nobody"] {
        let refused = support::spanprof(["tenant", "delete", bad, "--data", data_arg]);
        assert_eq!(refused.code(), Some(2), "{refused}");
    }
    let server = Server::start(&data, "127.0.0.1:0", &extra);
    assert!(services(&server, READER_B).is_empty());
    assert_eq!(services(&server, READER_A), ["goapp-a", "grpc-a"]);
    server.stop();
}
