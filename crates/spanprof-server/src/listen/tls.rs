//! TLS on the listeners (`server.tls`): rustls with ring, TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1` (gRPC clients need `h2`). The certificate chain and key come from PEM files and
//! are read again when the files change, so a certificate (and the client CAs) rotate
//! without a restart. A client
//! certificate may be asked for (mutual TLS) and, once verified, becomes the requests'
//! [`ClientIdentity`].
//!
//! A handshake must finish within the header deadline; one that fails (stopped halfway,
//! plaintext, a refused client certificate) closes its connection, is counted in
//! `spanprof_tls_handshake_failures_total{listener, reason}` and logged at most once every
//! [`crate::metrics::REFUSAL_LOG_EVERY`] per listener and reason.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{InconsistentKeys, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::client_identity::ClientIdentity;
use crate::metrics::Metrics;

/// `server.tls`: TLS on every listener (read from the file as is, keys as the fields).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenTlsConfig {
    /// PEM file of the server's certificate, then its intermediates (`server.tls.cert_file`,
    /// `--tls-cert`).
    pub cert_file: PathBuf,
    /// PEM file of the certificate's private key (PKCS#8, SEC1 or PKCS#1; not encrypted)
    /// (`server.tls.key_file`, `--tls-key`).
    pub key_file: PathBuf,
    /// PEM file of the CAs client certificates are checked against (mutual TLS); `None`
    /// asks clients for no certificate (`server.tls.client_ca_file`, `--tls-client-ca`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
    /// Whether a client certificate is needed (`server.tls.client_auth`,
    /// `--tls-client-auth`).
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// Whether clients must show a certificate the client CAs signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A client may show one (then it must be valid) or none (`optional`, the default).
    #[default]
    Optional,
    /// A handshake without a valid client certificate fails (`required`).
    Required,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "optional" => Ok(ClientAuth::Optional),
            "required" => Ok(ClientAuth::Required),
            other => Err(format!(
                "{other:?} is not a client_auth: give optional or required"
            )),
        }
    }
}

impl ListenTlsConfig {
    /// Refuses `client_auth: required` without client CAs: no certificate could pass.
    pub fn check(&self) -> Result<(), TlsError> {
        if self.client_auth == ClientAuth::Required && self.client_ca_file.is_none() {
            return Err(TlsError::RequiredWithoutCa);
        }
        Ok(())
    }
}

const CERT_SETTING: &str = "server.tls.cert_file (--tls-cert)";
const KEY_SETTING: &str = "server.tls.key_file (--tls-key)";
const CA_SETTING: &str = "server.tls.client_ca_file (--tls-client-ca)";

/// Why TLS could not be set up, naming the setting and file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{setting} {}: {source}", path.display())]
    Read {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// A certificate file holds no certificate.
    #[error(
        "{setting} {}: no certificate in it (a PEM file of BEGIN CERTIFICATE blocks, the \
         certificate first, then its intermediates)",
        path.display()
    )]
    NoCertificate {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error(
        "{KEY_SETTING} {}: no private key in it (a PEM file with a BEGIN PRIVATE KEY, EC \
         PRIVATE KEY or RSA PRIVATE KEY block; encrypted keys are not read)",
        path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// A file is not valid PEM, or a certificate or key in it cannot be used.
    #[error("{setting} {}: {detail}", path.display())]
    Invalid {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The key is not the one of the certificate.
    #[error(
        "{KEY_SETTING} {} is not the private key of the first certificate of {CERT_SETTING} {}: \
         give the key the certificate was made for",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// `client_auth: required` without `client_ca_file`.
    #[error(
        "server.tls.client_auth: required (--tls-client-auth) needs server.tls.client_ca_file \
         (--tls-client-ca), the CAs client certificates are checked against"
    )]
    RequiredWithoutCa,
}

