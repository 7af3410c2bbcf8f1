//! Who sends a request and what it may do. Credentials (`auth.credentials`: bearer tokens,
//! basic auth, client certificates) each carry scopes — `read` (queries, the UI's data,
//! Grafana), `write` (ingest: agents, OTLP, push), `admin` (settings; includes both) — and a
//! tenant. Every route declares the [`Access`] it needs ([`crate::routes::Routes`]); the
//! listener's gate ([`crate::tenants`]) authenticates each request once into a [`Principal`]
//! and each route checks it ([`require`]). Without credentials configured every request is
//! allowed, as before (loopback only unless `server.allow_unauthenticated`).
//!
//! Secrets are kept only as SHA-256 digests and compared in constant time; no answer or log
//! says which credentials or tenants exist.

pub mod config;
mod tenant;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::grpc::Code;

pub use tenant::{TenantError, TenantId, DEFAULT_TENANT, MAX_TENANT_ID_BYTES};

/// The header Pyroscope, Tempo and their SDKs name the tenant with.
pub const TENANT_HEADER: &str = "x-scope-orgid";

/// Longest `Authorization` header looked at, bytes: longer ones are refused unread.
const MAX_AUTHORIZATION_BYTES: usize = 4096;

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Anyone: probes and the UI's static files (they hold no data).
    Public,
    /// The `read` scope: queries.
    Read,
    /// The `write` scope: ingest.
    Write,
    /// The `admin` scope: what changes settings.
    Admin,
    /// `/metrics`: [`Access::Read`], or anyone with `auth.metrics: public`.
    Metrics,
}

/// Scopes a credential grants, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// None.
    pub const NONE: Scopes = Scopes(0);
    /// `read`.
    pub const READ: Scopes = Scopes(1);
    /// `write`.
    pub const WRITE: Scopes = Scopes(2);
    /// `admin` (with `read` and `write`).
    pub const ALL: Scopes = Scopes(7);
    const ADMIN: Scopes = Scopes(4);

    /// Whether these scopes include all of `other`'s.
    pub fn contains(self, other: Scopes) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Scopes {
    type Output = Scopes;
    fn bitor(self, rhs: Scopes) -> Scopes {
        Scopes(self.0 | rhs.0)
    }
}

/// Who sent a request, as the gate found it: put in the request's extensions.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The tenant whose data the request reads or writes.
    pub tenant: TenantId,
    /// What it may do.
    pub scopes: Scopes,
    /// The credential's name (logs and metrics), `None` without one.
    pub credential: Option<Arc<str>>,
    /// Whether credentials are required (else every scope is given).
    auth_enabled: bool,
    /// `auth.metrics: public`.
    metrics_public: bool,
}

/// One configured credential.
#[derive(Debug)]
pub(crate) struct Credential {
    pub(crate) name: Arc<str>,
    pub(crate) kind: Kind,
    pub(crate) scopes: Scopes,
    /// `None`: the default tenant, or `X-Scope-OrgID` when trusted.
    pub(crate) tenant: Option<TenantId>,
}

/// What a credential checks: digests of its secret.
pub(crate) enum Kind {
    /// `Authorization: Bearer <token>`.
    Bearer([u8; 32]),
    /// `Authorization: Basic base64(user:password)`.
    Basic { username: String, digest: [u8; 32] },
    /// A client certificate verified by the TLS listener, by the SHA-256 of its DER.
    ClientCert([u8; 32]),
}

impl std::fmt::Debug for Kind {
    /// The kind only: not even a secret's digest goes to a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Bearer(_) => "Bearer",
            Kind::Basic { .. } => "Basic",
            Kind::ClientCert(_) => "ClientCert",
        })
    }
}

/// Most tenants open at once by default (`auth.max_tenants`).
pub const DEFAULT_MAX_TENANTS: usize = 100;

