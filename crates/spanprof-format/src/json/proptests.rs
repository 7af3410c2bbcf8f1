//! Property tests: random messages round-trip exactly, and no input makes the decoder panic.

use opentelemetry_proto::tonic::common::v1::EntityRef;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use prost::Message;

use super::{decode_profiles_data, encode_profiles_data, encode_profiles_data_pretty};
use crate::otlp::any_value::Value;
use crate::otlp::*;

/// Zero (the value proto3 JSON leaves out) a quarter of the time, anything otherwise.
pub(crate) fn num<T: Arbitrary + Default + Clone + std::fmt::Debug>() -> impl Strategy<Value = T> {
    prop_oneof![1 => Just(T::default()), 3 => any::<T>()]
}

fn ints<T: Arbitrary + Default + Clone + std::fmt::Debug>() -> impl Strategy<Value = Vec<T>> {
    vec(num::<T>(), 0..4)
}

/// Text with the characters that need escaping well represented.
pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        any::<String>(),
        "[\\x00-\\x1f\"\\\\/a-zé\u{2028}😀]{0,8}",
    ]
}

/// Doubles of every class; NaN only in its canonical form, the one "NaN" decodes to.
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_map(|v| if v.is_nan() { f64::NAN } else { v }),
        prop::sample::select(vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]),
    ]
}

/// An id of `len` bytes or the unset (empty) id.
pub(crate) fn id(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(Vec::new()), vec(any::<u8>(), len)]
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        Just(None),
        text().prop_map(|s| Some(Value::StringValue(s))),
        any::<bool>().prop_map(|b| Some(Value::BoolValue(b))),
        num::<i64>().prop_map(|v| Some(Value::IntValue(v))),
        double().prop_map(|v| Some(Value::DoubleValue(v))),
        vec(any::<u8>(), 0..10).prop_map(|b| Some(Value::BytesValue(b))),
        num::<i32>().prop_map(|i| Some(Value::StringValueStrindex(i))),
    ]
    .prop_map(|value| AnyValue { value });
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| Value::ArrayValue(ArrayValue { values })),
            vec(key_value(inner), 0..4)
                .prop_map(|values| Value::KvlistValue(KeyValueList { values })),
        ]
        .prop_map(|v| AnyValue { value: Some(v) })
    })
}

fn key_value(value: impl Strategy<Value = AnyValue>) -> impl Strategy<Value = KeyValue> {
    (text(), option::of(value), num::<i32>()).prop_map(|(key, value, key_strindex)| KeyValue {
        key,
        value,
        key_strindex,
    })
}

pub(crate) fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    vec(key_value(any_value()), 0..3)
}

fn value_type() -> impl Strategy<Value = ValueType> {
    (num(), num()).prop_map(|(type_strindex, unit_strindex)| ValueType {
        type_strindex,
        unit_strindex,
    })
}

fn sample() -> impl Strategy<Value = Sample> {
    (num(), ints(), num(), ints(), ints()).prop_map(|(stack_index, attrs, link_index, v, ts)| {
        Sample {
            stack_index,
            attribute_indices: attrs,
            link_index,
            values: v,
            timestamps_unix_nano: ts,
        }
    })
}

fn profile() -> impl Strategy<Value = Profile> {
    let head = (option::of(value_type()), vec(sample(), 0..5), num(), num());
    let tail = (
        option::of(value_type()),
        num(),
        id(16),
        num(),
        text(),
        vec(any::<u8>(), 0..9),
    );
    (head, tail, ints()).prop_map(|((sample_type, samples, time, duration), tail, attrs)| {
        let (period_type, period, profile_id, dropped, format, payload) = tail;
        Profile {
            sample_type,
            samples,
            time_unix_nano: time,
            duration_nano: duration,
            period_type,
            period,
            profile_id,
            dropped_attributes_count: dropped,
            original_payload_format: format,
            original_payload: payload,
            attribute_indices: attrs,
        }
    })
}

pub(crate) fn resource() -> impl Strategy<Value = Resource> {
    let entity = (text(), text(), vec(text(), 0..3), vec(text(), 0..3)).prop_map(
        |(schema_url, r#type, id_keys, description_keys)| EntityRef {
            schema_url,
            r#type,
            id_keys,
            description_keys,
        },
    );
    (attributes(), num(), vec(entity, 0..2)).prop_map(|(attributes, dropped, entity_refs)| {
        Resource {
            attributes,
            dropped_attributes_count: dropped,
            entity_refs,
        }
    })
}

fn resource_profiles() -> impl Strategy<Value = ResourceProfiles> {
    let scope = (text(), text(), attributes(), num()).prop_map(|(name, version, attrs, n)| {
        InstrumentationScope {
            name,
            version,
            attributes: attrs,
            dropped_attributes_count: n,
        }
    });
    let scope_profiles = (option::of(scope), vec(profile(), 0..3), text()).prop_map(
        |(scope, profiles, schema_url)| ScopeProfiles {
            scope,
            profiles,
            schema_url,
        },
    );
    (option::of(resource()), vec(scope_profiles, 0..3), text()).prop_map(
        |(resource, scope_profiles, schema_url)| ResourceProfiles {
            resource,
            scope_profiles,
            schema_url,
        },
    )
}

