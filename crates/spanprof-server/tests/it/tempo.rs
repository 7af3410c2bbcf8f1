//! The Tempo API against the real server: the real Go CPU profile and spans for its span ids
//! (plus a gateway parent and a database child without samples) go in over OTLP/HTTP; the
//! trace endpoints must mark exactly the spans with something to show with
//! `pyroscope.profile.id` — the spans whose `SelectMergeSpanProfile` is not empty, by
//! default their own samples, with `span_profiles_include_children` their subtree's —,
//! search must find traces like Tempo, and Grafana's Traces-to-profiles flow must open the
//! slow span's flame graph.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::OnceLock;

use common::goprofile::{GoData, SpanTruth, CACHE_SPAN, CPU_TYPE, DB_SPAN, HOT_FUNCTION, SERVICE};
use prost::Message;
use serde_json::Value;
use spanprof_format::link::to_hex;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};
use spanprof_format::trace::{
    encode_request_json, ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status,
    TracesData,
};
use spanprof_store::store::{Store, StoreConfig};
use spanprof_testkit::server::{enc, TestServer, DEADLINE};

/// A parent without samples above the heaviest request span (gets the link by roll-up only).
const GATEWAY: [u8; 8] = [0x9a; 8];
/// A child of [`DB_SPAN`] without samples (neither gets the link).
const DB_CHILD: [u8; 8] = [0xdc; 8];
const PROFILE_ID: &str = "pyroscope.profile.id";

/// One span as sent.
#[derive(Debug, Clone)]
struct Sent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    start_ns: u64,
    end_ns: u64,
    /// Has samples itself.
    own_samples: bool,
}

struct Fixture {
    server: TestServer,
    data: GoData,
    spans: Vec<Sent>,
    /// The server's `span_profiles_include_children`.
    include_children: bool,
}

impl Fixture {
    fn trace_spans(&self, trace: &[u8; 16]) -> Vec<&Sent> {
        self.spans.iter().filter(|s| s.trace_id == *trace).collect()
    }

    /// Spans with something to show: samples of their own, or (with child roll-up) below
    /// them.
    fn expected_profiled(&self) -> BTreeSet<[u8; 8]> {
        let mut out = BTreeSet::new();
        for s in self.spans.iter().filter(|s| s.own_samples) {
            if !self.include_children {
                out.insert(s.span_id);
                continue;
            }
            let mut at = Some(s.span_id);
            while let Some(id) = at {
                if !out.insert(id) {
                    break;
                }
                at = self.spans.iter().find(|p| p.span_id == id).unwrap().parent;
            }
        }
        out
    }

    /// (trace id, start, duration) of every trace, most recent first.
    fn traces_recent_first(&self) -> Vec<([u8; 16], u64, u64)> {
        let mut by_trace: BTreeMap<[u8; 16], (u64, u64)> = BTreeMap::new();
        for s in &self.spans {
            let e = by_trace.entry(s.trace_id).or_insert((u64::MAX, 0));
            e.0 = e.0.min(s.start_ns);
            e.1 = e.1.max(s.end_ns);
        }
        let mut v: Vec<([u8; 16], u64, u64)> = by_trace
            .into_iter()
            .map(|(t, (start, end))| (t, start, end - start))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    fn heavy_trace(&self) -> [u8; 16] {
        self.data.span(&DB_SPAN).trace_id
    }
}

/// The server with the default settings (exact match).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| start("tempo-store", false))
}

/// The server with `span_profiles_include_children: true`.
fn roll_up_fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| start("tempo-store-roll-up", true))
}

/// A server storing in `store` (under the test tmpdir) with the Go data and [`sent_spans`].
fn start(store: &str, include_children: bool) -> Fixture {
    let server = TestServer::in_fresh_dir(store, |c| {
        c.server.span_profiles_include_children = include_children;
    });
    let data = GoData::load();
    let spans = sent_spans(&data);
    server
        .post(
            "/v1development/profiles",
            "application/x-protobuf",
            data.otlp_profiles(),
        )
        .ok();
    let r = server
        .post("/v1/traces", "application/json", traces_json(&spans))
        .ok();
    assert_eq!(r.json(), serde_json::json!({}), "every span accepted");
    Fixture {
        server,
        data,
        spans,
        include_children,
    }
}

