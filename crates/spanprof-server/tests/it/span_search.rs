//! Finding spans through the real server: a real Go CPU profile and spans for its span ids
//! go in over OTLP/HTTP, and `/api/v1/spans` (count, paging, every sort, substring and regex
//! names, traces), `/api/v1/span-points` and `/api/v1/span-names` are checked against what
//! the decoded pprof and the spans sent say.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use common::goprofile::{SpanTruth, SERVICE};
use serde_json::Value;
use spanprof_format::link::to_hex;
use spanprof_testkit::server::enc;

use common::goprofile::GoServer as Fixture;

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture::start("span-search-store", |_| {}))
}

#[track_caller]
fn get_json(path: &str) -> Value {
    fixture().server.get(path).ok().json()
}

fn ids(answer: &Value, list: &str, key: &str) -> Vec<String> {
    answer[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {answer}"))
        .iter()
        .map(|s| s[key].as_str().unwrap().to_owned())
        .collect()
}

/// Spans as the API orders them: `key` then start, then span id.
fn ordered<K: Ord>(
    spans: &[SpanTruth],
    key: impl Fn(&SpanTruth) -> K,
    descending: bool,
) -> Vec<String> {
    let mut v: Vec<&SpanTruth> = spans.iter().collect();
    v.sort_by(|a, b| {
        let k = key(a).cmp(&key(b));
        let k = if descending { k.reverse() } else { k };
        k.then(a.start_ns.cmp(&b.start_ns))
            .then(a.span_id.cmp(&b.span_id))
    });
    v.iter().map(|s| to_hex(&s.span_id)).collect()
}

#[test]
fn every_match_is_counted_and_pages_walk_them_in_each_order() {
    let data = &fixture().data;
    let n = data.spans.len();
    assert!(n > 40, "the recording has {n} spans");
    for (sort, order) in [
        ("duration", "desc"),
        ("duration", "asc"),
        ("start", "asc"),
        ("start", "desc"),
        ("cpu", "desc"),
        ("cpu", "asc"),
        ("name", "asc"),
        ("name", "desc"),
    ] {
        let desc = order == "desc";
        let want = match sort {
            "duration" => ordered(&data.spans, SpanTruth::duration_ns, desc),
            "start" => ordered(&data.spans, |s| s.start_ns, desc),
            "cpu" => ordered(&data.spans, |s| s.cpu_ns, desc),
            _ => ordered(&data.spans, |s| s.name.clone(), desc),
        };
        // Three pages of 17 walk the first 51 in order, without overlap.
        let mut got = Vec::new();
        for page in 0..3 {
            let a = get_json(&format!(
                "/api/v1/spans?service={SERVICE}&sort={sort}&order={order}&limit=17&offset={}",
                page * 17
            ));
            assert_eq!(a["count"].as_u64(), Some(n as u64), "{sort} {order}");
            assert_eq!(a["more"], false);
            assert_eq!(a["sort"], sort);
            got.extend(ids(&a, "spans", "span_id"));
        }
        assert_eq!(got, want[..51.min(n)], "{sort} {order}");
    }
    // The most costly span carries the CPU its samples sum to.
    let top = get_json(&format!("/api/v1/spans?service={SERVICE}&sort=cpu&limit=1"));
    let heaviest = data.spans.iter().map(|s| s.cpu_ns).max().unwrap();
    assert!(heaviest > 0);
    assert_eq!(top["spans"][0]["total"].as_i64(), Some(heaviest));
    // Past the last match: an empty page, still counted.
    let past = get_json(&format!("/api/v1/spans?service={SERVICE}&offset={n}"));
    assert_eq!(past["spans"].as_array().unwrap().len(), 0);
    assert_eq!(past["count"].as_u64(), Some(n as u64));
}

#[test]
fn names_match_whole_by_part_or_by_regex() {
    let data = &fixture().data;
    let names: BTreeSet<&str> = data.spans.iter().map(|s| s.name.as_str()).collect();
    let count = |pred: &dyn Fn(&str) -> bool| data.spans.iter().filter(|s| pred(&s.name)).count();
    let heavy = "GET /cpu-heavy";
    assert!(names.contains(heavy), "{names:?}");
    let cases: [(&str, &str, usize); 5] = [
        ("exact", heavy, count(&|n| n == heavy)),
        // A part, in any case; nothing of an exact search.
        (
            "contains",
            "CPU-",
            count(&|n| n.to_lowercase().contains("cpu-")),
        ),
        ("exact", "cpu-", 0),
        // A regex matches anywhere unless anchored.
        (
            "regex",
            "cpu-(heavy|light)$",
            count(&|n| n.ends_with("cpu-heavy") || n.ends_with("cpu-light")),
        ),
        ("regex", "^heavy", 0),
    ];
    for (mode, text, want) in cases {
        let a = get_json(&format!(
            "/api/v1/spans?name={}&name_match={mode}&limit=1000",
            enc(text)
        ));
        assert_eq!(a["count"].as_u64(), Some(want as u64), "{mode} {text}");
        assert_eq!(a["spans"].as_array().unwrap().len(), want.min(1000));
    }
    // Offered names: those containing the text, the ones starting with it first.
    let offered = get_json("/api/v1/span-names?q=GET");
    let got: Vec<&str> = offered["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let want: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.to_lowercase().contains("get"))
        .collect();
    assert_eq!(
        got.iter().copied().collect::<BTreeSet<_>>(),
        want.iter().copied().collect()
    );
    let one = get_json("/api/v1/span-names?limit=1");
    assert_eq!(one["names"].as_array().unwrap().len(), 1);
    assert_eq!(one["more"], names.len() > 1);
}

#[test]
fn traces_group_their_spans_with_root_count_duration_and_cpu() {
    let data = &fixture().data;
    let mut traces: BTreeMap<[u8; 16], Vec<&SpanTruth>> = BTreeMap::new();
    for s in &data.spans {
        traces.entry(s.trace_id).or_default().push(s);
    }
    let a = get_json(&format!(
        "/api/v1/spans?group=trace&sort=cpu&limit=10000&service={SERVICE}"
    ));
    assert_eq!(a["count"].as_u64(), Some(traces.len() as u64));
    let got = a["traces"].as_array().unwrap();
    assert_eq!(got.len(), traces.len());
    let mut last = i64::MAX;
    for t in got {
        let id: [u8; 16] =
            spanprof_format::link::parse_id(t["trace_id"].as_str().unwrap()).unwrap();
        let spans = &traces[&id];
        let ids: HashSet<[u8; 8]> = spans.iter().map(|s| s.span_id).collect();
        let root = spans
            .iter()
            .filter(|s| s.parent.is_none_or(|p| !ids.contains(&p)))
            .min_by_key(|s| (s.start_ns, s.span_id))
            .unwrap();
        assert_eq!(t["root_name"], root.name.as_str(), "{t}");
        assert_eq!(t["root_service"], SERVICE);
        assert_eq!(t["spans"].as_u64(), Some(spans.len() as u64));
        let start = spans.iter().map(|s| s.start_ns).min().unwrap();
        let end = spans.iter().map(|s| s.end_ns).max().unwrap();
        assert_eq!(t["duration_ns"].as_u64(), Some(end - start));
        let cpu: i64 = spans.iter().map(|s| s.cpu_ns).sum();
        assert_eq!(t["cpu"].as_i64(), Some(cpu), "{t}");
        assert!(cpu <= last, "most CPU first");
        last = cpu;
    }
}

#[test]
fn chart_points_are_every_match_with_its_cpu() {
    let data = &fixture().data;
    let a = get_json(&format!("/api/v1/span-points?service={SERVICE}"));
    let n = data.spans.len();
    assert_eq!(a["count"].as_u64(), Some(n as u64));
    assert_eq!(a["shown"].as_u64(), Some(n as u64));
    assert_eq!(a["unit"], "nanoseconds");
    let names = a["names"].as_array().unwrap();
    for (i, id) in a["span_id"].as_array().unwrap().iter().enumerate() {
        let want = data.span(&spanprof_format::link::parse_id(id.as_str().unwrap()).unwrap());
        assert_eq!(a["cpu"][i].as_i64(), Some(want.cpu_ns));
        assert_eq!(a["duration_ns"][i].as_u64(), Some(want.duration_ns()));
        let name = a["name"][i].as_u64().unwrap() as usize;
        assert_eq!(names[name], want.name.as_str());
        let start_ms = a["start_ms"][i].as_f64().unwrap();
        assert!((start_ms - want.start_ns as f64 / 1e6).abs() < 0.01);
    }
    // A limit keeps the longest.
    let few = get_json(&format!("/api/v1/span-points?service={SERVICE}&limit=5"));
    let longest = ordered(&data.spans, SpanTruth::duration_ns, true);
    let got: BTreeSet<&str> = few["span_id"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(got, longest[..5].iter().map(String::as_str).collect());
}

/// A span sent twice (a retried export) is one match, in the count, the pages and the
/// chart; its trace has one span. (Here both land in one segment; the store's
/// `span_page_tests` seal a segment between them.)
#[test]
fn a_span_sent_twice_is_counted_once() {
    let server = &fixture().server;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let body = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "retried"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": "7d".repeat(16), "spanId": "3c".repeat(8), "name": "sent twice", "kind": 2,
            "startTimeUnixNano": (now - 300_000_000).to_string(),
            "endTimeUnixNano": (now - 100_000_000).to_string()}]}]}]});
    for _ in 0..2 {
        server
            .post(
                "/v1/traces",
                "application/json",
                body.to_string().into_bytes(),
            )
            .ok();
    }
    let a = get_json("/api/v1/spans?service=retried");
    assert_eq!(a["count"], 1, "{a}");
    assert_eq!(ids(&a, "spans", "span_id"), ["3c".repeat(8)]);
    let t = get_json("/api/v1/spans?service=retried&group=trace");
    assert_eq!(
        (&t["count"], &t["traces"][0]["spans"]),
        (&1.into(), &1.into()),
        "{t}"
    );
    let p = get_json("/api/v1/span-points?service=retried");
    assert_eq!((&p["count"], &p["shown"]), (&1.into(), &1.into()), "{p}");
}

