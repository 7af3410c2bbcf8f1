//! The Go path, end to end with real processes: a Go service (stdlib only) runs `/cpu-heavy`
//! under `pprof.Do` with `otel.profile.*` labels and sends its spans to spanprof over OTLP/HTTP
//! JSON; `spanprof serve` scrapes it with back-to-back CPU windows. Then a slow span's flame
//! graph holds `main.countPrimes`, `go tool pprof` reads that span's profile straight from
//! `/api/v1/pprof`, and the span's trace is there with its sample total.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::http::get;
use support::{go_tool_pprof, process_dir, spanprof_bin, GoApp};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn json(addr: &str, path: &str) -> Value {
    let r = get(addr, path, Duration::from_secs(30)).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("GET {path}: {e}: {}", String::from_utf8_lossy(&r.body)))
}

#[test]
fn a_slow_go_span_opens_as_its_flame_graph() {
    let dir = process_dir("serve-go");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let app = GoApp::start(&["-otlp", &format!("http://{addr}")]);
    let server = Command::new(spanprof_bin())
        .args([
            "serve",
            "--data",
            dir.join("data").to_str().unwrap(),
            "--http-addr",
            &addr,
            "--otlp-http-addr",
            "off",
            "--otlp-grpc-addr",
            "off",
        ])
        .args([
            "--scrape",
            &format!("goapp=http://{}", app.addr()),
            "--scrape-profiles",
            "cpu",
            "--scrape-interval",
            "2s",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(server);
    let mut stderr = BufReader::new(server.0.stderr.take().unwrap());
    let mut log = String::new();
    while !log.contains("spanprof serving on") {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "spanprof serve exited:\n{log}"
        );
        log.push_str(&line);
    }
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });

    // Requests across a few CPU windows.
    let mut requests = Vec::new();
    let until = Instant::now() + Duration::from_secs(7);
    while Instant::now() < until {
        let r = app.get("/cpu-heavy");
        requests.push((
            r.header("X-Trace-Id").unwrap().to_string(),
            r.header("X-Span-Id").unwrap().to_string(),
        ));
    }
    // Wait (with a deadline) until the windows holding them are stored, then take the span
    // with the most CPU.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (trace, span, flame) = loop {
        let best = requests
            .iter()
            .map(|(t, s)| {
                (
                    t,
                    s,
                    json(
                        &addr,
                        &format!("/api/v1/flamegraph?service=goapp&span_id={s}"),
                    ),
                )
            })
            .max_by_key(|(_, _, f)| f["flamegraph"]["total"].as_i64().unwrap_or(0));
        if let Some((t, s, f)) = best {
            if f["flamegraph"]["total"].as_i64().unwrap_or(0) > 0 {
                break (t.clone(), s.clone(), f);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no span got samples within 60 s; server log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let names: Vec<&str> = flame["flamegraph"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"main.countPrimes"),
        "span {span}'s flame graph: {names:?}"
    );

    // go tool pprof reads the span's profile from the API.
    let url = format!("http://{addr}/api/v1/pprof?service=goapp&span_id={span}");
    let top = go_tool_pprof(["-top", url.as_str()]);
    assert!(
        top.contains("main.countPrimes"),
        "go tool pprof -top {url}:\n{top}"
    );

    // The trace: the span and its child, the span with its sample total.
    let trace_view = json(&addr, &format!("/api/v1/traces/{trace}"));
    let spans = trace_view["spans"]
        .as_array()
        .unwrap_or_else(|| panic!("{trace_view}"));
    let own = spans
        .iter()
        .find(|s| s["span_id"] == span.as_str())
        .unwrap_or_else(|| panic!("span {span} not in {trace_view}"));
    assert!(
        own["total"].as_i64().unwrap() > 0 && own["has_samples"] == true,
        "{own}"
    );
    assert!(
        spans.iter().any(|s| s["parent_span_id"] == span.as_str()),
        "the child span of {span}: {trace_view}"
    );

    // SIGTERM: drained and stopped.
    assert!(Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let exit = server.0.wait().unwrap();
    let rest = drain.join().unwrap();
    assert!(
        exit.success() && rest.contains("stopped"),
        "{exit:?}\n{rest}"
    );
}
