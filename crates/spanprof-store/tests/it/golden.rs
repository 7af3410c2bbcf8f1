//! Golden files for every rendered flame-graph output of the checkout fixture.
//! Review changes with `INSTA_UPDATE=always cargo test -p spanprof-store` and a diff.

use crate::common;

use std::fmt::Write as _;

use common::{checkout, S1};
use spanprof_store::{
    render_svg, FlameTree, FunctionOrder, SampleSelector, SelectionSummary, SvgOptions,
    DEFAULT_MAX_NODES,
};

fn cpu_tree(span_ids: &[[u8; 8]]) -> (FlameTree, SelectionSummary) {
    let selector = SampleSelector {
        span_ids: span_ids.to_vec(),
        trace_id: None,
        profile_type: Some("cpu:nanoseconds".into()),
    };
    FlameTree::from_profiles(&checkout(), &selector).unwrap()
}

#[test]
fn collapsed() {
    let (tree, _) = cpu_tree(&[]);
    insta::assert_snapshot!("collapsed_cpu", tree.to_collapsed());
}

#[test]
fn nested_json() {
    let (tree, _) = cpu_tree(&[S1]);
    let parsed: serde_json::Value = serde_json::from_str(&tree.to_nested_json()).unwrap();
    insta::assert_snapshot!(
        "nested_json_span_s1",
        serde_json::to_string_pretty(&parsed).unwrap()
    );
}

#[test]
fn pyroscope_layout() {
    let (tree, _) = cpu_tree(&[]);
    let layout = tree.to_pyroscope_layout(DEFAULT_MAX_NODES);
    insta::assert_snapshot!(
        "pyroscope_protojson_cpu",
        serde_json::to_string_pretty(&layout.to_protojson()).unwrap()
    );
}

#[test]
fn flamebearer() {
    let (tree, summary) = cpu_tree(&[S1]);
    let layout = tree.to_pyroscope_layout(DEFAULT_MAX_NODES);
    let body = layout.to_flamebearer_json(&summary.used_types[0]);
    // Levels one per line keep the golden file readable.
    let mut text = String::new();
    for (key, value) in body.as_object().unwrap() {
        if key == "flamebearer" {
            for (k, v) in value.as_object().unwrap() {
                if k == "levels" {
                    for level in v.as_array().unwrap() {
                        let _ = writeln!(text, "flamebearer.levels[] = {level}");
                    }
                } else {
                    let _ = writeln!(text, "flamebearer.{k} = {v}");
                }
            }
        } else {
            let _ = writeln!(text, "{key} = {value}");
        }
    }
    insta::assert_snapshot!("flamebearer_span_s1", text);
}

#[test]
fn top_functions() {
    let (tree, _) = cpu_tree(&[]);
    let mut table = format!("{:>12} {:>12}  function\n", "self_ns", "total_ns");
    for f in tree.top_functions(FunctionOrder::SelfValue) {
        let _ = writeln!(table, "{:>12} {:>12}  {}", f.self_value, f.total, f.name);
    }
    insta::assert_snapshot!("top_functions_cpu", table);
}

#[test]
fn svg() {
    let (tree, summary) = cpu_tree(&[]);
    let options = SvgOptions {
        profile_type: summary.used_types[0].to_string(),
        unit: summary.used_types[0].sample_unit.clone(),
        width_px: 600,
        ..Default::default()
    };
    insta::assert_snapshot!("svg_cpu", render_svg(&tree, &options));
}

#[test]
fn svg_escapes_hostile_names() {
    let hostile = "<img src=x onerror=alert(1)>";
    let mut tree = FlameTree::new();
    tree.add(&["main", hostile, "a\"b'c&d"], 100);
    let options = SvgOptions {
        profile_type: "</text><script>alert(2)</script>".into(),
        unit: "<b>".into(),
        ..Default::default()
    };
    let svg = render_svg(&tree, &options);
    assert!(!svg.contains("<img"), "{svg}");
    assert!(!svg.contains("<script"), "{svg}");
    assert!(!svg.contains("<b>"), "{svg}");
    assert!(svg.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(svg.contains("a&quot;b&apos;c&amp;d"));
    // Only our own markup remains: every '<' opens one of the elements we write.
    for tag in svg.split('<').skip(1) {
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '?')
            .collect();
        assert!(
            ["?xml", "svg", "style", "rect", "text", "g", "title"].contains(&name.as_str()),
            "unexpected element {name:?}"
        );
    }
}
