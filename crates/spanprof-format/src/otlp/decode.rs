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

use super::legacy::{SampleFields, Tally};
use super::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, KeyValueAndUnit,
    KeyValueList, Line, Link, Location, Mapping, Profile, ProfilesData, ProfilesDictionary,
    Resource, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use crate::allowance::Budget;
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
    decode_tallied(buf, &Budget::for_message(buf.len()), &mut Tally::default())
}

/// Decodes an uncompressed OTLP `ProfilesData` (or `ExportProfilesServiceRequest`), adding
/// each sample to `samples` (how its fields would read under the v1.9 numbering), and
/// allocating out of `budget`.
pub(crate) fn decode_tallied(
    buf: &[u8],
    budget: &Budget,
    samples: &mut Tally,
) -> std::result::Result<ProfilesData, DecodeError> {
    let mut data = ProfilesData::default();
    profiles_data(
        &mut data,
        Reader::new(buf, budget),
        RECURSION_LIMIT,
        samples,
    )
    .map_err(|e| {
        DecodeError(if e.path.is_empty() {
            e.msg
        } else {
            let path = crate::error::collapse_repeats(&e.path, ".");
            format!("{path}: {}", e.msg)
        })
    })?;
    Ok(data)
}

/// Nesting levels left inside a message that has `left`.
fn nest(left: u32) -> Result<u32> {
    left.checked_sub(1).ok_or_else(|| too_deep().into())
}

/// Reads the fields of message `m` (which has `left` nesting levels) one by one, handing each
/// to `f`.
#[inline(always)]
fn each_field<'a>(
    mut r: Reader<'a>,
    m: &'static str,
    left: u32,
    mut f: impl FnMut(At<'_, 'a>) -> Result<()>,
) -> Result<()> {
    while !r.done() {
        let (field, wire) = r.key()?;
        f(At {
            r: &mut r,
            m,
            field,
            wire,
            left,
        })?;
    }
    Ok(())
}

/// The field being read: the reader at its value, the name of its message, its number and
/// wire type, and the nesting levels left in its message. Each method reads the value into
/// its place in the message, with prost's semantics.
struct At<'r, 'a> {
    r: &'r mut Reader<'a>,
    m: &'static str,
    field: u64,
    wire: u8,
    left: u32,
}

