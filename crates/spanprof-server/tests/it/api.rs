//! The JSON query API against the real server: a real Go CPU profile and spans for its span
//! ids go in over OTLP/HTTP, and every answer is checked against sums computed straight from
//! the decoded pprof; `/api/v1/pprof` is read back by `go tool pprof`.

use crate::common;

use std::sync::OnceLock;

use common::goprofile::{
    GoData, SpanTruth, CACHE_SPAN, CPU_TYPE, DB_SPAN, HOT_FUNCTION, PERIOD_NS, SERVICE,
};
use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_testkit::server::{enc, TestServer};

use common::goprofile::GoServer as Fixture;

/// One server with the Go data, shared by the tests of this file. Its store lives in a fixed
/// directory emptied at start (a static is never dropped, so a temp dir would be left behind).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture::start("api-store", |_| {}))
}

/// `GET path`, expecting 200 and JSON.
#[track_caller]
fn get_json(path: &str) -> Value {
    let r = fixture().server.get(path).ok();
    assert_eq!(r.content_type, "application/json", "{path}");
    r.json()
}

fn flame_total(query: &str) -> i64 {
    let fg = get_json(&format!("/api/v1/flamegraph?{query}"));
    let total = fg["flamegraph"]["total"].as_i64().expect("total");
    assert_eq!(fg["tree"]["total"].as_i64(), Some(total), "{query}");
    assert_eq!(
        fg["summary"]["value_selected"].as_i64(),
        Some(total),
        "{query}"
    );
    total
}

