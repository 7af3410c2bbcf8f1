//! OTLP Profiles conformance checker: every rule of the `profcheck` tool of
//! open-telemetry/sig-profiling, plus the `profiles.proto` MUSTs it skips.
//!
//! [`check`] never stops at the first problem: it returns one [`Violation`] per broken rule
//! occurrence, each naming the full path of the offending field. It never panics, whatever
//! the indices in the message. [`detect_v1_9_numbering`] looks at raw bytes for the pre-v1.10
//! `Sample` field numbering, which decodes without error but swaps fields.

mod attributes;
mod dictionary;
mod dupes;
#[cfg(test)]
pub(crate) mod fixture;
mod orphans;
mod profile;

use std::collections::HashMap;
use std::fmt::{self, Display};

use crate::otlp::{ProfilesData, ProfilesDictionary};

pub use crate::otlp::detect_v1_9_numbering;

/// Which optional rule groups [`check`] runs; the defaults match `profcheck`'s flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Report dictionary entries equal by value to an earlier entry of the same table
    /// (`profcheck -check-dupes`). Default: false.
    pub dupes: bool,
    /// Report dictionary entries nothing refers to (`profcheck -check-orphans`), counting
    /// references from reference-based resource and scope attributes too. Default: false.
    pub orphans: bool,
    /// Require one value per sample when it has no timestamps, and one shape for all the
    /// samples of a profile (`profcheck -check-sample-shapes`). Default: true. The proto
    /// MUSTs (some values or timestamps; equal lengths when both) are checked regardless.
    pub sample_shapes: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            dupes: false,
            orphans: false,
            sample_shapes: true,
        }
    }
}

/// One broken rule: where (a field path such as
/// `resource_profiles[0].scope_profiles[0].profiles[1].samples[17].link_index`) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Path of the offending field or entry, from the root `ProfilesData`.
    pub path: String,
    /// What is wrong with it, in one short sentence without a trailing period.
    pub message: String,
}

impl Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Checks `data` against the OTLP Profiles rules and returns every violation found (the
/// message tree first, then the dictionary tables, duplicates, orphans); empty when conformant.
///
/// A missing dictionary is reported once and then read as seven empty tables. Index 0
/// ("unset") is never reported as out of range: a table lacking its zero entry is reported
/// on the table itself instead, once.
pub fn check(data: &ProfilesData, opts: &CheckOptions) -> Vec<Violation> {
    let empty = ProfilesDictionary::default();
    let dict = data.dictionary.as_ref().unwrap_or(&empty);
    let mut c = Checker {
        dict,
        out: Vec::new(),
    };
    if data.dictionary.is_none() {
        c.push("dictionary", "missing (every table needs its zero entry)");
    }
    profile::check(&mut c, data, opts);
    if data.dictionary.is_some() {
        dictionary::check(&mut c);
    }
    if opts.dupes {
        dupes::check(&mut c);
    }
    if opts.orphans {
        orphans::check(&mut c, data);
    }
    c.out
}

/// The walk's state: the dictionary every index points into and the findings so far.
struct Checker<'a> {
    dict: &'a ProfilesDictionary,
    out: Vec<Violation>,
}

/// The seven dictionary tables, for range checks and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Mapping,
    Location,
    Function,
    Link,
    String,
    Attribute,
    Stack,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Mapping => "mapping_table",
            Table::Location => "location_table",
            Table::Function => "function_table",
            Table::Link => "link_table",
            Table::String => "string_table",
            Table::Attribute => "attribute_table",
            Table::Stack => "stack_table",
        }
    }

    fn len(self, dict: &ProfilesDictionary) -> usize {
        match self {
            Table::Mapping => dict.mapping_table.len(),
            Table::Location => dict.location_table.len(),
            Table::Function => dict.function_table.len(),
            Table::Link => dict.link_table.len(),
            Table::String => dict.string_table.len(),
            Table::Attribute => dict.attribute_table.len(),
            Table::Stack => dict.stack_table.len(),
        }
    }
}

/// `idx` as a position in a table of `len` entries, if it is one.
fn position(idx: i32, len: usize) -> Option<usize> {
    usize::try_from(idx).ok().filter(|&i| i < len)
}