#[test]
fn bad_search_parameters_are_400_naming_the_parameter() {
    let server = &fixture().server;
    for (path, says) in [
        (
            "/api/v1/spans?sort=slowest",
            r#"sort "slowest": expected duration, start, cpu or name"#,
        ),
        (
            "/api/v1/spans?order=up",
            r#"order "up": expected asc or desc"#,
        ),
        (
            "/api/v1/spans?offset=-1",
            r#"offset "-1": expected a whole number"#,
        ),
        (
            "/api/v1/spans?limit=10001",
            r#"limit "10001": expected a whole number"#,
        ),
        (
            "/api/v1/spans?group=service",
            r#"group "service": expected span or trace"#,
        ),
        (
            "/api/v1/spans?name=x&name_match=glob",
            r#"name_match "glob": expected exact, contains or regex"#,
        ),
        (
            "/api/v1/spans?name=(&name_match=regex",
            r#"name "(": not a usable regex"#,
        ),
        // Past the bounds of label regexes (1 MiB compiled).
        (
            "/api/v1/spans?name=(a%7B1000%7D)%7B1000%7D&name_match=regex",
            r#"name "(a{1000}){1000}": not a usable regex"#,
        ),
        (
            "/api/v1/span-points?limit=200001",
            r#"limit "200001": expected a whole number"#,
        ),
        (
            "/api/v1/span-points?sort=cpu",
            r#"unknown parameter "sort""#,
        ),
        (
            "/api/v1/span-names?limit=0",
            r#"limit "0": expected a whole number"#,
        ),
        ("/api/v1/span-names?name=x", r#"unknown parameter "name""#),
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 400, "{path}");
        let error = r.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains(says), "{path}: {error}");
    }
}
