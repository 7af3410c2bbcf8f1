use std::sync::Arc;

use spanprof_format::otlp::{
    any_value, AnyValue, KeyValueAndUnit, Profile, ProfilesData, ProfilesDictionary, Resource,
    ResourceProfiles, Sample, ScopeProfiles,
};
use spanprof_format::trace::{ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span};
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::Storing;

use super::*;
use crate::pipeline::Work;

fn rule(yaml: &str) -> Result<Rule, String> {
    let c: RuleConfig = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
    let env = |k: &str| (k == "POD_NAME").then(|| "pod-7".to_owned());
    Rule::from_config(3, c, &env).map_err(|e| e.to_string())
}

fn transform(rules: &[&str]) -> Transform {
    Transform::new(rules.iter().map(|r| rule(r).unwrap()).collect())
}

fn s(v: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    })
}

/// Two profiles of service `svc`: each sample labelled request_id (one per sample) and
/// route=/a.
fn profiles() -> Work {
    let strings: Vec<String> = ["", "request_id", "route", "r1", "r2", "env", "test"]
        .map(String::from)
        .into();
    let attr = |k: i32, v: &str| KeyValueAndUnit {
        key_strindex: k,
        value: s(v),
        unit_strindex: 0,
    };
    let dictionary = ProfilesDictionary {
        string_table: strings,
        attribute_table: vec![
            KeyValueAndUnit::default(),
            attr(1, "r1"),
            attr(1, "r2"),
            attr(2, "/a"),
            attr(5, "test"),
        ],
        ..Default::default()
    };
    let sample = |a: i32| Sample {
        attribute_indices: vec![a, 3],
        values: vec![1],
        ..Default::default()
    };
    let profile = |attrs: Vec<i32>| Profile {
        samples: vec![sample(1), sample(2)],
        attribute_indices: attrs,
        ..Default::default()
    };
    Work::Profiles(
        ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![spanprof_format::otlp::string_kv("service.name", "svc")],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile(vec![]), profile(vec![4])],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: Some(dictionary),
        },
        Storing::EachAlone,
    )
}

/// Each sample's labels as `key=value` text.
fn sample_labels(w: &Work) -> Vec<Vec<String>> {
    let Work::Profiles(data, _) = w else { panic!() };
    let d = data.dictionary.as_ref().unwrap();
    data.resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
        .flat_map(|p| &p.samples)
        .map(|s| {
            s.attribute_indices
                .iter()
                .map(|&i| {
                    let a = &d.attribute_table[i as usize];
                    format!(
                        "{}={}",
                        d.string_table[a.key_strindex as usize],
                        value_text(a.value.as_ref())
                    )
                })
                .collect()
        })
        .collect()
}

fn resource(w: &Work) -> Vec<(String, String)> {
    let Work::Profiles(data, _) = w else { panic!() };
    data.resource_profiles[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), value_text(kv.value.as_ref())))
        .collect()
}

#[test]
fn set_resource_adds_or_overwrites_from_a_value_or_the_environment() {
    let mut w = profiles();
    transform(&[
        "{action: set_resource, key: k8s.pod.name, value_from_env: POD_NAME}",
        "{action: set_resource, key: service.name, value: other, overwrite: false}",
        "{action: set_resource, key: env, value: prod}",
        "{action: set_resource, key: env, value: staging}",
    ])
    .apply(&mut w);
    let r = resource(&w);
    assert!(
        r.contains(&("k8s.pod.name".into(), "pod-7".into())),
        "{r:?}"
    );
    assert!(r.contains(&("service.name".into(), "svc".into())), "{r:?}");
    assert!(r.contains(&("env".into(), "staging".into())), "{r:?}");
    assert_eq!(r.len(), 3, "{r:?}");
}

