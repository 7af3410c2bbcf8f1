//! TLS for the requests the server makes itself: forwarders' exports and scrapes of
//! `https://` endpoints. rustls (ring), the peer's certificate checked against the system's
//! trusted certificates, or those of the PEM file `SSL_CERT_FILE` names (a private CA), or an
//! endpoint's own [`TlsSettings`]: its CA file, a client certificate (mutual TLS), or no
//! check at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Why TLS settings of an endpoint the server connects to cannot work; each names the
/// setting (and file) that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// No trusted certificates to check `https://` peers with (the reason they were not found).
    #[error(
        "no trusted certificates to check https:// endpoints with ({0}): install the system's \
         CA certificates (ca-certificates), set SSL_CERT_FILE to a PEM file, or give the \
         endpoint tls.ca_file"
    )]
    NoRoots(String),
    /// A PEM file of `setting` could not be read or parsed.
    #[error("{setting} {}: {reason}", file.display())]
    File {
        /// The setting naming the file (`tls.ca_file`).
        setting: &'static str,
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate file without any certificate in it.
    #[error(
        "{setting} {}: no certificate in it (a PEM file with BEGIN CERTIFICATE blocks)",
        file.display()
    )]
    NoCertificate {
        /// The setting naming the file.
        setting: &'static str,
        /// The file.
        file: PathBuf,
    },
    /// The client certificate and key do not make a client identity (rustls' reason).
    #[error("tls.cert_file and tls.key_file: {0}")]
    ClientIdentity(String),
    /// `tls.cert_file` given alone.
    #[error("tls.cert_file needs tls.key_file (its private key)")]
    CertWithoutKey,
    /// `tls.key_file` given alone.
    #[error("tls.key_file needs tls.cert_file (its certificate)")]
    KeyWithoutCert,
    /// TLS settings given for an `http://` url.
    #[error("tls settings are for an https:// url; this one is http://")]
    NotHttps,
}

// Callers that still report errors as text (the remote client) take it with `?`.
impl From<TlsError> for String {
    fn from(e: TlsError) -> String {
        e.to_string()
    }
}

/// Makes plain TCP connections for `http://` and TLS ones for `https://`.
pub(crate) type Connector = HttpsConnector<HttpConnector>;

/// A connector that offers HTTP/2 (`http2`: gRPC) or HTTP/1.1 over TLS, with `settings`.
/// The trusted certificates are loaded only when `https` (some endpoint needs them): a
/// machine without any still reaches `http://` ones. An error names the setting (and file)
/// that is wrong.
pub(crate) fn connector(
    https: bool,
    http2: bool,
    settings: &TlsSettings,
) -> Result<Connector, TlsError> {
    let builder = HttpsConnectorBuilder::new();
    let builder = if !https {
        // Never used: every endpoint is plain HTTP.
        let config = ClientConfig::builder()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        builder.with_tls_config(config)
    } else if settings.is_default() {
        builder
            .with_native_roots()
            .map_err(|e| TlsError::NoRoots(e.to_string()))?
    } else {
        builder.with_tls_config(client_config(settings)?)
    };
    let builder = builder.https_or_http();
    // Without TCP_NODELAY a small export (a gRPC frame after its headers) waited ~40 ms on
    // Nagle's algorithm and the peer's delayed ACK: 20 exports/s per connection.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    Ok(if http2 {
        builder.enable_http2().wrap_connector(tcp)
    } else {
        builder.enable_http1().wrap_connector(tcp)
    })
}

/// TLS settings of one `https://` endpoint the server connects to (a forwarder's, a scrape
/// target's), as the OpenTelemetry Collector's `tls` block. Default: the peer is checked
/// against the system's trusted certificates (or `SSL_CERT_FILE`'s), no client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// A PEM file of the CAs the peer's certificate is checked against, instead of the
    /// system's (a private CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate (chain) shown to a peer that asks for one (mutual TLS), with
    /// `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Accept any certificate: the connection is encrypted, but anyone on the path may be the
    /// peer. For tests and private networks; warned at start.
    pub insecure_skip_verify: bool,
}

