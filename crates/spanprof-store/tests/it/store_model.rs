//! The store against a naive model: for random linked profiles and random selections, the
//! flame graph from disk equals merging the same samples in memory. Also: reopening gives the
//! same answers, and symbols are shared across profiles.

use proptest::prelude::*;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Profile, ProfilesData, Resource};
use spanprof_format::pprof::{self, Function, Label, Line, Location, Mapping, Sample, ValueType};
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::LinkConfig;
use spanprof_store::store::{Selection, Store, StoreConfig};
use spanprof_store::{FlameTree, SampleSelector};

const SPANS: [&str; 4] = [
    "00f067aa0ba902b7",
    "b7ad6b7169203331",
    "53995c3f42cd8ad8",
    "1111111111111111",
];
const TRACES: [&str; 2] = [
    "4bf92f3577b34da6a3ce929d0e0e4736",
    "0af7651916cd43dd8448eb211c80319c",
];
const FUNCS: [&str; 5] = [
    "main.main",
    "main.handler",
    "main.countPrimes",
    "runtime.mallocgc",
    "sort.Sort",
];

/// One random CPU pprof: stacks over a small function set, labels with span ids, from one of
/// three builds (the same functions at other addresses: new symbols, the same frame names).
fn arb_pprof() -> impl Strategy<Value = (pprof::Profile, usize, i64)> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(0usize..5, 1..5),
                1i64..50,
                prop::option::of((0usize..4, 0usize..2)),
                prop::option::of(0usize..2),
            ),
            1..30,
        ),
        0usize..2,
        0i64..5,
        0u64..3,
    )
        .prop_map(|(samples, service, minute, build)| {
            let mut strings: Vec<String> = vec![String::new()];
            let mut s = |x: &str| -> i64 {
                if let Some(i) = strings.iter().position(|y| y == x) {
                    return i as i64;
                }
                strings.push(x.to_owned());
                (strings.len() - 1) as i64
            };
            let function: Vec<Function> = FUNCS
                .iter()
                .enumerate()
                .map(|(i, f)| Function {
                    id: i as u64 + 1,
                    name: s(f),
                    system_name: s(f),
                    filename: s("m.go"),
                    start_line: 1,
                })
                .collect();
            let binary = s("/app/main");
            let location: Vec<Location> = (0..5)
                .map(|i| Location {
                    id: i as u64 + 1,
                    mapping_id: 1,
                    address: build * 0x1000 + i as u64,
                    line: vec![Line {
                        function_id: i as u64 + 1,
                        line: 10,
                        column: 0,
                    }],
                    ..Default::default()
                })
                .collect();
            let sample = samples
                .iter()
                .map(|(stack, v, link, region)| {
                    let mut label = Vec::new();
                    if let Some((sp, tr)) = link {
                        label.push(Label {
                            key: s("span_id"),
                            str: s(SPANS[*sp]),
                            ..Default::default()
                        });
                        label.push(Label {
                            key: s("trace_id"),
                            str: s(TRACES[*tr]),
                            ..Default::default()
                        });
                    }
                    if let Some(r) = region {
                        label.push(Label {
                            key: s("region"),
                            str: s(["eu", "us"][*r]),
                            ..Default::default()
                        });
                    }
                    Sample {
                        location_id: stack.iter().map(|&l| l as u64 + 1).collect(),
                        value: vec![*v, v * 10_000_000],
                        label,
                    }
                })
                .collect();
            let p = pprof::Profile {
                sample_type: vec![
                    ValueType {
                        r#type: s("samples"),
                        unit: s("count"),
                    },
                    ValueType {
                        r#type: s("cpu"),
                        unit: s("nanoseconds"),
                    },
                ],
                period_type: Some(ValueType {
                    r#type: s("cpu"),
                    unit: s("nanoseconds"),
                }),
                period: 10_000_000,
                time_nanos: 1_700_000_000_000_000_000 + minute * 60_000_000_000,
                duration_nanos: 10_000_000_000,
                sample,
                location,
                function,
                // Each build's binary at its own addresses.
                mapping: vec![Mapping {
                    id: 1,
                    memory_start: build * 0x1000,
                    memory_limit: (build + 1) * 0x1000,
                    filename: binary,
                    ..Default::default()
                }],
                string_table: strings,
                ..Default::default()
            };
            (p, service, minute)
        })
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

fn hex8(s: &str) -> [u8; 8] {
    spanprof_format::link::parse_id::<8>(s).unwrap()
}

