//! Every view of the UI by keyboard and at two widths, in a real browser
//! (`python/ui_keyboard.py`, headless Debian chromium) on `spanprof serve --demo`: at 1400 px
//! and 900 px no view overflows sideways; at 900 px Tab alone reaches every control each view
//! shows (links, buttons, inputs, selects, canvases, the waterfall, sortable headers), each
//! with a visible focus ring; the duration chart, the waterfall and the timeline work by
//! arrows and Enter. Fails on any console error; screenshots go to
//! `target/tmp/ui-keyboard-screens/` (printed).
//!
//! Missing tools fail the test with how to install them (`bash .ci/setup`); nothing is skipped.

use spanprof_testkit as support;

use std::time::Duration;

use serde_json::Value;
use support::http::get;
use support::process_dir;
use support::serve::{free_port, Server};

use crate::ui::{browser_script, tool};

#[test]
fn every_view_works_by_keyboard_and_at_both_widths() {
    // Missing tools fail now, before any server starts.
    tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    support::python();
    let dir = process_dir("ui-keyboard");
    let addr = format!("127.0.0.1:{}", free_port());
    let _demo = Server::demo(&addr, &[]);
    let path = "/api/v1/spans?service=goapp&name=GET+/cpu-heavy&limit=5&sort=cpu";
    let r = get(&addr, path, Duration::from_secs(30)).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let spans: Value = serde_json::from_slice(&r.body).unwrap();
    let sampled = &spans["spans"][0];
    assert!(sampled["total"].as_i64().unwrap_or(0) > 0, "{spans}");

    browser_script(
        "ui_keyboard",
        &[
            "--base",
            &format!("http://{addr}"),
            "--trace",
            sampled["trace_id"].as_str().unwrap(),
            "--span",
            sampled["span_id"].as_str().unwrap(),
        ],
        &dir,
        "ui-keyboard-screens",
    );
}
