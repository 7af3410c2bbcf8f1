//! Merging OTLP profiles into one dictionary, splitting them back per resource, and linking
//! OTLP input: each re-interns every referenced entry into a fresh [`Batch`], which drops
//! orphans and duplicates on the way.

use crate::batch::{Batch, ConversionReport, SampleSet};
use crate::error::FormatError;
use crate::link::{IdRole, LinkConfig, ProfileIds};
use crate::otlp::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, KeyValueList, Line,
    Link, Location, Mapping, Profile, ProfilesData, ProfilesDictionary, Resource, ResourceProfiles,
    Sample, ScopeProfiles, ValueType,
};

/// Merges several `ProfilesData` into one with a single dictionary (what a forwarder does when
/// it batches many scrapes into one export). Equal resources are combined.
pub fn merge<'a>(
    inputs: impl IntoIterator<Item = &'a ProfilesData>,
    linking: Option<LinkConfig>,
) -> Result<(ProfilesData, ConversionReport), FormatError> {
    let mut batch = Batch::new(linking);
    for data in inputs {
        batch.add_profiles_data(data)?;
    }
    Ok(batch.finish())
}

/// Splits `data` into one `ProfilesData` per resource, each with only the dictionary entries
/// it uses.
pub fn split_by_resource(data: &ProfilesData) -> Result<Vec<ProfilesData>, FormatError> {
    let empty = ProfilesDictionary::default();
    let dict = data.dictionary.as_ref().unwrap_or(&empty);
    data.resource_profiles
        .iter()
        .enumerate()
        .map(|(i, rp)| {
            let mut batch = Batch::new(None);
            let mut input = OtlpInput::new(dict);
            batch.add_resource(&mut input, rp, i)?;
            batch.report.inputs += 1;
            Ok(batch.finish().0)
        })
        .collect()
}

/// Links the id attributes of OTLP samples (the pipeline stage for OTLP input).
pub fn link(
    data: &ProfilesData,
    config: LinkConfig,
) -> Result<(ProfilesData, ConversionReport), FormatError> {
    merge([data], Some(config))
}

const UNSET: i32 = -1;

/// An OTLP input being re-interned: source index → batch index, filled on first use.
struct OtlpInput<'a> {
    d: &'a ProfilesDictionary,
    strings: Vec<i32>,
    functions: Vec<i32>,
    mappings: Vec<i32>,
    locations: Vec<i32>,
    stacks: Vec<i32>,
    links: Vec<i32>,
    attributes: Vec<(i32, Option<IdRole>)>,
    stack_buf: Vec<i32>,
}

impl<'a> OtlpInput<'a> {
    fn new(d: &'a ProfilesDictionary) -> Self {
        OtlpInput {
            d,
            strings: vec![UNSET; d.string_table.len()],
            functions: vec![UNSET; d.function_table.len()],
            mappings: vec![UNSET; d.mapping_table.len()],
            locations: vec![UNSET; d.location_table.len()],
            stacks: vec![UNSET; d.stack_table.len()],
            links: vec![UNSET; d.link_table.len()],
            attributes: vec![(UNSET, None); d.attribute_table.len()],
            stack_buf: Vec::new(),
        }
    }
}

/// A reference into an OTLP `ProfilesDictionary` that cannot be followed. Its text names the
/// way to it, e.g. `function_table[3]: 9 out of range (string_table has 4 entries)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DictError {
    /// An index past its table.
    #[error("{index} out of range ({table} has {len} entries)")]
    OutOfRange {
        /// The index given.
        index: i32,
        /// The table it points into.
        table: &'static str,
        /// Entries in that table.
        len: usize,
    },
    /// A link whose trace or span id has the wrong length.
    #[error("link_table[{link}].{field} has {len} bytes, a {what} has {want}")]
    IdLength {
        /// The link's index in `link_table`.
        link: usize,
        /// `trace_id` or `span_id`.
        field: &'static str,
        /// "trace id" or "span id".
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes such an id has (16 or 8).
        want: usize,
    },
    /// Attribute values nested deeper than `MAX_DEPTH` (64) levels.
    #[error("attribute values nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A field naming the reference (`key_strindex`), then what is wrong with it.
    #[error("{field} {inner}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        inner: Box<DictError>,
    },
    /// Where in the dictionary (`function_table[3]`), then what is wrong there.
    #[error("{at}: {inner}")]
    At {
        /// The entry.
        at: String,
        /// What is wrong.
        inner: Box<DictError>,
    },
}

