//! Collector mode with real processes: spanprof without its store (`--no-store`) in front of
//! a downstream spanprof that plays Pyroscope (addressed only through the OTLP/HTTP profile
//! and trace endpoints Pyroscope and Tempo also serve: Pyroscope itself cannot run here).
//! Collectors split a list of real Go services (`testprograms/goapp` replicas) between them
//! with `--replicas N --replica I`; and a collector killed with SIGKILL while its downstream
//! is down loses nothing it acknowledged.

use spanprof_testkit as support;

use std::time::Duration;

use spanprof_server::config::ScrapeTarget;
use spanprof_server::replicas::Replicas;
use support::serve::{free_port, Server};
use support::{go_cpu_otlp, poll, process_dir, spanprof, GoApp};

/// Heap scrapes of target `goapp` at `addr` counted by `server`.
fn heap_scrapes(server: &Server, addr: &str) -> f64 {
    server.metric(&format!(
        "spanprof_scrapes_total{{target=\"goapp\",instance=\"{addr}\",profile=\"heap\"}}"
    ))
}

#[test]
fn replicas_split_the_scrape_targets_between_them() {
    // Which replica owns an app, as every replica computes it from the same list.
    let owner_of = |a: &GoApp| {
        let t = ScrapeTarget::new("goapp", format!("http://{}", a.addr()));
        Replicas::owner(2, &t) as usize
    };
    // Apps on random ports: five all land on one replica in 1 run of 16, so start more
    // until each replica owns one (the hash's evenness is the unit test's, in replicas.rs).
    let mut apps: Vec<GoApp> = (0..5).map(|_| GoApp::start(&[])).collect();
    while apps.len() < 16 && (0..2).any(|i| !apps.iter().any(|a| owner_of(a) == i)) {
        apps.push(GoApp::start(&[]));
    }
    // With their stores: a collector without one needs a forwarder, beside the point here.
    let mut flags: Vec<String> = vec![
        "--scrape-profiles".into(),
        "heap,goroutine".into(),
        "--scrape-interval".into(),
        "1s".into(),
    ];
    for app in &apps {
        flags.push("--scrape".into());
        flags.push(format!("goapp=http://{}", app.addr()));
    }
    let dir = process_dir("collector-replicas");
    let collectors: Vec<Server> = (0..2)
        .map(|i| {
            let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
            let index = i.to_string();
            args.extend(["--replicas", "2", "--replica", &index]);
            Server::start(&dir.join(format!("c{i}")), "127.0.0.1:0", &args)
        })
        .collect();
    let owner: Vec<usize> = apps.iter().map(owner_of).collect();
    poll(
        "every app scraped twice by its owner",
        Duration::from_secs(60),
        || {
            let counts: Vec<f64> = apps
                .iter()
                .zip(&owner)
                .map(|(a, &o)| heap_scrapes(&collectors[o], a.addr()))
                .collect();
            counts
                .iter()
                .all(|&n| n >= 2.0)
                .then_some(())
                .ok_or(format!("heap scrapes by the owners: {counts:?}"))
        },
    );
    for (app, &o) in apps.iter().zip(&owner) {
        let other = &collectors[1 - o];
        assert_eq!(
            heap_scrapes(other, app.addr()),
            0.0,
            "{} is scraped by replica {} too, not only its owner {o}",
            app.addr(),
            1 - o
        );
        assert_eq!(
            other.metric(&format!(
                "spanprof_scrape_up{{target=\"goapp\",instance=\"{}\"}}",
                app.addr()
            )),
            0.0
        );
    }
    // Both have work (after 16 apps a replica with none would be a broken hash).
    for i in 0..2 {
        assert!(owner.contains(&i), "replica {i} owns none of {owner:?}");
    }
}

#[test]
fn replica_flags_are_checked() {
    let run = spanprof(["serve", "--replicas", "2", "--replica", "2"]);
    run.assert_no_panic();
    assert_ne!(run.code(), Some(0), "{run}");
    assert!(run.stderr.contains("0 to 1"), "{run}");
}

