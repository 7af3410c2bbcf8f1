//! `link_in_place` against `merge::link`, the re-interning linker it replaces on the receive
//! path: on random dictionaries with ids among the attributes, both refuse the same payloads
//! with the same message, and otherwise their samples mean the same.

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;

use super::link_in_place;
use crate::link::{LinkConfig, UNLINKED_SPAN_ID_KEY};
use crate::merge::{link, resolve_value};
use crate::otlp::any_value::Value;
use crate::otlp::*;

const SPAN: &str = "00f067aa0ba902b7";
const SPAN2: &str = "53995c3f42cd8ad8";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// What a profile means, independent of how its dictionary is laid out: one line per
/// profile (resource, scope, types, profile attributes) and its samples resolved to names,
/// the equal ones summed.
fn meaning(data: &ProfilesData, config: &LinkConfig) -> Vec<String> {
    let empty = ProfilesDictionary::default();
    let d = data.dictionary.as_ref().unwrap_or(&empty);
    let string = |i: i32| d.string_table.get(i as usize).cloned().unwrap_or_default();
    let attr = |i: i32| -> Option<String> {
        if i == 0 {
            return None;
        }
        let kv = &d.attribute_table[i as usize];
        // An empty `AnyValue` is no value.
        let value = kv
            .value
            .as_ref()
            .filter(|v| v.value.is_some())
            .map(|v| resolve_value(d, v, 0).expect("resolves"));
        // An attribute equal to the zero entry is no attribute (merging interns it as 0).
        if string(kv.key_strindex).is_empty()
            && value.is_none()
            && string(kv.unit_strindex).is_empty()
        {
            return None;
        }
        Some(format!(
            "{}={:?}[{}]",
            string(kv.key_strindex),
            value,
            string(kv.unit_strindex)
        ))
    };
    // Linking leaves location and mapping attributes alone where merging zeroes linked ids.
    let plain_attrs = |indices: &[i32]| -> Vec<String> {
        indices
            .iter()
            .filter(|&&a| {
                a != 0 && {
                    let kv = &d.attribute_table[a as usize];
                    let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(s)) => Some(s.as_str()),
                        _ => None,
                    };
                    !matches!(
                        config.role(&string(kv.key_strindex), v),
                        crate::link::IdRole::SpanId(_) | crate::link::IdRole::TraceId(_)
                    )
                }
            })
            .filter_map(|&a| attr(a))
            .collect()
    };
    let location = |i: i32| {
        let l = &d.location_table[i as usize];
        let m = &d.mapping_table[l.mapping_index as usize];
        let lines: Vec<String> = l
            .lines
            .iter()
            .map(|x| {
                let f = &d.function_table[x.function_index as usize];
                format!(
                    "{}/{}/{}/{}:{}:{}",
                    string(f.name_strindex),
                    string(f.system_name_strindex),
                    string(f.filename_strindex),
                    f.start_line,
                    x.line,
                    x.column
                )
            })
            .collect();
        format!(
            "{:x}{lines:?}{:?}@{}:{}-{}+{}{:?}",
            l.address,
            plain_attrs(&l.attribute_indices),
            string(m.filename_strindex),
            m.memory_start,
            m.memory_limit,
            m.file_offset,
            plain_attrs(&m.attribute_indices)
        )
    };
    let mut out = Vec::new();
    for rp in &data.resource_profiles {
        for sp in &rp.scope_profiles {
            for p in &sp.profiles {
                let vt = |t: Option<ValueType>| {
                    t.map(|t| (string(t.type_strindex), string(t.unit_strindex)))
                };
                let mut summed: BTreeMap<String, i64> = BTreeMap::new();
                let mut other: Vec<String> = Vec::new();
                for s in &p.samples {
                    let stack: Vec<String> = if s.stack_index == 0 {
                        Vec::new()
                    } else {
                        d.stack_table[s.stack_index as usize]
                            .location_indices
                            .iter()
                            .map(|&l| location(l))
                            .collect()
                    };
                    let l = &d.link_table[s.link_index as usize];
                    let mut attrs: Vec<String> = s
                        .attribute_indices
                        .iter()
                        .filter_map(|&a| attr(a))
                        .collect();
                    attrs.sort();
                    attrs.dedup();
                    let key = format!("{stack:?} link {:?}/{:?} {attrs:?}", l.trace_id, l.span_id);
                    if s.values.len() == 1 && s.timestamps_unix_nano.is_empty() {
                        *summed.entry(key).or_default() += s.values[0];
                    } else {
                        other.push(format!("{key} {:?} {:?}", s.values, s.timestamps_unix_nano));
                    }
                }
                other.sort();
                let mut profile_attrs: Vec<String> = p
                    .attribute_indices
                    .iter()
                    .filter_map(|&a| attr(a))
                    .collect();
                profile_attrs.sort();
                out.push(format!(
                    "{:?} {:?} {:?} {:?} {:?} {} {} {} {:?} {profile_attrs:?}\n  {summed:?}\n  {other:?}",
                    // Merging gives a missing resource an empty one.
                    rp.resource.clone().unwrap_or_default(),
                    rp.schema_url,
                    sp.scope,
                    vt(p.sample_type),
                    vt(p.period_type),
                    p.period,
                    p.time_unix_nano,
                    p.duration_nano,
                    p.profile_id,
                ));
            }
        }
    }
    out.sort();
    out
}

