//! What the remote frontend sends, and what it reads, checked against the upstream message
//! definitions with their versions pinned here: a recording peer between the frontend and the
//! real spanprof peers keeps every request (and the answers it relays), and each is decoded
//! field by field against the field numbers, wire types and JSON names written below from:
//!
//! - Grafana Pyroscope **v2.2.1**, `api/querier/v1/querier.proto` (`SelectMergeStacktracesRequest`,
//!   `SelectHeatmapRequest`, `SelectSeriesRequest`, `ProfileTypesRequest`, `SeriesRequest`,
//!   `ProfileFormat`, `HeatmapQueryType`) and `api/types/v1/types.proto` (`LabelNamesRequest`,
//!   `LabelValuesRequest`, `ExemplarType`, `TimeSeriesAggregationType`);
//! - Grafana Tempo **v3.0.0** (unchanged to v3.0.3), `pkg/tempopb/tempo.proto`
//!   (`TraceByIDResponse`, `Trace`, `SearchResponse`, `TraceSearchMetadata`, `SpanSet`, `Span`,
//!   `SearchMetrics`), JSON as Tempo's jsonpb writes it (field names as declared, 64-bit
//!   integers as strings).
//!
//! The answers relayed are the spanprof peers': checking them against Tempo's shapes shows the
//! frontend reads those shapes (its answers equal the embedded store's, `remote.rs`).

use crate::remote::{frontend, remote_config, topology};

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use spanprof_format::link::to_hex;

/// Protobuf wire types.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;

/// Pyroscope v2.2.1 request messages: field number → (name, wire type).
fn pyroscope_request(method: &str) -> Option<BTreeMap<u32, (&'static str, u8)>> {
    let fields: &[(u32, &str, u8)] = match method {
        // querier.proto `SelectMergeStacktracesRequest`.
        "SelectMergeStacktraces" => &[
            (1, "profile_typeID", LEN),
            (2, "label_selector", LEN),
            (3, "start", VARINT),
            (4, "end", VARINT),
            (5, "max_nodes", VARINT),
            (6, "format", VARINT),
            (7, "stack_trace_selector", LEN),
            (8, "profile_id_selector", LEN),
            (9, "async", LEN),
            (10, "trace_id_selector", LEN),
            (11, "span_selector", LEN),
        ],
        // querier.proto `SelectHeatmapRequest` (step: seconds, a double).
        "SelectHeatmap" => &[
            (1, "profile_typeID", LEN),
            (2, "label_selector", LEN),
            (3, "start", VARINT),
            (4, "end", VARINT),
            (5, "step", I64),
            (6, "group_by", LEN),
            (7, "query_type", VARINT),
            (8, "exemplar_type", VARINT),
            (9, "limit", VARINT),
        ],
        // querier.proto `SelectSeriesRequest` (step: seconds, a double).
        "SelectSeries" => &[
            (1, "profile_typeID", LEN),
            (2, "label_selector", LEN),
            (3, "start", VARINT),
            (4, "end", VARINT),
            (5, "group_by", LEN),
            (6, "step", I64),
            (7, "aggregation", VARINT),
            (8, "stack_trace_selector", LEN),
            (9, "limit", VARINT),
            (10, "exemplar_type", VARINT),
        ],
        // querier.proto `ProfileTypesRequest`.
        "ProfileTypes" => &[(1, "start", VARINT), (2, "end", VARINT)],
        // types.proto `LabelNamesRequest`.
        "LabelNames" => &[
            (1, "matchers", LEN),
            (2, "start", VARINT),
            (3, "end", VARINT),
        ],
        // types.proto `LabelValuesRequest`.
        "LabelValues" => &[
            (1, "name", LEN),
            (2, "matchers", LEN),
            (3, "start", VARINT),
            (4, "end", VARINT),
        ],
        // querier.proto `SeriesRequest`.
        "Series" => &[
            (1, "matchers", LEN),
            (2, "label_names", LEN),
            (3, "start", VARINT),
            (4, "end", VARINT),
        ],
        _ => return None,
    };
    Some(fields.iter().map(|&(n, name, w)| (n, (name, w))).collect())
}

