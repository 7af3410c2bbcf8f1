//! `CheckOptions::dupes`: dictionary entries equal by value to an earlier entry of their table.
//!
//! Entries are compared field by field on their indices (the string table is checked for
//! duplicates itself). Attribute index lists compare as sets, as profcheck does for mappings.

use std::collections::HashMap;
use std::hash::Hash;

use prost::Message;

use super::{quote, Checker, Elem, Table};
use crate::otlp::Link;

pub(super) fn check(c: &mut Checker<'_>) {
    let d = c.dict;
    report(
        c,
        Table::String,
        d.string_table.iter().map(String::as_str),
        |s| format!(" ({})", quote(s)),
    );
    report(
        c,
        Table::Mapping,
        d.mapping_table.iter().map(|m| {
            (
                m.memory_start,
                m.memory_limit,
                m.file_offset,
                m.filename_strindex,
                sorted(&m.attribute_indices),
            )
        }),
        |_| String::new(),
    );
    report(
        c,
        Table::Location,
        d.location_table.iter().map(|l| {
            let lines: Vec<_> = l
                .lines
                .iter()
                .map(|line| (line.function_index, line.line, line.column))
                .collect();
            (
                l.mapping_index,
                l.address,
                lines,
                sorted(&l.attribute_indices),
            )
        }),
        |_| String::new(),
    );
    report(
        c,
        Table::Function,
        d.function_table.iter().map(|f| {
            (
                f.name_strindex,
                f.system_name_strindex,
                f.filename_strindex,
                f.start_line,
            )
        }),
        |_| String::new(),
    );
    report(c, Table::Link, d.link_table.iter().map(link_key), |_| {
        String::new()
    });
    report(
        c,
        Table::Stack,
        d.stack_table.iter().map(|s| s.location_indices.as_slice()),
        |_| String::new(),
    );
    // AnyValue holds floats, so it is compared by its encoding; an AnyValue with no member
    // encodes like an absent one.
    report(
        c,
        Table::Attribute,
        d.attribute_table.iter().map(|a| {
            let value = a.value.as_ref().map(Message::encode_to_vec);
            (a.key_strindex, a.unit_strindex, value.unwrap_or_default())
        }),
        |_| String::new(),
    );
}

/// Reports every entry whose key equals an earlier entry's, naming the earlier one.
fn report<K: Hash + Eq>(
    c: &mut Checker<'_>,
    table: Table,
    keys: impl Iterator<Item = K>,
    detail: impl Fn(&K) -> String,
) {
    let mut first: HashMap<K, usize> = HashMap::new();
    for (i, key) in keys.enumerate() {
        if let Some(&earlier) = first.get(&key) {
            let message = format!("duplicate of {}[{earlier}]{}", table.name(), detail(&key));
            c.push(Elem(&"dictionary", table.name(), i), message);
        } else {
            first.insert(key, i);
        }
    }
}

fn sorted(indices: &[i32]) -> Vec<i32> {
    let mut v = indices.to_vec();
    v.sort_unstable();
    v
}

/// Both zero-Link forms are the same value.
fn link_key(link: &Link) -> (&[u8], &[u8]) {
    let zero = link.trace_id.iter().chain(&link.span_id).all(|&b| b == 0);
    if zero {
        (&[], &[])
    } else {
        (&link.trace_id, &link.span_id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{assert_only_with, dict, valid};
    use super::super::{check, CheckOptions};
    use crate::otlp::{any_value::Value, AnyValue, Link, Location};

    const DUPES: CheckOptions = CheckOptions {
        dupes: true,
        orphans: false,
        sample_shapes: true,
    };

    fn assert_dupe(data: &crate::otlp::ProfilesData, path: &str, message: &str) {
        assert_only_with(data, &DUPES, path, message);
        assert_eq!(check(data, &CheckOptions::default()), Vec::new());
    }

    #[test]
    fn duplicate_string() {
        let mut data = valid();
        dict(&mut data).string_table.push("main".into());
        assert_dupe(
            &data,
            "dictionary.string_table[9]",
            "duplicate of string_table[3] (\"main\")",
        );
    }

    #[test]
    fn duplicate_empty_string_repeats_entry_zero() {
        let mut data = valid();
        dict(&mut data).string_table.push(String::new());
        assert_dupe(
            &data,
            "dictionary.string_table[9]",
            "duplicate of string_table[0]",
        );
    }

    #[test]
    fn duplicate_mapping_ignores_attribute_order() {
        let mut data = valid();
        let d = dict(&mut data);
        d.mapping_table[1].attribute_indices = vec![1, 0];
        let mut copy = d.mapping_table[1].clone();
        copy.attribute_indices = vec![0, 1];
        d.mapping_table.push(copy);
        assert_dupe(
            &data,
            "dictionary.mapping_table[2]",
            "duplicate of mapping_table[1]",
        );
    }

    #[test]
    fn duplicate_location() {
        let mut data = valid();
        let d = dict(&mut data);
        let copy = d.location_table[1].clone();
        d.location_table.push(copy);
        assert_dupe(
            &data,
            "dictionary.location_table[2]",
            "duplicate of location_table[1]",
        );
        // Lines are part of the identity.
        dict(&mut data).location_table[2].lines[0].line = 13;
        assert_eq!(check(&data, &DUPES), Vec::new());
    }

    #[test]
    fn duplicate_zero_location() {
        let mut data = valid();
        dict(&mut data).location_table.push(Location::default());
        assert_dupe(
            &data,
            "dictionary.location_table[2]",
            "duplicate of location_table[0]",
        );
    }

    #[test]
    fn duplicate_function() {
        let mut data = valid();
        let d = dict(&mut data);
        let copy = d.function_table[1];
        d.function_table.push(copy);
        assert_dupe(
            &data,
            "dictionary.function_table[2]",
            "duplicate of function_table[1]",
        );
    }

    #[test]
    fn duplicate_link_including_both_zero_forms() {
        let mut data = valid();
        let d = dict(&mut data);
        let copy = d.link_table[1].clone();
        d.link_table.push(copy);
        assert_dupe(
            &data,
            "dictionary.link_table[2]",
            "duplicate of link_table[1]",
        );

        let mut data = valid();
        dict(&mut data).link_table.push(Link {
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
        });
        let found = check(&data, &DUPES);
        assert!(found
            .iter()
            .any(|v| v.to_string() == "dictionary.link_table[2]: duplicate of link_table[0]"));
    }

    #[test]
    fn duplicate_stack() {
        let mut data = valid();
        let d = dict(&mut data);
        let copy = d.stack_table[1].clone();
        d.stack_table.push(copy);
        assert_dupe(
            &data,
            "dictionary.stack_table[2]",
            "duplicate of stack_table[1]",
        );
    }

    #[test]
    fn duplicate_attribute_compares_values() {
        let mut data = valid();
        let d = dict(&mut data);
        let mut copy = d.attribute_table[1].clone();
        d.attribute_table.push(copy.clone());
        assert_dupe(
            &data,
            "dictionary.attribute_table[2]",
            "duplicate of attribute_table[1]",
        );
        copy.value = Some(AnyValue {
            value: Some(Value::IntValue(8)),
        });
        dict(&mut data).attribute_table[2] = copy;
        assert_eq!(check(&data, &DUPES), Vec::new());
    }
}
