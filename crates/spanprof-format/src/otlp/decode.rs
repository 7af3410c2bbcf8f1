//! An OTLP `ProfilesData` decoder written for this one message tree, as
//! [`crate::pprof::decode`] is for pprof: the dictionary's tables, a profile's samples and
//! every packed field are sized exactly before they are filled, and there is no generic merge
//! loop. Its semantics are prost's (see [`crate::wire`]): a repeated singular message merges
//! into the first, a later scalar or string replaces an earlier one, a oneof takes the last
//! variant given. prost's derived decoder is the oracle of the tests below. Errors name the
//! field path, e.g. `dictionary.stack_table[3]: Stack field 1 has wire type 5, …`.
//!
//! `ExportProfilesServiceRequest` has the same fields as `ProfilesData`, so this decodes both.

use std::fmt::Display;

use opentelemetry_proto::tonic::common::v1::EntityRef;

use super::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, KeyValueAndUnit,
    KeyValueList, Line, Link, Location, Mapping, Profile, ProfilesData, ProfilesDictionary,
    Resource, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use crate::check::{SampleFields, Tally};
use crate::wire::{
    message, repeated, scalar, too_deep, wrong, DecodeError, Reader, I64, LEN, RECURSION_LIMIT,
};

/// A decoding error and the path of the field it is in.
struct Error {
    path: String,
    msg: String,
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error {
            path: String::new(),
            msg: e.0,
        }
    }
}

impl Error {
    /// The same error, one field further out.
    fn within(mut self, field: impl Display) -> Self {
        self.path = if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{}", self.path)
        };
        self
    }
}

type Result<T> = std::result::Result<T, Error>;

/// Decodes an uncompressed OTLP `ProfilesData` (or `ExportProfilesServiceRequest`).
#[cfg(test)]
pub(crate) fn decode_profiles_data(buf: &[u8]) -> std::result::Result<ProfilesData, DecodeError> {
    decode_tallied(buf, &mut Tally::default())
}

/// Decodes an uncompressed OTLP `ProfilesData` (or `ExportProfilesServiceRequest`), adding
/// each sample to `samples` (how its fields would read under the v1.9 numbering).
pub(crate) fn decode_tallied(
    buf: &[u8],
    samples: &mut Tally,
) -> std::result::Result<ProfilesData, DecodeError> {
    let mut data = ProfilesData::default();
    profiles_data(&mut data, Reader::new(buf), RECURSION_LIMIT, samples).map_err(|e| {
        DecodeError(if e.path.is_empty() {
            e.msg
        } else {
            format!("{}: {}", e.path, e.msg)
        })
    })?;
    Ok(data)
}

/// Nesting levels left inside a message that has `left`.
fn nest(left: u32) -> Result<u32> {
    left.checked_sub(1).ok_or_else(|| too_deep().into())
}

/// Appends a default element to `v` and returns its index and itself, to merge into.
fn push<T: Default>(v: &mut Vec<T>) -> (usize, &mut T) {
    v.push(T::default());
    let i = v.len() - 1;
    (i, &mut v[i])
}

fn string(r: &mut Reader, m: &str, field: u64, wire: u8) -> Result<String> {
    let b = bytes(r, m, field, wire)?;
    String::from_utf8(b).map_err(|_| DecodeError(format!("{m} field {field} is not UTF-8")).into())
}

fn bytes(r: &mut Reader, m: &str, field: u64, wire: u8) -> Result<Vec<u8>> {
    if wire != LEN {
        return Err(wrong(m, field, wire).into());
    }
    Ok(r.bytes()?.to_vec())
}

fn fixed64(r: &mut Reader, m: &str, field: u64, wire: u8) -> Result<u64> {
    if wire != I64 {
        return Err(wrong(m, field, wire).into());
    }
    Ok(r.fixed64()?)
}

fn int32(r: &mut Reader, m: &str, field: u64, wire: u8) -> Result<i32> {
    Ok(scalar(r, m, field, wire)? as i32)
}

fn uint32(r: &mut Reader, m: &str, field: u64, wire: u8) -> Result<u32> {
    Ok(scalar(r, m, field, wire)? as u32)
}

fn int32s(r: &mut Reader, out: &mut Vec<i32>, m: &str, field: u64, wire: u8) -> Result<()> {
    Ok(repeated(r, out, m, field, wire, |v| v as i32)?)
}

