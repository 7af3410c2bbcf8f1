//! `CheckOptions::orphans`: dictionary entries nothing refers to.
//!
//! References count from every profile and sample, from every dictionary entry (orphans
//! included, as in profcheck), and, unlike profcheck, from reference-based resource and scope
//! attributes, so a string used only by `key_strindex` or `string_value_strindex` is no orphan.

use std::fmt::Display;

use super::attributes::{walk_key_values, walk_value, StrRefVisitor};
use super::{position, Checker, Elem, Table};
use crate::otlp::{ProfilesData, ProfilesDictionary, ValueType};

/// One "referenced" flag per entry of each table.
struct Marks {
    mapping: Vec<bool>,
    location: Vec<bool>,
    function: Vec<bool>,
    link: Vec<bool>,
    string: Vec<bool>,
    attribute: Vec<bool>,
    stack: Vec<bool>,
}

impl Marks {
    fn new(d: &ProfilesDictionary) -> Marks {
        let flags = |len: usize| {
            let mut v = vec![false; len];
            // Index 0 is the "unset" value and always counts as referenced.
            if let Some(first) = v.first_mut() {
                *first = true;
            }
            v
        };
        Marks {
            mapping: flags(d.mapping_table.len()),
            location: flags(d.location_table.len()),
            function: flags(d.function_table.len()),
            link: flags(d.link_table.len()),
            string: flags(d.string_table.len()),
            attribute: flags(d.attribute_table.len()),
            stack: flags(d.stack_table.len()),
        }
    }

    fn table(&mut self, table: Table) -> &mut Vec<bool> {
        match table {
            Table::Mapping => &mut self.mapping,
            Table::Location => &mut self.location,
            Table::Function => &mut self.function,
            Table::Link => &mut self.link,
            Table::String => &mut self.string,
            Table::Attribute => &mut self.attribute,
            Table::Stack => &mut self.stack,
        }
    }

    /// Marks `idx` of `table`; out-of-range indices are reported by the range rules.
    fn mark(&mut self, table: Table, idx: i32) {
        let flags = self.table(table);
        if let Some(flag) = position(idx, flags.len()).and_then(|i| flags.get_mut(i)) {
            *flag = true;
        }
    }

    fn mark_all(&mut self, table: Table, indices: &[i32]) {
        for &idx in indices {
            self.mark(table, idx);
        }
    }

    fn value_type(&mut self, vt: Option<&ValueType>) {
        if let Some(vt) = vt {
            self.mark(Table::String, vt.type_strindex);
            self.mark(Table::String, vt.unit_strindex);
        }
    }
}

impl StrRefVisitor for Marks {
    fn strindex(&mut self, _path: &dyn Display, idx: i32) {
        self.mark(Table::String, idx);
    }
}

