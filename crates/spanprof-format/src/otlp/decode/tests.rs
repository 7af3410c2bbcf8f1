//! The decoder against prost's derived one: the same message from valid bytes, and the same
//! answer (message or refusal) from damaged ones.

use super::decode_profiles_data;
use crate::otlp::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, KeyValueAndUnit,
    KeyValueList, Line, Link, Location, Mapping, Profile, ProfilesData, ProfilesDictionary,
    Resource, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use opentelemetry_proto::tonic::common::v1::EntityRef;
use proptest::prelude::*;
use prost::Message;

fn kv_leaf() -> impl Strategy<Value = AnyValue> {
    use any_value::Value as V;
    prop::option::of(prop_oneof![
        ".{0,6}".prop_map(V::StringValue),
        any::<bool>().prop_map(V::BoolValue),
        any::<i64>().prop_map(V::IntValue),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |d| !d.is_nan())
            .prop_map(V::DoubleValue),
        prop::collection::vec(any::<u8>(), 0..6).prop_map(V::BytesValue),
        any::<i32>().prop_map(V::StringValueStrindex),
    ])
    .prop_map(|value| AnyValue { value })
}

fn arb_any() -> impl Strategy<Value = AnyValue> {
    use any_value::Value as V;
    kv_leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|values| AnyValue {
                value: Some(V::ArrayValue(ArrayValue { values }))
            }),
            prop::collection::vec((".{0,4}", prop::option::of(inner), any::<i32>()), 0..3)
                .prop_map(|kvs| AnyValue {
                    value: Some(V::KvlistValue(KeyValueList {
                        values: kvs
                            .into_iter()
                            .map(|(key, value, key_strindex)| KeyValue {
                                key,
                                value,
                                key_strindex,
                            })
                            .collect(),
                    })),
                }),
        ]
    })
}

fn arb_kv() -> impl Strategy<Value = KeyValue> {
    (".{0,6}", prop::option::of(arb_any()), any::<i32>()).prop_map(|(key, value, key_strindex)| {
        KeyValue {
            key,
            value,
            key_strindex,
        }
    })
}

fn arb_value_type() -> impl Strategy<Value = ValueType> {
    // Often 0 (not encoded), so that a merge shows which fields came from where.
    let index = || prop_oneof![Just(0), any::<i32>()];
    (index(), index()).prop_map(|(t, u)| ValueType {
        type_strindex: t,
        unit_strindex: u,
    })
}

fn arb_ids() -> impl Strategy<Value = Vec<i32>> {
    prop::collection::vec(any::<i32>(), 0..5)
}

fn arb_profile() -> impl Strategy<Value = Profile> {
    let sample = (
        any::<[i32; 2]>(),
        arb_ids(),
        prop::collection::vec(any::<i64>(), 0..3),
        prop::collection::vec(any::<u64>(), 0..3),
    )
        .prop_map(
            |([stack_index, link_index], attribute_indices, values, timestamps_unix_nano)| Sample {
                stack_index,
                attribute_indices,
                link_index,
                values,
                timestamps_unix_nano,
            },
        );
    (
        prop::option::of(arb_value_type()),
        prop::collection::vec(sample, 0..5),
        any::<[u64; 2]>(),
        prop::option::of(arb_value_type()),
        (any::<i64>(), any::<u32>()),
        prop::collection::vec(any::<u8>(), 0..17),
        (
            ".{0,6}",
            prop::collection::vec(any::<u8>(), 0..8),
            arb_ids(),
        ),
    )
        .prop_map(
            |(
                sample_type,
                samples,
                [time_unix_nano, duration_nano],
                period_type,
                (period, dropped_attributes_count),
                profile_id,
                (original_payload_format, original_payload, attribute_indices),
            )| Profile {
                sample_type,
                samples,
                time_unix_nano,
                duration_nano,
                period_type,
                period,
                profile_id,
                dropped_attributes_count,
                original_payload_format,
                original_payload,
                attribute_indices,
            },
        )
}

