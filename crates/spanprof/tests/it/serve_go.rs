//! The Go path, end to end with real processes: a Go service (stdlib only) runs `/cpu-heavy`
//! under `pprof.Do` with `otel.profile.*` labels and sends its spans to spanprof over OTLP/HTTP
//! JSON; `spanprof serve` scrapes it with back-to-back CPU windows. Then a slow span's flame
//! graph holds `main.countPrimes`, `go tool pprof` reads that span's profile straight from
//! `/api/v1/pprof`, and the span's trace is there with its sample total.

use spanprof_testkit as support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::http::get;
use support::serve::{free_port, Server};
use support::{go_tool_pprof, poll, process_dir, GoApp};

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
    let data = dir.join("data");
    let scrape = format!("goapp=http://{}", app.addr());
    let server = Server::start(
        &data,
        &addr,
        &[
            "--scrape",
            &scrape,
            "--scrape-profiles",
            "cpu",
            "--scrape-interval",
            "2s",
        ],
    );

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
    let (trace, span, flame) = poll(
        "samples in a /cpu-heavy span",
        Duration::from_secs(60),
        || {
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
            match best {
                Some((t, s, f)) if f["flamegraph"]["total"].as_i64().unwrap_or(0) > 0 => {
                    Ok((t.clone(), s.clone(), f))
                }
                _ => Err(format!("none of {} spans has samples yet", requests.len())),
            }
        },
    );
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
    // Which process ran it: the resource the app sent with its spans.
    assert_eq!(own["resource"]["telemetry.sdk.language"], "go", "{own}");
    assert_eq!(
        own["resource"]["process.pid"],
        app.pid().to_string(),
        "{own}"
    );
    assert!(
        spans.iter().any(|s| s["parent_span_id"] == span.as_str()),
        "the child span of {span}: {trace_view}"
    );

    // SIGTERM: drained and stopped.
    server.stop();
}

