//! Property tests: random pprof profiles survive pprof → linked OTLP → pprof, and
//! merge → split, with every sample (stack, labels, values) intact.

use std::collections::BTreeMap;

use proptest::prelude::*;
use spanprof_format::check::{check, CheckOptions};
use spanprof_format::merge::{merge, split_by_resource};
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};
use spanprof_format::pprof::{
    self, Function, Label, Line, Location, Mapping, Profile, Sample, ValueType,
};
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::to_pprof::{otlp_to_merged_pprof, otlp_to_pprof, PprofOptions};
use spanprof_format::LinkConfig;

/// A frame as pprof tools see it: mapping, address and the inlined lines in order.
type Frame = (
    Option<(u64, u64, u64, String, String, [bool; 4])>,
    u64,
    bool,
    Vec<(String, String, String, i64, i64, i64)>,
);
type Labels = Vec<(String, String, i64, String)>;

/// Everything a pprof profile says, independent of ids and table order.
#[derive(Debug, PartialEq)]
struct Canonical {
    sample_types: Vec<(String, String)>,
    default_sample_type: String,
    period_type: Option<(String, String)>,
    period: i64,
    time_nanos: i64,
    duration_nanos: i64,
    comments: Vec<String>,
    drop_keep_doc: [String; 3],
    samples: BTreeMap<(Vec<Frame>, Labels), Vec<i64>>,
}

