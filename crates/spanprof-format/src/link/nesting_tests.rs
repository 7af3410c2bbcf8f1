//! Profile-level ids and samples with several span ids, through every linking path: pprof
//! conversion ([`Batch::add_pprof`]), re-interning ([`crate::merge::link`]) and
//! [`crate::link_in_place::link_in_place`].

use std::sync::Arc;

use super::{parse_id, to_hex, LinkConfig, SpanParents};
use crate::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use crate::{pprof, Batch, ConversionReport};

const PARENT: &str = "00f067aa0ba902b7";
const CHILD: &str = "53995c3f42cd8ad8";
const OTHER: &str = "1111111111111111";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A CPU profile with one sample per entry: its value and its string labels.
fn profile(samples: &[(i64, &[(&str, &str)])]) -> pprof::Profile {
    let mut p = pprof::Profile {
        string_table: vec!["".into(), "cpu".into(), "nanoseconds".into(), "main".into()],
        ..Default::default()
    };
    let mut s = |text: &str| -> i64 {
        match p.string_table.iter().position(|x| x == text) {
            Some(i) => i as i64,
            None => {
                p.string_table.push(text.to_owned());
                p.string_table.len() as i64 - 1
            }
        }
    };
    let (cpu, ns, main) = (s("cpu"), s("nanoseconds"), s("main"));
    let mut sample = Vec::new();
    for (value, labels) in samples {
        sample.push(pprof::Sample {
            location_id: vec![1],
            value: vec![*value],
            label: labels
                .iter()
                .map(|(k, v)| pprof::Label {
                    key: s(k),
                    str: s(v),
                    ..Default::default()
                })
                .collect(),
        });
    }
    p.sample_type = vec![pprof::ValueType {
        r#type: cpu,
        unit: ns,
    }];
    p.function = vec![pprof::Function {
        id: 1,
        name: main,
        ..Default::default()
    }];
    p.location = vec![pprof::Location {
        id: 1,
        line: vec![pprof::Line {
            function_id: 1,
            ..Default::default()
        }],
        ..Default::default()
    }];
    p.sample = sample;
    p
}

