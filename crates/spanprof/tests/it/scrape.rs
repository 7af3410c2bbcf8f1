//! Scraping when targets fail: a real Go service scraped next to a target that refuses
//! connections, one that accepts them and never answers, and a base URL with no pprof
//! endpoint. The live target is scraped at its interval all along (a dead or hung target
//! slows nothing else); every failure is counted, each target's failure is logged once on one
//! line that says why, and a target that comes back says so. And a pprof endpoint behind
//! authentication, scraped with each way of giving credentials.

use spanprof_testkit as support;

use std::time::Duration;

use support::serve::{free_port, Server};
use support::{poll, process_dir, GoApp};

#[test]
fn failing_targets_are_counted_logged_once_and_slow_nothing_else() {
    let live = GoApp::start(&[]);
    let dead_port = free_port();
    // Accepts connections (the kernel completes them) and never answers.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_addr = hung.local_addr().unwrap();
    let targets = [
        format!("live=http://{}", live.addr()),
        format!("missing=http://{}/nothing", live.addr()),
        format!("dead=http://127.0.0.1:{dead_port}"),
        format!("hung=http://{hung_addr}"),
        // A replica of `live` that is down: its own series, by `instance`.
        format!("live=http://127.0.0.1:{dead_port}"),
    ];
    let mut args = vec![
        "--scrape-profiles",
        "heap,goroutine",
        "--scrape-interval",
        "1s",
        "--scrape-timeout",
        "2s",
    ];
    for t in &targets {
        args.extend(["--scrape", t.as_str()]);
    }
    let data = process_dir("scrape-failures").join("data");
    let server = Server::start(&data, "127.0.0.1:0", &args);
    let metric = |name: &str, target: &str| server.heap_scrape_metric(name, target);

    // Two timeouts of the hung target take 5 s at least (2 s, a 1 s wait, 2 s); meanwhile the
    // live one is scraped every second or so.
    poll(
        "two failed scrapes of each failing target",
        Duration::from_secs(60),
        || {
            let errors: Vec<f64> = ["hung", "dead", "missing"]
                .iter()
                .map(|t| metric("spanprof_scrape_errors_total", t))
                .collect();
            if errors.iter().all(|&e| e >= 2.0) {
                Ok(())
            } else {
                Err(format!("errors of hung, dead, missing: {errors:?}"))
            }
        },
    );
    let replica = |name: &str, addr: &str| {
        server.metric(&format!(
            "{name}{{target=\"live\",instance=\"{addr}\",profile=\"heap\"}}"
        ))
    };
    let live_addr = live.addr().to_string();
    let live_scrapes = replica("spanprof_scrapes_total", &live_addr);
    assert!(
        live_scrapes >= 4.0,
        "the live target was scraped {live_scrapes} times while the hung one timed out twice"
    );
    assert_eq!(replica("spanprof_scrape_up", &live_addr), 1.0);
    let down = format!("127.0.0.1:{dead_port}");
    assert_eq!(replica("spanprof_scrape_up", &down), 0.0);
    assert!(replica("spanprof_scrape_errors_total", &down) >= 1.0);
    assert_eq!(metric("spanprof_scrape_up", "dead"), 0.0);
    assert_eq!(metric("spanprof_scrapes_total", "dead"), 0.0);

    // The dead target comes up: scraped again within its backoff (at most an interval).
    let revived = GoApp::start(&["-addr", &format!("127.0.0.1:{dead_port}")]);
    poll(
        "a scrape of the revived target",
        Duration::from_secs(30),
        || {
            let n = metric("spanprof_scrapes_total", "dead");
            if n >= 1.0 {
                Ok(())
            } else {
                Err(format!("{n} scrapes"))
            }
        },
    );
    assert_eq!(metric("spanprof_scrape_up", "dead"), 1.0);
    let log = server.stop();
    drop((live, revived, hung));

    // One line an event: no error page spills over lines.
    for line in log.lines() {
        assert!(
            line.starts_with("20") || line.starts_with("spanprof serving on"),
            "a line that is not an event: {line:?}\n{log}"
        );
    }
    let warnings = |service: &str| -> Vec<&str> {
        log.lines()
            .filter(|l| l.contains(" WARN ") && l.contains(&format!("service={service} ")))
            .collect()
    };
    // Each failing target failed twice or more per profile, and is logged once per profile.
    for (service, why) in [
        ("dead", "cannot connect: "),
        (
            "missing",
            "HTTP 404 Not Found (no pprof endpoint at this base URL",
        ),
        ("hung", "no answer within 2s"),
    ] {
        let lines = warnings(service);
        assert_eq!(lines.len(), 2, "{service}: {lines:#?}\n{log}");
        assert!(
            lines.iter().all(|l| l.contains(why)),
            "{service}: {lines:#?}"
        );
    }
    assert!(
        warnings("dead")
            .iter()
            .all(|l| l.contains("Connection refused")),
        "{:#?}",
        warnings("dead")
    );
    // Go's own answer, on the same line.
    assert!(warnings("missing")
        .iter()
        .all(|l| l.contains("404 page not found")));
    // Of `live`, only its down replica's failures.
    assert!(
        warnings("live")
            .iter()
            .all(|l| l.contains(&format!("url=http://127.0.0.1:{dead_port}/"))),
        "{:#?}",
        warnings("live")
    );
    let back: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("scrape succeeded again") && l.contains("service=dead "))
        .collect();
    assert_eq!(back.len(), 2, "one per profile: {back:#?}\n{log}");
}

