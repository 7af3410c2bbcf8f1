//! OTLP/HTTP receivers against hostile and malformed requests: each gets a 4xx with a message
//! naming the problem, the server keeps serving, and nothing acknowledged is lost.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use prost::Message;

use crate::common;
use common::metrics::ReceiverMetrics;
use common::pushv1;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};
use spanprof_format::{gzip, pprof};
use spanprof_server::config::ServerConfig;
use spanprof_server::grpc_proto::google::rpc::Status as RpcStatus;
use spanprof_store::store::{Selection, Store, StoreConfig};
use spanprof_testkit::server::wait_for;

const CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

/// A server on an ephemeral port; stopped (and drained) when dropped.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(dir: &std::path::Path, tweak: impl FnOnce(&mut ServerConfig)) -> Server {
        let mut config = spanprof_testkit::server::loopback_config(dir);
        tweak(&mut config);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(spanprof_server::serve(
                config,
                async move {
                    let _ = stopped.await;
                },
                move |b| bound_tx.send(b.http).unwrap(),
            ))
            .unwrap();
        });
        let addr = bound_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server did not bind within 30 s");
        Server {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Status and body (as text) of `POST path`.
    fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        let (status, _, body) = self.post_raw(path, headers, body);
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Status and body (as text) of `GET path`.
    fn get(&self, path: &str) -> (u16, String) {
        let (status, _, body) = self.send("GET", path, &[], b"");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Status, head (status line and headers) and body bytes of `POST path`.
    fn post_raw(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        self.send("POST", path, headers, body)
    }

    /// Status, head (status line and headers) and body bytes of a request.
    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        // The server may answer (413) before reading a huge body; ignore a broken pipe then.
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let split = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(out.len());
        let head = String::from_utf8_lossy(&out[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.get(split + 4..).unwrap_or_default().to_vec();
        (status, head, body)
    }

    /// The partial success of an OTLP/HTTP protobuf request answered 200 with one.
    fn otlp_partial_success(
        &self,
        request: &[u8],
    ) -> spanprof_format::otlp::ExportProfilesPartialSuccess {
        let (status, _, body) = self.post_raw(
            "/v1development/profiles",
            &[("content-type", "application/x-protobuf")],
            request,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        spanprof_format::otlp::ExportProfilesServiceResponse::decode(&body[..])
            .unwrap()
            .partial_success
            .expect("a partial success")
    }

    /// Asserts that an OTLP request of the real Go profile is stored (200).
    fn stores_a_real_profile(&self) {
        let (status, text) = self.post(
            "/v1development/profiles",
            &[("content-type", "application/x-protobuf")],
            &otlp_request(),
        );
        assert_eq!(status, 200, "{text}");
    }

    fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

fn otlp_request() -> Vec<u8> {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let resource = Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("goapp".into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    spanprof_format::to_otlp::pprof_to_otlp(&p, resource, None)
        .unwrap()
        .0
        .encode_to_vec()
}

#[test]
fn malformed_requests_get_4xx_and_acknowledged_data_survives() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| c.server.max_body_size = 1 << 20);
    let proto = [("content-type", "application/x-protobuf")];
    let json = [("content-type", "application/json")];

    // Acknowledged first, so the checks below also show nothing stored is lost.
    let good = otlp_request();
    let counts = ReceiverMetrics::before(&server.get("/metrics").1, "otlp_profiles");
    let (status, _) = server.post("/v1development/profiles", &proto, &good);
    assert_eq!(status, 200);
    // The Go CPU profile has two sample types (samples/count, cpu/nanoseconds): 2 profiles.
    counts.assert_received(&server.get("/metrics").1, good.len(), 2);

    // (path, headers, body, expected status, what the message must mention)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "/v1development/profiles",
            proto.to_vec(),
            b"\xff\xff\xff garbage".to_vec(),
            400,
            "invalid OTLP profiles payload",
        ),
        (
            "/v1development/profiles",
            json.to_vec(),
            b"{\"resourceProfiles\": 7}".to_vec(),
            400,
            "resourceProfiles",
        ),
        (
            "/v1development/profiles",
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "gzip"),
            ],
            gzip::gzip(&good)[..100].to_vec(),
            400,
            "gzip",
        ),
        (
            "/v1development/profiles",
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "gzip"),
            ],
            good.clone(),
            400,
            "not gzip",
        ),
        (
            "/v1development/profiles",
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "br"),
            ],
            good.clone(),
            415,
            "Content-Encoding",
        ),
        // 128 MiB of zeros, gzipped to ~130 KB: over the 64 MiB decompressed limit.
        (
            "/v1development/profiles",
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "gzip"),
            ],
            gzip::gzip(&vec![0u8; 128 << 20]),
            413,
            "decompressed",
        ),
        (
            "/v1development/profiles",
            proto.to_vec(),
            vec![7u8; 2 << 20],
            413,
            "",
        ),
        (
            "/v1/traces",
            json.to_vec(),
            b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"zz\"}]}]}]}".to_vec(),
            400,
            "traceId",
        ),
        (
            "/v1/traces",
            proto.to_vec(),
            b"\x0a\x05\x12".to_vec(),
            400,
            "invalid OTLP traces payload",
        ),
        // Text read as protobuf decoded to an empty request and a 200.
        (
            "/v1development/profiles",
            vec![("content-type", "text/plain")],
            b"hi".to_vec(),
            415,
            "Content-Type \"text/plain\" is not supported",
        ),
        (
            "/v1/traces",
            vec![("content-type", "application/x-www-form-urlencoded")],
            b"a=b".to_vec(),
            415,
            "application/x-protobuf or application/json",
        ),
        // A (gzipped) pprof profile is told where pprof goes.
        (
            "/v1development/profiles",
            proto.to_vec(),
            CPU.to_vec(),
            400,
            "this is a pprof profile, not OTLP Profiles: push pprof to /ingest?format=pprof",
        ),
    ];
    for (path, headers, body, want, mentions) in &cases {
        let receiver = match *path {
            "/v1/traces" => "otlp_traces",
            _ => "otlp_profiles",
        };
        let counts = ReceiverMetrics::before(&server.get("/metrics").1, receiver);
        let (status, text) = server.post(path, headers, body);
        assert_eq!(status, *want, "{path} {headers:?}: {text}");
        assert!(
            text.contains(mentions),
            "{path}: the message {text:?} does not mention {mentions:?}"
        );
        let reason = match status {
            413 => "too_large",
            415 => "unsupported",
            _ => "invalid",
        };
        // A body past server.max_body_size is never read whole: no bytes counted.
        let bytes = if body.len() > 1 << 20 { 0 } else { body.len() };
        counts.assert_rejected(&server.get("/metrics").1, bytes, reason);
    }
    // A body neither protobuf nor JSON is answered in text.
    let (status, text) = server.post(
        "/v1/traces",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"a=b",
    );
    assert_eq!(status, 415);
    assert!(text.starts_with("Content-Type \""), "{text:?}");
    // A v1.9-numbered payload is refused with the reason, not misread.
    let mut v19 = Vec::new();
    // ProfilesData{resource_profiles{scope_profiles{profiles{samples{stack_index:1, values(field 2, packed):[5], attribute_indices(field 3, packed):[1]}}}}}
    let sample = [0x08, 0x01, 0x12, 0x01, 0x05, 0x1a, 0x01, 0x01];
    let profile = [&[0x12, sample.len() as u8][..], &sample].concat();
    let scope = [&[0x12, profile.len() as u8][..], &profile].concat();
    let rp = [&[0x12, scope.len() as u8][..], &scope].concat();
    v19.extend([0x0a, rp.len() as u8]);
    v19.extend(rp);
    let (status, text) = server.post("/v1development/profiles", &proto, &v19);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("v1.9"), "{text}");

    // Still serving.
    let (status, _) = server.post("/v1development/profiles", &proto, &good);
    assert_eq!(status, 200);
    server.stop();

    // Both acknowledged requests are on disk, nothing else.
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let (tree, _) = store
        .flame_graph(&Selection {
            service: Some("goapp".into()),
            profile_type: Some("cpu".into()),
            ..Default::default()
        })
        .unwrap();
    let want: i64 = {
        let p = pprof::decode(CPU, 64 << 20).unwrap();
        let cpu = p
            .sample_type
            .iter()
            .position(|t| p.string_table[t.r#type as usize] == "cpu")
            .unwrap();
        p.sample.iter().map(|s| s.value[cpu]).sum()
    };
    assert_eq!(tree.total() as i64, 2 * want);
}

/// OTLP/HTTP: the body of every 4xx and 5xx is a `google.rpc.Status` in the request's
/// encoding, with the content type to match, whichever listener and signal.
#[test]
fn otlp_http_failures_answer_a_status_in_the_request_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| c.server.max_body_size = 1 << 20);
    let proto = [("content-type", "application/x-protobuf")];
    let json = [("content-type", "application/json")];
    // (path, headers, body, status, gRPC code, what the message mentions)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        Vec<u8>,
        u16,
        i32,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "/v1development/profiles",
            &proto,
            b"\x12\x05\x3a\x03\x0d\x01\x00".to_vec(),
            400,
            3,
            "dictionary.stack_table[0]: Stack field 1 has wire type 5",
        ),
        (
            "/v1/traces",
            &proto,
            b"\x0a\x05\x12".to_vec(),
            400,
            3,
            "invalid OTLP traces payload",
        ),
        (
            "/v1development/profiles",
            &proto,
            vec![7u8; 2 << 20],
            413,
            8,
            "larger than the server's limit",
        ),
    ];
    for (path, headers, body, want, code, mentions) in cases {
        let (status, head, body) = server.post_raw(path, headers, &body);
        assert_eq!(status, want, "{path}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/x-protobuf"),
            "{path}: {head}"
        );
        // google.rpc.Status on the wire: field 1 (code) a varint, then field 2 (message).
        assert_eq!(body[..3], [0x08, code as u8, 0x12], "{path}: {body:?}");
        let s = RpcStatus::decode(body.as_slice())
            .unwrap_or_else(|e| panic!("{path}: the body is not a google.rpc.Status: {e}"));
        assert_eq!(s.code, code, "{path}: {s:?}");
        assert!(s.message.contains(mentions), "{path}: {s:?}");
    }
    // JSON requests get the Status as JSON.
    let bad_json = b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"zz\"}]}]}]}";
    for (path, body) in [
        ("/v1/traces", &bad_json[..]),
        ("/v1development/profiles", b"{\"resourceProfiles\": 7}"),
    ] {
        let (status, head, body) = server.post_raw(path, &json, body);
        assert_eq!(status, 400, "{path}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{path}: {head}"
        );
        let s: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{path}: the body is not JSON: {e}"));
        assert_eq!(s["code"], 3, "{path}: {s}");
        assert!(
            s["message"].as_str().unwrap().starts_with("invalid OTLP"),
            "{path}: {s}"
        );
    }
    server.stop();
}