/// One process per data directory: a second `serve`, or `flame --data`, on the directory a
/// running server holds is refused with a message that says so (and writes nothing); once the
/// server stops, the directory opens.
#[test]
fn a_data_directory_in_use_is_refused_with_a_clear_error() {
    let data = process_dir("locked").join("data");
    // On every interface, as Go writes it: the URL it prints is one a browser opens.
    let server = Server::start(&data, ":0", &["--allow-unauthenticated"]);
    assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
    let health = get(&server.addr, "/health", Duration::from_secs(10)).unwrap();
    assert_eq!(health.status, 200);
    let data_arg = data.to_str().unwrap();
    for args in [
        second_server(data_arg, &[]),
        vec!["flame", "--data", data_arg, "--type", "cpu"],
    ] {
        let run = support::spanprof(args);
        run.assert_no_panic();
        assert!(!run.status.success(), "{run}");
        assert!(
            run.stderr.contains("in use by another spanprof process")
                && run.stderr.contains(data_arg),
            "{run}"
        );
        // Said once: an error that prints its cause is not followed by the cause again.
        assert_eq!(
            run.stderr
                .matches("in use by another spanprof process")
                .count(),
            1,
            "{run}"
        );
    }
    server.stop();
    // Free again: the (empty) store opens, and nothing in it matches.
    let run = support::spanprof(["flame", "--data", data_arg, "--type", "cpu"]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(run.stderr.contains("no samples matched"), "{run}");
}

/// `--log-format json` (or `server.log_format: json` in the config file): every line the server
/// writes to stderr is one JSON object (timestamp, level, target, message, and the event's
/// fields beside them), from start-up through a refused request to shutdown; a second server
/// refused at start-up says why in one too.
#[test]
fn json_logs_are_one_object_a_line() {
    let data = process_dir("json-logs").join("data");
    let server = Server::start(&data, "127.0.0.1:0", &["--log-format", "json"]);
    let refused = server.send(
        "/v1development/profiles",
        &[("Content-Type", "application/x-protobuf")],
        b"\xff\xff not a protobuf message",
    );
    assert_eq!(refused.status, 400);
    let data_arg = data.to_str().unwrap();
    // The second one takes the format from its configuration file.
    let config = data.with_file_name("spanprof.yaml");
    std::fs::write(&config, "server:\n  log_format: json\n").unwrap();
    let second = support::spanprof(second_server(
        data_arg,
        &["--config", config.to_str().unwrap()],
    ));
    second.assert_no_panic();
    assert!(!second.status.success(), "{second}");
    let second_events = json_lines(&second.stderr);
    let last = second_events.last().expect("the refused server logged");
    assert_eq!(last["level"], "ERROR", "{second}");
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("in use by another spanprof process") && message.contains(data_arg),
        "{second}"
    );
    let events = json_lines(&server.stop());
    let find = |message: &str| {
        events
            .iter()
            .find(|e| e["message"].as_str().unwrap().starts_with(message))
            .unwrap_or_else(|| panic!("no event {message:?} in {events:#?}"))
    };
    let listening = find("listening: UI, API");
    assert_eq!(listening["addr"], server_addr(&events));
    assert_eq!(listening["target"], "spanprof_server");
    let store = find("store opened");
    assert_eq!(store["dir"], data_arg);
    assert!(store["samples"].is_u64(), "{store}");
    // The refusal, with its fields as fields (a collector can count by receiver and reason).
    let refusal = find("request refused");
    assert_eq!(refusal["level"], "WARN");
    assert_eq!(refusal["receiver"], "otlp_profiles");
    assert_eq!(refusal["status"], 400);
    // Who sent it.
    assert!(
        refusal["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{refusal}"
    );
    find("stopped");
}

/// `--config` read from a pipe (`--config <(…)`, `/dev/stdin`) is read once: read a second
/// time it was empty, so its settings (and its mistakes) were dropped and the server ran on
/// the defaults.
#[test]
fn a_config_file_from_a_pipe_is_read_once() {
    use std::io::Write;
    let data = process_dir("config-pipe").join("data");
    let args = second_server(data.to_str().unwrap(), &["--config", "/dev/stdin"]);
    let (config, mut writer) = std::io::pipe().unwrap();
    writer.write_all(b"storage:\n  retention: 5x\n").unwrap();
    drop(writer);
    let mut cmd = std::process::Command::new(support::spanprof_bin());
    cmd.args(&args);
    // The mistake stops the start at once; on the defaults, the server would run on (and
    // be killed at the timeout, failing the test).
    let run = support::run_with_stdin(cmd, Duration::from_secs(30), config.into());
    run.assert_no_panic();
    assert!(!run.status.success(), "{run}");
    assert!(
        run.stderr.contains("retention") && run.stderr.contains("5x"),
        "{run}"
    );
}

/// `--config-example` prints the example file with every key (which a unit test loads), and
/// nothing starts.
#[test]
fn config_example_prints_every_key() {
    let run = support::spanprof(["serve", "--config-example"]);
    run.assert_no_panic();
    assert!(run.status.success(), "{run}");
    let file = support::workspace_root().join("crates/spanprof-server/src/config_example.yaml");
    assert_eq!(run.stdout, std::fs::read_to_string(file).unwrap());
    assert!(run.stderr.is_empty(), "{run}");
}

/// A server whose stderr cannot be written (`2>/dev/full`, a closed pipe) serves on: the
/// logging library's report of a failed write panicked at the first log line (exit 101).
#[test]
fn an_unwritable_stderr_does_not_stop_the_server() {
    let data = process_dir("stderr-full").join("data");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = second_server(data.to_str().unwrap(), &[]);
    args[4] = &addr;
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = std::process::Command::new(support::spanprof_bin())
        .args(&args)
        .stderr(full)
        .spawn()
        .unwrap();
    let health = poll("the server to answer", Duration::from_secs(30), || {
        if let Some(status) = child.try_wait().unwrap() {
            return Ok(Err(format!("exited: {status}")));
        }
        get(&addr, "/health", Duration::from_secs(5))
            .map(|r| Ok(r.status))
            .map_err(|e| e.to_string())
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(health, Ok(200));
}

/// A port another process holds (an OpenTelemetry Collector on 4317, say): the error names
/// the listener and the flag that moves it, once.
#[test]
fn a_busy_port_names_the_listener_and_the_flag_that_moves_it() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();
    let data = process_dir("busy-port").join("data");
    let data_arg = data.to_str().unwrap();
    for (flag, what, off) in [
        ("--otlp-grpc-addr", "OTLP gRPC", true),
        ("--otlp-http-addr", "OTLP/HTTP", true),
        ("--http-addr", "the UI, API and ingest", false),
    ] {
        let mut args = vec!["serve", "--data", data_arg];
        for other in ["--otlp-grpc-addr", "--otlp-http-addr", "--http-addr"] {
            let addr = if other == flag {
                busy.as_str()
            } else if other == "--http-addr" {
                "127.0.0.1:0"
            } else {
                "off"
            };
            args.extend([other, addr]);
        }
        let run = support::spanprof(&args);
        run.assert_no_panic();
        assert_eq!(run.code(), Some(2), "{run}");
        let said = format!("cannot listen on {busy} for {what}: ");
        assert_eq!(run.stderr.matches(&said).count(), 1, "{run}");
        assert_eq!(run.stderr.matches("already in use").count(), 1, "{run}");
        assert!(
            run.stderr.contains(&format!(" with {flag} (server.")),
            "{run}"
        );
        assert_eq!(run.stderr.contains(", or off,"), off, "{run}");
        // Not on 4317 or 4318: no guess about who holds it.
        assert!(!run.stderr.contains("OpenTelemetry Collector"), "{run}");
        // Refused before the store: no data directory left behind.
        assert!(!data.exists(), "{} was made", data.display());
    }
    drop(held);
    // TLS settings for a plain http:// endpoint (they would go unused) are refused with the
    // rest of the configuration, before the store is made.
    let dir = process_dir("busy-port");
    let config = dir.join("tls-over-http.yaml");
    std::fs::write(
        &config,
        "exporters:\n  - name: b\n    protocol: grpc\n    endpoint: http://127.0.0.1:9\n    \
         tls:\n      ca_file: /etc/ssl/certs/ca-certificates.crt\n",
    )
    .unwrap();
    let run = support::spanprof([
        "serve",
        "--data",
        data_arg,
        "--config",
        config.to_str().unwrap(),
    ]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(
        run.stderr
            .contains("tls settings are for an https:// url; this one is http://"),
        "{run}"
    );
    assert!(!data.exists(), "{} was made", data.display());
    // Addresses as Go and people write them: `:PORT`, `localhost:PORT`; others are refused
    // saying what to give.
    let run = support::spanprof(["serve", "--http-addr", "4040"]);
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(
        run.stderr
            .contains("\"4040\" is not a listen address: give IP:PORT, e.g. 0.0.0.0:4040"),
        "{run}"
    );
}

/// Listeners stay on this machine unless asked otherwise: the defaults are loopback, an address
/// beyond it is refused (naming the flag that allows it) when no credentials are configured,
/// with --allow-unauthenticated it serves, warning of each such listener, and with credentials
/// it serves without the flag or the warning.
#[test]
fn listeners_beyond_loopback_need_allow_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let help = support::spanprof(["serve", "--help"]);
    assert!(help.stdout.contains("[default: 127.0.0.1:4040]"), "{help}");
    let open = format!("0.0.0.0:{}", free_port());
    let run = support::spanprof(["serve", "--data", data, "--http-addr", &open]);
    assert_eq!(run.code(), Some(2), "{run}");
    for words in [
        &format!("server.http_addr (--http-addr) {open} listens beyond this machine")[..],
        "no credentials are configured (auth.credentials)",
        "--allow-unauthenticated",
    ] {
        assert!(run.stderr.contains(words), "{words:?} in {run}");
    }
    let server = Server::start(
        dir.path(),
        &open,
        &["--allow-unauthenticated", "--otlp-grpc-addr", "127.0.0.1:0"],
    );
    let live = get(&server.addr, "/live", Duration::from_secs(10)).unwrap();
    assert_eq!(live.status, 200);
    let log = server.stop();
    assert!(
        log.contains("listening beyond this machine without authentication")
            && log.contains("server.http_addr"),
        "{log}"
    );
    assert!(!log.contains("server.otlp_grpc_addr"), "{log}");

    let config = dir.path().join("auth.yaml");
    let digest = "9f64a747e1b97f131fabb6b447296c9b6f0201e79fb3c5356e6c77e89b6a806a";
    std::fs::write(
        &config,
        format!(
            "auth:\n  credentials:\n    - {{name: ci, scopes: [read], token_sha256: {digest}}}\n"
        ),
    )
    .unwrap();
    let open = format!("0.0.0.0:{}", free_port());
    let server = Server::start(
        &dir.path().join("with-auth"),
        &open,
        &["--config", config.to_str().unwrap()],
    );
    let status = get(&server.addr, "/api/v1/services", Duration::from_secs(10))
        .unwrap()
        .status;
    assert_eq!(status, 401);
    let log = server.stop();
    assert!(!log.contains("without authentication"), "{log}");
    assert!(log.contains("authentication on"), "{log}");
}

/// The store is its owner's only: a new data directory is 0700 and what the server writes in
/// it 0600, an existing one open to others is made 0700 (and said so), and a config file
/// holding credentials that others can read is warned of.
#[test]
fn the_store_is_owner_only_and_a_readable_config_with_credentials_is_told() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("spanprof.yaml");
    std::fs::write(
        &config,
        "receivers:\n  scrape:\n    - service: s\n      url: http://127.0.0.1:9\n      \
         headers: {authorization: Bearer T}\n",
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let data = dir.path().join("data");
    let config_arg = config.to_str().unwrap();
    let server = Server::start(&data, "127.0.0.1:0", &["--config", config_arg]);
    let log = server.stop();
    assert!(
        log.contains("the config file holds credentials") && log.contains("chmod 600"),
        "{log}"
    );
    assert_eq!(mode(&data), 0o700);
    let mut files = 0;
    for entry in walk(&data) {
        let m = mode(&entry);
        if entry.is_dir() {
            assert_eq!(m, 0o700, "{}", entry.display());
        } else {
            files += 1;
            assert_eq!(m, 0o600, "{}", entry.display());
        }
    }
    assert!(files > 0, "the store wrote no file");

    // A directory left open to others (by hand, an older version) is closed.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start(&data, "127.0.0.1:0", &["--config", config_arg]);
    let log = server.stop();
    assert_eq!(mode(&data), 0o700);
    assert!(log.contains("made owner-only (700)"), "{log}");
    assert!(!log.contains("the config file holds credentials"), "{log}");
}

/// Every path under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// The arguments of a second `spanprof serve` on the directory `data` (on free ports).
fn second_server<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["serve", "--data", data, "--http-addr", "127.0.0.1:0"];
    args.extend(["--otlp-http-addr", "off", "--otlp-grpc-addr", "off"]);
    args.extend(extra);
    args
}

/// Each line of `stderr` as a JSON object with a timestamp, level, target and message.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{stderr}"));
            for key in ["timestamp", "level", "target", "message"] {
                assert!(event[key].is_string(), "no {key} in {line}");
            }
            let t = event["timestamp"].as_str().unwrap();
            assert!(
                t.len() > 20 && t.ends_with('Z') && t.contains('T'),
                "{line}"
            );
            event
        })
        .collect()
}

