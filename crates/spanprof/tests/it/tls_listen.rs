//! TLS on `spanprof serve`'s listeners, with real clients trusting a private CA made with
//! `openssl`: the OpenTelemetry SDK's OTLP exporters over HTTP and gRPC, the pyroscope-io
//! SDK pushing profiles, Python's `ssl` reading the API and the UI, mutual TLS required (from the config file), plaintext and
//! half-finished handshakes that neither crash the server nor stop it answering, and
//! certificate files that cannot be used refused at start with their setting named.

use spanprof_testkit as support;

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::pki::{certificates, client_certificate};
use support::serve::{free_port, Server};
use support::{process_dir, python, run, workspace_root, COMMAND_TIMEOUT};

/// `python/tls_client.py ARGS`, trusting the CA of `dir`, showing its client certificate
/// when `mutual`; its JSON line.
fn tls_client(dir: &Path, command: &str, url: &str, mutual: bool) -> serde_json::Value {
    tls_client_with(dir, command, url, mutual, "")
}

/// [`tls_client`] sending `headers` ("key=value,key=value") with its requests.
fn tls_client_with(
    dir: &Path,
    command: &str,
    url: &str,
    mutual: bool,
    headers: &str,
) -> serde_json::Value {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let mut cmd = Command::new(python());
    cmd.env("SPANPROF_HEADERS", headers);
    // requests (under the OTLP/HTTP exporter) takes these over the exporter's own CA file.
    cmd.env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .arg(workspace_root().join("python/tls_client.py"))
        .args([command, url, &path("ca.pem")]);
    if mutual {
        cmd.args([path("client.pem"), path("client.key")]);
    }
    let out = run(cmd, COMMAND_TIMEOUT);
    assert!(
        !out.stderr.contains("ModuleNotFoundError"),
        "run .ci/setup (target/venv with python/requirements.txt):\n{out}"
    );
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}:\n{out}"))
}