/// querier.proto `ProfileFormat`: FLAMEGRAPH = 1, TREE = 2, PPROF = 4 (the three the
/// frontend asks for; UNSPECIFIED = 0, DOT = 3).
const FORMAT_FLAMEGRAPH: u64 = 1;
const FORMAT_TREE: u64 = 2;
const FORMAT_PPROF: u64 = 4;
/// querier.proto `HeatmapQueryType`: SPAN = 2 (UNSPECIFIED = 0, INDIVIDUAL = 1).
const HEATMAP_QUERY_SPAN: u64 = 2;
/// types.proto `ExemplarType`: NONE = 1, SPAN = 3 (UNSPECIFIED = 0, INDIVIDUAL = 2).
const EXEMPLAR_NONE: u64 = 1;
const EXEMPLAR_SPAN: u64 = 3;
/// types.proto `TimeSeriesAggregationType`: SUM = 0, AVERAGE = 1.
const AGGREGATION_AVERAGE: u64 = 1;

/// One decoded protobuf field.
#[derive(Debug, Clone)]
enum Field {
    Varint(u64),
    Double(f64),
    Bytes(Vec<u8>),
}

fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or("a truncated varint")?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err("a varint over 10 bytes".into())
}

/// The fields of a message, in order; 64-bit fixed fields read as doubles (the only ones the
/// messages checked here have), 32-bit ones refused (none has one).
fn decode(buf: &[u8]) -> Result<Vec<(u32, u8, Field)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let key = varint(buf, &mut at)?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let value = match wire {
            VARINT => Field::Varint(varint(buf, &mut at)?),
            I64 => {
                let bytes = buf.get(at..at + 8).ok_or("a truncated double")?;
                at += 8;
                Field::Double(f64::from_le_bytes(bytes.try_into().unwrap()))
            }
            LEN => {
                let n = varint(buf, &mut at)? as usize;
                let bytes = buf.get(at..at + n).ok_or("a truncated field")?;
                at += n;
                Field::Bytes(bytes.to_vec())
            }
            w => return Err(format!("field {number}: wire type {w}, not expected here")),
        };
        out.push((number, wire, value));
    }
    Ok(out)
}

/// Checks `body` against `schema`: every field known, of its wire type; returns the fields
/// by name (strings as UTF-8, varints as numbers).
fn check_message(
    what: &str,
    body: &[u8],
    schema: &BTreeMap<u32, (&'static str, u8)>,
) -> BTreeMap<&'static str, Vec<Field>> {
    let mut named: BTreeMap<&'static str, Vec<Field>> = BTreeMap::new();
    for (number, wire, value) in decode(body).unwrap_or_else(|e| panic!("{what}: {e}")) {
        let (name, want) = schema
            .get(&number)
            .unwrap_or_else(|| panic!("{what}: field {number} is not in the upstream message"));
        assert_eq!(wire, *want, "{what}: field {number} ({name}): wire type");
        named.entry(name).or_default().push(value);
    }
    named
}

fn strings(fields: &BTreeMap<&str, Vec<Field>>, name: &str) -> Vec<String> {
    fields
        .get(name)
        .into_iter()
        .flatten()
        .map(|f| match f {
            Field::Bytes(b) => String::from_utf8(b.clone()).expect("a UTF-8 string field"),
            Field::Varint(v) => panic!("{name}: a varint {v}, not a string"),
            Field::Double(v) => panic!("{name}: a double {v}, not a string"),
        })
        .collect()
}

fn number(fields: &BTreeMap<&str, Vec<Field>>, name: &str) -> Option<u64> {
    match fields.get(name)?.last()? {
        Field::Varint(v) => Some(*v),
        Field::Bytes(_) | Field::Double(_) => panic!("{name}: not a varint"),
    }
}

fn double(fields: &BTreeMap<&str, Vec<Field>>, name: &str) -> Option<f64> {
    match fields.get(name)?.last()? {
        Field::Double(v) => Some(*v),
        _ => panic!("{name}: not a double"),
    }
}

/// A request the recording peer relayed, and its answer.
#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: u16,
    answer_type: String,
    answer: Vec<u8>,
}