fn canonical(p: &Profile) -> Canonical {
    let s = |i: i64| p.string_table[i as usize].clone();
    let vt = |t: &ValueType| (s(t.r#type), s(t.unit));
    let mut samples: BTreeMap<(Vec<Frame>, Labels), Vec<i64>> = BTreeMap::new();
    for sample in &p.sample {
        let frames = sample
            .location_id
            .iter()
            .map(|id| {
                let l = p.location.iter().find(|l| l.id == *id).unwrap();
                let m = p
                    .mapping
                    .iter()
                    .find(|m| m.id == l.mapping_id && l.mapping_id != 0)
                    .map(|m| {
                        (
                            m.memory_start,
                            m.memory_limit,
                            m.file_offset,
                            s(m.filename),
                            s(m.build_id),
                            [
                                m.has_functions,
                                m.has_filenames,
                                m.has_line_numbers,
                                m.has_inline_frames,
                            ],
                        )
                    });
                let lines = l
                    .line
                    .iter()
                    .map(|ln| {
                        let f = p.function.iter().find(|f| f.id == ln.function_id).unwrap();
                        (
                            s(f.name),
                            s(f.system_name),
                            s(f.filename),
                            f.start_line,
                            ln.line,
                            ln.column,
                        )
                    })
                    .collect();
                (m, l.address, l.is_folded, lines)
            })
            .collect();
        let mut labels: Labels = sample
            .label
            .iter()
            .map(|l| {
                (
                    s(l.key),
                    s(l.str).to_ascii_lowercase(),
                    l.num,
                    s(l.num_unit),
                )
            })
            .collect();
        labels.sort();
        let acc = samples
            .entry((frames, labels))
            .or_insert_with(|| vec![0; sample.value.len()]);
        for (a, v) in acc.iter_mut().zip(&sample.value) {
            *a = a.wrapping_add(*v);
        }
    }
    Canonical {
        sample_types: p.sample_type.iter().map(vt).collect(),
        default_sample_type: s(p.default_sample_type),
        period_type: p.period_type.as_ref().map(vt),
        period: p.period,
        time_nanos: p.time_nanos,
        duration_nanos: p.duration_nanos,
        comments: p.comment.iter().map(|&c| s(c)).collect(),
        drop_keep_doc: [s(p.drop_frames), s(p.keep_frames), s(p.doc_url)],
        samples,
    }
}

const NAMES: &[&str] = &[
    "main.main",
    "main.countPrimes",
    "runtime.mallocgc",
    "net/http.(*conn).serve",
    "a.b",
    "x",
];
const FILES: &[&str] = &["/src/main.go", "/usr/lib/go/src/runtime/malloc.go", ""];
const TYPES: &[(&str, &str)] = &[
    ("samples", "count"),
    ("cpu", "nanoseconds"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
];
const SPANS: &[&str] = &["00f067aa0ba902b7", "b7ad6b7169203331", "53995c3f42cd8ad8"];
const TRACES: &[&str] = &[
    "4bf92f3577b34da6a3ce929d0e0e4736",
    "0af7651916cd43dd8448eb211c80319c",
];

prop_compose! {
    fn arb_profile()(
        n_types in 1usize..=4,
        default_pick in proptest::option::of(0usize..4),
        n_functions in 1usize..8,
        fn_picks in proptest::collection::vec((0usize..6, 0usize..6, 0usize..3, 0i64..100), 8),
        mappings in proptest::collection::vec((0u64..1000, 1u64..1000, 0u64..10, any::<bool>(), any::<bool>()), 0..3),
        locations in proptest::collection::vec((0usize..4, 0u64..100_000, any::<bool>(), proptest::collection::vec((0usize..8, 0i64..500, 0i64..80), 0..3)), 1..10),
        samples in proptest::collection::vec((
            proptest::collection::vec(0usize..10, 0..6),
            proptest::collection::vec(-5i64..1000, 4),
            proptest::option::of((0usize..3, 0usize..2)),
            proptest::option::of(0usize..3),
            proptest::option::of((0i64..50, any::<bool>())),
        ), 0..40),
        meta in (0i64..2_000_000_000_000_000_000, 0i64..60_000_000_000, 0i64..10_000_000, proptest::collection::vec(0usize..6, 0..3), any::<bool>()),
    ) -> Profile {
        let mut strings: Vec<String> = vec![String::new()];
        let mut s = |x: &str| -> i64 {
            if let Some(i) = strings.iter().position(|y| y == x) { return i as i64; }
            strings.push(x.to_owned());
            (strings.len() - 1) as i64
        };
        let sample_type: Vec<ValueType> = TYPES[..n_types].iter().map(|(t, u)| ValueType { r#type: s(t), unit: s(u) }).collect();
        let function: Vec<Function> = (0..n_functions).map(|i| {
            let (n, sys, f, start) = fn_picks[i];
            // Sparse, non-sequential ids exercise the id → position map.
            Function { id: 10 + 3 * i as u64, name: s(NAMES[n]), system_name: s(NAMES[sys]), filename: s(FILES[f]), start_line: start }
        }).collect();
        let mapping: Vec<Mapping> = mappings.iter().enumerate().map(|(i, &(start, len, off, a, b))| Mapping {
            id: i as u64 + 1, memory_start: start, memory_limit: start + len, file_offset: off,
            filename: s(FILES[i % 2]), build_id: if a { s("abc123") } else { 0 },
            has_functions: a, has_filenames: b, has_line_numbers: a && b, has_inline_frames: false,
        }).collect();
        let location: Vec<Location> = locations.iter().enumerate().map(|(i, (m, addr, folded, lines))| Location {
            id: i as u64 + 1,
            mapping_id: if mapping.is_empty() { 0 } else { (*m % (mapping.len() + 1)) as u64 },
            address: *addr,
            line: lines.iter().map(|&(f, line, col)| Line { function_id: function[f % function.len()].id, line, column: col }).collect(),
            is_folded: *folded,
        }).collect();
        let sample = samples.iter().map(|(locs, values, link, region, num)| {
            let mut label = Vec::new();
            if let Some((span, trace)) = link {
                label.push(Label { key: s("span_id"), str: s(SPANS[*span]), ..Default::default() });
                label.push(Label { key: s("trace_id"), str: s(TRACES[*trace]), ..Default::default() });
            }
            if let Some(r) = region {
                label.push(Label { key: s("region"), str: s(["eu", "us", "ap"][*r]), ..Default::default() });
            }
            if let Some((n, with_unit)) = num {
                label.push(Label { key: s("bytes"), num: *n, num_unit: if *with_unit { s("bytes") } else { 0 }, ..Default::default() });
            }
            Sample {
                location_id: locs.iter().map(|l| location[l % location.len()].id).collect(),
                value: values[..n_types].to_vec(),
                label,
            }
        }).collect();
        let (time, duration, period, comments, with_frames) = meta;
        let comment = comments.iter().map(|&c| s(NAMES[c])).collect();
        let default_sample_type = default_pick.filter(|&d| d < n_types).map_or(0, |d| sample_type[d].r#type);
        let period_type = Some(ValueType { r#type: s("cpu"), unit: s("nanoseconds") });
        let (drop_frames, keep_frames) = if with_frames { (s("runtime\\..*"), s("main\\..*")) } else { (0, 0) };
        let doc_url = if with_frames { s("https://example.com/doc") } else { 0 };
        Profile {
            sample_type, sample, mapping, location, function, string_table: strings,
            drop_frames, keep_frames, time_nanos: time, duration_nanos: duration, period_type, period,
            comment, default_sample_type, doc_url,
        }
    }
}

fn service(name: &str) -> Resource {
    Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(name.into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn strict() -> CheckOptions {
    CheckOptions {
        dupes: true,
        orphans: true,
        sample_shapes: true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn pprof_survives_otlp_and_back(p in arb_profile()) {
        // The codec itself round-trips.
        let decoded = pprof::decode(&pprof::encode_gzip(&p), 1 << 20).unwrap();
        prop_assert_eq!(&decoded, &p);

        let (otlp, report) = pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default())).unwrap();
        let violations = check(&otlp, &strict());
        prop_assert!(violations.is_empty(), "violations: {:?}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>());
        let linked = p.sample.iter().filter(|s| s.label.iter().any(|l| p.string_table[l.key as usize] == "span_id")).count();
        prop_assert_eq!(report.link.linked_samples, linked as u64);

        let back = otlp_to_pprof(&otlp, &PprofOptions::default()).unwrap();
        prop_assert_eq!(back.len(), 1);
        prop_assert_eq!(canonical(&back[0].profile), canonical(&p));
    }

    /// With the id labels kept on linked samples (`keep_link_attributes`), they come back as
    /// they were, under their own keys and in their own case, and the link adds no second
    /// label.
    #[test]
    fn kept_id_labels_survive_otlp_and_back(mut p in arb_profile()) {
        for s in p.string_table.iter_mut() {
            match s.as_str() {
                "span_id" | "trace_id" => *s = format!("otel.profile.{s}"),
                id if SPANS.contains(&id) || TRACES.contains(&id) => *s = id.to_uppercase(),
                _ => {}
            }
        }
        let link = LinkConfig { keep_link_attributes: true, ..LinkConfig::default() };
        let (otlp, report) = pprof_to_otlp(&p, Resource::default(), Some(link)).unwrap();
        let linked = p.sample.iter().filter(|s| s.label.iter().any(|l| p.string_table[l.key as usize] == "otel.profile.span_id")).count();
        prop_assert_eq!(report.link.linked_samples, linked as u64);
        let back = otlp_to_pprof(&otlp, &PprofOptions::default()).unwrap();
        prop_assert_eq!(canonical(&back[0].profile), canonical(&p));
    }

    #[test]
    fn merge_then_split_gives_back_each_input(ps in proptest::collection::vec(arb_profile(), 1..5)) {
        let parts: Vec<_> = ps.iter().enumerate()
            .map(|(i, p)| pprof_to_otlp(p, service(&format!("svc-{i}")), Some(LinkConfig::default())).unwrap().0)
            .collect();
        let (merged, report) = merge(&parts, None).unwrap();
        prop_assert_eq!(report.inputs, ps.len() as u64);
        let violations = check(&merged, &strict());
        prop_assert!(violations.is_empty(), "violations: {:?}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>());
        let split = split_by_resource(&merged).unwrap();
        prop_assert_eq!(split.len(), ps.len());
        for (i, (one, p)) in split.iter().zip(&ps).enumerate() {
            prop_assert!(check(one, &strict()).is_empty());
            let name = spanprof_format::to_pprof::service_name(one.resource_profiles[0].resource.as_ref().unwrap());
            let expected = format!("svc-{i}");
            prop_assert_eq!(name, Some(expected.as_str()));
            prop_assert_eq!(canonical(&otlp_to_merged_pprof(one, &PprofOptions::default()).unwrap()), canonical(p));
        }
    }

    #[test]
    fn merged_pprof_sums_all_inputs(p in arb_profile()) {
        // The same profile twice merges into one with every value doubled.
        let (a, _) = pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default())).unwrap();
        let (both, _) = merge([&a, &a], None).unwrap();
        let merged = canonical(&otlp_to_merged_pprof(&both, &PprofOptions::default()).unwrap());
        let mut expected = canonical(&p);
        for v in expected.samples.values_mut() { for x in v.iter_mut() { *x = x.wrapping_mul(2); } }
        prop_assert_eq!(merged.samples, expected.samples);
    }
}

/// A pprof's first mapping is its main binary (`go tool pprof` names it as File and Build
/// ID): it stays first through OTLP and back, and through a merge, even when the first
/// sample's leaf is in another mapping (libc).
#[test]
fn the_main_binary_stays_the_first_mapping() {
    let mut strings: Vec<String> = vec![String::new()];
    let mut s = |x: &str| -> i64 {
        strings.push(x.to_owned());
        (strings.len() - 1) as i64
    };
    let mapping = |id: u64, start: u64, file: i64, build: i64| Mapping {
        id,
        memory_start: start,
        memory_limit: start + 0x100000,
        filename: file,
        build_id: build,
        has_functions: true,
        ..Default::default()
    };
    let (app, app_build, libc, libc_build) = (
        s("/usr/bin/app"),
        s("appbuild"),
        s("/lib/libc.so.6"),
        s("libcbuild"),
    );
    let (main, memcpy, cpu, ns) = (s("main.main"), s("memcpy"), s("cpu"), s("nanoseconds"));
    let p = Profile {
        sample_type: vec![ValueType {
            r#type: cpu,
            unit: ns,
        }],
        mapping: vec![
            mapping(1, 0x400000, app, app_build),
            mapping(2, 0x7f00000000, libc, libc_build),
        ],
        function: vec![
            Function {
                id: 1,
                name: main,
                ..Default::default()
            },
            Function {
                id: 2,
                name: memcpy,
                ..Default::default()
            },
        ],
        location: vec![
            Location {
                id: 1,
                mapping_id: 1,
                address: 0x401000,
                line: vec![Line {
                    function_id: 1,
                    line: 10,
                    column: 0,
                }],
                ..Default::default()
            },
            Location {
                id: 2,
                mapping_id: 2,
                address: 0x7f00000100,
                line: vec![Line {
                    function_id: 2,
                    line: 0,
                    column: 0,
                }],
                ..Default::default()
            },
        ],
        // The first sample's leaf is in libc.
        sample: vec![
            Sample {
                location_id: vec![2, 1],
                value: vec![30],
                label: vec![],
            },
            Sample {
                location_id: vec![1],
                value: vec![10],
                label: vec![],
            },
        ],
        string_table: strings,
        ..Default::default()
    };
    let files = |p: &Profile| -> Vec<String> {
        p.mapping
            .iter()
            .map(|m| p.string_table[m.filename as usize].clone())
            .collect()
    };
    let (otlp, _) = pprof_to_otlp(&p, Resource::default(), None).unwrap();
    let back = otlp_to_pprof(&otlp, &PprofOptions::default()).unwrap();
    assert_eq!(files(&back[0].profile), files(&p));
    assert_eq!(canonical(&back[0].profile), canonical(&p));
    let (merged, _) = merge([&otlp], None).unwrap();
    let back = otlp_to_pprof(&merged, &PprofOptions::default()).unwrap();
    assert_eq!(files(&back[0].profile), files(&p));

    // Mappings no sample uses do not come through, and do not change the order of those
    // that do: one no location names (Go's [vdso]), between the two, and one a location
    // names that no sample has.
    let mut q = p.clone();
    let (vdso, libm) = (q.string_table.len() as i64, q.string_table.len() as i64 + 1);
    q.string_table
        .extend(["[vdso]".to_owned(), "/lib/libm.so.6".to_owned()]);
    q.mapping.insert(1, mapping(3, 0x7ff0000000, vdso, 0));
    q.mapping.push(mapping(4, 0x7e00000000, libm, 0));
    q.location.push(Location {
        id: 3,
        mapping_id: 4,
        address: 0x7e00000100,
        ..Default::default()
    });
    for (libm_named, q) in [
        (true, q.clone()),
        (false, {
            let mut r = q;
            r.location.pop();
            r
        }),
    ] {
        let (otlp, _) = pprof_to_otlp(&q, Resource::default(), None).unwrap();
        let back = otlp_to_pprof(&otlp, &PprofOptions::default()).unwrap();
        assert_eq!(
            files(&back[0].profile),
            files(&p),
            "a location in libm: {libm_named}"
        );
    }
}