/// A Go service whose pprof endpoint wants an `Authorization` is scraped with each way of
/// giving one: credentials in the URL (percent-escaped, sent as basic and never logged), a
/// header in the config file, and a bearer token file read at each scrape (a token rotated
/// in the file is used without a restart). A target given none is refused 401, and its log
/// line says how to give credentials.
#[test]
fn authenticated_targets_are_scraped_with_their_credentials() {
    // "user:s3cret!" in base64.
    let basic = "Basic dXNlcjpzM2NyZXQh";
    let app = GoApp::start(&[
        "-pprof-auth",
        &format!("{basic},Bearer from-header,Bearer rotated-token"),
    ]);
    let dir = process_dir("scrape-auth");
    let token = dir.join("token");
    std::fs::write(&token, "stale-token\n").unwrap();
    let config = dir.join("spanprof.yaml");
    let target = |service: &str, url: &str, extra: &str| {
        format!(
            "    - service: {service}\n      url: {url}\n      profiles: [heap]\n      \
             interval: 1s\n{extra}"
        )
    };
    let addr = app.addr().to_owned();
    let targets = [
        target("basic", &format!("http://user:s3cret%21@{addr}"), ""),
        target(
            "header",
            &format!("http://{addr}"),
            "      headers: {Authorization: Bearer from-header}\n",
        ),
        target(
            "tokenfile",
            &format!("http://{addr}"),
            &format!("      bearer_token_file: {}\n", token.display()),
        ),
        target("anonymous", &format!("http://{addr}"), ""),
    ];
    std::fs::write(
        &config,
        format!("receivers:\n  scrape:\n{}", targets.concat()),
    )
    .unwrap();
    let server = Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap()],
    );
    let metric = |name: &str, target: &str| server.heap_scrape_metric(name, target);
    let counts = |name: &str| -> Vec<f64> {
        ["basic", "header", "tokenfile", "anonymous"]
            .iter()
            .map(|t| metric(name, t))
            .collect()
    };
    poll(
        "scrapes of basic and header, failures of tokenfile and anonymous",
        Duration::from_secs(60),
        || match (
            counts("spanprof_scrapes_total"),
            counts("spanprof_scrape_errors_total"),
        ) {
            (ok, failed)
                if ok[0] >= 1.0 && ok[1] >= 1.0 && failed[2] >= 1.0 && failed[3] >= 1.0 =>
            {
                Ok(())
            }
            (ok, failed) => Err(format!("scrapes {ok:?}, errors {failed:?}")),
        },
    );
    assert_eq!(counts("spanprof_scrapes_total")[2..], [0.0, 0.0]);

    // The token is rotated in its file: the next scrape sends the new one.
    std::fs::write(&token, "rotated-token\n").unwrap();
    poll(
        "a scrape with the rotated token",
        Duration::from_secs(30),
        || match metric("spanprof_scrapes_total", "tokenfile") {
            n if n >= 1.0 => Ok(()),
            n => Err(format!("{n} scrapes")),
        },
    );
    assert_eq!(metric("spanprof_scrapes_total", "anonymous"), 0.0);
    let log = server.stop();
    drop(app);

    assert!(!log.contains("s3cret"), "the password is logged:\n{log}");
    assert!(
        log.contains(&format!("service=basic url=http://{addr} ")),
        "the basic target is logged without its credentials:\n{log}"
    );
    for service in ["anonymous", "tokenfile"] {
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(&format!("service={service} ")))
            .collect();
        assert_eq!(refused.len(), 1, "{service}: {refused:#?}\n{log}");
        assert!(
            refused[0].contains("HTTP 401 Unauthorized (the target wants credentials")
                && refused[0].contains("bearer_token_file"),
            "{}",
            refused[0]
        );
    }
}