impl<'a> Checker<'a> {
    fn push(&mut self, path: impl Display, message: impl Into<String>) {
        self.out.push(Violation {
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// Checks that `idx` (the field at `path`) names an entry of `table`; returns whether it does.
    fn index(&mut self, path: &dyn Display, idx: i32, table: Table) -> bool {
        let len = table.len(self.dict);
        if idx == 0 || position(idx, len).is_some() {
            return true;
        }
        let entries = if len == 1 { "entry" } else { "entries" };
        self.push(
            path,
            format!("{idx} out of range ({} has {len} {entries})", table.name()),
        );
        false
    }

    /// The string at `idx`, when in range.
    fn string(&self, idx: i32) -> Option<&'a str> {
        let dict: &'a ProfilesDictionary = self.dict;
        position(idx, dict.string_table.len())
            .and_then(|i| dict.string_table.get(i))
            .map(String::as_str)
    }

    /// Checks an `attribute_indices` list of `owner`: every index in range, keys unique.
    fn attribute_list(&mut self, owner: &dyn Display, indices: &[i32]) {
        let dict: &'a ProfilesDictionary = self.dict;
        let mut seen: HashMap<&'a str, usize> = HashMap::new();
        for (j, &idx) in indices.iter().enumerate() {
            let path = Elem(owner, "attribute_indices", j);
            if !self.index(&path, idx, Table::Attribute) || idx == 0 {
                continue;
            }
            let key = position(idx, dict.attribute_table.len())
                .and_then(|i| dict.attribute_table.get(i))
                .and_then(|attr| self.string(attr.key_strindex));
            // An out-of-range key is reported on the attribute table entry itself.
            let Some(key) = key else { continue };
            if indices.len() < 2 {
                continue;
            }
            if let Some(first) = seen.get(key) {
                self.push(
                    path,
                    format!(
                        "duplicate key {} (also at attribute_indices[{first}])",
                        quote(key)
                    ),
                );
            } else {
                seen.insert(key, j);
            }
        }
    }
}

/// Path `{parent}.{field}`, formatted only when a violation is reported.
struct Field<'a>(&'a dyn Display, &'a str);

impl Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Path `{parent}.{field}[{index}]`, formatted only when a violation is reported.
struct Elem<'a>(&'a dyn Display, &'a str, usize);

impl Display for Elem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}[{}]", self.0, self.1, self.2)
    }
}

/// Path `{field}[{index}]` of a root field.
struct Index<'a>(&'a str, usize);

