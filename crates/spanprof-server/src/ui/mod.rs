//! The web UI: plain ES modules, a stylesheet and one HTML page, embedded in the binary with
//! `include_str!` so `spanprof serve` needs no files beside it and no JS build step.
//!
//! `/` is the page; `/ui/…` are its assets. The views keep their state in the URL's hash
//! (`/#/traces?service=…`), so the server never has to know a view's path.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::AppState;

/// One embedded file: its path under `/ui/`, its media type and its bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the page loads. Adding a module means adding a line here.
const ASSETS: &[Asset] = &[
    Asset {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/style.css"),
    },
    Asset {
        path: "js/app.js",
        content_type: JS,
        body: include_str!("assets/js/app.js"),
    },
    Asset {
        path: "js/api.js",
        content_type: JS,
        body: include_str!("assets/js/api.js"),
    },
    Asset {
        path: "js/dom.js",
        content_type: JS,
        body: include_str!("assets/js/dom.js"),
    },
    Asset {
        path: "js/units.js",
        content_type: JS,
        body: include_str!("assets/js/units.js"),
    },
    Asset {
        path: "js/flame.js",
        content_type: JS,
        body: include_str!("assets/js/flame.js"),
    },
    Asset {
        path: "js/profile_panel.js",
        content_type: JS,
        body: include_str!("assets/js/profile_panel.js"),
    },
    Asset {
        path: "js/traces.js",
        content_type: JS,
        body: include_str!("assets/js/traces.js"),
    },
    Asset {
        path: "js/explore.js",
        content_type: JS,
        body: include_str!("assets/js/explore.js"),
    },
    Asset {
        path: "js/compare.js",
        content_type: JS,
        body: include_str!("assets/js/compare.js"),
    },
];

const INDEX_HTML: &str = include_str!("assets/index.html");

/// The UI's routes: `/` and `/ui/{*path}`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
}

async fn index() -> Response {
    serve("text/html; charset=utf-8", INDEX_HTML)
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => serve(a.content_type, a.body),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no UI file {path}"),
        )
            .into_response(),
    }
}

fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The files change with the binary; revalidating is cheap on localhost.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // Defence in depth against injected markup: no inline script, no foreign origins.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'",
            ),
        ],
        body,
    )
        .into_response()
}
