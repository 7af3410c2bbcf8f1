//! The web UI: plain ES modules, a stylesheet and one HTML page, embedded in the binary with
//! `include_str!` so `spanprof serve` needs no files beside it and no JS build step.
//!
//! `/` is the page; `/ui/…` are its assets. The views keep their state in the URL's hash
//! (`/#/traces?service=…`), so the server never has to know a view's path.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::Access;
use crate::routes::Routes;

/// One embedded file: its path under `/ui/`, its media type and its bytes; `preload`: the
/// page preloads it (the Traces search's modules, which the landing page needs at once).
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
    preload: bool,
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the page loads. Adding a module means adding a line here.
const ASSETS: &[Asset] = &[
    Asset {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/style.css"),
        preload: false,
    },
    Asset {
        path: "js/boot.js",
        content_type: JS,
        body: include_str!("assets/js/boot.js"),
        preload: true,
    },
    Asset {
        path: "js/app.js",
        content_type: JS,
        body: include_str!("assets/js/app.js"),
        preload: true,
    },
    Asset {
        path: "js/api.js",
        content_type: JS,
        body: include_str!("assets/js/api.js"),
        preload: true,
    },
    Asset {
        path: "js/dom.js",
        content_type: JS,
        body: include_str!("assets/js/dom.js"),
        preload: true,
    },
    Asset {
        path: "js/units.js",
        content_type: JS,
        body: include_str!("assets/js/units.js"),
        preload: true,
    },
    Asset {
        path: "js/span_chart.js",
        content_type: JS,
        body: include_str!("assets/js/span_chart.js"),
        preload: true,
    },
    Asset {
        path: "js/search_common.js",
        content_type: JS,
        body: include_str!("assets/js/search_common.js"),
        preload: true,
    },
    Asset {
        path: "js/traces_search.js",
        content_type: JS,
        body: include_str!("assets/js/traces_search.js"),
        preload: true,
    },
    Asset {
        path: "js/flame.js",
        content_type: JS,
        body: include_str!("assets/js/flame.js"),
        preload: false,
    },
    Asset {
        path: "js/flame_tree.js",
        content_type: JS,
        body: include_str!("assets/js/flame_tree.js"),
        preload: false,
    },
    Asset {
        path: "js/flame_svg.js",
        content_type: JS,
        body: include_str!("assets/js/flame_svg.js"),
        preload: false,
    },
    Asset {
        path: "js/function_table.js",
        content_type: JS,
        body: include_str!("assets/js/function_table.js"),
        preload: false,
    },
    Asset {
        path: "js/sandwich.js",
        content_type: JS,
        body: include_str!("assets/js/sandwich.js"),
        preload: false,
    },
    Asset {
        path: "js/diff_table.js",
        content_type: JS,
        body: include_str!("assets/js/diff_table.js"),
        preload: false,
    },
    Asset {
        path: "js/compare_pickers.js",
        content_type: JS,
        body: include_str!("assets/js/compare_pickers.js"),
        preload: false,
    },
    Asset {
        path: "js/profile_panel.js",
        content_type: JS,
        body: include_str!("assets/js/profile_panel.js"),
        preload: false,
    },
    Asset {
        path: "js/traces.js",
        content_type: JS,
        body: include_str!("assets/js/traces.js"),
        preload: false,
    },
    Asset {
        path: "js/waterfall.js",
        content_type: JS,
        body: include_str!("assets/js/waterfall.js"),
        preload: false,
    },
    Asset {
        path: "js/span_focus.js",
        content_type: JS,
        body: include_str!("assets/js/span_focus.js"),
        preload: false,
    },
    Asset {
        path: "js/explore.js",
        content_type: JS,
        body: include_str!("assets/js/explore.js"),
        preload: false,
    },
    Asset {
        path: "js/timeline.js",
        content_type: JS,
        body: include_str!("assets/js/timeline.js"),
        preload: false,
    },
    Asset {
        path: "js/compare.js",
        content_type: JS,
        body: include_str!("assets/js/compare.js"),
        preload: false,
    },
];

const INDEX_HTML: &str = include_str!("assets/index.html");

/// The UI's routes: `/` and `/ui/{*path}`.
pub fn routes() -> Routes {
    Routes::new()
        .get("/", Access::Public, index)
        .get("/ui/", Access::Public, index)
        .get("/ui/{*path}", Access::Public, asset)
        // Browsers ask for it on every page: no icon, and no 404 logged as a refusal.
        .get("/favicon.ico", Access::Public, || async {
            axum::http::StatusCode::NO_CONTENT
        })
}

