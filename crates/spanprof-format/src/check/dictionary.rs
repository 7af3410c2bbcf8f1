//! Rules on the seven `ProfilesDictionary` tables: the zero entry at index 0, then every
//! index and value of the entries after it.

use std::fmt::Display;

use super::attributes::{walk_value, RangeCheck};
use super::{quote, set_fields, Checker, Elem, Field, Table};
use crate::otlp::{KeyValueAndUnit, Link};

/// Bytes in a `Link.trace_id`.
const TRACE_ID_LEN: usize = 16;
/// Bytes in a `Link.span_id`.
const SPAN_ID_LEN: usize = 8;

const ROOT: &str = "dictionary";

pub(super) fn check(c: &mut Checker<'_>) {
    zero_entries(c);
    mappings(c);
    locations(c);
    functions(c);
    links(c);
    attributes(c);
    stacks(c);
}

fn zero_entries(c: &mut Checker<'_>) {
    let d = c.dict;
    match d.string_table.first() {
        None => c.push(Field(&ROOT, "string_table"), "empty (entry 0 must be \"\")"),
        Some(s) if !s.is_empty() => c.push(
            Elem(&ROOT, "string_table", 0),
            format!("must be \"\", found {}", quote(s)),
        ),
        Some(_) => {}
    }
    let mapping = d.mapping_table.first().map(|m| {
        set_fields(&[
            ("memory_start", m.memory_start != 0),
            ("memory_limit", m.memory_limit != 0),
            ("file_offset", m.file_offset != 0),
            ("filename_strindex", m.filename_strindex != 0),
            ("attribute_indices", !m.attribute_indices.is_empty()),
        ])
    });
    zero_entry(c, Table::Mapping, "Mapping", mapping);
    let location = d.location_table.first().map(|l| {
        set_fields(&[
            ("mapping_index", l.mapping_index != 0),
            ("address", l.address != 0),
            ("lines", !l.lines.is_empty()),
            ("attribute_indices", !l.attribute_indices.is_empty()),
        ])
    });
    zero_entry(c, Table::Location, "Location", location);
    let function = d.function_table.first().map(|f| {
        set_fields(&[
            ("name_strindex", f.name_strindex != 0),
            ("system_name_strindex", f.system_name_strindex != 0),
            ("filename_strindex", f.filename_strindex != 0),
            ("start_line", f.start_line != 0),
        ])
    });
    zero_entry(c, Table::Function, "Function", function);
    let attribute = d.attribute_table.first().map(|a| {
        set_fields(&[
            ("key_strindex", a.key_strindex != 0),
            ("value", !value_is_unset(a)),
            ("unit_strindex", a.unit_strindex != 0),
        ])
    });
    zero_entry(c, Table::Attribute, "KeyValueAndUnit", attribute);
    let stack = d
        .stack_table
        .first()
        .map(|s| set_fields(&[("location_indices", !s.location_indices.is_empty())]));
    zero_entry(c, Table::Stack, "Stack", stack);
    match d.link_table.first() {
        None => c.push(
            Field(&ROOT, "link_table"),
            "empty (entry 0 must be the zero Link)",
        ),
        Some(link) if !is_zero_link(link) => c.push(
            Elem(&ROOT, "link_table", 0),
            "must be the zero Link (empty ids, or 16 and 8 zero bytes)",
        ),
        Some(_) => {}
    }
}

/// Reports a missing entry 0 (`set` is `None`) or the fields set on it.
fn zero_entry(c: &mut Checker<'_>, table: Table, kind: &str, set: Option<Vec<&'static str>>) {
    match set {
        None => c.push(
            Field(&ROOT, table.name()),
            format!("empty (entry 0 must be the zero {kind})"),
        ),
        Some(set) if !set.is_empty() => c.push(
            Elem(&ROOT, table.name(), 0),
            format!("must be the zero {kind}, but {} set", set.join(", ")),
        ),
        Some(_) => {}
    }
}

/// Proto v1.11 accepts both `Link{}` and a link of 16 and 8 zero bytes as the zero Link.
fn is_zero_link(link: &Link) -> bool {
    let zero = |b: &[u8]| b.iter().all(|&x| x == 0);
    (link.trace_id.is_empty() && link.span_id.is_empty())
        || (link.trace_id.len() == TRACE_ID_LEN
            && link.span_id.len() == SPAN_ID_LEN
            && zero(&link.trace_id)
            && zero(&link.span_id))
}

/// An absent value and an `AnyValue` with no member both mean "no value".
fn value_is_unset(a: &KeyValueAndUnit) -> bool {
    a.value.as_ref().is_none_or(|v| v.value.is_none())
}

