//! `storage.backend: remote`: a spanprof query frontend over a Pyroscope and a Tempo answers
//! as a spanprof with its embedded store fed the same data.
//!
//! Grafana Pyroscope and Tempo cannot run on this machine (no network, no container runtime):
//! the peers are spanprof servers addressed only through the protocols the frontend speaks,
//! one holding only the profiles (its `querier.v1`) and one only the spans (its Tempo API).
//! The data is a real Go CPU profile whose samples carry span and trace ids, and its spans.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::OnceLock;
use std::time::Duration;

use common::goprofile::GoData;
use serde_json::Value;
use spanprof_format::link::to_hex;
use spanprof_server::config::remote::{Endpoint, EndpointAuth, RemoteConfig};
use spanprof_testkit::server::TestServer;

/// The peers and the frontend over them, started once per test process.
pub(crate) struct Topology {
    pub(crate) embedded: TestServer,
    pub(crate) _pyroscope: TestServer,
    pub(crate) _tempo: TestServer,
    pub(crate) frontend: TestServer,
    pub(crate) data: GoData,
}

pub(crate) fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint {
        url: format!("http://{addr}"),
        tenant: None,
        auth: EndpointAuth::None,
    }
}

pub(crate) fn remote_config(
    pyroscope: SocketAddr,
    tempo: SocketAddr,
    timeout: Duration,
) -> RemoteConfig {
    RemoteConfig {
        pyroscope: endpoint(pyroscope),
        tempo: endpoint(tempo),
        timeout,
        max_answer_bytes: 64 << 20,
    }
}

pub(crate) fn frontend(remote: RemoteConfig, name: &str) -> TestServer {
    TestServer::in_fresh_dir(name, |c| {
        c.storage.enabled = Some(false);
        c.remote = Some(remote);
    })
}

pub(crate) fn topology() -> &'static Topology {
    static T: OnceLock<Topology> = OnceLock::new();
    T.get_or_init(|| {
        let data = GoData::load();
        let embedded = TestServer::in_fresh_dir("remote-embedded", |_| {});
        data.ingest(&embedded);
        let pyroscope = TestServer::in_fresh_dir("remote-pyroscope", |_| {});
        pyroscope
            .post(
                "/v1development/profiles",
                "application/x-protobuf",
                data.otlp_profiles(),
            )
            .ok();
        let tempo = TestServer::in_fresh_dir("remote-tempo", |_| {});
        tempo
            .post("/v1/traces", "application/json", data.otlp_traces_json())
            .ok();
        let frontend = frontend(
            remote_config(pyroscope.addr, tempo.addr, Duration::from_secs(20)),
            "remote-frontend",
        );
        Topology {
            embedded,
            _pyroscope: pyroscope,
            _tempo: tempo,
            frontend,
            data,
        }
    })
}

/// The parts of a flame graph answer both backends know: the layout, the tree, the type.
fn comparable(v: &Value) -> Value {
    serde_json::json!({
        "flamegraph": v["flamegraph"],
        "tree": v["tree"],
        "profile_type": v["summary"]["profile_type"],
        "unit": v["summary"]["unit"],
        "value_selected": v["summary"]["value_selected"],
    })
}

#[track_caller]
fn same_flame_graph(t: &Topology, query: &str) -> Value {
    let path = format!("/api/v1/flamegraph?{query}");
    let local = t.embedded.get(&path).ok().json();
    let remote = t.frontend.get(&path).ok().json();
    assert!(
        local["summary"]["value_selected"].as_u64().unwrap_or(0) > 0,
        "{query}: the embedded answer has samples: {local}"
    );
    assert_eq!(comparable(&remote), comparable(&local), "{query}");
    remote
}