impl<'a> At<'_, 'a> {
    /// One more element of `v` (`name` in errors), decoded by `f`.
    #[inline(always)]
    fn push<T: Default>(
        self,
        v: &mut Vec<T>,
        name: &str,
        f: impl FnOnce(&mut T, Reader<'a>, u32) -> Result<()>,
    ) -> Result<()> {
        let sub = message(self.r, self.m, self.field, self.wire)?;
        self.r.room(v)?;
        let i = v.len();
        v.push(T::default());
        f(&mut v[i], sub, nest(self.left)?).map_err(|e| e.within(format_args!("{name}[{i}]")))
    }

    /// A singular message: a repeated occurrence merges into the first.
    #[inline(always)]
    fn merge<T: Default>(
        self,
        o: &mut Option<T>,
        name: &str,
        f: impl FnOnce(&mut T, Reader<'a>, u32) -> Result<()>,
    ) -> Result<()> {
        let sub = message(self.r, self.m, self.field, self.wire)?;
        f(
            o.get_or_insert_with(Default::default),
            sub,
            nest(self.left)?,
        )
        .map_err(|e| e.within(name))
    }

    #[inline(always)]
    fn skip(self) -> Result<()> {
        Ok(self.r.skip(self.field, self.wire, self.left)?)
    }

    #[inline(always)]
    fn varint(self) -> Result<u64> {
        Ok(scalar(self.r, self.m, self.field, self.wire)?)
    }

    #[inline(always)]
    fn int32(self, to: &mut i32) -> Result<()> {
        *to = self.varint()? as i32;
        Ok(())
    }

    #[inline(always)]
    fn uint32(self, to: &mut u32) -> Result<()> {
        *to = self.varint()? as u32;
        Ok(())
    }

    #[inline(always)]
    fn int64(self, to: &mut i64) -> Result<()> {
        *to = self.varint()? as i64;
        Ok(())
    }

    #[inline(always)]
    fn uint64(self, to: &mut u64) -> Result<()> {
        *to = self.varint()?;
        Ok(())
    }

    #[inline(always)]
    fn fixed64(self, to: &mut u64) -> Result<()> {
        if self.wire != I64 {
            return Err(wrong(self.m, self.field, self.wire).into());
        }
        *to = self.r.fixed64()?;
        Ok(())
    }

    #[inline(always)]
    fn bytes(self) -> Result<Vec<u8>> {
        if self.wire != LEN {
            return Err(wrong(self.m, self.field, self.wire).into());
        }
        Ok(self.r.owned_bytes()?.to_vec())
    }

    #[inline(always)]
    fn set_bytes(self, to: &mut Vec<u8>) -> Result<()> {
        *to = self.bytes()?;
        Ok(())
    }

    #[inline(always)]
    fn string(self) -> Result<String> {
        let (m, field) = (self.m, self.field);
        String::from_utf8(self.bytes()?)
            .map_err(|_| DecodeError(format!("{m} field {field} is not UTF-8")).into())
    }

    #[inline(always)]
    fn set_string(self, to: &mut String) -> Result<()> {
        *to = self.string()?;
        Ok(())
    }

    #[inline(always)]
    fn push_string(self, to: &mut Vec<String>) -> Result<()> {
        self.r.room(to)?;
        to.push(self.string()?);
        Ok(())
    }

    #[inline(always)]
    fn int32s(self, to: &mut Vec<i32>) -> Result<()> {
        Ok(repeated(self.r, to, self.m, self.field, self.wire, |v| {
            v as i32
        })?)
    }

    #[inline(always)]
    fn int64s(self, to: &mut Vec<i64>) -> Result<()> {
        Ok(repeated(self.r, to, self.m, self.field, self.wire, |v| {
            v as i64
        })?)
    }

    fn fixed64s(self, to: &mut Vec<u64>) -> Result<()> {
        match self.wire {
            I64 => {
                self.r.room(to)?;
                to.push(self.r.fixed64()?);
            }
            LEN => {
                let packed = self.r.bytes()?;
                if packed.len() % 8 != 0 {
                    return Err(DecodeError(format!(
                        "{} field {}: packed fixed64 values of {} bytes",
                        self.m,
                        self.field,
                        packed.len()
                    ))
                    .into());
                }
                self.r.reserve(to, packed.len() / 8)?;
                to.extend(
                    packed
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
                );
            }
            _ => return Err(wrong(self.m, self.field, self.wire).into()),
        }
        Ok(())
    }
}

fn profiles_data(d: &mut ProfilesData, r: Reader, left: u32, tally: &mut Tally) -> Result<()> {
    let n = r.count_fields::<1>(left)?[0];
    r.reserve(&mut d.resource_profiles, n)?;
    each_field(r, "ProfilesData", left, |at| match at.field {
        1 => at.push(&mut d.resource_profiles, "resource_profiles", |x, r, l| {
            resource_profiles(x, r, l, tally)
        }),
        2 => at.merge(&mut d.dictionary, "dictionary", dictionary),
        _ => at.skip(),
    })
}

fn resource_profiles(
    rp: &mut ResourceProfiles,
    r: Reader,
    left: u32,
    tally: &mut Tally,
) -> Result<()> {
    each_field(r, "ResourceProfiles", left, |at| match at.field {
        1 => at.merge(&mut rp.resource, "resource", resource),
        2 => at.push(&mut rp.scope_profiles, "scope_profiles", |x, r, l| {
            scope_profiles(x, r, l, tally)
        }),
        3 => at.set_string(&mut rp.schema_url),
        _ => at.skip(),
    })
}

fn resource(res: &mut Resource, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Resource", left, |at| match at.field {
        1 => at.push(&mut res.attributes, "attributes", key_value),
        2 => at.uint32(&mut res.dropped_attributes_count),
        3 => at.push(&mut res.entity_refs, "entity_refs", entity_ref),
        _ => at.skip(),
    })
}