fn mappings(c: &mut Checker<'_>) {
    for (i, m) in c.dict.mapping_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "mapping_table", i);
        let filename = Field(&path, "filename_strindex");
        c.index(&filename, m.filename_strindex, Table::String);
        c.attribute_list(&path, &m.attribute_indices);
        let unset = m.memory_start == 0 && m.memory_limit == 0;
        if !unset && m.memory_start >= m.memory_limit {
            c.push(
                &path,
                format!(
                    "memory_start {:#x} is not below memory_limit {:#x}",
                    m.memory_start, m.memory_limit
                ),
            );
        }
    }
}

fn locations(c: &mut Checker<'_>) {
    for (i, l) in c.dict.location_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "location_table", i);
        c.index(
            &Field(&path, "mapping_index"),
            l.mapping_index,
            Table::Mapping,
        );
        c.attribute_list(&path, &l.attribute_indices);
        for (j, line) in l.lines.iter().enumerate() {
            let lpath = Elem(&path, "lines", j);
            let function = Field(&lpath, "function_index");
            c.index(&function, line.function_index, Table::Function);
            non_negative(c, &Field(&lpath, "line"), line.line);
            non_negative(c, &Field(&lpath, "column"), line.column);
        }
    }
}

fn functions(c: &mut Checker<'_>) {
    for (i, f) in c.dict.function_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "function_table", i);
        let fields = [
            ("name_strindex", f.name_strindex),
            ("system_name_strindex", f.system_name_strindex),
            ("filename_strindex", f.filename_strindex),
        ];
        for (name, idx) in fields {
            c.index(&Field(&path, name), idx, Table::String);
        }
        non_negative(c, &Field(&path, "start_line"), f.start_line);
        if fields.iter().all(|(_, idx)| *idx == 0) {
            c.push(
                &path,
                "no name, system_name or filename (at least one is required)",
            );
        }
    }
}

fn links(c: &mut Checker<'_>) {
    for (i, link) in c.dict.link_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "link_table", i);
        let ids = [
            ("trace_id", link.trace_id.len(), TRACE_ID_LEN),
            ("span_id", link.span_id.len(), SPAN_ID_LEN),
        ];
        for (name, len, want) in ids {
            if len != want {
                c.push(Field(&path, name), format!("{len} bytes (must be {want})"));
            }
        }
        // An all-zero span id names no span (W3C trace context calls it invalid); an
        // all-zero trace id is allowed beside a real span id (the trace is not known).
        if link.span_id.len() == SPAN_ID_LEN && link.span_id.iter().all(|&b| b == 0) {
            c.push(
                Field(&path, "span_id"),
                "all zero: an invalid span id (a sample without a span has link_index 0)",
            );
        }
    }
}

fn attributes(c: &mut Checker<'_>) {
    for (i, a) in c.dict.attribute_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "attribute_table", i);
        c.index(&Field(&path, "key_strindex"), a.key_strindex, Table::String);
        c.index(
            &Field(&path, "unit_strindex"),
            a.unit_strindex,
            Table::String,
        );
        if let Some(value) = &a.value {
            walk_value(&mut RangeCheck(c), &Field(&path, "value"), value);
        }
    }
}

fn stacks(c: &mut Checker<'_>) {
    for (i, s) in c.dict.stack_table.iter().enumerate().skip(1) {
        let path = Elem(&ROOT, "stack_table", i);
        for (j, &idx) in s.location_indices.iter().enumerate() {
            c.index(&Elem(&path, "location_indices", j), idx, Table::Location);
        }
    }
}