/// A length-delimited protobuf field.
fn field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for mut v in [number << 3 | 2, payload.len() as u64] {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out.extend_from_slice(payload);
    out
}

/// Peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kb * 1024
}

/// Bodies of empty elements (two bytes each on the wire, a whole struct in memory) gzip to
/// almost nothing: every receiver refuses them as too large once decoded, before decoding
/// them, and goes on serving. Before the decoders had a budget, the traces body alone took
/// the server to 4.6 GB of memory.
#[test]
fn decompression_bombs_of_empty_elements_are_413_on_every_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    const N: usize = 16 << 20; // elements: 32 MiB of protobuf
    let empty = |number: u64| field(number, &[]).repeat(N);
    let objects = vec!["{}"; N / 2].join(",");
    let gz = |body: &[u8]| gzip::gzip(body);
    let proto_gz = [
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "gzip"),
    ];
    let json_gz = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    // (path, headers, gzipped body, expected status)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Vec<u8>, u16);
    let cases: Vec<Case> = vec![
        (
            "/v1development/profiles",
            &proto_gz,
            gz(&field(1, &field(2, &field(2, &empty(2))))),
            413,
        ),
        (
            "/v1development/profiles",
            &json_gz,
            gz(format!(
                r#"{{"resourceProfiles":[{{"scopeProfiles":[{{"profiles":[{{"samples":[{objects}]}}]}}]}}]}}"#
            )
            .as_bytes()),
            413,
        ),
        ("/v1/traces", &proto_gz, gz(&field(1, &field(2, &empty(2)))), 413),
        (
            "/v1/traces",
            &json_gz,
            gz(format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{objects}]}}]}}]}}"#)
                .as_bytes()),
            413,
        ),
        (
            "/ingest?name=bomb&format=pprof",
            &[("content-encoding", "gzip")],
            gz(&empty(2)),
            413,
        ),
        // Too large for good: Connect's invalid_argument (resource_exhausted would be retried).
        (
            "/push.v1.PusherService/Push",
            &[
                ("content-type", "application/proto"),
                ("content-encoding", "gzip"),
            ],
            gz(&empty(1)),
            413,
        ),
        (
            "/push.v1.PusherService/Push",
            &json_gz,
            gz(format!(r#"{{"series":[{objects}]}}"#).as_bytes()),
            413,
        ),
    ];
    for (path, headers, body, want) in &cases {
        assert!(body.len() < 256 << 10, "{path}: a {} byte body", body.len());
        let (status, text) = server.post(path, headers, body);
        assert_eq!(status, *want, "{path} {headers:?}: {text}");
        assert!(
            text.contains("once decoded") && text.contains("empty elements"),
            "{path}: {text}"
        );
    }
    let peak = peak_rss();
    assert!(
        peak < 1536 << 20,
        "the bombs took this process to {} MiB",
        peak >> 20
    );
    // Still serving.
    server.stores_a_real_profile();
    server.stop();
}

