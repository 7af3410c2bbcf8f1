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

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::http::get;
use support::serve::{free_port, Server};
use support::{process_dir, run, scratch_dir, workspace_root};

const INSTALL_BROWSER: &str = "install the browser and its driver: `apt-get install chromium \
     chromium-driver` and selenium in the venv (`bash .ci/setup` does both), or set \
     SPANPROF_CHROMIUM / SPANPROF_CHROMEDRIVER";

fn tool(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(path.exists(), "no {}: {INSTALL_BROWSER}", path.display());
    path
}

#[test]
fn every_view_works_by_keyboard_and_at_both_widths() {
    let chromium = tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    let chromedriver = tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
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

    let screens = scratch_dir().join("ui-keyboard-screens");
    let _ = std::fs::remove_dir_all(&screens);
    std::fs::create_dir_all(&screens).unwrap();
    println!("screenshots: {}", screens.display());
    let mut cmd = Command::new(support::python());
    cmd.arg(workspace_root().join("python/ui_keyboard.py"))
        .args(["--base", &format!("http://{addr}")])
        .args(["--trace", sampled["trace_id"].as_str().unwrap()])
        .args(["--span", sampled["span_id"].as_str().unwrap()])
        .arg("--chromium")
        .arg(&chromium)
        .arg("--chromedriver")
        .arg(&chromedriver)
        .arg("--user-data-dir")
        .arg(dir.join("chromium-profile"))
        .arg("--screens")
        .arg(&screens);
    let result = run(cmd, Duration::from_secs(600));
    if result.stderr.contains("ModuleNotFoundError") {
        panic!("the venv lacks selenium: {INSTALL_BROWSER}\n{result}");
    }
    println!("{}", result.stdout);
    result.assert_success();
    assert!(
        result.stdout.contains("ui_keyboard: all steps passed"),
        "{result}"
    );
}
