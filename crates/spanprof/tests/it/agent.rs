//! spanprof-agent end to end: `testprograms/rustapp` (tokio multi-thread, `tracing` +
//! `tracing-opentelemetry`, spans over OTLP/HTTP by the OpenTelemetry SDK, the agent's profiles
//! over OTLP/HTTP) against a real `spanprof serve`. Requests burn CPU in a function of their own
//! across `.await` points, so tasks migrate between workers; each span's flame graph must hold
//! its own function, and a child span's samples must roll up into its parent. The same program,
//! profiled by pyroscope-rs with thread tags instead, is measured beside it in the report.

mod otel_tls;
use spanprof_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::serve::{free_port, Server};
use support::{poll, scratch_dir};

/// One run of the test program, however loaded the machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// The peer's run (pyroscope-rs) takes about 20 s, on an idle machine as in CI.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// Builds `testprograms/rustapp` (into `target/testprograms`, with frame pointers) once per
/// test process. One build serves both profilers: the `pyroscope` feature only adds
/// pyroscope-rs, used when `RUSTAPP_PROFILER` says.
fn rustapp() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| support::build_rust_test_program("rustapp", &["pyroscope"]))
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

/// The workload of both runs: a fixed amount of CPU per chunk, whatever the machine's load, so
/// each span gets about 110 samples at [`HZ`]. 1,200 rounds gave 171 in CI and cost 7 CPU-s
/// more per run; 450 gave 62, and a span 96.9 % in its request's code against the 95 % bound,
/// as the one or two samples outside it weigh more in a shorter span. Samples also land in a
/// span's own enter/exit code (correctly attributed, not in its burn function), more often
/// than its share of time since CPU timers fire on the way back from the kernel, i.e. right
/// after a wake-up and so at a poll: few, long chunks keep those far below 5 % of a span.
const WORKLOAD: &[(&str, &str)] = &[
    ("RUSTAPP_REQUESTS", "24"),
    ("RUSTAPP_CONCURRENCY", "12"),
    ("RUSTAPP_CHUNKS", "4"),
    ("RUSTAPP_CHUNK_ROUNDS", "800"),
    ("RUSTAPP_WORKERS", "4"),
];
const HZ: u64 = 250;
const BURNS: [&str; 4] = ["burn_alpha", "burn_beta", "burn_gamma", "burn_gamma_child"];

/// Runs the test program with `profiler` (`agent` or `pyroscope`) sending spans (and the
/// agent's profiles) to `otlp`, pyroscope-rs' to `pyroscope`; its requests and summary line.
fn run_rustapp(profiler: &str, otlp: &str, pyroscope: &str) -> (Vec<Request>, Value) {
    run_rustapp_within(profiler, otlp, pyroscope, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("rustapp ({profiler}) did not finish within {RUN_TIMEOUT:?}"))
}

/// [`run_rustapp`], `None` when the run was killed at `timeout`.
fn run_rustapp_within(
    profiler: &str,
    otlp: &str,
    pyroscope: &str,
    timeout: Duration,
) -> Option<(Vec<Request>, Value)> {
    let mut cmd = Command::new(rustapp());
    cmd.env("SPANPROF_URL", format!("http://{otlp}"))
        .env("RUSTAPP_PROFILER", profiler)
        .env("RUSTAPP_PYROSCOPE_URL", format!("http://{pyroscope}"))
        .env("RUSTAPP_HZ", HZ.to_string())
        .envs(WORKLOAD.iter().copied());
    let out = support::run_within(cmd, timeout, Stdio::null())?;
    out.assert_success().assert_no_panic();
    let mut lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let summary = lines.pop().expect("summary line");
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
    assert_eq!(requests.len(), 24, "{profiler}: {}", out.stdout);
    Some((requests, summary))
}

/// How one run's samples fell, over all its spans (children included), asserting nothing.
#[derive(Debug, Default)]
struct Attribution {
    spans: usize,
    spans_with_samples: usize,
    /// CPU in ns: all of the spans', in each span's own function, in another span's function.
    total: f64,
    own: f64,
    foreign: f64,
    /// Lowest fraction in its own function among spans with samples.
    worst: f64,
}