impl Display for Index<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// `s` quoted for a message, cut to 40 characters so one long string cannot flood a report.
fn quote(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    match s.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// The names of the fields flagged as set, for "must be the zero X" messages.
fn set_fields(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message;

    use super::fixture::{all_options, valid, P};
    use super::*;
    use crate::otlp::{ResourceProfiles, ScopeProfiles};

    #[test]
    fn valid_payload_has_no_violations_under_any_options() {
        let data = valid();
        for opts in all_options() {
            assert_eq!(check(&data, &opts), Vec::new(), "{opts:?}");
        }
    }

    #[test]
    fn default_options_match_profcheck() {
        let opts = CheckOptions::default();
        assert!(!opts.dupes && !opts.orphans && opts.sample_shapes);
    }

    #[test]
    fn violation_displays_path_then_message() {
        let v = Violation {
            path: "dictionary.string_table[0]".into(),
            message: "must be \"\"".into(),
        };
        assert_eq!(v.to_string(), "dictionary.string_table[0]: must be \"\"");
    }

    #[test]
    fn empty_resource_profiles() {
        let mut data = valid();
        data.resource_profiles.clear();
        fixture::assert_only(&data, "resource_profiles", "empty");
    }

    #[test]
    fn resource_without_scope() {
        let mut data = valid();
        data.resource_profiles.push(ResourceProfiles::default());
        fixture::assert_only(&data, "resource_profiles[1].scope_profiles", "empty");
    }

    #[test]
    fn scope_without_profile() {
        let mut data = valid();
        data.resource_profiles[0]
            .scope_profiles
            .push(ScopeProfiles::default());
        fixture::assert_only(
            &data,
            "resource_profiles[0].scope_profiles[1].profiles",
            "empty",
        );
    }

    #[test]
    fn missing_dictionary_is_reported_once() {
        let mut data = valid();
        data.dictionary = None;
        let found = check(&data, &CheckOptions::default());
        assert_eq!(
            found
                .iter()
                .filter(|v| v.path.starts_with("dictionary"))
                .count(),
            1
        );
        assert!(found
            .iter()
            .any(|v| v.path == "dictionary" && v.message.contains("missing")));
        // The profile's non-zero indices are out of range; index 0 never is.
        assert!(found
            .iter()
            .any(|v| v.path == format!("{P}.samples[0].stack_index")
                && v.message == "1 out of range (stack_table has 0 entries)"));
    }

    #[test]
    fn negative_index_is_out_of_range() {
        let mut data = valid();
        fixture::profile(&mut data).samples[0].stack_index = -1;
        fixture::assert_only(
            &data,
            &format!("{P}.samples[0].stack_index"),
            "-1 out of range (stack_table has 2 entries)",
        );
    }

    #[test]
    fn quote_cuts_long_strings() {
        assert_eq!(quote("ab"), "\"ab\"");
        let long = "é".repeat(50);
        assert_eq!(quote(&long), format!("{:?}…", "é".repeat(40)));
    }

    fn run_all(data: &ProfilesData) {
        for opts in all_options() {
            let _ = check(data, &opts);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = detect_v1_9_numbering(&bytes);
            if let Ok(data) = ProfilesData::decode(bytes.as_slice()) {
                run_all(&data);
            }
        }

        #[test]
        fn mutated_valid_payload_never_panics(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut bytes = valid().encode_to_vec();
            for (at, byte) in edits {
                let len = bytes.len();
                if let Some(b) = bytes.get_mut(at % len) {
                    *b = byte;
                }
            }
            bytes.truncate(bytes.len() - cut % 4);
            let _ = detect_v1_9_numbering(&bytes);
            if let Ok(data) = ProfilesData::decode(bytes.as_slice()) {
                run_all(&data);
            }
        }

        #[test]
        fn arbitrary_indices_never_panic(
            ix in proptest::collection::vec(any::<i32>(), 24),
            wide in any::<(u64, u64, i64)>(),
        ) {
            let mut data = valid();
            let (time, duration, signed) = wide;
            {
                let p = fixture::profile(&mut data);
                p.time_unix_nano = time;
                p.duration_nano = duration;
                p.attribute_indices = vec![ix[0], ix[1]];
                let s = &mut p.samples[0];
                s.stack_index = ix[2];
                s.link_index = ix[3];
                s.attribute_indices = vec![ix[4], ix[5], ix[4]];
                s.timestamps_unix_nano = vec![time, u64::MAX];
                s.values.push(signed);
                p.sample_type.get_or_insert_default().type_strindex = ix[6];
            }
            let d = fixture::dict(&mut data);
            d.mapping_table[1].filename_strindex = ix[7];
            d.mapping_table[1].attribute_indices = vec![ix[8]];
            d.location_table[1].mapping_index = ix[9];
            d.location_table[1].lines[0].function_index = ix[10];
            d.location_table[1].lines[0].line = signed;
            d.function_table[1].name_strindex = ix[11];
            d.function_table[1].system_name_strindex = ix[12];
            d.function_table[1].start_line = signed;
            d.attribute_table[1].key_strindex = ix[13];
            d.attribute_table[1].unit_strindex = ix[14];
            d.stack_table[1].location_indices = vec![ix[15], ix[16]];
            d.attribute_table.push(crate::otlp::KeyValueAndUnit {
                key_strindex: ix[17],
                value: Some(crate::otlp::AnyValue {
                    value: Some(crate::otlp::any_value::Value::StringValueStrindex(ix[18])),
                }),
                unit_strindex: ix[19],
            });
            run_all(&data);
            let _ = detect_v1_9_numbering(&data.encode_to_vec());
        }
    }
}
