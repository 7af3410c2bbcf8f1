//! OTLP JSON → prost messages. Every field is read under its lowerCamelCase name and under its
//! original snake_case name; unknown fields are skipped and `null` leaves the default.

use opentelemetry_proto::tonic::common::v1::EntityRef;

use super::reader::{Error, InField, Reader};
use super::{base64, hex, MAX_VALUE_DEPTH};
use crate::otlp::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, KeyValueAndUnit,
    KeyValueList, Line, Link, Location, Mapping, Profile, ProfilesData, ProfilesDictionary,
    Resource, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};

/// Byte lengths of the ids written in hex.
pub(crate) const TRACE_ID_LEN: usize = 16;
pub(crate) const SPAN_ID_LEN: usize = 8;
const PROFILE_ID_LEN: usize = 16;

/// Decodes a whole document holding one `ProfilesData` object.
pub(super) fn document(
    json: &[u8],
    pool: Option<&dyn crate::allowance::Pool>,
) -> Result<ProfilesData, crate::FormatError> {
    let mut reader = Reader::new(json, pool);
    profiles_data(&mut reader)
        .and_then(|data| reader.finish().map(|()| data))
        .map_err(|e| reader.error(e, "OTLP JSON ProfilesData"))
}

pub(crate) fn string(r: &mut Reader<'_>) -> Result<String, Error> {
    r.string().map(|s| s.into_owned())
}

fn base64_bytes(r: &mut Reader<'_>) -> Result<Vec<u8>, Error> {
    base64::decode(&r.string()?).map_err(Error::new)
}

pub(crate) fn hex_id(r: &mut Reader<'_>, len: usize) -> Result<Vec<u8>, Error> {
    hex::decode_id(&r.string()?, len).map_err(Error::new)
}

fn i32s(r: &mut Reader<'_>) -> Result<Vec<i32>, Error> {
    r.list(Reader::integer::<i32>)
}

/// Reads an object into a default `T`, `field` storing each known member.
pub(crate) fn message<'a, T: Default>(
    r: &mut Reader<'a>,
    mut field: impl FnMut(&mut T, &mut Reader<'a>, &str) -> Result<(), Error>,
) -> Result<T, Error> {
    let mut m = T::default();
    r.object(|r, key| field(&mut m, r, key))?;
    Ok(m)
}