/// OTLP/JSON traces of `n` spans of service `goapp`, each with its own trace.
fn spans_json(n: usize, seed: usize) -> Vec<u8> {
    let spans: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let start = 1_700_000_000_000_000_000u64 + (seed * 1000 + i) as u64 * 1_000_000;
            serde_json::json!({
                "traceId": format!("{:032x}", seed * 1000 + i + 1),
                "spanId": format!("{:016x}", seed * 1000 + i + 1),
                "name": "GET /x", "kind": 2,
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": (start + 1_000_000).to_string(),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "goapp"}}]},
        "scopeSpans": [{"spans": spans}],
    }]}))
    .unwrap()
}

/// The whole CPU flame graph (collapsed lines) of a store, or of files.
fn flame(args: &[&str]) -> String {
    let mut all = vec!["flame", "--type", "cpu"];
    all.extend_from_slice(args);
    let run = spanprof(&all);
    run.assert_no_panic().assert_success();
    let mut lines: Vec<&str> = run.stdout.lines().filter(|l| !l.is_empty()).collect();
    lines.sort();
    lines.join("\n")
}

#[test]
fn a_collector_killed_while_downstream_is_down_loses_nothing_it_acknowledged() {
    let dir = process_dir("collector-kill");
    let otlp = go_cpu_otlp(&dir);
    let profile = std::fs::read(&otlp).unwrap();
    let down_addr = format!("127.0.0.1:{}", free_port());
    let forward = format!("pyroscope=http://{down_addr}");
    let args = [
        "--no-store",
        "--forward-otlp-http",
        forward.as_str(),
        "--forward-batch-age",
        "50ms",
        "--forward-retry-max",
        "200ms",
    ];
    let collector_data = dir.join("collector");
    let collector = Server::start(&collector_data, "127.0.0.1:0", &args);
    const PROFILES: usize = 6;
    const SPAN_REQUESTS: usize = 5;
    for i in 0..PROFILES {
        collector.post(
            "/v1development/profiles",
            "application/x-protobuf",
            &profile,
        );
        if i < SPAN_REQUESTS {
            collector.post("/v1/traces", "application/json", &spans_json(4, i));
        }
    }
    // Every request was answered 200: acknowledged. The downstream is down meanwhile.
    let queued = "spanprof_forward_queued_records{forwarder=\"pyroscope\"}";
    collector.wait_for("exports failing", Duration::from_secs(30), |c| {
        c.metric("spanprof_forward_failing{forwarder=\"pyroscope\"}") == 1.0
    });
    assert!(collector.metric(queued) >= 1.0);
    collector.signal("KILL");
    let (status, _) = collector.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "killed: {status:?}");

    let down = Server::start(&dir.join("pyroscope"), &down_addr, &[]);
    let collector = Server::start(&collector_data, "127.0.0.1:0", &args);
    collector.wait_for("the queue delivered", Duration::from_secs(60), |c| {
        c.metric(queued) == 0.0
            && c.metric(
                "spanprof_forwarded_records_total{forwarder=\"pyroscope\",signal=\"profiles\"}",
            ) >= 1.0
    });
    down.wait_for("the spans stored", Duration::from_secs(30), |d| {
        d.metric("spanprof_stored_spans_total") >= (SPAN_REQUESTS * 4) as f64
    });
    assert_eq!(
        down.metric("spanprof_stored_spans_total"),
        (SPAN_REQUESTS * 4) as f64
    );
    collector.stop();
    down.stop();
    // The downstream's CPU flame graph is the profile's, PROFILES times: every acknowledged
    // profile arrived, once.
    let otlp_path = otlp.to_str().unwrap();
    let files: Vec<&str> = std::iter::repeat_n(otlp_path, PROFILES).collect();
    let expected = flame(&files);
    let got = flame(&["--data", dir.join("pyroscope").to_str().unwrap()]);
    assert!(!expected.is_empty());
    assert_eq!(got, expected, "the downstream's flame graph");
}

