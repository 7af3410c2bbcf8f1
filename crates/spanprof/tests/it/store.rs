//! The embedded store end to end, as a user drives it: real Go CPU profiles and the spans the
//! Go program exports (OTLP/HTTP JSON), put in with `spanprof import`, read back with
//! `spanprof flame --data`, and checked against `go tool pprof -tagfocus` on the same file.

use spanprof_testkit as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use support::http::Recorder;
use support::{pprof_raw, process_dir, spanprof, GoApp, ProfileKind};

/// A CPU profile with the spans of every request made while it was taken.
struct SpanCapture {
    cpu: PathBuf,
    spans: PathBuf,
    /// (trace id, server span id, child span id if any, path) per request.
    requests: Vec<(String, String, Option<String>, String)>,
}

fn capture() -> &'static SpanCapture {
    static CAPTURE: OnceLock<SpanCapture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let dir = process_dir("store-capture");
        let collector = Recorder::start();
        let app = GoApp::start(&["-otlp", &collector.url()]);
        let stop = AtomicBool::new(false);
        let requests = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for paths in [
                &["/cpu-heavy"][..],
                &["/cpu-light", "/cpu-light?keys=custom"][..],
            ] {
                let (app, stop, requests) = (&app, &stop, &requests);
                s.spawn(move || {
                    for path in paths.iter().cycle() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let r = app.get(path);
                        let h = |n: &str| r.header(n).map(str::to_string);
                        requests.lock().unwrap().push((
                            h("X-Trace-Id").unwrap(),
                            h("X-Span-Id").unwrap(),
                            h("X-Child-Span-Id"),
                            path.to_string(),
                        ));
                    }
                });
            }
            app.fetch_profile(ProfileKind::Cpu, &dir.join("cpu.pb.gz"));
            stop.store(true, Ordering::Relaxed);
        });
        let requests = requests.into_inner().unwrap();
        // Every request exports one OTLP request; wait until all have arrived.
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines.len() < requests.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = collector.next(left).unwrap_or_else(|| {
                panic!(
                    "only {} of {} span exports arrived within 30 s",
                    lines.len(),
                    requests.len()
                )
            });
            lines.push(String::from_utf8(r.body).unwrap().replace('\n', ""));
        }
        let spans = dir.join("spans.jsonl");
        std::fs::write(&spans, lines.join("\n") + "\n").unwrap();
        SpanCapture {
            cpu: dir.join("cpu.pb.gz"),
            spans,
            requests,
        }
    })
}

fn import(data: &Path, args: &[&str]) {
    let mut all = vec!["import", "--data", data.to_str().unwrap()];
    all.extend_from_slice(args);
    spanprof(&all).assert_no_panic().assert_success();
}

/// `spanprof flame --data DIR ARGS` as stack → value (exit 0, or 1 when nothing matched).
fn flame(data: &Path, args: &[&str]) -> BTreeMap<String, i64> {
    let mut all = vec!["flame", "--data", data.to_str().unwrap(), "--type", "cpu"];
    all.extend_from_slice(args);
    let run = spanprof(&all);
    run.assert_no_panic();
    let stacks: BTreeMap<String, i64> = run
        .stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), v.parse().unwrap())
        })
        .collect();
    let nothing = i32::from(stacks.is_empty());
    assert_eq!(run.code(), Some(nothing), "{run}");
    if stacks.is_empty() {
        assert!(run.stderr.contains("no samples matched"), "{run}");
    }
    stacks
}

/// `go tool pprof -tagfocus=KEY=^ID$` of the original, as stack → cpu value.
fn pprof_focus(cpu: &Path, key: &str, id: &str) -> BTreeMap<String, i64> {
    let raw = pprof_raw(cpu, &[&format!("-tagfocus={key}=^{id}$")]);
    let col = raw
        .sample_types
        .iter()
        .position(|t| t == "cpu/nanoseconds")
        .unwrap();
    let mut out = BTreeMap::new();
    for s in &raw.samples {
        *out.entry(s.functions_root_first().join(";")).or_default() += s.values[col];
    }
    out.retain(|_, v| *v != 0);
    out
}

fn add(a: &BTreeMap<String, i64>, b: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let mut out = a.clone();
    for (k, v) in b {
        *out.entry(k.clone()).or_default() += v;
    }
    out
}

fn total(m: &BTreeMap<String, i64>) -> i64 {
    m.values().sum()
}

/// The heavy requests with the most CPU in the profile, so the comparison is not vacuous.
fn busiest_heavy(cap: &SpanCapture, n: usize) -> Vec<&(String, String, Option<String>, String)> {
    let mut heavy: Vec<_> = cap
        .requests
        .iter()
        .filter(|r| r.3 == "/cpu-heavy")
        .collect();
    heavy.sort_by_key(|r| -total(&pprof_focus(&cap.cpu, "otel.profile.span_id", &r.1)));
    heavy.truncate(n);
    heavy
}

