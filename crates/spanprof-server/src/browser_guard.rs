//! What a web browser could make of spanprof's HTTP listeners, refused: a page on another site
//! writing profiles or settings (a cross-site POST needs no preflight as form data or
//! `text/plain`), and a page reading a loopback spanprof through a name it re-pointed at
//! 127.0.0.1 (DNS rebinding). Agents and tools send neither an `Origin` nor a `Sec-Fetch-Site`
//! header, so only browsers are affected; the UI is same-origin and unaffected.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

/// The names one listener answers to.
#[derive(Clone, Debug)]
pub struct HostNames {
    /// Bound to loopback: only loopback names (and `allowed`) are answered.
    loopback: bool,
    /// Names configured in `server.allowed_hosts` (lower case, without port).
    allowed: Arc<[String]>,
}

impl HostNames {
    /// The names a listener bound at `local` answers to, with `allowed` added.
    pub fn new(local: SocketAddr, allowed: &[String]) -> Self {
        HostNames {
            loopback: local.ip().is_loopback(),
            allowed: allowed.iter().map(|h| h.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether a request naming `host` (a `Host` header or an HTTP/2 authority) is for this
    /// listener. On a listener not bound to loopback every name is, unless names are set.
    fn accepts(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        if self.allowed.contains(&name) {
            return true;
        }
        if !self.loopback && self.allowed.is_empty() {
            return true;
        }
        name == "localhost"
            || name.ends_with(".localhost")
            || name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || !self.loopback)
    }
}

/// `host` without its port (`[::1]:4040` → `[::1]`, `example:80` → `example`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// `router` with both checks in front of every route.
pub fn guard(router: Router, names: HostNames) -> Router {
    router.layer(axum::middleware::from_fn_with_state(names, check))
}

async fn check(State(names): State<HostNames>, request: Request, next: Next) -> Response {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| header_text(request.headers(), header::HOST).map(str::to_owned));
    if let Some(host) = &host {
        if !names.accepts(host) {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "this spanprof answers only its own names (localhost, a loopback address, or \
                 server.allowed_hosts): a request for another name is refused, as a web page \
                 could re-point that name at this machine (DNS rebinding)",
            );
        }
    }
    if !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) && cross_site(request.headers(), host.as_deref())
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "a cross-site request from a web browser may not write to spanprof (its Origin or \
             Sec-Fetch-Site says another site sent it); agents and tools send neither header",
        );
    }
    next.run(request).await
}

/// Whether a browser says another site sent the request: `Sec-Fetch-Site` (every current
/// browser), else an `Origin` whose host is not the one asked.
fn cross_site(headers: &HeaderMap, host: Option<&str>) -> bool {
    if let Some(site) = header_text(headers, "sec-fetch-site") {
        return matches!(site, "cross-site" | "same-site");
    }
    let Some(origin) = header_text(headers, header::ORIGIN) else {
        return false;
    };
    let origin_host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    origin == "null" || host.is_none_or(|h| !origin_host.eq_ignore_ascii_case(h))
}

fn header_text(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, format!("{message}\n")).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    use super::*;

    fn app(bound: &str, allowed: &[&str]) -> Router {
        let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
        let names = HostNames::new(bound.parse().unwrap(), &allowed);
        guard(
            Router::new()
                .route("/read", get(|| async { "read" }))
                .route("/write", post(|| async { "written" })),
            names,
        )
    }

    async fn status(app: &Router, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut request = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let answer = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        answer.status().as_u16()
    }

    #[tokio::test]
    async fn a_loopback_listener_answers_only_loopback_names() {
        let app = app("127.0.0.1:4040", &["spanprof.internal"]);
        for host in [
            "127.0.0.1:4040",
            "localhost:4040",
            "LOCALHOST",
            "[::1]:4040",
            "127.0.0.2",
            "app.localhost:4040",
            "spanprof.internal:4040",
        ] {
            assert_eq!(
                status(&app, "GET", "/read", &[("host", host)]).await,
                200,
                "{host}"
            );
        }
        for host in [
            "evil.example:4040",
            "evil.example",
            "10.0.0.7:4040",
            "[2001:db8::1]:4040",
        ] {
            assert_eq!(
                status(&app, "GET", "/read", &[("host", host)]).await,
                421,
                "{host}"
            );
        }
        // An HTTP/2 request names its authority in the URI.
        assert_eq!(
            status(&app, "GET", "http://evil.example/read", &[]).await,
            421
        );
        assert_eq!(status(&app, "GET", "http://localhost/read", &[]).await, 200);
    }

    #[tokio::test]
    async fn a_listener_on_every_interface_answers_any_name_unless_names_are_set() {
        let open = app("0.0.0.0:4040", &[]);
        assert_eq!(
            status(&open, "GET", "/read", &[("host", "spanprof.example")]).await,
            200
        );
        let named = app("0.0.0.0:4040", &["spanprof.example"]);
        assert_eq!(
            status(&named, "GET", "/read", &[("host", "spanprof.example:4040")]).await,
            200
        );
        assert_eq!(
            status(&named, "GET", "/read", &[("host", "10.1.2.3:4040")]).await,
            200
        );
        assert_eq!(
            status(&named, "GET", "/read", &[("host", "other.example")]).await,
            421
        );
    }

    #[tokio::test]
    async fn browsers_may_not_write_cross_site_and_tools_are_unaffected() {
        let app = app("127.0.0.1:4040", &[]);
        let host = ("host", "127.0.0.1:4040");
        // curl, SDKs, collectors: no Origin, no Sec-Fetch-Site.
        assert_eq!(status(&app, "POST", "/write", &[host]).await, 200);
        // The UI itself, and a same-origin fetch.
        assert_eq!(
            status(
                &app,
                "POST",
                "/write",
                &[host, ("sec-fetch-site", "same-origin")]
            )
            .await,
            200
        );
        assert_eq!(
            status(
                &app,
                "POST",
                "/write",
                &[host, ("origin", "http://127.0.0.1:4040")]
            )
            .await,
            200
        );
        for headers in [
            [host, ("sec-fetch-site", "cross-site")],
            [host, ("sec-fetch-site", "same-site")],
            [host, ("origin", "https://evil.example")],
            [host, ("origin", "null")],
        ] {
            assert_eq!(
                status(&app, "POST", "/write", &headers).await,
                403,
                "{headers:?}"
            );
        }
        // Reading is left to the browser's same-origin policy (no CORS headers are sent).
        assert_eq!(
            status(
                &app,
                "GET",
                "/read",
                &[host, ("sec-fetch-site", "cross-site")]
            )
            .await,
            200
        );
    }

    #[test]
    fn ports_come_off_host_names() {
        for (host, name) in [
            ("[::1]:4040", "[::1]"),
            ("[::1]", "[::1]"),
            ("example:80", "example"),
            ("example", "example"),
            ("::1", "::1"),
        ] {
            assert_eq!(host_name(host), name);
        }
    }
}
