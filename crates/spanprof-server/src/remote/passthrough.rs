//! With the remote backend, every query request goes to the remote pair: the Grafana-facing
//! APIs are passed through to their backend as they came, the `/api/v1` endpoints the remote
//! answers go to their handlers (which branch on `AppState::remote`), and the others are
//! answered 501: never from the frontend's empty local store.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use super::client::Peer;
use crate::answer::ApiError;
use crate::AppState;

/// The `/api/v1/` endpoints answered from the remote pair.
pub const REMOTE_ENDPOINTS: &[&str] = &[
    "/api/v1/flamegraph",
    "/api/v1/top",
    "/api/v1/svg",
    "/api/v1/pprof",
    "/api/v1/profile-types",
    "/api/v1/label-names",
    "/api/v1/label-values",
    "/api/v1/series",
    "/api/v1/diff",
    "/api/v1/services",
    "/api/v1/spans",
    "/api/v1/span-points",
    "/api/v1/span-names",
    "/api/v1/timeseries",
];

/// The `/api/v1/` endpoints with a path parameter answered from the remote pair.
const REMOTE_PREFIXES: &[&str] = &["/api/v1/spans/", "/api/v1/traces/"];

/// Most bytes of a request passed through (Connect queries are small).
const MAX_REQUEST_BYTES: usize = 4 << 20;

/// Which backend a Grafana-facing path belongs to.
fn peer_of(path: &str) -> Option<Peer> {
    if path.starts_with("/querier.v1.QuerierService/") {
        return Some(Peer::Pyroscope);
    }
    let tempo = [
        "/api/traces/",
        "/api/v2/traces/",
        "/api/search",
        "/api/v2/search",
    ];
    tempo
        .iter()
        .any(|p| path.starts_with(p))
        .then_some(Peer::Tempo)
}

/// The middleware (installed only when the backend is remote).
pub async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let Some(remote) = app.remote.clone() else {
        return next.run(req).await;
    };
    let path = req.uri().path().to_owned();
    if let Some(peer) = peer_of(&path) {
        // This layer runs before the routes' own access checks: the same check, here.
        let verdict = match req.extensions().get::<crate::auth::Principal>() {
            Some(p) => p.may(crate::auth::Access::Read),
            None => Err(crate::auth::Denied::Unauthenticated),
        };
        if let Err(denied) = verdict {
            return crate::auth::denied_response(&denied, req.headers(), &path);
        }
        return pass(&remote, peer, req)
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    let answered = REMOTE_ENDPOINTS.contains(&path.as_str())
        || REMOTE_PREFIXES.iter().any(|p| path.starts_with(p));
    let local_only = path == "/pyroscope/render"
        || (path.starts_with("/api/v1/") && !answered && path != "/api/v1/status");
    if local_only {
        return super::not_remote(&path).into_response();
    }
    next.run(req).await
}

async fn pass(remote: &super::Remote, peer: Peer, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let body = http_body_util::Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("request body: {e}")))?
        .to_bytes();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let (status, ctype, bytes) = remote
        .client()
        .pass_through(
            peer,
            parts.method,
            &path,
            parts.headers.get(header::CONTENT_TYPE).cloned(),
            parts.headers.get(header::ACCEPT).cloned(),
            body,
        )
        .await?;
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() =
        StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(c) = ctype {
        response.headers_mut().insert(header::CONTENT_TYPE, c);
    }
    Ok(response)
}
