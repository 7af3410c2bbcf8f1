//! Third-party Pyroscope clients built and run for real: the Node.js SDK (`@pyroscope/nodejs`
//! from npm, pushed and scraped in pull mode) and the Rust `pyroscope` 0.5 crate (crates.io,
//! folded uploads with thread tags).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spanprof_server::config::ScrapeTarget;

use super::{span_bytes, Selection, Server};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `testprograms/nodeapp/app.js` with `args` and waits for its `ready …` line.
fn node_app(args: &[&str]) -> (Running, String) {
    let app = repo_root().join("testprograms/nodeapp");
    assert!(
        app.join("node_modules/@pyroscope/nodejs").is_dir(),
        "testprograms/nodeapp/node_modules is missing: run .ci/setup (it runs `npm ci` there; \
         Node.js 18+ and npm needed, Debian: apt-get install nodejs npm)"
    );
    let mut child = Command::new("node")
        .arg("app.js")
        .args(args)
        .current_dir(&app)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node (Debian: apt-get install nodejs; .ci/setup checks it)");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("node app.js printed no `ready` line within 60 s");
    let at = line
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("unexpected first line from node app.js: {line:?}"))
        .to_owned();
    (running, at)
}

/// Polls `check` until it gives a value, or panics naming `what` after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(200));
    }
}

fn profile_type_ids(server: &Server, service: &str) -> Vec<String> {
    let a = server.request(
        "GET",
        &format!("/api/v1/profile-types?service={service}"),
        &[],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
    let mut ids: Vec<String> = v["profile_types"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

const NODE_HEAP: &str = "memory:inuse_space:bytes:inuse_space:bytes";
const NODE_WALL: &str = "wall:wall:nanoseconds:wall:nanoseconds";

/// One Node.js service pushing (the SDK's own upload) and one scraped in pull mode (the SDK's
/// Express handlers): the same profile has one set of type ids either way, and the scraped
/// heap, a snapshot at each scrape, reads over a range as the average of its scrapes, not
/// their sum (four scrapes of 2.3 to 5.9 MB read 16.7 MB before).
#[test]
fn node_sdk_pushed_and_pulled_give_one_set_of_types_and_a_heap_averaged() {
    let (_pull, port) = node_app(&["pull", "0"]);
    let server = Server::start_with(|c| {
        c.receivers.scrape.push(ScrapeTarget {
            profiles: vec!["cpu".into(), "heap".into()],
            interval: Duration::from_secs(1),
            ..ScrapeTarget::new("nodepull", format!("http://127.0.0.1:{port}"))
        })
    });
    let (_push, _) = node_app(&["push", &format!("http://{}", server.addr)]);

    let wanted =
        |ids: &[String]| ids.iter().any(|t| t == NODE_HEAP) && ids.iter().any(|t| t == NODE_WALL);
    let limit = Duration::from_secs(90);
    let pushed = wait_for("the pushed Node types", limit, || {
        Some(profile_type_ids(&server, "nodepush")).filter(|t| wanted(t))
    });
    let pulled = wait_for("the scraped Node types", limit, || {
        Some(profile_type_ids(&server, "nodepull")).filter(|t| wanted(t))
    });
    assert_eq!(pulled, pushed, "one set of type ids, pushed or pulled");

    // At least four heap scrapes, each a point of its own value.
    let heap = format!("service=nodepull&type={NODE_HEAP}");
    let points = wait_for("four heap scrapes", limit, || {
        let a = server.request(
            "GET",
            &format!("/api/v1/timeseries?{heap}&step=1ms&aggregation=sum"),
            &[],
            b"",
        );
        let v: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
        let points: Vec<u64> = v["series"][0]["points"]
            .as_array()?
            .iter()
            .filter_map(|p| p["value"].as_u64())
            .collect();
        (points.len() >= 4).then_some(points)
    });
    let a = server.request(
        "GET",
        &format!("/api/v1/flamegraph?{heap}&to={}", u64::MAX / 2),
        &[],
        b"",
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    let summary = &v["summary"];
    let n = summary["averaged_over"]
        .as_u64()
        .unwrap_or_else(|| panic!("the heap is not averaged: {summary}"));
    let total = v["flamegraph"]["total"].as_u64().unwrap();
    let sum = summary["value_selected"].as_u64().unwrap();
    assert!(n >= 4, "{summary}");
    // The average, rounded down frame by frame: never above the largest scrape, far below
    // the sum of them all.
    let max = *points.iter().max().unwrap();
    assert!(
        total <= sum / n && total * n + n * 64 >= sum,
        "total {total}, sum {sum} over {n}"
    );
    assert!(total <= max, "total {total}, scrapes {points:?}");
}

/// Builds `testprograms/rustpyroscope05` (the `pyroscope` 0.5.8 crate with its pprof-rs backend)
/// under `target/testprograms`, beside `rustapp`, whose dependencies it shares.
fn rust_pyroscope_05() -> PathBuf {
    spanprof_testkit::build_rust_test_program("rustpyroscope05", &[])
}

/// The Rust `pyroscope` 0.5 crate uploads folded text with the thread's tags in the upload's
/// name (`name=rustpyroscope05{env=eval,span_id=…,trace_id=…}`), and keeps tags as a set: the
/// child span's samples are uploaded under both span ids. Each span gets its own CPU, linked,
/// and no span or trace id becomes a series label.
#[test]
fn rust_pyroscope_05_folded_uploads_link_each_span_its_own_cpu() {
    let program = rust_pyroscope_05();
    let server = Server::start();
    let (trace, parent, child) = (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        "b7ad6b7169203331",
    );
    let out = Command::new(&program)
        .args([&format!("http://{}", server.addr), trace, parent, child])
        .output()
        .expect("running rustpyroscope05");
    assert!(
        out.status.success(),
        "rustpyroscope05 failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (store, _dir) = server.stop_and_open_store();
    let series = super::series_labels(&store, "rustpyroscope05");
    assert!(!series.is_empty(), "nothing stored");
    for labels in &series {
        assert_eq!(labels["env"], "eval", "{labels:?}");
        assert!(
            !labels.contains_key("span_id") && !labels.contains_key("trace_id"),
            "ids are no series labels: {labels:?}"
        );
    }
    let of = |span: &str| {
        let sel = Selection {
            span_ids: vec![span_bytes(span)],
            ..super::select("rustpyroscope05", super::CPU_TYPE)
        };
        store.flame_graph(&sel).unwrap().0
    };
    let (p, c) = (of(parent), of(child));
    let (pc, cc) = (p.to_collapsed(), c.to_collapsed());
    assert!(
        cc.contains("child_work") && !cc.contains("parent_work"),
        "child:\n{cc}"
    );
    assert!(
        pc.contains("parent_work") && !pc.contains("child_work"),
        "parent:\n{pc}"
    );
    // 1.2 s of thread CPU time each; pprof-rs' process-wide timer loses some of its ticks on
    // a loaded machine (a third of them on CI's two cores), so only the bulk is asserted.
    assert!(c.total() >= 400_000_000, "child {} ns", c.total());
    assert!(p.total() >= 400_000_000, "parent {} ns", p.total());
    let mut trace_id = [0u8; 16];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&trace[2 * i..2 * i + 2], 16).unwrap();
    }
    let whole = Selection {
        trace_id: Some(trace_id),
        ..super::select("rustpyroscope05", super::CPU_TYPE)
    };
    assert_eq!(
        store.flame_graph(&whole).unwrap().0.total(),
        p.total() + c.total(),
        "the trace holds both spans"
    );
}
