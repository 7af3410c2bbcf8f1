//! String-table references inside `KeyValue`/`AnyValue` trees: the reference-based resource
//! and scope attributes of proto v1.10 (`key_strindex`, `string_value_strindex`) and the
//! values of `attribute_table` entries.

use std::fmt::Display;

use super::{Checker, Elem, Field, Table};
use crate::otlp::{any_value, AnyValue, KeyValue};

/// Deepest `AnyValue` nesting walked; prost refuses to decode deeper messages anyway.
const MAX_DEPTH: usize = 100;

/// What a walk over attribute trees does with each thing it meets.
pub(super) trait StrRefVisitor {
    /// A non-zero string index at `path`.
    fn strindex(&mut self, path: &dyn Display, idx: i32);

    /// A `KeyValue` at `path`, before its key and value are walked.
    fn key_value(&mut self, _path: &dyn Display, _kv: &KeyValue) {}
}

/// Walks the list `owner.name`, e.g. `resource.attributes`.
pub(super) fn walk_key_values(
    v: &mut dyn StrRefVisitor,
    owner: &dyn Display,
    name: &str,
    kvs: &[KeyValue],
) {
    key_values(v, owner, name, kvs, 0);
}

/// Walks the value at `path`, e.g. `dictionary.attribute_table[3].value`.
pub(super) fn walk_value(v: &mut dyn StrRefVisitor, path: &dyn Display, value: &AnyValue) {
    any(v, path, value, 0);
}

fn key_values(
    v: &mut dyn StrRefVisitor,
    owner: &dyn Display,
    name: &str,
    kvs: &[KeyValue],
    depth: usize,
) {
    for (i, kv) in kvs.iter().enumerate() {
        let path = Elem(owner, name, i);
        v.key_value(&path, kv);
        if kv.key_strindex != 0 {
            v.strindex(&Field(&path, "key_strindex"), kv.key_strindex);
        }
        if let Some(value) = &kv.value {
            any(v, &Field(&path, "value"), value, depth);
        }
    }
}

fn any(v: &mut dyn StrRefVisitor, path: &dyn Display, value: &AnyValue, depth: usize) {
    if depth >= MAX_DEPTH {
        return;
    }
    match &value.value {
        Some(any_value::Value::StringValueStrindex(idx)) if *idx != 0 => {
            v.strindex(&Field(path, "string_value_strindex"), *idx);
        }
        Some(any_value::Value::ArrayValue(array)) => {
            let array_path = Field(path, "array_value");
            for (i, item) in array.values.iter().enumerate() {
                any(v, &Elem(&array_path, "values", i), item, depth + 1);
            }
        }
        Some(any_value::Value::KvlistValue(list)) => {
            key_values(
                v,
                &Field(path, "kvlist_value"),
                "values",
                &list.values,
                depth + 1,
            );
        }
        _ => {}
    }
}

/// Range-checks every string reference and the `key`/`key_strindex` exclusivity MUST.
pub(super) struct RangeCheck<'c, 'a>(pub(super) &'c mut Checker<'a>);

impl StrRefVisitor for RangeCheck<'_, '_> {
    fn strindex(&mut self, path: &dyn Display, idx: i32) {
        self.0.index(path, idx, Table::String);
    }

    fn key_value(&mut self, path: &dyn Display, kv: &KeyValue) {
        if !kv.key.is_empty() && kv.key_strindex != 0 {
            self.0.push(
                path,
                "key and key_strindex are both set (at most one may be)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{assert_only, valid};
    use crate::otlp::{any_value::Value, AnyValue, ArrayValue, KeyValue, KeyValueList};

    const R: &str = "resource_profiles[0].resource.attributes";

    #[test]
    fn resource_key_strindex_out_of_range() {
        let mut data = valid();
        let attrs = &mut data.resource_profiles[0]
            .resource
            .get_or_insert_default()
            .attributes;
        attrs[0].key_strindex = 99;
        assert_only(
            &data,
            &format!("{R}[0].key_strindex"),
            "99 out of range (string_table has",
        );
    }

    #[test]
    fn nested_string_value_strindex_out_of_range() {
        let mut data = valid();
        let inner = KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValueStrindex(-4)),
            }),
            key_strindex: 0,
        };
        let array = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(Value::KvlistValue(KeyValueList {
                        values: vec![inner],
                    })),
                }],
            })),
        };
        data.resource_profiles[0].scope_profiles[0]
            .scope
            .get_or_insert_default()
            .attributes
            .push(KeyValue {
                key: "nested".into(),
                value: Some(array),
                key_strindex: 0,
            });
        assert_only(
            &data,
            "resource_profiles[0].scope_profiles[0].scope.attributes[0].value.array_value\
             .values[0].kvlist_value.values[0].value.string_value_strindex",
            "-4 out of range",
        );
    }

    #[test]
    fn key_and_key_strindex_both_set() {
        let mut data = valid();
        data.resource_profiles[0]
            .resource
            .get_or_insert_default()
            .attributes[0]
            .key = "service.name".into();
        assert_only(
            &data,
            &format!("{R}[0]"),
            "key and key_strindex are both set",
        );
    }

    #[test]
    fn very_deep_nesting_is_cut_off_without_overflow() {
        let mut value = AnyValue {
            value: Some(Value::StringValueStrindex(-1)),
        };
        for _ in 0..1_000 {
            value = AnyValue {
                value: Some(Value::ArrayValue(ArrayValue {
                    values: vec![value],
                })),
            };
        }
        let mut data = valid();
        data.resource_profiles[0]
            .resource
            .get_or_insert_default()
            .attributes
            .push(KeyValue {
                key: "deep".into(),
                value: Some(value),
                key_strindex: 0,
            });
        // The string reference sits below the walked depth, so nothing is reported.
        assert_eq!(super::super::check(&data, &Default::default()), Vec::new());
    }
}