/// A server scraping `profiles` of `target` (`NAME=URL`) every second, its data in a
/// directory named for `purpose`.
fn scraping_every_second(purpose: &str, profiles: &str, target: &str) -> Server {
    let dir = process_dir(purpose);
    Server::start(
        &dir.join("data"),
        "127.0.0.1:0",
        &[
            "--scrape-profiles",
            profiles,
            "--scrape-interval",
            "1s",
            "--scrape",
            target,
        ],
    )
}

/// Go's heap profile counts allocations since the program started. Scraped every second,
/// each scrape is stored as what was allocated since the one before, so the stored
/// `alloc_space` of a function over a range is what it allocated in that range, however
/// many scrapes the range holds (stored whole, every scrape added all earlier allocations
/// again: five scrapes counted them five times).
#[test]
fn allocations_are_counted_once_however_often_the_heap_is_scraped() {
    let app = GoApp::start(&[]);
    let server = scraping_every_second(
        "scrape-cumulative",
        "heap",
        &format!("svc=http://{}", app.addr()),
    );
    let scrapes = || server.heap_scrape_metric("spanprof_scrapes_total", "svc");
    let wait_scrapes = |n: f64| {
        poll("heap scrapes", Duration::from_secs(60), || {
            match scrapes() {
                s if s >= n => Ok(()),
                s => Err(format!("{s} scrapes")),
            }
        })
    };
    // The first scrape is the baseline, taken before the allocations.
    wait_scrapes(1.0);

    let mut allocated = 0u64;
    for _ in 0..2 {
        let answer = String::from_utf8(app.get("/alloc?n=20000").body).unwrap();
        allocated += answer
            .trim()
            .strip_prefix("allocated ")
            .and_then(|s| s.strip_suffix(" bytes"))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("/alloc answered {answer:?}"));
    }
    // The heap profile shows allocations once garbage collections have run after them.
    app.get("/debug/pprof/heap?gc=1");
    app.get("/debug/pprof/heap?gc=1");
    let after = scrapes();
    wait_scrapes(after + 5.0);

    let top = support::http::get(
        &server.addr,
        "/api/v1/top?service=svc&type=memory:alloc_space:bytes:space:bytes&from=now-1h\
         &order=total&limit=1000",
        Duration::from_secs(30),
    )
    .unwrap();
    let top: serde_json::Value = serde_json::from_slice(&top.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&top.body)));
    let stored = top["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "main.allocWork")
        .and_then(|f| f["total"].as_f64())
        .unwrap_or_else(|| panic!("no main.allocWork in {top:#}"));
    // inuse_space is a snapshot: over the range, the average of the scrapes (each about the
    // heap of one moment), not their sum.
    let json = |path: &str| -> serde_json::Value {
        let r = support::http::get(&server.addr, path, Duration::from_secs(30)).unwrap();
        serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&r.body)))
    };
    let inuse = "service=svc&type=memory:inuse_space:bytes:space:bytes&from=now-1h";
    let top = json(&format!("/api/v1/top?{inuse}"));
    let averaged_over = top["summary"]["averaged_over"].as_u64().unwrap_or(0);
    assert!(averaged_over >= 6, "{:#}", top["summary"]);
    let average = top["total"].as_f64().unwrap();
    // One profile per 1 s step (a step holding two is their average).
    let series = json(&format!("/api/v1/timeseries?{inuse}&step=1s"));
    assert_eq!(series["aggregation"], "average");
    let mut snapshots: Vec<f64> = series["series"][0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect();
    snapshots.sort_by(f64::total_cmp);
    let median = snapshots[snapshots.len() / 2];
    assert!(
        (0.5..2.0).contains(&(average / median)),
        "the average heap in use {average} against a median snapshot of {median}: {snapshots:?}"
    );
    // The pprof of the range is the same average, and says so.
    let pprof = support::http::get(
        &server.addr,
        &format!("/api/v1/pprof?{inuse}"),
        Duration::from_secs(30),
    )
    .unwrap();
    let pprof = spanprof_format::pprof::decode(&pprof.body, 1 << 30).unwrap();
    let sum: i64 = pprof.sample.iter().map(|s| s.value[0]).sum();
    assert!(
        (0.9..=1.0).contains(&(sum as f64 / average)),
        "pprof {sum} against the flame graph's {average}"
    );
    let comments: Vec<&str> = pprof.comment.iter().filter_map(|&c| pprof.str(c)).collect();
    assert_eq!(comments, [format!("average of {averaged_over} profiles")]);
    // So is each side of a diff: ranges holding different numbers of scrapes compare.
    let diff = json(&format!("/api/v1/diff?{inuse}&baseline=service"));
    for side in ["left", "right"] {
        assert!(
            diff[side]["averaged_over"].as_u64().unwrap_or(0) >= 6,
            "{:#}",
            diff[side]
        );
    }
    let ticks = diff["flamegraph"]["rightTicks"].as_f64().unwrap();
    assert!(
        (0.5..2.0).contains(&(ticks / average)),
        "the diff's {ticks} against the flame graph's {average}"
    );
    // `memory` names the heap profile's four types: a choice the answer would not show.
    let ambiguous = support::http::get(
        &server.addr,
        "/api/v1/top?service=svc&type=memory",
        Duration::from_secs(30),
    )
    .unwrap();
    let text = String::from_utf8_lossy(&ambiguous.body);
    assert_eq!(ambiguous.status, 400, "{text}");
    assert!(
        text.contains("type \\\"memory\\\": names 4 profile types of service \\\"svc\\\"")
            && text.contains("memory:inuse_space:bytes:space:bytes"),
        "{text}"
    );
    drop(server);
    drop(app);
    // The heap profile samples one allocation per 512 KiB on average and scales it up: an
    // estimate within a few percent for 120 MB.
    let ratio = stored / allocated as f64;
    assert!(
        (0.7..1.3).contains(&ratio),
        "stored alloc_space of main.allocWork {stored} for {allocated} bytes allocated \
         (ratio {ratio:.2})"
    );
}