/// An index into a table of `len` entries, now and then one past its end (or negative).
fn index(len: usize) -> impl Strategy<Value = i32> {
    let len = len as i32;
    prop_oneof![100 => 0..len.max(1), 1 => Just(len), 1 => Just(-1)]
}

fn indices(len: usize, max: usize) -> impl Strategy<Value = Vec<i32>> {
    vec(index(len), 0..=max)
}

const STRINGS: usize = 9;
const ATTRIBUTES: usize = 9;
const LOCATIONS: usize = 4;
const STACKS: usize = 5;
const LINKS: usize = 4;

fn dictionary() -> impl Strategy<Value = ProfilesDictionary> {
    // Strings: "" and keys the linker knows, or not.
    let strings = Just(
        [
            "",
            "span_id",
            "trace_id",
            "otel.profile.span_id",
            "thread",
            "main.work",
            "main.go",
            "ns",
            "otel.profile.trace_id",
        ]
        .map(String::from)
        .to_vec(),
    );
    let value = prop_oneof![
        Just(SPAN.to_owned()),
        Just(SPAN2.to_owned()),
        Just(TRACE.to_owned()),
        Just("xyz".to_owned()),
        Just("0000000000000000".to_owned()),
    ]
    .prop_map(|s| Some(Value::StringValue(s)));
    let any = prop_oneof![
        4 => value,
        1 => index(STRINGS).prop_map(|i| Some(Value::StringValueStrindex(i))),
        1 => any::<i64>().prop_map(|i| Some(Value::IntValue(i))),
        1 => Just(None),
    ];
    let random = (
        index(STRINGS),
        prop::option::weighted(0.9, any),
        index(STRINGS),
    )
        .prop_map(|(key_strindex, value, unit_strindex)| KeyValueAndUnit {
            key_strindex,
            value: value.map(|value| AnyValue { value }),
            unit_strindex,
        });
    // Mostly ids under the keys the linker knows (indices into `strings` above).
    let id = |key: i32, value: &str| KeyValueAndUnit {
        key_strindex: key,
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.to_owned())),
        }),
        unit_strindex: 0,
    };
    let attribute = prop_oneof![
        2 => Just(id(3, SPAN)),
        1 => Just(id(1, SPAN2)),
        2 => Just(id(8, TRACE)),
        1 => Just(id(2, TRACE)),
        1 => Just(id(4, "7")),
        2 => random,
    ];
    let attributes = vec(attribute, ATTRIBUTES - 1..=ATTRIBUTES - 1).prop_map(|mut a| {
        a.insert(0, KeyValueAndUnit::default());
        a
    });
    let function = (index(STRINGS), index(STRINGS), index(STRINGS), 0..3i64).prop_map(
        |(name, system, file, start_line)| Function {
            name_strindex: name,
            system_name_strindex: system,
            filename_strindex: file,
            start_line,
        },
    );
    let mapping = (index(STRINGS), indices(ATTRIBUTES, 1)).prop_map(|(f, a)| Mapping {
        memory_start: 0x1000,
        memory_limit: 0x2000,
        file_offset: 0,
        filename_strindex: f,
        attribute_indices: a,
    });
    let line = (index(3), 0..50i64).prop_map(|(function_index, line)| Line {
        function_index,
        line,
        column: 0,
    });
    let location = (index(2), 0..4u64, vec(line, 0..3), indices(ATTRIBUTES, 1)).prop_map(
        |(mapping_index, address, lines, attribute_indices)| Location {
            mapping_index,
            address,
            lines,
            attribute_indices,
        },
    );
    let link = prop_oneof![
        8 => Just(Link {
            trace_id: crate::link::parse_id::<16>(TRACE).unwrap().to_vec(),
            span_id: crate::link::parse_id::<8>(SPAN2).unwrap().to_vec(),
        }),
        1 => Just(Link { trace_id: vec![0; 16], span_id: vec![0; 8] }),
        1 => Just(Link { trace_id: vec![1; 15], span_id: vec![2; 8] }),
        1 => Just(Link { trace_id: vec![1; 16], span_id: vec![] }),
    ];
    let links = vec(link, LINKS - 1..=LINKS - 1).prop_map(|mut l| {
        l.insert(0, Link::default());
        l
    });
    let stack = indices(LOCATIONS, 4).prop_map(|location_indices| Stack { location_indices });
    (
        strings,
        attributes,
        vec(function, 3..=3),
        vec(mapping, 2..=2),
        vec(location, LOCATIONS..=LOCATIONS),
        vec(stack, STACKS..=STACKS),
        links,
    )
        .prop_map(
            |(strings, attributes, functions, mappings, locations, stacks, links)| {
                ProfilesDictionary {
                    mapping_table: mappings,
                    location_table: locations,
                    function_table: functions,
                    link_table: links,
                    string_table: strings,
                    attribute_table: attributes,
                    stack_table: stacks,
                }
            },
        )
}

