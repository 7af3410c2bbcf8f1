//! The remote query backend over a real topology, as issue 46 words its first proof: three
//! stateless collectors (`storage.enabled: false`) — two scraping the Go test program's
//! replicas split by `replicas: 2` / `replica: I` and receiving their spans, one receiving
//! the Python SDK (`pyroscope-io` pushes, OpenTelemetry spans) — forward profiles to a spanprof
//! that plays Pyroscope (sent only its OTLP profiles, asked only its `querier.v1`) and spans
//! to one that plays Tempo (sent only OTLP traces, asked only its Tempo API); a fourth exporter
//! on each collector feeds an embedded spanprof the same data. The remote frontend's answers
//! (span, span with children, trace, trace view, slow vs fast, pprof) equal the embedded one's.
//!
//! Grafana Pyroscope and Tempo cannot run here (no network, no containers): spanprof plays
//! them, reached only through the endpoints they also serve.

use spanprof_testkit as support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use spanprof_server::config::ScrapeTarget;
use spanprof_server::replicas::Replicas;
use support::http::{get, get_json as json};
use support::serve::{free_port, Server};
use support::{poll, process_dir, GoApp};

fn answer(addr: &str, path: &str) -> (u16, Vec<u8>) {
    let r = get(addr, path, Duration::from_secs(30)).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (r.status, r.body)
}

/// A collector's config: no store, the scrape list (its share by `replica`), and the three
/// exporters: profiles to Pyroscope, traces to Tempo, both to the embedded spanprof.
fn collector_config(scrape: &[String], replica: usize, peers: [&str; 3]) -> String {
    let [pyroscope, tempo, embedded] = peers;
    let mut c = String::from("storage:\n  enabled: false\nreceivers:\n");
    if !scrape.is_empty() {
        c.push_str("  scrape:\n");
        for url in scrape {
            c.push_str(&format!(
                "    - service: goapp\n      url: {url}\n      profiles: [cpu]\n      interval: 2s\n"
            ));
        }
        c.push_str(&format!("  replicas: 2\n  replica: {replica}\n"));
    }
    c.push_str("exporters:\n");
    for (name, url, signals) in [
        ("pyroscope", pyroscope, "[profiles]"),
        ("tempo", tempo, "[traces]"),
        ("embedded", embedded, "[profiles, traces]"),
    ] {
        c.push_str(&format!(
            "  - name: {name}\n    protocol: http\n    endpoint: http://{url}\n    \
             signals: {signals}\n    batch_age: 50ms\n    retry_max: 500ms\n"
        ));
    }
    c
}

fn start_with_config(dir: &Path, name: &str, yaml: &str, addr: &str) -> Server {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml).unwrap();
    Server::start(
        &dir.join(name),
        addr,
        &["--config", config.to_str().unwrap()],
    )
}

/// The parts of a flame graph answer both backends know.
fn comparable(v: &Value) -> Value {
    serde_json::json!({
        "flamegraph": v["flamegraph"], "tree": v["tree"],
        "profile_type": v["summary"]["profile_type"],
        "value_selected": v["summary"]["value_selected"],
    })
}