/// The runtime authentication settings (from [`config::AuthConfig`]).
#[derive(Debug)]
pub struct Auth {
    pub(crate) credentials: Vec<Credential>,
    pub(crate) trust_tenant_header: bool,
    pub(crate) metrics_public: bool,
    /// Most tenants open at once: each has its own store and pipeline.
    pub(crate) max_tenants: usize,
}

impl Default for Auth {
    fn default() -> Self {
        Auth {
            credentials: Vec::new(),
            trust_tenant_header: false,
            metrics_public: false,
            max_tenants: DEFAULT_MAX_TENANTS,
        }
    }
}

/// Why a request was refused before any route ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No valid credential: 401.
    Unauthenticated,
    /// A valid credential that may not do this: 403.
    Forbidden,
    /// `X-Scope-OrgID` is no valid tenant id: 400.
    BadTenant(TenantError),
}

impl Auth {
    /// Whether requests must carry credentials.
    pub fn enabled(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// Names of the credentials, for the start-up log.
    pub fn credential_names(&self) -> impl Iterator<Item = (&str, Scopes)> {
        self.credentials.iter().map(|c| (&*c.name, c.scopes))
    }

    /// Whether requests may belong to more than one tenant.
    pub fn several_tenants(&self) -> bool {
        self.trust_tenant_header || self.tenants().next().is_some()
    }

    /// The tenants credentials name.
    pub fn tenants(&self) -> impl Iterator<Item = &TenantId> {
        self.credentials.iter().filter_map(|c| c.tenant.as_ref())
    }

    /// Who sent a request with these headers (and this verified client certificate, by the
    /// SHA-256 of its DER). A request with no credential gets a principal without scopes
    /// (public routes only), one with a wrong credential is refused here.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        client_cert: Option<&[u8; 32]>,
    ) -> Result<Principal, Denied> {
        let header_tenant = match headers.get(TENANT_HEADER) {
            Some(v) if self.trust_tenant_header => Some(
                v.to_str()
                    .map_err(|_| TenantError::Character)
                    .and_then(TenantId::new)
                    .map_err(Denied::BadTenant)?,
            ),
            _ => None,
        };
        if !self.enabled() {
            return Ok(Principal {
                tenant: header_tenant.unwrap_or_else(TenantId::default_tenant),
                scopes: Scopes::ALL,
                credential: None,
                auth_enabled: false,
                metrics_public: true,
            });
        }
        let credential = match headers.get(axum::http::header::AUTHORIZATION) {
            Some(value) => Some(self.check_authorization(value)?),
            None => client_cert.and_then(|fingerprint| {
                self.find(|k| matches!(k, Kind::ClientCert(d) if equal(d, fingerprint)))
            }),
        };
        let Some(credential) = credential else {
            return Ok(Principal {
                tenant: TenantId::default_tenant(),
                scopes: Scopes::NONE,
                credential: None,
                auth_enabled: true,
                metrics_public: self.metrics_public,
            });
        };
        let tenant = match (&credential.tenant, header_tenant) {
            (Some(own), Some(asked)) if *own != asked => return Err(Denied::Forbidden),
            (Some(own), _) => own.clone(),
            (None, Some(asked)) => asked,
            (None, None) => TenantId::default_tenant(),
        };
        Ok(Principal {
            tenant,
            scopes: credential.scopes,
            credential: Some(Arc::clone(&credential.name)),
            auth_enabled: true,
            metrics_public: self.metrics_public,
        })
    }