fn sample() -> impl Strategy<Value = Sample> {
    let values = prop_oneof![
        6 => (1..100i64).prop_map(|v| vec![v]),
        1 => vec(1..100i64, 2..=2),
        1 => Just(vec![]),
    ];
    (
        index(STACKS),
        prop_oneof![3 => Just(0), 1 => index(LINKS)],
        indices(ATTRIBUTES, 4),
        values,
        prop_oneof![6 => Just(vec![]), 1 => vec(1..9u64, 1..=2)],
    )
        .prop_map(
            |(stack_index, link_index, attribute_indices, values, timestamps)| Sample {
                stack_index,
                attribute_indices,
                link_index,
                values,
                timestamps_unix_nano: timestamps,
            },
        )
}

fn profile() -> impl Strategy<Value = Profile> {
    let vt = || {
        (index(STRINGS), index(STRINGS)).prop_map(|(t, u)| ValueType {
            type_strindex: t,
            unit_strindex: u,
        })
    };
    (
        prop::option::weighted(0.9, vt()),
        prop::option::of(vt()),
        vec(sample(), 0..12),
        indices(ATTRIBUTES, 2),
    )
        .prop_map(
            |(sample_type, period_type, samples, attribute_indices)| Profile {
                sample_type,
                period_type,
                samples,
                attribute_indices,
                period: 10,
                time_unix_nano: 7,
                duration_nano: 3,
                ..Default::default()
            },
        )
}

fn profiles_data() -> impl Strategy<Value = ProfilesData> {
    let kv = (index(STRINGS), index(STRINGS)).prop_map(|(k, v)| KeyValue {
        key: if k == 0 {
            "service.name".into()
        } else {
            String::new()
        },
        key_strindex: k,
        value: Some(AnyValue {
            value: Some(Value::StringValueStrindex(v)),
        }),
    });
    let resource = vec(kv, 0..2).prop_map(|attributes| Resource {
        attributes,
        ..Default::default()
    });
    let scope = (
        prop::option::of(Just(InstrumentationScope {
            name: "s".into(),
            ..Default::default()
        })),
        vec(profile(), 0..3),
    )
        .prop_map(|(scope, profiles)| ScopeProfiles {
            scope,
            profiles,
            schema_url: String::new(),
        });
    let rp =
        (prop::option::of(resource), vec(scope, 1..3)).prop_map(|(resource, scope_profiles)| {
            ResourceProfiles {
                resource,
                scope_profiles,
                schema_url: String::new(),
            }
        });
    (vec(rp, 1..3), dictionary()).prop_map(|(resource_profiles, d)| ProfilesData {
        resource_profiles,
        dictionary: Some(d),
    })
}

