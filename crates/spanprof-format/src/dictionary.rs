//! Building a deduplicated `ProfilesDictionary`: every table starts with its zero entry and
//! each distinct value is stored once, so indices can be compared instead of values.

use hashbrown::HashMap;
use prost::Message;

use crate::otlp::{
    any_value, AnyValue, Function, KeyValueAndUnit, Line, Link, Location, Mapping,
    ProfilesDictionary, Stack,
};

/// Interns strings, functions, mappings, locations, stacks, attributes and links into one
/// `ProfilesDictionary`, deduplicating each table by value.
#[derive(Debug)]
pub struct DictionaryBuilder {
    dict: ProfilesDictionary,
    strings: HashMap<Box<str>, i32>,
    functions: HashMap<(i32, i32, i32, i64), i32>,
    mappings: HashMap<MappingKey, i32>,
    locations: HashMap<LocationKey, i32>,
    stacks: HashMap<Box<[i32]>, i32>,
    attributes: HashMap<AttributeKey, i32>,
    links: HashMap<([u8; 16], [u8; 8]), i32>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MappingKey {
    memory_start: u64,
    memory_limit: u64,
    file_offset: u64,
    filename: i32,
    attributes: Box<[i32]>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LocationKey {
    mapping: i32,
    address: u64,
    lines: Box<[(i32, i64, i64)]>,
    attributes: Box<[i32]>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AttributeKey {
    key: i32,
    unit: i32,
    value: ValueKey,
}

/// An attribute value in hashable form; doubles by bit pattern, nested values by encoding.
#[derive(Debug, PartialEq, Eq, Hash)]
enum ValueKey {
    Unset,
    Str(Box<str>),
    Bool(bool),
    Int(i64),
    Double(u64),
    Bytes(Box<[u8]>),
    StrIndex(i32),
    Encoded(Box<[u8]>),
}

impl ValueKey {
    fn of(value: &Option<AnyValue>) -> ValueKey {
        match value.as_ref().and_then(|v| v.value.as_ref()) {
            None => ValueKey::Unset,
            Some(any_value::Value::StringValue(s)) => ValueKey::Str(s.as_str().into()),
            Some(any_value::Value::BoolValue(b)) => ValueKey::Bool(*b),
            Some(any_value::Value::IntValue(i)) => ValueKey::Int(*i),
            Some(any_value::Value::DoubleValue(d)) => ValueKey::Double(d.to_bits()),
            Some(any_value::Value::BytesValue(b)) => ValueKey::Bytes(b.as_slice().into()),
            Some(any_value::Value::StringValueStrindex(i)) => ValueKey::StrIndex(*i),
            Some(other @ (any_value::Value::ArrayValue(_) | any_value::Value::KvlistValue(_))) => {
                ValueKey::Encoded(
                    AnyValue {
                        value: Some(other.clone()),
                    }
                    .encode_to_vec()
                    .into(),
                )
            }
        }
    }
}

impl Default for DictionaryBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DictionaryBuilder {
    /// An empty dictionary holding only the zero entry of each table.
    pub fn new() -> Self {
        let mut b = DictionaryBuilder {
            dict: ProfilesDictionary {
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                function_table: vec![Function::default()],
                // The empty Link{} (not 16/8 zero bytes): what pdata writes and profcheck accepts.
                link_table: vec![Link::default()],
                string_table: vec![String::new()],
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![Stack::default()],
            },
            strings: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
            attributes: HashMap::new(),
            links: HashMap::new(),
        };
        b.strings.insert("".into(), 0);
        b
    }

    /// Makes room for about this many more entries per table, so that building the
    /// dictionary of one input does not rehash as it grows.
    pub fn reserve(&mut self, strings: usize, functions: usize, locations: usize, stacks: usize) {
        self.strings.reserve(strings);
        self.dict.string_table.reserve(strings);
        self.functions.reserve(functions);
        self.dict.function_table.reserve(functions);
        self.locations.reserve(locations);
        self.dict.location_table.reserve(locations);
        self.stacks.reserve(stacks);
        self.dict.stack_table.reserve(stacks);
        self.links.reserve(stacks);
        self.dict.link_table.reserve(stacks);
    }

    /// The index of `s` in the string table.
    pub fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = next_index(self.dict.string_table.len());
        self.dict.string_table.push(s.to_owned());
        self.strings.insert(s.into(), i);
        i
    }

    /// The index of a function whose string fields are already indices of this dictionary.
    pub fn function(&mut self, f: Function) -> i32 {
        let key = (
            f.name_strindex,
            f.system_name_strindex,
            f.filename_strindex,
            f.start_line,
        );
        if key == (0, 0, 0, 0) {
            return 0;
        }
        let table = &mut self.dict.function_table;
        *self.functions.entry(key).or_insert_with(|| {
            table.push(f);
            next_index(table.len() - 1)
        })
    }

    /// The index of a mapping whose string and attribute fields are indices of this dictionary.
    pub fn mapping(&mut self, m: Mapping) -> i32 {
        let mut attributes: Box<[i32]> = m.attribute_indices.as_slice().into();
        attributes.sort_unstable();
        let key = MappingKey {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename: m.filename_strindex,
            attributes,
        };
        if m == Mapping::default() {
            return 0;
        }
        let table = &mut self.dict.mapping_table;
        *self.mappings.entry(key).or_insert_with(|| {
            table.push(m);
            next_index(table.len() - 1)
        })
    }

    /// The index of a location whose mapping, function and attribute fields are indices of
    /// this dictionary. Line order is kept: it is the inlining order.
    pub fn location(&mut self, l: Location) -> i32 {
        let mut attributes: Box<[i32]> = l.attribute_indices.as_slice().into();
        attributes.sort_unstable();
        let key = LocationKey {
            mapping: l.mapping_index,
            address: l.address,
            lines: l
                .lines
                .iter()
                .map(|x: &Line| (x.function_index, x.line, x.column))
                .collect(),
            attributes,
        };
        if l == Location::default() {
            return 0;
        }
        let table = &mut self.dict.location_table;
        *self.locations.entry(key).or_insert_with(|| {
            table.push(l);
            next_index(table.len() - 1)
        })
    }

    /// The index of the stack of `locations` (leaf first).
    pub fn stack(&mut self, locations: &[i32]) -> i32 {
        if locations.is_empty() {
            return 0;
        }
        if let Some(&i) = self.stacks.get(locations) {
            return i;
        }
        let i = next_index(self.dict.stack_table.len());
        self.dict.stack_table.push(Stack {
            location_indices: locations.to_vec(),
        });
        self.stacks.insert(locations.into(), i);
        i
    }

    /// The index of an attribute; `key` and `unit` are string indices of this dictionary.
    pub fn attribute(&mut self, key: i32, value: Option<AnyValue>, unit: i32) -> i32 {
        let k = AttributeKey {
            key,
            unit,
            value: ValueKey::of(&value),
        };
        if k.key == 0 && k.unit == 0 && k.value == ValueKey::Unset {
            return 0;
        }
        let table = &mut self.dict.attribute_table;
        *self.attributes.entry(k).or_insert_with(|| {
            table.push(KeyValueAndUnit {
                key_strindex: key,
                value,
                unit_strindex: unit,
            });
            next_index(table.len() - 1)
        })
    }

    /// The index of a string attribute `key = value`.
    pub fn string_attribute(&mut self, key: &str, value: &str) -> i32 {
        let key = self.string(key);
        self.attribute(key, Some(string_value(value)), 0)
    }

    /// The index of the link to (`trace_id`, `span_id`).
    pub fn link(&mut self, trace_id: [u8; 16], span_id: [u8; 8]) -> i32 {
        let table = &mut self.dict.link_table;
        *self.links.entry((trace_id, span_id)).or_insert_with(|| {
            table.push(Link {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
            });
            next_index(table.len() - 1)
        })
    }

    /// Number of links so far, not counting the zero entry.
    pub fn link_count(&self) -> usize {
        self.dict.link_table.len() - 1
    }

    /// The tables built so far.
    pub fn tables(&self) -> &ProfilesDictionary {
        &self.dict
    }

    /// The finished dictionary.
    pub fn finish(self) -> ProfilesDictionary {
        self.dict
    }
}

/// An `AnyValue` holding a string.
pub fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

fn next_index(len: usize) -> i32 {
    // Tables are bounded by the 64 MiB input limit long before i32::MAX entries.
    i32::try_from(len).expect("dictionary table exceeds i32::MAX entries")
}