impl DictError {
    /// This error, found at `at` (a table entry).
    pub(crate) fn at(self, at: String) -> Self {
        DictError::At {
            at,
            inner: Box::new(self),
        }
    }

    /// This error, of field `field`.
    pub(crate) fn field(self, field: &'static str) -> Self {
        DictError::Field {
            field,
            inner: Box::new(self),
        }
    }
}

pub(crate) fn slot(index: i32, len: usize, table: &'static str) -> Result<usize, DictError> {
    usize::try_from(index)
        .ok()
        .filter(|&i| i < len)
        .ok_or(DictError::OutOfRange { index, table, len })
}

impl Batch {
    /// Adds every profile of `data`, re-interning its dictionary into this batch's.
    pub fn add_profiles_data(&mut self, data: &ProfilesData) -> Result<(), FormatError> {
        let empty = ProfilesDictionary::default();
        let mut input = OtlpInput::new(data.dictionary.as_ref().unwrap_or(&empty));
        self.mappings_in_order(&mut input, data);
        for (i, rp) in data.resource_profiles.iter().enumerate() {
            self.add_resource(&mut input, rp, i)?;
        }
        self.report.inputs += 1;
        Ok(())
    }

    /// Interns the mappings that `data`'s samples use in its dictionary's order: a profile's
    /// first mapping is its main binary (pprof tools name it as the profile's File), and on
    /// first use the binary of the first sample's leaf (libc) came first.
    fn mappings_in_order(&mut self, input: &mut OtlpInput, data: &ProfilesData) {
        let d = input.d;
        if d.mapping_table.len() <= 2 {
            return; // entry 0 and one mapping: nothing to order
        }
        let at = |table_len: usize, i: i32| usize::try_from(i).ok().filter(|&i| i < table_len);
        let mut stacks = vec![false; d.stack_table.len()];
        let samples = data
            .resource_profiles
            .iter()
            .flat_map(|rp| &rp.scope_profiles)
            .flat_map(|sp| &sp.profiles)
            .flat_map(|p| &p.samples);
        for s in samples {
            if let Some(i) = at(stacks.len(), s.stack_index) {
                stacks[i] = true;
            }
        }
        let mut used = vec![false; d.mapping_table.len()];
        for (stack, _) in d.stack_table.iter().zip(stacks).filter(|(_, on)| *on) {
            for &l in &stack.location_indices {
                let mapping =
                    at(d.location_table.len(), l).map(|l| d.location_table[l].mapping_index);
                if let Some(m) = mapping.and_then(|m| at(used.len(), m)) {
                    used[m] = true;
                }
            }
        }
        for (m, _) in used.iter().enumerate().skip(1).filter(|(_, on)| **on) {
            // A mapping that does not convert is reported where a sample uses it.
            let _ = self.otlp_mapping(input, m as i32);
        }
    }