/// What decoders allocate is charged to the in-flight budget as they allocate it. Within its
/// own decode budget (16 times its size) a body of 24 M empty strings (48 MiB from 48 KB of
/// gzip) decodes to 576 MB of `String`s, and eight such uploads at once took the server to
/// 2.6 GB. Past what the whole budget holds, each receiver answers 413 naming
/// `server.max_inflight_size`, gives every byte back, and goes on serving.
#[test]
fn what_decoders_allocate_is_charged_to_the_in_flight_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| c.server.max_inflight_size = 160 << 20);
    const N: usize = 24 << 20;
    let gz = |body: &[u8]| gzip::gzip(body);
    // pprof: string_table is field 6.
    let pprof_strings = gz(&field(6, &[]).repeat(N));
    // OTLP: ProfilesData.dictionary (2), ProfilesDictionary.string_table (5).
    let otlp_strings = gz(&field(2, &field(5, &[]).repeat(N)));
    // Traces: spans with a name (`Span` is a few hundred bytes: empty ones would pass the
    // request's own budget), resource_spans (1) . scope_spans (2) . spans (2) . name (5).
    let span = field(2, &field(5, b"GET /cpu-heavy/padding-0123"));
    let spans = span.repeat((48 << 20) / span.len());
    let traces = gz(&field(1, &field(2, &spans)));
    let push = push_request("bomb", &pprof_strings);
    let proto_gz = [
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "gzip"),
    ];
    // (path, headers, body)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8]);
    // OTLP JSON: 16 M empty strings of the dictionary; spans with a name.
    let otlp_json = gz(format!(
        r#"{{"dictionary":{{"stringTable":[{}""]}}}}"#,
        r#""","#.repeat(16 << 20)
    )
    .as_bytes());
    let named = r#"{"name":"GET /cpu-heavy/padding"},"#;
    let traces_json = gz(format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}{{}}]}}]}}]}}"#,
        named.repeat((48 << 20) / named.len())
    )
    .as_bytes());
    let json_gz = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    let cases: [Case; 6] = [
        (
            "/ingest?name=bomb&format=pprof",
            &[("content-encoding", "gzip")],
            &pprof_strings,
        ),
        (
            "/push.v1.PusherService/Push",
            &[("content-type", "application/proto")],
            &push,
        ),
        ("/v1development/profiles", &proto_gz, &otlp_strings),
        ("/v1/traces", &proto_gz, &traces),
        ("/v1development/profiles", &json_gz, &otlp_json),
        ("/v1/traces", &json_gz, &traces_json),
    ];
    for (path, headers, body) in cases {
        assert!(body.len() < 512 << 10, "{path}: a {} byte body", body.len());
        let (status, text) = server.post(path, headers, body);
        assert_eq!(status, 413, "{path}: {text}");
        assert!(
            text.contains("memory to decode") && text.contains("server.max_inflight_size"),
            "{path}: {text}"
        );
        assert_eq!(metric(&server, "spanprof_inflight_bytes"), 0.0, "{path}");
    }
    server.stores_a_real_profile();
    server.stop();
}