/// `GET url` with Python's `ssl`: its status and body.
fn get(dir: &Path, url: &str, mutual: bool) -> (u64, String) {
    let r = tls_client(dir, "get", url, mutual);
    let status = r["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("GET {url}: {r}"));
    (status, r["body"].as_str().unwrap_or_default().to_owned())
}

/// A failed handshake count of `/metrics` over TLS.
fn handshake_failures(dir: &Path, addr: &str, listener: &str, reason: &str) -> f64 {
    let (_, metrics) = get(dir, &format!("https://{addr}/metrics"), false);
    let series = format!(
        "spanprof_tls_handshake_failures_total{{listener=\"{listener}\",reason=\"{reason}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Checks that span `export` (tls_client's answer) was stored: the trace API, over TLS,
/// has it.
fn stored(dir: &Path, addr: &str, export: &serde_json::Value) {
    assert_eq!(export["ok"], true, "{export}");
    let trace = export["trace_id"].as_str().unwrap();
    let (status, body) = get(dir, &format!("https://{addr}/api/v1/traces/{trace}"), false);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(export["span_id"].as_str().unwrap()),
        "{export}: {body}"
    );
}

#[test]
fn otel_exporters_send_over_tls_and_the_api_answers_over_it() {
    let dir = process_dir("tls-listen");
    certificates(&dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let (otlp_http, otlp_grpc) = (free_port(), free_port());
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &[
            "--tls-cert",
            &path("server.pem"),
            "--tls-key",
            &path("server.key"),
            "--otlp-http-addr",
            &format!("127.0.0.1:{otlp_http}"),
            "--otlp-grpc-addr",
            &format!("127.0.0.1:{otlp_grpc}"),
        ],
    );
    let addr = server.addr.clone();

    // The SDK's exporters on each listener: OTLP/HTTP on :4318's and the main one, gRPC.
    for url in [
        format!("https://127.0.0.1:{otlp_http}/v1/traces"),
        format!("https://{addr}/v1/traces"),
    ] {
        stored(&dir, &addr, &tls_client(&dir, "export-http", &url, false));
    }
    let grpc = format!("https://127.0.0.1:{otlp_grpc}");
    stored(&dir, &addr, &tls_client(&dir, "export-grpc", &grpc, false));

    // The pyroscope-io SDK's uploads, read back from the API; and the UI.
    let pushed = tls_client(&dir, "pyroscope", &format!("https://{addr}"), false);
    assert_eq!(pushed["done"], true, "{pushed}");
    support::poll("py-tls among the services", Duration::from_secs(30), || {
        let (status, services) = get(&dir, &format!("https://{addr}/api/v1/services"), false);
        if status == 200 && services.contains("\"py-tls\"") {
            Ok(())
        } else {
            Err(format!("{status}: {services}"))
        }
    });
    let (status, page) = get(&dir, &format!("https://{addr}/"), false);
    assert!(status == 200 && page.contains("<html"), "{status}: {page}");

    // Plain HTTP to the TLS port: a 400 that says so.
    let plain = support::http::get(&addr, "/health", Duration::from_secs(10)).unwrap();
    let body = String::from_utf8_lossy(&plain.body);
    assert_eq!(plain.status, 400, "{body}");
    assert!(body.contains("HTTP request to an HTTPS server"), "{body}");

    // Handshakes left halfway, held open while the server goes on answering, then given up.
    let half: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            // A TLS record header announcing a ClientHello that never comes.
            s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
            s
        })
        .collect();
    let (status, _) = get(&dir, &format!("https://{addr}/health"), false);
    assert_eq!(status, 200);
    drop(half);
    support::poll(
        "the abandoned handshakes counted",
        Duration::from_secs(30),
        || {
            let n = handshake_failures(&dir, &addr, "http_addr", "closed");
            if n >= 40.0 {
                Ok(())
            } else {
                Err(format!("{n}"))
            }
        },
    );
    assert_eq!(
        handshake_failures(&dir, &addr, "http_addr", "plaintext_http"),
        1.0
    );

    let log = server.stop();
    assert!(log.contains("spanprof serving on https://"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// `spanprof serve` with TLS on its three listeners (the CA of `dir` checking client
/// certificates, `client_auth`), and `extra` appended to its config file; the server and its
/// OTLP/HTTP and OTLP gRPC ports.
fn serve_mutual(dir: &Path, client_auth: &str, extra: &str) -> (Server, u16, u16) {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let (otlp_http, otlp_grpc) = (free_port(), free_port());
    let config = format!(
        "server:\n  otlp_http_addr: 127.0.0.1:{otlp_http}\n  otlp_grpc_addr: \
         127.0.0.1:{otlp_grpc}\n  tls:\n    cert_file: {}\n    key_file: {}\n    \
         client_ca_file: {}\n    client_auth: {client_auth}\n{extra}",
        path("server.pem"),
        path("server.key"),
        path("ca.pem"),
    );
    std::fs::write(dir.join("spanprof.yaml"), config).unwrap();
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &[
            "--config",
            &path("spanprof.yaml"),
            "--otlp-http-addr",
            &format!("127.0.0.1:{otlp_http}"),
            "--otlp-grpc-addr",
            &format!("127.0.0.1:{otlp_grpc}"),
        ],
    );
    (server, otlp_http, otlp_grpc)
}

/// `server.tls` from the config file with `client_auth: required`: the SDK's exporters and
/// Python's `ssl` are served with the client certificate and refused without it.
#[test]
fn mutual_tls_required_refuses_clients_without_a_certificate() {
    let dir = process_dir("tls-listen-mutual");
    certificates(&dir);
    client_certificate(&dir);
    let (server, otlp_http, otlp_grpc) = serve_mutual(&dir, "required", "");
    let addr = server.addr.clone();
    let health = format!("https://{addr}/health");

    let refused = tls_client(&dir, "get", &health, false);
    assert!(
        refused["error"].is_string(),
        "served without a certificate: {refused}"
    );
    assert_eq!(get(&dir, &health, true).0, 200);

    let http = format!("https://127.0.0.1:{otlp_http}/v1/traces");
    let grpc = format!("https://127.0.0.1:{otlp_grpc}");
    for (command, url) in [("export-http", &http), ("export-grpc", &grpc)] {
        let refused = tls_client(&dir, command, url, false);
        assert_eq!(
            refused["ok"], false,
            "{command} without a certificate: {refused}"
        );
        let sent = tls_client(&dir, command, url, true);
        assert_eq!(sent["ok"], true, "{command}: {sent}");
        let trace = sent["trace_id"].as_str().unwrap();
        let (status, body) = get(&dir, &format!("https://{addr}/api/v1/traces/{trace}"), true);
        assert!(
            status == 200 && body.contains(sent["span_id"].as_str().unwrap()),
            "{body}"
        );
    }
    let log = server.stop();
    assert!(log.contains("client_certificate"), "{log}");
}

#[test]
fn unusable_certificate_files_stop_the_start_naming_the_setting() {
    let dir = process_dir("tls-listen-bad");
    certificates(&dir);
    client_certificate(&dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let data = path("data");
    let serve = |cert: &str, key: &str| {
        support::spanprof([
            "serve",
            "--data",
            &data,
            "--http-addr",
            "127.0.0.1:0",
            "--otlp-http-addr",
            "off",
            "--otlp-grpc-addr",
            "off",
            "--tls-cert",
            &path(cert),
            "--tls-key",
            &path(key),
        ])
    };
    for (cert, key, expected) in [
        (
            "missing.pem",
            "server.key",
            "server.tls.cert_file (--tls-cert) ",
        ),
        (
            "server.pem",
            "client.key",
            "is not the private key of the first certificate",
        ),
        ("server.key", "server.key", "no certificate in it"),
    ] {
        let run = serve(cert, key);
        assert_eq!(run.code(), Some(2), "{run}");
        assert!(run.stderr.contains(expected), "{expected}: {run}");
        run.assert_no_panic();
    }
    // A key without its certificate.
    let run = support::spanprof(["serve", "--data", &data, "--tls-key", &path("server.key")]);
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(run.stderr.contains("--tls-cert"), "{run}");
}

/// A client certificate as a credential (`client_cert_sha256` in `auth.credentials`, with
/// `client_auth: optional`): a client showing it gets its credential's scopes and tenant; one
/// showing none, and no token, is 401. Beside it, the OTel SDK's gRPC exporter over TLS with
/// another tenant's bearer token in its headers: its span is that tenant's only.
#[test]
fn a_client_certificate_is_a_credential_with_its_scopes_and_tenant() {
    let dir = process_dir("tls-listen-cert-credential");
    certificates(&dir);
    client_certificate(&dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let out = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-fingerprint",
            "-sha256",
            "-in",
            &path("client.pem"),
        ])
        .output()
        .expect("openssl: apt-get install openssl, or run .ci/setup");
    let fingerprint: String = String::from_utf8_lossy(&out.stdout)
        .split_once('=')
        .unwrap_or_else(|| panic!("no fingerprint: {out:?}"))
        .1
        .trim()
        .replace(':', "")
        .to_ascii_lowercase();
    assert_eq!(fingerprint.len(), 64, "{fingerprint}");
    std::fs::write(dir.join("other.token"), "a-token-of-tenant-b-8c1d").unwrap();
    let auth = format!(
        "auth:\n  credentials:\n    - {{name: collector, scopes: [read, write], tenant: certs, \
         client_cert_sha256: {fingerprint}}}\n    - {{name: other, scopes: [read, write], \
         tenant: b, token_file: {}}}\n",
        path("other.token"),
    );
    let (server, otlp_http, otlp_grpc) = serve_mutual(&dir, "optional", &auth);
    let addr = server.addr.clone();
    let services = format!("https://{addr}/api/v1/services?spans=true");
    assert_eq!(get(&dir, &services, false).0, 401);
    assert_eq!(get(&dir, &services, true).0, 200);

    let http = format!("https://127.0.0.1:{otlp_http}/v1/traces");
    let refused = tls_client(&dir, "export-http", &http, false);
    assert_eq!(
        refused["ok"], false,
        "exported without a credential: {refused}"
    );
    let sent = tls_client(&dir, "export-http", &http, true);
    assert_eq!(sent["ok"], true, "{sent}");
    let trace = sent["trace_id"].as_str().unwrap();
    let (status, body) = get(&dir, &format!("https://{addr}/api/v1/traces/{trace}"), true);
    assert!(
        status == 200 && body.contains(sent["span_id"].as_str().unwrap()),
        "{status} {body}"
    );

    // Tenant b over gRPC with TLS, its token in the exporter's headers.
    let grpc = format!("https://127.0.0.1:{otlp_grpc}");
    let bearer = "authorization=Bearer a-token-of-tenant-b-8c1d";
    let refused = tls_client(&dir, "export-grpc", &grpc, false);
    assert_eq!(
        refused["ok"], false,
        "exported without a credential: {refused}"
    );
    let sent_b = tls_client_with(&dir, "export-grpc", &grpc, false, bearer);
    assert_eq!(sent_b["ok"], true, "{sent_b}");
    let trace_b = format!(
        "https://{addr}/api/v1/traces/{}",
        sent_b["trace_id"].as_str().unwrap()
    );
    let r = tls_client_with(&dir, "get", &trace_b, false, bearer);
    assert_eq!(r["status"], 200, "{r}");
    // The certificate's tenant sees neither the other's trace nor its span.
    assert_eq!(get(&dir, &trace_b, true).0, 404);
    let r = tls_client_with(
        &dir,
        "get",
        &format!("https://{addr}/api/v1/traces/{trace}"),
        false,
        bearer,
    );
    assert_eq!(r["status"], 404, "{r}");
    server.stop();
    for tenant in ["certs", "b"] {
        assert!(
            dir.join("data/tenants").join(tenant).is_dir(),
            "tenant {tenant} has no store"
        );
    }
}
