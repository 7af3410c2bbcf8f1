//! TLS for the requests spanprof makes: a private CA made with `openssl` signs a certificate
//! for 127.0.0.1, and spanprof trusts that CA through `SSL_CERT_FILE`.
//! - Forwarding: profiles go to `https://` endpoints, over OTLP/HTTP and OTLP gRPC, of a real
//!   TLS receiver (Python's `ssl` and grpcio, `python/otlp_tls_sink.py`). A third forwarder
//!   reaches it by a name its certificate does not hold: refused, says why, keeps its queue.
//! - Scraping: the Go test service serves its pprof endpoints over HTTPS (Go's own TLS); it
//!   is scraped, and the same target reached by the wrong name is refused the same way.
//! - Each endpoint's own `tls` block instead of `SSL_CERT_FILE`: its CA file, a client
//!   certificate for mutual TLS (both the receiver and the Go service require one), and
//!   certificates not checked at all.

use spanprof_testkit as support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::pki::{certificates, client_certificate};
use support::serve::Server;
use support::{poll, process_dir, python, workspace_root, GoApp};

/// `spanprof serve ARGS` trusting the CA [`certificates`] made in `dir`.
fn server_trusting_the_ca(dir: &Path, args: &[&str]) -> Server {
    let ca = dir.join("ca.pem");
    let env = [("SSL_CERT_FILE", ca.to_str().unwrap())];
    Server::start_with_env(&dir.join("data"), "127.0.0.1:0", args, &env)
}

/// Checks that `log` has lines with `who` and `what` (a failure of the target reached as
/// localhost), each saying the certificate does not hold that name.
fn refused_for_the_name(log: &str, who: &str, what: &str) {
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(who) && l.contains(what))
        .collect();
    assert!(
        !refused.is_empty()
            && refused
                .iter()
                .all(|l| l.contains("invalid peer certificate") && l.contains("localhost")),
        "{who}: {refused:#?}\n{log}"
    );
}

/// The TLS receiver; its stdout lines arrive on `lines`. Killed on drop.
struct Sink {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pushes the Go test profile to `server`'s `/ingest` (service `tls-app`).
fn push_go_profile(server: &Server) {
    let pprof = std::fs::read(workspace_root().join("testdata/go/cpu-10s.pb.gz")).unwrap();
    server.post(
        "/ingest?name=tls-app&format=pprof",
        "application/octet-stream",
        &pprof,
    );
}

impl Sink {
    /// Waits until a line over HTTP and one over gRPC satisfy `wanted(protocol, line)`;
    /// returns every line received by then.
    fn over_both_protocols(&self, what: &str, wanted: impl Fn(&str, &str) -> bool) -> Vec<String> {
        let mut received: Vec<String> = Vec::new();
        poll(
            &format!("{what}, over HTTP and gRPC"),
            Duration::from_secs(60),
            || {
                received.extend(self.lines.try_iter());
                let has = |p: &str| received.iter().any(|l| wanted(p, l));
                if has("http") && has("grpc") {
                    Ok(())
                } else {
                    Err(format!("{received:?}"))
                }
            },
        );
        received
    }

    fn start(dir: &Path) -> (Sink, u16, u16) {
        Sink::start_with(dir, &[])
    }

    /// One that serves only clients with a certificate the CA of `dir` signed.
    fn start_mutual(dir: &Path) -> (Sink, u16, u16) {
        Sink::start_with(dir, &[dir.join("ca.pem")])
    }