    /// The credential an `Authorization` header holds.
    fn check_authorization(&self, value: &HeaderValue) -> Result<&Credential, Denied> {
        let bytes = value.as_bytes();
        if bytes.len() > MAX_AUTHORIZATION_BYTES {
            return Err(Denied::Unauthenticated);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| Denied::Unauthenticated)?;
        let (scheme, rest) = text.trim().split_once(' ').ok_or(Denied::Unauthenticated)?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            let digest = sha256(rest.as_bytes());
            return self
                .find(|k| matches!(k, Kind::Bearer(d) if equal(d, &digest)))
                .ok_or(Denied::Unauthenticated);
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded =
                spanprof_format::json::base64::decode(rest).map_err(|_| Denied::Unauthenticated)?;
            let decoded = String::from_utf8(decoded).map_err(|_| Denied::Unauthenticated)?;
            let (user, password) = decoded.split_once(':').ok_or(Denied::Unauthenticated)?;
            let digest = sha256(password.as_bytes());
            return self
                .find(|k| matches!(k, Kind::Basic { username, digest: d } if username == user && equal(d, &digest)))
                .ok_or(Denied::Unauthenticated);
        }
        Err(Denied::Unauthenticated)
    }

    /// The credential whose kind matches, looking at every one (no early exit to time).
    fn find(&self, matches: impl Fn(&Kind) -> bool) -> Option<&Credential> {
        let mut found = None;
        for c in &self.credentials {
            if matches(&c.kind) && found.is_none() {
                found = Some(c);
            }
        }
        found
    }
}