#[test]
fn span_child_and_trace_flame_graphs_equal_the_embedded_ones() {
    let t = topology();
    let root = t
        .data
        .spans
        .iter()
        .filter(|s| s.parent.is_none())
        .max_by_key(|s| (t.data.cpu_where(|c| c.trace_id == s.trace_id), s.span_id))
        .expect("a root span");
    let child = t
        .data
        .spans
        .iter()
        .find(|s| s.parent == Some(root.span_id) && s.cpu_ns > 0)
        .expect("the heaviest trace's root has a child with samples");
    let (span, trace) = (to_hex(&root.span_id), to_hex(&root.trace_id));
    let own = same_flame_graph(t, &format!("span_id={span}"));
    // The remote says what it cannot know.
    assert!(own["summary"]["samples_selected"].is_null());
    assert!(own["summary"]["remote"]["not_available"].is_array());
    let rolled = same_flame_graph(t, &format!("span_id={span}&include_child_spans=true"));
    same_flame_graph(
        t,
        &format!("span_id={span}&include_child_spans=true&trace_id={trace}"),
    );
    same_flame_graph(t, &format!("trace_id={trace}"));
    assert!(
        rolled["summary"]["value_selected"].as_u64().unwrap()
            >= own["summary"]["value_selected"].as_u64().unwrap() + child.cpu_ns as u64,
        "the child's samples are added"
    );
    // The service's whole graph, and the top functions.
    same_flame_graph(t, "service=goapp");
    for path in ["/api/v1/services", "/api/v1/services?spans=true"] {
        let (l, r) = (
            t.embedded.get(path).ok().json(),
            t.frontend.get(path).ok().json(),
        );
        assert_eq!(r, l, "{path}");
    }
    let path = format!("/api/v1/top?trace_id={trace}&limit=20");
    let (l, r) = (
        t.embedded.get(&path).ok().json(),
        t.frontend.get(&path).ok().json(),
    );
    assert_eq!(r["functions"], l["functions"]);
}

#[test]
fn pprof_and_catalog_answers_equal_the_embedded_ones() {
    let t = topology();
    let trace = to_hex(&t.data.spans[0].trace_id);
    let tree = |body: &[u8]| {
        let p = spanprof_format::pprof::decode(body, 64 << 20).expect("a pprof answer");
        let mut stacks: Vec<(Vec<String>, i64)> = p
            .sample
            .iter()
            .map(|s| {
                let names = s
                    .location_id
                    .iter()
                    .flat_map(|id| &p.location.iter().find(|l| l.id == *id).unwrap().line)
                    .map(|l| {
                        let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                        p.str(f.name).unwrap_or("").to_owned()
                    })
                    .collect();
                (names, s.value[0])
            })
            .collect();
        stacks.sort();
        stacks
    };
    let path = format!("/api/v1/pprof?trace_id={trace}");
    let (l, r) = (t.embedded.get(&path).ok(), t.frontend.get(&path).ok());
    assert!(!tree(&l.body).is_empty());
    assert_eq!(tree(&r.body), tree(&l.body));
    let path = "/api/v1/profile-types?service=goapp";
    let (l, r) = (
        t.embedded.get(path).ok().json(),
        t.frontend.get(path).ok().json(),
    );
    assert_eq!(r["profile_types"], l["profile_types"]);
    assert_eq!(r["default"], l["default"]);
    for path in [
        "/api/v1/label-names?service=goapp",
        "/api/v1/label-values?service=goapp&name=service_name",
        "/api/v1/series?service=goapp",
    ] {
        let (l, r) = (
            t.embedded.get(path).ok().json(),
            t.frontend.get(path).ok().json(),
        );
        assert_eq!(r, l, "{path}");
    }
}

#[test]
fn timeseries_and_traces_grouped_are_answered_as_embedded() {
    let t = topology();
    // Series: SelectSeries, grouped, with span exemplars; all but the profile windows' length.
    for path in [
        "/api/v1/timeseries?service=goapp&step=1s&exemplars=3",
        "/api/v1/timeseries?step=10s&group_by=service_name&aggregation=average",
    ] {
        let (l, r) = (
            t.embedded.get(path).ok().json(),
            t.frontend.get(path).ok().json(),
        );
        let points = l["series"][0]["points"].as_array().map_or(0, Vec::len);
        assert!(points > 0, "{path}: no points embedded: {l}");
        if path.contains("exemplars") {
            let spans = l["series"][0]["points"][0]["exemplars"].as_array();
            assert!(spans.is_some_and(|e| !e.is_empty()), "{path}: {l}");
        }
        for key in ["profile_type", "unit", "step_ns", "aggregation", "series"] {
            assert_eq!(r[key], l[key], "{path}: {key}");
        }
        assert!(r["profile_duration_ns"].is_null(), "{r}");
    }
    // Traces grouped by root, by CPU and by duration.
    for path in [
        "/api/v1/spans?group=trace&sort=cpu",
        "/api/v1/spans?group=trace&sort=duration&order=asc&limit=3",
    ] {
        let (l, r) = (
            t.embedded.get(path).ok().json(),
            t.frontend.get(path).ok().json(),
        );
        assert!(l["count"].as_u64().unwrap_or(0) > 0, "{path}: {l}");
        assert!(
            l["traces"][0]["cpu"].as_i64().unwrap_or(0) > 0,
            "{path}: {l}"
        );
        for key in ["count", "more", "unit", "profile_type", "traces"] {
            assert_eq!(r[key], l[key], "{path}: {key}");
        }
    }
}