pub(super) fn check(c: &mut Checker<'_>, data: &ProfilesData) {
    let d = c.dict;
    let mut marks = Marks::new(d);
    // Paths are only formatted for violations, and the visitor never reports one.
    let nowhere: &dyn Display = &"";
    for rp in &data.resource_profiles {
        if let Some(resource) = &rp.resource {
            walk_key_values(&mut marks, nowhere, "attributes", &resource.attributes);
        }
        for sp in &rp.scope_profiles {
            if let Some(scope) = &sp.scope {
                walk_key_values(&mut marks, nowhere, "attributes", &scope.attributes);
            }
            for p in &sp.profiles {
                marks.value_type(p.sample_type.as_ref());
                marks.value_type(p.period_type.as_ref());
                marks.mark_all(Table::Attribute, &p.attribute_indices);
                for s in &p.samples {
                    marks.mark(Table::Stack, s.stack_index);
                    marks.mark(Table::Link, s.link_index);
                    marks.mark_all(Table::Attribute, &s.attribute_indices);
                }
            }
        }
    }
    for m in &d.mapping_table {
        marks.mark(Table::String, m.filename_strindex);
        marks.mark_all(Table::Attribute, &m.attribute_indices);
    }
    for l in &d.location_table {
        marks.mark(Table::Mapping, l.mapping_index);
        marks.mark_all(Table::Attribute, &l.attribute_indices);
        for line in &l.lines {
            marks.mark(Table::Function, line.function_index);
        }
    }
    for f in &d.function_table {
        marks.mark(Table::String, f.name_strindex);
        marks.mark(Table::String, f.system_name_strindex);
        marks.mark(Table::String, f.filename_strindex);
    }
    for a in &d.attribute_table {
        marks.mark(Table::String, a.key_strindex);
        marks.mark(Table::String, a.unit_strindex);
        if let Some(value) = &a.value {
            walk_value(&mut marks, nowhere, value);
        }
    }
    for s in &d.stack_table {
        marks.mark_all(Table::Location, &s.location_indices);
    }

    let tables = [
        Table::String,
        Table::Mapping,
        Table::Location,
        Table::Function,
        Table::Link,
        Table::Attribute,
        Table::Stack,
    ];
    for table in tables {
        for (i, referenced) in marks.table(table).iter().enumerate() {
            if !referenced {
                c.push(
                    Elem(&"dictionary", table.name(), i),
                    "orphan (nothing references it)",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{assert_only_with, dict, profile, valid};
    use super::super::{check, CheckOptions};
    use crate::otlp::{
        any_value::Value, AnyValue, Function, KeyValue, KeyValueAndUnit, Link, Location, Mapping,
        Stack,
    };

    const ORPHANS: CheckOptions = CheckOptions {
        dupes: false,
        orphans: true,
        sample_shapes: true,
    };

    fn assert_orphan(data: &crate::otlp::ProfilesData, path: &str) {
        assert_only_with(data, &ORPHANS, path, "orphan (nothing references it)");
        assert_eq!(check(data, &CheckOptions::default()), Vec::new());
    }

    #[test]
    fn orphan_string() {
        let mut data = valid();
        dict(&mut data).string_table.push("unused".into());
        assert_orphan(&data, "dictionary.string_table[9]");
    }

    #[test]
    fn orphan_mapping() {
        let mut data = valid();
        dict(&mut data).mapping_table.push(Mapping {
            memory_start: 1,
            memory_limit: 2,
            ..Mapping::default()
        });
        assert_orphan(&data, "dictionary.mapping_table[2]");
    }

    #[test]
    fn orphan_location() {
        let mut data = valid();
        dict(&mut data).location_table.push(Location {
            address: 9,
            ..Location::default()
        });
        assert_orphan(&data, "dictionary.location_table[2]");
    }

    #[test]
    fn orphan_function() {
        let mut data = valid();
        dict(&mut data).function_table.push(Function {
            name_strindex: 4,
            ..Function::default()
        });
        assert_orphan(&data, "dictionary.function_table[2]");
    }

    #[test]
    fn orphan_link() {
        let mut data = valid();
        dict(&mut data).link_table.push(Link {
            trace_id: vec![3; 16],
            span_id: vec![4; 8],
        });
        assert_orphan(&data, "dictionary.link_table[2]");
    }

    #[test]
    fn orphan_attribute() {
        let mut data = valid();
        dict(&mut data).attribute_table.push(KeyValueAndUnit {
            key_strindex: 6,
            value: Some(AnyValue {
                value: Some(Value::BoolValue(true)),
            }),
            unit_strindex: 0,
        });
        assert_orphan(&data, "dictionary.attribute_table[2]");
    }

    #[test]
    fn orphan_stack() {
        let mut data = valid();
        dict(&mut data).stack_table.push(Stack {
            location_indices: vec![1, 1],
        });
        assert_orphan(&data, "dictionary.stack_table[2]");
    }

    #[test]
    fn resource_and_scope_references_count() {
        // The fixture's strings 7 and 8 are used only by the resource attribute.
        let mut data = valid();
        assert_eq!(check(&data, &ORPHANS), Vec::new());
        data.resource_profiles[0].resource = None;
        let found: Vec<String> = check(&data, &ORPHANS)
            .iter()
            .map(|v| v.path.clone())
            .collect();
        assert_eq!(
            found,
            ["dictionary.string_table[7]", "dictionary.string_table[8]"]
        );
        // A scope attribute nested in a list counts as well.
        let nested = AnyValue {
            value: Some(Value::ArrayValue(crate::otlp::ArrayValue {
                values: vec![AnyValue {
                    value: Some(Value::StringValueStrindex(8)),
                }],
            })),
        };
        data.resource_profiles[0].scope_profiles[0].scope =
            Some(crate::otlp::InstrumentationScope {
                attributes: vec![KeyValue {
                    key: String::new(),
                    value: Some(nested),
                    key_strindex: 7,
                }],
                ..Default::default()
            });
        assert_eq!(check(&data, &ORPHANS), Vec::new());
    }

    #[test]
    fn attribute_string_values_count() {
        let mut data = valid();
        dict(&mut data).string_table.push("worker".into());
        assert_orphan(&data, "dictionary.string_table[9]");
        dict(&mut data).attribute_table[1].value = Some(AnyValue {
            value: Some(Value::StringValueStrindex(9)),
        });
        assert_eq!(check(&data, &ORPHANS), Vec::new());
    }

    #[test]
    fn references_from_profile_fields_count() {
        let mut data = valid();
        profile(&mut data).samples[0].link_index = 0;
        assert_orphan(&data, "dictionary.link_table[1]");
    }
}