/// A target whose CPU endpoint answers at once (it ignores `seconds`, as a static file, a
/// cache or a non-Go pprof server does) is asked once per window, not again and again.
#[test]
fn a_cpu_endpoint_that_answers_at_once_is_asked_once_a_window() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // Serves a Go CPU profile at once, whatever is asked.
    let profile = std::fs::read(support::go_cpu_pprof()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            assert!(
                head.starts_with(b"GET /debug/pprof/profile?seconds=1 "),
                "{}",
                String::from_utf8_lossy(&head)
            );
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                profile.len()
            );
            let _ = stream.write_all(&profile);
        }
    });
    let server = scraping_every_second("scrape-early-cpu", "cpu", &format!("early={url}"));
    let started = std::time::Instant::now();
    // Three scrapes take two windows at least; asked at once again, the target sees hundreds
    // of requests meanwhile.
    poll(
        "three CPU scrapes",
        Duration::from_secs(30),
        || match server.metric("spanprof_scrapes_total{target=\"early\",profile=\"cpu\"}") {
            n if n >= 3.0 => Ok(()),
            n => Err(format!("{n} scrapes")),
        },
    );
    let asked = asked.load(Ordering::SeqCst);
    let elapsed = started.elapsed();
    drop(server);
    let windows = elapsed.as_secs() as usize + 1;
    assert!(
        (3..=windows + 1).contains(&asked),
        "asked {asked} times in {elapsed:?} with 1 s windows"
    );
}

