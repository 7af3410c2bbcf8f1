//! Building a deduplicated `ProfilesDictionary`: every table starts with its zero entry and
//! each distinct value is stored once, so indices can be compared instead of values.

use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use prost::Message;

use crate::otlp::{
    any_value, AnyValue, Function, KeyValueAndUnit, Link, Location, Mapping, ProfilesDictionary,
    Stack,
};

/// Interns strings, functions, mappings, locations, stacks, attributes and links into one
/// `ProfilesDictionary`, deduplicating each table by value.
#[derive(Debug)]
pub struct DictionaryBuilder {
    dict: ProfilesDictionary,
    /// Strings, stacks and attributes are looked up by the table entries themselves (no
    /// copy of each as a key): indices into `dict`'s tables, hashed with `hasher`.
    hasher: DefaultHashBuilder,
    strings: HashTable<i32>,
    functions: HashMap<(i32, i32, i32, i64), i32>,
    mappings: HashMap<MappingKey, i32>,
    /// Indices into `dict.location_table`, hashed with [`location_hash`].
    locations: HashTable<i32>,
    stacks: HashTable<i32>,
    attributes: HashTable<i32>,
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

/// A location's identity, hashed: its mapping, address and lines in order, and its
/// attributes as a set (order-free, so no sorted copy is made).
fn location_hash(hasher: &DefaultHashBuilder, l: &Location) -> u64 {
    let mut h = hasher.build_hasher();
    (l.mapping_index, l.address, l.lines.len()).hash(&mut h);
    for x in &l.lines {
        (x.function_index, x.line, x.column).hash(&mut h);
    }
    let attrs = &l.attribute_indices;
    let (sum, xor) = attrs
        .iter()
        .fold((0i32, 0i32), |(s, x), &a| (s.wrapping_add(a), x ^ a));
    (attrs.len(), sum, xor).hash(&mut h);
    h.finish()
}

/// Whether two locations are the same location: what [`location_hash`] hashes, equal.
fn same_location(a: &Location, b: &Location) -> bool {
    let count = |v: &[i32], x: i32| v.iter().filter(|&&y| y == x).count();
    a.mapping_index == b.mapping_index
        && a.address == b.address
        && a.lines == b.lines
        && a.attribute_indices.len() == b.attribute_indices.len()
        && a.attribute_indices
            .iter()
            .all(|&x| count(&a.attribute_indices, x) == count(&b.attribute_indices, x))
}

/// An attribute as a dedup key: key, unit and the value in hashable form.
#[derive(Debug, PartialEq, Eq, Hash)]
struct AttributeKey<'a> {
    key: i32,
    unit: i32,
    value: ValueKey<'a>,
}

impl<'a> AttributeKey<'a> {
    fn of(a: &'a KeyValueAndUnit) -> Self {
        AttributeKey {
            key: a.key_strindex,
            unit: a.unit_strindex,
            value: ValueKey::of(&a.value),
        }
    }
}

/// An attribute value in hashable form, borrowed; doubles by bit pattern, nested values by
/// encoding (the only case that allocates).
#[derive(Debug, PartialEq, Eq, Hash)]
enum ValueKey<'a> {
    Unset,
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(u64),
    Bytes(&'a [u8]),
    StrIndex(i32),
    Encoded(Vec<u8>),
}

