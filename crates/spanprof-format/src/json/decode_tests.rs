//! Example-based tests of the OTLP JSON decoder: what it accepts besides the encoder's own
//! output, and the path and wording of every kind of error.

use super::tests::{any, decode_err, decode_str};
use super::{decode_profiles_data, encode_profiles_data, MAX_VALUE_DEPTH};
use crate::otlp::any_value::Value;
use crate::otlp::*;

#[test]
fn json_decoder_accepts_snake_case_numbers_and_uppercase_hex() {
    let json = r#"{
        "resource_profiles": [{
            "resource": {"dropped_attributes_count": "2", "entity_refs": [{"schema_url": "s", "id_keys": ["k"], "description_keys": ["d"]}]},
            "scope_profiles": [{
                "scope": {"name": "n", "dropped_attributes_count": 1},
                "schema_url": "u",
                "profiles": [{
                    "sample_type": {"type_strindex": "1", "unit_strindex": 2},
                    "samples": [{"stack_index": 1, "attribute_indices": [1, "2"], "link_index": 1,
                                 "values": [1, -2, 3.0, 4e0, "5", "-6", "7E1"],
                                 "timestamps_unix_nano": [1700000000000000000, "18446744073709551615"]}],
                    "time_unix_nano": 17, "duration_nano": 1e9, "period_type": {}, "period": -3,
                    "profile_id": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                    "original_payload_format": "pprof", "original_payload": "aGk",
                    "attribute_indices": [0]
                }]
            }],
            "schema_url": "r"
        }],
        "dictionary": {
            "mapping_table": [{"memory_start": 4096, "memory_limit": "8192", "file_offset": 0, "filename_strindex": 1, "attribute_indices": []}],
            "location_table": [{"mapping_index": 0, "address": 18446744073709551615, "lines": [{"function_index": 1, "line": 2, "column": "3"}], "attribute_indices": [1]}],
            "function_table": [{"name_strindex": 1, "system_name_strindex": 2, "filename_strindex": 3, "start_line": 4}],
            "link_table": [{"trace_id": "ABCDEFABCDEFABCDEFABCDEFABCDEFAB", "span_id": "0123456789ABCDEF"}],
            "string_table": ["", "a\u00e9\ud83d\ude00\/"],
            "attribute_table": [{"key_strindex": 1, "unit_strindex": 1, "value": {"string_value_strindex": 1}},
                                {"value": {"kvlist_value": {"values": [{"key_strindex": 1, "value": {"bytes_value": "-_8"}}]}}},
                                {"value": {"array_value": {"values": [{"double_value": "NaN"}, {"double_value": "2.5"}, {"int_value": 9}, {"bool_value": true}]}}}],
            "stack_table": [{"location_indices": [1, 2]}]
        }
    }"#;
    let data = decode_str(json);
    let rp = &data.resource_profiles[0];
    assert_eq!(rp.schema_url, "r");
    let resource = rp.resource.as_ref().unwrap();
    assert_eq!(resource.dropped_attributes_count, 2);
    assert_eq!(resource.entity_refs[0].description_keys, ["d"]);
    let sp = &rp.scope_profiles[0];
    assert_eq!(
        (
            sp.schema_url.as_str(),
            sp.scope.as_ref().unwrap().dropped_attributes_count
        ),
        ("u", 1)
    );
    let p = &sp.profiles[0];
    assert_eq!(
        p.sample_type,
        Some(ValueType {
            type_strindex: 1,
            unit_strindex: 2
        })
    );
    assert_eq!(p.period_type, Some(ValueType::default()));
    let s = &p.samples[0];
    assert_eq!(
        (s.stack_index, s.link_index, &s.attribute_indices[..]),
        (1, 1, &[1, 2][..])
    );
    assert_eq!(s.values, [1, -2, 3, 4, 5, -6, 70]);
    assert_eq!(
        s.timestamps_unix_nano,
        [1_700_000_000_000_000_000, u64::MAX]
    );
    assert_eq!(
        (p.time_unix_nano, p.duration_nano, p.period),
        (17, 1_000_000_000, -3)
    );
    assert_eq!(p.profile_id, [0xaa; 16]);
    assert_eq!(p.original_payload, b"hi");
    let d = data.dictionary.unwrap();
    assert_eq!(d.mapping_table[0].memory_limit, 8192);
    assert_eq!(d.location_table[0].address, u64::MAX);
    assert_eq!(
        d.location_table[0].lines[0],
        Line {
            function_index: 1,
            line: 2,
            column: 3
        }
    );
    assert_eq!(d.function_table[0].start_line, 4);
    assert_eq!(
        d.link_table[0].trace_id,
        [0xab, 0xcd, 0xef]
            .repeat(5)
            .into_iter()
            .chain([0xab])
            .collect::<Vec<_>>()
    );
    assert_eq!(
        d.link_table[0].span_id,
        [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
    );
    assert_eq!(d.string_table, ["", "aé😀/"]);
    assert_eq!(
        d.attribute_table[0].value,
        any(Value::StringValueStrindex(1))
    );
    let Some(Value::KvlistValue(list)) = d.attribute_table[1].value.clone().unwrap().value else {
        panic!("not a kvlist")
    };
    assert_eq!(list.values[0].key_strindex, 1);
    assert_eq!(
        list.values[0].value,
        any(Value::BytesValue(vec![0xfb, 0xff]))
    );
    let Some(Value::ArrayValue(array)) = d.attribute_table[2].value.clone().unwrap().value else {
        panic!("not an array")
    };
    assert!(matches!(array.values[0].value, Some(Value::DoubleValue(v)) if v.is_nan()));
    assert_eq!(
        array.values[1..],
        [
            any(Value::DoubleValue(2.5)).unwrap(),
            any(Value::IntValue(9)).unwrap(),
            any(Value::BoolValue(true)).unwrap()
        ]
    );
    assert_eq!(d.stack_table[0].location_indices, [1, 2]);
}

