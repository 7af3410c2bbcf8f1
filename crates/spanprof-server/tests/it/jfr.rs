//! `POST /ingest?format=jfr` as the Pyroscope Java agent sends it: a multipart body with a
//! gzipped `jfr` part (a real async-profiler recording, testdata/jfr) and a gzipped `labels`
//! part whose context carries `profile_id` and `span_name`, as pyroscope-otel sets them on a
//! root span. The span's flame graph holds exactly that context's samples, counted from
//! Pyroscope's own conversion of the recording; a span sent over OTLP gives the trace id.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use spanprof_format::gzip;
use spanprof_format::jfr::LabelsSnapshot;
use spanprof_testkit::server::TestServer;

const SPAN: &str = "0123456789abcdef";
const TRACE: &str = "00112233445566778899aabbccddeeff";
const SPAN_NAME: &str = "GET /checkout";
const CPU_TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// The context of dump1.jfr whose samples become the span's: its thread.
const THREAD: &str = "pool-2-thread-3";

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/jfr")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn gunzip(gz: &[u8]) -> Vec<u8> {
    gzip::gunzip(gz, 64 << 20).unwrap()
}

/// What Pyroscope's conversion (jfr-parser's printed profile of dump1) gives each label set.
fn pyroscope_totals_by_labels() -> BTreeMap<String, i64> {
    let text = String::from_utf8(gunzip(&testdata("dump1.cpu.pprof.txt.gz"))).unwrap();
    let samples = text.split("Samples:").nth(1).unwrap();
    let samples = samples.split("Locations").next().unwrap();
    let mut out = BTreeMap::new();
    let mut pending = None;
    for line in samples.lines().skip(2) {
        let t = line.trim();
        match t.split_once(':') {
            Some((v, _)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                if let Some(p) = pending.replace(v.parse::<i64>().unwrap()) {
                    *out.entry(String::new()).or_insert(0) += p;
                }
            }
            _ if !t.is_empty() => {
                *out.entry(t.to_owned()).or_insert(0) += pending.take().unwrap();
            }
            _ => {}
        }
    }
    if let Some(p) = pending {
        *out.entry(String::new()).or_insert(0) += p;
    }
    out
}

/// dump1's own labels snapshot, with the span's labels added to the context of [`THREAD`].
fn snapshot_with_span() -> LabelsSnapshot {
    let mut s = LabelsSnapshot::decode_snapshot(&gunzip(&testdata("dump1.labels.pb.gz"))).unwrap();
    let id_of =
        |s: &LabelsSnapshot, text: &str| *s.strings.iter().find(|(_, v)| *v == text).unwrap().0;
    let thread = id_of(&s, THREAD);
    let ctx = *s
        .contexts
        .iter()
        .find(|(_, c)| c.labels.values().any(|v| *v == thread))
        .unwrap()
        .0;
    for (i, text) in [
        (100, "profile_id"),
        (101, SPAN),
        (102, "span_name"),
        (103, SPAN_NAME),
    ] {
        s.strings.insert(i, text.to_owned());
    }
    let labels = &mut s.contexts.get_mut(&ctx).unwrap().labels;
    labels.insert(100, 101);
    labels.insert(102, 103);
    s
}