/// The real Go CPU profile (OTLP) of service `service`, every sample labelled
/// `request_id=id`: a label with one value per request.
fn with_request_id(otlp: &[u8], service: &str, id: &str) -> Vec<u8> {
    use prost::Message;
    use spanprof_format::otlp::{any_value, AnyValue, KeyValueAndUnit, ProfilesData};
    let mut data = ProfilesData::decode(otlp).unwrap();
    let d = data.dictionary.as_mut().unwrap();
    d.string_table.push("request_id".into());
    let key = d.string_table.len() as i32 - 1;
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: key,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(id.into())),
        }),
        unit_strindex: 0,
    });
    let attr = d.attribute_table.len() as i32 - 1;
    for r in &mut data.resource_profiles {
        for kv in &mut r.resource.as_mut().unwrap().attributes {
            if kv.key == "service.name" {
                *kv = spanprof_format::otlp::string_kv("service.name", service);
            }
        }
        for p in r.scope_profiles.iter_mut().flat_map(|s| &mut s.profiles) {
            for s in &mut p.samples {
                s.attribute_indices.push(attr);
            }
        }
    }
    data.encode_to_vec()
}

/// A collector whose transform stage drops a per-request label: downstream, its requests
/// make the series of one request, where the same requests sent straight make one per
/// request.
#[test]
fn dropping_a_per_request_label_makes_one_series_of_many() {
    let dir = process_dir("collector-transform");
    let otlp = std::fs::read(go_cpu_otlp(&dir)).unwrap();
    let down = Server::start(&dir.join("down"), "127.0.0.1:0", &[]);
    let config = dir.join("collector.yaml");
    std::fs::write(
        &config,
        "processors:\n  transform:\n    - name: no-request-ids\n      action: drop_label\n      \
         label: request_id\n    - action: set_resource\n      key: k8s.pod.name\n      \
         value_from_env: POD_NAME\n",
    )
    .unwrap();
    let forward = format!("d=http://{}", down.addr);
    let collector = Server::start_with_env(
        &dir.join("collector"),
        "127.0.0.1:0",
        &[
            "--config",
            config.to_str().unwrap(),
            "--no-store",
            "--forward-otlp-http",
            &forward,
            "--forward-batch-age",
            "50ms",
        ],
        &[("POD_NAME", "collector-0")],
    );
    const REQUESTS: usize = 5;
    let series = |d: &Server| d.metric("spanprof_store_series");
    for i in 0..REQUESTS {
        let body = with_request_id(&otlp, "via-collector", &format!("req-{i}"));
        collector.post("/v1development/profiles", "application/x-protobuf", &body);
    }
    let stored = "spanprof_stored_profiles_total";
    down.wait_for(
        "the collector's profiles stored",
        Duration::from_secs(60),
        |d| d.metric(stored) >= REQUESTS as f64,
    );
    let through_collector = series(&down);
    assert!(through_collector >= 1.0);
    for i in 0..REQUESTS {
        let body = with_request_id(&otlp, "straight", &format!("req-{i}"));
        down.post("/v1development/profiles", "application/x-protobuf", &body);
    }
    let straight = series(&down) - through_collector;
    assert_eq!(
        straight,
        through_collector * REQUESTS as f64,
        "sent straight, one series (per profile type) per request; through the collector, one"
    );

    // A rule that cannot work stops the start, naming the rule.
    std::fs::write(
        &config,
        "processors:\n  transform:\n    - name: pod\n      action: set_resource\n      \
         key: k8s.pod.name\n      value_from_env: SPANPROF_TEST_UNSET_VARIABLE\n",
    )
    .unwrap();
    let run = spanprof(["serve", "--config", config.to_str().unwrap()]);
    run.assert_no_panic();
    assert_ne!(run.code(), Some(0), "{run}");
    assert!(
        run.stderr.contains(
            "processors.transform[0] \"pod\" (set_resource): value_from_env: the environment \
             variable SPANPROF_TEST_UNSET_VARIABLE is not set"
        ),
        "{run}"
    );
}