/// The TLS side of the listeners: one rustls configuration, made again from the files when
/// they change.
pub struct ServerTls {
    /// Where the files are, to read them again.
    config: ListenTlsConfig,
    /// The acceptor of the files as last read.
    current: RwLock<TlsAcceptor>,
    check: Mutex<Check>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// The TLS of one listener: [`ServerTls`] and the listener's setting name (`http_addr`, …)
/// for metrics and logs.
#[derive(Debug, Clone)]
pub struct ListenerTls {
    /// The server's TLS.
    pub tls: Arc<ServerTls>,
    /// The listener's setting name.
    pub listener: &'static str,
}

impl ServerTls {
    /// Reads the certificate, key and client CAs of `config`; handshake failures are counted
    /// in `metrics`.
    pub fn load(config: &ListenTlsConfig, metrics: Arc<Metrics>) -> Result<ServerTls, TlsError> {
        config.check()?;
        // Stamped before reading: a change made while they are read is seen at the next check.
        let stamped = stamps(config);
        let acceptor = TlsAcceptor::from(Arc::new(server_config(config)?));
        Ok(ServerTls {
            config: config.clone(),
            current: RwLock::new(acceptor),
            check: Mutex::new(Check {
                at: Instant::now(),
                stamps: stamped,
            }),
            metrics,
        })
    }

    /// The acceptor of the files as they are now: read again when one of them changed since
    /// last looked at (at most every [`RELOAD_CHECK_EVERY`]). Files that cannot be used (a
    /// key not yet written beside its new certificate) keep the current acceptor and are
    /// warned of once; the next change is tried again.
    fn acceptor(&self) -> TlsAcceptor {
        // Another handshake is looking: this one takes the current acceptor.
        if let Ok(mut check) = self.check.try_lock() {
            if check.at.elapsed() >= RELOAD_CHECK_EVERY {
                check.at = Instant::now();
                let now = stamps(&self.config);
                if now != check.stamps {
                    check.stamps = now;
                    self.reload();
                }
            }
        }
        self.current
            .read()
            .expect("TLS acceptor lock poisoned")
            .clone()
    }

    fn reload(&self) {
        match server_config(&self.config) {
            Ok(server) => {
                *self.current.write().expect("TLS acceptor lock poisoned") =
                    TlsAcceptor::from(Arc::new(server));
                tracing::info!(
                    cert_file = %self.config.cert_file.display(),
                    client_ca_file = ?self.config.client_ca_file,
                    "TLS files changed on disk: new connections get the new certificate and \
                     client CAs"
                );
            }
            Err(e) => tracing::warn!(
                error = %e,
                "TLS files changed but cannot be used: new connections keep the previous \
                 certificate and client CAs (tried again when the files change)"
            ),
        }
    }

    /// Makes `stream` a TLS connection within `within` (the client's identity with it, when
    /// it showed a certificate), or counts and logs why not and closes it. A client that
    /// closes before sending anything (a TCP health check) is not counted.
    pub(super) async fn handshake(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
        listener: &'static str,
        within: Duration,
    ) -> Option<(TlsStream<TcpStream>, Option<ClientIdentity>)> {
        let deadline = tokio::time::Instant::now() + within;
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
            Err(_) => return self.failed(listener, peer, "timeout", "no ClientHello in time"),
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
        }
        // Every TLS connection starts with a handshake record (content type 22).
        if first[0] != 0x16 {
            if first[0].is_ascii_uppercase() {
                tell_plaintext_client(&mut stream, deadline).await;
                return self.failed(
                    listener,
                    peer,
                    "plaintext_http",
                    "the client sent plain HTTP to this TLS listener (it should use https://)",
                );
            }
            return self.failed(listener, peer, "not_tls", "the client does not speak TLS");
        }
        let tls = match tokio::time::timeout_at(deadline, self.acceptor().accept(stream)).await {
            Err(_) => {
                return self.failed(listener, peer, "timeout", "the handshake did not finish")
            }
            Ok(Err(e)) => return self.failed(listener, peer, failure_reason(&e), &e.to_string()),
            Ok(Ok(tls)) => tls,
        };
        let identity = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| ClientIdentity::from_certificate(leaf));
        Some((tls, identity))
    }

    /// Counts a failed handshake and logs it (a few a minute at most); always `None`.
    fn failed<T>(
        &self,
        listener: &'static str,
        peer: SocketAddr,
        reason: &'static str,
        why: &str,
    ) -> Option<T> {
        self.metrics
            .tls_handshake_failures
            .add(&[listener, reason], (), 1.0);
        if let Some(suppressed) = self
            .metrics
            .refusal_to_log(listener, reason, Instant::now())
        {
            // A client that gives up or goes silent is routine on an open port; one that
            // speaks the wrong protocol or shows a bad certificate is misconfigured.
            if matches!(reason, "timeout" | "closed") {
                tracing::debug!(listener, reason, client = %peer, suppressed, "TLS handshake failed: {why}");
            } else {
                tracing::warn!(listener, reason, client = %peer, suppressed, "TLS handshake failed: {why}");
            }
        }
        None
    }
}