/// The ids of a `/profile-types` answer, in its order.
fn type_ids(answer: &Value) -> Vec<&str> {
    answer["profile_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect()
}

fn hex(id: &[u8]) -> String {
    to_hex(id)
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
fn services_types_labels_and_series_list_what_was_ingested() {
    assert_eq!(
        get_json("/api/v1/services"),
        json!({ "services": [SERVICE] })
    );
    assert_eq!(
        get_json("/api/v1/services?to=2020-01-01T00:00:00Z"),
        json!({ "services": [] })
    );
    let types = get_json(&format!("/api/v1/profile-types?service={SERVICE}"));
    let ids = type_ids(&types);
    assert_eq!(
        ids,
        [
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:samples:count:cpu:nanoseconds"
        ]
    );
    assert_eq!(types["profile_types"][0]["is_cpu"], true);
    assert_eq!(types["profile_types"][0]["sample_unit"], "nanoseconds");
    assert_eq!(types["default"], CPU_TYPE);
    assert_eq!(
        get_json("/api/v1/profile-types?service=nobody"),
        json!({ "profile_types": [], "default": null })
    );

    let names = get_json(&format!("/api/v1/label-names?service={SERVICE}"));
    let names: Vec<&str> = names["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for n in ["__name__", "__profile_type__", "service_name"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("span_id")),
        "span ids are never labels: {names:?}"
    );
    assert_eq!(
        get_json("/api/v1/label-values?name=service_name"),
        json!({ "name": "service_name", "values": [SERVICE], "truncated": false })
    );
    let series = get_json(&format!(
        "/api/v1/series?service={SERVICE}&type={}",
        enc(CPU_TYPE)
    ));
    assert_eq!(series["truncated"], false);
    let series = series["series"].as_array().unwrap();
    assert!(!series.is_empty());
    for s in series {
        assert_eq!(s["labels"]["service_name"], SERVICE);
        assert_eq!(s["labels"]["__profile_type__"], CPU_TYPE);
    }
}

#[test]
fn flame_graph_of_one_span_is_that_spans_label_sum() {
    let data = &fixture().data;
    for s in data.heaviest_per_name() {
        let fg = get_json(&format!(
            "/api/v1/flamegraph?service={SERVICE}&span_id={}",
            hex(&s.span_id)
        ));
        let what = format!("span {} ({})", hex(&s.span_id), s.name);
        assert_eq!(fg["flamegraph"]["total"].as_i64(), Some(s.cpu_ns), "{what}");
        assert_eq!(fg["tree"]["total"].as_i64(), Some(s.cpu_ns), "{what}");
        assert_eq!(
            fg["flamegraph"]["levels"][0],
            json!([0, s.cpu_ns, 0, 0]),
            "{what}"
        );
        assert_eq!(fg["flamegraph"]["names"][0], "total");
        assert_eq!(
            tree_function_total(&fg["tree"], HOT_FUNCTION),
            s.hot_cum_ns,
            "{what}"
        );
        let summary = &fg["summary"];
        assert_eq!(summary["profile_type"], CPU_TYPE);
        assert_eq!(summary["unit"], "nanoseconds");
        assert_eq!(summary["value_selected"].as_i64(), Some(s.cpu_ns));
        assert!(summary["samples_selected"].as_u64().unwrap() > 0);
        assert_eq!(summary["types_available"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn flame_graph_selections_add_up() {
    let data = &fixture().data;
    assert_eq!(
        flame_total(&format!("service={SERVICE}")),
        data.cpu_total_ns
    );
    assert_eq!(flame_total(""), data.cpu_total_ns);
    let samples_index = data
        .profile
        .sample_type
        .iter()
        .position(|t| data.profile.str(t.r#type) == Some("samples"))
        .unwrap();
    let samples: i64 = data
        .profile
        .sample
        .iter()
        .map(|s| s.value[samples_index])
        .sum();
    let fg = get_json(&format!(
        "/api/v1/flamegraph?service={SERVICE}&type=samples"
    ));
    assert_eq!(fg["flamegraph"]["total"].as_i64(), Some(samples));
    assert_eq!(
        fg["summary"]["profile_type"],
        "process_cpu:samples:count:cpu:nanoseconds"
    );
    assert_eq!(fg["summary"]["unit"], "count");

    // Two spans, a trace, a parent with its children.
    let picks = data.heaviest_per_name();
    let (a, b) = (picks[0], picks[1]);
    assert_eq!(
        flame_total(&format!(
            "service={SERVICE}&span_id={}&span_id={}",
            hex(&a.span_id),
            hex(&b.span_id)
        )),
        a.cpu_ns + b.cpu_ns
    );
    let db = data.span(&DB_SPAN);
    let trace_cpu = data.cpu_where(|s| s.trace_id == db.trace_id);
    assert_eq!(
        flame_total(&format!("trace_id={}", hex(&db.trace_id))),
        trace_cpu
    );
    let root = data.span(&db.parent.unwrap());
    assert!(trace_cpu > root.cpu_ns, "the root has children with CPU");
    let root_only = format!("span_id={}", hex(&root.span_id));
    assert_eq!(flame_total(&root_only), root.cpu_ns);
    assert_eq!(
        flame_total(&format!("{root_only}&include_child_spans=true")),
        trace_cpu
    );

    // Time range and labels.
    let t0 = data.profile.time_nanos;
    let hour = 3_600_000_000_000;
    assert_eq!(
        flame_total(&format!(
            "service={SERVICE}&from={}&to={}",
            t0 - hour,
            t0 + hour
        )),
        data.cpu_total_ns
    );
    assert_eq!(
        flame_total(&format!("service={SERVICE}&from={}", t0 + hour)),
        0
    );
    assert_eq!(
        flame_total(&format!("query={}", enc(r#"{service_name="goapp"}"#))),
        data.cpu_total_ns
    );
    assert_eq!(
        flame_total(&format!("query={}", enc(r#"{service_name="other"}"#))),
        0
    );

    // Span filters: every span of a name, and the slow ones of it.
    let name = "GET /cpu-heavy";
    assert_eq!(
        flame_total(&format!("service={SERVICE}&span_name={}", enc(name))),
        data.cpu_where(|s| s.name == name)
    );
    let longest = data.longest_first(name);
    let min = longest[9].duration_ns();
    assert_eq!(
        flame_total(&format!(
            "service={SERVICE}&span_name={}&min_duration={min}ns",
            enc(name)
        )),
        longest[..10].iter().map(|s| s.cpu_ns).sum::<i64>()
    );
    let p90 = data.duration_percentile(name, 90.0);
    assert_eq!(
        flame_total(&format!(
            "service={SERVICE}&span_name={}&above_percentile=90",
            enc(name)
        )),
        data.cpu_where(|s| s.name == name && s.duration_ns() >= p90)
    );
}

#[test]
fn max_nodes_cuts_the_layout_but_not_the_total() {
    let data = &fixture().data;
    let fg = get_json(&format!("/api/v1/flamegraph?service={SERVICE}&max_nodes=5"));
    let layout = &fg["flamegraph"];
    assert_eq!(layout["total"].as_i64(), Some(data.cpu_total_ns));
    let names: Vec<&str> = layout["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(names.contains(&"other"), "{names:?}");
    let nodes: usize = layout["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_array().unwrap().len() / 4)
        .sum();
    let full = get_json(&format!("/api/v1/flamegraph?service={SERVICE}&max_nodes=0"));
    let full_nodes: usize = full["flamegraph"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_array().unwrap().len() / 4)
        .sum();
    assert!(nodes < full_nodes / 4, "{nodes} of {full_nodes} nodes kept");
}

#[test]
fn top_functions_match_the_profile() {
    let data = &fixture().data;
    let top = get_json(&format!("/api/v1/top?service={SERVICE}&order=self&limit=3"));
    let functions = top["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 3);
    assert_eq!(functions[0]["name"], HOT_FUNCTION);
    assert_eq!(functions[0]["self"].as_i64(), Some(data.hot_self_ns));
    assert_eq!(functions[0]["total"].as_i64(), Some(data.hot_cum_ns));
    assert_eq!(top["total"].as_i64(), Some(data.cpu_total_ns));
    assert_eq!(top["summary"]["profile_type"], CPU_TYPE);
    let by_total = get_json(&format!("/api/v1/top?service={SERVICE}&order=total"));
    let totals: Vec<i64> = by_total["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["total"].as_i64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
    assert!(totals.len() <= 100, "default limit");
}

#[test]
fn diff_of_slow_and_fast_spans_of_a_span_name() {
    let data = &fixture().data;
    let name = "GET /cpu-heavy";
    let p50 = data.duration_percentile(name, 50.0);
    let p90 = data.duration_percentile(name, 90.0);
    let fast = data.cpu_where(|s| s.name == name && s.duration_ns() <= p50);
    let slow = data.cpu_where(|s| s.name == name && s.duration_ns() >= p90);
    assert!(fast > 0 && slow > 0);
    let side_by_side = get_json(&format!(
        "/api/v1/diff?service={SERVICE}&span_name={}&left.below_percentile=50&right.above_percentile=90",
        enc(name)
    ));
    let layout = &side_by_side["flamegraph"];
    assert_eq!(layout["leftTicks"].as_i64(), Some(fast));
    assert_eq!(layout["rightTicks"].as_i64(), Some(slow));
    assert_eq!(layout["total"].as_i64(), Some(fast + slow));
    assert_eq!(layout["levels"][0], json!([0, fast, 0, 0, slow, 0, 0]));
    assert_eq!(side_by_side["tree"]["left"]["total"].as_i64(), Some(fast));
    assert_eq!(side_by_side["tree"]["right"]["total"].as_i64(), Some(slow));
    assert_eq!(side_by_side["left"]["value_selected"].as_i64(), Some(fast));
    assert_eq!(side_by_side["right"]["profile_type"], CPU_TYPE);

    // The baseline form says the same.
    let baseline = get_json(&format!(
        "/api/v1/diff?service={SERVICE}&span_name={}&baseline=fast",
        enc(name)
    ));
    assert_eq!(baseline["flamegraph"], side_by_side["flamegraph"]);

    // One span against every span of its name, and against the whole service.
    let s = data.longest_first(name)[0];
    let one = format!("/api/v1/diff?span_id={}", hex(&s.span_id));
    let by_name = get_json(&format!("{one}&baseline=span_name"));
    assert_eq!(
        by_name["flamegraph"]["leftTicks"].as_i64(),
        Some(data.cpu_where(|x| x.name == name))
    );
    assert_eq!(by_name["flamegraph"]["rightTicks"].as_i64(), Some(s.cpu_ns));
    let by_service = get_json(&format!("{one}&service={SERVICE}&baseline=service"));
    assert_eq!(
        by_service["flamegraph"]["leftTicks"].as_i64(),
        Some(data.cpu_total_ns)
    );
    // Explicit sides replace shared values.
    let two = data.longest_first(name)[1];
    let explicit = get_json(&format!(
        "{one}&left.span_id={}&right.span_id={}",
        hex(&two.span_id),
        hex(&s.span_id)
    ));
    assert_eq!(
        explicit["flamegraph"]["leftTicks"].as_i64(),
        Some(two.cpu_ns)
    );
    assert_eq!(
        explicit["flamegraph"]["rightTicks"].as_i64(),
        Some(s.cpu_ns)
    );
}

#[test]
fn timeseries_totals_and_exemplars() {
    let data = &fixture().data;
    let ts = get_json(&format!(
        "/api/v1/timeseries?service={SERVICE}&step=1s&exemplars=3&group_by=service_name"
    ));
    assert_eq!(ts["step_ns"].as_i64(), Some(1_000_000_000));
    // What the values are: the CPU type, in nanoseconds, written as integers as elsewhere.
    assert_eq!(ts["profile_type"], CPU_TYPE);
    assert_eq!(ts["unit"], "nanoseconds");
    // What one point stands for: the profile's window, longer than the 1 s step.
    assert_eq!(
        ts["profile_duration_ns"].as_i64(),
        Some(data.profile.duration_nanos)
    );
    assert!(data.profile.duration_nanos > 1_000_000_000);
    let series = ts["series"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!(series[0]["labels"], json!({ "service_name": SERVICE }));
    let points = series[0]["points"].as_array().unwrap();
    let sum: i64 = points.iter().map(|p| p["value"].as_i64().unwrap()).sum();
    assert_eq!(sum, data.cpu_total_ns);
    let max_cpu = data.spans.iter().map(|s| s.cpu_ns).max().unwrap();
    let mut best = 0;
    for p in points {
        let exemplars = p["exemplars"].as_array().unwrap();
        assert!(exemplars.len() <= 3);
        for e in exemplars {
            let id = spanprof_format::link::parse_id::<8>(e["span_id"].as_str().unwrap()).unwrap();
            let span = data.span(&id);
            assert_eq!(e["trace_id"].as_str(), Some(hex(&span.trace_id).as_str()));
            assert!(e["value"].as_i64().unwrap() <= span.cpu_ns);
            best = best.max(e["value"].as_i64().unwrap());
        }
    }
    assert_eq!(best, max_cpu, "the heaviest span is an exemplar");

    let s = data.heaviest_per_name()[0];
    let one = get_json(&format!(
        "/api/v1/timeseries?span_id={}&aggregation=sum",
        hex(&s.span_id)
    ));
    let series = one["series"].as_array().unwrap();
    assert_eq!(series[0]["labels"], json!({}));
    let sum: f64 = series[0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .sum();
    assert_eq!(sum, s.cpu_ns as f64);
    assert!(series[0]["points"][0]["exemplars"]
        .as_array()
        .unwrap()
        .is_empty());
}

fn span_ids(answer: &Value) -> Vec<String> {
    answer["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["span_id"].as_str().unwrap().to_owned())
        .collect()
}

#[track_caller]
fn assert_span_json(got: &Value, want: &SpanTruth) {
    assert_eq!(got["span_id"], hex(&want.span_id));
    assert_eq!(got["trace_id"], hex(&want.trace_id));
    assert_eq!(got["parent_span_id"], json!(want.parent.map(|p| hex(&p))));
    assert_eq!(got["service"], SERVICE);
    assert_eq!(got["name"], want.name.as_str());
    assert_eq!(got["start_ns"], want.start_ns.to_string());
    assert_eq!(got["duration_ns"].as_u64(), Some(want.duration_ns()));
    assert_eq!(got["total"].as_i64(), Some(want.cpu_ns));
    assert_eq!(got["samples"].as_i64(), Some(want.cpu_ns / PERIOD_NS));
    assert_eq!(got["period"].as_i64(), Some(PERIOD_NS));
    let own = fixture().data.self_ns(want);
    assert_eq!(got["self_ns"].as_u64(), Some(own));
    let possible = own as f64 / PERIOD_NS as f64;
    assert!((got["possible_samples"].as_f64().unwrap() - possible).abs() < 1e-9);
    assert_eq!(got["has_samples"], want.cpu_ns > 0);
    let verdict = match want.span_id {
        DB_SPAN => "no CPU used",
        CACHE_SPAN => "shorter than the sampling period",
        _ => "sampled",
    };
    assert_eq!(got["coverage"], verdict, "{got}");
}

#[test]
fn span_search_is_longest_first_with_each_spans_cpu() {
    let data = &fixture().data;
    let name = "GET /cpu-heavy";
    let want = data.longest_first(name);
    let found = get_json(&format!(
        "/api/v1/spans?service={SERVICE}&name={}&limit=10",
        enc(name)
    ));
    let expected: Vec<String> = want[..10].iter().map(|s| hex(&s.span_id)).collect();
    assert_eq!(span_ids(&found), expected);
    for (got, want) in found["spans"].as_array().unwrap().iter().zip(&want) {
        assert_span_json(got, want);
    }
    // Duration bounds are inclusive; the default limit is 100.
    let (min, max) = (want[20].duration_ns(), want[5].duration_ns());
    let bounded = get_json(&format!(
        "/api/v1/spans?name={}&min_duration={min}ns&max_duration={max}ns",
        enc(name)
    ));
    let expected: Vec<String> = want[5..=20].iter().map(|s| hex(&s.span_id)).collect();
    assert_eq!(span_ids(&bounded), expected);
    let all = get_json(&format!("/api/v1/spans?service={SERVICE}"));
    assert_eq!(
        all["spans"].as_array().unwrap().len(),
        100.min(data.spans.len())
    );

    for (id, name) in [(DB_SPAN, "SELECT orders"), (CACHE_SPAN, "cache get")] {
        let found = get_json(&format!("/api/v1/spans?name={}", enc(name)));
        assert_eq!(found["spans"].as_array().unwrap().len(), 1);
        assert_span_json(&found["spans"][0], data.span(&id));
    }
    let none = get_json(&format!(
        "/api/v1/spans?service={SERVICE}&to=2020-01-01T00:00:00Z"
    ));
    assert_eq!(none["spans"], json!([]));
    assert_eq!(none["count"], 0);
}

#[test]
fn trace_view_lists_every_span_with_its_own_cpu() {
    let data = &fixture().data;
    let trace = data.span(&DB_SPAN).trace_id;
    let mut want: Vec<&SpanTruth> = data.spans.iter().filter(|s| s.trace_id == trace).collect();
    want.sort_by_key(|s| (s.start_ns, s.span_id));
    assert!(want.len() >= 3);
    let view = get_json(&format!("/api/v1/traces/{}", hex(&trace)));
    assert_eq!(view["trace_id"], hex(&trace));
    let spans = view["spans"].as_array().unwrap();
    assert_eq!(spans.len(), want.len());
    assert_eq!(view["spans_total"].as_u64(), Some(want.len() as u64));
    assert_eq!(view["truncated"], false);
    let start = want[0].start_ns;
    let end = want.iter().map(|s| s.end_ns).max().unwrap();
    assert_eq!(view["start_ns"], start.to_string());
    assert_eq!(view["duration_ns"].as_u64(), Some(end - start));
    for (got, want) in spans.iter().zip(&want) {
        assert_span_json(got, want);
        assert_eq!(got["offset_ns"].as_u64(), Some(want.start_ns - start));
        assert_eq!(got["depth"].as_u64(), Some(want.parent.is_some() as u64));
    }
    // The root's sampled children ran part of its time: that part is not its own.
    assert!(
        spans
            .iter()
            .any(|s| s["self_ns"].as_u64().unwrap() < s["duration_ns"].as_u64().unwrap()),
        "{spans:?}"
    );
    let total: i64 = want.iter().map(|s| s.cpu_ns).sum();
    assert_eq!(view["total"].as_i64(), Some(total));
    assert_eq!(view["profile_type"], CPU_TYPE);
    assert_eq!(view["unit"], "nanoseconds");
    assert_eq!(view["samples"].as_i64(), Some(total / PERIOD_NS));
    // What the trace's flame graph holds beyond its stored spans' totals.
    assert_eq!(
        view["unknown_spans_total"].as_i64(),
        Some(flame_total(&format!("trace_id={}", hex(&trace))) - total)
    );

    let unknown = fixture()
        .server
        .get("/api/v1/traces/0123456789ABCDEF0123456789abcdef");
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.content_type, "application/json");
    let message = unknown.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.starts_with("trace 0123456789abcdef0123456789abcdef"),
        "{message}"
    );
}

/// A trace whose spans were not all received says how much of its CPU is in the missing
/// ones: in its flame graph, in no listed span.
#[test]
fn a_trace_says_what_its_unreceived_spans_hold() {
    let server = TestServer::in_fresh_dir("api-unreceived", |_| {});
    let data = &fixture().data;
    server
        .post(
            "/v1development/profiles",
            "application/x-protobuf",
            data.otlp_profiles(),
        )
        .ok();
    // The trace of the most sampled root span, of which only the root arrives.
    let root = data
        .spans
        .iter()
        .filter(|s| s.parent.is_none())
        .max_by_key(|s| {
            data.spans
                .iter()
                .filter(|c| c.trace_id == s.trace_id && c.parent.is_some())
                .map(|c| c.cpu_ns)
                .sum::<i64>()
        })
        .unwrap();
    let whole: i64 = data
        .spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .map(|s| s.cpu_ns)
        .sum();
    assert!(whole > root.cpu_ns, "the trace has CPU in its children");
    let mut traces: Value = serde_json::from_slice(&data.otlp_traces_json()).unwrap();
    for rs in traces["resourceSpans"].as_array_mut().unwrap() {
        for ss in rs["scopeSpans"].as_array_mut().unwrap() {
            ss["spans"]
                .as_array_mut()
                .unwrap()
                .retain(|s| s["spanId"] == hex(&root.span_id));
        }
    }
    server
        .post(
            "/v1/traces",
            "application/json",
            serde_json::to_vec(&traces).unwrap(),
        )
        .ok();
    let view = server
        .get(&format!("/api/v1/traces/{}", hex(&root.trace_id)))
        .json();
    assert_eq!(view["spans"].as_array().unwrap().len(), 1, "{view}");
    assert_eq!(view["total"].as_i64(), Some(root.cpu_ns));
    assert_eq!(
        view["unknown_spans_total"].as_i64(),
        Some(whole - root.cpu_ns),
        "{view}"
    );
}

#[test]
fn pprof_export_is_read_by_go_tool_pprof() {
    let fx = fixture();
    let data = &fx.data;
    let s = data
        .heaviest_per_name()
        .into_iter()
        .find(|s| s.hot_cum_ns > 0)
        .unwrap();
    let path = format!(
        "/api/v1/pprof?service={SERVICE}&span_id={}",
        hex(&s.span_id)
    );
    let r = fx.server.get(&path).ok();
    assert_eq!(r.content_type, "application/octet-stream");
    assert_eq!(&r.body[..2], &[0x1f, 0x8b], "gzip");
    let profile = spanprof_format::pprof::decode(&r.body, 64 << 20).unwrap();
    let sum: i64 = profile.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(sum, s.cpu_ns);
    // Each sample carries its series' labels (for -tags, -tagfocus), not the internal ones.
    for sample in &profile.sample {
        let labels: Vec<(&str, &str)> = sample
            .label
            .iter()
            .map(|l| (profile.str(l.key).unwrap(), profile.str(l.str).unwrap()))
            .collect();
        assert!(labels.contains(&("service_name", SERVICE)), "{labels:?}");
        assert!(
            labels.contains(&("span_id", hex(&s.span_id).as_str())),
            "{labels:?}"
        );
        assert!(
            labels.iter().all(|(k, _)| !k.starts_with("__")),
            "{labels:?}"
        );
    }
    // The span's own time, not the profile window's: go tool pprof's "Duration" and the
    // share of it on CPU are the span's.
    assert_eq!(
        (profile.time_nanos, profile.duration_nanos),
        (s.start_ns as i64, (s.end_ns - s.start_ns) as i64)
    );

    let args = ["-top", "-unit=ns", "-nodefraction=0", "-nodecount=100000"];
    let url = format!("http://{}{path}", fx.server.addr);
    let out = spanprof_testkit::go_tool_pprof([&args[..], &[url.as_str()]].concat());
    let (_, cum, total) = spanprof_testkit::pprof_top(&out, HOT_FUNCTION);
    assert_eq!((cum, total), (s.hot_cum_ns, s.cpu_ns), "{out}");

    let url = format!("http://{}/api/v1/pprof?service={SERVICE}", fx.server.addr);
    let out = spanprof_testkit::go_tool_pprof([&args[..], &[url.as_str()]].concat());
    assert_eq!(
        spanprof_testkit::pprof_top(&out, HOT_FUNCTION),
        (data.hot_self_ns, data.hot_cum_ns, data.cpu_total_ns),
        "{out}"
    );

    // A bad selection: go tool pprof says why, not only "400 Bad Request".
    let bad = format!(
        "http://{}/api/v1/pprof?service={SERVICE}&span_id=xyz",
        fx.server.addr
    );
    let out = spanprof_testkit::go_tool_pprof_run(["-top", &bad]);
    assert!(
        !out.status.success()
            && out
                .stderr
                .contains(r#"span_id "xyz": expected 16 hex characters"#),
        "{out}"
    );
}

#[test]
fn bad_parameters_are_400_naming_the_parameter() {
    let cases: &[(&str, &str)] = &[
        (
            "/api/v1/flamegraph?span_id=xyz",
            r#"span_id "xyz": expected 16 hex characters"#,
        ),
        (
            "/api/v1/flamegraph?span_id=0123456789abcdef&span_id=12",
            r#"span_id "12": expected 16 hex characters"#,
        ),
        (
            "/api/v1/flamegraph?trace_id=abc",
            r#"trace_id "abc": expected 32 hex characters"#,
        ),
        // Empty, as from a script's unset variable: not the whole service.
        (
            "/api/v1/pprof?service=goapp&span_id=",
            "span_id is empty: give 16 hex characters, or leave the parameter out",
        ),
        (
            "/api/v1/flamegraph?trace_id=",
            "trace_id is empty: give 32 hex characters",
        ),
        (
            "/api/v1/diff?span_name=x&left.span_name=",
            "left.span_name is empty: give a span name",
        ),
        (
            "/api/v1/flamegraph?from=yesterday",
            r#"from "yesterday": expected RFC 3339"#,
        ),
        (
            "/api/v1/flamegraph?from=2026-11-29T09:19:31+00:00",
            r#"from "2026-11-29T09:19:31 00:00": expected RFC 3339 (2026-11-29T09:00:00Z), unix seconds (a fraction too) or milliseconds, or now-1h; a + in a query string reads as a space: write it %2B, or use Z"#,
        ),
        // Not a char boundary where an offset would begin: no panic.
        (
            "/api/v1/flamegraph?from=2026-11-29T09:19:3%C3%A9",
            r#"from "2026-11-29T09:19:3é": expected RFC 3339"#,
        ),
        (
            "/api/v1/flamegraph?from=now&to=now-1h",
            r#"from "now" is not before to "now-1h""#,
        ),
        (
            "/api/v1/flamegraph?max_nodes=-1",
            r#"max_nodes "-1": expected a whole number"#,
        ),
        (
            "/api/v1/flamegraph?include_child_spans=yes",
            r#"include_child_spans "yes": expected true or false"#,
        ),
        (
            "/api/v1/flamegraph?query=%7Bservice_name%3D",
            r#"query "{service_name=": expected a quoted value at byte 14"#,
        ),
        (
            "/api/v1/flamegraph?service=goapp&type=heap",
            r#"type "heap": no such profile type of service "goapp"; available: process_cpu:cpu"#,
        ),
        (
            "/api/v1/flamegraph?spanid=0123456789abcdef",
            r#"unknown parameter "spanid""#,
        ),
        (
            "/api/v1/flamegraph?above_percentile=90",
            r#"above_percentile "90": needs span_name"#,
        ),
        (
            "/api/v1/flamegraph?span_name=x&below_percentile=200",
            r#"below_percentile "200": expected a percentile"#,
        ),
        (
            "/api/v1/flamegraph?min_duration=fast",
            r#"min_duration "fast": expected a duration"#,
        ),
        (
            "/api/v1/flamegraph?min_duration=2s&max_duration=1s",
            r#"min_duration "2s": is longer than max_duration"#,
        ),
        (
            "/api/v1/flamegraph?service=a&service=b",
            r#"parameter "service" is given more than once"#,
        ),
        (
            "/api/v1/flamegraph?service=%FF",
            r#"service "%FF": not UTF-8"#,
        ),
        (
            "/api/v1/top?order=biggest",
            r#"order "biggest": expected self or total"#,
        ),
        (
            "/api/v1/top?limit=0",
            r#"limit "0": expected a whole number from 1"#,
        ),
        (
            "/api/v1/flamegraph?service=goapp&to=0",
            r#"to "0": is not after 1970-01-01T00:00:00Z (leave it out for no end)"#,
        ),
        (
            "/api/v1/timeseries?step=0s",
            r#"step "0s": must be longer than 0"#,
        ),
        (
            "/api/v1/timeseries?aggregation=max",
            r#"aggregation "max": expected sum or average"#,
        ),
        ("/api/v1/diff?service=goapp", "a diff needs two selections"),
        (
            "/api/v1/diff?baseline=slow",
            r#"baseline "slow": expected span_name, fast or service"#,
        ),
        (
            "/api/v1/diff?baseline=fast&left.span_name=x",
            "baseline derives the left side",
        ),
        (
            "/api/v1/diff?service=goapp&baseline=span_name",
            "baseline compares against a span name",
        ),
        (
            "/api/v1/diff?left.span_id=zz&right.span_id=0123456789abcdef",
            r#"left.span_id "zz""#,
        ),
        (
            "/api/v1/diff?left.max_nodes=1",
            r#"unknown parameter "left.max_nodes""#,
        ),
        (
            "/api/v1/spans?limit=0",
            r#"limit "0": expected a whole number"#,
        ),
        (
            "/api/v1/spans?span_id=0123456789abcdef",
            r#"unknown parameter "span_id""#,
        ),
        (
            "/api/v1/spans?status=failed",
            r#"status "failed": expected error, ok or unset"#,
        ),
        (
            "/api/v1/traces/xyz",
            r#"trace_id "xyz": expected 32 hex characters"#,
        ),
        ("/api/v1/label-values?service=goapp", "name: missing"),
        (
            "/api/v1/label-names?span_id=0123456789abcdef",
            r#"unknown parameter "span_id""#,
        ),
        ("/api/v1/pprof?seconds=30", r#"unknown parameter "seconds""#),
        (
            "/api/v1/flamegraph?service=goap",
            r#"service "goap": no profiles of this service; services with profiles: "#,
        ),
        (
            "/api/v1/pprof?service=nosuch",
            r#"service "nosuch": no profiles of this service"#,
        ),
        (
            "/api/v1/top?query=process_cpu:cpu:nanoseconds:cpu:nanoseconds%7B%7D",
            r#"query "process_cpu:cpu:nanoseconds:cpu:nanoseconds{}": give only label matchers"#,
        ),
        (
            "/api/v1/flamegraph?query=span_name%3D%22x%22",
            r#"query "span_name=\"x\"": label matchers go in braces: `{span_name="x"}`"#,
        ),
        (
            "/api/v1/spans?min_duration=1s&max_duration=1ms",
            r#"min_duration "1s": is longer than max_duration"#,
        ),
        (
            "/api/v1/status?x=1",
            r#"unknown parameter "x"; /api/v1/status takes: no parameters"#,
        ),
        (
            "/api/v1/spans?name=a&span_name=b",
            "name and span_name are the same parameter here: give one",
        ),
        // A misspelt service finds no span: said, not answered "no span matches".
        (
            "/api/v1/spans?service=goap",
            r#"service "goap": no spans or profiles of this service; services with spans: "#,
        ),
    ];
    let server = &fixture().server;
    for (path, want) in cases {
        let r = server.get(path);
        assert_eq!(
            r.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        // The pprof export answers `go tool pprof`, which shows a text body.
        let message = if path.starts_with("/api/v1/pprof") {
            assert_eq!(r.content_type, "text/plain; charset=utf-8", "{path}");
            String::from_utf8(r.body.clone()).unwrap()
        } else {
            assert_eq!(r.content_type, "application/json", "{path}");
            let body = r.json();
            body["error"]
                .as_str()
                .unwrap_or_else(|| panic!("{path}: {body}"))
                .to_owned()
        };
        assert!(
            message.starts_with(want),
            "{path}: {message:?} should start with {want:?}"
        );
    }
    // A span id that nothing has (a typo) is a 404 on every selection answer, not an empty
    // graph that reads "this span used no CPU"; a stored span without samples is not.
    for path in [
        "/api/v1/flamegraph?span_id=00000000deadbeef",
        "/api/v1/svg?service=goapp&span_id=00000000deadbeef",
        "/api/v1/top?span_id=00000000deadbeef&span_id=00000000deadbeee",
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}");
        let message = r.json()["error"].as_str().unwrap().to_owned();
        assert!(
            message.starts_with("span_id 00000000deadbeef") && message.contains("no stored span"),
            "{path}: {message}"
        );
    }
    let r = server.get("/api/v1/pprof?span_id=00000000deadbeef");
    assert_eq!(r.status, 404);
    let known = &fixture().data.spans[0];
    let with_unknown = format!(
        "/api/v1/flamegraph?span_id=00000000deadbeef&span_id={}",
        hex(&known.span_id)
    );
    assert_eq!(server.get(&with_unknown).status, 200);
    // A trace id too: an empty answer read as a trace that used no CPU, and `go tool pprof`
    // printed an empty profile.
    // (A diff's side is named as it was sent.)
    let diff = format!(
        "/api/v1/diff?left.trace_id=0123456789abcdef0123456789abcdef&right.trace_id={}",
        hex(&fixture().data.spans[0].trace_id)
    );
    for (path, name) in [
        (
            "/api/v1/flamegraph?trace_id=0123456789abcdef0123456789abcdef",
            "trace_id",
        ),
        (
            "/api/v1/pprof?trace_id=0123456789abcdef0123456789abcdef",
            "trace_id",
        ),
        (
            "/api/v1/profile-types?trace_id=0123456789abcdef0123456789abcdef",
            "trace_id",
        ),
        (diff.as_str(), "left.trace_id"),
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}");
        let body = String::from_utf8(r.body.clone()).unwrap();
        assert!(
            body.contains(&format!(
                "{name} 0123456789abcdef0123456789abcdef: no stored span"
            )),
            "{path}: {body}"
        );
    }
    let known_trace = format!(
        "/api/v1/flamegraph?trace_id={}",
        hex(&fixture().data.spans[0].trace_id)
    );
    assert_eq!(server.get(&known_trace).status, 200);
    let r = server.get("/api/v1/flamegraphs");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("no endpoint /api/v1/flamegraphs; /api/v1/ has: status, services"));
}

#[test]
fn a_restarted_server_answers_the_same() {
    let dir = tempfile::Builder::new()
        .prefix("api-restart-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let data = GoData::load();
    let span = data.heaviest_per_name()[0].clone();
    let path = format!("/api/v1/flamegraph?span_id={}", hex(&span.span_id));
    let server = TestServer::start(dir.path());
    data.ingest(&server);
    let before = server.get(&path).ok().json();
    assert_eq!(before["flamegraph"]["total"].as_i64(), Some(span.cpu_ns));
    server.stop().expect("a clean shutdown");

    let server = TestServer::start(dir.path());
    assert_eq!(server.get(&path).ok().json(), before);
    let trace = server
        .get(&format!("/api/v1/traces/{}", hex(&span.trace_id)))
        .ok()
        .json();
    assert!(!trace["spans"].as_array().unwrap().is_empty());
    server.stop().expect("a clean shutdown");
}

/// A path no route takes is a 404 saying what the listener serves, with what to change for a
/// likely misconfigured exporter, counted and logged as a refusal; the browser's favicon
/// request is not one.
#[test]
fn unknown_paths_say_what_each_listener_serves() {
    let server = TestServer::in_fresh_dir("not-found", |c| {
        c.server.otlp_http_addr = Some("127.0.0.1:0".parse().unwrap());
    });
    let otlp = server.otlp_http.expect("the OTLP/HTTP listener");
    let body = Some(("application/x-protobuf", Vec::new()));
    // A Pyroscope SDK pointed at the OTLP port is told the main one.
    let main_listener = format!(
        "Pyroscope's /ingest and /push.v1.PusherService/Push, the UI and /api/v1/ are on the \
         main listener, port {}",
        server.addr.port()
    );
    for (path, says) in [
        (
            "/v1/profiles",
            "OTLP Profiles are at /v1development/profiles (the signal is still in development)",
        ),
        (
            "/v1/metrics",
            "spanprof takes profiles and traces, not metrics",
        ),
        ("/ingest", main_listener.as_str()),
    ] {
        let r = server.request_at(otlp, "POST", path, body.clone());
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 404, "{path}: {text}");
        assert!(
            text.starts_with(&format!("no such endpoint: POST {path}; this is spanprof's OTLP/HTTP listener: POST /v1development/profiles"))
                && text.contains(says),
            "{path}: {text}"
        );
    }
    let r = server.get("/debug/pprof/profile");
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 404, "{text}");
    assert!(
        text.starts_with("no such endpoint: GET /debug/pprof/profile; spanprof serves the UI at /"),
        "{text}"
    );
    assert_eq!(server.get("/favicon.ico").status, 204);
    // A path that exists, with a method it does not take: 405 saying so, on both listeners.
    for (addr, method, path) in [
        (server.addr, "POST", "/api/v1/services"),
        (server.addr, "GET", "/ingest"),
        (otlp, "GET", "/v1/traces"),
    ] {
        let r = server.request_at(addr, method, path, None);
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 405, "{method} {path}: {text}");
        assert!(
            text.starts_with(&format!(
                "{method} {path}: this path does not take {method}"
            )),
            "{text}"
        );
    }
    // Health (readiness) and liveness on both listeners: a load balancer may front either.
    for addr in [server.addr, otlp] {
        for path in ["/health", "/ready", "/live"] {
            let r = server.request_at(addr, "GET", path, None);
            assert_eq!(
                (r.status, r.body.as_slice()),
                (200, b"ok\n".as_slice()),
                "{path}"
            );
        }
    }
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    assert!(
        metrics.contains("spanprof_rejected_total{receiver=\"http\",reason=\"not_found\"} 4"),
        "{metrics}"
    );
    // Before any data: the series an alert watches are there, at 0.
    for series in [
        "spanprof_store_errors_total 0\n",
        "spanprof_stored_profiles_total 0\n",
        "spanprof_queue_depth 0\n",
        "spanprof_pipeline_write_failing 0\n",
    ] {
        assert!(metrics.contains(series), "{series}{metrics}");
    }
}

/// The SVG says what it shows (service, span, type) and its values read as durations.
#[test]
fn svg_heading_names_the_selection_in_readable_units() {
    let f = fixture();
    let span = f.data.heaviest_per_name()[0];
    let hex = to_hex(&span.span_id);
    let r = f.server.get(&format!(
        "/api/v1/svg?service={SERVICE}&span_id={hex}&include_child_spans=true"
    ));
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200, "{text}");
    let heading = format!(
        "{SERVICE} · span {hex} and its children · cpu:nanoseconds:cpu:nanoseconds — total "
    );
    let at = text
        .find(&heading)
        .unwrap_or_else(|| panic!("{heading} in {text}"));
    let total = &text[at + heading.len()..];
    let total = &total[..total.find('<').unwrap()];
    assert!(
        total.ends_with(" ms") || total.ends_with(" s"),
        "a duration: {total:?}"
    );
}

/// The clock, ns since the Unix epoch.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Sends OTLP/JSON traces to `server`, which must take them.
fn post_spans(server: &TestServer, body: &Value) {
    server
        .post(
            "/v1/traces",
            "application/json",
            body.to_string().into_bytes(),
        )
        .ok();
}

/// `/api/v1/spans` keeps the spans whose attributes (`attribute=k=v`) and resource's
/// (`resource=k=v`) hold every pair given (also `k!=v`, `k=~re`, `k!~re`, and `k>=n` and the
/// other orders of numbers), and of a kind (`kind=server`); each span answers its resource
/// and events.
#[test]
fn spans_search_by_attribute_and_resource() {
    let server = TestServer::in_fresh_dir("span-resource-search", |_| {});
    let now = now_ns();
    let kv = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    // Span 11 answered 200 as a server, span 22 503 as a client (an OTLP int, as SDKs send
    // status codes).
    let shops = [
        ("web-1", "11", "/cart", 200, 2),
        ("web-2", "22", "/pay", 503, 3),
    ];
    let resource_spans: Vec<Value> = shops
        .iter()
        .map(|(host, id, route, code, kind)| {
            json!({
                "resource": {"attributes": [kv("service.name", "shop"), kv("host.name", host)]},
                "scopeSpans": [{"spans": [{
                    "traceId": id.repeat(16),
                    "spanId": id.repeat(8),
                    "name": "GET",
                    "kind": kind,
                    "attributes": [
                        kv("http.route", route),
                        json!({"key": "http.response.status_code", "value": {"intValue": code.to_string()}}),
                    ],
                    "events": [{"timeUnixNano": (now - 500_000).to_string(), "name": "retry"}],
                    "startTimeUnixNano": (now - 1_000_000).to_string(),
                    "endTimeUnixNano": now.to_string(),
                }]}],
            })
        })
        .collect();
    post_spans(&server, &json!({ "resourceSpans": resource_spans }));
    let found = |query: &str| -> Vec<String> {
        let v = server
            .get(&format!("/api/v1/spans?service=shop&{query}"))
            .ok()
            .json();
        v["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["span_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (one, two) = ("11".repeat(8), "22".repeat(8));
    assert_eq!(found("resource=host.name%3Dweb-2"), [two.as_str()]);
    assert_eq!(found("attribute=http.route%3D/cart"), [one.as_str()]);
    assert_eq!(
        found("attribute=http.route%3D/cart&resource=host.name%3Dweb-2"),
        Vec::<String>::new()
    );
    assert_eq!(
        found("resource=host.name%3D").len(),
        0,
        "an empty value is a value"
    );
    let span = &server
        .get("/api/v1/spans?service=shop&resource=host.name%3Dweb-1")
        .ok()
        .json()["spans"][0];
    assert_eq!(span["resource"], json!({"host.name": "web-1"}), "{span}");
    assert_eq!(span["events"][0]["name"], "retry", "{span}");
    assert_eq!(
        span["events"][0]["time_ns"],
        (now - 500_000).to_string(),
        "{span}"
    );
    let bad = server.get("/api/v1/spans?resource=host.name");
    let text = String::from_utf8_lossy(&bad.body);
    assert_eq!(bad.status, 400, "{text}");
    assert!(
        text.contains(r#"resource \"host.name\": expected key=value"#),
        "{text}"
    );
    // The other comparisons, as TraceQL makes them: regexes whole, and a span without the
    // attribute passes neither `!=` nor `!~`.
    let both = {
        let mut b = vec![one.clone(), two.clone()];
        b.sort();
        b
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(found("resource=host.name%21%3Dweb-1"), [two.as_str()]);
    assert_eq!(sorted(found("resource=host.name%3D~web-.*")), both);
    assert_eq!(found("resource=host.name%3D~web"), Vec::<String>::new());
    assert_eq!(found("attribute=http.route%21~/c.*"), [two.as_str()]);
    assert_eq!(found("attribute=user.id%21%3Dx"), Vec::<String>::new());
    assert_eq!(
        found("attribute=http.route%3D~/pay%7C/cart&resource=host.name%21~.*-2"),
        [one.as_str()]
    );
    let bad = server.get("/api/v1/spans?attribute=http.route%3D~(");
    let text = String::from_utf8_lossy(&bad.body);
    assert_eq!(bad.status, 400, "{text}");
    assert!(text.contains("invalid regular expression"), "{text}");
    // Numbers in order: the failed requests, and the ones that did not fail.
    let code = "attribute=http.response.status_code";
    assert_eq!(found(&format!("{code}%3E%3D500")), [two.as_str()]);
    assert_eq!(found(&format!("{code}%3C500")), [one.as_str()]);
    assert_eq!(found(&format!("{code}%3C%3D200")), [one.as_str()]);
    assert_eq!(sorted(found(&format!("{code}%3E199"))), both);
    assert_eq!(found(&format!("{code}%3E503")), Vec::<String>::new());
    // A route is no number: it is in no order.
    assert_eq!(found("attribute=http.route%3E0"), Vec::<String>::new());
    let bad = server.get(&format!("/api/v1/spans?{code}%3E%3Dfast"));
    let text = String::from_utf8_lossy(&bad.body);
    assert_eq!(bad.status, 400, "{text}");
    assert!(
        text.contains(r#">= compares numbers, and \"fast\" is not a number"#),
        "{text}"
    );
    // The kind, by TraceQL's name, OTLP's or its number.
    assert_eq!(found("kind=server"), [one.as_str()]);
    assert_eq!(found("kind=SPAN_KIND_CLIENT"), [two.as_str()]);
    assert_eq!(found("kind=3"), [two.as_str()]);
    assert_eq!(found("kind=internal"), Vec::<String>::new());
    let bad = server.get("/api/v1/spans?kind=sideways");
    let text = String::from_utf8_lossy(&bad.body);
    assert_eq!(bad.status, 400, "{text}");
    assert!(text.contains("expected server, client, internal"), "{text}");
}

/// A tracer that names its service otherwise than the profiles (or sends no profiles): the
/// service list has it with `spans=true`, for the trace search's picker, and not without.
#[test]
fn services_with_spans_include_a_tracer_only_name() {
    let server = TestServer::in_fresh_dir("span-services", |_| {});
    let now = now_ns();
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "tracer-only"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": "0123456789abcdef0123456789abcdef",
            "spanId": "0123456789abcdef",
            "name": "GET /x",
            "startTimeUnixNano": (now - 1_000_000).to_string(),
            "endTimeUnixNano": now.to_string(),
        }]}],
    }]});
    post_spans(&server, &body);
    let services = |query: &str| server.get(&format!("/api/v1/services{query}")).ok().json();
    assert_eq!(services(""), json!({ "services": [] }));
    assert_eq!(
        services("?spans=true"),
        json!({ "services": ["tracer-only"] })
    );
    assert_eq!(
        services("?spans=true&from=now-1h"),
        json!({ "services": ["tracer-only"] })
    );
    assert_eq!(
        services("?spans=true&to=2000-01-01T00:00:00Z"),
        json!({ "services": [] })
    );
}

/// Where the listeners are bound, for the UI's "how to send data": off ones are null.
#[test]
fn status_says_where_the_listeners_are() {
    let server = TestServer::in_fresh_dir("status", |c| {
        c.server.otlp_http_addr = Some("127.0.0.1:0".parse().unwrap());
        c.server.otlp_grpc_addr = None;
    });
    let status = server.get("/api/v1/status").ok().json();
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["listeners"]["http"], server.addr.to_string());
    assert_eq!(
        status["listeners"]["otlp_http"],
        server.otlp_http.unwrap().to_string()
    );
    assert!(status["listeners"]["otlp_grpc"].is_null(), "{status}");
}

/// The Go profile's stacks as an unlabelled mutex profile (contentions, delay), pushed as
/// `service`'s.
fn post_locks(server: &TestServer, data: &GoData, service: &str) {
    let types = [("contentions", "count"), ("delay", "nanoseconds")];
    post_as(server, data, service, &types, types[0], false);
}

/// Posts the Go CPU profile's samples to `/ingest` as `service`, as a profile of sample
/// types `types` (one or two: the samples' first values) and period type `period`, with
/// their span labels or not.
fn post_as(
    server: &TestServer,
    data: &GoData,
    service: &str,
    types: &[(&str, &str)],
    period: (&str, &str),
    span_labels: bool,
) {
    let mut p = data.profile.clone();
    for s in &mut p.sample {
        s.value.truncate(types.len());
        if !span_labels {
            s.label.clear();
        }
    }
    let mut vt = |(t, u): (&str, &str)| {
        p.string_table.extend([t.to_owned(), u.to_owned()]);
        let at = p.string_table.len() as i64;
        spanprof_format::pprof::ValueType {
            r#type: at - 2,
            unit: at - 1,
        }
    };
    let sample_type = types.iter().map(|&t| vt(t)).collect();
    let period_type = vt(period);
    p.sample_type = sample_type;
    p.period_type = Some(period_type);
    let from_s = p.time_nanos / 1_000_000_000;
    server
        .post(
            &format!("/ingest?name={service}&from={from_s}&format=pprof"),
            "application/octet-stream",
            spanprof_format::pprof::encode_gzip(&p),
        )
        .ok();
}

/// The OpenTelemetry eBPF profiler sends counts of CPU samples (`samples:count` with a
/// `cpu:nanoseconds` period), no CPU time: they are what a query without `type` takes (not
/// the first type in order), and a span without any over several periods used no CPU.
#[test]
fn cpu_sample_counts_stand_for_cpu_time_when_there_is_none() {
    let data = GoData::load();
    let server = TestServer::in_fresh_dir("api-ebpf", |_| {});
    let counts = [("samples", "count")];
    post_as(
        &server,
        &data,
        SERVICE,
        &counts,
        ("cpu", "nanoseconds"),
        true,
    );
    let heap = [("alloc_objects", "count"), ("alloc_space", "bytes")];
    post_as(&server, &data, SERVICE, &heap, heap[1], false);
    server
        .post("/v1/traces", "application/json", data.otlp_traces_json())
        .ok();
    let json = |path: &str| server.get(path).ok().json();
    let counts_type = "process_cpu:samples:count:cpu:nanoseconds";
    let types = json(&format!("/api/v1/profile-types?service={SERVICE}"));
    assert_eq!(types["default"], counts_type, "{types}");
    let fg = json(&format!("/api/v1/flamegraph?service={SERVICE}"));
    assert_eq!(fg["summary"]["profile_type"], counts_type);
    let samples: i64 = data.profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(fg["flamegraph"]["total"].as_i64(), Some(samples));
    let trace = json(&format!(
        "/api/v1/traces/{}",
        hex(&data.span(&DB_SPAN).trace_id)
    ));
    assert_eq!(trace["profile_type"], counts_type, "{trace}");
    let db = trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["span_id"] == hex(&DB_SPAN))
        .unwrap();
    assert_eq!(db["coverage"], "no CPU used", "{db}");
}

/// A service without CPU profiles (the Node.js SDK sends wall-clock and heap profiles)
/// defaults to its wall-clock time, not to the first of its types (the heap's objects in
/// use, which sort first); `type=wall` means that time; and the series of a service with
/// only snapshot types is averaged per step by default, as when the type is named.
#[test]
fn a_service_without_cpu_profiles_defaults_to_wall_time() {
    let data = GoData::load();
    let server = TestServer::in_fresh_dir("api-wall", |_| {});
    let wall = [("samples", "count"), ("wall", "nanoseconds")];
    post_as(&server, &data, "nodeapp", &wall, wall[0], true);
    let heap = [("inuse_objects", "count"), ("inuse_space", "bytes")];
    post_as(&server, &data, "nodeapp", &heap, heap[0], false);
    post_as(&server, &data, "heaponly", &heap, heap[0], false);
    let json = |path: &str| server.get(path).ok().json();
    let types = json("/api/v1/profile-types?service=nodeapp");
    let ids = type_ids(&types);
    assert_eq!(ids.len(), 4, "{types}");
    let wall = *ids
        .iter()
        .find(|id| id.split(':').nth(1) == Some("wall"))
        .unwrap_or_else(|| panic!("no wall-clock type in {ids:?}"));
    assert_eq!(types["default"], wall, "{types}");
    let wall_ns: i64 = data.profile.sample.iter().map(|s| s.value[1]).sum();
    for query in ["service=nodeapp", "service=nodeapp&type=wall"] {
        let fg = json(&format!("/api/v1/flamegraph?{query}"));
        assert_eq!(fg["summary"]["profile_type"], wall, "{query}");
        assert_eq!(fg["flamegraph"]["total"].as_i64(), Some(wall_ns), "{query}");
    }
    let span = data.heaviest_per_name()[0];
    let fg = json(&format!(
        "/api/v1/flamegraph?span_id={}",
        hex(&span.span_id)
    ));
    assert_eq!(fg["summary"]["profile_type"], wall);
    // The span search says which type its totals are in.
    server
        .post("/v1/traces", "application/json", data.otlp_traces_json())
        .ok();
    let spans = json(&format!("/api/v1/spans?service={SERVICE}&limit=1000"));
    let found = spans["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["span_id"] == hex(&span.span_id))
        .unwrap_or_else(|| panic!("span {} not in {spans}", hex(&span.span_id)));
    assert_eq!(found["profile_type"], wall, "{found}");
    assert_eq!(found["unit"], "nanoseconds", "{found}");
    assert_eq!(found["total"], span.cpu_ns, "{found}");
    let series = json("/api/v1/timeseries?service=heaponly&step=60s");
    assert_eq!(series["aggregation"], "average", "{series}");
    assert_eq!(
        series["profile_type"],
        "memory:inuse_objects:count:inuse_objects:count"
    );
}

/// A span's summary lists the types of its own samples, not every type of its service: a
/// mutex profile of the same service, without span labels, is not among them.
#[test]
fn a_spans_types_available_are_those_of_its_samples() {
    let data = GoData::load();
    let server = TestServer::in_fresh_dir("api-span-types", |_| {});
    data.ingest(&server);
    post_locks(&server, &data, SERVICE);
    let types = |query: &str| -> Vec<String> {
        let r = server.get(&format!("/api/v1/flamegraph?{query}")).ok();
        let summary = &r.json()["summary"];
        let mut ids: Vec<String> = summary["types_available"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let of_service = types(&format!("service={SERVICE}"));
    assert_eq!(of_service.len(), 4, "{of_service:?}");
    let span = data.heaviest_per_name()[0];
    let of_span = types(&format!("service={SERVICE}&span_id={}", hex(&span.span_id)));
    assert_eq!(of_span.len(), 2, "{of_span:?}");
    assert!(of_span.iter().any(|t| t == CPU_TYPE), "{of_span:?}");
    assert!(of_span.iter().all(|t| of_service.contains(t)));
    assert!(!of_span.iter().any(|t| t.contains("contentions")));
    let of_trace = types(&format!("trace_id={}", hex(&span.trace_id)));
    assert_eq!(of_trace, of_span);
    // A span without samples has no type of its own (not its service's).
    assert_eq!(
        types(&format!("service={SERVICE}&span_id={}", hex(&DB_SPAN))),
        Vec::<String>::new()
    );
    // What a span's type picker asks: its types, and the one it opens with.
    let r = server
        .get(&format!(
            "/api/v1/profile-types?span_id={}",
            hex(&span.span_id)
        ))
        .ok();
    let picker = r.json();
    let mut ids = type_ids(&picker);
    ids.sort();
    assert_eq!(ids, of_span);
    assert_eq!(picker["default"], CPU_TYPE);
}

/// Profiles stored under another name than the tracer's (a scrape target named otherwise):
/// a selection by span name under the tracer's service has its samples, and its summary
/// names their type in full, among the types available.
#[test]
fn spans_of_a_service_profiled_under_another_name_have_their_types() {
    let data = GoData::load();
    let server = TestServer::in_fresh_dir("api-other-name", |_| {});
    let from_s = data.profile.time_nanos / 1_000_000_000;
    server
        .post(
            &format!("/ingest?name={SERVICE}-pprof&from={from_s}&format=pprof"),
            "application/octet-stream",
            spanprof_format::pprof::encode_gzip(&data.profile),
        )
        .ok();
    server
        .post("/v1/traces", "application/json", data.otlp_traces_json())
        .ok();
    let name = "GET /cpu-heavy";
    let r = server
        .get(&format!(
            "/api/v1/flamegraph?service={SERVICE}&span_name={}",
            enc(name)
        ))
        .ok();
    let body = r.json();
    let summary = &body["summary"];
    assert_eq!(
        body["flamegraph"]["total"].as_i64(),
        Some(data.cpu_where(|s| s.name == name)),
        "{summary}"
    );
    assert_eq!(summary["profile_type"], CPU_TYPE, "{summary}");
    let types = summary["types_available"].as_array().unwrap();
    assert!(types.contains(&json!(CPU_TYPE)), "{summary}");
    // The tracer's name holds other profiles (a mutex profile): the spans' CPU type is still
    // one to ask for, as it is theirs.
    post_locks(&server, &data, SERVICE);
    let r = server
        .get(&format!(
            "/api/v1/flamegraph?service={SERVICE}&span_name={}&type={CPU_TYPE}",
            enc(name)
        ))
        .ok();
    assert_eq!(
        r.json()["flamegraph"]["total"].as_i64(),
        Some(data.cpu_where(|s| s.name == name))
    );
}

/// A span without samples under a sampled first span of its service reads "samples on an
/// ancestor span", pointing at it, when spans of its name never have samples (a profiler that
/// labels only the first span of a request, as pyroscope-otel); a span whose name has samples
/// in other traces (a Go `sortWork` that missed its samples this once) still reads "no CPU
/// used". In the trace and in a search alike.
#[test]
fn spans_never_labelled_point_to_their_sampled_ancestor() {
    let mut data = GoData::load();
    let sampled_children: std::collections::HashSet<[u8; 16]> = data
        .spans
        .iter()
        .filter(|s| s.parent.is_some() && s.cpu_ns > 0)
        .map(|s| s.trace_id)
        .collect();
    let root = data
        .spans
        .iter()
        .find(|s| s.parent.is_none() && s.cpu_ns > 0 && !sampled_children.contains(&s.trace_id))
        .expect("a sampled request span whose trace has no sampled child span")
        .clone();
    assert!(
        data.spans
            .iter()
            .any(|s| s.name == "sortWork" && s.cpu_ns > 0),
        "sortWork spans have samples elsewhere"
    );
    let (render, sort) = ([0x51; 8], [0x52; 8]);
    for (id, name) in [(render, "render template"), (sort, "sortWork")] {
        data.spans.push(SpanTruth {
            span_id: id,
            parent: Some(root.span_id),
            name: name.into(),
            start_ns: root.start_ns + 1_000_000,
            end_ns: root.start_ns + 1_000_000 + 5 * PERIOD_NS as u64,
            cpu_ns: 0,
            hot_cum_ns: 0,
            ..root.clone()
        });
    }
    let server = TestServer::in_fresh_dir("api-ancestor", |_| {});
    data.ingest(&server);
    let trace = server
        .get(&format!("/api/v1/traces/{}", to_hex(&root.trace_id)))
        .ok()
        .json();
    let span = |id: [u8; 8]| {
        trace["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["span_id"] == to_hex(&id))
            .unwrap_or_else(|| panic!("{} not in {trace}", to_hex(&id)))
            .clone()
    };
    let (r, s) = (span(render), span(sort));
    assert_eq!(
        (&r["coverage"], &r["sampled_ancestor"]),
        (
            &json!("samples on an ancestor span"),
            &json!(to_hex(&root.span_id))
        ),
        "{r}"
    );
    assert_eq!(
        (&s["coverage"], &s["sampled_ancestor"]),
        (&json!("no CPU used"), &Value::Null),
        "{s}"
    );
    assert_eq!(span(root.span_id)["coverage"], "sampled");
    let search = server
        .get(&format!(
            "/api/v1/spans?service={SERVICE}&name=render%20template"
        ))
        .ok()
        .json();
    assert_eq!(
        (
            &search["spans"][0]["coverage"],
            &search["spans"][0]["sampled_ancestor"]
        ),
        (
            &json!("samples on an ancestor span"),
            &json!(to_hex(&root.span_id))
        ),
        "{search}"
    );
}

/// A span search of a service with profiles but no span at all (a scrape target named
/// otherwise than its tracer names the service) says so, and names the services that have
/// spans; it answered an empty list and nothing more.
#[test]
fn a_search_of_a_service_with_profiles_but_no_spans_says_why() {
    let server = TestServer::in_fresh_dir("api-no-spans", |_| {});
    let data = &fixture().data;
    data.ingest(&server);
    let gz = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/go/cpu-10s.pb.gz"
    ))
    .unwrap();
    server
        .post(
            "/ingest?name=checkout&format=pprof",
            "application/octet-stream",
            gz,
        )
        .ok();
    let answer = server
        .get("/api/v1/spans?service=checkout&from=0")
        .ok()
        .json();
    assert_eq!(answer["spans"], json!([]), "{answer}");
    let hint = answer["hint"].as_str().unwrap_or_default();
    assert!(
        hint.starts_with("checkout has profiles but no spans")
            && hint.contains(&format!("services with spans: {SERVICE}")),
        "{answer}"
    );
    // A search that finds spans, or a service with spans, has no hint.
    let found = server
        .get(&format!("/api/v1/spans?service={SERVICE}&from=0&limit=1"))
        .ok()
        .json();
    assert!(found.get("hint").is_none(), "{found}");
    server.stop().unwrap();
}