fn profiles_data(r: &mut Reader<'_>) -> Result<ProfilesData, Error> {
    message(r, |m: &mut ProfilesData, r, key| {
        match key {
            "resourceProfiles" | "resource_profiles" => {
                m.resource_profiles = r.list(resource_profiles).in_field("resourceProfiles")?;
            }
            "dictionary" => m.dictionary = Some(dictionary(r).in_field("dictionary")?),
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn dictionary(r: &mut Reader<'_>) -> Result<ProfilesDictionary, Error> {
    message(r, |m: &mut ProfilesDictionary, r, key| {
        match key {
            "mappingTable" | "mapping_table" => {
                m.mapping_table = r.list(mapping).in_field("mappingTable")?;
            }
            "locationTable" | "location_table" => {
                m.location_table = r.list(location).in_field("locationTable")?;
            }
            "functionTable" | "function_table" => {
                m.function_table = r.list(function).in_field("functionTable")?;
            }
            "linkTable" | "link_table" => m.link_table = r.list(link).in_field("linkTable")?,
            "stringTable" | "string_table" => {
                m.string_table = r.list(string).in_field("stringTable")?;
            }
            "attributeTable" | "attribute_table" => {
                m.attribute_table = r.list(key_value_and_unit).in_field("attributeTable")?;
            }
            "stackTable" | "stack_table" => m.stack_table = r.list(stack).in_field("stackTable")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn resource_profiles(r: &mut Reader<'_>) -> Result<ResourceProfiles, Error> {
    message(r, |m: &mut ResourceProfiles, r, key| {
        match key {
            "resource" => m.resource = Some(resource(r).in_field("resource")?),
            "scopeProfiles" | "scope_profiles" => {
                m.scope_profiles = r.list(scope_profiles).in_field("scopeProfiles")?;
            }
            "schemaUrl" | "schema_url" => m.schema_url = string(r).in_field("schemaUrl")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

pub(crate) fn resource(r: &mut Reader<'_>) -> Result<Resource, Error> {
    message(r, |m: &mut Resource, r, key| {
        match key {
            "attributes" => m.attributes = key_values(r, 1).in_field("attributes")?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            "entityRefs" | "entity_refs" => {
                m.entity_refs = r.list(entity_ref).in_field("entityRefs")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn entity_ref(r: &mut Reader<'_>) -> Result<EntityRef, Error> {
    message(r, |m: &mut EntityRef, r, key| {
        match key {
            "schemaUrl" | "schema_url" => m.schema_url = string(r).in_field("schemaUrl")?,
            "type" => m.r#type = string(r).in_field("type")?,
            "idKeys" | "id_keys" => m.id_keys = r.list(string).in_field("idKeys")?,
            "descriptionKeys" | "description_keys" => {
                m.description_keys = r.list(string).in_field("descriptionKeys")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn scope_profiles(r: &mut Reader<'_>) -> Result<ScopeProfiles, Error> {
    message(r, |m: &mut ScopeProfiles, r, key| {
        match key {
            "scope" => m.scope = Some(scope(r).in_field("scope")?),
            "profiles" => m.profiles = r.list(profile).in_field("profiles")?,
            "schemaUrl" | "schema_url" => m.schema_url = string(r).in_field("schemaUrl")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

pub(crate) fn scope(r: &mut Reader<'_>) -> Result<InstrumentationScope, Error> {
    message(r, |m: &mut InstrumentationScope, r, key| {
        match key {
            "name" => m.name = string(r).in_field("name")?,
            "version" => m.version = string(r).in_field("version")?,
            "attributes" => m.attributes = key_values(r, 1).in_field("attributes")?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn profile(r: &mut Reader<'_>) -> Result<Profile, Error> {
    message(r, |m: &mut Profile, r, key| {
        match key {
            "sampleType" | "sample_type" => {
                m.sample_type = Some(value_type(r).in_field("sampleType")?);
            }
            "samples" => m.samples = r.list(sample).in_field("samples")?,
            "timeUnixNano" | "time_unix_nano" => {
                m.time_unix_nano = r.integer().in_field("timeUnixNano")?;
            }
            "durationNano" | "duration_nano" => {
                m.duration_nano = r.integer().in_field("durationNano")?;
            }
            "periodType" | "period_type" => {
                m.period_type = Some(value_type(r).in_field("periodType")?);
            }
            "period" => m.period = r.integer().in_field("period")?,
            "profileId" | "profile_id" => {
                m.profile_id = hex_id(r, PROFILE_ID_LEN).in_field("profileId")?;
            }
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            "originalPayloadFormat" | "original_payload_format" => {
                m.original_payload_format = string(r).in_field("originalPayloadFormat")?;
            }
            "originalPayload" | "original_payload" => {
                m.original_payload = base64_bytes(r).in_field("originalPayload")?;
            }
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = i32s(r).in_field("attributeIndices")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn sample(r: &mut Reader<'_>) -> Result<Sample, Error> {
    message(r, |m: &mut Sample, r, key| {
        match key {
            "stackIndex" | "stack_index" => m.stack_index = r.integer().in_field("stackIndex")?,
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = i32s(r).in_field("attributeIndices")?;
            }
            "linkIndex" | "link_index" => m.link_index = r.integer().in_field("linkIndex")?,
            "values" => m.values = r.list(Reader::integer).in_field("values")?,
            "timestampsUnixNano" | "timestamps_unix_nano" => {
                m.timestamps_unix_nano = r.list(Reader::integer).in_field("timestampsUnixNano")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn value_type(r: &mut Reader<'_>) -> Result<ValueType, Error> {
    message(r, |m: &mut ValueType, r, key| {
        match key {
            "typeStrindex" | "type_strindex" => {
                m.type_strindex = r.integer().in_field("typeStrindex")?;
            }
            "unitStrindex" | "unit_strindex" => {
                m.unit_strindex = r.integer().in_field("unitStrindex")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn mapping(r: &mut Reader<'_>) -> Result<Mapping, Error> {
    message(r, |m: &mut Mapping, r, key| {
        match key {
            "memoryStart" | "memory_start" => {
                m.memory_start = r.integer().in_field("memoryStart")?;
            }
            "memoryLimit" | "memory_limit" => {
                m.memory_limit = r.integer().in_field("memoryLimit")?;
            }
            "fileOffset" | "file_offset" => m.file_offset = r.integer().in_field("fileOffset")?,
            "filenameStrindex" | "filename_strindex" => {
                m.filename_strindex = r.integer().in_field("filenameStrindex")?;
            }
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = i32s(r).in_field("attributeIndices")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn location(r: &mut Reader<'_>) -> Result<Location, Error> {
    message(r, |m: &mut Location, r, key| {
        match key {
            "mappingIndex" | "mapping_index" => {
                m.mapping_index = r.integer().in_field("mappingIndex")?;
            }
            "address" => m.address = r.integer().in_field("address")?,
            "lines" => m.lines = r.list(line).in_field("lines")?,
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = i32s(r).in_field("attributeIndices")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn line(r: &mut Reader<'_>) -> Result<Line, Error> {
    message(r, |m: &mut Line, r, key| {
        match key {
            "functionIndex" | "function_index" => {
                m.function_index = r.integer().in_field("functionIndex")?;
            }
            "line" => m.line = r.integer().in_field("line")?,
            "column" => m.column = r.integer().in_field("column")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn function(r: &mut Reader<'_>) -> Result<Function, Error> {
    message(r, |m: &mut Function, r, key| {
        match key {
            "nameStrindex" | "name_strindex" => {
                m.name_strindex = r.integer().in_field("nameStrindex")?;
            }
            "systemNameStrindex" | "system_name_strindex" => {
                m.system_name_strindex = r.integer().in_field("systemNameStrindex")?;
            }
            "filenameStrindex" | "filename_strindex" => {
                m.filename_strindex = r.integer().in_field("filenameStrindex")?;
            }
            "startLine" | "start_line" => m.start_line = r.integer().in_field("startLine")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn link(r: &mut Reader<'_>) -> Result<Link, Error> {
    message(r, |m: &mut Link, r, key| {
        match key {
            "traceId" | "trace_id" => m.trace_id = hex_id(r, TRACE_ID_LEN).in_field("traceId")?,
            "spanId" | "span_id" => m.span_id = hex_id(r, SPAN_ID_LEN).in_field("spanId")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn stack(r: &mut Reader<'_>) -> Result<Stack, Error> {
    message(r, |m: &mut Stack, r, key| {
        match key {
            "locationIndices" | "location_indices" => {
                m.location_indices = i32s(r).in_field("locationIndices")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn key_value_and_unit(r: &mut Reader<'_>) -> Result<KeyValueAndUnit, Error> {
    message(r, |m: &mut KeyValueAndUnit, r, key| {
        match key {
            "keyStrindex" | "key_strindex" => {
                m.key_strindex = r.integer().in_field("keyStrindex")?;
            }
            "value" => m.value = Some(any_value(r, 1).in_field("value")?),
            "unitStrindex" | "unit_strindex" => {
                m.unit_strindex = r.integer().in_field("unitStrindex")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

/// A list of attributes whose values sit at nesting level `depth`.
pub(crate) fn key_values(r: &mut Reader<'_>, depth: usize) -> Result<Vec<KeyValue>, Error> {
    r.list(|r| {
        let mut m = KeyValue::default();
        r.object(|r, key| {
            match key {
                "key" => m.key = string(r).in_field("key")?,
                "value" => m.value = Some(any_value(r, depth).in_field("value")?),
                "keyStrindex" | "key_strindex" => {
                    m.key_strindex = r.integer().in_field("keyStrindex")?;
                }
                _ => r.skip()?,
            }
            Ok(())
        })?;
        Ok(m)
    })
}

/// An attribute value at nesting level `depth` (1 for a value that is not inside another).
fn any_value(r: &mut Reader<'_>, depth: usize) -> Result<AnyValue, Error> {
    use any_value::Value;
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::new(format!(
            "attribute value nested deeper than {MAX_VALUE_DEPTH} levels"
        )));
    }
    let mut value = None;
    r.object(|r, key| {
        let v = match key {
            "stringValue" | "string_value" => {
                Value::StringValue(string(r).in_field("stringValue")?)
            }
            "boolValue" | "bool_value" => Value::BoolValue(r.boolean().in_field("boolValue")?),
            "intValue" | "int_value" => Value::IntValue(r.integer().in_field("intValue")?),
            "doubleValue" | "double_value" => {
                Value::DoubleValue(r.double().in_field("doubleValue")?)
            }
            "arrayValue" | "array_value" => {
                let mut array = ArrayValue::default();
                r.object(|r, key| {
                    match key {
                        "values" => {
                            array.values =
                                r.list(|r| any_value(r, depth + 1)).in_field("values")?;
                        }
                        _ => r.skip()?,
                    }
                    Ok(())
                })
                .in_field("arrayValue")?;
                Value::ArrayValue(array)
            }
            "kvlistValue" | "kvlist_value" => {
                let mut list = KeyValueList::default();
                r.object(|r, key| {
                    match key {
                        "values" => list.values = key_values(r, depth + 1).in_field("values")?,
                        _ => r.skip()?,
                    }
                    Ok(())
                })
                .in_field("kvlistValue")?;
                Value::KvlistValue(list)
            }
            "bytesValue" | "bytes_value" => {
                Value::BytesValue(base64_bytes(r).in_field("bytesValue")?)
            }
            "stringValueStrindex" | "string_value_strindex" => {
                Value::StringValueStrindex(r.integer().in_field("stringValueStrindex")?)
            }
            _ => return r.skip(),
        };
        if value.replace(v).is_some() {
            return Err(Error::new("more than one member of the value oneof is set"));
        }
        Ok(())
    })?;
    Ok(AnyValue { value })
}