fn dictionary() -> impl Strategy<Value = ProfilesDictionary> {
    let mapping =
        (num(), num(), num(), num(), ints()).prop_map(|(start, limit, off, f, a)| Mapping {
            memory_start: start,
            memory_limit: limit,
            file_offset: off,
            filename_strindex: f,
            attribute_indices: a,
        });
    let line = (num(), num(), num()).prop_map(|(function_index, line, column)| Line {
        function_index,
        line,
        column,
    });
    let location =
        (num(), num(), vec(line, 0..3), ints()).prop_map(|(m, address, lines, a)| Location {
            mapping_index: m,
            address,
            lines,
            attribute_indices: a,
        });
    let function = (num(), num(), num(), num()).prop_map(|(name, system, file, start)| Function {
        name_strindex: name,
        system_name_strindex: system,
        filename_strindex: file,
        start_line: start,
    });
    let link = (id(16), id(8)).prop_map(|(trace_id, span_id)| Link { trace_id, span_id });
    let attribute =
        (num(), option::of(any_value()), num()).prop_map(|(key, value, unit)| KeyValueAndUnit {
            key_strindex: key,
            value,
            unit_strindex: unit,
        });
    let stack = ints().prop_map(|location_indices| Stack { location_indices });
    let tables = (vec(mapping, 0..3), vec(location, 0..4), vec(function, 0..3));
    let more = (
        vec(link, 0..3),
        vec(text(), 0..5),
        vec(attribute, 0..3),
        vec(stack, 0..3),
    );
    (tables, more).prop_map(|((maps, locs, funcs), (links, strings, attrs, stacks))| {
        ProfilesDictionary {
            mapping_table: maps,
            location_table: locs,
            function_table: funcs,
            link_table: links,
            string_table: strings,
            attribute_table: attrs,
            stack_table: stacks,
        }
    })
}

fn profiles_data() -> impl Strategy<Value = ProfilesData> {
    (vec(resource_profiles(), 0..3), option::of(dictionary())).prop_map(
        |(resource_profiles, dictionary)| ProfilesData {
            resource_profiles,
            dictionary,
        },
    )
}

/// Any JSON value, object keys drawn from field names the decoder knows.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value as Json;
    const KEYS: &[&str] = &[
        "values",
        "traceId",
        "profileId",
        "stringValue",
        "intValue",
        "doubleValue",
        "arrayValue",
        "kvlistValue",
        "key",
        "value",
        "lines",
        "unknown",
    ];
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        any::<f64>().prop_filter_map("finite", |v| serde_json::Number::from_f64(v)
            .map(Json::Number)),
        text().prop_map(Json::String),
        "[0-9a-fA-F]{0,33}|[A-Za-z0-9+/=_-]{0,12}|-?[0-9]{1,25}(\\.[0-9]+)?([eE]-?[0-9]{1,3})?"
            .prop_map(Json::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Json::Array),
            vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|members| {
                Json::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
            }),
        ]
    })
}

/// JSON pointers to every value in `doc`, the root included.
fn pointers(doc: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match doc {
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Object(members) => {
            for (key, member) in members {
                pointers(member, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// One edit to a JSON text: where, what kind, and the byte involved.
pub(crate) fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, u8)>> {
    let byte = prop_oneof![
        prop::sample::select(b"{}[]\":,-.eE0\\tnu \x00\xff".to_vec()),
        any::<u8>()
    ];
    vec((any::<prop::sample::Index>(), 0..4u8, byte), 1..4)
}

/// Asserts that `data` survives encoding exactly (doubles to the bit, hence bytes compared).
fn assert_round_trips(data: &ProfilesData) -> Result<(), TestCaseError> {
    let expected = data.encode_to_vec();
    for json in [
        encode_profiles_data(data),
        encode_profiles_data_pretty(data),
    ] {
        let back = decode_profiles_data(json.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("{e} in {json}")))?;
        prop_assert!(
            back.encode_to_vec() == expected,
            "{back:?}\n!=\n{data:?}\nvia {json}"
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn json_random_messages_round_trip(data in profiles_data()) {
        assert_round_trips(&data)?;
    }

    #[test]
    fn json_decoder_survives_arbitrary_bytes(bytes in vec(any::<u8>(), 0..256)) {
        let _ = decode_profiles_data(&bytes);
    }

    #[test]
    fn json_decoder_survives_edited_documents(data in profiles_data(), edits in edits()) {
        let mut bytes = encode_profiles_data(&data).into_bytes();
        for (at, kind, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.truncate(i),
                1 if i < bytes.len() => bytes[i] = byte,
                2 => bytes.insert(i, byte),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        let _ = decode_profiles_data(&bytes);
    }

    #[test]
    fn json_documents_with_a_value_replaced_decode_or_fail_cleanly(
        data in profiles_data(),
        at in any::<prop::sample::Index>(),
        replacement in json_value(),
    ) {
        // Swapping one value of a valid document puts every type error at every path in reach.
        let mut doc: serde_json::Value = serde_json::from_str(&encode_profiles_data(&data)).unwrap();
        let mut all = Vec::new();
        pointers(&doc, String::new(), &mut all);
        if let Some(slot) = doc.pointer_mut(&all[at.index(all.len())]) {
            *slot = replacement;
        }
        let bytes = serde_json::to_vec(&doc).unwrap();
        if let Ok(decoded) = decode_profiles_data(&bytes) {
            assert_round_trips(&decoded)?;
        }
    }
}