/// Profiles within the body limits but past the per-profile ones (samples, locations, stack
/// frames) are refused with a 413 naming the count, the limit and its setting, whatever the
/// receiver, before they are converted or stored: their symbols would be kept for good (4 M
/// distinct folded lines, 9 MB gzipped, took the server to 3.5 GB and left it at 3.0 GB).
#[test]
fn profiles_past_the_per_profile_limits_are_413_on_every_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let limits = spanprof_format::limits::ProfileLimits::default();
    let real = pprof::decode(CPU, 64 << 20).unwrap();
    // One stack of a location repeated past the frame limit (recursion, or a made-up one).
    let mut deep = real.clone();
    deep.sample[0].location_id = vec![real.sample[0].location_id[0]; limits.max_frames + 1];
    // One sample repeated past the sample limit (as a span label on each would keep them).
    let mut many = real.clone();
    many.sample = vec![real.sample[0].clone(); limits.max_samples + 1];
    let folded: String = (0..=limits.max_samples)
        .map(|i| format!("main;f{i} 1\n"))
        .collect();
    let folded_locations: String = (0..limits.max_locations / 2 + 1)
        .map(|i| format!("a{i};b{i} 1\n"))
        .collect();
    let deep_otlp = spanprof_format::to_otlp::pprof_to_otlp(&deep, Resource::default(), None)
        .unwrap()
        .0
        .encode_to_vec();
    let label = |name: &str, value: &str| {
        field(
            1,
            &[field(1, name.as_bytes()), field(2, value.as_bytes())].concat(),
        )
    };
    let push = |pprof_gz: &[u8]| {
        let series = [
            label("__name__", "process_cpu"),
            label("service_name", "limits"),
            field(2, &field(1, pprof_gz)),
        ]
        .concat();
        gzip::gzip(&field(1, &series))
    };
    let gz = [("content-encoding", "gzip")];
    let proto_gz = [
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "gzip"),
    ];
    let push_gz = [
        ("content-type", "application/proto"),
        ("content-encoding", "gzip"),
    ];
    // (path, headers, body, expected status, what the message names)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Vec<u8>, u16, &'a str);
    // One frame of a megabyte: a function name past the string length limit.
    let long_name = format!("main;{} 1\n", "f".repeat(1 << 20));
    let mut long_pprof = pprof::decode(CPU, 64 << 20).unwrap();
    long_pprof
        .string_table
        .push("g".repeat(limits.max_string_bytes + 1));
    long_pprof.function[0].name = long_pprof.string_table.len() as i64 - 1;
    let long_otlp = spanprof_format::to_otlp::pprof_to_otlp(&long_pprof, Resource::default(), None)
        .unwrap()
        .0
        .encode_to_vec();
    let cases: Vec<Case> = vec![
        (
            "/ingest?name=limits&format=folded",
            &gz,
            gzip::gzip(long_name.as_bytes()),
            413,
            "max_profile_string_length",
        ),
        (
            "/ingest?name=limits&format=pprof",
            &[],
            pprof::encode_gzip(&long_pprof),
            413,
            "max_profile_string_length",
        ),
        (
            "/v1development/profiles",
            &proto_gz,
            gzip::gzip(&long_otlp),
            413,
            "max_profile_string_length",
        ),
        (
            "/ingest?name=limits&format=folded",
            &gz,
            gzip::gzip(folded.as_bytes()),
            413,
            "max_profile_samples",
        ),
        (
            "/ingest?name=limits&format=folded",
            &gz,
            gzip::gzip(folded_locations.as_bytes()),
            413,
            "max_profile_locations",
        ),
        (
            "/ingest?name=limits&format=pprof",
            &[],
            pprof::encode_gzip(&many),
            413,
            "max_profile_samples",
        ),
        (
            "/ingest?name=limits&format=pprof",
            &[],
            pprof::encode_gzip(&deep),
            413,
            "max_profile_frames",
        ),
        (
            "/v1development/profiles",
            &proto_gz,
            gzip::gzip(&deep_otlp),
            413,
            "max_profile_frames",
        ),
        // Too large for good: Connect's invalid_argument (resource_exhausted would be retried).
        (
            "/push.v1.PusherService/Push",
            &push_gz,
            push(&pprof::encode_gzip(&many)),
            413,
            "max_profile_samples",
        ),
    ];
    for (path, headers, body, want, names) in &cases {
        let (status, text) = server.post(path, headers, body);
        assert_eq!(status, *want, "{path} {headers:?}: {text}");
        assert!(
            text.contains("more than the limit of") && text.contains(names),
            "{path}: {text}"
        );
    }
    // Real profiles are well within them, on the same receivers.
    let (status, text) = server.post(
        "/ingest?name=limits&format=pprof",
        &[],
        &pprof::encode_gzip(&real),
    );
    assert_eq!(status, 200, "{text}");
    server.stores_a_real_profile();
    server.stop();
}

/// A profile the store refuses is not acknowledged as stored: OTLP answers 200 with the
/// refused profiles counted and named in `partial_success` (the spec's partial success),
/// `/ingest` a 400 naming the problem. Here the store's limit on the series one profile may
/// make (distinct sample label sets) is set below the real Go profile's.
#[test]
fn profiles_the_store_refuses_are_reported_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| c.server.max_profile_series = 1);
    let partial = server.otlp_partial_success(&otlp_request());
    // Both sample types of the CPU profile.
    assert_eq!(partial.rejected_profiles, 2, "{}", partial.error_message);
    assert!(
        partial
            .error_message
            .contains("more than the limit of 1 (server.max_profile_series)"),
        "{}",
        partial.error_message
    );
    // In OTLP/JSON too, with the count (an int64: a string), without which a client reads
    // the message as a warning about data that was all stored; the answer is in the
    // request's content type.
    let data = spanprof_format::otlp::ProfilesData::decode(&otlp_request()[..]).unwrap();
    let json = spanprof_format::json::encode_profiles_data(&data);
    let (status, head, body) = server.post_raw(
        "/v1development/profiles",
        &[("content-type", "application/json")],
        json.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(head.contains("content-type: application/json"), "{head}");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["partialSuccess"]["rejectedProfiles"], "2",
        "{answer}"
    );
    assert_eq!(
        answer["partialSuccess"]["errorMessage"],
        partial.error_message.as_str()
    );
    let (status, head, _) = server.post_raw(
        "/v1development/profiles",
        &[("content-type", "application/protobuf")],
        &otlp_request(),
    );
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/protobuf"),
        "{head}"
    );
    let (status, text) = server.post("/ingest?name=refused&format=pprof", &[], CPU);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("refused by the store") && text.contains("server.max_profile_series"),
        "{text}"
    );
    // Named as the pprof's sample types, not as places in an OTLP request it never sent.
    assert!(
        text.contains("the cpu/nanoseconds samples of refused: ")
            && !text.contains("resource_profiles["),
        "{text}"
    );
    server.stop();
    // Nothing of them was stored.
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    assert_eq!(store.stats().samples, 0);
}