fn profiles_data(d: &mut ProfilesData, mut r: Reader, left: u32, tally: &mut Tally) -> Result<()> {
    let m = "ProfilesData";
    d.resource_profiles.reserve(r.count_fields::<1>(left)?[0]);
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, rp) = push(&mut d.resource_profiles);
                resource_profiles(rp, sub, nest(left)?, tally)
                    .map_err(|e| e.within(format_args!("resource_profiles[{i}]")))?;
            }
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let dict = d.dictionary.get_or_insert_with(Default::default);
                dictionary(dict, sub, nest(left)?).map_err(|e| e.within("dictionary"))?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn resource_profiles(
    rp: &mut ResourceProfiles,
    mut r: Reader,
    left: u32,
    tally: &mut Tally,
) -> Result<()> {
    let m = "ResourceProfiles";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let res = rp.resource.get_or_insert_with(Default::default);
                resource(res, sub, nest(left)?).map_err(|e| e.within("resource"))?;
            }
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, sp) = push(&mut rp.scope_profiles);
                scope_profiles(sp, sub, nest(left)?, tally)
                    .map_err(|e| e.within(format_args!("scope_profiles[{i}]")))?;
            }
            3 => rp.schema_url = string(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn resource(res: &mut Resource, mut r: Reader, left: u32) -> Result<()> {
    let m = "Resource";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, kv) = push(&mut res.attributes);
                key_value(kv, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("attributes[{i}]")))?;
            }
            2 => res.dropped_attributes_count = uint32(&mut r, m, field, wire)?,
            3 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, e) = push(&mut res.entity_refs);
                entity_ref(e, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("entity_refs[{i}]")))?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn entity_ref(e: &mut EntityRef, mut r: Reader, left: u32) -> Result<()> {
    let m = "EntityRef";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => e.schema_url = string(&mut r, m, field, wire)?,
            2 => e.r#type = string(&mut r, m, field, wire)?,
            3 => e.id_keys.push(string(&mut r, m, field, wire)?),
            4 => e.description_keys.push(string(&mut r, m, field, wire)?),
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn scope_profiles(
    sp: &mut ScopeProfiles,
    mut r: Reader,
    left: u32,
    tally: &mut Tally,
) -> Result<()> {
    let m = "ScopeProfiles";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let scope = sp.scope.get_or_insert_with(Default::default);
                instrumentation_scope(scope, sub, nest(left)?).map_err(|e| e.within("scope"))?;
            }
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, p) = push(&mut sp.profiles);
                profile(p, sub, nest(left)?, tally)
                    .map_err(|e| e.within(format_args!("profiles[{i}]")))?;
            }
            3 => sp.schema_url = string(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn instrumentation_scope(s: &mut InstrumentationScope, mut r: Reader, left: u32) -> Result<()> {
    let m = "InstrumentationScope";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => s.name = string(&mut r, m, field, wire)?,
            2 => s.version = string(&mut r, m, field, wire)?,
            3 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, kv) = push(&mut s.attributes);
                key_value(kv, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("attributes[{i}]")))?;
            }
            4 => s.dropped_attributes_count = uint32(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn profile(p: &mut Profile, mut r: Reader, left: u32, tally: &mut Tally) -> Result<()> {
    let m = "Profile";
    p.samples.reserve(r.count_fields::<2>(left)?[1]);
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let t = p.sample_type.get_or_insert_with(Default::default);
                value_type(t, sub, nest(left)?).map_err(|e| e.within("sample_type"))?;
            }
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, s) = push(&mut p.samples);
                let mut fields = SampleFields::default();
                sample(s, sub, nest(left)?, &mut fields)
                    .map_err(|e| e.within(format_args!("samples[{i}]")))?;
                tally.add(&fields);
            }
            3 => p.time_unix_nano = fixed64(&mut r, m, field, wire)?,
            4 => p.duration_nano = scalar(&mut r, m, field, wire)?,
            5 => {
                let sub = message(&mut r, m, field, wire)?;
                let t = p.period_type.get_or_insert_with(Default::default);
                value_type(t, sub, nest(left)?).map_err(|e| e.within("period_type"))?;
            }
            6 => p.period = scalar(&mut r, m, field, wire)? as i64,
            7 => p.profile_id = bytes(&mut r, m, field, wire)?,
            8 => p.dropped_attributes_count = uint32(&mut r, m, field, wire)?,
            9 => p.original_payload_format = string(&mut r, m, field, wire)?,
            10 => p.original_payload = bytes(&mut r, m, field, wire)?,
            11 => int32s(&mut r, &mut p.attribute_indices, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn value_type(t: &mut ValueType, mut r: Reader, left: u32) -> Result<()> {
    let m = "ValueType";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => t.type_strindex = int32(&mut r, m, field, wire)?,
            2 => t.unit_strindex = int32(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn sample(s: &mut Sample, mut r: Reader, left: u32, fields: &mut SampleFields) -> Result<()> {
    let m = "Sample";
    while !r.done() {
        let (field, wire) = r.key()?;
        fields.note(field, wire);
        match field {
            1 => s.stack_index = int32(&mut r, m, field, wire)?,
            2 => int32s(&mut r, &mut s.attribute_indices, m, field, wire)?,
            3 => s.link_index = int32(&mut r, m, field, wire)?,
            4 => repeated(&mut r, &mut s.values, m, field, wire, |v| v as i64)?,
            5 => match wire {
                I64 => s.timestamps_unix_nano.push(r.fixed64()?),
                LEN => {
                    let packed = r.bytes()?;
                    if packed.len() % 8 != 0 {
                        return Err(DecodeError(format!(
                            "{m} field {field}: packed fixed64 values of {} bytes",
                            packed.len()
                        ))
                        .into());
                    }
                    s.timestamps_unix_nano.extend(
                        packed
                            .chunks_exact(8)
                            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
                    );
                }
                _ => return Err(wrong(m, field, wire).into()),
            },
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn dictionary(d: &mut ProfilesDictionary, mut r: Reader, left: u32) -> Result<()> {
    let m = "ProfilesDictionary";
    let counts = r.count_fields::<7>(left)?;
    d.mapping_table.reserve(counts[0]);
    d.location_table.reserve(counts[1]);
    d.function_table.reserve(counts[2]);
    d.link_table.reserve(counts[3]);
    d.string_table.reserve(counts[4]);
    d.attribute_table.reserve(counts[5]);
    d.stack_table.reserve(counts[6]);
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.mapping_table);
                mapping(x, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("mapping_table[{i}]")))?;
            }
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.location_table);
                location(x, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("location_table[{i}]")))?;
            }
            3 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.function_table);
                function(x, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("function_table[{i}]")))?;
            }
            4 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.link_table);
                link(x, sub, nest(left)?).map_err(|e| e.within(format_args!("link_table[{i}]")))?;
            }
            5 => {
                let i = d.string_table.len();
                let s = string(&mut r, m, field, wire)
                    .map_err(|e| e.within(format_args!("string_table[{i}]")))?;
                d.string_table.push(s);
            }
            6 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.attribute_table);
                key_value_and_unit(x, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("attribute_table[{i}]")))?;
            }
            7 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, x) = push(&mut d.stack_table);
                stack(x, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("stack_table[{i}]")))?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn mapping(x: &mut Mapping, mut r: Reader, left: u32) -> Result<()> {
    let m = "Mapping";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => x.memory_start = scalar(&mut r, m, field, wire)?,
            2 => x.memory_limit = scalar(&mut r, m, field, wire)?,
            3 => x.file_offset = scalar(&mut r, m, field, wire)?,
            4 => x.filename_strindex = int32(&mut r, m, field, wire)?,
            5 => int32s(&mut r, &mut x.attribute_indices, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn location(x: &mut Location, mut r: Reader, left: u32) -> Result<()> {
    let m = "Location";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => x.mapping_index = int32(&mut r, m, field, wire)?,
            2 => x.address = scalar(&mut r, m, field, wire)?,
            3 => {
                let sub = message(&mut r, m, field, wire)?;
                let (i, l) = push(&mut x.lines);
                line(l, sub, nest(left)?).map_err(|e| e.within(format_args!("lines[{i}]")))?;
            }
            4 => int32s(&mut r, &mut x.attribute_indices, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn line(l: &mut Line, mut r: Reader, left: u32) -> Result<()> {
    let m = "Line";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => l.function_index = int32(&mut r, m, field, wire)?,
            2 => l.line = scalar(&mut r, m, field, wire)? as i64,
            3 => l.column = scalar(&mut r, m, field, wire)? as i64,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn function(f: &mut Function, mut r: Reader, left: u32) -> Result<()> {
    let m = "Function";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => f.name_strindex = int32(&mut r, m, field, wire)?,
            2 => f.system_name_strindex = int32(&mut r, m, field, wire)?,
            3 => f.filename_strindex = int32(&mut r, m, field, wire)?,
            4 => f.start_line = scalar(&mut r, m, field, wire)? as i64,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn link(l: &mut Link, mut r: Reader, left: u32) -> Result<()> {
    let m = "Link";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => l.trace_id = bytes(&mut r, m, field, wire)?,
            2 => l.span_id = bytes(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn stack(s: &mut Stack, mut r: Reader, left: u32) -> Result<()> {
    let m = "Stack";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => int32s(&mut r, &mut s.location_indices, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn key_value_and_unit(x: &mut KeyValueAndUnit, mut r: Reader, left: u32) -> Result<()> {
    let m = "KeyValueAndUnit";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => x.key_strindex = int32(&mut r, m, field, wire)?,
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let v = x.value.get_or_insert_with(Default::default);
                any(v, sub, nest(left)?).map_err(|e| e.within("value"))?;
            }
            3 => x.unit_strindex = int32(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn key_value(kv: &mut KeyValue, mut r: Reader, left: u32) -> Result<()> {
    let m = "KeyValue";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => kv.key = string(&mut r, m, field, wire)?,
            2 => {
                let sub = message(&mut r, m, field, wire)?;
                let v = kv.value.get_or_insert_with(Default::default);
                any(v, sub, nest(left)?).map_err(|e| e.within("value"))?;
            }
            3 => kv.key_strindex = int32(&mut r, m, field, wire)?,
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn any(v: &mut AnyValue, mut r: Reader, left: u32) -> Result<()> {
    use any_value::Value as V;
    let m = "AnyValue";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => v.value = Some(V::StringValue(string(&mut r, m, field, wire)?)),
            2 => v.value = Some(V::BoolValue(scalar(&mut r, m, field, wire)? != 0)),
            3 => v.value = Some(V::IntValue(scalar(&mut r, m, field, wire)? as i64)),
            4 => {
                v.value = Some(V::DoubleValue(f64::from_bits(fixed64(
                    &mut r, m, field, wire,
                )?)))
            }
            5 => {
                let sub = message(&mut r, m, field, wire)?;
                let inner = nest(left)?;
                // A message variant given again merges into the one there.
                if !matches!(v.value, Some(V::ArrayValue(_))) {
                    v.value = Some(V::ArrayValue(ArrayValue::default()));
                }
                let Some(V::ArrayValue(a)) = &mut v.value else {
                    unreachable!("just set")
                };
                array_value(a, sub, inner).map_err(|e| e.within("array_value"))?;
            }
            6 => {
                let sub = message(&mut r, m, field, wire)?;
                let inner = nest(left)?;
                if !matches!(v.value, Some(V::KvlistValue(_))) {
                    v.value = Some(V::KvlistValue(KeyValueList::default()));
                }
                let Some(V::KvlistValue(l)) = &mut v.value else {
                    unreachable!("just set")
                };
                key_value_list(l, sub, inner).map_err(|e| e.within("kvlist_value"))?;
            }
            7 => v.value = Some(V::BytesValue(bytes(&mut r, m, field, wire)?)),
            8 => v.value = Some(V::StringValueStrindex(int32(&mut r, m, field, wire)?)),
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn array_value(a: &mut ArrayValue, mut r: Reader, left: u32) -> Result<()> {
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, "ArrayValue", field, wire)?;
                let (i, v) = push(&mut a.values);
                any(v, sub, nest(left)?).map_err(|e| e.within(format_args!("values[{i}]")))?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

fn key_value_list(l: &mut KeyValueList, mut r: Reader, left: u32) -> Result<()> {
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                let sub = message(&mut r, "KeyValueList", field, wire)?;
                let (i, kv) = push(&mut l.values);
                key_value(kv, sub, nest(left)?)
                    .map_err(|e| e.within(format_args!("values[{i}]")))?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