fn resource(attrs: &[(&str, &str)]) -> Resource {
    Resource {
        attributes: attrs
            .iter()
            .map(|(k, v)| KeyValue {
                key: (*k).into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue((*v).into())),
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn convert(
    p: &pprof::Profile,
    res: Resource,
    parents: Option<Arc<dyn SpanParents>>,
) -> (ProfilesData, ConversionReport) {
    let mut b = Batch::new(Some(LinkConfig::default()));
    if let Some(parents) = parents {
        b.set_span_parents(parents);
    }
    b.add_pprof(p, res).unwrap();
    b.finish()
}

/// Value per (span id hex, or "-" unlinked; trace hex or "-").
type Rows = Vec<(String, String, i64)>;

/// The rows of `data`, and its resource's keys.
fn by_span(data: &ProfilesData) -> (Rows, Vec<String>) {
    let d = data.dictionary.as_ref().unwrap();
    let mut out: Rows = Vec::new();
    let rp = &data.resource_profiles[0];
    let keys = rp
        .resource
        .iter()
        .flat_map(|r| &r.attributes)
        .map(|kv| kv.key.clone())
        .collect();
    for p in &rp.scope_profiles[0].profiles {
        for s in &p.samples {
            let (trace, span) = if s.link_index == 0 {
                let span = s.attribute_indices.iter().find_map(|&a| {
                    let kv = &d.attribute_table[a as usize];
                    (d.string_table[kv.key_strindex as usize] == "span_id").then(|| {
                        match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                            any_value::Value::StringValue(s) => s.clone(),
                            _ => unreachable!(),
                        }
                    })
                });
                ("-".to_owned(), span.unwrap_or_else(|| "-".into()))
            } else {
                let l = &d.link_table[s.link_index as usize];
                (to_hex(&l.trace_id), to_hex(&l.span_id))
            };
            let v: i64 = s.values.iter().sum();
            match out.iter_mut().find(|(a, b, _)| *a == span && *b == trace) {
                Some(e) => e.2 += v,
                None => out.push((span, trace, v)),
            }
        }
    }
    out.sort();
    (out, keys)
}

fn row(span: &str, trace: &str, v: i64) -> (String, String, i64) {
    (span.into(), trace.into(), v)
}

/// Every linking path gives the same answer for one request.
fn all_paths(
    data: &ProfilesData,
    parents: Option<Arc<dyn SpanParents>>,
) -> Vec<(Rows, Vec<String>, ConversionReport)> {
    let mut merged = Batch::new(Some(LinkConfig::default()));
    if let Some(p) = &parents {
        merged.set_span_parents(p.clone());
    }
    merged.add_profiles_data(data).unwrap();
    let (m, mr) = merged.finish();
    let (ip, ipr) =
        crate::link_in_place::link_in_place_with(data.clone(), &LinkConfig::default(), parents)
            .unwrap();
    [(m, mr), (ip, ipr)]
        .into_iter()
        .map(|(d, r)| {
            let (rows, keys) = by_span(&d);
            (rows, keys, r)
        })
        .collect()
}

/// Unlinked: the profile's data as sent, with no linking (the OTLP input of the other paths).
/// Unlinked conversion keeps a repeated label key's first value only, so a repeated
/// `span_id` is sent as `otel.profile.span_id`: OTLP producers name nested ids by two keys.
fn unlinked(p: &pprof::Profile, res: Resource) -> ProfilesData {
    let mut p = p.clone();
    let other = p.string_table.len() as i64;
    p.string_table.push("otel.profile.span_id".into());
    for s in &mut p.sample {
        let mut seen = Vec::new();
        for l in &mut s.label {
            if seen.contains(&l.key) {
                l.key = other;
            }
            seen.push(l.key);
        }
    }
    let mut b = Batch::new(None);
    b.add_pprof(&p, res).unwrap();
    b.finish().0
}

#[test]
fn ids_of_the_profile_link_its_samples_without_ids_and_leave_its_labels() {
    let p = profile(&[
        (10, &[]),
        (5, &[("span_id", OTHER)]),
        (7, &[("region", "eu")]),
    ]);
    let res = resource(&[
        ("service.name", "app"),
        ("span_id", PARENT),
        ("trace_id", TRACE),
        ("env", "eval"),
    ]);
    let (data, report) = convert(&p, res.clone(), None);
    let (rows, keys) = by_span(&data);
    assert_eq!(keys, ["service.name", "env"], "ids are no series labels");
    // A sample with its own span keeps it (no trace of its own: the profile's is another
    // span's); the rest take the profile's ids.
    assert_eq!(rows, [row(PARENT, TRACE, 17), row(OTHER, "-", 5)]);
    assert_eq!(report.link.profile_level_ids, 2);
    for (rows2, keys2, r) in all_paths(&unlinked(&p, res), None) {
        assert_eq!((&rows2, &keys2), (&rows, &keys));
        assert_eq!(r.link.profile_level_ids, 2);
    }
}

#[test]
fn a_span_id_alone_on_the_profile_is_kept_for_its_trace_later() {
    let p = profile(&[(3, &[])]);
    let (data, report) = convert(&p, resource(&[("profile_id", PARENT)]), None);
    assert_eq!(by_span(&data).0, [row(PARENT, "-", 3)]);
    assert_eq!(report.link.span_ids_without_trace_id, 1);
    // A value that is no id is no link, and stays where it was.
    let (data, _) = convert(&p, resource(&[("span_id", "nope")]), None);
    assert_eq!(
        by_span(&data),
        (vec![row("-", "-", 3)], vec!["span_id".into()])
    );
}

#[test]
fn nested_span_ids_give_the_innermost_span_by_the_profiles_samples() {
    // Thread tags kept as a set: the child's samples carry both ids, in id order (here the
    // child's first), the parent's own only the parent's.
    let both: &[(&str, &str)] = &[("span_id", CHILD), ("span_id", PARENT), ("trace_id", TRACE)];
    let p = profile(&[
        (4, &[("span_id", PARENT), ("trace_id", TRACE)]),
        (6, both),
        (
            8,
            &[("span_id", PARENT), ("span_id", CHILD), ("trace_id", TRACE)],
        ),
    ]);
    let (data, report) = convert(&p, resource(&[]), None);
    assert_eq!(
        by_span(&data).0,
        [row(PARENT, TRACE, 4), row(CHILD, TRACE, 14)]
    );
    assert_eq!(
        (report.link.nested_span_ids, report.link.ambiguous_span_ids),
        (2, 0)
    );
    assert_eq!(
        report.duplicate_label_keys, 0,
        "a repeated span id is no duplicate"
    );
    for (rows, _, r) in all_paths(&unlinked(&p, resource(&[])), None) {
        assert_eq!(rows, by_span(&data).0);
        assert_eq!(r.link.nested_span_ids, 2);
    }
}

/// Spans as a store knows them: child → parent.
struct Known(Vec<([u8; 8], [u8; 8])>);

impl SpanParents for Known {
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]> {
        self.0.iter().find(|(c, _)| c == span).map(|(_, p)| *p)
    }
}

#[test]
fn known_spans_tell_the_innermost_where_the_samples_cannot() {
    // The parent ran only inside its child here: both ids are on every sample.
    let p = profile(&[(
        9,
        &[("span_id", PARENT), ("span_id", CHILD), ("trace_id", TRACE)],
    )]);
    let (data, report) = convert(&p, resource(&[]), None);
    assert_eq!(
        by_span(&data).0,
        [row(PARENT, TRACE, 9)],
        "the first, as documented"
    );
    assert_eq!(report.link.ambiguous_span_ids, 1);

    let id = |s| parse_id::<8>(s).unwrap();
    // A grandchild's parent chain: CHILD → OTHER → PARENT.
    let known: Arc<dyn SpanParents> =
        Arc::new(Known(vec![(id(CHILD), id(OTHER)), (id(OTHER), id(PARENT))]));
    let (data, report) = convert(&p, resource(&[]), Some(known.clone()));
    assert_eq!(by_span(&data).0, [row(CHILD, TRACE, 9)]);
    assert_eq!(
        (report.link.nested_span_ids, report.link.ambiguous_span_ids),
        (1, 0)
    );
    for (rows, _, r) in all_paths(&unlinked(&p, resource(&[])), Some(known)) {
        assert_eq!(rows, [row(CHILD, TRACE, 9)]);
        assert_eq!(r.link.nested_span_ids, 1);
    }
}

/// Spans as a server learns them: what [`SpanParents::learn`] was told, nothing known before.
#[derive(Default)]
struct Learning(std::sync::Mutex<Vec<([u8; 8], [u8; 8])>>);

impl SpanParents for Learning {
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]> {
        let learned = self.0.lock().unwrap();
        learned.iter().find(|(c, _)| c == span).map(|(_, p)| *p)
    }

    fn learn(&self, span: [u8; 8], ancestor: [u8; 8]) {
        self.0.lock().unwrap().push((span, ancestor));
    }
}