fn arb_dictionary() -> impl Strategy<Value = ProfilesDictionary> {
    let mapping = (any::<[u64; 3]>(), any::<i32>(), arb_ids()).prop_map(
        |([memory_start, memory_limit, file_offset], filename_strindex, attribute_indices)| {
            Mapping {
                memory_start,
                memory_limit,
                file_offset,
                filename_strindex,
                attribute_indices,
            }
        },
    );
    let line =
        (any::<i32>(), any::<[i64; 2]>()).prop_map(|(function_index, [line, column])| Line {
            function_index,
            line,
            column,
        });
    let location = (
        any::<i32>(),
        any::<u64>(),
        prop::collection::vec(line, 0..3),
        arb_ids(),
    )
        .prop_map(
            |(mapping_index, address, lines, attribute_indices)| Location {
                mapping_index,
                address,
                lines,
                attribute_indices,
            },
        );
    let function = (any::<[i32; 3]>(), any::<i64>()).prop_map(|(s, start_line)| Function {
        name_strindex: s[0],
        system_name_strindex: s[1],
        filename_strindex: s[2],
        start_line,
    });
    let link = (
        prop::collection::vec(any::<u8>(), 0..17),
        prop::collection::vec(any::<u8>(), 0..9),
    )
        .prop_map(|(trace_id, span_id)| Link { trace_id, span_id });
    let attribute = (any::<i32>(), prop::option::of(arb_any()), any::<i32>()).prop_map(
        |(key_strindex, value, unit_strindex)| KeyValueAndUnit {
            key_strindex,
            value,
            unit_strindex,
        },
    );
    (
        prop::collection::vec(mapping, 0..3),
        prop::collection::vec(location, 0..4),
        prop::collection::vec(function, 0..4),
        prop::collection::vec(link, 0..3),
        prop::collection::vec(".{0,8}", 0..6),
        prop::collection::vec(attribute, 0..3),
        prop::collection::vec(
            arb_ids().prop_map(|location_indices| Stack { location_indices }),
            0..4,
        ),
    )
        .prop_map(
            |(
                mapping_table,
                location_table,
                function_table,
                link_table,
                string_table,
                attribute_table,
                stack_table,
            )| ProfilesDictionary {
                mapping_table,
                location_table,
                function_table,
                link_table,
                string_table,
                attribute_table,
                stack_table,
            },
        )
}

fn arb_data() -> impl Strategy<Value = ProfilesData> {
    let entity = (
        ".{0,4}",
        ".{0,4}",
        prop::collection::vec(".{0,4}", 0..2),
        prop::collection::vec(".{0,4}", 0..2),
    )
        .prop_map(
            |(schema_url, r#type, id_keys, description_keys)| EntityRef {
                schema_url,
                r#type,
                id_keys,
                description_keys,
            },
        );
    let resource = (
        prop::collection::vec(arb_kv(), 0..3),
        any::<u32>(),
        prop::collection::vec(entity, 0..2),
    )
        .prop_map(
            |(attributes, dropped_attributes_count, entity_refs)| Resource {
                attributes,
                dropped_attributes_count,
                entity_refs,
            },
        );
    let scope = (
        ".{0,4}",
        ".{0,4}",
        prop::collection::vec(arb_kv(), 0..2),
        any::<u32>(),
    )
        .prop_map(|(name, version, attributes, dropped_attributes_count)| {
            InstrumentationScope {
                name,
                version,
                attributes,
                dropped_attributes_count,
            }
        });
    let scope_profiles = (
        prop::option::of(scope),
        prop::collection::vec(arb_profile(), 0..3),
        ".{0,4}",
    )
        .prop_map(|(scope, profiles, schema_url)| ScopeProfiles {
            scope,
            profiles,
            schema_url,
        });
    let resource_profiles = (
        prop::option::of(resource),
        prop::collection::vec(scope_profiles, 0..3),
        ".{0,4}",
    )
        .prop_map(|(resource, scope_profiles, schema_url)| ResourceProfiles {
            resource,
            scope_profiles,
            schema_url,
        });
    (
        prop::collection::vec(resource_profiles, 0..3),
        prop::option::of(arb_dictionary()),
    )
        .prop_map(|(resource_profiles, dictionary)| ProfilesData {
            resource_profiles,
            dictionary,
        })
}