impl Attribution {
    fn of(addr: &str, requests: &[Request]) -> Attribution {
        let mut a = Attribution {
            worst: 1.0,
            ..Default::default()
        };
        for r in requests {
            let mut spans = vec![(r.span_id.clone(), format!("burn_{}", r.kind.to_lowercase()))];
            if let Some(child) = &r.child_span_id {
                spans.push((child.clone(), "burn_gamma_child".to_owned()));
            }
            for (span, own) in spans {
                a.spans += 1;
                let g = flamegraph(addr, &format!("span_id={span}")).unwrap();
                if g.total == 0.0 {
                    continue;
                }
                a.spans_with_samples += 1;
                let in_own = g.value_in(&own);
                a.total += g.total;
                a.own += in_own;
                // A parent's samples in its child's function, under thread tags, are its own.
                a.foreign += BURNS
                    .iter()
                    .filter(|b| **b != own && !(own == "burn_gamma" && **b == "burn_gamma_child"))
                    .map(|b| g.value_in(b))
                    .sum::<f64>();
                a.worst = a.worst.min(in_own / g.total);
            }
        }
        a
    }

    fn row(&self, profiler: &str) -> String {
        if self.total == 0.0 {
            return format!("| {profiler} | 0 of {} | 0 | - | - | - |\n", self.spans);
        }
        format!(
            "| {profiler} | {} of {} | {:.0} | {:.1} % | {:.1} % | {:.1} % |\n",
            self.spans_with_samples,
            self.spans,
            self.total / (1e9 / HZ as f64),
            self.own / self.total * 100.0,
            // + 0.0: an empty f64 sum is -0.0.
            self.worst * 100.0 + 0.0,
            self.foreign / self.total * 100.0 + 0.0
        )
    }
}