/// The naive answer: keep the matching profiles in memory and merge their selected samples.
fn naive(
    inputs: &[(ProfilesData, usize, i64)],
    sel: &Selection,
    region: Option<&str>,
    sample_type: &str,
) -> String {
    let mut tree = FlameTree::new();
    for (data, svc, minute) in inputs {
        // With spans or a trace selected, `service` is the spans' (a span filter's), not the
        // profiles': their samples count in any service's profiles.
        if sel.span_ids.is_empty()
            && sel.trace_id.is_none()
            && sel
                .service
                .as_deref()
                .is_some_and(|s| s != format!("svc{svc}"))
        {
            continue;
        }
        let t = 1_700_000_000_000_000_000 + minute * 60_000_000_000;
        if t + 10_000_000_000 < sel.from_ns || (sel.to_ns != 0 && t >= sel.to_ns) {
            continue;
        }
        // Keep only the profile of `sample_type` and, with a region matcher, the samples of
        // that region.
        let mut d = data.clone();
        let dict = d.dictionary.clone().unwrap();
        for rp in &mut d.resource_profiles {
            for sp in &mut rp.scope_profiles {
                sp.profiles.retain(|p: &Profile| {
                    dict.string_table[p.sample_type.unwrap().type_strindex as usize] == sample_type
                });
                for p in &mut sp.profiles {
                    p.samples.retain(|s| {
                        let r = s.attribute_indices.iter().find_map(|&a| {
                            let kv = &dict.attribute_table[a as usize];
                            (dict.string_table[kv.key_strindex as usize] == "region").then(|| {
                                match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                                    any_value::Value::StringValue(v) => v.clone(),
                                    _ => unreachable!(),
                                }
                            })
                        });
                        region.is_none_or(|want| r.as_deref() == Some(want))
                    });
                }
            }
        }
        let selector = SampleSelector {
            span_ids: sel.span_ids.clone(),
            trace_id: sel.trace_id,
            profile_type: Some(sample_type.into()),
        };
        spanprof_store::for_each_selected_sample(&d, &selector, |frames, v| tree.add(frames, v))
            .unwrap();
    }
    tree.to_collapsed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn store_answers_equal_a_naive_merge(
        inputs in prop::collection::vec(arb_pprof(), 1..8),
        svc in prop::option::of(0usize..2),
        spans in prop::collection::vec(0usize..4, 0..3),
        trace in prop::option::of(0usize..2),
        range in prop::option::of((0i64..5, 1i64..4)),
        region in prop::option::of(0usize..2),
        // Both sample types: the store builds the second's blocks from the first's.
        sample_type in prop::sample::select(vec!["cpu", "samples"]),
        // Symbol generations at every doubling of a service's symbols, with a seal after
        // every profile, or at the default threshold (never here).
        generations in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StoreConfig::new(dir.path());
        cfg.sync = false;
        cfg.segment_max_bytes = 2048; // many segments, so snapshots and rotation are exercised
        if generations {
            cfg.symbol_generation_bytes = 1;
            cfg.symbol_use_period = std::time::Duration::ZERO;
        }
        let converted: Vec<(ProfilesData, usize, i64)> = inputs
            .iter()
            .map(|(p, s, m)| (pprof_to_otlp(p, service(&format!("svc{s}")), Some(LinkConfig::default())).unwrap().0, *s, *m))
            .collect();
        // Ingest in two sessions with a reopen between, so deltas written after a restart
        // (symbol and series ids continuing from the replayed state) are exercised.
        let half = converted.len() / 2;
        for part in [&converted[..half], &converted[half..]] {
            let (store, report) = Store::open(cfg.clone()).unwrap();
            prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
            // A record with nothing but ids continuing from the replayed state (like a
            // spans-only write after a restart).
            store.ingest(&[], Vec::new()).unwrap();
            for (d, _, _) in part {
                let r = store.ingest(&[d], Vec::new()).unwrap();
                prop_assert_eq!(r.rejected_profiles, 0, "{:?}", r.problems);
                if generations {
                    // A seal after each: where a generation may start.
                    store.rotate().unwrap();
                }
            }
        }
        let (from_ns, to_ns) = range.map_or((0, 0), |(a, len)| {
            let base = 1_700_000_000_000_000_000i64;
            (base + a * 60_000_000_000, base + (a + len) * 60_000_000_000)
        });
        let region = region.map(|r| ["eu", "us"][r]);
        let sel = Selection {
            service: svc.map(|s| format!("svc{s}")),
            profile_type: Some(sample_type.into()),
            from_ns,
            to_ns,
            label_selector: region.map(|r| format!("{{region=\"{r}\"}}")),
            span_ids: spans.iter().map(|&i| hex8(SPANS[i])).collect(),
            trace_id: trace.map(|t| spanprof_format::link::parse_id::<16>(TRACES[t]).unwrap()),
            ..Default::default()
        };
        // Reopened from disk, not the store that ingested.
        let (store, report) = Store::open(cfg).unwrap();
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        let (tree, _) = store.flame_graph(&sel).unwrap();
        prop_assert_eq!(tree.to_collapsed(), naive(&converted, &sel, region, sample_type));
    }
}