#[test]
fn sample_labels_are_renamed_dropped_and_hashed() {
    let mut w = profiles();
    transform(&["{action: rename_label, from: route, to: http.route}"]).apply(&mut w);
    assert_eq!(sample_labels(&w)[0], ["request_id=r1", "http.route=/a"]);

    let mut w = profiles();
    transform(&["{action: drop_label, label: request_id}"]).apply(&mut w);
    assert!(sample_labels(&w).iter().all(|l| l == &["route=/a"]));

    let mut w = profiles();
    transform(&["{action: hash_label, label: request_id}"]).apply(&mut w);
    let labels = sample_labels(&w);
    let (a, b) = (&labels[0][0], &labels[1][0]);
    assert!(
        a.starts_with("request_id=") && a.len() == "request_id=".len() + 16,
        "{a}"
    );
    assert_ne!(a, b, "different values stay different");
    assert_eq!(a, &format!("request_id={}", hash_value("r1")));
    assert!(!labels.concat().iter().any(|l| l.contains("r1")));
}

#[test]
fn profiles_that_match_a_selector_are_dropped() {
    let mut w = profiles();
    transform(&["{action: drop_profiles, selector: '{service_name=\"svc\", env=\"test\"}'}"])
        .apply(&mut w);
    let Work::Profiles(data, _) = &w else {
        panic!()
    };
    let left: usize = data.resource_profiles[0].scope_profiles[0].profiles.len();
    assert_eq!(left, 1, "only the profile with env=test goes");

    let mut w = profiles();
    transform(&["{action: drop_profiles, selector: '{service_name=~\"s.*\"}'}"]).apply(&mut w);
    let Work::Profiles(data, _) = &w else {
        panic!()
    };
    assert!(data.resource_profiles.is_empty());
}

fn spans() -> Work {
    let record = |name: &str| SpanRecord {
        trace_id: [1; 16],
        span_id: [2; 8],
        parent_span_id: None,
        name: name.into(),
        service: "svc".into(),
        start_ns: 0,
        end_ns: 1,
        kind: 2,
        status_code: 0,
        status_message: String::new(),
        attributes: vec![("http.route".into(), format!("/{name}"))],
        resource: Arc::from(vec![]),
        events: Vec::new(),
    };
    let span = |name: &str| Span {
        name: name.into(),
        attributes: vec![spanprof_format::otlp::string_kv(
            "http.route",
            &format!("/{name}"),
        )],
        ..Default::default()
    };
    Work::Spans(
        vec![record("health"), record("checkout")],
        Some(ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![spanprof_format::otlp::string_kv("service.name", "svc")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![span("health"), span("checkout")],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }),
    )
}

#[test]
fn spans_that_match_are_dropped_from_the_records_and_the_forwarded_request() {
    let mut w = spans();
    transform(&[
        "{action: drop_spans, selector: '{http_route=\"/health\", service_name=\"svc\"}'}",
        "{action: set_resource, key: k8s.pod.name, value_from_env: POD_NAME}",
    ])
    .apply(&mut w);
    let Work::Spans(records, Some(request)) = &w else {
        panic!()
    };
    let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["checkout"]);
    assert_eq!(
        records[0].resource.to_vec(),
        [("k8s.pod.name".to_owned(), "pod-7".to_owned())]
    );
    let rs = &request.resource_spans[0];
    let names: Vec<&str> = rs.scope_spans[0]
        .spans
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["checkout"]);
    assert!(rs
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .any(|kv| kv.key == "k8s.pod.name"));
}

#[test]
fn bad_rules_are_refused_naming_the_rule() {
    for (yaml, error) in [
        (
            "{name: pod, action: set_resource, key: k8s.pod.name, value_from_env: NOPE}",
            "processors.transform[3] \"pod\" (set_resource): value_from_env: the environment variable NOPE is not set",
        ),
        (
            "{action: set_resource, key: a}",
            "processors.transform[3] (set_resource): needs one of value",
        ),
        (
            "{action: set_resource, key: a, value: b, value_from_env: C}",
            "needs one of value",
        ),
        ("{action: drop_label}", "processors.transform[3] (drop_label): needs label"),
        ("{action: rename_label, from: a, to: a}", "from and to are both \"a\""),
        ("{action: drop_label, label: a, to: b}", "to is not a setting of drop_label"),
        (
            "{action: drop_spans, selector: 'service_name=x'}",
            "processors.transform[3] (drop_spans): selector \"service_name=x\":",
        ),
        ("{action: explode}", "unknown action \"explode\""),
    ] {
        let e = rule(yaml).unwrap_err();
        assert!(e.contains(error), "{yaml}: {e}");
    }
}