#[test]
fn each_span_flame_graph_holds_its_own_function_across_awaits() {
    let data = tempfile::tempdir().unwrap();
    let otlp = format!("127.0.0.1:{}", free_port());
    let server = Server::start(data.path(), "127.0.0.1:0", &["--otlp-http-addr", &otlp]);

    let (requests, summary) = run_rustapp("agent", &otlp, &server.addr);
    let agent = &summary["agent"];
    assert_eq!(agent["dropped"], 0, "{summary}");
    assert_eq!(agent["export_errors"], 0, "{summary}");
    // The point of the test: tasks do move between worker threads mid-span.
    let migrated = requests.iter().filter(|r| r.threads > 1).count();
    assert!(
        migrated * 4 >= requests.len(),
        "only {migrated} of 24 requests changed thread"
    );

    let hz = HZ;
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
        for other in BURNS {
            if other != function {
                assert_eq!(
                    g.value_in(other),
                    0.0,
                    "{label} {query}: samples in {other}"
                );
            }
        }
        // The span's own CPU is its request's code: its function, and the awaits and span
        // exits its request makes between chunks (CI runs: 3 of 51 samples in a yield_now,
        // 4 of 51 in tracing-opentelemetry's on_exit under load). Samples outside it (the
        // runtime with a stale slot) count against the 95 %; samples of another span's
        // function are refused above, one being enough.
        // The async fn's body by either of its names: `{{closure}}` from the symbol table,
        // `{closure#0}` from DWARF (which an incremental build's debug info gives it).
        let in_request = g.value_in("request::{{closure}}") + g.value_in("request::{closure#0}");
        let fraction = in_request / g.total;
        assert!(
            fraction >= 0.95,
            "{label} {query}: {:.1} % of {samples} samples in its request's code \
             ({:.1} % in {function})\n{:?}",
            fraction * 100.0,
            own / g.total * 100.0,
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

    // The peer: the same program and workload, pyroscope-rs tagging the OS thread with the
    // span at request start and untagging at its end (its README's way), into the same server.
    // Nothing is asserted of its attribution, only that it sent data.
    let agent_attribution = Attribution::of(&addr, &requests);
    let peer_started = Instant::now();
    // pyroscope-rs 2.1.5 symbolises its whole report under a lock at every tag change. On a
    // loaded 2-core machine such a dump has stalled (a worker inside addr2line, the others
    // waiting on the lock; seen in 2 test runs and in 1 of 50 runs under load) until the run
    // hit its 300 s limit. The peer is measured, not tested: a run past PEER_TIMEOUT is
    // killed and run once more, and that is said.
    let (peer_requests, _) = run_rustapp_within("pyroscope", &otlp, &server.addr, PEER_TIMEOUT)
        .unwrap_or_else(|| {
            eprintln!(
                "pyroscope-rs' run did not finish within {PEER_TIMEOUT:?} (its report dump \
                 stalled); running it once more"
            );
            run_rustapp("pyroscope", &otlp, &server.addr)
        });
    // Its service is named after pyroscope-rs' application name; its data, once it is there.
    poll("pyroscope-rs' profiles", Duration::from_secs(60), || {
        let r = support::http::get(&addr, "/api/v1/services", Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
        let body: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
        let service = body["services"]
            .as_array()
            .and_then(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .find(|s| s.starts_with("rustapp-pyroscope"))
            })
            .ok_or_else(|| format!("no pyroscope-rs service yet: {body}"))?
            .to_owned();
        match flamegraph(&addr, &format!("service={service}"))?.total {
            0.0 => Err(format!("no samples from pyroscope-rs in {service} yet")),
            _ => Ok(()),
        }
    });
    let peer = Attribution::of(&addr, &peer_requests);
    let peer_seconds = peer_started.elapsed().as_secs_f64();

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
    text += "\nThe same program and workload profiled by pyroscope-rs (pprof-rs backend, thread \
             tags set at request start, removed at its end), beside spanprof-agent:\n\n\
             | profiler | spans with samples | samples | in the span's own function | worst span | in another span's function |\n\
             |---|---|---|---|---|---|\n";
    text += &agent_attribution.row("spanprof-agent (slot per poll)");
    text += &peer.row("pyroscope-rs (thread tags)");
    text += &format!("\n(the pyroscope-rs run and its queries: {peer_seconds:.1} s)\n");
    std::fs::write(scratch_dir().join("agent-attribution.md"), &text).unwrap();
    eprintln!("{text}");
    server.stop();
}

/// OTEP 4947's discovery, from outside the process: the test program exports
/// `otel_thread_ctx_v1` in its dynamic symbol table; while it runs, this test (its parent, so
/// allowed to ptrace it) stops each of its threads in turn, reads the thread's context record
/// through `/proc/<pid>/mem`, and lets it go. Every span read must be one the program exported
/// over OTLP (spanprof has it in its trace), named as that span.
#[test]
fn an_out_of_process_reader_finds_each_thread_span_by_the_otep_symbol() {
    let data = tempfile::tempdir().unwrap();
    let otlp = format!("127.0.0.1:{}", free_port());
    let server = Server::start(data.path(), "127.0.0.1:0", &["--otlp-http-addr", &otlp]);

    let exe = std::fs::read(rustapp()).unwrap();

    // The layer writes the record whether or not a profiler runs: none here, so no SIGPROF
    // comes between the reader's stops.
    let mut child = Command::new(rustapp())
        .env("SPANPROF_URL", format!("http://{otlp}"))
        .env("RUSTAPP_PROFILER", "none")
        .envs(WORKLOAD.iter().copied())
        // Less than the attribution runs' work: the reader needs 20 stops in spans, and makes
        // hundreds a second.
        .env("RUSTAPP_CHUNK_ROUNDS", "300")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rustapp");
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let output = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();

    // The reading protocol: the process context says the process publishes thread contexts,
    // in which schema and with which attribute keys; then the symbol, in the executable.
    let reference = poll("the process context", Duration::from_secs(60), || {
        otel_tls::read_process_context(pid, &mem)
    });
    assert_eq!(
        reference,
        otel_tls::ThreadLocalReference {
            schema_version: "tlsdesc_v1_dev".into(),
            attribute_key_map: vec!["span_name".into()],
        }
    );
    let sym = otel_tls::find_tls_symbol(&exe, "otel_thread_ctx_v1").unwrap();

    // (tid, record) of every read that found a span; stops that found none are counted.
    let mut seen = Vec::new();
    let (mut stops, mut empty, mut errors) = (0u64, 0u64, Vec::new());
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "rustapp did not finish");
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let tid: i32 = task.file_name().to_string_lossy().parse().unwrap();
            // Not the main thread: its waitpid, when the process has just exited, reaps the
            // process's exit status, and `child.try_wait` then fails with ECHILD (seen in a
            // CI run). The spans run on the runtime's worker threads.
            if tid as u32 == pid {
                continue;
            }
            match otel_tls::read_thread(&mem, tid, sym) {
                Ok(Some(record)) => {
                    stops += 1;
                    seen.push((tid, record));
                }
                Ok(None) => {
                    stops += 1;
                    empty += 1;
                }
                // A thread (or the process) that ended between listing and stopping it.
                Err(e) if errors.len() < 5 => errors.push(e),
                Err(_) => {}
            }
        }
        std::thread::park_timeout(Duration::from_millis(2));
    };
    assert!(status.success(), "rustapp: {status}");
    let out = output.join().unwrap();
    let mut lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    lines.pop(); // the summary
    assert!(
        seen.len() >= 20,
        "only {} of {stops} stops found a span ({empty} none; errors: {errors:?}). The test \
         ptraces its own child: with EPERM, allow it (kernel.yama.ptrace_scope <= 1, a seccomp \
         profile that permits ptrace)",
        seen.len()
    );
    // The program's own view of its spans' ids (from the OpenTelemetry context), per span.
    let mut names = BTreeMap::new();
    for l in &lines {
        let kind = l["kind"].as_str().unwrap().to_lowercase();
        names.insert(l["span_id"].as_str().unwrap().to_owned(), kind);
        if let Some(child) = l["child_span_id"].as_str() {
            names.insert(child.to_owned(), "gamma.child".to_owned());
        }
    }
    // Attributes by the process context's key map: the span's name.
    for (tid, r) in &seen {
        let name = names
            .get(&r.span_id)
            .unwrap_or_else(|| panic!("thread {tid}: span {} is no request's: {r:?}", r.span_id));
        let attrs: Vec<(&str, &str)> = r
            .attrs
            .iter()
            .map(|(k, v)| {
                (
                    reference.attribute_key_map[*k as usize].as_str(),
                    v.as_str(),
                )
            })
            .collect();
        assert_eq!(
            attrs,
            vec![("span_name", name.as_str())],
            "thread {tid}: {r:?}"
        );
        assert_eq!(r.trace_flags & 1, 1, "sampled spans: {r:?}");
    }
    // And spanprof received them over OTLP, in the trace the reader saw.
    let addr = server.addr.clone();
    let distinct: BTreeSet<(String, String)> = seen
        .iter()
        .map(|(_, r)| (r.trace_id.clone(), r.span_id.clone()))
        .collect();
    for (trace, span) in &distinct {
        poll(
            "the span in spanprof's trace",
            Duration::from_secs(60),
            || {
                let path = format!("/api/v1/traces/{trace}");
                let r = support::http::get(&addr, &path, Duration::from_secs(30))
                    .map_err(|e| e.to_string())?;
                let body: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
                let spans = body["spans"].as_array().cloned().unwrap_or_default();
                spans
                    .iter()
                    .any(|s| s["span_id"] == span.as_str())
                    .then_some(())
                    .ok_or_else(|| format!("{path}: {} {body}", r.status))
            },
        );
    }
    let threads: BTreeSet<i32> = seen.iter().map(|(tid, _)| *tid).collect();
    eprintln!(
        "out-of-process reader: {stops} thread stops, {} in a span ({} distinct spans, on {} \
         threads, all exported over OTLP), {empty} outside any span",
        seen.len(),
        distinct.len(),
        threads.len()
    );
    server.stop();
}