fn non_negative(c: &mut Checker<'_>, path: &dyn Display, value: i64) {
    if value < 0 {
        c.push(path, format!("{value} is negative"));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{assert_only, dict, valid};
    use crate::otlp::{
        any_value::Value, AnyValue, Function, KeyValueAndUnit, Line, Link, Location, Mapping, Stack,
    };

    #[test]
    fn string_table_empty() {
        let mut data = valid();
        let d = dict(&mut data);
        d.string_table.clear();
        // Keep the rest of the fixture free of string references.
        d.mapping_table.truncate(1);
        d.function_table.truncate(1);
        d.location_table.truncate(1);
        d.stack_table.truncate(1);
        d.attribute_table.truncate(1);
        data.resource_profiles[0].resource = None;
        let p = super::super::fixture::profile(&mut data);
        p.sample_type = None;
        p.period_type = None;
        p.samples[0].stack_index = 0;
        p.samples[0].attribute_indices.clear();
        assert_only(
            &data,
            "dictionary.string_table",
            "empty (entry 0 must be \"\")",
        );
    }

    #[test]
    fn string_zero_not_empty() {
        let mut data = valid();
        dict(&mut data).string_table[0] = "x".into();
        assert_only(
            &data,
            "dictionary.string_table[0]",
            "must be \"\", found \"x\"",
        );
    }

    #[test]
    fn mapping_zero_entry() {
        let mut data = valid();
        dict(&mut data).mapping_table[0] = Mapping {
            memory_start: 1,
            filename_strindex: 5,
            ..Mapping::default()
        };
        assert_only(
            &data,
            "dictionary.mapping_table[0]",
            "must be the zero Mapping, but memory_start, filename_strindex set",
        );
    }

    #[test]
    fn mapping_table_empty() {
        let mut data = valid();
        dict(&mut data).mapping_table.clear();
        dict(&mut data).location_table[1].mapping_index = 0;
        assert_only(
            &data,
            "dictionary.mapping_table",
            "empty (entry 0 must be the zero Mapping)",
        );
    }

    #[test]
    fn location_zero_entry() {
        let mut data = valid();
        dict(&mut data).location_table[0].address = 4;
        assert_only(
            &data,
            "dictionary.location_table[0]",
            "must be the zero Location, but address set",
        );
    }

    #[test]
    fn function_zero_entry() {
        let mut data = valid();
        dict(&mut data).function_table[0].start_line = 1;
        assert_only(
            &data,
            "dictionary.function_table[0]",
            "must be the zero Function, but start_line set",
        );
    }

    #[test]
    fn attribute_zero_entry() {
        let mut data = valid();
        dict(&mut data).attribute_table[0].value = Some(AnyValue {
            value: Some(Value::IntValue(0)),
        });
        assert_only(
            &data,
            "dictionary.attribute_table[0]",
            "must be the zero KeyValueAndUnit, but value set",
        );
        // A value with no member is still unset.
        dict(&mut data).attribute_table[0].value = Some(AnyValue { value: None });
        assert_eq!(super::super::check(&data, &Default::default()), Vec::new());
    }

    #[test]
    fn stack_zero_entry() {
        let mut data = valid();
        dict(&mut data).stack_table[0] = Stack {
            location_indices: vec![1],
        };
        assert_only(
            &data,
            "dictionary.stack_table[0]",
            "must be the zero Stack, but location_indices set",
        );
    }

    #[test]
    fn link_zero_entry_accepts_both_forms() {
        let mut data = valid();
        dict(&mut data).link_table[0] = Link {
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
        };
        assert_eq!(super::super::check(&data, &Default::default()), Vec::new());
        dict(&mut data).link_table[0].span_id = vec![];
        assert_only(
            &data,
            "dictionary.link_table[0]",
            "must be the zero Link (empty ids, or 16 and 8 zero bytes)",
        );
        dict(&mut data).link_table[0] = Link {
            trace_id: vec![1; 16],
            span_id: vec![0; 8],
        };
        assert_only(&data, "dictionary.link_table[0]", "must be the zero Link");
    }

    #[test]
    fn mapping_filename_out_of_range() {
        let mut data = valid();
        dict(&mut data).mapping_table[1].filename_strindex = 9;
        assert_only(
            &data,
            "dictionary.mapping_table[1].filename_strindex",
            "9 out of range (string_table has 9 entries)",
        );
    }

    #[test]
    fn mapping_attribute_keys_unique() {
        let mut data = valid();
        dict(&mut data).mapping_table[1].attribute_indices = vec![1, 1];
        assert_only(
            &data,
            "dictionary.mapping_table[1].attribute_indices[1]",
            "duplicate key \"thread.id\"",
        );
    }

    #[test]
    fn mapping_memory_range() {
        let mut data = valid();
        dict(&mut data).mapping_table[1].memory_limit = 0x1000;
        assert_only(
            &data,
            "dictionary.mapping_table[1]",
            "memory_start 0x1000 is not below memory_limit 0x1000",
        );
        let m = &mut dict(&mut data).mapping_table[1];
        m.memory_start = 0;
        m.memory_limit = 0;
        assert_eq!(super::super::check(&data, &Default::default()), Vec::new());
    }

    #[test]
    fn location_mapping_index_out_of_range() {
        let mut data = valid();
        dict(&mut data).location_table[1].mapping_index = 2;
        assert_only(
            &data,
            "dictionary.location_table[1].mapping_index",
            "2 out of range (mapping_table has 2 entries)",
        );
    }

    #[test]
    fn location_attribute_index_out_of_range() {
        let mut data = valid();
        dict(&mut data).location_table[1].attribute_indices = vec![5];
        assert_only(
            &data,
            "dictionary.location_table[1].attribute_indices[0]",
            "5 out of range (attribute_table has 2 entries)",
        );
    }

    #[test]
    fn line_function_index_out_of_range() {
        let mut data = valid();
        dict(&mut data).location_table[1].lines.push(Line {
            function_index: 3,
            line: 1,
            column: 1,
        });
        assert_only(
            &data,
            "dictionary.location_table[1].lines[1].function_index",
            "3 out of range (function_table has 2 entries)",
        );
    }

    #[test]
    fn line_and_column_non_negative() {
        let mut data = valid();
        dict(&mut data).location_table[1].lines[0].line = -1;
        assert_only(
            &data,
            "dictionary.location_table[1].lines[0].line",
            "-1 is negative",
        );
        let line = &mut dict(&mut data).location_table[1].lines[0];
        line.line = 0;
        line.column = -7;
        assert_only(
            &data,
            "dictionary.location_table[1].lines[0].column",
            "-7 is negative",
        );
    }

    #[test]
    fn function_string_indices_out_of_range() {
        for (name, set) in [
            ("name_strindex", 0),
            ("system_name_strindex", 1),
            ("filename_strindex", 2),
        ] {
            let mut data = valid();
            let f = &mut dict(&mut data).function_table[1];
            *[
                &mut f.name_strindex,
                &mut f.system_name_strindex,
                &mut f.filename_strindex,
            ][set] = 100;
            assert_only(
                &data,
                &format!("dictionary.function_table[1].{name}"),
                "100 out of range",
            );
        }
    }

    #[test]
    fn function_start_line_non_negative() {
        let mut data = valid();
        dict(&mut data).function_table[1].start_line = -2;
        assert_only(
            &data,
            "dictionary.function_table[1].start_line",
            "-2 is negative",
        );
    }

    #[test]
    fn function_needs_a_name() {
        let mut data = valid();
        dict(&mut data).function_table.push(Function {
            start_line: 3,
            ..Function::default()
        });
        assert_only(
            &data,
            "dictionary.function_table[2]",
            "no name, system_name or filename (at least one is required)",
        );
    }

    #[test]
    fn link_id_lengths() {
        let mut data = valid();
        dict(&mut data).link_table[1].trace_id = vec![1; 15];
        assert_only(
            &data,
            "dictionary.link_table[1].trace_id",
            "15 bytes (must be 16)",
        );
        let link = &mut dict(&mut data).link_table[1];
        link.trace_id = vec![1; 16];
        link.span_id = vec![];
        assert_only(
            &data,
            "dictionary.link_table[1].span_id",
            "0 bytes (must be 8)",
        );
        // The server refuses a link to the all-zero span: so does check.
        dict(&mut data).link_table[1].span_id = vec![0; 8];
        assert_only(
            &data,
            "dictionary.link_table[1].span_id",
            "all zero: an invalid span id",
        );
        dict(&mut data).link_table[1].trace_id = vec![0; 16];
        dict(&mut data).link_table[1].span_id = vec![5; 8];
        assert_eq!(super::super::check(&data, &Default::default()), Vec::new());
    }

    #[test]
    fn attribute_key_and_unit_out_of_range() {
        let mut data = valid();
        dict(&mut data).attribute_table[1].key_strindex = 9;
        assert_only(
            &data,
            "dictionary.attribute_table[1].key_strindex",
            "9 out of range",
        );
        let a = &mut dict(&mut data).attribute_table[1];
        a.key_strindex = 6;
        a.unit_strindex = -1;
        assert_only(
            &data,
            "dictionary.attribute_table[1].unit_strindex",
            "-1 out of range",
        );
    }

    #[test]
    fn attribute_string_value_out_of_range() {
        let mut data = valid();
        dict(&mut data).attribute_table.push(KeyValueAndUnit {
            key_strindex: 7,
            value: Some(AnyValue {
                value: Some(Value::StringValueStrindex(12)),
            }),
            unit_strindex: 0,
        });
        assert_only(
            &data,
            "dictionary.attribute_table[2].value.string_value_strindex",
            "12 out of range",
        );
    }

    #[test]
    fn stack_location_index_out_of_range() {
        let mut data = valid();
        dict(&mut data).stack_table[1].location_indices = vec![1, -3];
        assert_only(
            &data,
            "dictionary.stack_table[1].location_indices[1]",
            "-3 out of range (location_table has 2 entries)",
        );
    }

    #[test]
    fn zero_location_entry_in_table_is_skipped_for_entry_rules() {
        // Entry 0 gets only the zero-value rule, never a second report for its fields.
        let mut data = valid();
        dict(&mut data).location_table[0] = Location {
            mapping_index: 99,
            ..Location::default()
        };
        assert_only(
            &data,
            "dictionary.location_table[0]",
            "must be the zero Location, but mapping_index set",
        );
    }
}