/// The Go data's spans, with [`GATEWAY`] above the heaviest request span and [`DB_CHILD`]
/// below [`DB_SPAN`].
fn sent_spans(data: &GoData) -> Vec<Sent> {
    let db = data.span(&DB_SPAN);
    let root = data
        .span(&db.parent.expect("the db span has a parent"))
        .clone();
    let mut out: Vec<Sent> = data
        .spans
        .iter()
        .map(|s: &SpanTruth| Sent {
            trace_id: s.trace_id,
            span_id: s.span_id,
            parent: if s.span_id == root.span_id {
                Some(GATEWAY)
            } else {
                s.parent
            },
            name: s.name.clone(),
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            own_samples: s.cpu_ns > 0,
        })
        .collect();
    out.push(Sent {
        trace_id: root.trace_id,
        span_id: GATEWAY,
        parent: None,
        name: "gateway".into(),
        start_ns: root.start_ns - 1_000_000,
        end_ns: root.end_ns + 1_000_000,
        own_samples: false,
    });
    out.push(Sent {
        trace_id: root.trace_id,
        span_id: DB_CHILD,
        parent: Some(DB_SPAN),
        name: "fetch rows".into(),
        start_ns: db.start_ns + 1_000,
        end_ns: db.end_ns - 1_000,
        own_samples: false,
    });
    out
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The resource attributes the spans are sent with besides `service.name`: the store keeps
/// them, and every batch read back has them after the service name.
const RESOURCE: [(&str, &str); 2] = [("host.name", "tempo-host"), ("process.pid", "4242")];

/// The HTTP status code a `GET` span answered with (an OTLP int attribute): 503 for one in
/// three, by span id.
fn response_code(s: &Sent) -> Option<i64> {
    let failed = s.span_id[7].is_multiple_of(3);
    s.name
        .starts_with("GET ")
        .then_some(if failed { 503 } else { 200 })
}

/// The status message of [`DB_CHILD`], the one failed span.
const FAILURE: &str = "connection reset by peer";

fn traces_json(spans: &[Sent]) -> Vec<u8> {
    let spans = spans
        .iter()
        .map(|s| {
            let mut attributes = Vec::new();
            if s.name.starts_with("GET ") {
                attributes.push(kv("http.method", "GET"));
            }
            if let Some(code) = response_code(s) {
                attributes.push(KeyValue {
                    key: "http.response.status_code".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(code)),
                    }),
                    ..Default::default()
                });
            }
            if s.span_id == DB_SPAN {
                // Set blindly by a producer: there is nothing to show, so it must go.
                attributes.push(kv(PROFILE_ID, &to_hex(&DB_SPAN)));
            }
            Span {
                trace_id: s.trace_id.to_vec(),
                span_id: s.span_id.to_vec(),
                parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
                name: s.name.clone(),
                kind: if s.parent.is_none() { 2 } else { 1 },
                start_time_unix_nano: s.start_ns,
                end_time_unix_nano: s.end_ns,
                attributes,
                status: (s.span_id == DB_CHILD).then(|| Status {
                    code: 2,
                    message: FAILURE.into(),
                }),
                ..Default::default()
            }
        })
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: std::iter::once(kv("service.name", SERVICE))
                    .chain(RESOURCE.iter().map(|&(k, v)| kv(k, v)))
                    .collect(),
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    encode_request_json(&request).into_bytes()
}

/// `GET path` with an `Accept` header over a plain HTTP/1.1 connection: (status, content
/// type, body).
fn get_accept(path: &str, accept: &str) -> (u16, String, Vec<u8>) {
    let addr = fixture().server.addr;
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).expect("read the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw[split + 4..].to_vec();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    assert!(
        !header("transfer-encoding").contains("chunked"),
        "expected a sized body"
    );
    (status, header("content-type"), body)
}

#[track_caller]
fn get_json(path: &str) -> Value {
    get_json_at(fixture(), path)
}

#[track_caller]
fn get_json_at(f: &Fixture, path: &str) -> Value {
    let r = f.server.get(path).ok();
    assert_eq!(r.content_type, "application/json", "{path}");
    r.json()
}

/// Tempo's v2 trace-by-id answer.
#[derive(Clone, PartialEq, Message)]
struct TraceByIdResponse {
    #[prost(message, optional, tag = "1")]
    trace: Option<TracesData>,
}

/// A span as read back: (trace id, parent, name, start, end, attributes).
#[derive(Debug, Clone, PartialEq)]
struct Got {
    trace_id: String,
    parent: String,
    name: String,
    start_ns: u64,
    end_ns: u64,
    attributes: BTreeMap<String, String>,
}