#[test]
fn span_trace_and_child_flame_graphs_match_go_tool_pprof() {
    let cap = capture();
    let data = process_dir("store-e2e").join("data");
    import(
        &data,
        &[
            "--spans",
            cap.spans.to_str().unwrap(),
            cap.cpu.to_str().unwrap(),
            "--service-name",
            "goapp",
        ],
    );
    let (mut checked, mut counting) = (0, false);
    for (trace, span, child, _) in busiest_heavy(cap, 3) {
        let child = child.as_ref().expect("/cpu-heavy has a child span");
        let own = pprof_focus(&cap.cpu, "otel.profile.span_id", span);
        let of_child = pprof_focus(&cap.cpu, "otel.profile.span_id", child);
        assert!(
            total(&own) > 0,
            "span {span} has no CPU samples; the capture is too light"
        );
        assert_eq!(flame(&data, &["--span-id", span]), own, "span {span} alone");
        assert_eq!(
            flame(&data, &["--span-id", child]),
            of_child,
            "child span {child}"
        );
        let rolled_up = add(&own, &of_child);
        assert_eq!(
            flame(&data, &["--span-id", span, "--include-child-spans"]),
            rolled_up,
            "span {span} with its child"
        );
        assert_eq!(
            flame(&data, &["--trace-id", trace]),
            rolled_up,
            "trace {trace}"
        );
        // On a loaded machine one span's few samples can all fall outside the loop; across
        // the three busiest, the heavy work shows.
        counting |= flame(&data, &["--span-id", span, "--include-child-spans"])
            .keys()
            .any(|k| k.ends_with("main.countPrimes"));
        checked += 1;
    }
    assert_eq!(checked, 3);
    assert!(
        counting,
        "no heavy span's flame graph holds main.countPrimes"
    );

    // Label matchers and service selection narrow series.
    let heavy = flame(
        &data,
        &[
            "--query",
            "{otel.profile.span_name=\"GET /cpu-heavy\"}",
            "--service",
            "goapp",
        ],
    );
    // A sample taken in the scheduler (`runtime.mcall` alone) carries the labels of the
    // goroutine it switches from: runtime-only stacks may come with them.
    let runtime_only = |k: &str| k.split(';').all(|f| f.starts_with("runtime."));
    assert!(
        heavy
            .keys()
            .all(|k| k.contains("cpuHeavy") || runtime_only(k)),
        "only /cpu-heavy stacks: {:?}",
        heavy
            .keys()
            .find(|k| !k.contains("cpuHeavy") && !runtime_only(k))
    );
    assert!(heavy.keys().any(|k| k.contains("cpuHeavy")));
    assert!(!heavy.is_empty());
    // A service the store does not hold is named, with those it does.
    let run = spanprof([
        "flame",
        "--data",
        data.to_str().unwrap(),
        "--service",
        "other",
    ]);
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(
        run.stderr
            .contains("has no profiles of service \"other\"; it has: goapp"),
        "{run}"
    );
    // A time range after the profile holds nothing; one around it holds everything.
    assert!(
        flame(&data, &["--from", "now-1h", "--to", "now"])
            .values()
            .sum::<i64>()
            > 0
    );
    assert!(flame(&data, &["--to", "2000-01-01T00:00:00Z"]).is_empty());
}

/// Samples labelled with a span id but no trace id (here: the custom keys, with only the span
/// key named) get their trace from the stored span, whichever arrives first.
#[test]
fn span_only_samples_bind_to_their_trace_in_both_arrival_orders() {
    let cap = capture();
    let custom: Vec<_> = cap
        .requests
        .iter()
        .filter(|r| r.3.ends_with("keys=custom"))
        .collect();
    let with_samples: Vec<_> = custom
        .iter()
        .filter(|r| total(&pprof_focus(&cap.cpu, "custom.span_id", &r.1)) > 0)
        .collect();
    assert!(
        !with_samples.is_empty(),
        "no custom-key request got CPU samples"
    );
    let link_args = ["--span-id-key", "custom.span_id"];
    for spans_first in [true, false] {
        let data = process_dir(if spans_first {
            "store-late-a"
        } else {
            "store-late-b"
        })
        .join("data");
        let profile = [&[cap.cpu.to_str().unwrap()][..], &link_args[..]].concat();
        let spans = ["--spans", cap.spans.to_str().unwrap()];
        if spans_first {
            import(&data, &spans);
            import(&data, &profile);
        } else {
            import(&data, &profile);
            // Before the spans arrive the trace is unknown: selecting by trace finds nothing.
            assert!(flame(&data, &["--trace-id", &with_samples[0].0]).is_empty());
            import(&data, &spans);
        }
        for (trace, span, _, _) in with_samples.iter().take(3).copied() {
            let want = pprof_focus(&cap.cpu, "custom.span_id", span);
            assert_eq!(
                flame(&data, &["--trace-id", trace]),
                want,
                "trace {trace}, spans first: {spans_first}"
            );
        }
    }
}

/// Importing a file again stores its samples again (the store cannot tell a file imported
/// twice from two profiles taken at once), and says so: the second import warns, the first
/// does not.
#[test]
fn importing_a_file_again_warns_that_it_counts_twice() {
    let cpu = support::go_cpu_pprof();
    let data = process_dir("store-import-twice").join("data");
    let args = [
        "import",
        "--data",
        data.to_str().unwrap(),
        "--service-name",
        "goapp",
        cpu.to_str().unwrap(),
    ];
    let first = spanprof(args);
    first.assert_no_panic().assert_success();
    assert!(!first.stderr.contains("warning"), "{first}");
    let second = spanprof(args);
    second.assert_no_panic().assert_success();
    assert!(
        second
            .stderr
            .contains("already holds profiles of goapp taken when these were"),
        "{second}"
    );
}

/// A time range with none of the store's profiles in it: `flame` says when the profiles it
/// has were taken (here a profile captured long ago, asked for over the last minute).
#[test]
fn flame_of_an_empty_time_range_says_when_the_profiles_were_taken() {
    let cpu = support::go_cpu_pprof();
    let data = process_dir("store-flame-range").join("data");
    let d = data.to_str().unwrap();
    spanprof([
        "import",
        "--data",
        d,
        "--service-name",
        "goapp",
        cpu.to_str().unwrap(),
    ])
    .assert_no_panic()
    .assert_success();
    let run = spanprof([
        "flame",
        "--data",
        d,
        "--service",
        "goapp",
        "--from",
        "now-1m",
    ]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(
        run.stderr
            .contains("the store's profiles of goapp were taken from 20"),
        "{run}"
    );
}