impl Exchange {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Log = Arc<Mutex<Vec<Exchange>>>;

/// A listener relaying each HTTP/1.1 request to `upstream` (keep-alive towards the frontend,
/// one connection per request upstream), recording both sides.
fn recording_peer(upstream: SocketAddr) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let keep = Arc::clone(&log);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let log = Arc::clone(&keep);
            std::thread::spawn(move || {
                let _ = relay(conn, upstream, &log);
            });
        }
    });
    (addr, log)
}

/// A request or status line and its headers (names in lower case).
type Head = (String, Vec<(String, String)>);

fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut first = String::new();
    if r.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    Ok(Some((first.trim_end().to_owned(), headers)))
}

fn relay(conn: TcpStream, upstream: SocketAddr, log: &Log) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    while let Some((line, headers)) = read_head(&mut reader)? {
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap_or(0));
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        // HTTP/1.0 upstream: the answer is delimited by the close, never chunked.
        let mut up = TcpStream::connect(upstream)?;
        up.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut req = format!("{method} {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
        for (k, v) in &headers {
            if !matches!(k.as_str(), "host" | "connection" | "content-length") {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        req.push_str(&format!("content-length: {len}\r\n\r\n"));
        up.write_all(req.as_bytes())?;
        up.write_all(&body)?;
        let mut up = BufReader::new(up);
        let (status_line, answer_headers) = read_head(&mut up)?.unwrap_or_default();
        let mut answer = Vec::new();
        up.read_to_end(&mut answer)?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(502);
        let answer_type = answer_headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        write!(
            writer,
            "HTTP/1.1 {status} X\r\ncontent-type: {answer_type}\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )?;
        writer.write_all(&answer)?;
        log.lock().unwrap().push(Exchange {
            method,
            target,
            headers,
            body,
            status,
            answer_type,
            answer,
        });
    }
    Ok(())
}

/// Tempo v3.0.0 JSON names (tempo.proto, as jsonpb writes them).
const TRACE_SEARCH_METADATA: &[&str] = &[
    "traceID",
    "rootServiceName",
    "rootTraceName",
    "startTimeUnixNano",
    "durationMs",
    "spanSet",
    "spanSets",
    "serviceStats",
];
const SPAN_SET: &[&str] = &["spans", "matched", "attributes"];
const SPAN: &[&str] = &[
    "spanID",
    "name",
    "startTimeUnixNano",
    "durationNanos",
    "attributes",
];
const SEARCH_METRICS: &[&str] = &[
    "inspectedTraces",
    "inspectedBytes",
    "totalBlocks",
    "completedJobs",
    "totalJobs",
    "totalBlockBytes",
    "inspectedSpans",
];

#[track_caller]
fn keys_in(what: &str, v: &Value, allowed: &[&str]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {v}"));
    for k in obj.keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "{what}: {k:?} is not a field of Tempo 3.0's message ({allowed:?})"
        );
    }
}

/// A uint64 as jsonpb writes it: a decimal string.
#[track_caller]
fn u64_string(what: &str, v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what}: a uint64 is a JSON string upstream, got {v}"));
    s.parse::<u64>()
        .unwrap_or_else(|e| panic!("{what}: {s:?}: {e}"));
}

fn check_search_answer(answer: &Value) {
    keys_in("SearchResponse", answer, &["traces", "metrics"]);
    keys_in("SearchMetrics", &answer["metrics"], SEARCH_METRICS);
    let traces = answer["traces"].as_array().expect("traces");
    assert!(!traces.is_empty(), "the search found spans: {answer}");
    for t in traces {
        keys_in("TraceSearchMetadata", t, TRACE_SEARCH_METADATA);
        u64_string("startTimeUnixNano", &t["startTimeUnixNano"]);
        assert!(t["durationMs"].is_u64() || t["durationMs"].is_null(), "{t}");
        for set in t["spanSets"].as_array().expect("spanSets") {
            keys_in("SpanSet", set, SPAN_SET);
            for s in set["spans"].as_array().expect("spans") {
                keys_in("Span", s, SPAN);
                u64_string("startTimeUnixNano", &s["startTimeUnixNano"]);
                u64_string("durationNanos", &s["durationNanos"]);
                assert_eq!(s["spanID"].as_str().map(str::len), Some(16), "{s}");
            }
        }
    }
}