/// A Pyroscope upload is stored all or none: its only answers are 200 and an error, so a
/// pprof of which one sample type is refused (here a negative CPU time) leaves none of its
/// others stored either; a client sending it again corrected would otherwise store its
/// sample counts twice.
#[test]
fn a_pyroscope_upload_with_one_refused_sample_type_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let mut p = pprof::decode(CPU, 64 << 20).unwrap();
    let cpu = p
        .sample_type
        .iter()
        .position(|t| p.string_table[t.r#type as usize] == "cpu")
        .unwrap();
    p.sample[0].value[cpu] = -1;
    let bad = pprof::encode_gzip(&p);
    let (status, text) = server.post("/ingest?name=halfbad&format=pprof", &[], &bad);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("the cpu/nanoseconds samples of halfbad: ")
            && text.contains("negative")
            && text.contains("(nothing of the upload was stored: send it again corrected)"),
        "{text}"
    );
    let push = push_request("halfbad-push", &bad);
    let (status, text) = server.post(
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        &push,
    );
    assert_eq!(status, 400, "{text}");
    // The same profile corrected is stored whole, once.
    p.sample[0].value[cpu] = 1;
    let (status, text) = server.post(
        "/ingest?name=halfbad&format=pprof",
        &[],
        &pprof::encode_gzip(&p),
    );
    assert_eq!(status, 200, "{text}");
    server.stop();
    // What the corrected upload stores on its own.
    let alone = tempfile::tempdir().unwrap();
    let reference = Server::start(alone.path(), |_| {});
    let (status, text) = reference.post(
        "/ingest?name=halfbad&format=pprof",
        &[],
        &pprof::encode_gzip(&p),
    );
    assert_eq!(status, 200, "{text}");
    reference.stop();
    let stats = |dir: &std::path::Path| {
        let (store, _) = Store::open(StoreConfig::new(dir)).unwrap();
        let s = store.stats();
        (store.services(0, 0), s.series, s.blocks, s.samples)
    };
    let (services, series, blocks, samples) = stats(dir.path());
    assert_eq!(services, ["halfbad"]);
    assert!(blocks > 0 && samples > 0);
    assert_eq!((services, series, blocks, samples), stats(alone.path()));
}

/// A profile whose link names a span id of the wrong length is refused alone, in OTLP's
/// partial success, naming it: the other profiles of the request (here the real Go profile's
/// two sample types) are stored, and the exporter is not told to drop them all (400).
#[test]
fn a_profile_with_a_bad_link_is_refused_and_the_rest_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let mut data = spanprof_format::otlp::ProfilesData::decode(&otlp_request()[..]).unwrap();
    let d = data.dictionary.as_mut().unwrap();
    if d.link_table.is_empty() {
        d.link_table.push(spanprof_format::otlp::Link::default());
    }
    d.link_table.push(spanprof_format::otlp::Link {
        trace_id: vec![1; 16],
        span_id: vec![2; 5],
    });
    let bad_link = d.link_table.len() as i32 - 1;
    let profiles = &mut data.resource_profiles[0].scope_profiles[0].profiles;
    let mut bad = profiles[0].clone();
    bad.samples[3].link_index = bad_link;
    profiles.push(bad);
    let partial = server.otlp_partial_success(&data.encode_to_vec());
    assert_eq!(partial.rejected_profiles, 1, "{}", partial.error_message);
    assert!(
        partial.error_message.contains(
            "profiles[2].samples[3].link_index: link_table[1].span_id has 5 bytes, a span id has 8"
        ),
        "{}",
        partial.error_message
    );
    assert_eq!(metric(&server, "spanprof_stored_profiles_total"), 2.0);
    // The same request in OTLP/JSON (the ids in hex, the bad one 10 digits) is answered
    // the same: the wrong length is judged where protobuf's is, not when the JSON is read.
    let json = spanprof_format::json::encode_profiles_data(&data);
    let (status, _, body) = server.post_raw(
        "/v1development/profiles",
        &[("content-type", "application/json")],
        json.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["partialSuccess"]["rejectedProfiles"], "1",
        "{answer}"
    );
    assert_eq!(
        answer["partialSuccess"]["errorMessage"],
        partial.error_message.as_str()
    );
    // Every profile bad: the request is refused whole.
    let profiles = &mut data.resource_profiles[0].scope_profiles[0].profiles;
    profiles.truncate(1);
    profiles[0].samples[0].link_index = bad_link;
    let (status, text) = server.post(
        "/v1development/profiles",
        &[("content-type", "application/x-protobuf")],
        &data.encode_to_vec(),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("span id has 8"), "{text}");
    server.stop();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    // The good profiles of the protobuf and of the JSON request (they have no profile_id to
    // tell them as one): two sample types each.
    assert_eq!(store.stats().samples, 2 * 2 * p.sample.len() as u64);
}