    fn add_resource(
        &mut self,
        input: &mut OtlpInput,
        rp: &ResourceProfiles,
        ri: usize,
    ) -> Result<(), FormatError> {
        let at = |path: String| move |e: DictError| FormatError::Invalid(format!("{path}: {e}"));
        let mut resource_ids = ProfileIds::default();
        let resource = match &rp.resource {
            Some(r) => Resource {
                attributes: {
                    let mut attributes = resolve_key_values(input.d, &r.attributes)
                        .map_err(|e| at(format!("resource_profiles[{ri}].resource"))(e))?;
                    resource_ids = self.take_profile_ids(&mut attributes);
                    attributes
                },
                dropped_attributes_count: r.dropped_attributes_count,
                entity_refs: r.entity_refs.clone(),
            },
            None => Resource::default(),
        };
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            let path = format!("resource_profiles[{ri}].scope_profiles[{si}]");
            let scope = match &sp.scope {
                Some(s) => Some(InstrumentationScope {
                    attributes: resolve_key_values(input.d, &s.attributes)
                        .map_err(|e| at(format!("{path}.scope"))(e))?,
                    ..s.clone()
                }),
                None => None,
            };
            let mut profiles = Vec::with_capacity(sp.profiles.len());
            for (pi, p) in sp.profiles.iter().enumerate() {
                let path = format!("{path}.profiles[{pi}]");
                profiles.push(self.otlp_profile(input, p, resource_ids, &path)?);
            }
            let scope = ScopeProfiles {
                scope,
                profiles,
                schema_url: sp.schema_url.clone(),
            };
            self.push_scope(resource.clone(), &rp.schema_url, scope);
        }
        Ok(())
    }

    /// One profile of a resource whose attributes carried `ids` (the profile's own id
    /// attributes override them).
    fn otlp_profile(
        &mut self,
        input: &mut OtlpInput,
        p: &Profile,
        mut ids: ProfileIds,
        path: &str,
    ) -> Result<Profile, FormatError> {
        let at = |field: String| {
            move |e: DictError| FormatError::Invalid(format!("{path}.{field}: {e}"))
        };
        let keep = self
            .linking
            .as_ref()
            .is_some_and(|l| l.keep_link_attributes);
        let mut attribute_indices = Vec::with_capacity(p.attribute_indices.len());
        for (j, &a) in p.attribute_indices.iter().enumerate() {
            let (attr, role) = self
                .otlp_attribute(input, a)
                .map_err(|e| at(format!("attribute_indices[{j}]"))(e))?;
            ids.observe(role);
            attribute_indices.push(attr);
        }
        self.linker.start_profile(ids);
        let mut set = SampleSet::new(1, p.samples.len());
        let mut direct = Vec::new();
        let mut attrs = Vec::new();
        for (i, s) in p.samples.iter().enumerate() {
            let stack = self
                .otlp_stack(input, s.stack_index)
                .map_err(|e| at(format!("samples[{i}].stack_index"))(e))?;
            let source_link = self
                .otlp_link(input, s.link_index)
                .map_err(|e| at(format!("samples[{i}].link_index"))(e))?;
            attrs.clear();
            for (j, &a) in s.attribute_indices.iter().enumerate() {
                let (attr, role) = self
                    .otlp_attribute(input, a)
                    .map_err(|e| at(format!("samples[{i}].attribute_indices[{j}]"))(e))?;
                let stays = self.linker.observe_beside(role, keep, source_link != 0);
                if stays && !attrs.contains(&attr) {
                    attrs.push(attr);
                }
            }
            let link = if source_link != 0 {
                source_link
            } else {
                if self.linker.needs_span_counts() {
                    let counts = self.otlp_span_counts(input, p);
                    self.linker.set_span_counts(counts);
                }
                self.linker.finish(&mut self.dict, &mut attrs)
            };
            attrs.sort_unstable();
            if s.values.len() == 1 && s.timestamps_unix_nano.is_empty() {
                set.add(stack, link, &attrs, &s.values);
            } else {
                direct.push(Sample {
                    stack_index: stack,
                    attribute_indices: attrs.clone(),
                    link_index: link,
                    values: s.values.clone(),
                    timestamps_unix_nano: s.timestamps_unix_nano.clone(),
                });
            }
        }
        let mut samples = set.samples(0);
        samples.append(&mut direct);
        Ok(Profile {
            sample_type: p
                .sample_type
                .map(|t| self.otlp_value_type(input, t))
                .transpose()
                .map_err(at("sample_type".into()))?,
            samples,
            period_type: p
                .period_type
                .map(|t| self.otlp_value_type(input, t))
                .transpose()
                .map_err(at("period_type".into()))?,
            attribute_indices,
            profile_id: p.profile_id.clone(),
            original_payload_format: p.original_payload_format.clone(),
            original_payload: p.original_payload.clone(),
            ..*p
        })
    }

    /// How many samples of `p` carry each span id (their link's, or their attributes').
    fn otlp_span_counts(
        &mut self,
        input: &mut OtlpInput,
        p: &Profile,
    ) -> hashbrown::HashMap<[u8; 8], u32> {
        let mut counts = hashbrown::HashMap::new();
        let mut roles = Vec::new();
        for s in &p.samples {
            let linked = usize::try_from(s.link_index)
                .ok()
                .filter(|&l| l > 0)
                .and_then(|l| input.d.link_table.get(l))
                .and_then(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
                .filter(|span| *span != [0; 8]);
            if let Some(span) = linked {
                *counts.entry(span).or_insert(0) += 1;
                continue;
            }
            roles.clear();
            for &a in &s.attribute_indices {
                // An attribute that does not check is refused where its sample is linked.
                if let Ok((_, role)) = self.otlp_attribute(input, a) {
                    roles.push(role);
                }
            }
            self.linker.count_sample(&mut counts, roles.iter().copied());
        }
        counts
    }

    fn otlp_string(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        let i = slot(index, input.strings.len(), "string_table")?;
        if input.strings[i] == UNSET {
            input.strings[i] = self.dict.string(&input.d.string_table[i]);
        }
        Ok(input.strings[i])
    }

    fn otlp_value_type(
        &mut self,
        input: &mut OtlpInput,
        t: ValueType,
    ) -> Result<ValueType, DictError> {
        Ok(ValueType {
            type_strindex: self.otlp_string(input, t.type_strindex)?,
            unit_strindex: self.otlp_string(input, t.unit_strindex)?,
        })
    }

    fn otlp_function(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        let i = slot(index, input.functions.len(), "function_table")?;
        if input.functions[i] == UNSET {
            let f = input.d.function_table[i];
            let at = |e: DictError| e.at(format!("function_table[{i}]"));
            let converted = Function {
                name_strindex: self.otlp_string(input, f.name_strindex).map_err(at)?,
                system_name_strindex: self
                    .otlp_string(input, f.system_name_strindex)
                    .map_err(at)?,
                filename_strindex: self.otlp_string(input, f.filename_strindex).map_err(at)?,
                start_line: f.start_line,
            };
            input.functions[i] = self.dict.function(converted);
        }
        Ok(input.functions[i])
    }

    fn otlp_mapping(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        let i = slot(index, input.mappings.len(), "mapping_table")?;
        if input.mappings[i] == UNSET {
            let m = &input.d.mapping_table[i];
            let at = |e: DictError| e.at(format!("mapping_table[{i}]"));
            let mut attribute_indices = Vec::with_capacity(m.attribute_indices.len());
            for &a in &m.attribute_indices {
                attribute_indices.push(self.otlp_attribute(input, a).map_err(at)?.0);
            }
            let converted = Mapping {
                filename_strindex: self.otlp_string(input, m.filename_strindex).map_err(at)?,
                attribute_indices,
                ..*m
            };
            input.mappings[i] = self.dict.mapping(converted);
        }
        Ok(input.mappings[i])
    }

    fn otlp_location(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        let i = slot(index, input.locations.len(), "location_table")?;
        if input.locations[i] == UNSET {
            let l = &input.d.location_table[i];
            let at = |e: DictError| e.at(format!("location_table[{i}]"));
            let mut lines = Vec::with_capacity(l.lines.len());
            for line in &l.lines {
                lines.push(Line {
                    function_index: self.otlp_function(input, line.function_index).map_err(at)?,
                    ..*line
                });
            }
            let mut attribute_indices = Vec::with_capacity(l.attribute_indices.len());
            for &a in &l.attribute_indices {
                attribute_indices.push(self.otlp_attribute(input, a).map_err(at)?.0);
            }
            let converted = Location {
                mapping_index: self.otlp_mapping(input, l.mapping_index).map_err(at)?,
                address: l.address,
                lines,
                attribute_indices,
            };
            input.locations[i] = self.dict.location(converted);
        }
        Ok(input.locations[i])
    }

    fn otlp_stack(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        if index == 0 {
            return Ok(0);
        }
        let i = slot(index, input.stacks.len(), "stack_table")?;
        if input.stacks[i] == UNSET {
            let mut buf = std::mem::take(&mut input.stack_buf);
            buf.clear();
            for &l in &input.d.stack_table[i].location_indices {
                buf.push(
                    self.otlp_location(input, l)
                        .map_err(|e| e.at(format!("stack_table[{i}]")))?,
                );
            }
            input.stacks[i] = self.dict.stack(&buf);
            input.stack_buf = buf;
        }
        Ok(input.stacks[i])
    }

    fn otlp_link(&mut self, input: &mut OtlpInput, index: i32) -> Result<i32, DictError> {
        if index == 0 {
            return Ok(0);
        }
        let i = slot(index, input.links.len(), "link_table")?;
        if input.links[i] == UNSET {
            let (trace, span) = link_ids(&input.d.link_table[i], i)?;
            input.links[i] = if trace == [0; 16] && span == [0; 8] {
                0
            } else {
                self.dict.link(trace, span)
            };
        }
        Ok(input.links[i])
    }

    /// The batch index of an attribute (0 when it is a linked id that does not stay) and its
    /// link role.
    fn otlp_attribute(
        &mut self,
        input: &mut OtlpInput,
        index: i32,
    ) -> Result<(i32, IdRole), DictError> {
        if index == 0 {
            return Ok((0, IdRole::Plain));
        }
        let i = slot(index, input.attributes.len(), "attribute_table")?;
        if let (a, Some(role)) = input.attributes[i] {
            return Ok((a, role));
        }
        let kv = &input.d.attribute_table[i];
        let at = |e: DictError| e.at(format!("attribute_table[{i}]"));
        let key_i =
            slot(kv.key_strindex, input.d.string_table.len(), "string_table").map_err(at)?;
        let value = kv
            .value
            .as_ref()
            .map(|v| resolve_value(input.d, v, 0))
            .transpose()
            .map_err(at)?;
        let role = match (&self.linking, value.as_ref().and_then(|v| v.value.as_ref())) {
            (None, _) => IdRole::Plain,
            (Some(l), Some(any_value::Value::StringValue(s))) => {
                l.role(&input.d.string_table[key_i], Some(s))
            }
            (Some(l), _) => l.role(&input.d.string_table[key_i], None),
        };
        let keep = self.linking.as_ref().is_none_or(|l| l.keep_link_attributes);
        let attr = match role {
            IdRole::SpanId(_) | IdRole::TraceId(_) if !keep => 0,
            _ => {
                let key = self.otlp_string(input, kv.key_strindex).map_err(at)?;
                let unit = self.otlp_string(input, kv.unit_strindex).map_err(at)?;
                self.dict.attribute(key, value, unit)
            }
        };
        input.attributes[i] = (attr, Some(role));
        Ok((attr, role))
    }
}

