//! The UI over a remote frontend (`storage.backend: remote`), in a real browser
//! (`python/ui_remote.py`, headless Debian chromium): `spanprof serve --demo` plays both
//! Pyroscope and Tempo (addressed only through its `querier.v1` and Tempo API), and the
//! frontend's span page renders the demo's slowest sampled span, its flame graph, and the
//! remote's note on what it cannot know, as text; Explore draws the span's timeline. Fails on
//! any console error; screenshots go to `target/tmp/ui-remote-screens/` (printed).
//!
//! Missing tools fail the test with how to install them (`bash .ci/setup`); nothing is skipped.

use spanprof_testkit as support;

use support::http::get_json as json;
use support::process_dir;
use support::serve::{free_port, Server};

use crate::ui::{browser_script, tool};

#[test]
fn the_span_page_renders_over_the_remote_frontend_in_a_real_browser() {
    tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    support::python();
    let dir = process_dir("ui-remote");

    let demo_addr = format!("127.0.0.1:{}", free_port());
    let _demo = Server::demo(&demo_addr, &[]);
    let spans = json(
        &demo_addr,
        "/api/v1/spans?service=goapp&name=GET+/cpu-heavy&limit=20&sort=cpu",
    );
    let sampled = &spans["spans"][0];
    assert!(sampled["total"].as_i64().unwrap_or(0) > 0, "{spans}");
    let (trace, span) = (
        sampled["trace_id"].as_str().unwrap(),
        sampled["span_id"].as_str().unwrap(),
    );

    let config = dir.join("remote.yaml");
    std::fs::write(
        &config,
        format!(
            "storage:\n  backend: remote\n  remote:\n    pyroscope:\n      url: \
             http://{demo_addr}\n    tempo:\n      url: http://{demo_addr}\n"
        ),
    )
    .unwrap();
    let front_addr = format!("127.0.0.1:{}", free_port());
    let _front = Server::start(
        &dir.join("front"),
        &front_addr,
        &["--config", config.to_str().unwrap()],
    );
    // The frontend's own answer first: a failure here reads better than a browser timeout.
    let remote = json(&front_addr, &format!("/api/v1/traces/{trace}"));
    let local = json(&demo_addr, &format!("/api/v1/traces/{trace}"));
    assert_eq!(remote["total"], local["total"], "{remote}");

    browser_script(
        "ui_remote",
        &[
            "--base",
            &format!("http://{front_addr}"),
            "--trace",
            trace,
            "--span",
            span,
        ],
        &dir,
        "ui-remote-screens",
    );
}