impl Principal {
    /// Whether this caller may call a route needing `access`: 401 without a credential, 403
    /// with one lacking the scope.
    pub fn may(&self, access: Access) -> Result<(), Denied> {
        let needed = match access {
            Access::Public => return Ok(()),
            Access::Metrics if self.metrics_public => return Ok(()),
            Access::Read | Access::Metrics => Scopes::READ,
            Access::Write => Scopes::WRITE,
            Access::Admin => Scopes::ADMIN,
        };
        if self.scopes.contains(needed) {
            Ok(())
        } else if self.credential.is_none() && self.auth_enabled {
            Err(Denied::Unauthenticated)
        } else {
            Err(Denied::Forbidden)
        }
    }
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Whether two digests are equal, in time that does not depend on where they differ.
fn equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The route layer of [`crate::routes::Routes`]: runs the route only when the request's
/// [`Principal`] (put there by the gate) has `access`. A request without one (a router
/// served without its gate) is refused: closed by default.
pub async fn require(access: Access, request: Request, next: Next) -> Response {
    let verdict = match request.extensions().get::<Principal>() {
        Some(p) => p.may(access),
        None => Err(Denied::Unauthenticated),
    };
    match verdict {
        Ok(()) => next.run(request).await,
        Err(denied) => denied_response(&denied, request.headers(), request.uri().path()),
    }
}

/// A refusal in the protocol of the request: gRPC status `UNAUTHENTICATED` (16) or
/// `PERMISSION_DENIED` (7) for gRPC, a Connect error for Connect APIs, else plain HTTP; 401s
/// carry `WWW-Authenticate`. Nothing says what exists.
pub fn denied_response(denied: &Denied, headers: &HeaderMap, path: &str) -> Response {
    let (status, grpc, connect, message) = match denied {
        Denied::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            Code::Unauthenticated,
            "unauthenticated",
            "authentication required: send Authorization: Bearer <token> (or basic auth)"
                .to_owned(),
        ),
        Denied::Forbidden => (
            StatusCode::FORBIDDEN,
            Code::PermissionDenied,
            "permission_denied",
            "the credential does not allow this request".to_owned(),
        ),
        Denied::BadTenant(e) => (
            StatusCode::BAD_REQUEST,
            Code::InvalidArgument,
            "invalid_argument",
            format!("X-Scope-OrgID: {e}"),
        ),
    };
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut response = if content_type.starts_with("application/grpc") {
        crate::grpc::status(grpc, &message)
    } else if headers.contains_key("connect-protocol-version")
        || content_type.starts_with("application/connect")
        || ["/querier.v1.", "/push.v1.", "/settings.v1."]
            .iter()
            .any(|p| path.starts_with(p))
    {
        let body = serde_json::json!({ "code": connect, "message": message }).to_string();
        (status, [("content-type", "application/json")], body).into_response()
    } else {
        (status, message + "\n").into_response()
    };
    if *denied == Denied::Unauthenticated {
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"spanprof\""),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        Auth {
            credentials: vec![
                Credential {
                    name: "agent-a".into(),
                    kind: Kind::Bearer(sha256(b"token-a")),
                    scopes: Scopes::WRITE,
                    tenant: Some(TenantId::new("a").unwrap()),
                },
                Credential {
                    name: "grafana-b".into(),
                    kind: Kind::Basic {
                        username: "grafana".into(),
                        digest: sha256(b"pw-b"),
                    },
                    scopes: Scopes::READ,
                    tenant: Some(TenantId::new("b").unwrap()),
                },
            ],
            trust_tenant_header: false,
            metrics_public: false,
            max_tenants: DEFAULT_MAX_TENANTS,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn tokens_and_basic_auth_give_their_scopes_and_tenant() {
        let auth = auth();
        let p = auth
            .authenticate(&headers(&[("authorization", "Bearer token-a")]), None)
            .unwrap();
        assert_eq!(p.tenant.as_str(), "a");
        assert_eq!(p.may(Access::Write), Ok(()));
        assert_eq!(p.may(Access::Read), Err(Denied::Forbidden));
        // grafana:pw-b
        let p = auth
            .authenticate(
                &headers(&[("authorization", "Basic Z3JhZmFuYTpwdy1i")]),
                None,
            )
            .unwrap();
        assert_eq!(p.tenant.as_str(), "b");
        assert_eq!(p.may(Access::Read), Ok(()));
        assert_eq!(p.may(Access::Admin), Err(Denied::Forbidden));
    }

    #[test]
    fn wrong_or_odd_credentials_are_401_and_none_reach_only_public_routes() {
        let auth = auth();
        for bad in [
            "Bearer token-b",
            "Bearer",
            "Basic !!!",
            "Basic Z3JhZmFuYTpwdy1h", // grafana:pw-a
            "Digest x",
            "bearer  token-a x",
        ] {
            assert_eq!(
                auth.authenticate(&headers(&[("authorization", bad)]), None)
                    .unwrap_err(),
                Denied::Unauthenticated,
                "{bad}"
            );
        }
        let huge = format!("Bearer {}", "x".repeat(10_000));
        assert_eq!(
            auth.authenticate(&headers(&[("authorization", &huge)]), None)
                .unwrap_err(),
            Denied::Unauthenticated
        );
        let mut odd = HeaderMap::new();
        odd.insert(
            "authorization",
            HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        );
        assert_eq!(
            auth.authenticate(&odd, None).unwrap_err(),
            Denied::Unauthenticated
        );
        let nobody = auth.authenticate(&HeaderMap::new(), None).unwrap();
        assert_eq!(nobody.may(Access::Public), Ok(()));
        assert_eq!(nobody.may(Access::Read), Err(Denied::Unauthenticated));
        assert_eq!(nobody.may(Access::Metrics), Err(Denied::Unauthenticated));
    }

    #[test]
    fn the_tenant_header_counts_only_when_trusted_and_never_against_the_credential() {
        let mut auth = auth();
        let h = headers(&[("authorization", "Bearer token-a"), (TENANT_HEADER, "b")]);
        // Untrusted: ignored.
        assert_eq!(auth.authenticate(&h, None).unwrap().tenant.as_str(), "a");
        auth.trust_tenant_header = true;
        assert_eq!(auth.authenticate(&h, None).unwrap_err(), Denied::Forbidden);
        let bad = headers(&[(TENANT_HEADER, "../etc")]);
        assert_eq!(
            auth.authenticate(&bad, None).unwrap_err(),
            Denied::BadTenant(TenantError::Character)
        );
        // Without credentials (behind a proxy): the header decides.
        let proxy = Auth {
            trust_tenant_header: true,
            ..Auth::default()
        };
        let p = proxy
            .authenticate(&headers(&[(TENANT_HEADER, "team-x")]), None)
            .unwrap();
        assert_eq!(p.tenant.as_str(), "team-x");
        assert_eq!(p.may(Access::Admin), Ok(()));
    }
}