#[test]
fn grafana_facing_apis_pass_through_and_the_rest_says_it_is_not_remote() {
    let t = topology();
    let trace = to_hex(&t.data.spans[0].trace_id);
    let path = format!("/api/v2/traces/{trace}");
    let (l, r) = (t.embedded.get(&path).ok(), t.frontend.get(&path).ok());
    let spans = |v: &Value| v["trace"]["resourceSpans"][0]["scopeSpans"][0]["spans"].clone();
    assert_eq!(
        spans(&r.json()).as_array().map(Vec::len),
        spans(&l.json()).as_array().map(Vec::len)
    );
    // A series of one span grouped by a label is not answered remotely (each group would be
    // its own span_selector calls).
    let span = to_hex(&t.data.spans[0].span_id);
    let r = t.frontend.get(&format!(
        "/api/v1/timeseries?span_id={span}&group_by=service_name"
    ));
    assert_eq!(r.status, 501, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("storage.backend remote"));
}

#[test]
fn a_series_of_one_span_or_one_trace_is_answered_as_embedded_at_profile_time() {
    let t = topology();
    // Pyroscope's SelectSeries selects by labels only: each step's total is asked with the
    // span (the trace) as selector. Both stores place a sample at its profile's time, so the
    // steps are the same; the spans with samples are found by the embedded store.
    let mut compared = 0;
    let trace = to_hex(&t.data.spans[0].trace_id);
    let mut paths = vec![format!("/api/v1/timeseries?trace_id={trace}&step=1s")];
    paths.extend(t.data.spans.iter().take(40).map(|s| {
        format!(
            "/api/v1/timeseries?span_id={}&step=500ms&exemplars=2",
            to_hex(&s.span_id)
        )
    }));
    for path in &paths {
        let l = t.embedded.get(path).ok().json();
        if l["series"][0]["points"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            continue;
        }
        let r = t.frontend.get(path).ok().json();
        let without_exemplars = |v: &Value| {
            let mut v = v["series"].clone();
            for p in v[0]["points"].as_array_mut().into_iter().flatten() {
                p["exemplars"] = Value::Null;
            }
            v
        };
        assert_eq!(without_exemplars(&r), without_exemplars(&l), "{path}");
        for key in ["profile_type", "unit", "step_ns", "aggregation"] {
            assert_eq!(r[key], l[key], "{path}: {key}");
        }
        // The exemplars (each step's spans with their first profile's time) are not asked of
        // the remote, and the answer says so rather than leaving them out silently.
        assert_eq!(
            r["series"][0]["points"][0]["exemplars"],
            serde_json::json!([])
        );
        let missing = r["remote"]["not_available"].to_string();
        assert!(missing.contains("exemplars of a series of spans"), "{r}");
        compared += 1;
    }
    assert!(
        compared >= 2,
        "only {compared} of {paths:?} have samples embedded"
    );
    // A snapshot-style average cannot be told from a step's total: said, not guessed.
    let span = to_hex(&t.data.spans[0].span_id);
    let r = t.frontend.get(&format!(
        "/api/v1/timeseries?span_id={span}&aggregation=average"
    ));
    assert_eq!(r.status, 501, "{}", String::from_utf8_lossy(&r.body));
}

/// A peer that accepts connections and answers each with `reply` (or never, when `None`).
fn fake_peer(reply: Option<Vec<u8>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            match &reply {
                Some(r) => {
                    let _ = conn.write_all(r);
                }
                // Silent: the connection stays open, unanswered.
                None => held.push(conn),
            }
        }
    });
    addr
}

fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[track_caller]
fn refused(server: &TestServer, status: u16, words: &[&str]) {
    let r = server.get("/api/v1/flamegraph?service=goapp");
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, status, "{body}");
    for w in words {
        assert!(body.contains(w), "{w:?} in {body}");
    }
}

