//! TLS for the requests the server makes itself: forwarders' exports and scrapes of
//! `https://` endpoints. rustls (ring), the peer's certificate checked against the system's
//! trusted certificates, or those of the PEM file `SSL_CERT_FILE` names (a private CA).

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// Makes plain TCP connections for `http://` and TLS ones for `https://`.
pub(crate) type Connector = HttpsConnector<HttpConnector>;

/// A connector that offers HTTP/2 (`http2`: gRPC) or HTTP/1.1 over TLS. The trusted
/// certificates are loaded only when `https` (some endpoint needs them): a machine without
/// any still reaches `http://` ones.
pub(crate) fn connector(https: bool, http2: bool) -> Result<Connector, String> {
    let builder = HttpsConnectorBuilder::new();
    let builder = if https {
        builder.with_native_roots().map_err(|e| {
            format!(
                "no trusted certificates to check https:// endpoints with ({e}): install the \
                 system's CA certificates (ca-certificates), or set SSL_CERT_FILE to a PEM file"
            )
        })?
    } else {
        // Never used: every endpoint is plain HTTP.
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        builder.with_tls_config(config)
    };
    let builder = builder.https_or_http();
    Ok(if http2 {
        builder.enable_http2().build()
    } else {
        builder.enable_http1().build()
    })
}
