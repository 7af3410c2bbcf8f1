//! TLS on a listener, in process, against a real rustls client and certificates of a private
//! CA made with `openssl`: ALPN, the client's identity in its requests (checked against what
//! `openssl x509` says of the certificate), mutual TLS required, rotation of the certificate
//! and client CA files, the start-up errors, and handshakes that stop halfway or are not TLS
//! at all.

use spanprof_testkit::pki;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use spanprof_server::listen::client_identity::{ClientIdentity, SubjectAltName};
use spanprof_server::listen::tls::{ClientAuth, ListenTlsConfig, ListenerTls, ServerTls};
use spanprof_server::listen::{serve_with, Deadlines};
use spanprof_server::metrics::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The header deadline the servers here run with: a handshake must finish within it.
const HEADER: Duration = Duration::from_millis(500);

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("listen-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The CA, the server's certificate for 127.0.0.1, and a client certificate with every kind
/// of subject alternative name, in `dir`.
fn make_certificates(dir: &Path) {
    pki::certificates(dir);
    pki::signed(
        dir,
        "client",
        "agent-7",
        "subjectAltName=DNS:agent.example,URI:spiffe://example.org/agent,IP:10.0.0.7,\
         email:ops@example.org\nextendedKeyUsage=clientAuth",
    );
}

fn config(dir: &Path, client_auth: Option<ClientAuth>) -> ListenTlsConfig {
    ListenTlsConfig {
        cert_file: dir.join("server.pem"),
        key_file: dir.join("server.key"),
        client_ca_file: client_auth.map(|_| dir.join("ca.pem")),
        client_auth: client_auth.unwrap_or_default(),
    }
}

/// A TLS server of `GET /whoami` (the client's identity, or `none`); its address, metrics
/// and stopper.
async fn start(config: &ListenTlsConfig) -> (SocketAddr, Arc<Metrics>, watch::Sender<bool>) {
    let metrics = Arc::new(Metrics::default());
    let tls = ServerTls::load(config, Arc::clone(&metrics)).expect("TLS loads");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let router = Router::new().route(
        "/whoami",
        get(|req: Request| async move {
            match req.extensions().get::<ClientIdentity>() {
                Some(id) => format!("{id:?}"),
                None => "none".to_owned(),
            }
        }),
    );
    let deadlines = Deadlines {
        header: HEADER,
        ..Deadlines::default()
    };
    let tls = ListenerTls {
        tls: Arc::new(tls),
        listener: "test",
    };
    tokio::spawn(serve_with(listener, router, stop_rx, deadlines, Some(tls)));
    (addr, metrics, stop_tx)
}

/// What a client got: the body of `GET /whoami`, the protocol ALPN chose and the server's
/// certificate.
struct Answer {
    body: String,
    alpn: Option<Vec<u8>>,
    server_cert: Vec<u8>,
}

/// `GET /whoami` over TLS trusting the CA of `dir`, showing `client` (`{name}.pem` and
/// `{name}.key` of `dir`) if given, offering `alpn`.
async fn whoami(
    addr: SocketAddr,
    dir: &Path,
    client: Option<&str>,
    alpn: &[&[u8]],
) -> Result<Answer, String> {
    whoami_over(addr, dir, client, alpn, rustls::DEFAULT_VERSIONS).await
}

/// [`whoami`] offering only TLS `versions`.
async fn whoami_over(
    addr: SocketAddr,
    dir: &Path,
    client: Option<&str>,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(name) => {
            let chain = CertificateDer::pem_file_iter(dir.join(format!("{name}.pem")))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let server_cert = session.peer_certificates().unwrap()[0].to_vec();
    let request = axum::http::Request::get("https://127.0.0.1/whoami")
        .body(String::new())
        .unwrap();
    // TLS 1.3 checks the client's certificate after the client's handshake ends: a refusal
    // shows as the request failing.
    let response = if alpn.as_deref() == Some(b"h2") {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| format!("h2: {e}"))?;
        tokio::spawn(conn);
        send.send_request(request).await
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("http1: {e}"))?;
        tokio::spawn(conn);
        send.send_request(request).await
    }
    .map_err(|e| format!("request: {e}"))?;
    use http_body_util::BodyExt;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(Answer {
        body: String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        alpn,
        server_cert,
    })
}

