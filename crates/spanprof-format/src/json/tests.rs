//! Example-based tests of the OTLP JSON encoder: exact output, and exact round trips.

use opentelemetry_proto::tonic::common::v1::EntityRef;

use super::{decode_profiles_data, encode_profiles_data, encode_profiles_data_pretty};
use crate::otlp::any_value::Value;
use crate::otlp::*;

pub(super) fn any(value: Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

pub(super) fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: any(value),
        key_strindex: 0,
    }
}

pub(super) fn decode_str(json: &str) -> ProfilesData {
    decode_profiles_data(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}"))
}

pub(super) fn decode_err(json: &str) -> String {
    match decode_profiles_data(json.as_bytes()) {
        Ok(data) => panic!("decoded {data:?} from {json}"),
        Err(e) => e.to_string(),
    }
}

/// A message in which every field of every message type is set to a non-default value.
fn every_field() -> ProfilesData {
    let nested = Value::KvlistValue(KeyValueList {
        values: vec![
            kv("bytes", Value::BytesValue(vec![0, 1, 2, 0xfe, 0xff])),
            kv(
                "array",
                Value::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue { value: None },
                        any(Value::IntValue(0)).unwrap(),
                        any(Value::StringValue(String::new())).unwrap(),
                        any(Value::DoubleValue(f64::NEG_INFINITY)).unwrap(),
                    ],
                }),
            ),
            KeyValue {
                key: String::new(),
                value: None,
                key_strindex: 4,
            },
        ],
    });
    let profile = Profile {
        sample_type: Some(ValueType {
            type_strindex: 1,
            unit_strindex: 2,
        }),
        samples: vec![
            Sample::default(),
            Sample {
                stack_index: 1,
                attribute_indices: vec![1, 2],
                link_index: 1,
                values: vec![i64::MIN, -1, 0, i64::MAX],
                timestamps_unix_nano: vec![0, 1, 1_700_000_000_123_456_789, u64::MAX],
            },
        ],
        time_unix_nano: u64::MAX,
        duration_nano: 10_000_000_000,
        period_type: Some(ValueType::default()),
        period: -10_000_000,
        profile_id: (1..=16).collect(),
        dropped_attributes_count: u32::MAX,
        original_payload_format: "pprof".into(),
        original_payload: b"\x1f\x8b binary\0payload".to_vec(),
        attribute_indices: vec![i32::MAX, i32::MIN],
    };
    ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    kv(
                        "service.name",
                        Value::StringValue("checkout \"é\" 😀\n\t\u{1}".into()),
                    ),
                    kv("flag", Value::BoolValue(true)),
                    kv("off", Value::BoolValue(false)),
                    kv("count", Value::IntValue(-42)),
                    kv("ratio", Value::DoubleValue(0.1)),
                    kv("tiny", Value::DoubleValue(5e-324)),
                    kv("huge", Value::DoubleValue(-1.7976931348623157e308)),
                    kv("nested", nested),
                    KeyValue {
                        key: String::new(),
                        value: any(Value::StringValueStrindex(3)),
                        key_strindex: 5,
                    },
                ],
                dropped_attributes_count: 7,
                entity_refs: vec![EntityRef {
                    schema_url: "https://opentelemetry.io/schemas/1.40.0".into(),
                    r#type: "service".into(),
                    id_keys: vec!["service.name".into(), String::new()],
                    description_keys: vec!["service.version".into()],
                }],
            }),
            scope_profiles: vec![
                ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "spanprof".into(),
                        version: "0.1.0".into(),
                        attributes: vec![kv("pprof.scope.default_sample_type", Value::IntValue(1))],
                        dropped_attributes_count: 3,
                    }),
                    profiles: vec![profile, Profile::default()],
                    schema_url: "https://scope.example/schema".into(),
                },
                ScopeProfiles::default(),
            ],
            schema_url: "https://resource.example/schema".into(),
        }],
        dictionary: Some(ProfilesDictionary {
            mapping_table: vec![
                Mapping::default(),
                Mapping {
                    memory_start: 0x40_0000,
                    memory_limit: u64::MAX,
                    file_offset: 0x1000,
                    filename_strindex: 6,
                    attribute_indices: vec![1],
                },
            ],
            location_table: vec![
                Location::default(),
                Location {
                    mapping_index: 1,
                    address: 0x40_1234,
                    lines: vec![
                        Line {
                            function_index: 1,
                            line: 42,
                            column: 7,
                        },
                        Line::default(),
                    ],
                    attribute_indices: vec![2],
                },
            ],
            function_table: vec![
                Function::default(),
                Function {
                    name_strindex: 3,
                    system_name_strindex: 4,
                    filename_strindex: 6,
                    start_line: -1,
                },
            ],
            link_table: vec![
                Link::default(),
                Link {
                    trace_id: vec![0xab; 16],
                    span_id: vec![0xcd; 8],
                },
                Link {
                    trace_id: vec![0; 16],
                    span_id: vec![0; 8],
                },
            ],
            string_table: [
                "",
                "cpu",
                "nanoseconds",
                "main",
                "main.main",
                "key",
                "/bin/app",
            ]
            .map(String::from)
            .to_vec(),
            attribute_table: vec![
                KeyValueAndUnit::default(),
                KeyValueAndUnit {
                    key_strindex: 5,
                    value: any(Value::IntValue(4096)),
                    unit_strindex: 2,
                },
                KeyValueAndUnit {
                    key_strindex: 5,
                    value: Some(AnyValue { value: None }),
                    unit_strindex: 0,
                },
            ],
            stack_table: vec![
                Stack::default(),
                Stack {
                    location_indices: vec![1, 1, 0],
                },
            ],
        }),
    }
}