/// A multipart body as the Java agent builds it (okhttp's form: parts `jfr` and `labels`,
/// each with a file name, gzipped).
fn agent_multipart(jfr_gz: &[u8], labels_gz: &[u8]) -> (String, Vec<u8>) {
    let boundary = "d6a1c9e4-8d2f-4c1b-9b7e-0f3a2c5e7d11";
    let mut body = Vec::new();
    for (name, bytes) in [("jfr", jfr_gz), ("labels", labels_gz)] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\
                 Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                bytes.len()
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn the_java_agents_upload_links_a_contexts_samples_to_its_span() {
    let server = TestServer::in_fresh_dir("jfr-agent-upload", |_| {});
    let until = now_s();
    let from = until - 10;
    let (ct, body) = agent_multipart(
        &testdata("dump1.jfr.gz"),
        &gzip::gzip(&snapshot_with_span().encode_to_vec()),
    );
    let query = format!(
        "/ingest?name=javaapp%7Benv%3Dtest%7D&from={from}&until={until}&format=jfr\
         &sampleRate=100&spyName=javaspy&units=samples&aggregationType=sum"
    );
    let r = server.post(&query, &ct, body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.body.is_empty());

    let totals = pyroscope_totals_by_labels();
    let want = totals[&format!("thread_name:[{THREAD}]")];
    let all: i64 = totals.values().sum();
    assert!(
        want > 0 && want < all,
        "the span has some of the samples: {totals:?}"
    );

    // Our own API: the span's flame graph.
    let flame = server
        .get(&format!(
            "/api/v1/flamegraph?span_id={SPAN}&from={}&to={}",
            from * 1000,
            until * 1000
        ))
        .ok()
        .json();
    assert_eq!(
        flame["flamegraph"]["total"].as_i64(),
        Some(want),
        "{}",
        flame["summary"]
    );
    let whole = server
        .get(&format!(
            "/api/v1/flamegraph?service=javaapp&type={CPU_TYPE}&from={}&to={}",
            from * 1000,
            until * 1000
        ))
        .ok()
        .json();
    assert_eq!(whole["flamegraph"]["total"].as_i64(), Some(all));

    // Grafana's span profile call.
    let v = server
        .post(
            "/querier.v1.QuerierService/SelectMergeSpanProfile",
            "application/json",
            serde_json::json!({
                "profileTypeID": CPU_TYPE,
                "labelSelector": "{service_name=\"javaapp\"}",
                "spanSelector": [SPAN],
                "start": (from * 1000).to_string(),
                "end": (until * 1000).to_string(),
                "maxNodes": "16384",
            })
            .to_string()
            .into_bytes(),
        )
        .ok()
        .json();
    assert_eq!(
        v["flamegraph"]["total"]
            .as_str()
            .map(|t| t.parse::<i64>().unwrap())
            .or(v["flamegraph"]["total"].as_i64()),
        Some(want),
        "{v}"
    );

    // The span over OTLP: its trace id finds the same samples.
    let span = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "javaapp"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": TRACE, "spanId": SPAN, "name": SPAN_NAME, "kind": 2,
            "startTimeUnixNano": ((from + 1) * 1_000_000_000).to_string(),
            "endTimeUnixNano": ((until - 1) * 1_000_000_000).to_string(),
        }]}]
    }]});
    server
        .post(
            "/v1/traces",
            "application/json",
            span.to_string().into_bytes(),
        )
        .ok();
    let trace = server.get(&format!("/api/v1/traces/{TRACE}")).ok().json();
    assert_eq!(trace["total"].as_i64(), Some(want), "{trace}");
    let by_trace = server
        .get(&format!(
            "/api/v1/flamegraph?trace_id={TRACE}&from={}&to={}",
            from * 1000,
            until * 1000
        ))
        .ok()
        .json();
    assert_eq!(by_trace["flamegraph"]["total"].as_i64(), Some(want));
}

