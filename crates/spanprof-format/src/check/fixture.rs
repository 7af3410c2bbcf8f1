//! A small conformant `ProfilesData` for the checker's tests, and assertions over its report.

use super::{check, CheckOptions, Violation};
use crate::otlp::{
    any_value::Value, AnyValue, Function, KeyValue, KeyValueAndUnit, Line, Link, Location, Mapping,
    Profile, ProfilesData, ProfilesDictionary, Resource, ResourceProfiles, ScopeProfiles, Stack,
    ValueType,
};

/// Path of the fixture's only profile.
pub(super) const P: &str = "resource_profiles[0].scope_profiles[0].profiles[0]";

/// A payload that passes every rule under every option: one entry past the zero entry in
/// each table, every entry referenced, the resource attribute reference-based.
pub(crate) fn valid() -> ProfilesData {
    let strings = [
        "",
        "cpu",
        "nanoseconds",
        "main",
        "main.go",
        "/bin/app",
        "thread.id",
        "service.name",
        "app",
    ];
    let dictionary = ProfilesDictionary {
        mapping_table: vec![
            Mapping::default(),
            Mapping {
                memory_start: 0x1000,
                memory_limit: 0x2000,
                file_offset: 0,
                filename_strindex: 5,
                attribute_indices: vec![],
            },
        ],
        location_table: vec![
            Location::default(),
            Location {
                mapping_index: 1,
                address: 0x1100,
                lines: vec![Line {
                    function_index: 1,
                    line: 12,
                    column: 3,
                }],
                attribute_indices: vec![],
            },
        ],
        function_table: vec![
            Function::default(),
            Function {
                name_strindex: 3,
                system_name_strindex: 3,
                filename_strindex: 4,
                start_line: 10,
            },
        ],
        link_table: vec![
            Link::default(),
            Link {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
            },
        ],
        string_table: strings.iter().map(|s| s.to_string()).collect(),
        attribute_table: vec![
            KeyValueAndUnit::default(),
            KeyValueAndUnit {
                key_strindex: 6,
                value: Some(AnyValue {
                    value: Some(Value::IntValue(7)),
                }),
                unit_strindex: 0,
            },
        ],
        stack_table: vec![
            Stack::default(),
            Stack {
                location_indices: vec![1],
            },
        ],
    };
    let cpu = ValueType {
        type_strindex: 1,
        unit_strindex: 2,
    };
    let profile = Profile {
        sample_type: Some(cpu),
        samples: vec![crate::otlp::Sample {
            stack_index: 1,
            attribute_indices: vec![1],
            link_index: 1,
            values: vec![5],
            timestamps_unix_nano: vec![],
        }],
        time_unix_nano: 1000,
        duration_nano: 1000,
        period_type: Some(cpu),
        period: 10_000_000,
        profile_id: vec![7; 16],
        ..Profile::default()
    };
    let resource = Resource {
        attributes: vec![KeyValue {
            key: String::new(),
            value: Some(AnyValue {
                value: Some(Value::StringValueStrindex(8)),
            }),
            key_strindex: 7,
        }],
        ..Resource::default()
    };
    ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![ScopeProfiles {
                scope: None,
                profiles: vec![profile],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dictionary),
    }
}

/// The fixture's only profile.
pub(crate) fn profile(data: &mut ProfilesData) -> &mut Profile {
    &mut data.resource_profiles[0].scope_profiles[0].profiles[0]
}

/// The fixture's dictionary.
pub(super) fn dict(data: &mut ProfilesData) -> &mut ProfilesDictionary {
    data.dictionary
        .as_mut()
        .expect("the fixture has a dictionary")
}

/// Every combination of the three options.
pub(super) fn all_options() -> Vec<CheckOptions> {
    (0..8)
        .map(|bits| CheckOptions {
            dupes: bits & 1 != 0,
            orphans: bits & 2 != 0,
            sample_shapes: bits & 4 != 0,
        })
        .collect()
}

/// Asserts that, with default options, `data` has exactly one violation, at `path`, whose
/// message contains `message`.
#[track_caller]
pub(super) fn assert_only(data: &ProfilesData, path: &str, message: &str) {
    assert_only_with(data, &CheckOptions::default(), path, message);
}

/// [`assert_only`] with the given options.
#[track_caller]
pub(super) fn assert_only_with(
    data: &ProfilesData,
    opts: &CheckOptions,
    path: &str,
    message: &str,
) {
    let found = check(data, opts);
    let text: Vec<String> = found.iter().map(Violation::to_string).collect();
    assert!(
        found.len() == 1 && found[0].path == path && found[0].message.contains(message),
        "expected only `{path}: …{message}…`, found {text:#?}"
    );
}
