//! prost messages → OTLP JSON text. Fields come in proto field-number order and are left out
//! at their proto3 default; message fields that are set are written even when empty (`{}`).

use std::fmt::Write;

use opentelemetry_proto::tonic::common::v1::EntityRef;

use super::{base64, hex};
use crate::otlp::{
    any_value, AnyValue, Function, InstrumentationScope, KeyValue, KeyValueAndUnit, Line, Link,
    Location, Mapping, Profile, ProfilesData, ProfilesDictionary, Resource, ResourceProfiles,
    Sample, ScopeProfiles, Stack, ValueType,
};

/// Writes `data` as one JSON document, indented by two spaces per level when `pretty`.
pub(super) fn document(data: &ProfilesData, pretty: bool) -> String {
    let mut w = Writer {
        out: String::with_capacity(4096),
        pretty,
        depth: 0,
        empty: true,
    };
    profiles_data(&mut w, data);
    w.out
}

/// A JSON text under construction: separators, indentation and scalar formatting.
pub(crate) struct Writer {
    pub(crate) out: String,
    pub(crate) pretty: bool,
    /// Open objects and arrays.
    pub(crate) depth: usize,
    /// Whether the innermost open object or array has no member yet.
    pub(crate) empty: bool,
}

impl Writer {
    fn open(&mut self, bracket: char) {
        self.out.push(bracket);
        self.depth += 1;
        self.empty = true;
    }

    fn close(&mut self, bracket: char) {
        self.depth -= 1;
        if !self.empty {
            self.newline();
        }
        self.out.push(bracket);
        // The enclosing object or array holds at least this value.
        self.empty = false;
    }

    fn newline(&mut self) {
        if self.pretty {
            self.out.push('\n');
            for _ in 0..self.depth {
                self.out.push_str("  ");
            }
        }
    }

    /// Starts the next member of the innermost object or array.
    fn next_member(&mut self) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.newline();
    }

    fn key(&mut self, name: &str) {
        self.next_member();
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str(if self.pretty { "\": " } else { "\":" });
    }

    pub(crate) fn object(&mut self, members: impl FnOnce(&mut Self)) {
        self.open('{');
        members(self);
        self.close('}');
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        let mut plain_from = 0;
        for (i, &b) in s.as_bytes().iter().enumerate() {
            let escape = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0..=0x1f => "",
                _ => continue,
            };
            // `i` is at an ASCII byte, hence on a char boundary.
            self.out.push_str(&s[plain_from..i]);
            if escape.is_empty() {
                let _ = write!(self.out, "\\u{b:04x}");
            } else {
                self.out.push_str(escape);
            }
            plain_from = i + 1;
        }
        self.out.push_str(&s[plain_from..]);
        self.out.push('"');
    }

    fn unsigned(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &digits[start..] {
            self.out.push(char::from(d));
        }
    }

    fn signed(&mut self, v: i64) {
        if v < 0 {
            self.out.push('-');
        }
        self.unsigned(v.unsigned_abs());
    }

    /// A 64-bit integer, which OTLP JSON writes as a decimal string.
    fn quoted_unsigned(&mut self, v: u64) {
        self.out.push('"');
        self.unsigned(v);
        self.out.push('"');
    }

    fn quoted_signed(&mut self, v: i64) {
        self.out.push('"');
        self.signed(v);
        self.out.push('"');
    }

    fn double(&mut self, v: f64) {
        if v.is_nan() {
            self.out.push_str("\"NaN\"");
        } else if v.is_infinite() {
            self.out.push_str(if v > 0.0 {
                "\"Infinity\""
            } else {
                "\"-Infinity\""
            });
        } else if v == 0.0 || (1e-6..1e21).contains(&v.abs()) {
            // Both forms print the shortest digits that read back to the same double.
            let _ = write!(self.out, "{v}");
        } else {
            let _ = write!(self.out, "{v:e}");
        }
    }

    pub(crate) fn string_field(&mut self, name: &str, v: &str) {
        if !v.is_empty() {
            self.key(name);
            self.string(v);
        }
    }

    pub(crate) fn i32_field(&mut self, name: &str, v: i32) {
        if v != 0 {
            self.key(name);
            self.signed(v.into());
        }
    }

    pub(crate) fn u32_field(&mut self, name: &str, v: u32) {
        if v != 0 {
            self.key(name);
            self.unsigned(v.into());
        }
    }

    pub(crate) fn i64_field(&mut self, name: &str, v: i64) {
        if v != 0 {
            self.key(name);
            self.quoted_signed(v);
        }
    }

    pub(crate) fn u64_field(&mut self, name: &str, v: u64) {
        if v != 0 {
            self.key(name);
            self.quoted_unsigned(v);
        }
    }

    fn base64_field(&mut self, name: &str, v: &[u8]) {
        if !v.is_empty() {
            self.key(name);
            self.out.push('"');
            base64::encode_into(v, &mut self.out);
            self.out.push('"');
        }
    }

    pub(crate) fn hex_field(&mut self, name: &str, v: &[u8]) {
        if !v.is_empty() {
            self.key(name);
            self.out.push('"');
            hex::encode_into(v, &mut self.out);
            self.out.push('"');
        }
    }

    pub(crate) fn message_field<T>(&mut self, name: &str, v: Option<&T>, write: fn(&mut Self, &T)) {
        if let Some(v) = v {
            self.key(name);
            write(self, v);
        }
    }

    pub(crate) fn list_field<T>(
        &mut self,
        name: &str,
        items: &[T],
        mut write: impl FnMut(&mut Self, &T),
    ) {
        if items.is_empty() {
            return;
        }
        self.key(name);
        self.open('[');
        for item in items {
            self.next_member();
            write(self, item);
        }
        self.close(']');
    }

    fn i32s_field(&mut self, name: &str, items: &[i32]) {
        self.list_field(name, items, |w, &v| w.signed(v.into()));
    }
}

