//! Hostile input never panics a decoder: it is an error naming the problem.

use proptest::prelude::*;
use prost::Message;
use spanprof_format::detect::decode_input;
use spanprof_format::gzip::{gunzip, gzip};
use spanprof_format::merge::merge;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::to_pprof::{otlp_to_merged_pprof, otlp_to_pprof, PprofOptions};
use spanprof_format::{pprof, FormatError, LinkConfig};

#[test]
fn gzip_bomb_stops_at_the_limit() {
    let zeros = vec![0u8; 8 << 20];
    let bomb = gzip(&zeros);
    assert!(
        bomb.len() < 64 << 10,
        "8 MiB of zeros compress to {} bytes",
        bomb.len()
    );
    let err = decode_input(&bomb, 1 << 20).unwrap_err();
    assert!(
        matches!(err, FormatError::TooLarge { limit } if limit == 1 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("1048576 bytes"), "{err}");
    assert_eq!(gunzip(&bomb, 8 << 20).unwrap().len(), 8 << 20);
}

/// A pprof without sample types (`32 00`: one empty string) makes OTLP without profiles, and
/// that converts back to an empty pprof (it panicked: a scope without profiles made one
/// empty group of sample types).
#[test]
fn a_pprof_without_sample_types_converts_both_ways() {
    let p = pprof::decode(b"\x32\x00", 1 << 20).unwrap();
    let (data, report) = pprof_to_otlp(&p, Default::default(), None).unwrap();
    assert_eq!(report.profiles, 0);
    assert!(otlp_to_pprof(&data, &PprofOptions::default())
        .unwrap()
        .is_empty());
    let merged = otlp_to_merged_pprof(&data, &PprofOptions::default()).unwrap();
    assert!(merged.sample.is_empty() && merged.sample_type.is_empty());
}

/// Identical samples are merged; values that add up past i64::MAX stop at it both ways (they
/// wrapped to a negative value, which every answer drops).
#[test]
fn merged_values_stop_at_the_largest() {
    let p = pprof::Profile {
        sample_type: vec![pprof::ValueType { r#type: 1, unit: 2 }],
        sample: vec![
            pprof::Sample {
                location_id: vec![1],
                value: vec![i64::MAX],
                ..Default::default()
            };
            2
        ],
        location: vec![pprof::Location {
            id: 1,
            line: vec![pprof::Line {
                function_id: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        function: vec![pprof::Function {
            id: 1,
            name: 3,
            ..Default::default()
        }],
        string_table: vec![
            String::new(),
            "cpu".into(),
            "nanoseconds".into(),
            "main".into(),
        ],
        ..Default::default()
    };
    let (data, _) = pprof_to_otlp(&p, Default::default(), None).unwrap();
    let values: Vec<i64> = data.resource_profiles[0].scope_profiles[0].profiles[0]
        .samples
        .iter()
        .flat_map(|s| s.values.clone())
        .collect();
    assert_eq!(values, [i64::MAX]);
    let mut twice = data.clone();
    let samples = &mut twice.resource_profiles[0].scope_profiles[0].profiles[0].samples;
    samples.push(samples[0].clone());
    let back = otlp_to_merged_pprof(&twice, &PprofOptions::default()).unwrap();
    assert_eq!(back.sample.len(), 1);
    assert_eq!(back.sample[0].value, [i64::MAX]);
}

#[test]
fn truncated_gzip_is_a_gzip_error() {
    let p = pprof::Profile {
        string_table: vec![String::new(), "x".into()],
        ..Default::default()
    };
    let bytes = pprof::encode_gzip(&p);
    let err = decode_input(&bytes[..bytes.len() - 6], 1 << 20).unwrap_err();
    assert!(matches!(err, FormatError::Gzip(_)), "{err}");
}

#[test]
fn out_of_range_pprof_indices_are_named() {
    let p = pprof::Profile {
        sample_type: vec![pprof::ValueType { r#type: 1, unit: 1 }],
        sample: vec![pprof::Sample {
            location_id: vec![7],
            value: vec![1],
            label: vec![],
        }],
        string_table: vec![String::new(), "cpu".into()],
        ..Default::default()
    };
    let err = pprof_to_otlp(&p, Default::default(), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "pprof sample[0].location_id[0]: location id 7 not found"
    );
    // An id given twice is named, not the id a sample then misses.
    let mut twice = p.clone();
    twice.location = vec![
        pprof::Location {
            id: 1,
            ..Default::default()
        },
        pprof::Location {
            id: 1,
            ..Default::default()
        },
    ];
    twice.sample[0].location_id = vec![2];
    let err = pprof_to_otlp(&twice, Default::default(), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "pprof location id 1 is given twice (location[0] and location[1])"
    );

    let p = pprof::Profile {
        sample_type: vec![pprof::ValueType { r#type: 1, unit: 9 }],
        string_table: vec![String::new(), "cpu".into()],
        ..Default::default()
    };
    let err = pprof_to_otlp(&p, Default::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sample_type[0]: string index 9 out of range (string_table has 2 entries)"),
        "{err}"
    );
}

#[test]
fn out_of_range_otlp_indices_are_named() {
    let mut data = ProfilesData {
        dictionary: Some(Default::default()),
        ..Default::default()
    };
    data.dictionary
        .as_mut()
        .unwrap()
        .string_table
        .push(String::new());
    data.resource_profiles
        .push(spanprof_format::otlp::ResourceProfiles {
            scope_profiles: vec![spanprof_format::otlp::ScopeProfiles {
                profiles: vec![spanprof_format::otlp::Profile {
                    samples: vec![spanprof_format::otlp::Sample {
                        stack_index: 0,
                        link_index: 9,
                        values: vec![1],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
    let err = merge([&data], None).unwrap_err().to_string();
    assert_eq!(err, "resource_profiles[0].scope_profiles[0].profiles[0].samples[0].link_index: 9 out of range (link_table has 0 entries)");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(input) = decode_input(&bytes, 1 << 20) {
            exercise(input);
        }
        let _ = decode_input(&gzip(&bytes), 1 << 20);
    }

    #[test]
    fn mutated_profiles_never_panic(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let mut bytes = sample_pprof().encode_to_vec();
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        bytes.truncate(cut.index(bytes.len()) + 1);
        if let Ok(input) = decode_input(&bytes, 1 << 20) {
            exercise(input);
        }
    }
}

/// Runs every conversion on a decoded input; errors are fine, panics are not.
fn exercise(input: spanprof_format::detect::Input) {
    let data = match input {
        spanprof_format::detect::Input::Pprof(p) => {
            match pprof_to_otlp(&p, Default::default(), Some(LinkConfig::default())) {
                Ok((d, _)) => d,
                Err(_) => return,
            }
        }
        spanprof_format::detect::Input::Otlp(d) => d,
        spanprof_format::detect::Input::Jfr(profiles, _) => {
            let mut batch = spanprof_format::Batch::new(Some(LinkConfig::default()));
            for p in &profiles {
                if batch.add_pprof(&p.profile, Default::default()).is_err() {
                    return;
                }
            }
            batch.finish().0
        }
    };
    let _ = spanprof_format::check::check(
        &data,
        &spanprof_format::check::CheckOptions {
            dupes: true,
            orphans: true,
            sample_shapes: true,
        },
    );
    let _ = merge([&data], Some(LinkConfig::default()));
    let _ = otlp_to_pprof(&data, &PprofOptions::default());
    let _ = otlp_to_merged_pprof(&data, &PprofOptions::default());
}

fn sample_pprof() -> pprof::Profile {
    let strings = [
        "",
        "samples",
        "count",
        "main.f",
        "/m.go",
        "span_id",
        "00f067aa0ba902b7",
        "trace_id",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    ];
    pprof::Profile {
        sample_type: vec![pprof::ValueType { r#type: 1, unit: 2 }],
        sample: vec![pprof::Sample {
            location_id: vec![1],
            value: vec![3],
            label: vec![
                pprof::Label {
                    key: 5,
                    str: 6,
                    ..Default::default()
                },
                pprof::Label {
                    key: 7,
                    str: 8,
                    ..Default::default()
                },
            ],
        }],
        mapping: vec![pprof::Mapping {
            id: 1,
            memory_start: 0x1000,
            memory_limit: 0x2000,
            filename: 4,
            ..Default::default()
        }],
        location: vec![pprof::Location {
            id: 1,
            mapping_id: 1,
            address: 0x1234,
            line: vec![pprof::Line {
                function_id: 1,
                line: 3,
                column: 0,
            }],
            is_folded: false,
        }],
        function: vec![pprof::Function {
            id: 1,
            name: 3,
            system_name: 3,
            filename: 4,
            start_line: 1,
        }],
        string_table: strings.iter().map(|s| s.to_string()).collect(),
        period: 1,
        ..Default::default()
    }
}
