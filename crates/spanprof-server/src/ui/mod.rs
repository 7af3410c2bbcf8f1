//! The web UI: plain ES modules, a stylesheet and one HTML page, embedded in the binary with
//! `include_str!` so `spanprof serve` needs no files beside it and no JS build step.
//!
//! `/` is the page; `/ui/…` are its assets. The views keep their state in the URL's hash
//! (`/#/traces?service=…`), so the server never has to know a view's path.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::Access;
use crate::routes::Routes;

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
        path: "js/span_chart.js",
        content_type: JS,
        body: include_str!("assets/js/span_chart.js"),
    },
    Asset {
        path: "js/traces_search.js",
        content_type: JS,
        body: include_str!("assets/js/traces_search.js"),
    },
    Asset {
        path: "js/flame.js",
        content_type: JS,
        body: include_str!("assets/js/flame.js"),
    },
    Asset {
        path: "js/flame_tree.js",
        content_type: JS,
        body: include_str!("assets/js/flame_tree.js"),
    },
    Asset {
        path: "js/flame_svg.js",
        content_type: JS,
        body: include_str!("assets/js/flame_svg.js"),
    },
    Asset {
        path: "js/function_table.js",
        content_type: JS,
        body: include_str!("assets/js/function_table.js"),
    },
    Asset {
        path: "js/sandwich.js",
        content_type: JS,
        body: include_str!("assets/js/sandwich.js"),
    },
    Asset {
        path: "js/diff_table.js",
        content_type: JS,
        body: include_str!("assets/js/diff_table.js"),
    },
    Asset {
        path: "js/compare_pickers.js",
        content_type: JS,
        body: include_str!("assets/js/compare_pickers.js"),
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
        path: "js/waterfall.js",
        content_type: JS,
        body: include_str!("assets/js/waterfall.js"),
    },
    Asset {
        path: "js/span_focus.js",
        content_type: JS,
        body: include_str!("assets/js/span_focus.js"),
    },
    Asset {
        path: "js/explore.js",
        content_type: JS,
        body: include_str!("assets/js/explore.js"),
    },
    Asset {
        path: "js/timeline.js",
        content_type: JS,
        body: include_str!("assets/js/timeline.js"),
    },
    Asset {
        path: "js/compare.js",
        content_type: JS,
        body: include_str!("assets/js/compare.js"),
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

/// The page with a `modulepreload` link per module: the browser fetches every module at
/// once instead of one import level after the other (three round trips fewer on a cold load).
fn page() -> String {
    let preload: String = ASSETS
        .iter()
        .filter(|a| a.content_type == JS)
        .map(|a| format!("<link rel=\"modulepreload\" href=\"/ui/{}\">\n", a.path))
        .collect();
    INDEX_HTML.replacen("</head>", &format!("{preload}</head>"), 1)
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

    /// Every module a module imports is embedded, and the page preloads every module.
    #[test]
    fn every_imported_module_is_embedded_and_preloaded() {
        let page = page();
        for a in ASSETS.iter().filter(|a| a.content_type == JS) {
            assert!(
                page.contains(&format!(
                    "<link rel=\"modulepreload\" href=\"/ui/{}\">",
                    a.path
                )),
                "{} is not preloaded",
                a.path
            );
            for line in a.body.lines().filter(|l| l.starts_with("import ")) {
                let module = line
                    .split('"')
                    .nth(1)
                    .unwrap_or_else(|| panic!("{}: {line}", a.path));
                let path = format!("js/{}", module.trim_start_matches("./"));
                assert!(
                    ASSETS.iter().any(|b| b.path == path),
                    "{} imports {module}, which is not in ASSETS",
                    a.path
                );
            }
        }
        assert!(page.find("modulepreload") < page.find("</head>"));
    }
}