/// The reason label of a failed handshake.
fn failure_reason(e: &io::Error) -> &'static str {
    let Some(tls) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return if e.kind() == io::ErrorKind::UnexpectedEof {
            "closed"
        } else {
            "protocol"
        };
    };
    match tls {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            "client_certificate"
        }
        // The client refused the handshake, most often because it does not trust the
        // server's certificate.
        rustls::Error::AlertReceived(_) => "client_alert",
        _ => "protocol",
    }
}

/// Answers a plain HTTP request with a 400 that says to use https:// (as Go's server does),
/// having read what it sent so that closing does not reset the connection before the
/// answer is read.
async fn tell_plaintext_client(stream: &mut TcpStream, deadline: tokio::time::Instant) {
    const ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
        connection: close\r\ncontent-length: 48\r\n\r\nclient sent an HTTP request to an HTTPS server\r\n";
    let answer = async {
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).await?;
        stream.write_all(ANSWER).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout_at(deadline, answer).await;
}

/// How often, at most, the certificate files are looked at for a change (at a handshake).
pub const RELOAD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// When the files were last looked at, and what they were then.
#[derive(Debug)]
struct Check {
    at: Instant,
    stamps: [Option<Stamp>; 3],
}

/// What tells a file changed without reading it: its size, modification time and inode
/// (rotation by rename, as Kubernetes does it through a symbolic link, changes the inode).
type Stamp = (u64, SystemTime, u64);

/// The stamps of the certificate, key and client CA files (`None`: absent or not set).
fn stamps(config: &ListenTlsConfig) -> [Option<Stamp>; 3] {
    [
        Some(&config.cert_file),
        Some(&config.key_file),
        config.client_ca_file.as_ref(),
    ]
    .map(|f| {
        let m = std::fs::metadata(f?).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let inode = 0;
        Some((m.len(), m.modified().ok()?, inode))
    })
}

/// The rustls configuration of `config`'s files as they are now.
fn server_config(config: &ListenTlsConfig) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = load_certified_key(&config.cert_file, &config.key_file)?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3");
    let builder = match &config.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(file) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certificates(file, CA_SETTING)? {
                roots.add(cert).map_err(|e| TlsError::Invalid {
                    setting: CA_SETTING,
                    path: file.clone(),
                    detail: format!("a certificate that cannot be a CA: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match config.client_auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                ClientAuth::Required => verifier,
            };
            let verifier = verifier.build().map_err(|e| TlsError::Invalid {
                setting: CA_SETTING,
                path: file.clone(),
                detail: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(server)
}

/// The chain of `cert_file` with the key of `key_file`, which must be its first
/// certificate's.
fn load_certified_key(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(cert_file, CERT_SETTING)?;
    let bytes = read(key_file, KEY_SETTING)?;
    let invalid = |detail: String| TlsError::Invalid {
        setting: KEY_SETTING,
        path: key_file.to_owned(),
        detail,
    };
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: key_file.to_owned(),
        },
        other => invalid(crate::tls::pem_error(&other)),
    })?;
    let signer = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| invalid(format!("a key rustls cannot use: {e}")))?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert: cert_file.to_owned(),
                key: key_file.to_owned(),
            })
        }
        Err(e) => Err(TlsError::Invalid {
            setting: CERT_SETTING,
            path: cert_file.to_owned(),
            detail: format!("its first certificate cannot be read: {e}"),
        }),
    }
}

fn read(path: &Path, setting: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

/// The certificates of PEM file `path`; at least one.
fn read_certificates(
    path: &Path,
    setting: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, setting)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            setting,
            path: path.to_owned(),
            detail: crate::tls::pem_error(&e),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            setting,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}