/// A span whose id has the wrong length is rejected alone in OTLP/JSON, as in protobuf: the
/// other spans of the request are stored, and the answer counts and names the rejected one.
#[test]
fn a_json_span_with_a_wrong_length_id_is_rejected_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let span = |id: &str| {
        format!(
            r#"{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"{id}","name":"GET /x",
               "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000100000000"}}"#
        )
    };
    let body = format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc"}}}}]}},
            "scopeSpans":[{{"spans":[{},{}]}}]}}]}}"#,
        span("b7ad6b7169203331"),
        span("b7ad6b71692033")
    );
    let (status, _, answer) = server.post_raw(
        "/v1/traces",
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], "1", "{answer}");
    let message = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("spans[1].span_id: 7 bytes, a span id has 8"),
        "{message}"
    );
    assert_eq!(metric(&server, "spanprof_stored_spans_total"), 1.0);
    server.stop();
}

/// A request sent again (a client whose answer was lost) is acknowledged as the first was,
/// and its profiles, which name themselves (`profile_id`), are stored once and counted as
/// repeated: a flame graph of their time does not count them twice.
#[test]
fn a_request_sent_again_is_acknowledged_and_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let mut data = spanprof_format::otlp::ProfilesData::decode(&otlp_request()[..]).unwrap();
    for (i, p) in data.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter_mut()
        .enumerate()
    {
        p.profile_id = vec![i as u8 + 1; 16];
    }
    let request = data.encode_to_vec();
    for _ in 0..2 {
        let (status, _, body) = server.post_raw(
            "/v1development/profiles",
            &[("content-type", "application/x-protobuf")],
            &request,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer =
            spanprof_format::otlp::ExportProfilesServiceResponse::decode(&body[..]).unwrap();
        assert_eq!(answer.partial_success, None);
    }
    assert_eq!(metric(&server, "spanprof_stored_profiles_total"), 2.0);
    assert_eq!(metric(&server, "spanprof_repeated_profiles_total"), 2.0);
    server.stop();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    // Both sample types of each sample, once.
    assert_eq!(store.stats().samples, 2 * p.sample.len() as u64);
}

/// The store's series limits, end to end: past `storage.max_series` a profile that would
/// make a new series is refused naming the setting and the series, while profiles of the
/// series already there are still stored; a label value past its limit is refused on
/// `/ingest` (a tag in `name`) and on OTLP (a long resource attribute, as a process's command
/// line can be), naming the label; `/metrics` counts them as refused for a limit.
#[test]
fn series_limits_refuse_new_series_and_keep_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| c.storage.max_series = 3);
    let folded = |pod: &str| {
        server.post(
            &format!(
                "/ingest?name=app%7Bpod%3D{pod}%7D&format=folded&from=1700000000&until=1700000010"
            ),
            &[],
            b"main;work 10\n",
        )
    };
    for pod in ["p1", "p2", "p3", "p1"] {
        let (status, text) = folded(pod);
        assert_eq!(status, 200, "{pod}: {text}");
    }
    let (status, text) = folded("p4");
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("the store holds 3 series, its limit (storage.max_series)")
            && text.contains("pod=\"p4\""),
        "{text}"
    );
    let long = "x".repeat(3000);
    let (status, text) = folded(&long);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains(
            "the value of label \"pod\" is 3000 bytes, more than the limit of 2048 \
             (server.max_label_value_length)"
        ),
        "{text}"
    );

    // OTLP: the real Go profile, its resource with a long command line.
    let mut request =
        spanprof_format::otlp::ExportProfilesServiceRequest::decode(&otlp_request()[..]).unwrap();
    let resource = request.resource_profiles[0]
        .resource
        .get_or_insert_default();
    resource.attributes.push(KeyValue {
        key: "process.command_line".into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "/usr/bin/java -cp {long}"
            ))),
        }),
        ..Default::default()
    });
    let partial = server.otlp_partial_success(&request.encode_to_vec());
    assert_eq!(partial.rejected_profiles, 2, "{}", partial.error_message);
    assert!(
        partial.error_message.contains(
            "the value of label \"process.command_line\" is 3018 bytes, more than the limit \
             of 2048 (server.max_label_value_length)"
        ),
        "{}",
        partial.error_message
    );

    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"spanprof_rejected_total{receiver="store",reason="limit"} 4"#)
            && metrics.contains("spanprof_store_series 3\n")
            && metrics.contains("spanprof_store_max_series 3\n")
            && metrics.contains("spanprof_store_max_symbols_bytes 134217728\n"),
        "{metrics}"
    );
    let symbol_bytes: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("spanprof_store_symbols_bytes "))
        .expect("spanprof_store_symbols_bytes")
        .parse()
        .unwrap();
    // The folded stacks' two frames only: the refused Go profile's symbols (kilobytes) went
    // with it.
    assert!(
        symbol_bytes > 0.0 && symbol_bytes < 1_000.0,
        "{symbol_bytes}"
    );
    server.stop();
    // What was acknowledged is there: three series, p1 twice.
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    assert_eq!(store.stats().series, 3);
    let total = |selector: &str| {
        let sel = Selection {
            label_selector: Some(selector.into()),
            ..Default::default()
        };
        store.flame_graph(&sel).unwrap().0.total()
    };
    // 10 samples an upload, at the default 100 Hz: 10 ms of CPU each.
    assert_eq!(total(r#"{pod="p1"}"#), 2 * 10 * 10_000_000);
    assert_eq!(total(r#"{pod=~"p.*"}"#), 4 * 10 * 10_000_000);
}

/// A push's profiles share one decompression limit (the request's, `max_decompressed_size`):
/// many small gzip bombs in one push were each within it, and together took gigabytes.
#[test]
fn a_push_decompresses_at_most_the_limit_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let raw = spanprof_format::gzip::gunzip(CPU, 64 << 20).unwrap();
    // Room for three copies of the real profile, decompressed.
    let server = Server::start(dir.path(), |c| {
        c.server.max_decompressed_size = 3 * raw.len() + raw.len() / 2;
    });
    let label = |name: &str, value: &str| {
        field(
            1,
            &[field(1, name.as_bytes()), field(2, value.as_bytes())].concat(),
        )
    };
    let push = |copies: usize| {
        let mut series = [
            label("__name__", "process_cpu"),
            label("service_name", "pushed"),
        ]
        .concat();
        for _ in 0..copies {
            series.extend(field(2, &field(1, CPU)));
        }
        field(1, &series)
    };
    let headers = [("content-type", "application/proto")];
    let (status, text) = server.post("/push.v1.PusherService/Push", &headers, &push(3));
    assert_eq!(status, 200, "{text}");
    let (status, text) = server.post("/push.v1.PusherService/Push", &headers, &push(4));
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("invalid_argument")
            && text.contains("series[0].samples[3]: the request's profiles are larger than")
            && text.contains("once decompressed, together (server.max_decompressed_size)"),
        "{text}"
    );
    // A second gzip layer would be decompressed outside the limit: refused.
    let twice = field(
        1,
        &[
            label("__name__", "process_cpu"),
            label("service_name", "pushed"),
            field(2, &field(1, &spanprof_format::gzip::gzip(CPU))),
        ]
        .concat(),
    );
    let (status, text) = server.post("/push.v1.PusherService/Push", &headers, &twice);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("gzip inside gzip"), "{text}");
    server.stores_a_real_profile();
    server.stop();
}