impl<'a> ValueKey<'a> {
    fn of(value: &'a Option<AnyValue>) -> ValueKey<'a> {
        match value.as_ref().and_then(|v| v.value.as_ref()) {
            None => ValueKey::Unset,
            Some(any_value::Value::StringValue(s)) => ValueKey::Str(s),
            Some(any_value::Value::BoolValue(b)) => ValueKey::Bool(*b),
            Some(any_value::Value::IntValue(i)) => ValueKey::Int(*i),
            Some(any_value::Value::DoubleValue(d)) => ValueKey::Double(d.to_bits()),
            Some(any_value::Value::BytesValue(b)) => ValueKey::Bytes(b),
            Some(any_value::Value::StringValueStrindex(i)) => ValueKey::StrIndex(*i),
            Some(other @ (any_value::Value::ArrayValue(_) | any_value::Value::KvlistValue(_))) => {
                ValueKey::Encoded(
                    AnyValue {
                        value: Some(other.clone()),
                    }
                    .encode_to_vec(),
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
            hasher: DefaultHashBuilder::default(),
            strings: HashTable::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashTable::new(),
            stacks: HashTable::new(),
            attributes: HashTable::new(),
            links: HashMap::new(),
        };
        let empty = b.hasher.hash_one("");
        b.strings.insert_unique(empty, 0, |_| empty);
        b
    }

    /// Makes room for about this many more entries per table, so that building the
    /// dictionary of one input does not rehash as it grows.
    pub fn reserve(&mut self, strings: usize, functions: usize, locations: usize, stacks: usize) {
        let (hasher, table) = (&self.hasher, &self.dict.string_table);
        self.strings
            .reserve(strings, |&i| hasher.hash_one(table[i as usize].as_str()));
        self.dict.string_table.reserve(strings);
        self.functions.reserve(functions);
        self.dict.function_table.reserve(functions);
        let table = &self.dict.location_table;
        self.locations
            .reserve(locations, |&i| location_hash(hasher, &table[i as usize]));
        self.dict.location_table.reserve(locations);
        let table = &self.dict.stack_table;
        self.stacks.reserve(stacks, |&i| {
            hasher.hash_one(table[i as usize].location_indices.as_slice())
        });
        self.dict.stack_table.reserve(stacks);
        self.links.reserve(stacks);
        self.dict.link_table.reserve(stacks);
    }

    /// The index of `s` in the string table.
    pub fn string(&mut self, s: &str) -> i32 {
        let hash = self.hasher.hash_one(s);
        let table = &self.dict.string_table;
        if let Some(&i) = self.strings.find(hash, |&i| table[i as usize] == s) {
            return i;
        }
        let i = next_index(table.len());
        self.dict.string_table.push(s.to_owned());
        let (hasher, table) = (&self.hasher, &self.dict.string_table);
        self.strings
            .insert_unique(hash, i, |&i| hasher.hash_one(table[i as usize].as_str()));
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
        if l == Location::default() {
            return 0;
        }
        let hash = location_hash(&self.hasher, &l);
        let table = &self.dict.location_table;
        if let Some(&i) = self
            .locations
            .find(hash, |&i| same_location(&table[i as usize], &l))
        {
            return i;
        }
        let i = next_index(table.len());
        self.dict.location_table.push(l);
        let (hasher, table) = (&self.hasher, &self.dict.location_table);
        self.locations
            .insert_unique(hash, i, |&i| location_hash(hasher, &table[i as usize]));
        i
    }

    /// The index of the stack of `locations` (leaf first).
    pub fn stack(&mut self, locations: &[i32]) -> i32 {
        if locations.is_empty() {
            return 0;
        }
        let hash = self.hasher.hash_one(locations);
        let table = &self.dict.stack_table;
        let same = |&i: &i32| table[i as usize].location_indices == locations;
        if let Some(&i) = self.stacks.find(hash, same) {
            return i;
        }
        let i = next_index(table.len());
        self.dict.stack_table.push(Stack {
            location_indices: locations.to_vec(),
        });
        let (hasher, table) = (&self.hasher, &self.dict.stack_table);
        self.stacks.insert_unique(hash, i, |&i| {
            hasher.hash_one(table[i as usize].location_indices.as_slice())
        });
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
        let hash = self.hasher.hash_one(&k);
        let table = &self.dict.attribute_table;
        let same = |&i: &i32| AttributeKey::of(&table[i as usize]) == k;
        if let Some(&i) = self.attributes.find(hash, same) {
            return i;
        }
        drop(k);
        let i = next_index(table.len());
        self.dict.attribute_table.push(KeyValueAndUnit {
            key_strindex: key,
            value,
            unit_strindex: unit,
        });
        let (hasher, table) = (&self.hasher, &self.dict.attribute_table);
        self.attributes.insert_unique(hash, i, |&i| {
            hasher.hash_one(AttributeKey::of(&table[i as usize]))
        });
        i
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::Line;

    fn loc(address: u64, functions: &[i32], attributes: &[i32]) -> Location {
        Location {
            mapping_index: 1,
            address,
            lines: functions
                .iter()
                .map(|&f| Line {
                    function_index: f,
                    line: 10,
                    column: 0,
                })
                .collect(),
            attribute_indices: attributes.to_vec(),
        }
    }

    #[test]
    fn locations_are_one_entry_per_identity_with_attributes_as_a_set() {
        let mut b = DictionaryBuilder::new();
        assert_eq!(b.location(Location::default()), 0);
        let first = b.location(loc(0x10, &[1, 2], &[3, 4]));
        assert_eq!(first, 1);
        // Attributes in another order: the same location, kept as first given.
        assert_eq!(b.location(loc(0x10, &[1, 2], &[4, 3])), first);
        // Line order is inlining order; other attributes, a repeated one, another address:
        // other locations.
        let others = [
            loc(0x10, &[2, 1], &[3, 4]),
            loc(0x10, &[1, 2], &[3, 5]),
            loc(0x10, &[1, 2], &[3, 3]),
            loc(0x10, &[1, 2], &[3]),
            loc(0x11, &[1, 2], &[3, 4]),
        ];
        for (n, l) in others.iter().enumerate() {
            assert_eq!(b.location(l.clone()), n as i32 + 2, "{l:?}");
        }
        for (n, l) in others.iter().enumerate() {
            assert_eq!(b.location(l.clone()), n as i32 + 2, "{l:?} again");
        }
        let d = b.finish();
        assert_eq!(d.location_table.len(), 7);
        assert_eq!(d.location_table[1].attribute_indices, [3, 4]);
    }
}