fn entity_ref(e: &mut EntityRef, r: Reader, left: u32) -> Result<()> {
    each_field(r, "EntityRef", left, |at| match at.field {
        1 => at.set_string(&mut e.schema_url),
        2 => at.set_string(&mut e.r#type),
        3 => at.push_string(&mut e.id_keys),
        4 => at.push_string(&mut e.description_keys),
        _ => at.skip(),
    })
}

fn scope_profiles(sp: &mut ScopeProfiles, r: Reader, left: u32, tally: &mut Tally) -> Result<()> {
    each_field(r, "ScopeProfiles", left, |at| match at.field {
        1 => at.merge(&mut sp.scope, "scope", instrumentation_scope),
        2 => at.push(&mut sp.profiles, "profiles", |x, r, l| {
            profile(x, r, l, tally)
        }),
        3 => at.set_string(&mut sp.schema_url),
        _ => at.skip(),
    })
}

fn instrumentation_scope(s: &mut InstrumentationScope, r: Reader, left: u32) -> Result<()> {
    each_field(r, "InstrumentationScope", left, |at| match at.field {
        1 => at.set_string(&mut s.name),
        2 => at.set_string(&mut s.version),
        3 => at.push(&mut s.attributes, "attributes", key_value),
        4 => at.uint32(&mut s.dropped_attributes_count),
        _ => at.skip(),
    })
}

fn profile(p: &mut Profile, r: Reader, left: u32, tally: &mut Tally) -> Result<()> {
    let n = r.count_fields::<2>(left)?[1];
    r.reserve(&mut p.samples, n)?;
    each_field(r, "Profile", left, |at| match at.field {
        1 => at.merge(&mut p.sample_type, "sample_type", value_type),
        2 => {
            // How the sample reads under either numbering, for the v1.9 check.
            let mut fields = SampleFields::default();
            at.push(&mut p.samples, "samples", |s, r, l| {
                sample(s, r, l, &mut fields)
            })?;
            tally.add(&fields);
            Ok(())
        }
        3 => at.fixed64(&mut p.time_unix_nano),
        4 => at.uint64(&mut p.duration_nano),
        5 => at.merge(&mut p.period_type, "period_type", value_type),
        6 => at.int64(&mut p.period),
        7 => at.set_bytes(&mut p.profile_id),
        8 => at.uint32(&mut p.dropped_attributes_count),
        9 => at.set_string(&mut p.original_payload_format),
        10 => at.set_bytes(&mut p.original_payload),
        11 => at.int32s(&mut p.attribute_indices),
        _ => at.skip(),
    })
}

fn value_type(t: &mut ValueType, r: Reader, left: u32) -> Result<()> {
    each_field(r, "ValueType", left, |at| match at.field {
        1 => at.int32(&mut t.type_strindex),
        2 => at.int32(&mut t.unit_strindex),
        _ => at.skip(),
    })
}

fn sample(s: &mut Sample, r: Reader, left: u32, fields: &mut SampleFields) -> Result<()> {
    each_field(r, "Sample", left, |at| {
        fields.note(at.field, at.wire);
        match at.field {
            1 => at.int32(&mut s.stack_index),
            2 => at.int32s(&mut s.attribute_indices),
            3 => at.int32(&mut s.link_index),
            4 => at.int64s(&mut s.values),
            5 => at.fixed64s(&mut s.timestamps_unix_nano),
            _ => at.skip(),
        }
    })
}

fn dictionary(d: &mut ProfilesDictionary, r: Reader, left: u32) -> Result<()> {
    let counts = r.count_fields::<7>(left)?;
    r.reserve(&mut d.mapping_table, counts[0])?;
    r.reserve(&mut d.location_table, counts[1])?;
    r.reserve(&mut d.function_table, counts[2])?;
    r.reserve(&mut d.link_table, counts[3])?;
    r.reserve(&mut d.string_table, counts[4])?;
    r.reserve(&mut d.attribute_table, counts[5])?;
    r.reserve(&mut d.stack_table, counts[6])?;
    each_field(r, "ProfilesDictionary", left, |at| match at.field {
        1 => at.push(&mut d.mapping_table, "mapping_table", mapping),
        2 => at.push(&mut d.location_table, "location_table", location),
        3 => at.push(&mut d.function_table, "function_table", function),
        4 => at.push(&mut d.link_table, "link_table", link),
        5 => {
            let i = d.string_table.len();
            at.push_string(&mut d.string_table)
                .map_err(|e| e.within(format_args!("string_table[{i}]")))
        }
        6 => at.push(
            &mut d.attribute_table,
            "attribute_table",
            key_value_and_unit,
        ),
        7 => at.push(&mut d.stack_table, "stack_table", stack),
        _ => at.skip(),
    })
}

fn mapping(x: &mut Mapping, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Mapping", left, |at| match at.field {
        1 => at.uint64(&mut x.memory_start),
        2 => at.uint64(&mut x.memory_limit),
        3 => at.uint64(&mut x.file_offset),
        4 => at.int32(&mut x.filename_strindex),
        5 => at.int32s(&mut x.attribute_indices),
        _ => at.skip(),
    })
}