/// `TraceByIDResponse` (1 trace, 2 metrics, 3 status, 4 message), its `Trace` (1
/// resourceSpans: OTLP's `ResourceSpans`, as in `TracesData`).
fn check_trace_answer(body: &[u8]) {
    let response: BTreeMap<u32, (&str, u8)> = [
        (1, ("trace", LEN)),
        (2, ("metrics", LEN)),
        (3, ("status", VARINT)),
        (4, ("message", LEN)),
    ]
    .into();
    let fields = check_message("TraceByIDResponse", body, &response);
    let trace = match &fields.get("trace").expect("a trace")[0] {
        Field::Bytes(b) => b.clone(),
        Field::Varint(_) | Field::Double(_) => unreachable!(),
    };
    let trace_schema: BTreeMap<u32, (&str, u8)> = [(1, ("resourceSpans", LEN))].into();
    let spans = check_message("Trace", &trace, &trace_schema);
    assert!(!spans["resourceSpans"].is_empty());
}

#[test]
fn requests_and_answers_match_pyroscope_2_2_1_and_tempo_3_0() {
    let t = topology();
    let (pyro, pyro_log) = recording_peer(t._pyroscope.addr);
    let (tempo, tempo_log) = recording_peer(t._tempo.addr);
    let front = frontend(
        remote_config(pyro, tempo, Duration::from_secs(20)),
        "remote-wire",
    );
    let root = t
        .data
        .spans
        .iter()
        .filter(|s| s.parent.is_none())
        .max_by_key(|s| (t.data.cpu_where(|c| c.trace_id == s.trace_id), s.span_id))
        .expect("a root span");
    let (span, trace) = (to_hex(&root.span_id), to_hex(&root.trace_id));
    let descendants: BTreeSet<String> = {
        let mut ids = BTreeSet::from([span.clone()]);
        loop {
            let more: Vec<String> = t
                .data
                .spans
                .iter()
                .filter(|s| s.parent.is_some_and(|p| ids.contains(&to_hex(&p))))
                .map(|s| to_hex(&s.span_id))
                .filter(|id| !ids.contains(id))
                .collect();
            if more.is_empty() {
                break ids;
            }
            ids.extend(more);
        }
    };
    let name = root.name.replace(' ', "%20").replace('/', "%2F");

    // What each query must send: its span_selector, or its trace_id_selector, and the
    // format (flame graphs as Pyroscope's tree, exports as pprof).
    let expected: Vec<(String, BTreeSet<String>, Vec<String>, u64)> = vec![
        (
            format!("/api/v1/flamegraph?span_id={span}"),
            BTreeSet::from([span.clone()]),
            vec![],
            FORMAT_TREE,
        ),
        (
            format!("/api/v1/flamegraph?span_id={span}&include_child_spans=true&trace_id={trace}"),
            descendants.clone(),
            vec![],
            FORMAT_TREE,
        ),
        (
            format!("/api/v1/flamegraph?trace_id={trace}"),
            BTreeSet::new(),
            vec![trace.clone()],
            FORMAT_TREE,
        ),
        (
            format!("/api/v1/pprof?span_id={span}"),
            BTreeSet::from([span.clone()]),
            vec![],
            FORMAT_PPROF,
        ),
    ];
    for (path, spans, traces, format) in &expected {
        pyro_log.lock().unwrap().clear();
        let r = front.get(path);
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let calls = pyro_log.lock().unwrap().clone();
        let merges: Vec<&Exchange> = calls
            .iter()
            .filter(|c| c.target.ends_with("/SelectMergeStacktraces"))
            .collect();
        assert!(
            !merges.is_empty(),
            "{path}: no SelectMergeStacktraces in {calls:?}"
        );
        let schema = pyroscope_request("SelectMergeStacktraces").unwrap();
        let f = check_message(path, &merges.last().unwrap().body, &schema);
        let got_spans: BTreeSet<String> = strings(&f, "span_selector").into_iter().collect();
        assert_eq!(&got_spans, spans, "{path}: span_selector");
        assert_eq!(
            &strings(&f, "trace_id_selector"),
            traces,
            "{path}: trace_id_selector"
        );
        assert_eq!(number(&f, "format"), Some(*format), "{path}: format");
        if *format == FORMAT_TREE {
            // The whole tree, cut here as the embedded answer is cut.
            assert!(number(&f, "max_nodes").is_some_and(|n| n > 1), "{path}");
        }
    }

    // The trace view asks the spans' totals (flame graph format, one node) and their values
    // (SelectHeatmap's span exemplars); the series SelectSeries; the diff, traces grouped and
    // the catalog the rest.
    let r = front.get(&format!("/api/v1/traces/{trace}"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for q in [
        "/api/v1/timeseries?service=goapp&step=1s&exemplars=3".to_owned(),
        "/api/v1/timeseries?step=10s&group_by=service_name&aggregation=average".to_owned(),
        "/api/v1/spans?group=trace&sort=cpu".to_owned(),
        format!("/api/v1/diff?service=goapp&span_name={name}&baseline=fast"),
        "/api/v1/profile-types?service=goapp".to_owned(),
        // A range of its own: ProfileTypes over the same range ending now is reused for 5 s.
        "/api/v1/flamegraph?service=goapp&from=1".to_owned(),
        "/api/v1/label-names?service=goapp".to_owned(),
        "/api/v1/label-values?service=goapp&name=service_name".to_owned(),
        "/api/v1/series?service=goapp".to_owned(),
    ] {
        let r = front.get(&q);
        assert_eq!(r.status, 200, "{q}: {}", String::from_utf8_lossy(&r.body));
    }

    // Every Pyroscope call: a Connect unary POST in application/proto of a known method,
    // each field of the upstream message, its range in ms.
    let calls = pyro_log.lock().unwrap().clone();
    let mut methods = BTreeSet::new();
    let mut series_asked = Vec::new();
    for c in &calls {
        let method = c
            .target
            .strip_prefix("/querier.v1.QuerierService/")
            .unwrap_or_else(|| panic!("not a querier.v1 call: {}", c.target));
        methods.insert(method.to_owned());
        assert_eq!(c.method, "POST", "{method}");
        assert_eq!(
            c.header("content-type"),
            Some("application/proto"),
            "{method}"
        );
        assert_eq!(
            c.status,
            200,
            "{method}: {}",
            String::from_utf8_lossy(&c.answer)
        );
        let schema = pyroscope_request(method).unwrap_or_else(|| {
            panic!("{method}: not a call this test knows upstream's message of")
        });
        let f = check_message(method, &c.body, &schema);
        // A zero start (all of it) is left out, as proto3 writes zeros.
        let (start, end) = (
            number(&f, "start").unwrap_or(0),
            number(&f, "end").unwrap_or(0),
        );
        // ms since the epoch (2020..2100), not s or ns.
        assert!(
            (1_577_836_800_000..4_102_444_800_000).contains(&end) && start <= end,
            "{method}: start {start}, end {end}"
        );
        if method == "SelectMergeStacktraces" {
            let ty = strings(&f, "profile_typeID");
            assert_eq!(ty.len(), 1);
            assert_eq!(
                ty[0].split(':').count(),
                5,
                "{ty:?}: name:type:unit:type:unit"
            );
            for s in strings(&f, "label_selector") {
                assert!(s.starts_with('{') && s.ends_with('}'), "{s}");
            }
            let (spans, traces) = (
                strings(&f, "span_selector"),
                strings(&f, "trace_id_selector"),
            );
            // Upstream refuses both at once.
            assert!(
                spans.is_empty() || traces.is_empty(),
                "{spans:?} {traces:?}"
            );
            assert!(spans
                .iter()
                .all(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())));
            assert!(traces
                .iter()
                .all(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())));
            let format = number(&f, "format").unwrap_or(0);
            assert!(
                [FORMAT_FLAMEGRAPH, FORMAT_TREE, FORMAT_PPROF].contains(&format),
                "{format}"
            );
            if format == FORMAT_FLAMEGRAPH {
                assert_eq!(number(&f, "max_nodes"), Some(1), "a total: one node");
            }
        }
        if method == "SelectHeatmap" || method == "SelectSeries" {
            let ty = strings(&f, "profile_typeID");
            assert_eq!(ty.len(), 1, "{method}");
            assert_eq!(ty[0].split(':').count(), 5, "{method}: {ty:?}");
            for s in strings(&f, "label_selector") {
                assert!(s.starts_with('{') && s.ends_with('}'), "{method}: {s}");
            }
            // Seconds: a step of ms or ns would be 1,000 times off.
            let step = double(&f, "step").unwrap_or_else(|| panic!("{method}: no step"));
            assert!(step > 0.0 && step < 86_400.0, "{method}: step {step} s");
        }
        if method == "SelectHeatmap" {
            assert_eq!(number(&f, "query_type"), Some(HEATMAP_QUERY_SPAN));
            assert_eq!(number(&f, "exemplar_type"), Some(EXEMPLAR_SPAN));
        }
        if method == "SelectSeries" {
            // Span exemplars when the caller asked exemplars, else none.
            let exemplars = number(&f, "exemplar_type");
            assert!(
                [Some(EXEMPLAR_SPAN), Some(EXEMPLAR_NONE)].contains(&exemplars),
                "{exemplars:?}"
            );
            series_asked.push((
                double(&f, "step").unwrap_or(0.0),
                strings(&f, "group_by"),
                number(&f, "aggregation").unwrap_or(0),
                exemplars,
            ));
        }
    }
    for m in [
        "SelectMergeStacktraces",
        "SelectHeatmap",
        "SelectSeries",
        "ProfileTypes",
        "LabelNames",
        "LabelValues",
        "Series",
    ] {
        assert!(methods.contains(m), "{m} was never called: {methods:?}");
    }
    // The two series asked: 1 s with span exemplars; 10 s by service, averaged.
    series_asked.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        series_asked,
        vec![
            (1.0, vec![], 0, Some(EXEMPLAR_SPAN)),
            (
                10.0,
                vec!["service_name".to_owned()],
                AGGREGATION_AVERAGE,
                Some(EXEMPLAR_NONE)
            ),
        ]
    );

    // Tempo: trace by id (protobuf) and TraceQL search (JSON), answers of Tempo 3.0's shapes.
    let calls = tempo_log.lock().unwrap().clone();
    let (mut by_id, mut searches) = (0, 0);
    for c in &calls {
        assert_eq!(c.method, "GET", "{}", c.target);
        assert_eq!(
            c.status,
            200,
            "{}: {}",
            c.target,
            String::from_utf8_lossy(&c.answer)
        );
        if let Some(id) = c.target.strip_prefix("/api/v2/traces/") {
            by_id += 1;
            assert_eq!(id.len(), 32, "{id}");
            assert_eq!(c.header("accept"), Some("application/protobuf"));
            check_trace_answer(&c.answer);
        } else if let Some(query) = c.target.strip_prefix("/api/search?") {
            searches += 1;
            let params: BTreeMap<&str, &str> =
                query.split('&').filter_map(|p| p.split_once('=')).collect();
            // Tempo's search parameters: q (TraceQL), start and end (unix s), limit, spss.
            for k in params.keys() {
                assert!(
                    ["q", "start", "end", "limit", "spss"].contains(k),
                    "{k} in {query}"
                );
            }
            assert!(
                params["q"].starts_with("%7B") || params["q"].starts_with('{'),
                "{query}"
            );
            if let Some(end) = params.get("end") {
                let end: u64 = end.parse().unwrap();
                assert!(
                    (1_577_836_800..4_102_444_800).contains(&end),
                    "end {end}: unix s"
                );
            }
            assert!(
                c.answer_type.starts_with("application/json"),
                "{}",
                c.answer_type
            );
            check_search_answer(&serde_json::from_slice(&c.answer).unwrap());
        } else {
            panic!("not a Tempo call the frontend should make: {}", c.target);
        }
    }
    assert!(by_id >= 1 && searches >= 1, "{calls:?}");
}