#[test]
fn a_window_inside_the_nested_span_takes_what_earlier_windows_showed() {
    let both: &[(&str, &str)] = &[("span_id", PARENT), ("span_id", CHILD), ("trace_id", TRACE)];
    // Upload 1: the parent ran alone, then the child started: the child is told apart.
    let first = profile(&[(4, &[("span_id", PARENT), ("trace_id", TRACE)]), (6, both)]);
    // Upload 2: wholly inside the child: both ids on every sample, ordered parent first.
    let second = profile(&[(9, both)]);
    let learning: Arc<dyn SpanParents> = Arc::new(Learning::default());
    let (data, _) = convert(&first, resource(&[]), Some(learning.clone()));
    assert_eq!(
        by_span(&data).0,
        [row(PARENT, TRACE, 4), row(CHILD, TRACE, 6)]
    );
    let (data, report) = convert(&second, resource(&[]), Some(learning.clone()));
    assert_eq!(by_span(&data).0, [row(CHILD, TRACE, 9)]);
    assert_eq!(
        (report.link.nested_span_ids, report.link.ambiguous_span_ids),
        (1, 0)
    );
    for (rows, _, _) in all_paths(&unlinked(&second, resource(&[])), Some(learning)) {
        assert_eq!(rows, [row(CHILD, TRACE, 9)]);
    }
    // Without that memory, the second upload alone is ambiguous.
    let (data, report) = convert(&second, resource(&[]), None);
    assert_eq!(by_span(&data).0, [row(PARENT, TRACE, 9)]);
    assert_eq!(report.link.ambiguous_span_ids, 1);
}