#[test]
fn unreachable_slow_wrong_and_oversized_backends_are_clear_errors() {
    let t = topology();
    let tempo = t._tempo.addr;
    let down = frontend(
        remote_config(closed_port(), tempo, Duration::from_secs(5)),
        "remote-down",
    );
    refused(&down, 502, &["Pyroscope", "ProfileTypes", "cannot reach"]);
    let slow = frontend(
        remote_config(fake_peer(None), tempo, Duration::from_millis(500)),
        "remote-slow",
    );
    refused(&slow, 504, &["Pyroscope", "no answer within"]);
    let garbage = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: 4\r\nconnection: close\r\n\r\n\xff\xff\xff\xff".to_vec();
    let wrong = frontend(
        remote_config(fake_peer(Some(garbage)), tempo, Duration::from_secs(5)),
        "remote-wrong",
    );
    refused(&wrong, 502, &["Pyroscope", "not a valid"]);
    // Ten times the rows the cap allows: refused at the cap, not read whole.
    let mut big = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: 20480\r\nconnection: close\r\n\r\n".to_vec();
    big.extend(std::iter::repeat_n(0u8, 20480));
    let mut capped = remote_config(fake_peer(Some(big)), tempo, Duration::from_secs(5));
    capped.max_answer_bytes = 2048;
    let capped = frontend(capped, "remote-capped");
    refused(&capped, 502, &["Pyroscope", "larger than 2048 bytes"]);
}

/// The fields of a span both backends know (coverage only where samples say it).
fn span_fields(s: &Value) -> Value {
    serde_json::json!({
        "span_id": s["span_id"], "trace_id": s["trace_id"], "parent_span_id": s["parent_span_id"],
        "name": s["name"], "service": s["service"], "kind": s["kind"],
        "status_code": s["status_code"], "start_ns": s["start_ns"],
        "duration_ns": s["duration_ns"], "total": s["total"], "unit": s["unit"],
        "profile_type": s["profile_type"], "attributes": s["attributes"],
        "resource": s["resource"], "events": s["events"],
        "sampled": s["coverage"] == "sampled",
        "depth": s["depth"], "offset_ns": s["offset_ns"],
    })
}