/// Waits (10 s at most) until `n` handshakes failed for `reason`: a refused connection may
/// be closed a moment before its failure is counted.
async fn failures(metrics: &Metrics, reason: &str, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    // Looks every 20 ms.
    let mut looks = tokio::time::interval(Duration::from_millis(20));
    loop {
        looks.tick().await;
        let counted = metrics.tls_handshake_failures.get(&["test", reason], ());
        if counted == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{counted} handshake failures for {reason}, not {n}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_client_certificate_is_the_requests_identity() {
    let dir = scratch("identity");
    make_certificates(&dir);
    let (addr, _metrics, _stop) = start(&config(&dir, Some(ClientAuth::Optional))).await;

    let answer = whoami(addr, &dir, Some("client"), &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(answer.alpn.as_deref(), Some(&b"h2"[..]));
    let expected = ClientIdentity {
        common_name: Some("agent-7".into()),
        subject_alt_names: vec![
            SubjectAltName::Dns("agent.example".into()),
            SubjectAltName::Uri("spiffe://example.org/agent".into()),
            SubjectAltName::Ip([10, 0, 0, 7].into()),
            SubjectAltName::Email("ops@example.org".into()),
        ],
        sha256_fingerprint: pki::fingerprint(&dir, "client.pem"),
    };
    assert_eq!(answer.body, format!("{expected:?}"));

    // Optional: no certificate is no identity; HTTP/1.1 by ALPN works the same.
    let answer = whoami(addr, &dir, None, &[b"http/1.1"]).await.unwrap();
    assert_eq!(answer.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(answer.body, "none");
    // And a client that offers no ALPN at all.
    assert_eq!(whoami(addr, &dir, None, &[]).await.unwrap().body, "none");
    // TLS 1.2 clients are served, their certificate read the same.
    let tls12 = [&rustls::version::TLS12];
    let answer = whoami_over(addr, &dir, Some("client"), &[b"h2"], &tls12)
        .await
        .unwrap();
    assert_eq!(answer.body, format!("{expected:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_client_certificates_refuse_clients_without_one() {
    let dir = scratch("required");
    make_certificates(&dir);
    // A certificate of another CA, which the server does not trust.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    make_certificates(&other);
    std::fs::copy(other.join("client.pem"), dir.join("stranger.pem")).unwrap();
    std::fs::copy(other.join("client.key"), dir.join("stranger.key")).unwrap();
    let (addr, metrics, _stop) = start(&config(&dir, Some(ClientAuth::Required))).await;

    let refused = whoami(addr, &dir, None, &[b"http/1.1"]).await;
    assert!(refused.is_err(), "served without a client certificate");
    let refused = whoami(addr, &dir, Some("stranger"), &[b"http/1.1"]).await;
    assert!(refused.is_err(), "served a certificate of another CA");
    let answer = whoami(addr, &dir, Some("client"), &[b"http/1.1"])
        .await
        .unwrap();
    assert!(answer.body.contains("agent-7"), "{}", answer.body);
    failures(&metrics, "client_certificate", 2.0).await;
}

/// New connections get the certificate written over the old files (by rename, as tools and
/// Kubernetes do it); a pair that cannot be used (a key that is not the certificate's) keeps
/// the last good one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = scratch("rotate");
    make_certificates(&dir);
    let (addr, _metrics, _stop) = start(&config(&dir, None)).await;
    let first = whoami(addr, &dir, None, &[]).await.unwrap().server_cert;

    // A new certificate for the same name from the same CA, and a mismatched pair first.
    pki::signed(&dir, "renewed", "127.0.0.1", "subjectAltName=IP:127.0.0.1");
    let replace = |from: &str, to: &str| {
        let tmp = dir.join(format!("{to}.tmp"));
        std::fs::copy(dir.join(from), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(to)).unwrap();
    };
    replace("renewed.pem", "server.pem");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The key is still the old one: the old certificate goes on being served. Checked past
    // the reload interval, so the server has looked at the files.
    let looked = Instant::now() + spanprof_server::listen::tls::RELOAD_CHECK_EVERY * 2;
    // Handshakes every 100 ms, here and below.
    let mut looks = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < looked {
        looks.tick().await;
        let served = whoami(addr, &dir, None, &[]).await.unwrap().server_cert;
        assert_eq!(served, first, "a certificate without its key was served");
    }
    replace("renewed.key", "server.key");
    let renewed = std::fs::read(dir.join("renewed.pem")).unwrap();
    let renewed = CertificateDer::from_pem_slice(&renewed).unwrap().to_vec();
    loop {
        looks.tick().await;
        let served = whoami(addr, &dir, None, &[]).await.unwrap().server_cert;
        if served == renewed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate is not served 20 s after its files were written"
        );
    }
}

/// The client CAs rotate as the certificate does: a client of a CA added to the file is let
/// in without a restart, and a CA file that cannot be used keeps the last good CAs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_client_cas_are_used_without_a_restart() {
    let dir = scratch("rotate-ca");
    make_certificates(&dir);
    // A second CA, and a client certificate it signed (`other/client.pem`).
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    pki::certificates(&other);
    pki::client_certificate(&other);
    let replace = |bytes: &[u8]| {
        let tmp = dir.join("clients-ca.pem.tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, dir.join("clients-ca.pem")).unwrap();
    };
    let first_ca = std::fs::read(dir.join("ca.pem")).unwrap();
    replace(&first_ca);
    let mut cfg = config(&dir, Some(ClientAuth::Required));
    cfg.client_ca_file = Some(dir.join("clients-ca.pem"));
    let (addr, metrics, _stop) = start(&cfg).await;
    assert!(whoami(addr, &dir, Some("client"), &[]).await.is_ok());
    assert!(
        whoami(addr, &dir, Some("other/client"), &[]).await.is_err(),
        "a client of a CA not in the file was let in"
    );
    failures(&metrics, "client_certificate", 1.0).await;

    // Both CAs in the file: the other CA's client gets in once the server has looked.
    let mut both = first_ca.clone();
    both.extend(std::fs::read(other.join("ca.pem")).unwrap());
    replace(&both);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut looks = tokio::time::interval(Duration::from_millis(100));
    loop {
        looks.tick().await;
        if whoami(addr, &dir, Some("other/client"), &[]).await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a client of the CA added to client_ca_file is refused 20 s later"
        );
    }
    assert!(whoami(addr, &dir, Some("client"), &[]).await.is_ok());

    // A file that is not PEM: the CAs read last stay, checked past the reload interval.
    replace(b"not a certificate\n");
    let looked = Instant::now() + spanprof_server::listen::tls::RELOAD_CHECK_EVERY * 2;
    while Instant::now() < looked {
        looks.tick().await;
        let answer = whoami(addr, &dir, Some("other/client"), &[]).await;
        assert!(answer.is_ok(), "an unusable CA file dropped the good CAs");
    }
}

#[test]
fn bad_files_are_refused_at_start_naming_the_setting_and_file() {
    let dir = scratch("bad-files");
    make_certificates(&dir);
    std::fs::write(dir.join("notes.txt"), "not PEM at all\n").unwrap();
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.join("broken.pem"), broken).unwrap();
    let good = config(&dir, None);
    let with = |f: &dyn Fn(&mut ListenTlsConfig)| {
        let mut c = good.clone();
        f(&mut c);
        ServerTls::load(&c, Arc::default())
            .expect_err("refused")
            .to_string()
    };
    type Change<'a> = &'a dyn Fn(&mut ListenTlsConfig);
    let cases: [(Change, &str); 6] = [
        (
            &|c| c.cert_file = dir.join("missing.pem"),
            "server.tls.cert_file (--tls-cert) ",
        ),
        (
            &|c| c.cert_file = dir.join("notes.txt"),
            "notes.txt: no certificate in it",
        ),
        (&|c| c.cert_file = dir.join("broken.pem"), "broken.pem: "),
        (
            &|c| c.key_file = dir.join("server.pem"),
            "server.pem: no private key in it",
        ),
        (
            &|c| c.key_file = dir.join("client.key"),
            "client.key is not the private key of the first certificate of",
        ),
        (
            &|c| c.client_ca_file = Some(dir.join("notes.txt")),
            "server.tls.client_ca_file (--tls-client-ca) ",
        ),
    ];
    for (change, expected) in cases {
        let e = with(change);
        assert!(e.contains(expected), "{e:?} lacks {expected:?}");
    }
    assert!(with(&|c| c.cert_file = dir.join("missing.pem")).contains("missing.pem"));
    let e = with(&|c| c.client_auth = ClientAuth::Required);
    assert!(e.contains("needs server.tls.client_ca_file"), "{e}");
}

/// Seconds until the server closes a connection that sent `sent` and then nothing, and
/// what it answered.
async fn closed_after(addr: SocketAddr, sent: &[u8]) -> (f64, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(sent).await.unwrap();
    let start = Instant::now();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "{sent:?}: still open after 20 s");
    (start.elapsed().as_secs_f64(), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_handshakes_and_plaintext_are_closed_and_counted() {
    let dir = scratch("bad-input");
    make_certificates(&dir);
    let (addr, metrics, _stop) = start(&config(&dir, None)).await;

    // Nothing; the start of a ClientHello record, then silence; a whole ClientHello's
    // record header with a few bytes of it.
    for sent in [
        &b""[..],
        &[0x16, 0x03, 0x01],
        &[
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ],
    ] {
        let (secs, answer) = closed_after(addr, sent).await;
        assert!(secs < 10.0, "{sent:?}: closed after {secs} s");
        assert!(answer.is_empty(), "{sent:?}: {answer:?}");
    }
    failures(&metrics, "timeout", 3.0).await;

    // Plain HTTP: a 400 that says what is wrong.
    let (_, answer) = closed_after(addr, b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("HTTP request to an HTTPS server"),
        "{answer}"
    );
    failures(&metrics, "plaintext_http", 1.0).await;
    // Bytes that are neither.
    let (_, answer) = closed_after(addr, b"\x00\x01garbage").await;
    assert!(answer.is_empty());
    failures(&metrics, "not_tls", 1.0).await;
    // A handshake record holding an empty ServerHello, which no client sends.
    let server_hello = [0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00];
    let (_, answer) = closed_after(addr, &server_hello).await;
    // rustls answers some broken messages with an alert before closing.
    assert!(answer.is_empty() || answer[0] == 0x15, "{answer:?}");
    failures(&metrics, "protocol", 1.0).await;

    // The server goes on serving.
    let answer = whoami(addr, &dir, None, &[b"h2"]).await.unwrap();
    assert_eq!(answer.body, "none");
}
