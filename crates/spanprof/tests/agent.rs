//! spanprof-agent end to end: `testprograms/rustapp` (tokio multi-thread, `tracing` +
//! `tracing-opentelemetry`, spans over OTLP/HTTP by the OpenTelemetry SDK, the agent's profiles
//! over OTLP/HTTP) against a real `spanprof serve`. Requests burn CPU in a function of their own
//! across `.await` points, so tasks migrate between workers; each span's flame graph must hold
//! its own function, and a child span's samples must roll up into its parent.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use support::serve::{free_port, Server};
use support::{poll, run, scratch_dir, workspace_root};

/// A clean build of the test program and its dependencies takes ~1.5 min on 2 cores.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Builds `testprograms/rustapp` with frame pointers into `target/rustapp` (its own target
/// directory: other flags than the workspace's), once per test process.
fn rustapp() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let target = workspace_root().join("target/rustapp");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root().join("testprograms/rustapp"))
            .args(["build", "--quiet"])
            .env("CARGO_TARGET_DIR", &target)
            // The agent walks frame pointers; cargo's encoded flags would override RUSTFLAGS.
            .env("RUSTFLAGS", "-C force-frame-pointers=yes")
            .env_remove("CARGO_ENCODED_RUSTFLAGS");
        run(cmd, BUILD_TIMEOUT).assert_success();
        target.join("debug/rustapp")
    })
}

#[derive(Debug)]
struct Request {
    kind: String,
    trace_id: String,
    span_id: String,
    child_span_id: Option<String>,
    threads: u64,
}

/// A span's functions as `/api/v1/top` answers them: each function's `total` counts the samples
/// with it anywhere on the stack (the flame graph's own JSON nests as deep as the stacks).
struct SpanGraph {
    total: f64,
    functions: Vec<(String, f64)>,
}

impl SpanGraph {
    /// CPU of the samples with `…::function` on their stack.
    fn value_in(&self, function: &str) -> f64 {
        let suffix = format!("::{function}");
        self.functions
            .iter()
            .filter(|(name, _)| name.ends_with(&suffix))
            .map(|(_, total)| total)
            .sum()
    }
}

fn flamegraph(addr: &str, query: &str) -> Result<SpanGraph, String> {
    let path = format!("/api/v1/top?{query}&order=total&limit=10000");
    let r = support::http::get(addr, &path, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("{path}: {} {body}", r.status));
    }
    let functions = body["functions"]
        .as_array()
        .ok_or_else(|| format!("{path}: no functions in {body}"))?
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap_or_default().to_owned();
            (name, f["total"].as_f64().unwrap_or(0.0))
        })
        .collect();
    let total = body["total"].as_f64().unwrap_or(0.0);
    Ok(SpanGraph { total, functions })
}