fn profiles_data(w: &mut Writer, m: &ProfilesData) {
    w.object(|w| {
        w.list_field("resourceProfiles", &m.resource_profiles, resource_profiles);
        w.message_field("dictionary", m.dictionary.as_ref(), dictionary);
    });
}

fn dictionary(w: &mut Writer, m: &ProfilesDictionary) {
    w.object(|w| {
        w.list_field("mappingTable", &m.mapping_table, mapping);
        w.list_field("locationTable", &m.location_table, location);
        w.list_field("functionTable", &m.function_table, function);
        w.list_field("linkTable", &m.link_table, link);
        w.list_field("stringTable", &m.string_table, |w, s| w.string(s));
        w.list_field("attributeTable", &m.attribute_table, key_value_and_unit);
        w.list_field("stackTable", &m.stack_table, stack);
    });
}

fn resource_profiles(w: &mut Writer, m: &ResourceProfiles) {
    w.object(|w| {
        w.message_field("resource", m.resource.as_ref(), resource);
        w.list_field("scopeProfiles", &m.scope_profiles, scope_profiles);
        w.string_field("schemaUrl", &m.schema_url);
    });
}

pub(crate) fn resource(w: &mut Writer, m: &Resource) {
    w.object(|w| {
        w.list_field("attributes", &m.attributes, key_value);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
        w.list_field("entityRefs", &m.entity_refs, entity_ref);
    });
}

