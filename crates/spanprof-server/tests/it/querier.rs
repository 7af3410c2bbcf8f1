//! Pyroscope's query API (`querier.v1.QuerierService`, Connect unary) against the real server,
//! checked against the wire contract of the research notes (`pyroscope-compat.md` §4): the
//! messages are declared here again from the field numbers there (not shared with the
//! server), in both encodings (binary protobuf as Grafana's backend sends, protojson as the
//! Pyroscope UI sends), with the real Go CPU profile and spans ingested over OTLP.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;

use common::goprofile::{GoData, SpanTruth, CPU_TYPE, HOT_FUNCTION, SERVICE};
use prost::Message;
use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_testkit::server::{Reply, TestServer, DEADLINE};

// ---- the messages, from the reference's field numbers -------------------------------------

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProfileTypesRequest {
    #[prost(int64, tag = "1")]
    pub(crate) start: i64,
    #[prost(int64, tag = "2")]
    pub(crate) end: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProfileTypesResponse {
    #[prost(message, repeated, tag = "1")]
    pub(crate) profile_types: Vec<ProfileType>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProfileType {
    #[prost(string, tag = "1")]
    pub(crate) id: String,
    #[prost(string, tag = "2")]
    pub(crate) name: String,
    #[prost(string, tag = "4")]
    pub(crate) sample_type: String,
    #[prost(string, tag = "5")]
    pub(crate) sample_unit: String,
    #[prost(string, tag = "6")]
    pub(crate) period_type: String,
    #[prost(string, tag = "7")]
    pub(crate) period_unit: String,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LabelNamesRequest {
    #[prost(string, repeated, tag = "1")]
    pub(crate) matchers: Vec<String>,
    #[prost(int64, tag = "2")]
    pub(crate) start: i64,
    #[prost(int64, tag = "3")]
    pub(crate) end: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NamesResponse {
    #[prost(string, repeated, tag = "1")]
    pub(crate) names: Vec<String>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LabelValuesRequest {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, repeated, tag = "2")]
    pub(crate) matchers: Vec<String>,
    #[prost(int64, tag = "3")]
    pub(crate) start: i64,
    #[prost(int64, tag = "4")]
    pub(crate) end: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SeriesRequest {
    #[prost(string, repeated, tag = "1")]
    pub(crate) matchers: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub(crate) label_names: Vec<String>,
    #[prost(int64, tag = "3")]
    pub(crate) start: i64,
    #[prost(int64, tag = "4")]
    pub(crate) end: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SeriesResponse {
    #[prost(message, repeated, tag = "2")]
    pub(crate) labels_set: Vec<Labels>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Labels {
    #[prost(message, repeated, tag = "1")]
    pub(crate) labels: Vec<LabelPair>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LabelPair {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FlameGraph {
    #[prost(string, repeated, tag = "1")]
    pub(crate) names: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) levels: Vec<Level>,
    #[prost(int64, tag = "3")]
    pub(crate) total: i64,
    #[prost(int64, tag = "4")]
    pub(crate) max_self: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Level {
    #[prost(int64, repeated, tag = "1")]
    pub(crate) values: Vec<i64>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SelectMergeSpanProfileRequest {
    #[prost(string, tag = "1")]
    pub(crate) profile_type_id: String,
    #[prost(string, tag = "2")]
    pub(crate) label_selector: String,
    #[prost(string, repeated, tag = "3")]
    pub(crate) span_selector: Vec<String>,
    #[prost(int64, tag = "4")]
    pub(crate) start: i64,
    #[prost(int64, tag = "5")]
    pub(crate) end: i64,
    #[prost(int64, optional, tag = "6")]
    pub(crate) max_nodes: Option<i64>,
    #[prost(int32, tag = "7")]
    pub(crate) format: i32,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FlameGraphResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) flamegraph: Option<FlameGraph>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) tree: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    pub(crate) pprof: Option<PprofProfile>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PprofProfile {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) profile: Vec<u8>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SelectMergeStacktracesRequest {
    #[prost(string, tag = "1")]
    pub(crate) profile_type_id: String,
    #[prost(string, tag = "2")]
    pub(crate) label_selector: String,
    #[prost(int64, tag = "3")]
    pub(crate) start: i64,
    #[prost(int64, tag = "4")]
    pub(crate) end: i64,
    #[prost(int64, optional, tag = "5")]
    pub(crate) max_nodes: Option<i64>,
    #[prost(int32, tag = "6")]
    pub(crate) format: i32,
    #[prost(string, repeated, tag = "10")]
    pub(crate) trace_id_selector: Vec<String>,
    #[prost(string, repeated, tag = "11")]
    pub(crate) span_selector: Vec<String>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DiffRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) left: Option<SelectMergeStacktracesRequest>,
    #[prost(message, optional, tag = "2")]
    pub(crate) right: Option<SelectMergeStacktracesRequest>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DiffResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) flamegraph: Option<FlameGraphDiff>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FlameGraphDiff {
    #[prost(string, repeated, tag = "1")]
    pub(crate) names: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) levels: Vec<Level>,
    #[prost(int64, tag = "3")]
    pub(crate) total: i64,
    #[prost(int64, tag = "4")]
    pub(crate) max_self: i64,
    #[prost(int64, tag = "5")]
    pub(crate) left_ticks: i64,
    #[prost(int64, tag = "6")]
    pub(crate) right_ticks: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetProfileStatsRequest {}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetProfileStatsResponse {
    #[prost(bool, tag = "1")]
    pub(crate) data_ingested: bool,
    #[prost(int64, tag = "2")]
    pub(crate) oldest_profile_time: i64,
    #[prost(int64, tag = "3")]
    pub(crate) newest_profile_time: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SelectMergeProfileRequest {
    #[prost(string, tag = "1")]
    pub(crate) profile_type_id: String,
    #[prost(string, tag = "2")]
    pub(crate) label_selector: String,
    #[prost(int64, tag = "3")]
    pub(crate) start: i64,
    #[prost(int64, tag = "4")]
    pub(crate) end: i64,
    #[prost(string, repeated, tag = "8")]
    pub(crate) trace_id_selector: Vec<String>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SelectSeriesRequest {
    #[prost(string, tag = "1")]
    pub(crate) profile_type_id: String,
    #[prost(string, tag = "2")]
    pub(crate) label_selector: String,
    #[prost(int64, tag = "3")]
    pub(crate) start: i64,
    #[prost(int64, tag = "4")]
    pub(crate) end: i64,
    #[prost(string, repeated, tag = "5")]
    pub(crate) group_by: Vec<String>,
    #[prost(double, tag = "6")]
    pub(crate) step: f64,
    #[prost(int32, optional, tag = "7")]
    pub(crate) aggregation: Option<i32>,
    #[prost(int64, optional, tag = "9")]
    pub(crate) limit: Option<i64>,
    #[prost(int32, tag = "10")]
    pub(crate) exemplar_type: i32,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SelectSeriesResponse {
    #[prost(message, repeated, tag = "1")]
    pub(crate) series: Vec<Series>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Series {
    #[prost(message, repeated, tag = "1")]
    pub(crate) labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) points: Vec<Point>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Point {
    #[prost(double, tag = "1")]
    pub(crate) value: f64,
    #[prost(int64, tag = "2")]
    pub(crate) timestamp: i64,
    #[prost(message, repeated, tag = "4")]
    pub(crate) exemplars: Vec<Exemplar>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Exemplar {
    #[prost(int64, tag = "1")]
    pub(crate) timestamp: i64,
    #[prost(string, tag = "2")]
    pub(crate) profile_id: String,
    #[prost(string, tag = "3")]
    pub(crate) span_id: String,
    #[prost(int64, tag = "4")]
    pub(crate) value: i64,
    #[prost(string, tag = "6")]
    pub(crate) trace_id: String,
}

const PPROF: i32 = 4;
const SPAN_EXEMPLARS: i32 = 3;
pub(crate) const SELECTOR: &str = "{service_name=\"goapp\"}";

// ---- the server and a client that sets any header ----------------------------------------

use common::goprofile::GoServer as Fixture;

/// The server with the default settings.
pub(crate) fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| start("querier-store", false))
}

/// The server with `span_profiles_include_children: true`.
fn roll_up_fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| start("querier-store-roll-up", true))
}

fn start(store: &str, include_children: bool) -> Fixture {
    Fixture::start(store, |c| {
        c.server.span_profiles_include_children = include_children;
    })
}

struct Answer {
    reply: Reply,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `POST /querier.v1.QuerierService/<method>` to the default server over HTTP/1.1 with
/// `headers`.
fn call(method: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    call_at(fixture(), method, headers, body)
}

/// [`call`] to the server of `f`.
fn call_at(f: &Fixture, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut tcp = TcpStream::connect(f.server.addr).expect("connect");
    tcp.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut head = format!(
        "POST /querier.v1.QuerierService/{method} HTTP/1.1\r\nhost: 127.0.0.1\r\n\
         connection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).unwrap();
    // The server may answer (too large) before reading the whole body, and close: what it
    // answered is read below either way.
    let _ = tcp.write_all(body);
    let mut raw = Vec::new();
    let _ = tcp.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let body = raw[split + 4..].to_vec();
    assert!(
        !headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")),
        "the test client reads whole bodies only"
    );
    let content_type = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    Answer {
        reply: Reply {
            status,
            content_type,
            headers: Default::default(),
            body,
        },
        headers,
    }
}

/// A binary protobuf call to the default server answered 200; the answer decoded.
#[track_caller]
pub(crate) fn proto<M: Message + Default>(method: &str, request: &impl Message) -> M {
    proto_at(fixture(), method, request)
}

/// [`proto`] to the server of `f`.
#[track_caller]
fn proto_at<M: Message + Default>(f: &Fixture, method: &str, request: &impl Message) -> M {
    let a = call_at(
        f,
        method,
        &[("content-type", "application/proto")],
        &request.encode_to_vec(),
    );
    let r = a.reply.ok();
    assert_eq!(r.content_type, "application/proto", "{method}");
    M::decode(r.body.as_slice()).unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// A protojson call answered 200; the answer as JSON.
#[track_caller]
pub(crate) fn json_call(method: &str, request: Value) -> Value {
    let a = call(
        method,
        &[("content-type", "application/json")],
        request.to_string().as_bytes(),
    );
    let r = a.reply.ok();
    assert_eq!(r.content_type, "application/json", "{method}");
    r.json()
}

/// A call that must fail with a Connect error: (HTTP status, the error JSON).
#[track_caller]
pub(crate) fn error(method: &str, content_type: &str, body: &[u8]) -> (u16, Value) {
    let a = call(method, &[("content-type", content_type)], body);
    assert_ne!(a.reply.status, 200, "{method} should fail");
    assert_eq!(a.reply.content_type, "application/json");
    let v = a.reply.json();
    assert!(v["code"].is_string() && v["message"].is_string(), "{v}");
    (a.reply.status, v)
}

// ---- helpers over the data ---------------------------------------------------------------

pub(crate) fn hex(id: &[u8]) -> String {
    to_hex(id)
}

/// The slowest root (`GET …`) span: the one Grafana links from (`pyroscope.profile.id`).
pub(crate) fn slow_root(data: &GoData) -> &SpanTruth {
    data.spans
        .iter()
        .filter(|s| s.parent.is_none())
        .max_by_key(|s| (s.duration_ns(), s.span_id))
        .unwrap()
}

/// Grafana's Traces-to-profiles range: span start − 60 s … span end + 60 s, in ms.
fn grafana_range(s: &SpanTruth) -> (i64, i64) {
    (
        (s.start_ns / 1_000_000) as i64 - 60_000,
        (s.end_ns / 1_000_000) as i64 + 60_000,
    )
}

pub(crate) fn profile_range(data: &GoData) -> (i64, i64) {
    let t0 = data.profile.time_nanos / 1_000_000;
    (t0 - 60_000, t0 + 120_000)
}

/// `SelectMergeStacktraces` of the service's CPU over the profile's range.
pub(crate) fn service_stacktraces(data: &GoData) -> SelectMergeStacktracesRequest {
    let (start, end) = profile_range(data);
    SelectMergeStacktracesRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start,
        end,
        max_nodes: None,
        format: 0,
        trace_id_selector: vec![],
        span_selector: vec![],
    }
}

/// Checks the §4.3 layout rules; returns the absolute (start, total, self, name) of every
/// node per level.
#[track_caller]
pub(crate) fn check_layout(fg: &FlameGraph) -> Vec<Vec<(i64, i64, i64, String)>> {
    assert_eq!(fg.names.first().map(String::as_str), Some("total"));
    let distinct: std::collections::BTreeSet<&String> = fg.names.iter().collect();
    assert_eq!(distinct.len(), fg.names.len(), "names are de-duplicated");
    if fg.total == 0 {
        return Vec::new();
    }
    assert_eq!(fg.levels[0].values, vec![0, fg.total, 0, 0], "the root");
    let mut abs: Vec<Vec<(i64, i64, i64, String)>> = Vec::new();
    let mut max_self = 0;
    for (d, level) in fg.levels.iter().enumerate() {
        assert_eq!(level.values.len() % 4, 0, "4-tuples at level {d}");
        let mut end = 0;
        let mut nodes = Vec::new();
        for t in level.values.chunks(4) {
            let start = end + t[0];
            assert!(
                t[0] >= 0,
                "x offsets are deltas from the previous node's end"
            );
            end = start + t[1];
            max_self = max_self.max(t[2]);
            nodes.push((start, t[1], t[2], fg.names[t[3] as usize].clone()));
        }
        if d > 0 {
            for n in &nodes {
                let parent = abs[d - 1]
                    .iter()
                    .find(|p| p.0 <= n.0 && n.0 + n.1 <= p.0 + p.1);
                assert!(parent.is_some(), "{n:?} at level {d} lies inside a parent");
            }
        }
        abs.push(nodes);
    }
    assert_eq!(fg.max_self, max_self, "max_self");
    abs
}

/// Total of the outermost nodes named `name`.
fn function_total(levels: &[Vec<(i64, i64, i64, String)>], name: &str) -> i64 {
    let mut covered: Vec<(i64, i64)> = Vec::new();
    let mut sum = 0;
    for level in levels {
        for n in level.iter().filter(|n| n.3 == name) {
            if !covered.iter().any(|c| c.0 <= n.0 && n.0 < c.1) {
                covered.push((n.0, n.0 + n.1));
                sum += n.1;
            }
        }
    }
    sum
}

/// A protojson FlameGraph as the protobuf one, checking int64s are strings.
#[track_caller]
pub(crate) fn flame_from_json(v: &Value) -> FlameGraph {
    let int = |x: &Value| -> i64 {
        x.as_str()
            .unwrap_or_else(|| panic!("int64 as a string, got {x}"))
            .parse()
            .unwrap()
    };
    FlameGraph {
        names: v["names"]
            .as_array()
            .map(|a| a.iter().map(|n| n.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default(),
        levels: v["levels"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|l| Level {
                        values: l["values"].as_array().unwrap().iter().map(int).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        total: v.get("total").map_or(0, int),
        max_self: v.get("maxSelf").map_or(0, int),
    }
}

// ---- the tests -----------------------------------------------------------------------------

#[test]
fn health_check_profile_types_answers_for_a_tiny_range() {
    let want_cpu = ProfileType {
        id: CPU_TYPE.into(),
        name: "process_cpu".into(),
        sample_type: "cpu".into(),
        sample_unit: "nanoseconds".into(),
        period_type: "cpu".into(),
        period_unit: "nanoseconds".into(),
    };
    // Grafana's CheckHealth: start=1000, end=4000 ms.
    let r: ProfileTypesResponse = proto(
        "ProfileTypes",
        &ProfileTypesRequest {
            start: 1000,
            end: 4000,
        },
    );
    assert!(r.profile_types.contains(&want_cpu), "{r:?}");
    assert_eq!(r.profile_types.len(), 2, "cpu and samples: {r:?}");

    let v = json_call("ProfileTypes", json!({"start": "1000", "end": 4000}));
    let types = v["profileTypes"].as_array().unwrap();
    assert_eq!(types.len(), 2);
    assert!(types.contains(&json!({
        "ID": CPU_TYPE, "name": "process_cpu", "sampleType": "cpu",
        "sampleUnit": "nanoseconds", "periodType": "cpu", "periodUnit": "nanoseconds"
    })));
    // An empty JSON body is a request with every field at its default.
    let a = call("ProfileTypes", &[("content-type", "application/json")], b"");
    assert_eq!(
        a.reply.ok().json()["profileTypes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn label_names_values_and_series_in_both_encodings() {
    let names: NamesResponse = proto(
        "LabelNames",
        &LabelNamesRequest {
            matchers: vec![SELECTOR.into()],
            start: 0,
            end: 0,
        },
    );
    for n in ["service_name", "__profile_type__", "__name__"] {
        assert!(names.names.iter().any(|x| x == n), "{n}: {names:?}");
    }
    let mut sorted = names.names.clone();
    sorted.sort();
    assert_eq!(sorted, names.names, "sorted");
    let v = json_call("LabelNames", json!({"matchers": [SELECTOR]}));
    assert_eq!(v["names"], json!(names.names));
    // A selector that matches nothing: no names (the field is left out in protojson).
    let v = json_call(
        "LabelNames",
        json!({"matchers": ["{service_name=\"nope\"}"]}),
    );
    assert_eq!(v, json!({}));
    // Grafana's label pickers ask by profile type: `__profile_type__` and `__name__` are
    // matched as the labels they are listed as.
    let by_type = format!("{{__profile_type__=\"{CPU_TYPE}\", service_name=\"{SERVICE}\"}}");
    let v = json_call("LabelNames", json!({"matchers": [by_type]}));
    assert_eq!(v["names"], json!(names.names), "{by_type}");
    let v = json_call(
        "LabelValues",
        json!({"name": "service_name", "matchers": ["{__name__=\"process_cpu\"}"]}),
    );
    assert_eq!(v["names"], json!([SERVICE]));
    for other in [
        "{__profile_type__=\"memory:alloc_space:bytes:space:bytes\"}",
        "{__name__!=\"process_cpu\"}",
    ] {
        assert_eq!(
            json_call("LabelNames", json!({"matchers": [other]})),
            json!({}),
            "{other}"
        );
    }

    let values: NamesResponse = proto(
        "LabelValues",
        &LabelValuesRequest {
            name: "service_name".into(),
            matchers: vec![],
            start: 0,
            end: 0,
        },
    );
    assert_eq!(values.names, vec![SERVICE.to_owned()]);
    let v = json_call(
        "LabelValues",
        json!({"name": "__profile_type__", "matchers": [SELECTOR], "start": "0"}),
    );
    let types = v["names"].as_array().unwrap();
    assert!(types.contains(&json!(CPU_TYPE)), "{v}");

    // The Pyroscope UI's service list.
    let series: SeriesResponse = proto(
        "Series",
        &SeriesRequest {
            matchers: vec!["{}".into()],
            label_names: vec!["service_name".into(), "__profile_type__".into()],
            start: 0,
            end: 0,
        },
    );
    assert_eq!(series.labels_set.len(), 2, "{series:?}");
    for set in &series.labels_set {
        let keys: Vec<&str> = set.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(keys, ["__profile_type__", "service_name"]);
        assert_eq!(set.labels[1].value, SERVICE);
    }
    let v = json_call(
        "Series",
        json!({"matchers": [SELECTOR], "labelNames": ["service_name", "__profile_type__"]}),
    );
    assert_eq!(v["labelsSet"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["labelsSet"][0]["labels"][1],
        json!({"name": "service_name", "value": SERVICE})
    );
}

#[test]
fn grafana_span_profile_link_finds_the_hot_function() {
    let data = &fixture().data;
    let root = slow_root(data);
    let (start, end) = grafana_range(root);
    // Exactly the root's own samples (Pyroscope's exact match), not its children's.
    let (want, want_hot) = (root.cpu_ns, root.hot_cum_ns);
    assert!(
        want_hot > 0 && data.cpu_where(|s| s.parent == Some(root.span_id)) > 0,
        "the root has the hot function itself and children with samples"
    );

    let request = SelectMergeSpanProfileRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        span_selector: vec![hex(&root.span_id)],
        start,
        end,
        max_nodes: Some(16384),
        format: 0,
    };
    let r: FlameGraphResponse = proto("SelectMergeSpanProfile", &request);
    let fg = r.flamegraph.expect("a flame graph");
    assert_eq!(fg.total, want);
    let levels = check_layout(&fg);
    assert!(fg.names.iter().any(|n| n == HOT_FUNCTION), "{:?}", fg.names);
    assert_eq!(function_total(&levels, HOT_FUNCTION), want_hot);

    let v = json_call(
        "SelectMergeSpanProfile",
        json!({
            "profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
            "spanSelector": [hex(&root.span_id)], "start": start.to_string(), "end": end,
            "maxNodes": "16384", "format": "PROFILE_FORMAT_FLAMEGRAPH"
        }),
    );
    assert_eq!(
        flame_from_json(&v["flamegraph"]),
        fg,
        "the same in protojson"
    );

    // A child span: its own samples.
    let child = data
        .spans
        .iter()
        .filter(|s| s.parent == Some(root.span_id) && s.cpu_ns > 0)
        .max_by_key(|s| s.cpu_ns)
        .unwrap();
    let r: FlameGraphResponse = proto(
        "SelectMergeSpanProfile",
        &SelectMergeSpanProfileRequest {
            span_selector: vec![hex(&child.span_id)],
            ..request.clone()
        },
    );
    assert_eq!(r.flamegraph.unwrap().total, child.cpu_ns);

    // Outside the window: nothing (a well-formed empty graph).
    let r: FlameGraphResponse = proto(
        "SelectMergeSpanProfile",
        &SelectMergeSpanProfileRequest {
            start: 1000,
            end: 4000,
            ..request.clone()
        },
    );
    let fg = r.flamegraph.unwrap();
    assert_eq!(
        (fg.total, fg.names.as_slice()),
        (0, &["total".to_owned()][..])
    );
    // Another service's selector: nothing.
    let r: FlameGraphResponse = proto(
        "SelectMergeSpanProfile",
        &SelectMergeSpanProfileRequest {
            label_selector: "{service_name=\"other\"}".into(),
            ..request.clone()
        },
    );
    assert_eq!(r.flamegraph.unwrap().total, 0);
    // max_nodes cuts the layout, not the total.
    let r: FlameGraphResponse = proto(
        "SelectMergeSpanProfile",
        &SelectMergeSpanProfileRequest {
            max_nodes: Some(5),
            ..request
        },
    );
    let fg = r.flamegraph.unwrap();
    assert_eq!(fg.total, want);
    let nodes: usize = fg.levels.iter().map(|l| l.values.len() / 4).sum();
    assert!(nodes <= 5 + fg.levels.len(), "{nodes} nodes");
    check_layout(&fg);
}

#[test]
fn span_profiles_include_children_adds_descendant_spans() {
    let f = roll_up_fixture();
    let root = slow_root(&f.data);
    let (start, end) = grafana_range(root);
    let subtree = |s: &SpanTruth| s.span_id == root.span_id || s.parent == Some(root.span_id);
    let want = f.data.cpu_where(subtree);
    let want_hot: i64 = f
        .data
        .spans
        .iter()
        .filter(|s| subtree(s))
        .map(|s| s.hot_cum_ns)
        .sum();
    assert!(want > root.cpu_ns, "the fixture has child CPU");
    let request = SelectMergeSpanProfileRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        span_selector: vec![hex(&root.span_id)],
        start,
        end,
        max_nodes: None,
        format: 0,
    };
    let r: FlameGraphResponse = proto_at(f, "SelectMergeSpanProfile", &request);
    let fg = r.flamegraph.expect("a flame graph");
    assert_eq!(fg.total, want, "the root and its children");
    let levels = check_layout(&fg);
    assert_eq!(function_total(&levels, HOT_FUNCTION), want_hot);
    // SelectMergeStacktraces' span_selector stays an exact match.
    let r: FlameGraphResponse = proto_at(
        f,
        "SelectMergeStacktraces",
        &SelectMergeStacktracesRequest {
            profile_type_id: CPU_TYPE.into(),
            label_selector: SELECTOR.into(),
            start,
            end,
            max_nodes: None,
            format: 0,
            trace_id_selector: vec![],
            span_selector: vec![hex(&root.span_id)],
        },
    );
    assert_eq!(r.flamegraph.unwrap().total, root.cpu_ns);
}

#[test]
fn span_selector_is_validated_as_pyroscope_does() {
    let data = &fixture().data;
    let root = slow_root(data);
    let (start, end) = grafana_range(root);
    for (bad, message) in [
        ("abc", "invalid span id length: \"abc\""),
        (
            "0123456789abcdefff",
            "invalid span id length: \"0123456789abcdefff\"",
        ),
        ("zz23456789abcdef", "encoding/hex: invalid byte: U+007A 'z'"),
    ] {
        let req = SelectMergeSpanProfileRequest {
            profile_type_id: CPU_TYPE.into(),
            label_selector: SELECTOR.into(),
            span_selector: vec![bad.into()],
            start,
            end,
            max_nodes: None,
            format: 0,
        };
        let (status, v) = error(
            "SelectMergeSpanProfile",
            "application/proto",
            &req.encode_to_vec(),
        );
        assert_eq!(status, 400);
        assert_eq!(v, json!({"code": "invalid_argument", "message": message}));
        let (status, v) = error(
            "SelectMergeSpanProfile",
            "application/json",
            json!({"profileTypeID": CPU_TYPE, "spanSelector": [bad]})
                .to_string()
                .as_bytes(),
        );
        assert_eq!((status, &v["message"]), (400, &json!(message)));
        // The same rule on SelectMergeStacktraces' span_selector.
        let (status, v) = error(
            "SelectMergeStacktraces",
            "application/json",
            json!({"profileTypeID": CPU_TYPE, "spanSelector": [bad]})
                .to_string()
                .as_bytes(),
        );
        assert_eq!((status, &v["code"]), (400, &json!("invalid_argument")));
    }
    // No span at all: an empty graph, not the whole service.
    let v = json_call(
        "SelectMergeSpanProfile",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR, "spanSelector": []}),
    );
    assert_eq!(
        v,
        json!({"flamegraph": {"names": ["total"], "levels": [{"values": ["0", "0", "0", "0"]}]}})
    );
}

#[test]
fn select_merge_stacktraces_flame_graphs() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let request = service_stacktraces(data);
    let r: FlameGraphResponse = proto("SelectMergeStacktraces", &request);
    let fg = r.flamegraph.unwrap();
    assert_eq!(fg.total, data.cpu_total_ns);
    let levels = check_layout(&fg);
    assert_eq!(function_total(&levels, HOT_FUNCTION), data.hot_cum_ns);
    let v = json_call(
        "SelectMergeStacktraces",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
               "start": start, "end": end.to_string(), "format": 1}),
    );
    assert_eq!(flame_from_json(&v["flamegraph"]), fg);
    // The type named in the selector too, as Grafana's queries do.
    let r: FlameGraphResponse = proto(
        "SelectMergeStacktraces",
        &SelectMergeStacktracesRequest {
            label_selector: format!(
                "{{__profile_type__=\"{CPU_TYPE}\",service_name=\"{SERVICE}\"}}"
            ),
            ..request.clone()
        },
    );
    assert_eq!(r.flamegraph.unwrap().total, data.cpu_total_ns);

    // span_selector here is an exact match (the root alone, not its children).
    let root = slow_root(data);
    let r: FlameGraphResponse = proto(
        "SelectMergeStacktraces",
        &SelectMergeStacktracesRequest {
            span_selector: vec![hex(&root.span_id)],
            ..request.clone()
        },
    );
    assert_eq!(r.flamegraph.unwrap().total, root.cpu_ns);

    // trace_id_selector: every span of the traces.
    let traces: Vec<[u8; 16]> = {
        let mut t: Vec<[u8; 16]> = data.spans.iter().map(|s| s.trace_id).collect();
        t.sort();
        t.dedup();
        t.into_iter().take(2).collect()
    };
    let want = data.cpu_where(|s| traces.contains(&s.trace_id));
    let r: FlameGraphResponse = proto(
        "SelectMergeStacktraces",
        &SelectMergeStacktracesRequest {
            trace_id_selector: traces.iter().map(|t| hex(t)).collect(),
            ..request.clone()
        },
    );
    let fg = r.flamegraph.unwrap();
    assert_eq!(fg.total, want);
    check_layout(&fg);
    let one = data.cpu_where(|s| s.trace_id == traces[0]);
    let v = json_call(
        "SelectMergeStacktraces",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
               "traceIdSelector": [hex(&traces[0])]}),
    );
    assert_eq!(v["flamegraph"]["total"], json!(one.to_string()));

    // Mutually exclusive selectors, bad ids, bad max_nodes, bad types: invalid_argument.
    for (body, what) in [
        (
            json!({"profileTypeID": CPU_TYPE, "spanSelector": [hex(&root.span_id)],
                   "traceIdSelector": [hex(&root.trace_id)]}),
            "mutually exclusive",
        ),
        (
            json!({"profileTypeID": CPU_TYPE, "traceIdSelector": ["abcd"]}),
            "invalid trace id length",
        ),
        (
            json!({"profileTypeID": CPU_TYPE, "maxNodes": -1}),
            "max_nodes",
        ),
        (json!({"profileTypeID": "cpu"}), "profile-type selection"),
        (
            json!({"profileTypeID": CPU_TYPE, "labelSelector": "{service_name=}"}),
            "label selector",
        ),
        (json!({"profileTypeID": CPU_TYPE, "start": true}), "start"),
        (
            json!({"profileTypeID": CPU_TYPE, "format": "NOPE"}),
            "format",
        ),
    ] {
        let (status, v) = error(
            "SelectMergeStacktraces",
            "application/json",
            body.to_string().as_bytes(),
        );
        assert_eq!(
            (status, &v["code"]),
            (400, &json!("invalid_argument")),
            "{body}"
        );
        assert!(v["message"].as_str().unwrap().contains(what), "{v}");
    }
    // Unsupported options are refused, not ignored.
    let (status, v) = error(
        "SelectMergeStacktraces",
        "application/json",
        br#"{"profileTypeID":"process_cpu:cpu:nanoseconds:cpu:nanoseconds","format":"PROFILE_FORMAT_DOT"}"#,
    );
    assert_eq!((status, &v["code"]), (501, &json!("unimplemented")));
    // A method not served is Connect's unimplemented too, naming those that are.
    let (status, v) = error("AnalyzeQuery", "application/json", b"{}");
    assert_eq!((status, &v["code"]), (501, &json!("unimplemented")));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("AnalyzeQuery is not served here; spanprof serves ProfileTypes"),
        "{v}"
    );
    for (field, value, what) in [
        ("stackTraceSelector", json!({}), "stack_trace_selector"),
        ("async", json!({"requestId": "x"}), "async"),
        (
            "profileIdSelector",
            json!(["7c9e6679-7425-40de-944b-e07fc1f90ae7"]),
            "keeps no profile UUIDs",
        ),
    ] {
        let mut body = json!({"profileTypeID": CPU_TYPE});
        body[field] = value;
        let (status, v) = error(
            "SelectMergeStacktraces",
            "application/json",
            body.to_string().as_bytes(),
        );
        assert_eq!((status, &v["code"]), (501, &json!("unimplemented")), "{v}");
        assert!(v["message"].as_str().unwrap().contains(what), "{v}");
    }
    // In protobuf: an empty stack_trace_selector (field 7) or async (field 9) message is
    // there all the same.
    for key in [7u8 << 3 | 2, 9 << 3 | 2] {
        let mut body = request.encode_to_vec();
        body.extend([key, 0]);
        let (status, v) = error("SelectMergeStacktraces", "application/proto", &body);
        assert_eq!((status, &v["code"]), (501, &json!("unimplemented")), "{v}");
    }
}

/// One side of a diff flame graph as a single flame graph: that side's (x offset, total,
/// self) of each node it has (total > 0), the offsets made deltas again within the side.
fn diff_side(d: &FlameGraphDiff, right: bool) -> FlameGraph {
    let at = if right { 3 } else { 0 };
    let levels = d
        .levels
        .iter()
        .map(|level| {
            assert_eq!(level.values.len() % 7, 0, "7-tuples");
            let (mut end, mut kept_end) = (0, 0);
            let mut values = Vec::new();
            for t in level.values.chunks(7) {
                let start = end + t[at];
                end = start + t[at + 1];
                if t[at + 1] > 0 {
                    values.extend([start - kept_end, t[at + 1], t[at + 2], t[6]]);
                    kept_end = start + t[at + 1];
                }
            }
            Level { values }
        })
        .filter(|l| !l.values.is_empty())
        .collect();
    FlameGraph {
        names: d.names.clone(),
        levels,
        total: if right { d.right_ticks } else { d.left_ticks },
        max_self: 0,
    }
}

/// Each node of a flame graph as (absolute start, total, self, name), per level.
fn nodes(fg: &FlameGraph) -> Vec<Vec<(i64, i64, i64, String)>> {
    fg.levels
        .iter()
        .map(|level| {
            let mut end = 0;
            level
                .values
                .chunks(4)
                .map(|t| {
                    let start = end + t[0];
                    end = start + t[1];
                    (start, t[1], t[2], fg.names[t[3] as usize].clone())
                })
                .collect()
        })
        .collect()
}

#[test]
fn diff_compares_a_slow_span_with_its_service_as_grafana_asks() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let service = service_stacktraces(data);
    let root = slow_root(data);
    let span = SelectMergeStacktracesRequest {
        span_selector: vec![hex(&root.span_id)],
        ..service.clone()
    };
    let r: DiffResponse = proto(
        "Diff",
        &DiffRequest {
            left: Some(span.clone()),
            right: Some(service.clone()),
        },
    );
    let d = r.flamegraph.unwrap();
    assert_eq!(
        (d.left_ticks, d.right_ticks, d.total),
        (
            root.cpu_ns,
            data.cpu_total_ns,
            root.cpu_ns + data.cpu_total_ns
        )
    );
    assert_eq!(d.names[0], "total");
    // Each side is what SelectMergeStacktraces draws of it, node for node.
    for (side, request) in [(false, &span), (true, &service)] {
        let single: FlameGraphResponse = proto("SelectMergeStacktraces", request);
        let single = single.flamegraph.unwrap();
        check_layout(&single);
        assert_eq!(
            nodes(&diff_side(&d, side)),
            nodes(&single),
            "the {} side",
            if side { "right" } else { "left" }
        );
    }
    let left_levels = nodes(&diff_side(&d, false));
    assert_eq!(function_total(&left_levels, HOT_FUNCTION), root.hot_cum_ns);

    // The same in protojson, int64s as strings.
    let v = json_call(
        "Diff",
        json!({"left": {"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
                        "start": start, "end": end, "spanSelector": [hex(&root.span_id)]},
               "right": {"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
                         "start": start.to_string(), "end": end}}),
    );
    let f = &v["flamegraph"];
    assert_eq!(f["leftTicks"], root.cpu_ns.to_string());
    assert_eq!(f["rightTicks"], data.cpu_total_ns.to_string());
    assert_eq!(
        flame_from_json(f),
        FlameGraph {
            names: d.names.clone(),
            levels: d.levels.clone(),
            total: d.total,
            max_self: d.max_self
        }
    );

    // What is wrong is named, with the side it is on.
    for (request, says) in [
        (
            json!({"left": {"profileTypeID": CPU_TYPE}}),
            "right is required",
        ),
        (
            json!({"left": {"profileTypeID": CPU_TYPE, "spanSelector": ["abc"]},
                   "right": {"profileTypeID": CPU_TYPE}}),
            "left: invalid span id length",
        ),
        (
            json!({"left": {"profileTypeID": CPU_TYPE},
                   "right": {"profileTypeID": "memory:alloc_space:bytes:space:bytes"}}),
            "of one profile type",
        ),
        (
            json!({"left": "x"}),
            "left: invalid type: string \"x\", expected struct",
        ),
    ] {
        let (status, e) = error("Diff", "application/json", request.to_string().as_bytes());
        assert_eq!(
            (status, e["code"].as_str()),
            (400, Some("invalid_argument")),
            "{e}"
        );
        assert!(e["message"].as_str().unwrap().contains(says), "{says}: {e}");
    }
}

#[test]
fn profile_stats_say_when_the_data_was_taken() {
    let data = &fixture().data;
    let r: GetProfileStatsResponse = proto("GetProfileStats", &GetProfileStatsRequest {});
    let t0 = data.profile.time_nanos / 1_000_000;
    assert_eq!(
        (
            r.data_ingested,
            r.oldest_profile_time,
            r.newest_profile_time
        ),
        (true, t0, t0)
    );
    let v = json_call("GetProfileStats", json!({}));
    assert_eq!(
        v,
        json!({"dataIngested": true, "oldestProfileTime": t0.to_string(),
               "newestProfileTime": t0.to_string()})
    );
    // A store with nothing in it answers as Pyroscope does.
    let empty = Fixture {
        server: TestServer::in_fresh_dir("querier-empty", |_| {}),
        data: GoData::load(),
    };
    let r: GetProfileStatsResponse =
        proto_at(&empty, "GetProfileStats", &GetProfileStatsRequest {});
    assert_eq!(
        (
            r.data_ingested,
            r.oldest_profile_time,
            r.newest_profile_time
        ),
        (false, i64::MAX, i64::MIN)
    );
}

#[test]
fn select_merge_stacktraces_pprof_is_read_by_go_tool_pprof() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let r: FlameGraphResponse = proto(
        "SelectMergeStacktraces",
        &SelectMergeStacktracesRequest {
            profile_type_id: CPU_TYPE.into(),
            label_selector: SELECTOR.into(),
            start,
            end,
            max_nodes: None,
            format: PPROF,
            trace_id_selector: vec![],
            span_selector: vec![],
        },
    );
    assert!(r.flamegraph.is_none());
    let bytes = r.pprof.expect("the pprof field").profile;
    let profile = spanprof_format::pprof::decode(&bytes, 64 << 20).unwrap();
    let sum: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(sum, data.cpu_total_ns);

    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("merged.pb");
    std::fs::write(&file, &bytes).unwrap();
    let out = spanprof_testkit::go_tool_pprof([
        "-top",
        "-unit=ns",
        "-nodefraction=0",
        "-nodecount=100000",
        file.to_str().unwrap(),
    ]);
    assert_eq!(
        spanprof_testkit::pprof_top(&out, HOT_FUNCTION),
        (data.hot_self_ns, data.hot_cum_ns, data.cpu_total_ns),
        "{out}"
    );
    // JSON clients cannot take it.
    let (status, v) = error(
        "SelectMergeStacktraces",
        "application/json",
        json!({"profileTypeID": CPU_TYPE, "format": "PROFILE_FORMAT_PPROF"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!((status, &v["code"]), (501, &json!("unimplemented")));
}

#[test]
fn select_merge_profile_is_a_pprof_profile() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let root = slow_root(data);
    let req = SelectMergeProfileRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start,
        end,
        trace_id_selector: vec![],
    };
    let profile: spanprof_format::pprof::Profile = proto("SelectMergeProfile", &req);
    let sum: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(sum, data.cpu_total_ns);
    assert!(profile.period > 0);
    let profile: spanprof_format::pprof::Profile = proto(
        "SelectMergeProfile",
        &SelectMergeProfileRequest {
            trace_id_selector: vec![hex(&root.trace_id)],
            ..req
        },
    );
    let sum: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(sum, data.cpu_where(|s| s.trace_id == root.trace_id));
}

#[test]
fn select_series_with_span_exemplars() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let req = SelectSeriesRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start,
        end,
        group_by: vec![],
        step: 1.0,
        aggregation: None,
        limit: None,
        exemplar_type: SPAN_EXEMPLARS,
    };
    let r: SelectSeriesResponse = proto("SelectSeries", &req);
    assert_eq!(r.series.len(), 1, "{r:?}");
    let s = &r.series[0];
    assert!(s.labels.is_empty());
    let sum: f64 = s.points.iter().map(|p| p.value).sum();
    assert_eq!(sum as i64, data.cpu_total_ns);
    let mut exemplars = 0;
    for p in &s.points {
        assert!(p.timestamp >= start && p.timestamp < end, "ms timestamps");
        assert!(p.exemplars.len() <= 3);
        for e in &p.exemplars {
            exemplars += 1;
            assert_eq!(e.span_id.len(), 16, "{e:?}");
            assert_eq!(e.trace_id.len(), 32, "{e:?}");
            let span = data
                .spans
                .iter()
                .find(|x| hex(&x.span_id) == e.span_id)
                .expect("a known span");
            assert_eq!(hex(&span.trace_id), e.trace_id);
            assert!(e.value > 0 && e.value <= span.cpu_ns);
            assert!(e.profile_id.is_empty());
        }
    }
    assert!(exemplars > 0, "span exemplars");

    let v = json_call(
        "SelectSeries",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR, "start": start.to_string(),
               "end": end, "step": 1, "groupBy": ["service_name"],
               "aggregation": "TIME_SERIES_AGGREGATION_TYPE_SUM",
               "exemplarType": "EXEMPLAR_TYPE_SPAN", "limit": "10"}),
    );
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!(
        series[0]["labels"],
        json!([{"name": "service_name", "value": SERVICE}])
    );
    let points = series[0]["points"].as_array().unwrap();
    assert_eq!(points.len(), s.points.len());
    for (jp, pp) in points.iter().zip(&s.points) {
        assert_eq!(
            jp["timestamp"],
            json!(pp.timestamp.to_string()),
            "int64 as a string"
        );
        assert_eq!(jp["value"].as_f64(), Some(pp.value), "double as a number");
        if let Some(e) = jp["exemplars"].as_array().and_then(|e| e.first()) {
            assert!(e["spanId"].is_string() && e["traceId"].is_string());
            assert!(e["value"].is_string() && e["timestamp"].is_string(), "{e}");
        }
    }
    // No exemplars unless asked for SPAN ones.
    let r: SelectSeriesResponse = proto(
        "SelectSeries",
        &SelectSeriesRequest {
            exemplar_type: 1,
            ..req.clone()
        },
    );
    assert!(r.series[0].points.iter().all(|p| p.exemplars.is_empty()));
    // A step must be positive, and at least a nanosecond (less rounded to 0: a 500).
    for step in [0.0, 1e-12, 5e-324] {
        let (status, v) = error(
            "SelectSeries",
            "application/proto",
            &SelectSeriesRequest {
                step,
                ..req.clone()
            }
            .encode_to_vec(),
        );
        assert_eq!(
            (status, &v["code"]),
            (400, &json!("invalid_argument")),
            "{step}"
        );
        assert!(
            v["message"].as_str().unwrap().contains("at least 1e-9"),
            "{v}"
        );
    }
}

#[test]
fn gzip_bodies_content_types_and_errors() {
    let data = &fixture().data;
    let (start, end) = profile_range(data);
    let req = SelectMergeStacktracesRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start,
        end,
        max_nodes: None,
        format: 0,
        trace_id_selector: vec![],
        span_selector: vec![],
    };
    let plain: FlameGraphResponse = proto("SelectMergeStacktraces", &req);
    assert!(plain.encoded_len() > 1024, "big enough to be compressed");
    // A gzip request, and a gzip answer when accepted.
    let a = call(
        "SelectMergeStacktraces",
        &[
            ("content-type", "application/proto"),
            ("content-encoding", "gzip"),
            ("accept-encoding", "gzip"),
        ],
        &spanprof_format::gzip::gzip(&req.encode_to_vec()),
    );
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let r = a.reply.ok();
    let body = spanprof_format::gzip::gunzip(&r.body, 64 << 20).unwrap();
    assert_eq!(FlameGraphResponse::decode(body.as_slice()).unwrap(), plain);
    // Not accepted: identity.
    let a = call(
        "SelectMergeStacktraces",
        &[
            ("content-type", "application/proto"),
            ("accept-encoding", "identity"),
        ],
        &req.encode_to_vec(),
    );
    assert_eq!(a.header("content-encoding"), None);
    assert_eq!(
        FlameGraphResponse::decode(a.reply.ok().body.as_slice()).unwrap(),
        plain
    );
    // JSON with a charset, gzip both ways.
    let a = call(
        "LabelValues",
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("content-encoding", "gzip"),
        ],
        &spanprof_format::gzip::gzip(br#"{"name":"service_name"}"#),
    );
    assert_eq!(a.reply.ok().json(), json!({"names": [SERVICE]}));
    // Claimed gzip that is not: invalid_argument.
    let (status, v) = {
        let a = call(
            "ProfileTypes",
            &[
                ("content-type", "application/proto"),
                ("content-encoding", "gzip"),
            ],
            b"not gzip",
        );
        (a.reply.status, a.reply.json())
    };
    assert_eq!((status, &v["code"]), (400, &json!("invalid_argument")));
    // A content type Connect does not know: 415.
    let a = call("ProfileTypes", &[("content-type", "text/plain")], b"");
    assert_eq!(a.reply.status, 415);
    // Garbage protobuf and JSON: invalid_argument.
    let (status, v) = error("LabelNames", "application/proto", &[0xff, 0xff, 0xff]);
    assert_eq!((status, &v["code"]), (400, &json!("invalid_argument")));
    let (status, v) = error("LabelNames", "application/json", b"[1]");
    assert_eq!((status, &v["code"]), (400, &json!("invalid_argument")));
    // Unknown JSON fields are ignored; a known one of the wrong type is an error.
    let v = json_call(
        "LabelValues",
        json!({"name": "service_name", "futureField": 1}),
    );
    assert_eq!(v, json!({"names": [SERVICE]}));
    let (status, v) = error("LabelValues", "application/json", br#"{"name": 5}"#);
    assert_eq!((status, &v["code"]), (400, &json!("invalid_argument")));
}

/// A query request is small: past 1 MiB, as sent or once decompressed, it is refused with
/// `resource_exhausted` before it is decoded (a gzip body of empty repeated strings would
/// otherwise be decoded into 24 times its decompressed size).
#[test]
fn query_bodies_past_a_mebibyte_are_refused_sent_or_decompressed() {
    let empty_matchers = b"\x0a\x00".repeat(600 << 10);
    for (headers, body, want) in [
        (
            &[("content-type", "application/proto")][..],
            empty_matchers.clone(),
            "the query request is larger than 1048576 bytes",
        ),
        (
            &[
                ("content-type", "application/proto"),
                ("content-encoding", "gzip"),
            ][..],
            spanprof_format::gzip::gzip(&empty_matchers),
            "the request body is larger than 1048576 bytes once decompressed",
        ),
    ] {
        let a = call("Series", headers, &body);
        assert_eq!(a.reply.status, 429, "{headers:?}");
        let v = a.reply.json();
        assert_eq!(
            (&v["code"], &v["message"]),
            (&json!("resource_exhausted"), &json!(want)),
            "{headers:?}"
        );
    }
    // Just under: an answer.
    let a = call(
        "Series",
        &[("content-type", "application/proto")],
        &empty_matchers[..1 << 20],
    );
    assert_eq!(a.reply.status, 200);
}

/// The whole Grafana flow, as Grafana runs it against spanprof as both data sources: fetch the
/// trace from the Tempo API, take `pyroscope.profile.id` from the slow span, build the label
/// selector from its `service.name` (Grafana's default tag mapping to `service_name`) and the
/// span ±60 s, call `SelectMergeSpanProfile`, and find the hot function.
#[test]
fn grafana_flow_from_tempo_trace_to_span_flame_graph() {
    let f = fixture();
    let root = slow_root(&f.data);
    let trace = f
        .server
        .get(&format!("/api/traces/{}", hex(&root.trace_id)))
        .ok()
        .json();
    // Tempo v1 JSON: batches[] of resource spans.
    let mut found = None;
    for batch in trace["batches"].as_array().expect("batches") {
        let service = batch["resource"]["attributes"]
            .as_array()
            .and_then(|a| a.iter().find(|kv| kv["key"] == "service.name"))
            .and_then(|kv| kv["value"]["stringValue"].as_str())
            .map(str::to_owned);
        for scope in batch["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                if span["spanId"] != hex(&root.span_id).as_str() {
                    continue;
                }
                let id = span["attributes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|kv| kv["key"] == "pyroscope.profile.id"))
                    .and_then(|kv| kv["value"]["stringValue"].as_str())
                    .map(str::to_owned);
                let start: i64 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
                let end: i64 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
                found = Some((id, service.clone(), start, end));
            }
        }
    }
    let (profile_id, service, start_ns, end_ns) =
        found.expect("the slow span is in the Tempo trace");
    let profile_id =
        profile_id.expect("the slow span has samples, so it carries pyroscope.profile.id");
    assert_eq!(profile_id, hex(&root.span_id));
    let selector = format!(
        "{{service_name=\"{}\"}}",
        service.expect("service.name on the resource")
    );
    let v = json_call(
        "SelectMergeSpanProfile",
        json!({
            "profileTypeID": CPU_TYPE, "labelSelector": selector, "spanSelector": [profile_id],
            "start": (start_ns / 1_000_000 - 60_000).to_string(), "end": (end_ns / 1_000_000 + 60_000).to_string(),
            "maxNodes": "16384", "format": "PROFILE_FORMAT_FLAMEGRAPH"
        }),
    );
    let fg = flame_from_json(&v["flamegraph"]);
    assert!(fg.names.iter().any(|n| n == HOT_FUNCTION), "{:?}", fg.names);
    assert_eq!(
        fg.total, root.cpu_ns,
        "the span's own samples (exact match, the default)"
    );
}

// ---- settings.v1 (Grafana's Profiles Drilldown keeps its options there) --------------------

#[derive(Clone, PartialEq, prost::Message)]
struct Setting {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
    #[prost(int64, tag = "3")]
    modified_at: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
struct GetSettingsResponse {
    #[prost(message, repeated, tag = "1")]
    settings: Vec<Setting>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct SetSettingsRequest {
    #[prost(message, optional, tag = "1")]
    setting: Option<Setting>,
}

#[test]
fn drilldown_settings_are_kept_across_restarts() {
    const P: &str = "/settings.v1.SettingsService/";
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("querier-settings");
    let _ = std::fs::remove_dir_all(&dir);
    let server = TestServer::start(&dir);
    let json_post = |s: &TestServer, method: &str, body: Value| {
        s.post(
            &format!("{P}{method}"),
            "application/json",
            body.to_string().into_bytes(),
        )
    };
    // What the Drilldown app sends when it opens: none stored reads as `{}` (its defaults).
    let r = json_post(&server, "Get", json!({})).ok();
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.json(), json!({}));
    // Its settings page saves this: no modifiedAt, so the server's time.
    let options =
        r#"{"collapsedFlamegraphs":true,"maxNodes":16384,"enableFlameGraphDotComExport":false}"#;
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let stored = json_post(
        &server,
        "Set",
        json!({"setting": {"name": "pluginSettings", "value": options}}),
    )
    .ok()
    .json();
    assert_eq!(stored["setting"]["name"], "pluginSettings");
    assert_eq!(stored["setting"]["value"], options);
    let at: i64 = stored["setting"]["modifiedAt"]
        .as_str()
        .expect("int64 as a string")
        .parse()
        .unwrap();
    assert!(at >= before_ms, "{at} < {before_ms}");
    // An editor that read it earlier cannot overwrite it (Pyroscope's already_exists).
    let older = json_post(
        &server,
        "Set",
        json!({"setting": {"name": "pluginSettings", "value": "{}", "modifiedAt": (at - 1).to_string()}}),
    );
    assert_eq!(
        older.status,
        409,
        "{}",
        String::from_utf8_lossy(&older.body)
    );
    assert_eq!(older.json()["code"], "already_exists");
    // Nothing to set, and a method not served.
    let empty = json_post(&server, "Set", json!({}));
    assert_eq!(
        (empty.status, empty.json()),
        (
            400,
            json!({"code": "invalid_argument", "message": "no setting values provided"})
        )
    );
    let other = json_post(&server, "Delete", json!({}));
    assert_eq!(other.status, 501);
    assert_eq!(other.json()["code"], "unimplemented");
    // Binary protobuf, as a Connect client sends it.
    let set = SetSettingsRequest {
        setting: Some(Setting {
            name: "another".into(),
            value: "x".into(),
            modified_at: 5,
        }),
    };
    server
        .post(&format!("{P}Set"), "application/proto", set.encode_to_vec())
        .ok();
    server.stop().expect("stops cleanly");

    // After a restart, both, in name order.
    let server = TestServer::start(&dir);
    let r = server
        .post(&format!("{P}Get"), "application/proto", Vec::new())
        .ok();
    assert_eq!(r.content_type, "application/proto");
    let got = GetSettingsResponse::decode(r.body.as_slice()).unwrap();
    assert_eq!(
        got.settings,
        [
            Setting {
                name: "another".into(),
                value: "x".into(),
                modified_at: 5
            },
            Setting {
                name: "pluginSettings".into(),
                value: options.into(),
                modified_at: at
            }
        ]
    );
    let v = json_post(&server, "Get", json!({})).ok().json();
    assert_eq!(v["settings"][1]["value"], options);
    server.stop().expect("stops cleanly");
}