#[test]
fn each_span_flame_graph_holds_its_own_function_across_awaits() {
    let binary = rustapp();
    let data = tempfile::tempdir().unwrap();
    let otlp = format!("127.0.0.1:{}", free_port());
    let server = Server::start(data.path(), "127.0.0.1:0", &["--otlp-http-addr", &otlp]);

    let hz = 250u64;
    let mut cmd = Command::new(binary);
    cmd.env("SPANPROF_URL", format!("http://{otlp}"))
        .env("RUSTAPP_REQUESTS", "24")
        .env("RUSTAPP_CONCURRENCY", "12")
        // A fixed amount of CPU per chunk (~50 ms unoptimised), whatever the machine's load, so
        // each span gets ~50 samples. Samples also land in a span's own enter/exit code
        // (correctly attributed, not in its burn function), more often than its share of time
        // since CPU timers fire on the way back from the kernel, i.e. right after a wake-up and
        // so at a poll: few, long chunks keep those far below 5 % of a span.
        .env("RUSTAPP_CHUNKS", "4")
        .env("RUSTAPP_CHUNK_ROUNDS", "1200")
        .env("RUSTAPP_HZ", hz.to_string())
        .env("RUSTAPP_WORKERS", "4");
    let out = run(cmd, RUN_TIMEOUT);
    out.assert_success().assert_no_panic();
    let mut lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let summary = lines.pop().expect("summary line");
    let agent = &summary["agent"];
    let requests: Vec<Request> = lines
        .iter()
        .map(|l| Request {
            kind: l["kind"].as_str().unwrap().to_owned(),
            trace_id: l["trace_id"].as_str().unwrap().to_owned(),
            span_id: l["span_id"].as_str().unwrap().to_owned(),
            child_span_id: l["child_span_id"].as_str().map(str::to_owned),
            threads: l["threads"].as_u64().unwrap(),
        })
        .collect();
    assert_eq!(requests.len(), 24, "{}", out.stdout);
    assert_eq!(agent["dropped"], 0, "{summary}");
    assert_eq!(agent["export_errors"], 0, "{summary}");
    // The point of the test: tasks do move between worker threads mid-span.
    let migrated = requests.iter().filter(|r| r.threads > 1).count();
    assert!(
        migrated * 4 >= requests.len(),
        "only {migrated} of 24 requests changed thread"
    );

    let period_ns = 1e9 / hz as f64;
    let addr = server.addr.clone();
    // Profiles and spans are in once every span's graph (children included) has its samples.
    let last_child = requests.iter().rev().find_map(|r| r.child_span_id.clone());
    poll(
        "the spans and their samples",
        Duration::from_secs(60),
        || {
            for r in &requests {
                let g = flamegraph(&addr, &format!("span_id={}", r.span_id))?;
                if g.total == 0.0 {
                    return Err(format!("span {} has no samples yet", r.span_id));
                }
            }
            let child = last_child.as_deref().unwrap();
            flamegraph(&addr, &format!("span_id={child}")).map(|_| ())
        },
    );

    let mut report = BTreeMap::<String, (f64, f64, f64, usize)>::new(); // own, total, worst, spans
    let mut check = |label: &str, query: String, function: &str| -> SpanGraph {
        let g = flamegraph(&addr, &query).unwrap();
        let own = g.value_in(function);
        let samples = g.total / period_ns;
        assert!(samples >= 8.0, "{label} {query}: only {samples} samples");
        // No sample of another span's function, ever: that would be a wrong attribution.
        for other in ["burn_alpha", "burn_beta", "burn_gamma", "burn_gamma_child"] {
            if other != function {
                assert_eq!(
                    g.value_in(other),
                    0.0,
                    "{label} {query}: samples in {other}"
                );
            }
        }
        let fraction = own / g.total;
        assert!(
            fraction >= 0.95,
            "{label} {query}: {:.1} % of {samples} samples in {function}\n{:?}",
            fraction * 100.0,
            g.functions
        );
        let e = report.entry(label.to_owned()).or_insert((0.0, 0.0, 1.0, 0));
        e.0 += own;
        e.1 += g.total;
        e.2 = e.2.min(fraction);
        e.3 += 1;
        g
    };
    for r in &requests {
        let function = format!("burn_{}", r.kind.to_lowercase());
        let own = check(&r.kind, format!("span_id={}", r.span_id), &function);
        if r.kind == "Beta" {
            // Its parent came from another process (set_parent after the span was made): the
            // samples carry that trace, so the trace's flame graph is the span's.
            assert!(r.trace_id.starts_with("5eed"), "{r:?}");
            let trace = flamegraph(&addr, &format!("trace_id={}", r.trace_id)).unwrap();
            assert_eq!(trace.total, own.total, "{r:?}");
        }
        if let Some(child) = &r.child_span_id {
            assert_eq!(own.value_in("burn_gamma_child"), 0.0, "{r:?}");
            let child_graph = check(
                "Gamma.child",
                format!("span_id={child}"),
                "burn_gamma_child",
            );
            let rolled = flamegraph(
                &addr,
                &format!("span_id={}&include_child_spans=true", r.span_id),
            )
            .unwrap();
            // The parent's graph with its child is exactly both.
            assert_eq!(
                rolled.total,
                own.total + child_graph.total,
                "{r:?}: with children {:?}\nparent {:?}\nchild {:?}",
                rolled
                    .functions
                    .iter()
                    .filter(|f| f.0.contains("burn"))
                    .collect::<Vec<_>>(),
                own.functions
                    .iter()
                    .filter(|f| f.0.contains("burn"))
                    .collect::<Vec<_>>(),
                child_graph
                    .functions
                    .iter()
                    .filter(|f| f.0.contains("burn"))
                    .collect::<Vec<_>>()
            );
            assert_eq!(
                rolled.value_in("burn_gamma_child"),
                child_graph.value_in("burn_gamma_child"),
                "{r:?}"
            );
        }
    }

    let mut text = format!(
        "spanprof-agent attribution ({hz} Hz, 24 requests, 4 workers, {migrated} requests \
         changed thread mid-span; agent {agent})\n\n| span kind | spans | samples | in its own function | worst span |\n|---|---|---|---|---|\n"
    );
    for (kind, (own, total, worst, spans)) in &report {
        text += &format!(
            "| {kind} | {spans} | {:.0} | {:.1} % | {:.1} % |\n",
            total / period_ns,
            own / total * 100.0,
            worst * 100.0
        );
    }
    std::fs::write(scratch_dir().join("agent-attribution.md"), &text).unwrap();
    eprintln!("{text}");
    server.stop();
}