fn configs() -> impl Strategy<Value = LinkConfig> {
    any::<bool>().prop_map(|keep_link_attributes| LinkConfig {
        keep_link_attributes,
        ..LinkConfig::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn links_like_merging(data in profiles_data(), config in configs()) {
        let merged = link(&data, config.clone());
        let in_place = link_in_place(data.clone(), &config);
        match (merged, in_place) {
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (Ok(_), Err(e)) => prop_assert!(false, "merge links it, link_in_place refuses: {e}\n{data:?}"),
            (Err(e), Ok(_)) => prop_assert!(false, "merge refuses ({e}), link_in_place links it\n{data:?}"),
            (Ok((a, ra)), Ok((b, rb))) => {
                prop_assert_eq!(meaning(&a, &config), meaning(&b, &config), "{:?}", data);
                // Added links are new pairs, distinct from each other and from the request's.
                let sent = &data.dictionary.as_ref().unwrap().link_table;
                let all = &b.dictionary.as_ref().unwrap().link_table;
                for (i, l) in all.iter().enumerate().skip(sent.len().max(1)) {
                    prop_assert!(!all[1..i].contains(l), "link {} repeats one before it", i);
                }
                prop_assert_eq!(ra.link, rb.link);
                prop_assert_eq!(ra.profiles, rb.profiles);
            }
        }
    }
}

fn attribute(d: &mut ProfilesDictionary, key: &str, value: &str) -> i32 {
    d.string_table.push(key.into());
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: d.string_table.len() as i32 - 1,
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        unit_strindex: 0,
    });
    d.attribute_table.len() as i32 - 1
}

#[test]
fn ids_become_links_and_lone_span_ids_stay_as_span_id() {
    let mut d = ProfilesDictionary {
        string_table: vec![String::new()],
        attribute_table: vec![KeyValueAndUnit::default()],
        ..Default::default()
    };
    let span = attribute(&mut d, "otel.profile.span_id", SPAN);
    let trace = attribute(&mut d, "otel.profile.trace_id", TRACE);
    let thread = attribute(&mut d, "thread", "7");
    let bad = attribute(&mut d, "span_id", "xyz");
    let sample = |attribute_indices: Vec<i32>| Sample {
        attribute_indices,
        values: vec![1],
        ..Default::default()
    };
    let data = ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    samples: vec![
                        sample(vec![thread, span, trace]),
                        sample(vec![span, trace]),
                        sample(vec![span]),
                        sample(vec![bad, thread]),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(d),
    };
    let (linked, report) = link_in_place(data, &LinkConfig::default()).unwrap();
    let d = linked.dictionary.as_ref().unwrap();
    let samples = &linked.resource_profiles[0].scope_profiles[0].profiles[0].samples;
    // The first two share one new link; the ids leave them.
    assert_eq!(samples[0].link_index, samples[1].link_index);
    let l = &d.link_table[samples[0].link_index as usize];
    assert_eq!(hex(&l.trace_id), TRACE);
    assert_eq!(hex(&l.span_id), SPAN);
    assert_eq!(samples[0].attribute_indices, vec![thread]);
    assert!(samples[1].attribute_indices.is_empty());
    // A span id alone: no link, a `span_id` attribute.
    assert_eq!(samples[2].link_index, 0);
    let kv = &d.attribute_table[samples[2].attribute_indices[0] as usize];
    assert_eq!(
        d.string_table[kv.key_strindex as usize],
        UNLINKED_SPAN_ID_KEY
    );
    // An invalid id stays an ordinary attribute.
    assert_eq!(samples[3].link_index, 0);
    assert_eq!(samples[3].attribute_indices, vec![thread, bad]);
    assert_eq!(report.linked_samples, 2);
    assert_eq!(report.link.linked_samples, 2);
    assert_eq!(report.link.span_ids_without_trace_id, 1);
    assert_eq!(report.link.invalid_ids, 1);
    assert_eq!(report.samples, 4);
}