#[test]
fn json_decoder_ignores_unknown_fields_and_reads_null_as_default() {
    let json = r#" {"future": {"a": [1, {"b": null}, "x", true, false, -1.5e3]},
        "resourceProfiles": [{"resource": null, "scopeProfiles": null, "schemaUrl": null,
            "extra": [[[]]]}],
        "dictionary": {"stringTable": [""], "linkTable": null, "whatever": 1}} "#;
    let data = decode_str(json);
    assert_eq!(data.resource_profiles, [ResourceProfiles::default()]);
    assert_eq!(
        data.dictionary,
        Some(ProfilesDictionary {
            string_table: vec![String::new()],
            ..Default::default()
        })
    );
    // The last of repeated keys wins, as in other proto3 JSON readers.
    let data = decode_str(r#"{"dictionary":{"stringTable":["a"],"string_table":["", "b"]}}"#);
    assert_eq!(data.dictionary.unwrap().string_table, ["", "b"]);
}

const SAMPLE_PATH: &str = "resourceProfiles[0].scopeProfiles[0].profiles[2].samples[3]";

/// A document whose fourth sample of the third profile has the given members.
fn with_sample(sample: &str) -> String {
    format!(
        r#"{{"resourceProfiles":[{{"scopeProfiles":[{{"profiles":[{{}},{{}},{{"samples":[{{}},{{}},{{}},{sample}]}}]}}]}}]}}"#
    )
}