/// The ids of `link_table[i]`, checked for their lengths.
pub(crate) fn link_ids(l: &Link, i: usize) -> Result<([u8; 16], [u8; 8]), DictError> {
    let length = |field, what, len, want| DictError::IdLength {
        link: i,
        field,
        what,
        len,
        want,
    };
    let trace = (l.trace_id.as_slice().try_into())
        .map_err(|_| length("trace_id", "trace id", l.trace_id.len(), 16))?;
    let span = (l.span_id.as_slice().try_into())
        .map_err(|_| length("span_id", "span id", l.span_id.len(), 8))?;
    Ok((trace, span))
}

/// Resource and scope attributes with `key_strindex` / `string_value_strindex` references
/// resolved to plain keys and strings, since the dictionary they point into is rebuilt.
pub(crate) fn resolve_key_values(
    d: &ProfilesDictionary,
    kvs: &[KeyValue],
) -> Result<Vec<KeyValue>, DictError> {
    kvs.iter().map(|kv| resolve_key_value(d, kv, 0)).collect()
}

const MAX_DEPTH: usize = 64;

fn resolve_key_value(
    d: &ProfilesDictionary,
    kv: &KeyValue,
    depth: usize,
) -> Result<KeyValue, DictError> {
    let key = if kv.key.is_empty() && kv.key_strindex != 0 {
        let i = slot(kv.key_strindex, d.string_table.len(), "string_table")
            .map_err(|e| e.field("key_strindex"))?;
        d.string_table[i].clone()
    } else {
        kv.key.clone()
    };
    let value = kv
        .value
        .as_ref()
        .map(|v| resolve_value(d, v, depth))
        .transpose()?;
    Ok(KeyValue {
        key,
        value,
        key_strindex: 0,
    })
}

pub(crate) fn resolve_value(
    d: &ProfilesDictionary,
    v: &AnyValue,
    depth: usize,
) -> Result<AnyValue, DictError> {
    if depth > MAX_DEPTH {
        return Err(DictError::TooDeep);
    }
    use any_value::Value;
    let value = match &v.value {
        Some(Value::StringValueStrindex(i)) => {
            let i = slot(*i, d.string_table.len(), "string_table")
                .map_err(|e| e.field("string_value_strindex"))?;
            Some(Value::StringValue(d.string_table[i].clone()))
        }
        Some(Value::ArrayValue(a)) => Some(Value::ArrayValue(ArrayValue {
            values: a
                .values
                .iter()
                .map(|x| resolve_value(d, x, depth + 1))
                .collect::<Result<_, _>>()?,
        })),
        Some(Value::KvlistValue(l)) => Some(Value::KvlistValue(KeyValueList {
            values: l
                .values
                .iter()
                .map(|kv| resolve_key_value(d, kv, depth + 1))
                .collect::<Result<_, _>>()?,
        })),
        other => other.clone(),
    };
    Ok(AnyValue { value })
}