#[test]
fn json_round_trips_every_field() {
    let data = every_field();
    let compact = encode_profiles_data(&data);
    assert_eq!(decode_str(&compact), data);
    let pretty = encode_profiles_data_pretty(&data);
    assert_eq!(decode_str(&pretty), data);
    assert!(!compact.contains('\n') && !compact.contains(": "));
    assert!(pretty.contains("\n  \"resourceProfiles\": [\n    {\n"));
    // The output is plain JSON that an independent parser reads.
    let parsed: serde_json::Value = serde_json::from_str(&compact).unwrap();
    let sample = &parsed["resourceProfiles"][0]["scopeProfiles"][0]["profiles"][0]["samples"][1];
    assert_eq!(sample["values"][0], "-9223372036854775808");
    assert_eq!(sample["timestampsUnixNano"][3], "18446744073709551615");
}

#[test]
fn json_round_trips_the_empty_message_and_special_doubles() {
    assert_eq!(encode_profiles_data(&ProfilesData::default()), "{}");
    assert_eq!(encode_profiles_data_pretty(&ProfilesData::default()), "{}");
    assert_eq!(decode_str("{}"), ProfilesData::default());
    for (v, text) in [
        (f64::NAN, "\"NaN\""),
        (f64::INFINITY, "\"Infinity\""),
        (f64::NEG_INFINITY, "\"-Infinity\""),
        (-0.0, "-0"),
        (1.0, "1"),
        (0.1, "0.1"),
        (1e21, "1e21"),
        (1.5e-7, "1.5e-7"),
        (123456.75, "123456.75"),
    ] {
        let data = ProfilesData {
            dictionary: Some(ProfilesDictionary {
                attribute_table: vec![KeyValueAndUnit {
                    value: any(Value::DoubleValue(v)),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = encode_profiles_data(&data);
        let expected = format!(
            r#"{{"dictionary":{{"attributeTable":[{{"value":{{"doubleValue":{text}}}}}]}}}}"#
        );
        assert_eq!(json, expected);
        let back = decode_str(&json).dictionary.unwrap().attribute_table[0].clone();
        let Some(Value::DoubleValue(got)) = back.value.unwrap().value else {
            panic!("not a double")
        };
        assert_eq!(got.to_bits(), v.to_bits(), "{text}");
    }
}

/// A tiny message: what the OTLP JSON rules look like on the wire.
fn tiny() -> ProfilesData {
    ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue("api".into()))],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    sample_type: Some(ValueType {
                        type_strindex: 1,
                        unit_strindex: 2,
                    }),
                    samples: vec![Sample {
                        stack_index: 1,
                        link_index: 1,
                        values: vec![10_000_000],
                        ..Default::default()
                    }],
                    time_unix_nano: 1_700_000_000_000_000_000,
                    profile_id: vec![0xaa; 16],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: vec![
                Location::default(),
                Location {
                    address: 4096,
                    ..Default::default()
                },
            ],
            link_table: vec![
                Link::default(),
                Link {
                    trace_id: (0..16).collect(),
                    span_id: vec![0xff; 8],
                },
            ],
            string_table: ["", "cpu", "nanoseconds"].map(String::from).to_vec(),
            stack_table: vec![
                Stack::default(),
                Stack {
                    location_indices: vec![1],
                },
            ],
            ..Default::default()
        }),
    }
}

#[test]
fn json_golden_tiny_message() {
    let expected = concat!(
        r#"{"resourceProfiles":[{"resource":{"attributes":[{"key":"service.name","#,
        r#""value":{"stringValue":"api"}}]},"scopeProfiles":[{"profiles":[{"#,
        r#""sampleType":{"typeStrindex":1,"unitStrindex":2},"#,
        r#""samples":[{"stackIndex":1,"linkIndex":1,"values":["10000000"]}],"#,
        r#""timeUnixNano":"1700000000000000000","#,
        r#""profileId":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]}]}],"#,
        r#""dictionary":{"mappingTable":[{}],"locationTable":[{},{"address":"4096"}],"#,
        r#""linkTable":[{},{"traceId":"000102030405060708090a0b0c0d0e0f","#,
        r#""spanId":"ffffffffffffffff"}],"stringTable":["","cpu","nanoseconds"],"#,
        r#""stackTable":[{},{"locationIndices":[1]}]}}"#,
    );
    assert_eq!(encode_profiles_data(&tiny()), expected);
}

#[test]
fn json_golden_pretty_layout() {
    let data = ProfilesData {
        dictionary: Some(ProfilesDictionary {
            string_table: ["", "cpu"].map(String::from).to_vec(),
            stack_table: vec![Stack::default()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let expected = "{\n  \"dictionary\": {\n    \"stringTable\": [\n      \"\",\n      \"cpu\"\n    ],\n    \"stackTable\": [\n      {}\n    ]\n  }\n}";
    assert_eq!(encode_profiles_data_pretty(&data), expected);
}