/// `/metrics`' value of an unlabelled metric.
fn metric(server: &Server, name: &str) -> f64 {
    let (_, text) = server.get("/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no {name}:\n{text}"))
}

/// A client that goes away in the middle of a body is counted and logged as `aborted`, with
/// what arrived, not as a bad request: a flaky network does not look like broken clients.
#[test]
fn a_client_leaving_mid_body_is_counted_as_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |_| {});
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(
        b"POST /ingest?name=app&format=pprof HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n0123456789",
    )
    .unwrap();
    wait_for("the first bytes to be charged", || {
        metric(&server, "spanprof_inflight_bytes") == 10.0
    });
    drop(s);
    let aborted = r#"spanprof_rejected_total{receiver="pyroscope_ingest",reason="aborted"}"#;
    wait_for("the abort to be counted", || {
        server.get("/metrics").1.contains(&format!("{aborted} 1"))
    });
    let (_, metrics) = server.get("/metrics");
    assert!(!metrics.contains(r#"reason="invalid""#), "{metrics}");
    assert_eq!(metric(&server, "spanprof_inflight_bytes"), 0.0);
    server.stores_a_real_profile();
    server.stop();
}

/// `n` uploads that announce 1 MiB each and send all of it but a byte: each holds 1 MiB of the
/// in-flight budget (what arrived is charged) until its connection is dropped.
fn hold_uploads(server: &Server, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            let head = format!(
                "POST /ingest?name=slow&format=pprof HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                1 << 20
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(&vec![b'x'; (1 << 20) - 1]).unwrap();
            s
        })
        .collect()
}

/// Folded text is charged to the in-flight budget before it is parsed, as much as its parse
/// could take: an upload that alone could need more than the budget is a 413 naming it, and
/// while other uploads hold the budget one that fits alone is a 429 (eight uploads of one
/// 31 M-frame line at once took the server to 1.97 GB).
#[test]
fn folded_text_is_charged_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| {
        c.server.max_body_size = 1 << 20;
        c.server.max_decompressed_size = 2 << 20;
        c.server.max_inflight_size = 8 << 20;
    });
    // 1 MB of one line: its parse could take 8 MB of frames, past the 8 MiB budget with it.
    let line = format!("{}a 1\n", "a;".repeat(500_000));
    let (status, text) = server.post("/ingest?name=long&format=folded", &[], line.as_bytes());
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("server.max_inflight_size"), "{text}");
    // 200 KB fits alone (about 1.8 MB to parse): taken.
    let small = format!("{}a 1\n", "a;".repeat(100_000));
    let (status, text) = server.post("/ingest?name=long&format=folded", &[], small.as_bytes());
    assert_eq!(status, 200, "{text}");
    // Seven uploads held at 1 MiB each leave 1 MiB of the budget: the 200 KB body fits, the
    // 1.8 MB its parse could take does not: 429.
    let held = hold_uploads(&server, 7);
    wait_for("seven held uploads to be charged", || {
        metric(&server, "spanprof_inflight_bytes") == (7 << 20) as f64
    });
    let (status, text) = server.post("/ingest?name=long&format=folded", &[], small.as_bytes());
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("server is busy"), "{text}");
    drop(held);
    wait_for("the held uploads' bytes to come back", || {
        metric(&server, "spanprof_inflight_bytes") == 0.0
    });
    let (status, text) = server.post("/ingest?name=long&format=folded", &[], small.as_bytes());
    assert_eq!(status, 200, "{text}");
    server.stop();
}

