//! The web UI in a real browser (headless Debian chromium driven by Selenium through
//! `python/ui_check.py`) on `spanprof serve --demo` (the Go test program's recorded CPU
//! profiles and spans): a Go service's slow `/cpu-heavy` span opens from the traces search
//! as its flame graph, `main.countPrimes` is found and zoomed into, child spans toggle, the
//! URL reloads to the same view and back/forward walk it; a span without samples explains
//! why, and a failed span shows its kind, error message and attributes (marked in the
//! waterfall and the search, which can keep failed spans only); a trace that is not stored says so, a failed request says what failed, a refused
//! selection is explained once; a function called `<img src=x onerror=alert(1)>` shows as
//! text and fires nothing; an empty server says how to send data. Finding the costly span
//! (`python/ui_find.py`): the match count, the CPU sort by its header, pages, the duration
//! chart's hover, click and brush, the trace list, names offered as typed, substring and
//! regex names, filters kept by reload and by the trace's back link, at 1400 px by mouse and
//! at 900 px by keyboard, with no sideways overflow and no placeholder cut. Screenshots of
//! every view go to `target/tmp/ui-screens/` (printed).
//!
//! Missing tools fail the test with how to install them (`bash .ci/setup`); nothing is skipped.

use spanprof_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::http::{get, get_json as json};
use support::serve::{free_port, Server};
use support::{process_dir, run, scratch_dir, workspace_root};

pub(crate) const INSTALL_BROWSER: &str =
    "install the browser and its driver: `apt-get install chromium \
     chromium-driver` and selenium in the venv (`bash .ci/setup` does both), or set \
     SPANPROF_CHROMIUM / SPANPROF_CHROMEDRIVER";

/// The whole browser script (it waits for each step itself, 20 s at most each).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(300);

/// `spanprof serve` on `addr` with `extra` flags; returns once it listens.
fn serve(data: &Path, addr: &str, extra: &[&str]) -> Server {
    Server::start(data, addr, extra)
}

pub(crate) fn tool(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(path.exists(), "no {}: {INSTALL_BROWSER}", path.display());
    path
}

/// Runs the browser script `python/{script}.py` with `args` in headless chromium (its
/// profile under `dir`), saving screenshots in a fresh `target/tmp/{screens}`; returns that
/// directory once the script said all its steps passed.
pub(crate) fn browser_script(script: &str, args: &[&str], dir: &Path, screens: &str) -> PathBuf {
    let chromium = tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    let chromedriver = tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    let screens = scratch_dir().join(screens);
    let _ = std::fs::remove_dir_all(&screens);
    std::fs::create_dir_all(&screens).unwrap();
    println!("screenshots: {}", screens.display());
    let mut cmd = Command::new(support::python());
    cmd.arg(workspace_root().join(format!("python/{script}.py")))
        .args(args)
        .arg("--chromium")
        .arg(&chromium)
        .arg("--chromedriver")
        .arg(&chromedriver)
        .arg("--user-data-dir")
        .arg(dir.join("chromium-profile"))
        .arg("--screens")
        .arg(&screens);
    let result = run(cmd, BROWSER_TIMEOUT);
    if result.stderr.contains("ModuleNotFoundError") {
        panic!("the venv lacks selenium: {INSTALL_BROWSER}\n{result}");
    }
    println!("{}", result.stdout);
    result.assert_success();
    assert!(
        result
            .stdout
            .contains(&format!("{script}: all steps passed")),
        "{result}"
    );
    screens
}