#[test]
fn json_errors_name_the_path() {
    let cases = [
        (with_sample(r#"{"values":[{}]}"#), format!("{SAMPLE_PATH}.values[0]: expected an integer, found an object")),
        (with_sample(r#"{"values":["1", "x"]}"#), format!("{SAMPLE_PATH}.values[1]: not an integer: \"x\"")),
        (with_sample(r#"{"values":[1.5]}"#), format!("{SAMPLE_PATH}.values[0]: not an integer: \"1.5\"")),
        (with_sample(r#"{"values":[9223372036854775808]}"#), format!("{SAMPLE_PATH}.values[0]: 9223372036854775808 is out of range for int64")),
        (with_sample(r#"{"values":[1e400]}"#), format!("{SAMPLE_PATH}.values[0]: \"1e400\" is out of range")),
        (with_sample(r#"{"values":7}"#), format!("{SAMPLE_PATH}.values: expected an array, found a number")),
        (with_sample(r#"{"values":[null]}"#), format!("{SAMPLE_PATH}.values[0]: expected an integer, found null")),
        (with_sample(r#"{"stackIndex":2147483648}"#), format!("{SAMPLE_PATH}.stackIndex: 2147483648 is out of range for int32")),
        (with_sample(r#"{"timestampsUnixNano":["-1"]}"#), format!("{SAMPLE_PATH}.timestampsUnixNano[0]: -1 is out of range for uint64")),
        (with_sample(r#"{"linkIndex":true}"#), format!("{SAMPLE_PATH}.linkIndex: expected an integer, found a boolean")),
        (with_sample("[]"), format!("{SAMPLE_PATH}: expected an object, found an array")),
        (
            r#"{"dictionary":{"linkTable":[{},{"traceId":"zz0102030405060708090a0b0c0d0e0f"}]}}"#.into(),
            "dictionary.linkTable[1].traceId: invalid hex id \"zz0102030405060708090a0b0c0d0e0f\"".into(),
        ),
        (
            r#"{"dictionary":{"linkTable":[{},{"spanId":"01020"}]}}"#.into(),
            "dictionary.linkTable[1].spanId: invalid hex id \"01020\" (an odd number of digits: each byte is two)".into(),
        ),
        (
            r#"{"dictionary":{"linkTable":[{"traceId":"AAECAwQFBgcICQoLDA0ODw=="}]}}"#.into(),
            "dictionary.linkTable[0].traceId: invalid hex id \"AAECAwQFBgcICQoLDA0ODw==\" (base64, as protobuf's own JSON mapping writes bytes: OTLP/JSON writes ids in hex, 32 digits for 16 bytes)".into(),
        ),
        (
            r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"profileId":"0g"}]}]}]}"#.into(),
            "resourceProfiles[0].scopeProfiles[0].profiles[0].profileId: invalid hex id \"0g\"".into(),
        ),
        (
            r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"originalPayload":"a*=="}]}]}]}"#.into(),
            "resourceProfiles[0].scopeProfiles[0].profiles[0].originalPayload: invalid base64 character '*' at offset 1".into(),
        ),
        (
            r#"{"resourceProfiles":[{"scopeProfiles":[{"scope":{"droppedAttributesCount":-1}}]}]}"#.into(),
            "resourceProfiles[0].scopeProfiles[0].scope.droppedAttributesCount: -1 is out of range for uint32".into(),
        ),
        (
            r#"{"resourceProfiles":[{"resource":{"attributes":[{"key":"k","value":{"arrayValue":{"values":[{"doubleValue":"fast"}]}}}]}}]}"#.into(),
            "resourceProfiles[0].resource.attributes[0].value.arrayValue.values[0].doubleValue: not a number: \"fast\"".into(),
        ),
        (
            r#"{"dictionary":{"attributeTable":[{"value":{"kvlistValue":{"values":[{"value":{"boolValue":1}}]}}}]}}"#.into(),
            "dictionary.attributeTable[0].value.kvlistValue.values[0].value.boolValue: expected a boolean, found a number".into(),
        ),
        (
            r#"{"dictionary":{"attributeTable":[{},{"value":{"intValue":"1","stringValue":"a"}}]}}"#.into(),
            "dictionary.attributeTable[1].value: more than one member of the value oneof is set".into(),
        ),
        (
            r#"{"dictionary":{"stringTable":["",1]}}"#.into(),
            "dictionary.stringTable[1]: expected a string, found a number".into(),
        ),
        ("[]".into(), "expected an object, found an array".into()),
        ("".into(), "invalid JSON at byte 0: unexpected end of input".into()),
        ("{} {}".into(), "invalid JSON at byte 3: unexpected data after the top-level value".into()),
        (r#"{"dictionary":{"stringTable":[""}}"#.into(), "dictionary.stringTable: invalid JSON at byte 32: expected ',' or ']'".into()),
        (r#"{"dictionary":{,}}"#.into(), "dictionary: invalid JSON at byte 15: expected a field name".into()),
        (r#"{"dictionary":{"stringTable":["\ud800"]}}"#.into(), "dictionary.stringTable[0]: invalid JSON at byte 31: unpaired UTF-16 surrogate in string".into()),
        (r#"{"dictionary":{"stringTable":["a\qb"]}}"#.into(), "dictionary.stringTable[0]: invalid JSON at byte 32: invalid escape in string".into()),
        ("{\"dictionary\":{\"stringTable\":[\"a\nb\"]}}".into(), "dictionary.stringTable[0]: invalid JSON at byte 32: control character in string".into()),
        (r#"{"a":tru}"#.into(), "invalid JSON at byte 5: unknown literal".into()),
        // Not null, though it starts as null does.
        ("nope".into(), "invalid JSON at byte 0: unknown literal".into()),
        (r#"{"resourceProfiles":fals}"#.into(), "invalid JSON at byte 20: unknown literal".into()),
        (r#"{"a":01}"#.into(), "invalid JSON at byte 6: expected ',' or '}'".into()),
        (r#"{"a":-}"#.into(), "invalid JSON at byte 5: malformed number".into()),
        ("{\"a\":\u{7f}}".into(), "invalid JSON at byte 5: unexpected byte 0x7f".into()),
    ];
    for (json, expected) in cases {
        assert_eq!(
            decode_err(&json),
            format!("OTLP JSON: {expected}"),
            "input: {json}"
        );
    }
    let invalid_utf8 = b"{\"dictionary\":{\"stringTable\":[\"\xff\"]}}";
    assert_eq!(
        decode_profiles_data(invalid_utf8).unwrap_err().to_string(),
        "OTLP JSON: dictionary.stringTable[0]: invalid JSON at byte 31: invalid UTF-8 in string"
    );
}

/// A resource attribute whose value is `levels` arrays nested in one another.
fn nested_arrays(levels: usize) -> String {
    let open = r#"{"arrayValue":{"values":["#.repeat(levels);
    let close = "]}}".repeat(levels);
    format!(
        r#"{{"resourceProfiles":[{{"resource":{{"attributes":[{{"key":"k","value":{open}{close}}}]}}}}]}}"#
    )
}

#[test]
fn json_attribute_nesting_is_capped() {
    let data = decode_str(&nested_arrays(MAX_VALUE_DEPTH));
    assert_eq!(decode_str(&encode_profiles_data(&data)), data);
    let err = decode_err(&nested_arrays(MAX_VALUE_DEPTH + 1));
    assert!(err.starts_with("OTLP JSON: resourceProfiles[0].resource.attributes[0].value.arrayValue.values[0].arrayValue"), "{err}");
    assert!(
        err.ends_with(": attribute value nested deeper than 64 levels"),
        "{err}"
    );
    // Far deeper input fails the same way instead of exhausting the stack.
    assert!(decode_err(&nested_arrays(100_000)).ends_with("nested deeper than 64 levels"));
    let kvlists = r#"{"kvlistValue":{"values":[{"value":"#.repeat(100_000);
    let json = format!(r#"{{"dictionary":{{"attributeTable":[{{"value":{kvlists}"#);
    assert!(decode_err(&json).ends_with("attribute value nested deeper than 64 levels"));
}

#[test]
fn json_unknown_fields_nesting_is_capped() {
    let skippable = format!(r#"{{"x":{}{}}}"#, "[".repeat(128), "]".repeat(128));
    assert_eq!(decode_str(&skippable), ProfilesData::default());
    let too_deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(129), "]".repeat(129));
    assert_eq!(
        decode_err(&too_deep),
        "OTLP JSON: invalid JSON at byte 133: nested deeper than 128 levels"
    );
    assert!(
        decode_err(&format!(r#"{{"x":{}"#, "{\"y\":[".repeat(100_000))).contains("nested deeper")
    );
    assert!(decode_err(&"[".repeat(100_000)).contains("expected an object, found an array"));
}

#[test]
fn another_signals_json_is_named_not_taken_as_no_profiles() {
    let traces = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x"}]}]}]}"#;
    let e = decode_profiles_data(traces).unwrap_err().to_string();
    assert!(
        e.contains("this is OTLP traces (resourceSpans), not OTLP Profiles"),
        "{e}"
    );
    let e = decode_profiles_data(br#"{"resourceLogs":[]}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("OTLP logs"), "{e}");
    // An empty profiles document stays what it is.
    assert!(decode_profiles_data(b"{}")
        .unwrap()
        .resource_profiles
        .is_empty());
}

/// Ids of the wrong length are decoded as protobuf's bytes are, for the conformance check and
/// linking to judge (one bad link refuses its profile, not the whole document).
#[test]
fn wrong_length_hex_ids_decode_as_their_bytes() {
    let data = decode_str(
        r#"{"dictionary":{"linkTable":[{},{"traceId":"0102","spanId":"0a0b0c"}]},
            "resourceProfiles":[{"scopeProfiles":[{"profiles":[{"profileId":"00ff"}]}]}]}"#,
    );
    let link = &data.dictionary.as_ref().unwrap().link_table[1];
    assert_eq!(
        (link.trace_id.as_slice(), link.span_id.as_slice()),
        (&[1u8, 2][..], &[10u8, 11, 12][..])
    );
    assert_eq!(
        data.resource_profiles[0].scope_profiles[0].profiles[0].profile_id,
        [0, 0xff]
    );
}