fn location(x: &mut Location, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Location", left, |at| match at.field {
        1 => at.int32(&mut x.mapping_index),
        2 => at.uint64(&mut x.address),
        3 => at.push(&mut x.lines, "lines", line),
        4 => at.int32s(&mut x.attribute_indices),
        _ => at.skip(),
    })
}

fn line(l: &mut Line, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Line", left, |at| match at.field {
        1 => at.int32(&mut l.function_index),
        2 => at.int64(&mut l.line),
        3 => at.int64(&mut l.column),
        _ => at.skip(),
    })
}

fn function(f: &mut Function, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Function", left, |at| match at.field {
        1 => at.int32(&mut f.name_strindex),
        2 => at.int32(&mut f.system_name_strindex),
        3 => at.int32(&mut f.filename_strindex),
        4 => at.int64(&mut f.start_line),
        _ => at.skip(),
    })
}

fn link(l: &mut Link, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Link", left, |at| match at.field {
        1 => at.set_bytes(&mut l.trace_id),
        2 => at.set_bytes(&mut l.span_id),
        _ => at.skip(),
    })
}

fn stack(s: &mut Stack, r: Reader, left: u32) -> Result<()> {
    each_field(r, "Stack", left, |at| match at.field {
        1 => at.int32s(&mut s.location_indices),
        _ => at.skip(),
    })
}

fn key_value_and_unit(x: &mut KeyValueAndUnit, r: Reader, left: u32) -> Result<()> {
    each_field(r, "KeyValueAndUnit", left, |at| match at.field {
        1 => at.int32(&mut x.key_strindex),
        2 => at.merge(&mut x.value, "value", any),
        3 => at.int32(&mut x.unit_strindex),
        _ => at.skip(),
    })
}

fn key_value(kv: &mut KeyValue, r: Reader, left: u32) -> Result<()> {
    each_field(r, "KeyValue", left, |at| match at.field {
        1 => at.set_string(&mut kv.key),
        2 => at.merge(&mut kv.value, "value", any),
        3 => at.int32(&mut kv.key_strindex),
        _ => at.skip(),
    })
}

fn any(v: &mut AnyValue, r: Reader, left: u32) -> Result<()> {
    use any_value::Value as V;
    each_field(r, "AnyValue", left, |at| {
        v.value = Some(match at.field {
            1 => V::StringValue(at.string()?),
            2 => V::BoolValue(at.varint()? != 0),
            3 => V::IntValue(at.varint()? as i64),
            4 => {
                let mut bits = 0;
                at.fixed64(&mut bits)?;
                V::DoubleValue(f64::from_bits(bits))
            }
            // A message variant given again merges into the one there.
            5 => {
                let mut a = match v.value.take() {
                    Some(V::ArrayValue(a)) => Some(a),
                    _ => None,
                };
                at.merge(&mut a, "array_value", array_value)?;
                V::ArrayValue(a.unwrap_or_default())
            }
            6 => {
                let mut l = match v.value.take() {
                    Some(V::KvlistValue(l)) => Some(l),
                    _ => None,
                };
                at.merge(&mut l, "kvlist_value", key_value_list)?;
                V::KvlistValue(l.unwrap_or_default())
            }
            7 => V::BytesValue(at.bytes()?),
            8 => {
                let mut i = 0;
                at.int32(&mut i)?;
                V::StringValueStrindex(i)
            }
            _ => return at.skip(),
        });
        Ok(())
    })
}

fn array_value(a: &mut ArrayValue, r: Reader, left: u32) -> Result<()> {
    each_field(r, "ArrayValue", left, |at| match at.field {
        1 => at.push(&mut a.values, "values", any),
        _ => at.skip(),
    })
}

fn key_value_list(l: &mut KeyValueList, r: Reader, left: u32) -> Result<()> {
    each_field(r, "KeyValueList", left, |at| match at.field {
        1 => at.push(&mut l.values, "values", key_value),
        _ => at.skip(),
    })
}

#[cfg(test)]
mod tests;