fn entity_ref(w: &mut Writer, m: &EntityRef) {
    w.object(|w| {
        w.string_field("schemaUrl", &m.schema_url);
        w.string_field("type", &m.r#type);
        w.list_field("idKeys", &m.id_keys, |w, s| w.string(s));
        w.list_field("descriptionKeys", &m.description_keys, |w, s| w.string(s));
    });
}

fn scope_profiles(w: &mut Writer, m: &ScopeProfiles) {
    w.object(|w| {
        w.message_field("scope", m.scope.as_ref(), scope);
        w.list_field("profiles", &m.profiles, profile);
        w.string_field("schemaUrl", &m.schema_url);
    });
}

pub(crate) fn scope(w: &mut Writer, m: &InstrumentationScope) {
    w.object(|w| {
        w.string_field("name", &m.name);
        w.string_field("version", &m.version);
        w.list_field("attributes", &m.attributes, key_value);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
    });
}

fn profile(w: &mut Writer, m: &Profile) {
    w.object(|w| {
        w.message_field("sampleType", m.sample_type.as_ref(), value_type);
        w.list_field("samples", &m.samples, sample);
        w.u64_field("timeUnixNano", m.time_unix_nano);
        w.u64_field("durationNano", m.duration_nano);
        w.message_field("periodType", m.period_type.as_ref(), value_type);
        w.i64_field("period", m.period);
        w.hex_field("profileId", &m.profile_id);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
        w.string_field("originalPayloadFormat", &m.original_payload_format);
        w.base64_field("originalPayload", &m.original_payload);
        w.i32s_field("attributeIndices", &m.attribute_indices);
    });
}

fn sample(w: &mut Writer, m: &Sample) {
    w.object(|w| {
        w.i32_field("stackIndex", m.stack_index);
        w.i32s_field("attributeIndices", &m.attribute_indices);
        w.i32_field("linkIndex", m.link_index);
        w.list_field("values", &m.values, |w, &v| w.quoted_signed(v));
        w.list_field("timestampsUnixNano", &m.timestamps_unix_nano, |w, &v| {
            w.quoted_unsigned(v);
        });
    });
}

fn value_type(w: &mut Writer, m: &ValueType) {
    w.object(|w| {
        w.i32_field("typeStrindex", m.type_strindex);
        w.i32_field("unitStrindex", m.unit_strindex);
    });
}

fn mapping(w: &mut Writer, m: &Mapping) {
    w.object(|w| {
        w.u64_field("memoryStart", m.memory_start);
        w.u64_field("memoryLimit", m.memory_limit);
        w.u64_field("fileOffset", m.file_offset);
        w.i32_field("filenameStrindex", m.filename_strindex);
        w.i32s_field("attributeIndices", &m.attribute_indices);
    });
}

fn location(w: &mut Writer, m: &Location) {
    w.object(|w| {
        w.i32_field("mappingIndex", m.mapping_index);
        w.u64_field("address", m.address);
        w.list_field("lines", &m.lines, line);
        w.i32s_field("attributeIndices", &m.attribute_indices);
    });
}

fn line(w: &mut Writer, m: &Line) {
    w.object(|w| {
        w.i32_field("functionIndex", m.function_index);
        w.i64_field("line", m.line);
        w.i64_field("column", m.column);
    });
}

fn function(w: &mut Writer, m: &Function) {
    w.object(|w| {
        w.i32_field("nameStrindex", m.name_strindex);
        w.i32_field("systemNameStrindex", m.system_name_strindex);
        w.i32_field("filenameStrindex", m.filename_strindex);
        w.i64_field("startLine", m.start_line);
    });
}

fn link(w: &mut Writer, m: &Link) {
    w.object(|w| {
        w.hex_field("traceId", &m.trace_id);
        w.hex_field("spanId", &m.span_id);
    });
}

fn stack(w: &mut Writer, m: &Stack) {
    w.object(|w| w.i32s_field("locationIndices", &m.location_indices));
}

fn key_value_and_unit(w: &mut Writer, m: &KeyValueAndUnit) {
    w.object(|w| {
        w.i32_field("keyStrindex", m.key_strindex);
        w.message_field("value", m.value.as_ref(), any_value);
        w.i32_field("unitStrindex", m.unit_strindex);
    });
}

pub(crate) fn key_value(w: &mut Writer, m: &KeyValue) {
    w.object(|w| {
        w.string_field("key", &m.key);
        w.message_field("value", m.value.as_ref(), any_value);
        w.i32_field("keyStrindex", m.key_strindex);
    });
}

/// Writes the set member of the oneof even at its default: `{"intValue":"0"}` is not `{}`.
fn any_value(w: &mut Writer, m: &AnyValue) {
    use any_value::Value;
    w.object(|w| match &m.value {
        None => {}
        Some(Value::StringValue(s)) => {
            w.key("stringValue");
            w.string(s);
        }
        Some(Value::BoolValue(b)) => {
            w.key("boolValue");
            w.out.push_str(if *b { "true" } else { "false" });
        }
        Some(Value::IntValue(v)) => {
            w.key("intValue");
            w.quoted_signed(*v);
        }
        Some(Value::DoubleValue(v)) => {
            w.key("doubleValue");
            w.double(*v);
        }
        Some(Value::ArrayValue(array)) => {
            w.key("arrayValue");
            w.object(|w| w.list_field("values", &array.values, any_value));
        }
        Some(Value::KvlistValue(list)) => {
            w.key("kvlistValue");
            w.object(|w| w.list_field("values", &list.values, key_value));
        }
        Some(Value::BytesValue(bytes)) => {
            w.key("bytesValue");
            w.out.push('"');
            base64::encode_into(bytes, &mut w.out);
            w.out.push('"');
        }
        Some(Value::StringValueStrindex(i)) => {
            w.key("stringValueStrindex");
            w.signed((*i).into());
        }
    });
}