#[test]
fn trace_and_span_views_equal_the_embedded_ones() {
    let t = topology();
    let heaviest = t
        .data
        .spans
        .iter()
        .max_by_key(|s| (t.data.cpu_where(|c| c.trace_id == s.trace_id), s.span_id))
        .expect("a span");
    let trace = to_hex(&heaviest.trace_id);
    let path = format!("/api/v1/traces/{trace}");
    let (l, r) = (
        t.embedded.get(&path).ok().json(),
        t.frontend.get(&path).ok().json(),
    );
    let spans = |v: &Value| -> Vec<Value> {
        v["spans"]
            .as_array()
            .expect("spans")
            .iter()
            .map(span_fields)
            .collect()
    };
    assert!(l["total"].as_u64().unwrap() > 0, "{l}");
    assert_eq!(spans(&r), spans(&l));
    for k in [
        "trace_id",
        "start_ns",
        "duration_ns",
        "profile_type",
        "total",
    ] {
        assert_eq!(r[k], l[k], "{k}");
    }
    assert_eq!(r["unknown_spans_total"], l["unknown_spans_total"]);
    assert!(r["samples"].is_null() && r["remote"]["not_available"].is_array());
    // A span without samples is not given a verdict the remote cannot make.
    if let Some(idle) = r["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["total"] == 0)
    {
        assert!(idle["coverage"]
            .as_str()
            .unwrap()
            .contains("remote backend"));
    }
    // The span view, by trace (as the UI asks) and by its samples alone.
    let sampled = l["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["total"].as_u64().unwrap_or(0) > 0)
        .expect("a sampled span");
    let id = sampled["span_id"].as_str().unwrap();
    let local = t.embedded.get(&format!("/api/v1/spans/{id}")).ok().json();
    for path in [
        format!("/api/v1/spans/{id}?trace_id={trace}"),
        format!("/api/v1/spans/{id}"),
    ] {
        let remote = t.frontend.get(&path).ok().json();
        let drop_tree = |v: &Value| {
            let mut f = span_fields(v);
            f.as_object_mut().unwrap().remove("depth");
            f.as_object_mut().unwrap().remove("offset_ns");
            f
        };
        assert_eq!(
            drop_tree(&remote["span"]),
            drop_tree(&local["span"]),
            "{path}"
        );
        assert_eq!(remote["windows"]["state"], "unknown");
    }
    // Not in Tempo: 404 naming it.
    let r = t
        .frontend
        .get(&format!("/api/v1/spans/00000000000000ff?trace_id={trace}"));
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    // The UI's span panel asks with focus=span|children.
    let root = l["spans"][0]["span_id"].as_str().unwrap();
    for focus in ["span", "children"] {
        same_flame_graph(t, &format!("span_id={root}&focus={focus}"));
    }
}

#[test]
fn slow_against_fast_and_spans_by_name_equal_the_embedded_answers() {
    let t = topology();
    // The span name with the most spans that have samples.
    let mut names: Vec<&str> = t.data.spans.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    names.dedup();
    let name = names
        .into_iter()
        .max_by_key(|n| {
            let count = t.data.spans.iter().filter(|s| s.name == *n).count();
            (t.data.cpu_where(|s| s.name == *n) > 0, count)
        })
        .unwrap();
    let n: String = percent(name);
    for q in [
        format!("span_name={n}&above_percentile=75"),
        format!("span_name={n}&below_percentile=50"),
        format!("service=goapp&span_name={n}"),
    ] {
        let path = format!("/api/v1/flamegraph?{q}");
        let (l, r) = (
            t.embedded.get(&path).ok().json(),
            t.frontend.get(&path).ok().json(),
        );
        assert_eq!(comparable(&r), comparable(&l), "{q}");
    }
    let diff = |q: &str| {
        let path = format!("/api/v1/diff?{q}");
        let (l, r) = (
            t.embedded.get(&path).ok().json(),
            t.frontend.get(&path).ok().json(),
        );
        assert!(
            l["flamegraph"]["total"].as_u64().unwrap_or(0) > 0,
            "{q}: {l}"
        );
        assert_eq!(r["flamegraph"], l["flamegraph"], "{q}");
        assert_eq!(r["tree"], l["tree"], "{q}");
        assert_eq!(
            r["right"]["value_selected"], l["right"]["value_selected"],
            "{q}"
        );
    };
    diff(&format!("service=goapp&span_name={n}&baseline=fast"));
    diff(&format!(
        "span_name={n}&left.below_percentile=50&right.above_percentile=90"
    ));
    diff(&format!(
        "service=goapp&span_name={n}&baseline=span_name&right.above_percentile=90"
    ));
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn answers_over_settled_ranges_come_from_the_cache_when_the_peer_is_gone() {
    let data = GoData::load();
    let pyroscope = TestServer::in_fresh_dir("remote-cache-pyroscope", |_| {});
    pyroscope
        .post(
            "/v1development/profiles",
            "application/x-protobuf",
            data.otlp_profiles(),
        )
        .ok();
    let front = frontend(
        remote_config(
            pyroscope.addr,
            topology()._tempo.addr,
            Duration::from_secs(5),
        ),
        "remote-cache",
    );
    // The recording's profile, in ms; its range ended long before the 10 min of settling.
    let at_ms = data.profile.time_nanos / 1_000_000;
    let now_ms = spanprof_server::clock::now_ns() / 1_000_000;
    assert!(
        at_ms + 120_000 < now_ms - 600_000,
        "the recording is recent"
    );
    let settled = |to_ms: i64| {
        format!(
            "/api/v1/flamegraph?service=goapp&from={}&to={to_ms}",
            at_ms - 60_000
        )
    };
    let open = format!("/api/v1/flamegraph?service=goapp&from={}", at_ms - 60_000);
    let before = front.get(&settled(at_ms + 120_000)).ok().json();
    assert!(before["summary"]["value_selected"].as_u64().unwrap() > 0);
    let open_before = front.get(&open).ok().json();
    assert_eq!(open_before["tree"], before["tree"]);
    pyroscope.stop().expect("the peer stops");
    // Settled and asked before: from the cache.
    let after = front.get(&settled(at_ms + 120_000)).ok().json();
    assert_eq!(comparable(&after), comparable(&before));
    // Not settled (no end), or never asked: to the peer, which is gone.
    for path in [open, settled(at_ms + 180_000)] {
        let r = front.get(&path);
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, 502, "{path}: {body}");
        assert!(body.contains("Pyroscope"), "{body}");
    }
}