    fn start_with(dir: &Path, extra: &[std::path::PathBuf]) -> (Sink, u16, u16) {
        let script = workspace_root().join("python/otlp_tls_sink.py");
        let mut child = Command::new(python())
            .arg(script)
            .args([dir.join("server.pem"), dir.join("server.key")])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let sink = Sink { child, lines };
        let first = sink
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the TLS sink did not start");
        let port = |name: &str| -> u16 {
            first
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no {name} port in {first:?}"))
        };
        let (https, grpc) = (port("https"), port("grpc"));
        (sink, https, grpc)
    }
}

#[test]
fn profiles_are_forwarded_over_tls_to_a_receiver_a_private_ca_vouches_for() {
    let dir = process_dir("forward-tls");
    certificates(&dir);
    let (sink, https, grpc) = Sink::start(&dir);
    let http_url = format!("web=https://127.0.0.1:{https}");
    let grpc_url = format!("rpc=https://127.0.0.1:{grpc}");
    // The certificate is for 127.0.0.1, not for this name.
    let wrong_name = format!("misnamed=https://localhost:{https}");
    let server = server_trusting_the_ca(
        &dir,
        &[
            "--forward-otlp-http",
            &http_url,
            "--forward-otlp-grpc",
            &grpc_url,
            "--forward-otlp-http",
            &wrong_name,
        ],
    );
    push_go_profile(&server);

    // Both protocols deliver the profile: 598 samples in each of its two sample types.
    let mut received = sink.over_both_protocols("the profile at the TLS receiver", |p, line| {
        line == format!("received {p} profiles=2 samples=1196")
    });
    let exported = |name: &str| {
        server.metric(&format!(
            "spanprof_forwarded_records_total{{forwarder=\"{name}\",signal=\"profiles\"}}"
        ))
    };
    poll("the exports counted", Duration::from_secs(30), || {
        let n = (exported("web"), exported("rpc"));
        if n == (1.0, 1.0) {
            Ok(())
        } else {
            Err(format!("{n:?}"))
        }
    });
    assert_eq!(exported("misnamed"), 0.0);
    let log = server.stop();
    refused_for_the_name(&log, "forwarder=misnamed", "export failed");
    received.extend(sink.lines.try_iter());
    assert_eq!(
        received.len(),
        2,
        "one export a protocol, none through the misnamed forwarder: {received:?}"
    );
}

#[test]
fn a_go_service_serving_pprof_over_tls_is_scraped() {
    let dir = process_dir("scrape-tls");
    certificates(&dir);
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    let app = GoApp::start(&[
        "-tls-cert",
        cert.to_str().unwrap(),
        "-tls-key",
        key.to_str().unwrap(),
    ]);
    let port = app.addr().rsplit(':').next().unwrap().to_string();
    let trusted = format!("secure=https://127.0.0.1:{port}");
    let misnamed = format!("misnamed=https://localhost:{port}");
    let server = server_trusting_the_ca(
        &dir,
        &[
            "--scrape",
            &trusted,
            "--scrape",
            &misnamed,
            "--scrape-profiles",
            "heap,goroutine",
            "--scrape-interval",
            "1s",
        ],
    );
    let scrapes = |target: &str, metric: &str| server.heap_scrape_metric(metric, target);
    poll(
        "a scrape over TLS, and a refused one",
        Duration::from_secs(60),
        || {
            let n = (
                scrapes("secure", "spanprof_scrapes_total"),
                scrapes("misnamed", "spanprof_scrape_errors_total"),
            );
            if n.0 >= 1.0 && n.1 >= 1.0 {
                Ok(())
            } else {
                Err(format!("{n:?}"))
            }
        },
    );
    assert_eq!(scrapes("misnamed", "spanprof_scrapes_total"), 0.0);
    let services =
        support::http::get(&server.addr, "/api/v1/services", Duration::from_secs(10)).unwrap();
    let services = String::from_utf8_lossy(&services.body).into_owned();
    assert!(services.contains("\"secure\""), "{services}");
    let log = server.stop();
    refused_for_the_name(&log, "service=misnamed", "scrape failed");
    drop(app);
}

/// Each endpoint's own `tls` block, with no `SSL_CERT_FILE`: a private CA's file, a client
/// certificate for endpoints that want one (mutual TLS: the Python receiver over HTTPS and
/// gRPC, the Go service's pprof), and certificates not checked at all (a target reached by a
/// name its certificate lacks, warned at start). Without its client certificate, an
/// endpoint that wants one refuses, and the log says so.
#[test]
fn endpoints_take_their_own_ca_and_client_certificates() {
    let dir = process_dir("tls-settings");
    certificates(&dir);
    client_certificate(&dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let (sink, https, grpc) = Sink::start_mutual(&dir);
    let app = GoApp::start(&[
        "-tls-cert",
        &path("server.pem"),
        "-tls-key",
        &path("server.key"),
        "-tls-client-ca",
        &path("ca.pem"),
    ]);
    let port = app.addr().rsplit(':').next().unwrap().to_string();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let mutual = format!("{{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}");
    let unchecked = format!("{{insecure_skip_verify: true, cert_file: {cert}, key_file: {key}}}");
    let no_cert = format!("{{ca_file: {ca}}}");
    let exporter = |name: &str, protocol: &str, port: u16, tls: &str| {
        format!(
            "  - {{name: {name}, protocol: {protocol}, endpoint: \"https://127.0.0.1:{port}\", \
             signals: [profiles], tls: {tls}}}\n"
        )
    };
    let target = |name: &str, host: &str, tls: &str| {
        format!(
            "    - {{service: {name}, url: \"https://{host}:{port}\", profiles: [heap], \
             interval: 1s, tls: {tls}}}\n"
        )
    };
    let config = format!(
        "exporters:\n{}{}{}receivers:\n  scrape:\n{}{}{}",
        exporter("mutual", "http", https, &mutual),
        exporter("mutualrpc", "grpc", grpc, &mutual),
        exporter("nocert", "http", https, &no_cert),
        target("mutual", "127.0.0.1", &mutual),
        // The certificate is for 127.0.0.1, not for this name: taken unchecked.
        target("unchecked", "localhost", &unchecked),
        target("nocert", "127.0.0.1", &no_cert),
    );
    std::fs::write(dir.join("spanprof.yaml"), config).unwrap();
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &["--config", &path("spanprof.yaml")],
    );
    push_go_profile(&server);

    // Both protocols deliver profiles (the pushed one, the scraped ones) with the client
    // certificate shown.
    let mut received = sink
        .over_both_protocols("profiles at the mutual-TLS receiver", |p, line| {
            line.starts_with(&format!("received {p} "))
        });
    let metric = |name: &str, target: &str| server.heap_scrape_metric(name, target);
    poll(
        "scrapes of mutual and unchecked, failures of nocert and of its forwarder",
        Duration::from_secs(60),
        || {
            let n = [
                metric("spanprof_scrapes_total", "mutual"),
                metric("spanprof_scrapes_total", "unchecked"),
                metric("spanprof_scrape_errors_total", "nocert"),
                server.metric(
                    "spanprof_forward_failed_total{forwarder=\"nocert\",signal=\"profiles\"}",
                ),
            ];
            if n.iter().all(|&x| x >= 1.0) {
                Ok(())
            } else {
                Err(format!("{n:?}"))
            }
        },
    );
    assert_eq!(metric("spanprof_scrapes_total", "nocert"), 0.0);
    assert_eq!(
        server.metric("spanprof_forwarded_records_total{forwarder=\"nocert\",signal=\"profiles\"}"),
        0.0
    );
    let log = server.stop();
    drop(app);
    received.extend(sink.lines.try_iter());
    assert!(
        received
            .iter()
            .all(|l| l.ends_with(" client=spanprof-client")),
        "{received:?}"
    );
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("TLS certificates are not checked"))
        .collect();
    assert!(
        warned.len() == 1 && warned[0].contains("service=unchecked"),
        "{warned:#?}\n{log}"
    );
    for who in ["service=nocert", "forwarder=nocert"] {
        let failed: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(who) && l.contains(" WARN "))
            .collect();
        // The server refuses after the handshake (TLS 1.3 checks the client's certificate
        // last): the client reads its alert (Go's BadCertificate, Python's
        // CertificateRequired) or, when the close comes first, a connection that was cut.
        assert!(
            !failed.is_empty() && failed.iter().all(|l| l.contains("connection")),
            "{who}: {failed:#?}\n{log}"
        );
    }
}