/// Request bodies held at once are bounded across receivers (`server.max_inflight_size`): past
/// it a request is a 429 with `Retry-After` in each receiver's protocol, counted in `/metrics`,
/// whether its body as sent or its decompressed copy would not fit; the bytes come back as
/// requests end, and the server takes requests again.
#[test]
fn request_bodies_held_at_once_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| {
        c.server.max_body_size = 1 << 20;
        c.server.max_decompressed_size = 2 << 20;
        c.server.max_inflight_size = 3 << 20;
    });
    // Three uploads that announce 1 MiB each and send all of it but a byte: they hold the
    // whole budget, the memory their bodies take as they grow (up to what they announced).
    // What arrived is charged, not what is announced: announcing 1 MiB and sending a byte
    // now and then holds a byte.
    let mut held = hold_uploads(&server, 3);
    wait_for("three held uploads to be charged", || {
        metric(&server, "spanprof_inflight_bytes") == (3 << 20) as f64
    });
    assert_eq!(
        metric(&server, "spanprof_max_inflight_bytes"),
        (3 << 20) as f64
    );

    let proto = [("content-type", "application/x-protobuf")];
    let good = otlp_request();
    let (status, head, body) = server.post_raw("/v1development/profiles", &proto, &good);
    assert_eq!(status, 429, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let rpc = RpcStatus::decode(&body[..]).unwrap();
    assert_eq!(rpc.code, 8, "RESOURCE_EXHAUSTED");
    assert!(
        rpc.message.contains("server is busy") && rpc.message.contains("server.max_inflight_size"),
        "{}",
        rpc.message
    );
    let (status, text) = server.post("/ingest?name=app", &[], b"main;work 1\n");
    assert_eq!(status, 429, "{text}");
    let (status, text) = server.post(
        "/push.v1.PusherService/Push",
        &[("content-type", "application/json")],
        b"{\"series\": []}",
    );
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("resource_exhausted"), "{text}");
    let (_, metrics) = server.get("/metrics");
    for receiver in ["otlp_profiles", "pyroscope_ingest", "pyroscope_push"] {
        let line =
            format!(r#"spanprof_rejected_total{{receiver="{receiver}",reason="inflight_full"}} 1"#);
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }

    // An upload that ends (here: its client goes away) gives its bytes back.
    drop(held.remove(0));
    wait_for("the dropped upload's bytes to come back", || {
        metric(&server, "spanprof_inflight_bytes") == (2 << 20) as f64
    });
    // 1 MiB left: a small gzip body fits, but not once it is decompressed to 1.5 MiB.
    let bomb = gzip::gzip(&vec![0u8; 3 << 19]);
    let (status, _, body) = server.post_raw(
        "/v1development/profiles",
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ],
        &bomb,
    );
    assert_eq!(status, 429);
    let rpc = RpcStatus::decode(&body[..]).unwrap();
    assert!(
        rpc.message.contains("larger, decompressed"),
        "{}",
        rpc.message
    );
    assert_eq!(metric(&server, "spanprof_inflight_bytes"), (2 << 20) as f64);
    // The same inside a request: a gzip profile in a multipart upload (as pyroscope-go sends
    // it), and in a push message.
    let boundary = "b0und4ry";
    let mut upload = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n\r\n"
    )
    .into_bytes();
    upload.extend_from_slice(&bomb);
    upload.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let form = format!("multipart/form-data; boundary={boundary}");
    let (status, text) = server.post("/ingest?name=app", &[("content-type", &form)], &upload);
    assert_eq!(status, 429, "{text}");
    assert!(
        text.contains("the profile is larger, decompressed"),
        "{text}"
    );
    let push = push_request("app", &bomb);
    let (status, text) = server.post(
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        &push,
    );
    assert_eq!(status, 429, "{text}");
    assert!(
        text.contains("series[0].samples[0]: the profile is larger, decompressed"),
        "{text}"
    );
    assert_eq!(metric(&server, "spanprof_inflight_bytes"), (2 << 20) as f64);
    let (status, text) = server.post("/v1development/profiles", &proto, &good);
    assert_eq!(status, 200, "{text}");
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains(
            r#"spanprof_rejected_total{receiver="otlp_profiles",reason="inflight_full"} 2"#
        ),
        "{metrics}"
    );
    drop(held);
    wait_for("every held upload's bytes to come back", || {
        metric(&server, "spanprof_inflight_bytes") == 0.0
    });
}

/// A body is charged the memory it holds, not only the bytes that arrived: its buffer
/// doubles as they come, then, once a mebibyte has arrived, takes all that was announced at
/// once (doubling buffers held up to twice what arrived, and as much again freed on the way:
/// 60 uploads of 31 MB took the server to 1.4 GB within a budget of 512 MiB).
#[test]
fn a_body_is_charged_the_memory_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), |c| {
        c.server.max_body_size = 8 << 20;
        c.server.max_inflight_size = 64 << 20;
    });
    let sent = vec![b'x'; 3 << 20];
    let mut announced = TcpStream::connect(server.addr).unwrap();
    announced
        .write_all(
            format!(
                "POST /ingest?name=slow&format=pprof HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                4 << 20
            )
            .as_bytes(),
        )
        .unwrap();
    announced.write_all(&sent).unwrap();
    wait_for("room for all the announced body", || {
        metric(&server, "spanprof_inflight_bytes") == (4 << 20) as f64
    });
    drop(announced);
    wait_for("its bytes to come back", || {
        metric(&server, "spanprof_inflight_bytes") == 0.0
    });
    // Chunked, without a length: doubling, never less than what arrived.
    let mut chunked = TcpStream::connect(server.addr).unwrap();
    chunked
        .write_all(
            b"POST /ingest?name=slow&format=pprof HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
    chunked
        .write_all(format!("{:x}\r\n", sent.len()).as_bytes())
        .unwrap();
    chunked.write_all(&sent).unwrap();
    wait_for("the chunked body to be charged", || {
        let held = metric(&server, "spanprof_inflight_bytes");
        held >= (3 << 20) as f64 && held <= (6 << 20) as f64
    });
    drop(chunked);
}

/// A `push.v1` request (protobuf) of one series, `service`'s, with one raw pprof.
fn push_request(service: &str, pprof: &[u8]) -> Vec<u8> {
    pushv1::PushRequest {
        series: vec![pushv1::RawProfileSeries {
            labels: vec![pushv1::LabelPair {
                name: "service_name".into(),
                value: service.into(),
            }],
            samples: vec![pushv1::RawSample {
                raw_profile: pprof.to_vec(),
                id: String::new(),
            }],
        }],
    }
    .encode_to_vec()
}