#[test]
fn a_bad_link_is_refused_with_its_path() {
    let data = ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    samples: vec![Sample {
                        link_index: 1,
                        values: vec![1],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(ProfilesDictionary {
            link_table: vec![
                Link::default(),
                Link {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 4],
                },
            ],
            ..Default::default()
        }),
    };
    let err = link_in_place(data, &LinkConfig::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "resource_profiles[0].scope_profiles[0].profiles[0].samples[0].link_index: \
         link_table[1].span_id has 4 bytes, a span id has 8"
    );
}

fn hex(b: &[u8]) -> String {
    crate::link::to_hex(b)
}

/// One profile with a bad link among good ones: it alone is refused, named by its place, and
/// the link linking made for its earlier samples leaves the dictionary with it.
#[test]
fn a_profile_with_a_bad_link_is_refused_alone() {
    let mut d = ProfilesDictionary {
        string_table: vec![String::new()],
        attribute_table: vec![KeyValueAndUnit::default()],
        link_table: vec![
            Link::default(),
            Link {
                trace_id: vec![1; 16],
                span_id: vec![2; 4],
            },
        ],
        ..Default::default()
    };
    let span = attribute(&mut d, "otel.profile.span_id", SPAN);
    let span2 = attribute(&mut d, "otel.profile.span_id", SPAN2);
    let trace = attribute(&mut d, "otel.profile.trace_id", TRACE);
    let sample = |attribute_indices: Vec<i32>, link_index: i32| Sample {
        attribute_indices,
        link_index,
        values: vec![1],
        ..Default::default()
    };
    let profile = |samples: Vec<Sample>| Profile {
        samples,
        ..Default::default()
    };
    let data = ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![
                    profile(vec![sample(vec![span, trace], 0)]),
                    // Links (SPAN2, TRACE), then reaches the 4-byte span id.
                    profile(vec![sample(vec![span2, trace], 0), sample(vec![], 1)]),
                    profile(vec![sample(vec![span, trace], 0), sample(vec![], 0)]),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(d),
    };
    let strict = link_in_place(data.clone(), &LinkConfig::default()).unwrap_err();
    let linked = super::link_each_in_place(data, &LinkConfig::default()).unwrap();
    assert_eq!(linked.refused.len(), 1);
    assert_eq!(linked.refused_profiles, 1);
    assert_eq!(linked.refused[0].to_string(), strict.to_string());
    assert_eq!(
        strict.to_string(),
        "resource_profiles[0].scope_profiles[0].profiles[1].samples[1].link_index: \
         link_table[1].span_id has 4 bytes, a span id has 8"
    );
    let profiles = &linked.data.resource_profiles[0].scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2);
    assert_eq!((linked.report.profiles, linked.report.samples), (2, 3));
    assert_eq!(linked.report.link.linked_samples, 2);
    // The two kept profiles share one new link, and the refused one's is gone.
    let d = linked.data.dictionary.as_ref().unwrap();
    assert_eq!(d.link_table.len(), 3, "{:?}", d.link_table);
    let l = &d.link_table[profiles[0].samples[0].link_index as usize];
    assert_eq!(
        (hex(&l.trace_id), hex(&l.span_id)),
        (TRACE.into(), SPAN.into())
    );
    assert_eq!(
        profiles[1].samples[0].link_index,
        profiles[0].samples[0].link_index
    );

    // Every profile refused: the request is, with the first reason.
    let mut only_bad = linked.data.clone();
    only_bad.resource_profiles[0].scope_profiles[0].profiles =
        vec![profile(vec![sample(vec![], 1)])];
    let err = super::link_each_in_place(only_bad, &LinkConfig::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("profiles[0].samples[0].link_index"),
        "{err}"
    );
}