/// Go dates a CPU profile's end when it has built the profile, up to a few hundred ms after
/// sampling stopped. Scraped back to back, each stored window ends when the window asked
/// for does, and the time between two windows (the target's build and answer, the next
/// request) is counted as unprofiled: a span in it is reported as fallen between two windows,
/// not as one that used no CPU (the stored window claimed it before, so a span at a window's
/// edge looked idle), nor as one no profile was taken for.
#[test]
fn cpu_windows_end_when_sampling_stopped_and_a_span_between_two_fell_between_them() {
    let app = GoApp::start(&[]);
    let server = scraping_every_second(
        "scrape-cpu-gaps",
        "cpu",
        &format!("svc=http://{}", app.addr()),
    );
    let get = |path: &str| {
        let r = support::http::get(&server.addr, path, Duration::from_secs(30)).unwrap();
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.body
    };
    // Go reads its samples every 100 ms, so a gap is 1-100 ms on an idle machine (a third of
    // them under 4 ms), more on a busy one: six gaps hold a wide one. Requests keep the
    // service busy enough for every window to have samples (a timeline point).
    let (done, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || loop {
            app.get("/cpu-heavy?n=100000");
            // A request every 50 ms, until told to stop.
            if stopped.recv_timeout(Duration::from_millis(50))
                != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                break;
            }
        });
        poll(
            "seven CPU windows",
            Duration::from_secs(60),
            || match server.metric("spanprof_scrapes_total{target=\"svc\",profile=\"cpu\"}") {
                n if n >= 7.0 => Ok(()),
                n => Err(format!("{n} windows")),
            },
        );
        drop(done);
    });
    // Each window's start (its timeline point, 1 ms buckets) and end (its pprof's).
    let series: serde_json::Value =
        serde_json::from_slice(&get("/api/v1/timeseries?service=svc&step=1ms")).unwrap();
    let windows: Vec<(i64, i64)> = series["series"][0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ms = p["timestamp_ms"].as_i64().unwrap();
            let gz = get(&format!(
                "/api/v1/pprof?service=svc&from={ms}&to={}",
                ms + 1
            ));
            let p = spanprof_format::pprof::decode(&gz, 64 << 20).unwrap();
            assert!(
                (900_000_000..=1_000_000_000).contains(&p.duration_nanos),
                "a 1 s window stored as {} ns",
                p.duration_nanos
            );
            (p.time_nanos, p.time_nanos + p.duration_nanos)
        })
        .collect();
    assert!(windows.len() >= 6, "{series}");
    // Between windows that follow each other (a window without samples has no point).
    let gaps: Vec<(i64, i64)> = windows
        .windows(2)
        .map(|w| (w[0].1, w[1].0))
        .filter(|(end, start)| start - end < 500_000_000)
        .collect();
    let unprofiled: i64 = gaps.iter().map(|(end, start)| start - end).sum();
    assert!(gaps.iter().all(|(end, start)| start >= end), "{windows:?}");
    let counted = server.metric("spanprof_scrape_unprofiled_seconds_total{target=\"svc\"}");
    assert!(
        counted * 1e9 >= unprofiled as f64 - 1e3,
        "{counted} s counted unprofiled, {unprofiled} ns between the windows {windows:?}"
    );
    // A span in the middle half of the widest gap.
    let (end, start) = *gaps.iter().max_by_key(|(end, start)| start - end).unwrap();
    assert!(start - end >= 4_000_000, "gaps of under 4 ms: {windows:?}");
    let (span_start, span_end) = (end + (start - end) / 4, start - (start - end) / 4);
    let trace = "5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e";
    let spans = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": trace, "spanId": "0000000000c0ffee", "name": "between windows",
            "kind": 2,
            "startTimeUnixNano": span_start.to_string(),
            "endTimeUnixNano": span_end.to_string(),
        }]}],
    }]});
    server.post(
        "/v1/traces",
        "application/json",
        &serde_json::to_vec(&spans).unwrap(),
    );
    let trace: serde_json::Value =
        serde_json::from_slice(&get(&format!("/api/v1/traces/{trace}"))).unwrap();
    assert_eq!(
        trace["spans"][0]["coverage"], "profiles cover too little of the span",
        "a span from {span_start} to {span_end} ns, between windows {windows:?}: {trace}"
    );
    // The answer says how much of it they cover (the UI shows it).
    let covered = trace["spans"][0]["covered_ns"].as_u64();
    assert!(
        covered.is_some_and(|c| c < trace["spans"][0]["duration_ns"].as_u64().unwrap()),
        "{trace}"
    );
}
