//! Pyroscope's legacy `GET /pyroscope/render` and `GET /pyroscope/label-values`
//! (`pyroscope-compat.md` §4.4) against the real server, with the real Go CPU profile and its
//! spans ingested over OTLP; every number is checked against sums from the decoded pprof.

use crate::common;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use common::goprofile::{CPU_TYPE, HOT_FUNCTION, SERVICE};
use serde_json::Value;
use spanprof_format::pprof;
use spanprof_testkit::server::{enc, Reply};

use common::goprofile::GoServer as Fixture;

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture::start("render-store", |_| {}))
}

fn get(path: &str) -> Reply {
    fixture().server.get(path)
}

/// Profile start in whole seconds, and a range of an hour either side (step 10 s).
fn window() -> (i64, i64) {
    let t0_s = fixture().data.profile.time_nanos / 1_000_000_000;
    (t0_s - 3600, t0_s + 3600)
}

fn render(query: &str, extra: &str) -> Value {
    let (from, until) = window();
    let r = get(&format!(
        "/pyroscope/render?query={}&from={from}&until={until}&format=json{extra}",
        enc(query)
    ))
    .ok();
    assert!(r.content_type.starts_with("application/json"), "{r:?}");
    r.json()
}

/// Per root-first stack path (`a;b;c`): (total, self) in ns, from the decoded pprof.
fn pprof_paths(p: &pprof::Profile) -> BTreeMap<String, (i64, i64)> {
    let cpu = p
        .sample_type
        .iter()
        .position(|t| p.str(t.r#type) == Some("cpu"))
        .expect("cpu type");
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for s in &p.sample {
        let v = s.value[cpu];
        if v <= 0 {
            continue;
        }
        let mut leaf_first = Vec::new();
        for id in &s.location_id {
            let loc = p.location.iter().find(|l| l.id == *id).expect("location");
            for line in &loc.line {
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == line.function_id)
                    .expect("function");
                leaf_first.push(p.str(f.name).unwrap_or("").to_owned());
            }
        }
        let mut path = String::new();
        let depth = leaf_first.len();
        for (i, name) in leaf_first.iter().rev().enumerate() {
            if i > 0 {
                path.push(';');
            }
            path.push_str(name);
            let e = out.entry(path.clone()).or_default();
            e.0 += v;
            if i + 1 == depth {
                e.1 += v;
            }
        }
    }
    out
}

/// The flamebearer levels undone: per path (total, self), checking the layout on the way
/// (4-tuples, offsets relative to the previous node's end on the level, children inside
/// their parent after its self width).
fn flamebearer_paths(fb: &Value) -> BTreeMap<String, (i64, i64)> {
    let names: Vec<&str> = fb["names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| n.as_str().expect("name"))
        .collect();
    assert_eq!(names[0], "total");
    let levels = fb["levels"].as_array().expect("levels");
    // (start, end, self, path) of the previous level's nodes.
    let mut above: Vec<(i64, i64, i64, String)> = Vec::new();
    let mut out = BTreeMap::new();
    for (depth, level) in levels.iter().enumerate() {
        let v: Vec<i64> = level
            .as_array()
            .expect("level")
            .iter()
            .map(|x| x.as_i64().expect("an integer"))
            .collect();
        assert_eq!(v.len() % 4, 0, "quadruples");
        let mut end = 0;
        let mut here = Vec::new();
        for t in v.chunks(4) {
            assert!(t[0] >= 0 && t[1] >= t[2] && t[2] >= 0, "{t:?}");
            let start = end + t[0];
            end = start + t[1];
            let name = names[t[3] as usize];
            let path = if depth == 0 {
                assert_eq!(start, 0);
                String::new()
            } else {
                let parent = above
                    .iter()
                    .find(|(s, e, _, _)| *s <= start && end <= *e)
                    .unwrap_or_else(|| panic!("{name} at {start}..{end} has no parent"));
                assert!(
                    start >= parent.0 + parent.2,
                    "children follow the self width"
                );
                if depth == 1 {
                    name.to_owned()
                } else {
                    format!("{};{name}", parent.3)
                }
            };
            if depth > 0 {
                assert!(out.insert(path.clone(), (t[1], t[2])).is_none(), "{path}");
            }
            here.push((start, end, t[2], path));
        }
        above = here;
    }
    out
}

#[test]
fn render_matches_the_decoded_profile() {
    let data = &fixture().data;
    let body = render(&format!("{CPU_TYPE}{{service_name=\"{SERVICE}\"}}"), "");
    assert_eq!(body["version"], 1);
    let fb = &body["flamebearer"];
    assert_eq!(fb["numTicks"].as_i64(), Some(data.cpu_total_ns));
    let want = pprof_paths(&data.profile);
    let got = flamebearer_paths(fb);
    assert_eq!(got, want, "every node's total and self");
    let max_self = want.values().map(|v| v.1).max().unwrap();
    assert_eq!(fb["maxSelf"].as_i64(), Some(max_self));
    let hot_self: i64 = want
        .iter()
        .filter(|(p, _)| p.rsplit(';').next() == Some(HOT_FUNCTION))
        .map(|(_, v)| v.1)
        .sum();
    assert_eq!(hot_self, data.hot_self_ns);
    let level0 = fb["levels"][0].as_array().unwrap();
    assert_eq!(level0[1].as_i64(), Some(data.cpu_total_ns), "root total");
    // Metadata as Pyroscope derives it for `cpu` nanoseconds.
    assert_eq!(body["metadata"]["format"], "single");
    assert_eq!(body["metadata"]["units"], "samples");
    assert_eq!(body["metadata"]["sampleRate"], 1_000_000_000);
    assert_eq!(body["metadata"]["name"], "cpu");

    // Timeline: 2 h range → Pyroscope's 10 s step, samples from `from`, summing to the total,
    // non-zero only over the profile's 10 s.
    let (from, until) = window();
    let tl = &body["timeline"];
    assert_eq!(tl["startTime"].as_i64(), Some(from));
    assert_eq!(tl["durationDelta"].as_i64(), Some(10));
    let samples: Vec<i64> = tl["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(samples.len() as i64, (until - from) / 10 + 1);
    assert_eq!(samples.iter().sum::<i64>(), data.cpu_total_ns);
    let t0 = data.profile.time_nanos;
    let t1 = t0 + data.profile.duration_nanos.max(1);
    for (i, v) in samples.iter().enumerate() {
        let bucket_start = (from + 10 * i as i64) * 1_000_000_000;
        let bucket_end = bucket_start + 10_000_000_000;
        if *v != 0 {
            assert!(
                bucket_end > t0 && bucket_start <= t1,
                "sample {i} ({v}) lies outside the profile's time"
            );
        }
    }
    assert!(body["groups"].is_null());
}

#[test]
fn legacy_app_names_and_options() {
    let data = &fixture().data;
    for q in [
        "goapp.cpu{}",
        "goapp.cpu",
        &format!("{{__name__=\"{CPU_TYPE}\"}}"),
    ] {
        let body = render(q, "");
        assert_eq!(
            body["flamebearer"]["numTicks"].as_i64(),
            Some(data.cpu_total_ns),
            "{q}"
        );
    }
    let none = render(&format!("{CPU_TYPE}{{service_name=\"other\"}}"), "");
    assert_eq!(none["flamebearer"]["numTicks"], 0);
    assert_eq!(none["timeline"]["samples"].as_array().unwrap().len(), 721);
    let absent = render("memory:inuse_space:bytes:space:bytes{}", "");
    assert_eq!(absent["flamebearer"]["numTicks"], 0);
    assert_eq!(absent["metadata"]["units"], "bytes");

    // maxNodes keeps the total and adds "other".
    let small = render(CPU_TYPE, "&maxNodes=3");
    assert_eq!(
        small["flamebearer"]["numTicks"].as_i64(),
        Some(data.cpu_total_ns)
    );
    let names = small["flamebearer"]["names"].as_array().unwrap();
    assert!(names.iter().any(|n| n == "other"), "{names:?}");
    // Ties at the threshold are kept, so a chain of equal totals may pass 3.
    assert!(names.len() <= 8, "{names:?}");
    let small2 = render(CPU_TYPE, "&max-nodes=3");
    assert_eq!(small["flamebearer"], small2["flamebearer"]);

    // groupBy: one timeline per value.
    let grouped = render(CPU_TYPE, "&groupBy=service_name");
    let g = &grouped["groups"][SERVICE];
    assert_eq!(
        g["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .sum::<i64>(),
        data.cpu_total_ns
    );
    render(CPU_TYPE, "&aggregation=avg");

    // from/until in ms and relative forms are accepted.
    let t0_ms = data.profile.time_nanos / 1_000_000;
    let r = get(&format!(
        "/pyroscope/render?query={}&from={}&until={}",
        enc(CPU_TYPE),
        t0_ms - 60_000,
        t0_ms + 60_000
    ))
    .ok()
    .json();
    assert_eq!(
        r["flamebearer"]["numTicks"].as_i64(),
        Some(data.cpu_total_ns)
    );
    assert_eq!(r["timeline"]["startTime"].as_i64(), Some(t0_ms / 1000 - 60));
    get(&format!(
        "/pyroscope/render?query={}&from=now-1h&until=now",
        enc(CPU_TYPE)
    ))
    .ok();
}

/// Per level, each node's (x offset, total, self, name) of one side of a `"double"`
/// flamebearer (`right`: the second triple), or of a `"single"` one.
fn sides(fb: &Value, right: Option<bool>) -> Vec<Vec<(i64, i64, i64, String)>> {
    let names: Vec<&str> = fb["flamebearer"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let (width, at) = match right {
        None => (4, 0),
        Some(false) => (7, 0),
        Some(true) => (7, 3),
    };
    fb["flamebearer"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|level| {
            let v: Vec<i64> = level
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            assert_eq!(v.len() % width, 0, "{width}-tuples");
            v.chunks(width)
                .map(|t| {
                    (
                        t[at],
                        t[at + 1],
                        t[at + 2],
                        names[t[width - 1] as usize].to_owned(),
                    )
                })
                .collect()
        })
        .collect()
}

#[test]
fn render_diff_is_a_double_flamebearer_of_two_selections() {
    let data = &fixture().data;
    let (from, until) = window();
    let diff = |extra: &str| -> Reply {
        get(&format!(
            "/pyroscope/render-diff?leftQuery={q}&leftFrom={from}&leftUntil={until}\
             &rightQuery={q}{extra}",
            q = enc(&format!("{CPU_TYPE}{{service_name=\"{SERVICE}\"}}"))
        ))
    };
    // The profile against an hour before it, when there was nothing.
    let v = diff(&format!(
        "&rightFrom={}&rightUntil={}",
        from - 7200,
        from - 3600
    ))
    .ok()
    .json();
    assert_eq!(v["metadata"]["format"], "double");
    assert_eq!(v["metadata"]["units"], "samples");
    assert_eq!(v["leftTicks"].as_i64(), Some(data.cpu_total_ns));
    assert_eq!(v["rightTicks"].as_i64(), Some(0));
    assert_eq!(
        v["flamebearer"]["numTicks"].as_i64(),
        Some(data.cpu_total_ns)
    );
    // The left side is the single flame graph /pyroscope/render draws, node for node; the
    // right is empty.
    let single = render(&format!("{CPU_TYPE}{{service_name=\"{SERVICE}\"}}"), "");
    assert_eq!(sides(&v, Some(false)), sides(&single, None));
    assert!(sides(&v, Some(true))
        .iter()
        .flatten()
        .all(|n| (n.1, n.2) == (0, 0)));
    // The same selection on both sides: two equal sides.
    let v = diff(&format!("&rightFrom={from}&rightUntil={until}"))
        .ok()
        .json();
    assert_eq!(v["rightTicks"].as_i64(), Some(data.cpu_total_ns));
    assert_eq!(sides(&v, Some(true)), sides(&v, Some(false)));

    for (path, says) in [
        (
            format!("/pyroscope/render-diff?leftQuery={}", enc(CPU_TYPE)),
            "'rightQuery' is required",
        ),
        (
            format!(
                "/pyroscope/render-diff?leftQuery={}&rightQuery={}",
                enc(CPU_TYPE),
                enc("memory:alloc_space:bytes:space:bytes")
            ),
            "profile types must match",
        ),
        (
            format!(
                "/pyroscope/render-diff?leftQuery={}&rightQuery={}",
                enc("{service_name=\"x\"}"),
                enc(CPU_TYPE)
            ),
            "'leftQuery' must contain a profile-type selection",
        ),
        (
            format!(
                "/pyroscope/render-diff?leftQuery={q}&rightQuery={q}&rightFrom=soon",
                q = enc(CPU_TYPE)
            ),
            "rightFrom",
        ),
    ] {
        let r = get(&path);
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
}

#[test]
fn label_values() {
    let values = |q: &str| -> Value { get(&format!("/pyroscope/label-values?{q}")).ok().json() };
    assert_eq!(values("label=service_name"), serde_json::json!([SERVICE]));
    let names = values("label=__name__");
    assert!(
        names.as_array().unwrap().iter().any(|n| n == CPU_TYPE),
        "{names}"
    );
    assert_eq!(
        values(&format!(
            "label=service_name&query={}",
            enc("{service_name=\"other\"}")
        )),
        serde_json::json!([])
    );
    assert_eq!(
        values(&format!("label=service_name&query={}", enc("goapp.cpu{}"))),
        serde_json::json!([SERVICE])
    );
}

#[test]
fn bad_parameters_are_400_with_a_message() {
    let (from, until) = window();
    let q = enc(CPU_TYPE);
    for (path, needle) in [
        (
            format!("/pyroscope/render?from={from}&until={until}"),
            "query",
        ),
        (
            format!(
                "/pyroscope/render?query={}",
                enc("{service_name=\"goapp\"}")
            ),
            "profile-type",
        ),
        (
            format!("/pyroscope/render?query={}", enc("goapp.nope{}")),
            "query",
        ),
        (format!("/pyroscope/render?query={}", enc("a:b{")), "query"),
        (
            format!("/pyroscope/render?query={q}&from=yesterday"),
            "from",
        ),
        (
            format!("/pyroscope/render?query={q}&from={until}&until={from}"),
            "before",
        ),
        (
            format!("/pyroscope/render?query={q}&maxNodes=-1"),
            "maxNodes",
        ),
        (
            format!("/pyroscope/render?query={q}&maxNodes=x"),
            "maxNodes",
        ),
        (
            format!("/pyroscope/render?query={q}&aggregation=max"),
            "aggregation",
        ),
        (format!("/pyroscope/render?query={q}&format=xml"), "format"),
        ("/pyroscope/label-values".to_owned(), "label"),
        (
            "/pyroscope/label-values?label=a&query=%7B".to_owned(),
            "query",
        ),
    ] {
        let r = get(&path);
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 400, "{path}: {text}");
        assert!(text.contains(needle), "{path}: {text}");
    }
}