/// Spans by hex span id from an OTLP JSON `resourceSpans`/`batches` list; checks the
/// resource's service name.
fn spans_of_json(resource_spans: &Value) -> BTreeMap<String, Got> {
    let mut out = BTreeMap::new();
    for rs in resource_spans.as_array().expect("a list of resource spans") {
        let attrs = &rs["resource"]["attributes"];
        assert_eq!(attrs[0]["key"], "service.name");
        assert_eq!(attrs[0]["value"]["stringValue"], SERVICE);
        let others: Vec<(&str, &str)> = attrs.as_array().unwrap()[1..]
            .iter()
            .map(|kv| {
                let v = kv["value"]["stringValue"].as_str().unwrap();
                (kv["key"].as_str().unwrap(), v)
            })
            .collect();
        assert_eq!(others, RESOURCE, "the resource's other attributes");
        for ss in rs["scopeSpans"].as_array().unwrap() {
            for s in ss["spans"].as_array().unwrap() {
                let attributes = s["attributes"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|kv| {
                                (
                                    kv["key"].as_str().unwrap().to_owned(),
                                    kv["value"]["stringValue"].as_str().unwrap().to_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let num = |k: &str| s[k].as_str().expect("64-bit as string").parse().unwrap();
                out.insert(
                    s["spanId"].as_str().unwrap().to_owned(),
                    Got {
                        trace_id: s["traceId"].as_str().unwrap().to_owned(),
                        parent: s["parentSpanId"].as_str().unwrap_or("").to_owned(),
                        name: s["name"].as_str().unwrap().to_owned(),
                        start_ns: num("startTimeUnixNano"),
                        end_ns: num("endTimeUnixNano"),
                        attributes,
                    },
                );
            }
        }
    }
    out
}

fn spans_of_proto(data: &TracesData) -> BTreeMap<String, Got> {
    let mut out = BTreeMap::new();
    for rs in &data.resource_spans {
        let res = rs.resource.as_ref().expect("a resource");
        let want: Vec<KeyValue> = std::iter::once(kv("service.name", SERVICE))
            .chain(RESOURCE.iter().map(|&(k, v)| kv(k, v)))
            .collect();
        assert_eq!(res.attributes, want, "the resource's attributes");
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                let attributes = s
                    .attributes
                    .iter()
                    .map(|a| match &a.value.as_ref().unwrap().value {
                        Some(any_value::Value::StringValue(v)) => (a.key.clone(), v.clone()),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                out.insert(
                    to_hex(&s.span_id),
                    Got {
                        trace_id: to_hex(&s.trace_id),
                        parent: to_hex(&s.parent_span_id),
                        name: s.name.clone(),
                        start_ns: s.start_time_unix_nano,
                        end_ns: s.end_time_unix_nano,
                        attributes,
                    },
                );
            }
        }
    }
    out
}

/// Checks a trace read back from `f` against what was sent and the profile links.
fn check_trace(f: &Fixture, got: &BTreeMap<String, Got>, trace: &[u8; 16]) {
    let sent = f.trace_spans(trace);
    let profiled = f.expected_profiled();
    assert_eq!(
        got.keys().cloned().collect::<BTreeSet<_>>(),
        sent.iter().map(|s| to_hex(&s.span_id)).collect(),
        "every span of the trace"
    );
    for s in sent {
        let g = &got[&to_hex(&s.span_id)];
        assert_eq!(g.trace_id, to_hex(&s.trace_id));
        assert_eq!(g.parent, s.parent.map(|p| to_hex(&p)).unwrap_or_default());
        assert_eq!(
            (g.name.as_str(), g.start_ns, g.end_ns),
            (s.name.as_str(), s.start_ns, s.end_ns)
        );
        let link = g.attributes.get(PROFILE_ID);
        if profiled.contains(&s.span_id) {
            assert_eq!(link, Some(&to_hex(&s.span_id)), "{} has a profile", s.name);
        } else {
            assert_eq!(link, None, "{} has nothing to show", s.name);
        }
    }
}

#[test]
fn tempo_trace_by_id_in_json_and_protobuf_links_exactly_the_spans_with_samples() {
    let f = fixture();
    let heavy = f.heavy_trace();
    let profiled = f.expected_profiled();
    // Exact match by default: the gateway's samples are all below it, so it has no link;
    // the request span under it has samples of its own.
    let request = f.data.span(&DB_SPAN).parent.unwrap();
    assert!(profiled.contains(&request));
    for id in [GATEWAY, DB_SPAN, CACHE_SPAN, DB_CHILD] {
        assert!(!profiled.contains(&id));
    }

    // v1 JSON: {"batches": [...]}, OTLP JSON inside.
    let v1 = get_json(&format!("/api/traces/{}", to_hex(&heavy)));
    assert_eq!(
        v1.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["batches"]
    );
    check_trace(f, &spans_of_json(&v1["batches"]), &heavy);

    // v1 protobuf: tempopb.Trace = OTLP TracesData.
    let (status, ct, body) = get_accept(
        &format!("/api/traces/{}", to_hex(&heavy)),
        "application/protobuf",
    );
    assert_eq!((status, ct.as_str()), (200, "application/protobuf"));
    check_trace(
        f,
        &spans_of_proto(&TracesData::decode(&body[..]).unwrap()),
        &heavy,
    );

    // v2 JSON and protobuf: TraceByIDResponse.
    let v2 = get_json(&format!("/api/v2/traces/{}", to_hex(&heavy)));
    check_trace(f, &spans_of_json(&v2["trace"]["resourceSpans"]), &heavy);
    let (status, ct, body) = get_accept(
        &format!("/api/v2/traces/{}", to_hex(&heavy)),
        "application/protobuf",
    );
    assert_eq!((status, ct.as_str()), (200, "application/protobuf"));
    let response = TraceByIdResponse::decode(&body[..]).unwrap();
    check_trace(f, &spans_of_proto(&response.trace.unwrap()), &heavy);

    // Every other trace too (all of their spans have samples).
    for (trace, ..) in f.traces_recent_first() {
        let v1 = get_json(&format!("/api/traces/{}", to_hex(&trace)));
        check_trace(f, &spans_of_json(&v1["batches"]), &trace);
    }
}

#[test]
fn tempo_unknown_traces_are_404_and_bad_ids_400() {
    let s = &fixture().server;
    for path in ["/api/traces/", "/api/v2/traces/"] {
        let r = s.get(&format!("{path}{}", "ab".repeat(16)));
        assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
        for bad in ["xyz", &"1".repeat(33), &"0".repeat(32)] {
            let r = s.get(&format!("{path}{bad}"));
            assert_eq!(r.status, 400);
            assert!(r.json()["error"].as_str().unwrap().contains("traceID"));
        }
    }
}

fn search_ids(v: &Value) -> Vec<String> {
    v["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["traceID"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn tempo_search_by_tags_and_duration_returns_recent_traces_first() {
    let f = fixture();
    let all = f.traces_recent_first();
    assert!(all.len() > 2, "several traces");
    let v = get_json(&format!(
        "/api/search?tags={}&limit=1000",
        enc("service.name=goapp")
    ));
    assert_eq!(
        search_ids(&v),
        all.iter().map(|t| to_hex(&t.0)).collect::<Vec<_>>()
    );
    assert_eq!(v["metrics"]["inspectedTraces"], all.len());
    // The shape of one result.
    let heavy = f.heavy_trace();
    let t = v["traces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["traceID"] == to_hex(&heavy))
        .unwrap();
    let (_, start, duration) = all.iter().find(|t| t.0 == heavy).unwrap();
    assert_eq!(t["rootServiceName"], SERVICE);
    assert_eq!(t["rootTraceName"], "gateway");
    assert_eq!(t["startTimeUnixNano"], start.to_string());
    assert_eq!(t["durationMs"], duration / 1_000_000);
    assert_eq!(t["spanSets"][0], t["spanSet"]);
    assert_eq!(t["spanSet"]["matched"], f.trace_spans(&heavy).len());
    assert_eq!(t["spanSet"]["spans"].as_array().unwrap().len(), 3);

    // By an attribute of the spans' resource, as TraceQL's `resource.host.name`: every
    // trace on that host, none on another.
    let v = get_json(&format!(
        "/api/search?tags={}&limit=1000",
        enc("resource.host.name=tempo-host")
    ));
    assert_eq!(search_ids(&v).len(), all.len());
    let v = get_json(&format!(
        "/api/search?q={}",
        enc("{ resource.host.name = \"elsewhere\" }")
    ));
    assert_eq!(search_ids(&v), Vec::<String>::new());
    // Unscoped (`.host.name`, or a tag with no scope), the span's attributes or its
    // resource's; `span.` the span's alone.
    for (tags, traces) in [
        (".host.name=tempo-host", all.len()),
        ("host.name=tempo-host", all.len()),
        ("span.host.name=tempo-host", 0),
        (".http.method=GET", all.len()),
    ] {
        let v = get_json(&format!("/api/search?tags={}&limit=1000", enc(tags)));
        assert_eq!(search_ids(&v).len(), traces, "{tags}");
    }
    assert_eq!(
        get_json("/api/v2/search/tag/.host.name/values")["tagValues"],
        serde_json::json!([{"type": "string", "value": "tempo-host"}])
    );

    // Default limit 20.
    let v = get_json(&format!("/api/search?tags={}", enc("service.name=goapp")));
    assert_eq!(search_ids(&v).len(), all.len().min(20));

    // minDuration / maxDuration bound the trace duration.
    let mut durations: Vec<u64> = all.iter().map(|t| t.2).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    let v = get_json(&format!("/api/search?minDuration={median}ns&limit=1000"));
    let want: Vec<String> = all
        .iter()
        .filter(|t| t.2 >= median)
        .map(|t| to_hex(&t.0))
        .collect();
    assert!(!want.is_empty() && want.len() < all.len());
    assert_eq!(search_ids(&v), want);
    // A bare 0 is a duration, as in Go: no lower bound.
    let v = get_json("/api/search?minDuration=0&limit=1000");
    assert_eq!(search_ids(&v).len(), all.len());
    let v = get_json(&format!(
        "/api/search?maxDuration={}ns&limit=1000",
        median - 1
    ));
    let want: Vec<String> = all
        .iter()
        .filter(|t| t.2 < median)
        .map(|t| to_hex(&t.0))
        .collect();
    assert_eq!(search_ids(&v), want);

    // A span tag: only the trace with the database span; the span set shows the match.
    let v = get_json(&format!(
        "/api/search?tags={}",
        enc("name=\"SELECT orders\" service.name=goapp")
    ));
    assert_eq!(search_ids(&v), [to_hex(&heavy)]);
    assert_eq!(
        v["traces"][0]["spanSet"]["spans"][0]["spanID"],
        to_hex(&DB_SPAN)
    );
    assert_eq!(v["traces"][0]["spanSet"]["matched"], 1);
    // Span attributes; the legacy form (tags as parameters).
    let v = get_json(&format!(
        "/api/search?tags={}&limit=1000",
        enc("http.method=GET")
    ));
    assert_eq!(search_ids(&v).len(), all.len());
    let v = get_json("/api/search?service.name=nope");
    assert_eq!(search_ids(&v).len(), 0);
    // start/end in unix seconds: far past is empty.
    let v = get_json("/api/search?start=1&end=2");
    assert_eq!(search_ids(&v).len(), 0);

    // Bad parameters.
    for bad in [
        "minDuration=fast",
        "limit=0",
        "limit=1e23",
        "limit=10001",
        "spss=1001",
        "minDuration=2s&maxDuration=1s",
        "tags=a%3D%22open",
        "start=yesterday",
        "q=%7B.x%3D1%7D%20%7C%7C%20%7B%7D",
        "tags=name%3Dx&q=%7Bname%3D%22y%22%7D",
    ] {
        let r = f.server.get(&format!("/api/search?{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
    }
}

/// Grafana's trace search writes TraceQL: one spanset of conditions joined by `&&`.
#[test]
fn tempo_search_by_traceql_as_grafana_writes_it() {
    let f = fixture();
    let all = f.traces_recent_first();
    let ids = |q: &str| search_ids(&get_json(&format!("/api/search?q={}&limit=1000", enc(q))));
    let everything: Vec<String> = all.iter().map(|t| to_hex(&t.0)).collect();
    assert_eq!(ids("{}"), everything);
    assert_eq!(ids(r#"{resource.service.name="goapp"}"#), everything);
    assert_eq!(
        ids(r#"{resource.service.name="nope"}"#),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(r#"{name = "SELECT orders" && .service.name="goapp"}"#),
        [to_hex(&f.heavy_trace())]
    );
    assert_eq!(ids(r#"{span.http.method="GET"}"#), everything);
    assert_eq!(ids(r#"{.http.method="POST"}"#), Vec::<String>::new());

    // duration is the span's; traceDuration the trace's (first start to last end).
    let mut span_durations: Vec<u64> = f.spans.iter().map(|s| s.end_ns - s.start_ns).collect();
    span_durations.sort_unstable();
    let median = span_durations[span_durations.len() / 2];
    let with_span = |keep: &dyn Fn(u64) -> bool| -> Vec<String> {
        all.iter()
            .filter(|t| {
                f.spans
                    .iter()
                    .any(|s| s.trace_id == t.0 && keep(s.end_ns - s.start_ns))
            })
            .map(|t| to_hex(&t.0))
            .collect()
    };
    let long = with_span(&|d| d > median);
    assert!(!long.is_empty() && long.len() < all.len(), "{long:?}");
    assert_eq!(ids(&format!("{{duration > {median}ns}}")), long);
    assert_eq!(
        ids(&format!("{{span:duration<={median}ns}}")),
        with_span(&|d| d <= median)
    );
    let mut trace_durations: Vec<u64> = all.iter().map(|t| t.2).collect();
    trace_durations.sort_unstable();
    let median = trace_durations[trace_durations.len() / 2];
    let want: Vec<String> = all
        .iter()
        .filter(|t| t.2 >= median)
        .map(|t| to_hex(&t.0))
        .collect();
    assert_eq!(ids(&format!("{{traceDuration>={median}ns}}")), want);

    // What is not supported says so.
    let r = f.server.get(&format!(
        "/api/search?q={}",
        enc(r#"{name="a"} || {name="b"}"#)
    ));
    assert_eq!(r.status, 400);
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("only one spanset of conditions joined by &&"),
        "{body}"
    );
}

#[test]
fn tempo_search_by_traceql_compares_with_not_equal_and_regexes() {
    let f = fixture();
    let all = f.traces_recent_first();
    let ids = |q: &str| search_ids(&get_json(&format!("/api/search?q={}&limit=1000", enc(q))));
    let with_span_named = |keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        all.iter()
            .filter(|t| f.spans.iter().any(|s| s.trace_id == t.0 && keep(&s.name)))
            .map(|t| to_hex(&t.0))
            .collect()
    };
    let everything: Vec<String> = all.iter().map(|t| to_hex(&t.0)).collect();
    let selects = with_span_named(&|n| n.starts_with("SELECT"));
    assert!(!selects.is_empty() && selects.len() < everything.len());
    // Regexes are anchored: "SELECT" alone is no span's whole name.
    assert_eq!(ids(r#"{name =~ "SELECT.*"}"#), selects);
    assert_eq!(ids(r#"{name =~ "SELECT"}"#), Vec::<String>::new());
    let others = with_span_named(&|n| !n.starts_with("SELECT") && !n.starts_with("GET "));
    assert!(
        !others.is_empty() && others.len() < everything.len(),
        "{others:?}"
    );
    assert_eq!(ids(r#"{span:name !~ "SELECT.*|GET .*"}"#), others);
    assert_eq!(
        ids(r#"{name != "gateway" && resource.service.name =~ "go.*"}"#),
        with_span_named(&|n| n != "gateway")
    );
    assert_eq!(
        ids(r#"{resource.service.name != "goapp"}"#),
        Vec::<String>::new()
    );
    assert_eq!(ids(r#"{status != error}"#), everything);
    // An attribute compared with != or !~ must be there: no span holds `nope`.
    assert_eq!(ids(r#"{span.nope != "x"}"#), Vec::<String>::new());
    assert_eq!(ids(r#"{span.http.method !~ "POST|PUT"}"#), everything);
    assert_eq!(ids(r#"{span.http.method != "GET"}"#), Vec::<String>::new());
    assert_eq!(
        ids(r#"{resource.host.name =~ "tempo-.*"}"#),
        everything,
        "resource attributes"
    );

    // A matched span shows its own value of what a regex compared, not the regex.
    let v = get_json(&format!(
        "/api/search?q={}&limit=1000",
        enc(r#"{name =~ "SELECT.*"}"#)
    ));
    let shown: Vec<&str> = v["traces"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["spanSet"]["spans"].as_array().unwrap())
        .map(|s| {
            let attrs = s["attributes"].as_array().unwrap();
            assert_eq!(attrs[0]["key"], "name");
            assert_eq!(attrs[0]["value"]["stringValue"], s["name"]);
            s["name"].as_str().unwrap()
        })
        .collect();
    assert!(!shown.is_empty() && shown.iter().all(|n| n.starts_with("SELECT")));

    // A regex that does not compile is a 400 that quotes it.
    let r = f
        .server
        .get(&format!("/api/search?q={}", enc(r#"{name =~ "GET (.*"}"#)));
    assert_eq!(r.status, 400);
    let body = String::from_utf8_lossy(&r.body);
    assert!(body.contains("invalid regular expression"), "{body}");
}

/// TraceQL's orders of numbers, kinds, the trace's root and status messages in search, and
/// the tag values Grafana's search builder lists for them and for a query being typed.
#[test]
fn tempo_search_by_traceql_orders_numbers_and_takes_kinds_roots_and_status_messages() {
    let f = fixture();
    let all = f.traces_recent_first();
    let ids = |q: &str| search_ids(&get_json(&format!("/api/search?q={}&limit=1000", enc(q))));
    let with = |keep: &dyn Fn(&Sent) -> bool| -> Vec<String> {
        all.iter()
            .filter(|t| f.spans.iter().any(|s| s.trace_id == t.0 && keep(s)))
            .map(|t| to_hex(&t.0))
            .collect()
    };
    let everything: Vec<String> = all.iter().map(|t| to_hex(&t.0)).collect();
    let failed = with(&|s| response_code(s) == Some(503));
    let fine = with(&|s| response_code(s) == Some(200));
    assert!(!failed.is_empty() && failed.len() < everything.len());
    assert!(!fine.is_empty() && fine.len() < everything.len());
    // Stored as the text "503", compared as the number.
    assert_eq!(ids("{span.http.response.status_code >= 500}"), failed);
    assert_eq!(ids("{.http.response.status_code > 499.5}"), failed);
    assert_eq!(ids("{span.http.response.status_code < 500}"), fine);
    // One span must pass both.
    assert_eq!(
        ids("{span.http.response.status_code >= 200 && span.http.response.status_code <= 200}"),
        fine
    );
    assert_eq!(
        ids("{span.http.response.status_code > 503}"),
        Vec::<String>::new()
    );
    assert_eq!(ids("{span.http.response.status_code = 503}"), failed);

    // Roots are servers, the rest internal.
    assert_eq!(ids("{kind = server}"), with(&|s| s.parent.is_none()));
    assert_eq!(ids("{span:kind = client}"), Vec::<String>::new());
    assert_eq!(
        ids(r#"{kind = internal && name = "gateway"}"#),
        Vec::<String>::new()
    );
    let gateway = with(&|s| s.span_id == GATEWAY);
    assert_eq!(gateway.len(), 1);
    assert_eq!(ids(r#"{kind = server && name = "gateway"}"#), gateway);

    // The trace's root, whichever span matched.
    assert_eq!(ids(r#"{rootName = "gateway"}"#), gateway);
    assert_eq!(
        ids(r#"{trace:rootName = "gateway" && name = "fetch rows"}"#),
        gateway
    );
    assert_eq!(
        ids(r#"{rootName != "gateway"}"#),
        with(&|s| s.parent.is_none() && s.span_id != GATEWAY)
    );
    assert_eq!(
        ids(&format!(r#"{{rootServiceName = "{SERVICE}"}}"#)),
        everything
    );

    assert_eq!(ids(r#"{statusMessage =~ "connection reset.*"}"#), gateway);
    assert_eq!(
        ids(&format!(
            r#"{{span:statusMessage = "{FAILURE}" && status = error}}"#
        )),
        gateway
    );

    for (q, says) in [
        (
            r#"{name > "a"}"#,
            "name is compared with =, !=, =~ or !~ (not >)",
        ),
        ("{kind >= server}", "kind is compared with"),
        (
            "{span.http.response.status_code >= fast}",
            r#"compares numbers, and \"fast\" is not a number"#,
        ),
        ("{kind = sideways}", "expected server, client, internal"),
    ] {
        let r = f.server.get(&format!("/api/search?q={}", enc(q)));
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 400, "{q}: {body}");
        assert!(body.contains(says), "{q}: {body}");
    }

    // The values Grafana's search builder offers for them.
    assert_eq!(
        get_json("/api/v2/search/tag/kind/values")["tagValues"],
        serde_json::json!([
            {"type": "keyword", "value": "internal"},
            {"type": "keyword", "value": "server"}
        ])
    );
    assert_eq!(
        get_json("/api/search/tag/statusMessage/values")["tagValues"],
        serde_json::json!([FAILURE])
    );
    let roots: BTreeSet<&str> = f
        .spans
        .iter()
        .filter(|s| s.parent.is_none())
        .map(|s| s.name.as_str())
        .collect();
    let got = get_json("/api/search/tag/rootName/values");
    let got: BTreeSet<&str> = got["tagValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(got, roots);
    assert_eq!(
        get_json("/api/search/tag/rootServiceName/values")["tagValues"],
        serde_json::json!([SERVICE])
    );

    // Values and names for the rest of a query being typed, as Grafana asks for them: its
    // complete conditions count.
    let names = |q: &str| -> BTreeSet<String> {
        let v = get_json(&format!("/api/v2/search/tag/name/values?q={}", enc(q)));
        v["tagValues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["value"].as_str().unwrap().to_owned())
            .collect()
    };
    let owned = |set: BTreeSet<&str>| set.into_iter().map(String::from).collect();
    assert_eq!(names("{kind = server && name = }"), owned(roots.clone()));
    let every: BTreeSet<&str> = f.spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names(&format!(r#"{{resource.service.name="{SERVICE}" && "#)),
        owned(every.clone())
    );
    assert_eq!(
        names(r#"{resource.service.name="elsewhere"}"#),
        BTreeSet::new()
    );
    assert_eq!(
        names(r#"{kind = server} || {kind = client}"#),
        owned(every.clone()),
        "not one spanset: every value"
    );
    // A condition on the root keeps the spans of the traces whose root passes it.
    for root in &roots {
        let under: BTreeSet<&str> = f
            .spans
            .iter()
            .filter(|s| s.parent.is_none() && s.name == *root)
            .flat_map(|r| f.trace_spans(&r.trace_id))
            .map(|s| s.name.as_str())
            .collect();
        assert!(!under.is_empty());
        assert_eq!(
            names(&format!(r#"{{rootName = "{root}" && name = }}"#)),
            owned(under),
            "{root}"
        );
    }
    assert_eq!(
        names(r#"{trace:rootService = "elsewhere"}"#),
        BTreeSet::new()
    );
    assert_eq!(
        names(&format!(r#"{{rootServiceName = "{SERVICE}"}}"#)),
        owned(every)
    );
    let failing: BTreeSet<&str> = f
        .spans
        .iter()
        .filter(|s| response_code(s) == Some(503))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names("{span.http.response.status_code >= 500 && name =~ \"GET (\"}"),
        owned(failing)
    );
    let v = get_json(&format!(
        "/api/v2/search/tags?q={}",
        enc(r#"{name = "gateway"}"#)
    ));
    assert_eq!(v["scopes"][1]["name"], "span");
    assert_eq!(
        v["scopes"][1]["tags"],
        serde_json::json!([]),
        "the gateway span has no attributes"
    );
}

#[test]
fn tempo_tags_tag_values_and_echo() {
    let f = fixture();
    let v = get_json("/api/search/tags");
    let names: Vec<&str> = v["tagNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "host.name",
            "http.method",
            "http.response.status_code",
            "process.pid",
            "service.name"
        ]
    );
    let v = get_json("/api/v2/search/tags");
    assert_eq!(v["scopes"][0]["name"], "resource");
    assert_eq!(
        v["scopes"][0]["tags"],
        serde_json::json!(["host.name", "process.pid", "service.name"])
    );
    assert_eq!(
        v["scopes"][1]["tags"],
        serde_json::json!(["http.method", "http.response.status_code"])
    );
    assert_eq!(
        get_json("/api/v2/search/tag/resource.host.name/values")["tagValues"],
        serde_json::json!([{"type": "string", "value": "tempo-host"}])
    );
    assert_eq!(
        get_json("/api/search/tag/service.name/values")["tagValues"],
        serde_json::json!([SERVICE])
    );
    assert_eq!(
        get_json("/api/search/tag/http.method/values")["tagValues"],
        serde_json::json!(["GET"])
    );
    let names: BTreeSet<&str> = f.spans.iter().map(|s| s.name.as_str()).collect();
    let got = get_json("/api/search/tag/name/values");
    assert_eq!(
        got["tagValues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect::<BTreeSet<_>>(),
        names
    );
    assert_eq!(
        get_json("/api/v2/search/tag/resource.service.name/values")["tagValues"],
        serde_json::json!([{"type": "string", "value": SERVICE}])
    );
    let r = f.server.get("/api/echo").ok();
    assert_eq!(r.body, b"echo");
}

/// Sum of the totals of nodes named `name` not below another such node.
fn tree_function_total(node: &Value, name: &str) -> i64 {
    if node["name"] == name {
        return node["total"].as_i64().unwrap();
    }
    node["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| tree_function_total(c, name))
        .sum()
}

#[test]
fn tempo_grafana_traces_to_profiles_opens_the_slow_spans_flame_graph() {
    let f = fixture();
    let heavy = f.heavy_trace();
    // Grafana fetches the trace and picks the slow request span.
    let v1 = get_json(&format!("/api/traces/{}", to_hex(&heavy)));
    let spans = spans_of_json(&v1["batches"]);
    let (_, slow) = spans
        .iter()
        .filter(|(_, s)| s.name.starts_with("GET "))
        .max_by_key(|(_, s)| s.end_ns - s.start_ns)
        .expect("a request span");
    let profile_id = slow.attributes[PROFILE_ID].clone();
    let truth = f
        .data
        .spans
        .iter()
        .find(|s| to_hex(&s.span_id) == profile_id)
        .expect("the link is the span id");
    assert!(truth.hot_cum_ns > 0);
    // …and opens its profile from 60 s before to 60 s after the span.
    let (from, to) = (slow.start_ns - 60_000_000_000, slow.end_ns + 60_000_000_000);
    let fg = get_json(&format!(
        "/api/v1/flamegraph?service={SERVICE}&span_id={profile_id}&from={from}&to={to}"
    ));
    assert_eq!(fg["flamegraph"]["total"].as_i64(), Some(truth.cpu_ns));
    assert_eq!(
        tree_function_total(&fg["tree"], HOT_FUNCTION),
        truth.hot_cum_ns
    );
}

/// The total of Grafana's `SelectMergeSpanProfile` for one span as Traces to profiles sends
/// it (protojson): the CPU type, `{service_name="…"}` from `service.name`, the span ±60 s.
fn span_profile_total(f: &Fixture, span: &Sent) -> i64 {
    let request = serde_json::json!({
        "profileTypeID": CPU_TYPE,
        "labelSelector": format!("{{service_name=\"{SERVICE}\"}}"),
        "spanSelector": [to_hex(&span.span_id)],
        "start": (span.start_ns / 1_000_000 - 60_000).to_string(),
        "end": (span.end_ns / 1_000_000 + 60_000).to_string(),
    });
    let r = f
        .server
        .post(
            "/querier.v1.QuerierService/SelectMergeSpanProfile",
            "application/json",
            request.to_string().into_bytes(),
        )
        .ok();
    // protojson: int64 as a string, left out when 0.
    r.json()["flamegraph"].get("total").map_or(0, |t| {
        t.as_str().expect("int64 as a string").parse().unwrap()
    })
}

/// For every span of every trace: the link is there exactly when Grafana's span profile
/// for it has samples.
fn check_links_match_span_profiles(f: &Fixture) {
    let mut linked = 0;
    for (trace, ..) in f.traces_recent_first() {
        let got =
            spans_of_json(&get_json_at(f, &format!("/api/traces/{}", to_hex(&trace)))["batches"]);
        for s in f.trace_spans(&trace) {
            let link = got[&to_hex(&s.span_id)].attributes.get(PROFILE_ID);
            let total = span_profile_total(f, s);
            assert_eq!(
                link.is_some(),
                total > 0,
                "{} ({}): link {link:?}, span profile total {total}",
                s.name,
                to_hex(&s.span_id)
            );
            linked += usize::from(link.is_some());
        }
    }
    assert!(linked > 2, "several spans are linked");
}

#[test]
fn tempo_exact_match_by_default_links_only_spans_with_their_own_samples() {
    let f = fixture();
    check_links_match_span_profiles(f);
    // The gateway's samples are all in the request span below it: its span profile is empty
    // and it has no link; the request span has both.
    let heavy = f.heavy_trace();
    let got = spans_of_json(&get_json(&format!("/api/traces/{}", to_hex(&heavy)))["batches"]);
    let gateway = f.spans.iter().find(|s| s.span_id == GATEWAY).unwrap();
    assert_eq!(got[&to_hex(&GATEWAY)].attributes.get(PROFILE_ID), None);
    assert_eq!(span_profile_total(f, gateway), 0);
    let request = f.data.span(&DB_SPAN).parent.unwrap();
    let request = f.spans.iter().find(|s| s.span_id == request).unwrap();
    assert_eq!(request.parent, Some(GATEWAY));
    assert_eq!(
        got[&to_hex(&request.span_id)].attributes[PROFILE_ID],
        to_hex(&request.span_id)
    );
    assert_eq!(
        span_profile_total(f, request),
        f.data.span(&request.span_id).cpu_ns,
        "only the request span's own samples, none of its children's"
    );
}

#[test]
fn tempo_with_child_roll_up_links_spans_whose_subtree_has_samples() {
    let f = roll_up_fixture();
    let heavy = f.heavy_trace();
    let profiled = f.expected_profiled();
    assert!(profiled.contains(&GATEWAY));
    for id in [DB_SPAN, CACHE_SPAN, DB_CHILD] {
        assert!(!profiled.contains(&id));
    }
    let v1 = get_json_at(f, &format!("/api/traces/{}", to_hex(&heavy)));
    check_trace(f, &spans_of_json(&v1["batches"]), &heavy);
    check_links_match_span_profiles(f);
    // The gateway's link shows its whole subtree: every sample of the trace.
    let gateway = f.spans.iter().find(|s| s.span_id == GATEWAY).unwrap();
    let subtree: i64 = f
        .data
        .spans
        .iter()
        .filter(|s| s.trace_id == heavy)
        .map(|s| s.cpu_ns)
        .sum();
    assert!(subtree > 0);
    assert_eq!(span_profile_total(f, gateway), subtree);
}

#[test]
fn tempo_tag_values_stop_at_tempos_byte_limit() {
    // 6,000 spans named with 1,000 distinct bytes each: 6 MB of values, past Tempo's 5 MB.
    let server = TestServer::in_fresh_dir("tempo-many-values", |_| {});
    let spans: Vec<Sent> = (0..6_000u32)
        .map(|i| {
            let mut span_id = [1u8; 8];
            span_id[..4].copy_from_slice(&i.to_be_bytes());
            Sent {
                trace_id: [7; 16],
                span_id,
                parent: None,
                name: format!("{i:0>1000}"),
                start_ns: 1_700_000_000_000_000_000,
                end_ns: 1_700_000_000_001_000_000,
                own_samples: false,
            }
        })
        .collect();
    server
        .post("/v1/traces", "application/json", traces_json(&spans))
        .ok();
    let values = server.get("/api/search/tag/name/values").ok().json();
    let values = values["tagValues"].as_array().unwrap();
    let bytes: usize = values.iter().map(|v| v.as_str().unwrap().len()).sum();
    assert_eq!(bytes, 5_000_000, "values up to the limit, none past it");
    assert_eq!(values.len(), 5_000);
    // Values that fit are all there.
    let services = server
        .get("/api/v2/search/tag/service.name/values")
        .ok()
        .json();
    assert_eq!(
        services["tagValues"],
        serde_json::json!([{"type": "string", "value": SERVICE}])
    );
}

/// A trace with spans in a segment before the searched time range, its root among them: its
/// duration is still the whole trace's, and a condition on its root sees that root.
#[test]
fn tempo_search_sees_the_whole_trace_past_the_time_range() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tempo-outside");
    let _ = std::fs::remove_dir_all(&dir);
    let second = 1_000_000_000u64;
    let (t0, t1) = (1_700_000_000 * second, 1_700_003_600 * second);
    let sent = |id: u8, name: &str, start_ns: u64| Sent {
        trace_id: [0x5a; 16],
        span_id: [id; 8],
        parent: Some([9; 8]),
        name: name.into(),
        start_ns,
        end_ns: start_ns + second,
        own_samples: false,
    };
    // The root and the first step, then sealed away in a segment of their own.
    let root = Sent {
        span_id: [9; 8],
        parent: None,
        ..sent(9, "checkout", t0)
    };
    let server = TestServer::start(&dir);
    server
        .post(
            "/v1/traces",
            "application/json",
            traces_json(&[root, sent(1, "first step", t0)]),
        )
        .ok();
    server.stop().unwrap();
    let (store, _) = Store::open(StoreConfig::new(&dir)).unwrap();
    store.rotate().unwrap();
    drop(store);
    let server = TestServer::start(&dir);
    server
        .post(
            "/v1/traces",
            "application/json",
            traces_json(&[sent(2, "GET /step", t1)]),
        )
        .ok();
    // Only the second step's minutes are searched; the trace lasts an hour and a second.
    let (start, end) = (t1 / second - 60, t1 / second + 60);
    let found = server
        .get(&format!(
            "/api/search?tags=name%3D%22GET%20%2Fstep%22&minDuration=1h&start={start}&end={end}"
        ))
        .ok()
        .json();
    let traces = found["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 1, "{found}");
    assert_eq!(traces[0]["durationMs"], 3_601_000);
    assert_eq!(traces[0]["spanSet"]["spans"][0]["name"], "GET /step");
    // The root is outside the range's segments: the trace is read whole to find it.
    let search = |q: &str| {
        let found = server
            .get(&format!("/api/search?q={}&start={start}&end={end}", enc(q)))
            .ok()
            .json();
        let traces = found["traces"].as_array().unwrap().clone();
        traces
            .iter()
            .map(|t| t["rootTraceName"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(search(r#"{rootName = "checkout"}"#), ["checkout"]);
    assert!(search(r#"{rootName = "nope"}"#).is_empty());
}
