//! A span's focus (`focus` on the profile endpoints) and its windows (`/api/v1/spans/{id}`)
//! through the real server, on a real Go CPU profile and the spans its labels name: each
//! focus holds what it says (this span ≤ with children ≤ the process meanwhile ≤ the whole
//! window, which is the whole profile), says it in words, and bad values are 400s naming
//! `focus`.

use std::sync::OnceLock;

use crate::common;
use common::goprofile::GoServer as Fixture;
use serde_json::Value;
use spanprof_format::link::to_hex;

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture::start("span-focus-store", |_| {}))
}

fn total(path: &str) -> (i64, Value) {
    let v = fixture().server.get(path).ok().json();
    (
        v["flamegraph"]["total"].as_i64().unwrap(),
        v["focus"].clone(),
    )
}

#[test]
fn each_focus_holds_more_than_the_one_before_and_says_what() {
    let data = &fixture().data;
    // A span with a child that has samples of its own.
    let parent = data
        .spans
        .iter()
        .find(|p| {
            p.cpu_ns > 0
                && data
                    .spans
                    .iter()
                    .any(|c| c.parent == Some(p.span_id) && c.cpu_ns > 0)
        })
        .expect("a sampled span with a sampled child");
    let id = to_hex(&parent.span_id);
    let (own, f) = total(&format!("/api/v1/flamegraph?span_id={id}&focus=span"));
    assert_eq!(own, parent.cpu_ns, "{f}");
    assert_eq!(f["mode"], "span");
    let (with_children, f) = total(&format!("/api/v1/flamegraph?span_id={id}&focus=children"));
    let children: i64 = data
        .spans
        .iter()
        .filter(|c| c.parent == Some(parent.span_id))
        .map(|c| c.cpu_ns)
        .sum();
    assert!(
        with_children >= own + children,
        "{with_children} < {own} + {children}: {f}"
    );
    let (during, f) = total(&format!("/api/v1/flamegraph?span_id={id}&focus=during"));
    assert!(during >= with_children, "{during} < {with_children}: {f}");
    assert!(
        f["holds"].as_str().unwrap().contains("ran while span"),
        "{f}"
    );
    // Every span that overlapped it counts whole.
    let overlapping: i64 = data
        .spans
        .iter()
        .filter(|s| s.start_ns <= parent.end_ns && s.end_ns >= parent.start_ns)
        .map(|s| s.cpu_ns)
        .sum();
    assert_eq!(during, overlapping, "{f}");
    let (window, f) = total(&format!("/api/v1/flamegraph?span_id={id}&focus=window"));
    assert_eq!(
        window, data.cpu_total_ns,
        "the one window holds the whole profile: {f}"
    );
    assert_eq!(f["windows"], 1, "{f}");
    // Without focus the answer says nothing of one.
    let v = fixture()
        .server
        .get(&format!("/api/v1/flamegraph?span_id={id}"))
        .ok()
        .json();
    assert!(v["focus"].is_null(), "{}", v["focus"]);
    // /top follows it too.
    let top = fixture()
        .server
        .get(&format!("/api/v1/top?span_id={id}&focus=window"))
        .ok()
        .json();
    assert_eq!(top["total"].as_i64(), Some(data.cpu_total_ns));
}

#[test]
fn a_span_answer_says_its_windows_are_all_in() {
    let data = &fixture().data;
    let span = data.spans.iter().find(|s| s.cpu_ns > 0).unwrap();
    let v = fixture()
        .server
        .get(&format!("/api/v1/spans/{}", to_hex(&span.span_id)))
        .ok()
        .json();
    assert_eq!(v["span"]["total"].as_i64(), Some(span.cpu_ns), "{v}");
    let w = &v["windows"];
    assert_eq!(w["state"], "complete", "{v}");
    assert_eq!(
        (w["in"].as_u64(), w["expected"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(w["more_may_come"], false, "{v}");
    assert!(v["retry_after_ms"].is_null(), "{v}");
}

#[test]
fn bad_focus_and_span_parameters_are_400s_naming_them() {
    let data = &fixture().data;
    let id = to_hex(&data.spans[0].span_id);
    let other = to_hex(&data.spans[1].span_id);
    for (path, named) in [
        (
            format!("/api/v1/flamegraph?span_id={id}&focus=all"),
            "focus \"all\": expected span",
        ),
        (
            "/api/v1/flamegraph?service=x&focus=window".to_owned(),
            "focus \"window\": needs exactly one span_id",
        ),
        (
            format!("/api/v1/flamegraph?span_id={id}&span_id={other}&focus=during"),
            "needs exactly one span_id",
        ),
        (
            format!("/api/v1/top?span_id={id}&focus=children&include_child_spans=true"),
            "leave out include_child_spans",
        ),
        (format!("/api/v1/svg?span_id={id}&focus=x"), "focus \"x\""),
        ("/api/v1/spans/xyz".to_owned(), "span_id \"xyz\""),
        (format!("/api/v1/spans/{id}?focus=span"), "focus"),
    ] {
        let r = fixture().server.get(&path);
        assert_eq!(
            r.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let error = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(named), "{path}: {error}");
    }
    let r = fixture().server.get("/api/v1/spans/00000000000000aa");
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
}