impl TlsSettings {
    /// Whether anything differs from the default (the system's trust, no client certificate).
    pub fn is_default(&self) -> bool {
        *self == TlsSettings::default()
    }
}

/// Refuses TLS settings for an `http://` endpoint: they would go unused without a word.
pub(crate) fn check_scheme(https: bool, settings: &TlsSettings) -> Result<(), TlsError> {
    if !https && !settings.is_default() {
        return Err(TlsError::NotHttps);
    }
    Ok(())
}

fn client_config(settings: &TlsSettings) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder();
    let builder = if settings.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                rustls::crypto::ring::default_provider().signature_verification_algorithms,
            )))
    } else {
        builder.with_root_certificates(roots(settings.ca_file.as_deref())?)
    };
    match (&settings.cert_file, &settings.key_file) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "tls.cert_file")?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                setting: "tls.key_file",
                file: key.clone(),
                reason: pem_error(&e),
            })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| TlsError::ClientIdentity(e.to_string()))
        }
        (Some(_), None) => Err(TlsError::CertWithoutKey),
        (None, Some(_)) => Err(TlsError::KeyWithoutCert),
    }
}

/// The CAs of `ca_file`, else the system's (`SSL_CERT_FILE` honoured).
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match ca_file {
        Some(file) => {
            for cert in certificates(file, "tls.ca_file")? {
                store.add(cert).map_err(|e| TlsError::File {
                    setting: "tls.ca_file",
                    file: file.to_owned(),
                    reason: e.to_string(),
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or("none found".to_owned(), ToString::to_string);
                return Err(TlsError::NoRoots(why));
            }
        }
    }
    Ok(store)
}

/// The certificates of PEM file `file` (setting `what`); at least one.
fn certificates(file: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |e: rustls::pki_types::pem::Error| TlsError::File {
        setting: what,
        file: file.to_owned(),
        reason: pem_error(&e),
    };
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(failed)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            setting: what,
            file: file.to_owned(),
        });
    }
    Ok(certs)
}

/// A PEM error as a user reads it (the file's own error when it could not be read).
pub(crate) fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "nothing of that kind in it".into(),
        other => format!("not a valid PEM file ({other:?})"),
    }
}

/// `insecure_skip_verify`: any certificate is taken for the peer's, while the handshake's
/// signatures are still checked (the connection is encrypted to whoever holds that key).
#[derive(Debug)]
struct AnyCertificate(rustls::crypto::WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn error(settings: &TlsSettings) -> String {
        connector(true, false, settings)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn bad_settings_name_the_setting_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let missing = PathBuf::from("/nonexistent/ca.pem");
        let cases = [
            (
                TlsSettings {
                    ca_file: Some(missing.clone()),
                    ..Default::default()
                },
                "tls.ca_file /nonexistent/ca.pem: No such file or directory",
            ),
            (
                TlsSettings {
                    ca_file: Some(text.clone()),
                    ..Default::default()
                },
                "notes.txt: no certificate in it",
            ),
            (
                TlsSettings {
                    cert_file: Some(text.clone()),
                    ..Default::default()
                },
                "tls.cert_file needs tls.key_file",
            ),
            (
                TlsSettings {
                    insecure_skip_verify: true,
                    cert_file: Some(missing),
                    key_file: Some(text),
                    ca_file: None,
                },
                "tls.cert_file /nonexistent/ca.pem: No such file",
            ),
        ];
        for (settings, expected) in cases {
            let e = error(&settings);
            assert!(e.contains(expected), "{settings:?}: {e}");
        }
    }

    #[test]
    fn settings_for_plain_http_are_refused() {
        let settings = TlsSettings {
            insecure_skip_verify: true,
            ..Default::default()
        };
        assert!(check_scheme(true, &settings).is_ok());
        assert!(check_scheme(false, &TlsSettings::default()).is_ok());
        let e = check_scheme(false, &settings).unwrap_err().to_string();
        assert!(e.contains("https://"), "{e}");
    }
}