async fn index() -> Response {
    static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    serve("text/html; charset=utf-8", PAGE.get_or_init(page))
}

/// The page with a `modulepreload` link per module the landing page needs: the browser
/// fetches them at once instead of one import level after the other. The other views'
/// modules are imported when first shown (app.js), so they do not queue before these.
fn page() -> String {
    let preload: String = ASSETS
        .iter()
        .filter(|a| a.preload && a.content_type == JS)
        .map(|a| format!("<link rel=\"modulepreload\" href=\"/ui/{}\">\n", a.path))
        .collect();
    INDEX_HTML.replacen("</head>", &format!("{preload}</head>"), 1)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => {
            let tag = etag(a.body);
            // A browser that has this very file (same bytes) keeps it: 304, no body.
            let fresh = headers
                .get(header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
            let mut answer = serve(a.content_type, if fresh { "" } else { a.body });
            if fresh {
                *answer.status_mut() = StatusCode::NOT_MODIFIED;
            }
            if let Ok(v) = HeaderValue::from_str(&tag) {
                answer.headers_mut().insert(header::ETAG, v);
            }
            answer
        }
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no UI file {path}"),
        )
            .into_response(),
    }
}

/// A strong validator of `body` (FNV-1a, 64 bits): the same bytes, the same tag, whatever
/// binary serves them.
fn etag(body: &str) -> String {
    let hash = body.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}

fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The files change with the binary: kept, but revalidated (ETag, 304) each load.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // Defence in depth against injected markup: no inline script, no foreign origins;
            // and no other site may frame the UI (clickjacking).
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
            // Its URLs name services, spans and label values: never sent to another site.
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page and its files are served with the headers that keep other sites out.
    #[test]
    fn ui_files_carry_the_security_headers() {
        let answer = serve(JS, "");
        let h = answer.headers();
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        for directive in [
            "default-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ] {
            assert!(csp.contains(directive), "{csp}");
        }
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
    }

    /// The `./x.js` modules `body` imports: statically (`import … from`, `export … from`)
    /// and, with `dynamic`, also through `import("./x.js")`.
    fn imports(body: &str, dynamic: bool) -> Vec<String> {
        let mut out = Vec::new();
        for line in body.lines() {
            let mut markers = vec!["from \"./"];
            if dynamic {
                markers.push("import(\"./");
            }
            for marker in markers {
                for (at, _) in line.match_indices(marker) {
                    let rest = &line[at + marker.len()..];
                    let name = rest.split('"').next().unwrap();
                    out.push(format!("js/{name}"));
                }
            }
        }
        out
    }

    /// Every module a module imports is embedded; the page preloads the landing page's
    /// modules and everything they import (no import chain on the first load), and app.js
    /// reaches the other views only through `import()`.
    #[test]
    fn every_imported_module_is_embedded_and_the_landing_page_is_preloaded() {
        let page = page();
        let preloaded = |path: &str| {
            page.contains(&format!("<link rel=\"modulepreload\" href=\"/ui/{path}\">"))
        };
        for a in ASSETS.iter().filter(|a| a.content_type == JS) {
            assert_eq!(preloaded(a.path), a.preload, "{}", a.path);
            for module in imports(a.body, true) {
                assert!(
                    ASSETS.iter().any(|b| b.path == module),
                    "{} imports {module}, which is not in ASSETS",
                    a.path
                );
            }
            if a.preload {
                for module in imports(a.body, false) {
                    assert!(
                        preloaded(&module),
                        "{} imports {module}, not preloaded",
                        a.path
                    );
                }
            }
        }
        let app = ASSETS.iter().find(|a| a.path == "js/app.js").unwrap();
        assert!(imports(app.body, true).contains(&"js/traces.js".to_string()));
        assert!(!imports(app.body, false).contains(&"js/traces.js".to_string()));
        assert!(page.find("modulepreload") < page.find("</head>"));
    }

    /// A browser that has a file revalidates it for nothing: the same ETag gets a 304.
    #[tokio::test]
    async fn a_file_the_browser_has_is_answered_not_modified() {
        let first = asset(Path("js/app.js".into()), HeaderMap::new()).await;
        assert_eq!(first.status(), StatusCode::OK);
        let tag = first.headers()[header::ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, tag.clone());
        let second = asset(Path("js/app.js".into()), again).await;
        assert_eq!(second.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(second.headers()[header::ETAG], tag);
        let mut other = HeaderMap::new();
        other.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"0\""));
        let third = asset(Path("js/api.js".into()), other).await;
        assert_eq!(third.status(), StatusCode::OK);
        assert_ne!(third.headers()[header::ETAG], tag);
    }
}