#[test]
fn the_ui_opens_a_slow_span_as_its_flame_graph_in_a_real_browser() {
    // Missing tools fail now, before any server starts.
    tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    support::python();
    let dir = process_dir("ui");

    let empty_addr = format!("127.0.0.1:{}", free_port());
    let _empty = serve(&dir.join("empty"), &empty_addr, &[]);

    // The store of a demo that was killed with SIGKILL an hour ago (unlocked): the next demo
    // removes it.
    let stale = std::env::temp_dir().join("spanprof-demo-stale-ui-test");
    std::fs::create_dir_all(stale.join("segments")).unwrap();
    std::fs::write(stale.join("LOCK"), b"").unwrap();
    std::fs::File::open(&stale)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();

    // The Go test program's recording (`spanprof serve --demo`): CPU windows and the spans
    // they sampled, re-stamped to the present.
    let addr = format!("127.0.0.1:{}", free_port());
    let server = Server::demo(&addr, &[]);
    assert!(
        !stale.exists(),
        "the stale demo store {} is left",
        stale.display()
    );
    // The slowest /cpu-heavy span, and the slowest that got samples (the slowest of all may
    // have waited for a core rather than burned one).
    let spans = json(
        &addr,
        "/api/v1/spans?service=goapp&name=GET+/cpu-heavy&limit=20",
    );
    let first = spans["spans"][0]["span_id"].clone();
    let sampled: Vec<&Value> = spans["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["total"].as_i64().unwrap_or(0) > 0)
        .collect();
    assert!(
        sampled.len() >= 2,
        "fewer than 2 of the 20 slowest /cpu-heavy spans have samples: {spans}"
    );
    let (slowest, other) = (sampled[0].clone(), sampled[1]["span_id"].clone());

    // A span the profiler missed though a profile covers it (so the verdict is final): short
    // spans are most of /cpu-light's and sortWork's.
    let all = json(&addr, "/api/v1/spans?service=goapp&limit=10000");
    let unsampled = all["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["total"] == 0
                && (s["coverage"] == "shorter than the sampling period"
                    || s["coverage"] == "no CPU used")
        })
        .unwrap_or_else(|| panic!("every span got samples: {all}"));
    let unsampled = format!(
        "{}/{}",
        unsampled["trace_id"].as_str().unwrap(),
        unsampled["span_id"].as_str().unwrap()
    );
    // A span wholly between two CPU windows (the recording's windows are ~260 ms apart: Go
    // stops sampling when the window ends and answers up to 100 ms later, then the next one
    // is asked for).
    let between = all["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["coverage"] == "profiles cover too little of the span" && s["covered_ns"] == 0)
        .unwrap_or_else(|| panic!("no span fell between two windows: {all}"));
    let between = format!(
        "{}/{}",
        between["trace_id"].as_str().unwrap(),
        between["span_id"].as_str().unwrap()
    );

    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let (base, empty_base) = (format!("http://{addr}"), format!("http://{empty_addr}"));
    let screens = browser_script(
        "ui_check",
        &[
            "--base",
            &base,
            "--empty-base",
            &empty_base,
            "--first",
            first.as_str().unwrap(),
            "--span",
            slowest["span_id"].as_str().unwrap(),
            "--trace",
            slowest["trace_id"].as_str().unwrap(),
            "--other",
            other.as_str().unwrap(),
            "--unsampled",
            &unsampled,
            "--between",
            &between,
            "--now",
            &now_s,
        ],
        &dir,
        "ui-screens",
    );
    let shots = std::fs::read_dir(&screens)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
        })
        .count();
    assert!(
        shots >= 8,
        "only {shots} screenshots in {}",
        screens.display()
    );

    // The demo's store is thrown away at exit.
    let log = server.stop();
    let dir = log
        .split_whitespace()
        .find_map(|w| w.strip_prefix("dir="))
        .unwrap_or_else(|| panic!("no data directory in the log:\n{log}"));
    assert!(log.contains("demo data loaded"), "{log}");
    assert!(!Path::new(dir).exists(), "{dir} is left after exit");
}

/// A spanprof that needs credentials (`spanprof serve --demo` with a read token in its config
/// file): the browser reads nothing without the token, is told when one is refused, signs in
/// and sees the demo's spans, keeps the token over a reload and forgets it on sign-out
/// (`python/ui_auth_check.py`).
#[test]
fn the_ui_signs_in_with_a_token_and_reads_nothing_without_one() {
    // Missing tools fail now, before any server starts.
    tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    support::python();
    let dir = process_dir("ui-auth");
    let token = "read-token-of-the-ui-test-5d41402abc4b2a76";
    let token_file = dir.join("ui.token");
    std::fs::write(&token_file, token).unwrap();
    let config = dir.join("spanprof.yaml");
    std::fs::write(
        &config,
        format!(
            "auth:\n  credentials:\n    - name: ui\n      scopes: [read]\n      token_file: {}\n",
            token_file.display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let server = Server::demo(&addr, &["--config", config.to_str().unwrap()]);
    let r = get(&addr, "/api/v1/services", Duration::from_secs(30)).unwrap();
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));

    let base = format!("http://{addr}");
    browser_script(
        "ui_auth_check",
        &["--base", &base, "--token", token],
        &dir,
        "ui-auth-screens",
    );
    let log = server.stop();
    assert!(
        !log.contains(token),
        "the token is in the server's log:\n{log}"
    );
}

/// The flame graph's views, Explore and Compare on `spanprof serve --demo`
/// (`python/ui_flame.py`): the functions table follows search and zoom with whole names; the
/// canvas is walked by keyboard (Tab, arrows, Enter zooms, Esc resets); the SVG export has the
/// canvas's frames top-down in its colours; bottom-up, callers/callees, graph-only and
/// table-only; the timeline's axes, hover value, an exemplar opening its span, a brush in the
/// browser's time zone and in UTC; Compare's pickers, one name per side, the diff table's
/// sort and search; at 1400 and 900 px and in the dark theme, failing on console errors.
#[test]
fn the_flame_graph_explore_and_compare_views_work_by_mouse_and_keyboard() {
    // Missing tools fail now, before any server starts.
    tool("SPANPROF_CHROMIUM", "/usr/bin/chromium");
    tool("SPANPROF_CHROMEDRIVER", "/usr/bin/chromedriver");
    support::python();
    let dir = process_dir("ui-flame");
    let addr = format!("127.0.0.1:{}", free_port());
    let server = Server::demo(&addr, &[]);
    let base = format!("http://{addr}");
    let screens = browser_script("ui_flame", &["--base", &base], &dir, "ui-flame-screens");
    let shots = std::fs::read_dir(&screens)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
        })
        .count();
    assert!(
        shots >= 20,
        "only {shots} screenshots in {}",
        screens.display()
    );
    server.stop();
}