/// Both decoders on `bytes`: the same message, or both refuse.
fn agree(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    match (ProfilesData::decode(bytes), decode_profiles_data(bytes)) {
        (Ok(expected), Ok(ours)) => prop_assert_eq!(ours, expected),
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => prop_assert!(false, "prost accepts, this decoder refuses: {}", e.0),
        (Err(e), Ok(_)) => prop_assert!(false, "prost refuses ({e}), this decoder accepts"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_prost_on_valid_messages(d in arb_data()) {
        let bytes = d.encode_to_vec();
        prop_assert_eq!(decode_profiles_data(&bytes).unwrap(), d);
    }

    #[test]
    fn agrees_with_prost_on_damaged_bytes(
        d in arb_data(),
        pos in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = d.encode_to_vec();
        if !bytes.is_empty() {
            let i = pos.index(bytes.len());
            bytes[i] = byte;
            bytes.truncate(cut.index(bytes.len()) + 1);
        }
        agree(&bytes)?;
    }

    /// Concatenated messages are one merged message: a repeated singular field merges into
    /// the first, a scalar takes the last value, a oneof the last variant (an array given
    /// twice merges). At the top, in a profile and in an attribute value.
    #[test]
    fn merges_concatenated_messages_as_prost_does(
        a in arb_data(),
        b in arb_data(),
        p in (arb_profile(), arb_profile()),
        v in (arb_any(), arb_any()),
    ) {
        let mut top = a.encode_to_vec();
        top.extend(b.encode_to_vec());
        agree(&top)?;
        let mut profile = p.0.encode_to_vec();
        profile.extend(p.1.encode_to_vec());
        agree(&len_field(1, &len_field(2, &len_field(2, &profile))))?;
        let mut value = v.0.encode_to_vec();
        value.extend(v.1.encode_to_vec());
        let resource = len_field(1, &len_field(1, &len_field(2, &value)));
        agree(&len_field(1, &resource))?;
    }

    #[test]
    fn agrees_with_prost_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        agree(&bytes)?;
    }
}

/// `field` as a length-delimited field holding `payload`.
fn len_field(field: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

#[test]
fn repeated_singular_messages_merge_and_unpacked_scalars_are_accepted() {
    let first = ProfilesData {
        dictionary: Some(ProfilesDictionary {
            string_table: vec![String::new(), "a".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let second = ProfilesData {
        dictionary: Some(ProfilesDictionary {
            string_table: vec!["b".into()],
            stack_table: vec![Stack {
                location_indices: vec![1, 2],
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut bytes = first.encode_to_vec();
    bytes.extend(second.encode_to_vec());
    // A stack whose location indices come one per key (unpacked): 7, then 8.
    let mut unpacked = Vec::new();
    for v in [7u64, 8] {
        prost::encoding::encode_key(1, prost::encoding::WireType::Varint, &mut unpacked);
        prost::encoding::encode_varint(v, &mut unpacked);
    }
    bytes.extend(len_field(2, &len_field(7, &unpacked)));
    let d = decode_profiles_data(&bytes).unwrap();
    let dict = d.dictionary.as_ref().unwrap();
    assert_eq!(dict.string_table, ["", "a", "b"]);
    assert_eq!(dict.stack_table[0].location_indices, [1, 2]);
    assert_eq!(dict.stack_table[1].location_indices, [7, 8]);
    assert_eq!(ProfilesData::decode(bytes.as_slice()).unwrap(), d);
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    // An attribute value that is an array holding an array holding … 100,000 deep.
    let mut value = Vec::new();
    for _ in 0..100_000 {
        value = len_field(5, &len_field(1, &value));
    }
    let dict = len_field(6, &len_field(2, &value));
    let bytes = len_field(2, &dict);
    let e = decode_profiles_data(&bytes).unwrap_err();
    assert!(e.0.contains("nested more than 100 deep"), "{}", e.0);
    // Where, said once with the count rather than a hundred times.
    assert!(
        e.0.contains("(array_value.values[0]) x") && e.0.len() < 300,
        "{}",
        e.0
    );
    assert!(ProfilesData::decode(bytes.as_slice()).is_err());
    // Unknown groups nested as deep: the same refusal.
    let mut groups = Vec::new();
    for _ in 0..100_000 {
        groups.push((15 << 3) | 3);
    }
    let e = decode_profiles_data(&groups).unwrap_err();
    assert!(e.0.contains("nested more than 100 deep"), "{}", e.0);
}

#[test]
fn errors_name_the_field_path() {
    // dictionary.stack_table[1] holds field 1 as a fixed32.
    let good_stack = len_field(7, &[]);
    let bad_stack = len_field(7, &[(1 << 3) | 5, 0, 0, 0, 0]);
    let mut dict = good_stack;
    dict.extend(bad_stack);
    assert_eq!(
        decode_profiles_data(&len_field(2, &dict)).unwrap_err().0,
        "dictionary.stack_table[1]: Stack field 1 has wire type 5, which does not fit its type"
    );
    // resource_profiles[0].scope_profiles[0].profiles[0].samples[0] is cut short.
    let sample = len_field(2, &[0x08]);
    let nested = len_field(1, &len_field(2, &len_field(2, &sample)));
    assert_eq!(
        decode_profiles_data(&nested).unwrap_err().0,
        "resource_profiles[0].scope_profiles[0].profiles[0].samples[0]: truncated varint"
    );
    assert_eq!(
        decode_profiles_data(&len_field(2, &len_field(5, &[0xff])))
            .unwrap_err()
            .0,
        "dictionary.string_table[0]: ProfilesDictionary field 5 is not UTF-8"
    );
}