/// The address of the `spanprof serving` event's url.
fn server_addr(events: &[serde_json::Value]) -> String {
    let serving = events
        .iter()
        .find(|e| e["message"] == "spanprof serving")
        .expect("a spanprof serving event");
    serving["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string()
}

/// Requests of goapp's `/cpu-light?keys=custom` (span ids under `custom.span_id`, which is no
/// link key) for `for_how_long`: their (trace id, span id).
fn custom_key_requests(app: &GoApp, for_how_long: Duration) -> Vec<(String, String)> {
    let mut requests = Vec::new();
    let until = Instant::now() + for_how_long;
    while Instant::now() < until {
        let r = app.get("/cpu-light?keys=custom&n=400000");
        requests.push((
            r.header("X-Trace-Id").unwrap().to_string(),
            r.header("X-Span-Id").unwrap().to_string(),
        ));
    }
    requests
}

/// A Go service labelling its spans `custom.span_id`: the server says so once in its log with
/// the flag that links them, counts the samples by key in /metrics, and the span's answer
/// names the label instead of "no CPU used"; with `--span-id-key` the same samples link.
#[test]
fn an_unknown_span_key_is_told_counted_and_linked_with_its_flag() {
    let dir = process_dir("serve-custom-key");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let app = GoApp::start(&["-otlp", &format!("http://{addr}")]);
    let scrape = format!("goapp=http://{}", app.addr());
    let flags = [
        "--scrape",
        &scrape,
        "--scrape-profiles",
        "cpu",
        "--scrape-interval",
        "2s",
    ];
    let server = Server::start(&dir.join("unlinked"), &addr, &flags);
    let requests = custom_key_requests(&app, Duration::from_secs(5));
    let metric = "spanprof_unlinked_span_id_samples_total{key=\"custom.span_id\"}";
    server.wait_for(
        "samples under custom.span_id",
        Duration::from_secs(60),
        |s| s.metric(metric) > 0.0,
    );
    // A span of those: its samples are there, under the label, and the answer says so.
    let span = poll(
        "a span answered with its unlinked label",
        Duration::from_secs(60),
        || {
            requests
                .iter()
                .filter_map(|(t, s)| {
                    json(&addr, &format!("/api/v1/traces/{t}"))["spans"]
                        .as_array()
                        .and_then(|spans| {
                            spans.iter().find(|x| x["span_id"] == s.as_str()).cloned()
                        })
                })
                .find(|s| s["coverage"] == "samples under a label that is no link key")
                .ok_or_else(|| format!("none of {} spans yet", requests.len()))
        },
    );
    assert_eq!(span["unlinked_span_key"], "custom.span_id", "{span}");
    assert_eq!(span["samples"], 0, "{span}");
    let log = server.stop();
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sample label \"custom.span_id\" holds span ids"))
        .collect();
    assert_eq!(told.len(), 1, "told once:\n{log}");
    assert!(told[0].contains("--span-id-key custom.span_id"), "{log}");

    // The flag links them: the spans' flame graphs have the CPU, the series no ids.
    let server = Server::start(
        &dir.join("linked"),
        &addr,
        &[
            &flags[..],
            &[
                "--span-id-key",
                "custom.span_id",
                "--trace-id-key",
                "custom.trace_id",
            ],
        ]
        .concat(),
    );
    let requests = custom_key_requests(&app, Duration::from_secs(5));
    poll(
        "a linked custom.span_id span",
        Duration::from_secs(60),
        || {
            requests
                .iter()
                .map(|(_, s)| {
                    json(
                        &addr,
                        &format!("/api/v1/flamegraph?service=goapp&span_id={s}"),
                    )
                })
                .find(|f| f["flamegraph"]["total"].as_i64().unwrap_or(0) > 0)
                .map(|_| ())
                .ok_or_else(|| "no span with samples yet".to_owned())
        },
    );
    assert_eq!(server.metric(metric), 0.0, "linked: no longer counted");
    let names = json(&addr, "/api/v1/label-names?service=goapp");
    assert!(
        !names.to_string().contains("custom.span_id"),
        "the id is no series label once linked: {names}"
    );
    drop(server);
}