/// A pprof answer as its (function names, value) stacks, each stack once with its total: how
/// the samples of one stack are split into rows (by the profiles they came in, which batching
/// on the way decides) is no difference between two answers (a CI run's embedded export had
/// 6 rows of one Python stack where the remote's had 4, with the same total).
fn pprof_stacks(body: &[u8]) -> Result<Vec<(Vec<String>, i64)>, String> {
    let p = spanprof_format::pprof::decode(body, 64 << 20).map_err(|e| e.to_string())?;
    let mut stacks = std::collections::BTreeMap::<Vec<String>, i64>::new();
    for sample in &p.sample {
        let names = sample
            .location_id
            .iter()
            .filter_map(|id| p.location.iter().find(|l| l.id == *id))
            .flat_map(|l| &l.line)
            .map(|l| {
                p.function
                    .iter()
                    .find(|f| f.id == l.function_id)
                    .and_then(|f| p.str(f.name))
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        *stacks.entry(names).or_default() += sample.value[0];
    }
    Ok(stacks.into_iter().collect())
}

/// The span fields both backends know, by span id.
fn trace_view(v: &Value) -> Value {
    let mut spans: Vec<Value> = v["spans"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    serde_json::json!({
                        "span_id": s["span_id"], "parent": s["parent_span_id"],
                        "name": s["name"], "service": s["service"],
                        "start_ns": s["start_ns"], "duration_ns": s["duration_ns"],
                        "total": s["total"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    spans.sort_by_key(|s| s["span_id"].to_string());
    serde_json::json!({ "total": v["total"], "spans": spans })
}

/// A span list's (or chart's) spans as both backends know them, in the answer's order:
/// ids, duration, own CPU, and whether the span was sampled (the coverage colouring).
fn span_list(v: &Value) -> Value {
    let spans: Vec<Value> = match v["spans"].as_array() {
        Some(spans) => spans
            .iter()
            .map(|s| {
                serde_json::json!([
                    s["span_id"],
                    s["trace_id"],
                    s["duration_ns"],
                    s["total"],
                    s["coverage"] == "sampled"
                ])
            })
            .collect(),
        None => (0..v["span_id"].as_array().map_or(0, Vec::len))
            .map(|i| {
                serde_json::json!([
                    v["span_id"][i],
                    v["trace_id"][i],
                    v["duration_ns"][i],
                    v["cpu"][i],
                    v["names"][v["name"][i].as_u64().unwrap_or(0) as usize]
                ])
            })
            .collect(),
    };
    serde_json::json!({ "count": v["count"], "more": v["more"], "spans": spans })
}

/// Every query's answer from the frontend equals the embedded one's (and has samples).
fn all_equal(front: &str, embedded: &str, queries: &[String]) -> Result<(), String> {
    for q in queries {
        let (fs, fb) = answer(front, q);
        let (es, eb) = answer(embedded, q);
        if fs != 200 || es != 200 {
            return Err(format!(
                "{q}: frontend {fs} {}, embedded {es} {}",
                String::from_utf8_lossy(&fb),
                String::from_utf8_lossy(&eb)
            ));
        }
        let (f, e) = if q.starts_with("/api/v1/pprof") {
            let e = pprof_stacks(&eb)?;
            if e.is_empty() {
                return Err(format!("{q}: no samples embedded yet"));
            }
            (serde_json::json!(pprof_stacks(&fb)?), serde_json::json!(e))
        } else {
            let (f, e): (Value, Value) = (
                serde_json::from_slice(&fb).map_err(|x| x.to_string())?,
                serde_json::from_slice(&eb).map_err(|x| x.to_string())?,
            );
            if q.starts_with("/api/v1/timeseries?") {
                if e["series"][0]["points"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
                {
                    return Err(format!("{q}: no points embedded yet"));
                }
                let s = |v: &Value| {
                    serde_json::json!([
                        v["profile_type"],
                        v["step_ns"],
                        v["aggregation"],
                        v["series"]
                    ])
                };
                (s(&f), s(&e))
            } else if q.contains("group=trace") {
                if e["count"].as_u64().unwrap_or(0) == 0 {
                    return Err(format!("{q}: no traces embedded yet"));
                }
                let g = |v: &Value| serde_json::json!([v["count"], v["more"], v["traces"]]);
                (g(&f), g(&e))
            } else if q.starts_with("/api/v1/spans?") || q.starts_with("/api/v1/span-points?") {
                if e["count"].as_u64().unwrap_or(0) == 0 {
                    return Err(format!("{q}: no spans embedded yet"));
                }
                (span_list(&f), span_list(&e))
            } else if q.starts_with("/api/v1/span-names?") {
                if e["names"].as_array().is_none_or(Vec::is_empty) {
                    return Err(format!("{q}: no span names embedded yet"));
                }
                (f["names"].clone(), e["names"].clone())
            } else if q.starts_with("/api/v1/traces/") {
                if e["total"].as_u64().unwrap_or(0) == 0 {
                    return Err(format!("{q}: no samples embedded yet"));
                }
                (trace_view(&f), trace_view(&e))
            } else if q.starts_with("/api/v1/diff") {
                if e["flamegraph"]["total"].as_u64().unwrap_or(0) == 0 {
                    return Err(format!("{q}: no samples embedded yet"));
                }
                let d = |v: &Value| {
                    serde_json::json!([
                        v["flamegraph"],
                        v["tree"],
                        v["right"]["value_selected"],
                        v["left"]["value_selected"]
                    ])
                };
                (d(&f), d(&e))
            } else {
                if e["summary"]["value_selected"].as_u64().unwrap_or(0) == 0 {
                    return Err(format!("{q}: no samples embedded yet"));
                }
                (comparable(&f), comparable(&e))
            }
        };
        if f != e {
            return Err(format!("{q}:\nfrontend {f}\nembedded {e}"));
        }
    }
    Ok(())
}

#[test]
fn collectors_forward_to_pyroscope_and_tempo_and_the_frontend_answers_as_embedded() {
    let python = support::python();
    let dir = process_dir("remote-topology");
    let (pyroscope, tempo, embedded) = (
        Server::start(&dir.join("pyroscope"), "127.0.0.1:0", &[]),
        Server::start(&dir.join("tempo"), "127.0.0.1:0", &[]),
        Server::start(&dir.join("embedded"), "127.0.0.1:0", &[]),
    );
    let peers = [
        pyroscope.addr.as_str(),
        tempo.addr.as_str(),
        embedded.addr.as_str(),
    ];

    // Two Go replicas on ports chosen so that each collector owns one (rendezvous hashing of
    // service and url, as every collector computes it from the same list); each app sends
    // its spans to the collector that scrapes it.
    let owner =
        |addr: &str| Replicas::owner(2, &ScrapeTarget::new("goapp", format!("http://{addr}")));
    let first = format!("127.0.0.1:{}", free_port());
    let second = poll(
        "a port owned by the other replica",
        Duration::from_secs(10),
        || {
            let a = format!("127.0.0.1:{}", free_port());
            (owner(&a) != owner(&first))
                .then_some(a)
                .ok_or_else(|| "same owner".into())
        },
    );
    let scrape = [format!("http://{first}"), format!("http://{second}")];
    let collector_addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let collectors: Vec<Server> = (0..3)
        .map(|i| {
            let list: &[String] = if i < 2 { &scrape } else { &[] };
            start_with_config(
                &dir,
                &format!("collector{i}"),
                &collector_config(list, i, peers),
                &collector_addrs[i],
            )
        })
        .collect();
    let apps: Vec<GoApp> = [&first, &second]
        .iter()
        .map(|a| {
            let to = &collector_addrs[owner(a) as usize];
            GoApp::start(&["-addr", a, "-otlp", &format!("http://{to}")])
        })
        .collect();

    // The Python SDK against the third collector, while the Go apps serve requests.
    let script = support::workspace_root()
        .join("crates/spanprof-server/tests/pyroscope_python/span_profile.py");
    let py_collector = format!("http://{}", collector_addrs[2]);
    let py = std::thread::spawn(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(py_collector)
            .env("SPANPROF_APP", "pyapp")
            .output()
            .expect("running python")
    });
    let go_requests: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
        let handles: Vec<_> = apps
            .iter()
            .map(|app| {
                s.spawn(move || {
                    let mut ids = Vec::new();
                    let until = Instant::now() + Duration::from_secs(5);
                    while Instant::now() < until {
                        let r = app.get("/cpu-heavy");
                        ids.push((
                            r.header("X-Trace-Id").unwrap().to_string(),
                            r.header("X-Span-Id").unwrap().to_string(),
                        ));
                    }
                    ids
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let out = py.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "span_profile.py failed (pyroscope-io, pyroscope-otel, opentelemetry-sdk from \
         python/requirements.txt: run .ci/setup):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py_ids: Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap();

    // Both Go collectors scraped a CPU window that began after the load ended, and every
    // queue has drained: all the data is downstream.
    let cpu_scrapes = |c: &Server, app: &str| {
        c.metric(&format!(
            "spanprof_scrapes_total{{target=\"goapp\",instance=\"{app}\",profile=\"cpu\"}}"
        ))
    };
    let at_end: Vec<f64> = [&first, &second]
        .iter()
        .map(|a| cpu_scrapes(&collectors[owner(a) as usize], a))
        .collect();
    poll(
        "the windows after the load scraped, every queue drained",
        Duration::from_secs(30),
        || {
            for (a, n) in [&first, &second].iter().zip(&at_end) {
                let now = cpu_scrapes(&collectors[owner(a) as usize], a);
                if now < n + 2.0 {
                    return Err(format!("{a}: {now} CPU scrapes, waiting for {}", n + 2.0));
                }
            }
            for (i, c) in collectors.iter().enumerate() {
                for f in ["pyroscope", "tempo", "embedded"] {
                    let q = c.metric(&format!(
                        "spanprof_forward_queued_records{{forwarder=\"{f}\"}}"
                    ));
                    if q > 0.0 {
                        return Err(format!("collector {i}: {q} records queued for {f}"));
                    }
                }
            }
            Ok(())
        },
    );
    // The Pyroscope peer got no spans and the Tempo peer no profiles: each plays one part.
    assert_eq!(pyroscope.metric("spanprof_stored_spans_total"), 0.0);
    assert!(tempo.metric("spanprof_stored_spans_total") > 0.0);

    let front_addr = format!("127.0.0.1:{}", free_port());
    let _front = start_with_config(
        &dir,
        "frontend",
        &format!(
            "storage:\n  backend: remote\n  remote:\n    pyroscope:\n      url: http://{}\n    \
             tempo:\n      url: http://{}\n",
            pyroscope.addr, tempo.addr
        ),
        &front_addr,
    );

    // The Go span with the most CPU (the embedded store's word), and the Python root span.
    let (go_trace, go_span) = go_requests
        .iter()
        .flatten()
        .max_by_key(|(_, s)| {
            json(&embedded.addr, &format!("/api/v1/flamegraph?span_id={s}"))["summary"]
                ["value_selected"]
                .as_u64()
                .unwrap_or(0)
        })
        .expect("Go requests")
        .clone();
    let (py_trace, py_span) = (
        py_ids["trace_id"].as_str().unwrap(),
        py_ids["span_id"].as_str().unwrap(),
    );
    let mut queries = Vec::new();
    for (trace, span) in [(go_trace.as_str(), go_span.as_str()), (py_trace, py_span)] {
        queries.extend([
            format!("/api/v1/flamegraph?span_id={span}"),
            format!("/api/v1/flamegraph?span_id={span}&include_child_spans=true"),
            format!("/api/v1/flamegraph?trace_id={trace}"),
            format!("/api/v1/pprof?span_id={span}"),
            format!("/api/v1/pprof?trace_id={trace}"),
            format!("/api/v1/traces/{trace}"),
            // Each step's span_selector (trace_id_selector) total, at a profile's time.
            format!("/api/v1/timeseries?span_id={span}&step=1s"),
            format!("/api/v1/timeseries?trace_id={trace}&step=1s"),
        ]);
    }
    queries.extend([
        "/api/v1/diff?service=goapp&span_name=GET%20%2Fcpu-heavy&baseline=fast".to_owned(),
        "/api/v1/diff?span_name=GET%20%2Fcpu-heavy&left.below_percentile=50&right.above_percentile=90"
            .to_owned(),
    ]);
    // Span lists: by CPU (costly spans), by duration with filters TraceQL says, a chart's
    // points, and names as typed.
    queries.extend([
        "/api/v1/spans?service=goapp&sort=cpu&limit=15".to_owned(),
        "/api/v1/spans?span_name=GET%20%2Fcpu-heavy&min_duration=1ms&kind=server&limit=10"
            .to_owned(),
        "/api/v1/spans?name=CPU&name_match=contains&sort=cpu&order=asc&limit=10".to_owned(),
        "/api/v1/spans?service=pyapp&sort=cpu&limit=5".to_owned(),
        "/api/v1/span-points?service=goapp".to_owned(),
        "/api/v1/span-names?q=cpu".to_owned(),
    ]);
    // Series (SelectSeries, span exemplars) and traces grouped by root, across services.
    queries.extend([
        "/api/v1/timeseries?service=goapp&step=5s&exemplars=2".to_owned(),
        "/api/v1/timeseries?step=5s&group_by=service_name".to_owned(),
        "/api/v1/spans?group=trace&sort=cpu&limit=20".to_owned(),
        "/api/v1/spans?group=trace&service=pyapp&sort=duration".to_owned(),
    ]);
    // The downstreams store what they were sent as it is acknowledged: a short wait at most
    // (the 26 queries take a few seconds a round on a loaded machine; 20 s ran out once).
    poll(
        "the frontend's answers equal the embedded ones",
        Duration::from_secs(60),
        || all_equal(&front_addr, &embedded.addr, &queries),
    );
    // The child roll-up adds the child span's samples (the Go request's sortWork child).
    let own = json(
        &front_addr,
        &format!("/api/v1/flamegraph?span_id={go_span}"),
    );
    let rolled = json(
        &front_addr,
        &format!("/api/v1/flamegraph?span_id={go_span}&include_child_spans=true"),
    );
    assert!(
        rolled["summary"]["value_selected"].as_u64() >= own["summary"]["value_selected"].as_u64(),
        "{rolled}"
    );

    // `spanprof flame --config` with the frontend's config reads the same remote pair: its
    // stacks are those of the embedded spanprof's pprof export of the span, read by flame.
    let exported = dir.join("embedded-span.pb.gz");
    let (status, body) = answer(
        &embedded.addr,
        &format!("/api/v1/pprof?span_id={go_span}&include_child_spans=true"),
    );
    assert_eq!(status, 200);
    std::fs::write(&exported, body).unwrap();
    let config = dir.join("frontend.yaml");
    let from_remote = support::spanprof([
        "flame",
        "--config",
        config.to_str().unwrap(),
        "--span-id",
        &go_span,
        "--trace-id",
        &go_trace,
        "--include-child-spans",
    ]);
    let from_file = support::spanprof(["flame", exported.to_str().unwrap()]);
    assert!(from_file.status.success(), "{}", from_file.stderr);
    assert!(from_remote.status.success(), "{}", from_remote.stderr);
    let sorted = |s: &str| {
        let mut lines: Vec<String> = s.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert!(!from_file.stdout.is_empty());
    assert_eq!(sorted(&from_remote.stdout), sorted(&from_file.stdout));
    // A config whose backend is not remote is refused, naming the file (exit 2).
    let plain = dir.join("plain.yaml");
    std::fs::write(&plain, "storage:\n  enabled: true\n").unwrap();
    let refused = support::spanprof(["flame", "--config", plain.to_str().unwrap()]);
    assert_eq!(refused.code(), Some(2), "{}", refused.stderr);
    assert!(refused.stderr.contains("not remote"), "{}", refused.stderr);
}