/// Bad uploads get a 4xx that names the problem, and the server keeps serving; raw bodies
/// (gzipped or not) are read as the multipart ones.
#[test]
fn bad_jfr_uploads_are_named_and_raw_bodies_accepted() {
    let server = TestServer::in_fresh_dir("jfr-bad-uploads", |c| {
        c.server.max_decompressed_size = 4 << 20;
    });
    let until = now_s();
    let query = format!(
        "/ingest?name=javaapp&from={}&until={until}&format=jfr&sampleRate=100",
        until - 10
    );
    let jfr_gz = testdata("dump1.jfr.gz");
    let jfr = gunzip(&jfr_gz);
    let labels_gz = testdata("dump1.labels.pb.gz");
    let bomb = gzip::gzip(&vec![0u8; 16 << 20]);
    let post = |ct: &str, body: Vec<u8>| server.post(&query, ct, body);
    // (what, (content type, body), status, what the answer says)
    type Case<'a> = (&'a str, (String, Vec<u8>), u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "labels not a snapshot",
            agent_multipart(
                &jfr_gz,
                &gzip::gzip(b"\x0a\xff\xff\xff\xff\x0fnot protobuf"),
            ),
            400,
            "the labels part is not a JFR labels snapshot",
        ),
        (
            "labels not gzip nor protobuf",
            agent_multipart(&jfr_gz, b"\x1f\x8b\x08garbage"),
            400,
            "the labels part is not valid gzip",
        ),
        (
            "a gzip bomb as labels",
            agent_multipart(&jfr_gz, &bomb),
            413,
            "the labels part is larger than 4194304 bytes once decompressed",
        ),
        (
            "a gzip bomb as the jfr",
            agent_multipart(&bomb, &labels_gz),
            413,
            "the JFR recording is larger than 4194304 bytes once decompressed",
        ),
        (
            "a truncated recording",
            agent_multipart(&gzip::gzip(&jfr[..jfr.len() / 2]), &labels_gz),
            400,
            "past the end of the file",
        ),
        (
            "not JFR",
            agent_multipart(&gzip::gzip(b"hello"), &labels_gz),
            400,
            "not JFR",
        ),
        (
            "no jfr part",
            {
                let (ct, body) = agent_multipart(&jfr_gz, &labels_gz);
                (
                    ct,
                    String::from_utf8_lossy(&body)
                        .replace("name=\"jfr\"", "name=\"profile\"")
                        .into_bytes(),
                )
            },
            400,
            "no `jfr` part",
        ),
    ];
    for (what, (ct, body), status, needle) in cases {
        // The non-UTF-8 replacement above spoils the gzip: only its part names matter.
        let r = post(&ct, body);
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, status, "{what}: {text}");
        assert!(text.contains(needle), "{what}: {text:?} lacks {needle:?}");
    }
    // Raw bodies, gzipped and not: stored (one upload after the other, same totals).
    for body in [jfr_gz.clone(), jfr.clone()] {
        let r = post("application/octet-stream", body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let whole = server
        .get(&format!(
            "/api/v1/flamegraph?service=javaapp&type={CPU_TYPE}&from={}&to={}",
            (until - 10) * 1000,
            until * 1000
        ))
        .ok()
        .json();
    let all: i64 = pyroscope_totals_by_labels().values().sum();
    assert_eq!(whole["flamegraph"]["total"].as_i64(), Some(2 * all));
}

/// One recording with several kinds of sample is one profile of each, stored together; past
/// a limit in one of them, none is stored.
#[test]
fn several_kinds_are_stored_or_refused_together() {
    let jfr = testdata("example.jfr.gz");
    let (profiles, _) = spanprof_format::jfr::jfr_to_pprof(
        &gunzip(&jfr),
        None,
        &spanprof_format::jfr::JfrOptions::default(),
    )
    .unwrap();
    let most = profiles
        .iter()
        .map(|p| p.profile.sample.len())
        .max()
        .unwrap();
    let fewest = profiles
        .iter()
        .map(|p| p.profile.sample.len())
        .min()
        .unwrap();
    assert!(fewest < most, "the kinds differ in size");
    for (limit, stored) in [(0, true), (most - 1, false)] {
        let server = TestServer::in_fresh_dir(&format!("jfr-kinds-{limit}"), |c| {
            c.server.max_profile_samples = limit;
        });
        let until = now_s();
        let query = format!(
            "/ingest?name=kinds&from={}&until={until}&format=jfr&sampleRate=100",
            until - 10
        );
        let r = server.post(&query, "application/octet-stream", jfr.clone());
        let types = server
            .get("/api/v1/profile-types?service=kinds")
            .ok()
            .json();
        let ids: Vec<&str> = types["profile_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        if stored {
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            for want in [
                CPU_TYPE,
                "memory:alloc_in_new_tlab_objects:count:space:bytes",
                "memory:alloc_in_new_tlab_bytes:bytes:space:bytes",
                "memory:alloc_outside_tlab_objects:count:space:bytes",
                "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
                "mutex:contentions:count:mutex:count",
                "mutex:delay:nanoseconds:mutex:count",
            ] {
                assert!(ids.contains(&want), "{want} not in {ids:?}");
            }
        } else {
            let text = String::from_utf8_lossy(&r.body);
            assert_eq!(r.status, 413, "{text}");
            assert!(text.contains("server.max_profile_samples"), "{text}");
            assert!(ids.is_empty(), "nothing of the upload is stored: {ids:?}");
        }
    }
}
