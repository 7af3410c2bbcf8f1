//! pprof → OTLP Profiles: one `Profile` per pprof sample type (pprof's default first) sharing
//! one dictionary, labels as sample attributes, ids linked by [`crate::link`].

use hashbrown::HashMap;

use crate::batch::{Batch, ConversionReport, SampleSet};
use crate::error::FormatError;
use crate::link::{IdRole, LinkConfig, ProfileIds};
use crate::otlp::{
    any_value, AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, Line, Location,
    Mapping, Profile, ProfilesData, Resource, ScopeProfiles, ValueType,
};
use crate::pprof;

/// Semantic-convention attribute keys for what pprof carries beyond samples.
pub mod keys {
    /// Profile attribute: regex of frames to drop.
    pub const DROP_FRAMES: &str = "pprof.profile.drop_frames";
    /// Profile attribute: regex of frames to keep.
    pub const KEEP_FRAMES: &str = "pprof.profile.keep_frames";
    /// Profile attribute: documentation URL.
    pub const DOC_URL: &str = "pprof.profile.doc_url";
    /// Profile attribute: the comments, as a string array.
    pub const COMMENT: &str = "pprof.profile.comment";
    /// Scope attribute: pprof's default sample type name.
    pub const DEFAULT_SAMPLE_TYPE: &str = "pprof.scope.default_sample_type";
    /// Scope attribute: for each OTLP profile of the scope, its sample type's pprof index.
    pub const SAMPLE_TYPE_ORDER: &str = "pprof.scope.sample_type_order";
    /// Mapping attribute: the pprof build id.
    pub const BUILD_ID_GNU: &str = "process.executable.build_id.gnu";
    /// Mapping attribute flags, set only when true.
    pub const HAS_FUNCTIONS: &str = "pprof.mapping.has_functions";
    #[allow(missing_docs)]
    pub const HAS_FILENAMES: &str = "pprof.mapping.has_filenames";
    #[allow(missing_docs)]
    pub const HAS_LINE_NUMBERS: &str = "pprof.mapping.has_line_numbers";
    #[allow(missing_docs)]
    pub const HAS_INLINE_FRAMES: &str = "pprof.mapping.has_inline_frames";
    /// Location attribute, set only when true.
    pub const IS_FOLDED: &str = "pprof.location.is_folded";
}

/// Converts one pprof profile to OTLP, linking ids with `linking` when given.
pub fn pprof_to_otlp(
    profile: &pprof::Profile,
    resource: Resource,
    linking: Option<LinkConfig>,
) -> Result<(ProfilesData, ConversionReport), FormatError> {
    let mut batch = Batch::new(linking);
    batch.add_pprof(profile, resource)?;
    Ok(batch.finish())
}

/// Maps pprof ids (arbitrary non-zero u64) to positions in their table.
enum IdIndex {
    /// Ids are 1..=n in table order, as Go writes them.
    Dense(usize),
    Sparse(HashMap<u64, usize>),
}

impl IdIndex {
    /// The index of `what`'s ids (`location`, …); an id given twice is an error (a sample
    /// naming it could mean either, and a duplicated id was reported as another one missing).
    fn new(
        what: &str,
        ids: impl ExactSizeIterator<Item = u64> + Clone,
    ) -> Result<IdIndex, FormatError> {
        let n = ids.len();
        if ids.clone().enumerate().all(|(i, id)| id == i as u64 + 1) {
            return Ok(IdIndex::Dense(n));
        }
        let mut map = HashMap::with_capacity(n);
        for (i, id) in ids.enumerate() {
            if let Some(first) = map.insert(id, i) {
                return Err(FormatError::Invalid(format!(
                    "pprof {what} id {id} is given twice ({what}[{first}] and {what}[{i}])"
                )));
            }
        }
        Ok(IdIndex::Sparse(map))
    }

    fn get(&self, id: u64) -> Option<usize> {
        match self {
            IdIndex::Dense(n) => (id >= 1 && id <= *n as u64).then(|| id as usize - 1),
            IdIndex::Sparse(m) => m.get(&id).copied(),
        }
    }
}

/// Whether some sample of the profile uses each of its mappings (by position).
///
/// Only a mapping some location names can be used, and most profiles use every such mapping
/// within their first samples, where the scan stops. (Waiting for every mapping, one no
/// location names, as Go's [vdso] mostly is, kept the scan going through every sample's every
/// location: 7 % of converting the Go CPU profile of testdata.)
fn mappings_samples_use(input: &PprofInput) -> Vec<bool> {
    let p = input.p;
    let mut used = vec![false; p.mapping.len()];
    let mut named = vec![false; p.mapping.len()];
    for l in &p.location {
        if let Some(pos) = input.mapping_ids.get(l.mapping_id) {
            named[pos] = true;
        }
    }
    let mut unseen = named.iter().filter(|&&n| n).count();
    if unseen == 0 {
        return used;
    }
    for s in &p.sample {
        for &id in &s.location_id {
            let mapping = input.location_ids.get(id).map(|i| p.location[i].mapping_id);
            if let Some(pos) = mapping.and_then(|m| input.mapping_ids.get(m)) {
                if !used[pos] {
                    used[pos] = true;
                    unseen -= 1;
                    if unseen == 0 {
                        return used;
                    }
                }
            }
        }
    }
    used
}

/// One pprof profile being converted: pprof index → dictionary index, filled on first use so
/// that nothing unreferenced reaches the dictionary.
struct PprofInput<'a> {
    p: &'a pprof::Profile,
    strings: Vec<i32>,
    functions: Vec<i32>,
    mappings: Vec<i32>,
    locations: Vec<i32>,
    function_ids: IdIndex,
    mapping_ids: IdIndex,
    location_ids: IdIndex,
    labels: HashMap<pprof::Label, (IdRole, i32)>,
}

const UNSET: i32 = -1;

impl Batch {
    /// Adds one pprof profile under `resource`. On error the batch may hold unreferenced
    /// dictionary entries; discard it.
    ///
    /// Id attributes of `resource` (the upload's `name` tags, a push series' labels) are the
    /// profile's ids: they leave the resource and link every sample without ids of its own.
    pub fn add_pprof(
        &mut self,
        p: &pprof::Profile,
        mut resource: Resource,
    ) -> Result<(), FormatError> {
        let ids = self.take_profile_ids(&mut resource.attributes);
        self.linker.start_profile(ids);
        let mut input = PprofInput {
            p,
            strings: vec![UNSET; p.string_table.len()],
            functions: vec![UNSET; p.function.len()],
            mappings: vec![UNSET; p.mapping.len()],
            locations: vec![UNSET; p.location.len()],
            function_ids: IdIndex::new("function", p.function.iter().map(|f| f.id))?,
            mapping_ids: IdIndex::new("mapping", p.mapping.iter().map(|m| m.id))?,
            location_ids: IdIndex::new("location", p.location.iter().map(|l| l.id))?,
            // Sized for about one distinct label per sample (mostly span and trace ids): grown
            // label by label, its rehashing took 1 % of the server's CPU under the load bench.
            labels: HashMap::with_capacity(p.sample.len().min(p.string_table.len())),
        };
        let width = p.sample_type.len();
        if width == 0 && !p.sample.is_empty() {
            return Err(FormatError::Invalid(
                "pprof profile has samples but no sample_type".into(),
            ));
        }
        self.dict.reserve(
            p.string_table.len(),
            p.function.len(),
            p.location.len(),
            p.sample.len(),
        );
        // The mappings samples use, in pprof's order: its first is the main binary (pprof
        // tools name it as the profile's File), and interned on first use a sample whose leaf
        // is in libc made libc the first on the way back. (One mapping: nothing to order.)
        if p.mapping.len() > 1 {
            let used = mappings_samples_use(&input);
            for (m, _) in p.mapping.iter().zip(used).filter(|(_, used)| *used) {
                // A mapping that does not convert is reported where a sample uses it.
                let _ = self.pprof_mapping(&mut input, m.id);
            }
        }
        let mut set = SampleSet::new(width, p.sample.len());
        let mut stack = Vec::new();
        let mut attrs = Vec::new();
        let mut keys = Vec::new();
        let keep = self
            .linking
            .as_ref()
            .is_some_and(|l| l.keep_link_attributes);
        for (si, s) in p.sample.iter().enumerate() {
            if s.value.len() != width {
                return Err(FormatError::Invalid(format!(
                    "pprof sample[{si}] has {} values but the profile has {width} sample types",
                    s.value.len()
                )));
            }
            stack.clear();
            for (li, &id) in s.location_id.iter().enumerate() {
                stack.push(self.pprof_location(&mut input, id).map_err(|e| {
                    FormatError::Invalid(format!("pprof sample[{si}].location_id[{li}]: {e}"))
                })?);
            }
            let stack_index = self.dict.stack(&stack);
            attrs.clear();
            keys.clear();
            for (li, label) in s.label.iter().enumerate() {
                let (role, attr) = self.pprof_label(&mut input, label).map_err(|e| {
                    FormatError::Invalid(format!("pprof sample[{si}].label[{li}]: {e}"))
                })?;
                // A repeated span id key is nested spans (SDKs that keep thread tags as a
                // set): every one is a candidate. Another repeated key keeps its first value.
                if keys.contains(&label.key) && !matches!(role, IdRole::SpanId(_)) {
                    self.report.duplicate_label_keys += 1;
                    continue;
                }
                keys.push(label.key);
                if self.linker.observe(role, keep) && !attrs.contains(&attr) {
                    attrs.push(attr);
                }
            }
            if self.linker.needs_span_counts() {
                let counts = self.pprof_span_counts(&mut input)?;
                self.linker.set_span_counts(counts);
            }
            let link = self.linker.finish(&mut self.dict, &mut attrs);
            attrs.sort_unstable();
            set.add(stack_index, link, &attrs, &s.value);
        }
        let scope = self.pprof_scope(&mut input, &set)?;
        self.report.inputs += 1;
        self.push_scope(resource, "", scope);
        Ok(())
    }

    /// Takes the id attributes out of a profile's resource attributes, as its ids.
    pub(crate) fn take_profile_ids(&self, attributes: &mut Vec<KeyValue>) -> ProfileIds {
        let mut ids = ProfileIds::default();
        let Some(linking) = &self.linking else {
            return ids;
        };
        attributes.retain(|kv| {
            let text = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                _ => None,
            };
            let role = linking.role(&kv.key, text);
            // An id key with a value that is no id stays (as on samples); a valid id leaves.
            !ids.observe(role)
        });
        ids
    }

    /// How many samples of `input` carry each span id (see [`SampleLinker`]).
    fn pprof_span_counts(
        &mut self,
        input: &mut PprofInput,
    ) -> Result<hashbrown::HashMap<[u8; 8], u32>, FormatError> {
        let mut counts = hashbrown::HashMap::new();
        let mut roles = Vec::new();
        for (si, s) in input.p.sample.iter().enumerate() {
            roles.clear();
            for (li, label) in s.label.iter().enumerate() {
                let (role, _) = self.pprof_label(input, label).map_err(|e| {
                    FormatError::Invalid(format!("pprof sample[{si}].label[{li}]: {e}"))
                })?;
                roles.push(role);
            }
            self.linker.count_sample(&mut counts, roles.iter().copied());
        }
        Ok(counts)
    }

    fn pprof_string(&mut self, input: &mut PprofInput, index: i64) -> Result<i32, RefError> {
        let slot = usize::try_from(index)
            .ok()
            .filter(|&i| i < input.strings.len())
            .ok_or(RefError::StringOutOfRange {
                index,
                len: input.strings.len(),
            })?;
        if input.strings[slot] == UNSET {
            input.strings[slot] = self.dict.string(&input.p.string_table[slot]);
        }
        Ok(input.strings[slot])
    }

    fn pprof_function(&mut self, input: &mut PprofInput, id: u64) -> Result<i32, RefError> {
        let pos = input.function_ids.get(id).ok_or(RefError::NotFound {
            table: "function",
            id,
        })?;
        if input.functions[pos] == UNSET {
            let f = &input.p.function[pos];
            let converted = Function {
                name_strindex: self.pprof_string(input, f.name)?,
                system_name_strindex: self.pprof_string(input, f.system_name)?,
                filename_strindex: self.pprof_string(input, f.filename)?,
                start_line: f.start_line,
            };
            input.functions[pos] = self.dict.function(converted);
        }
        Ok(input.functions[pos])
    }

    fn pprof_mapping(&mut self, input: &mut PprofInput, id: u64) -> Result<i32, RefError> {
        if id == 0 {
            return Ok(0);
        }
        let pos = input.mapping_ids.get(id).ok_or(RefError::NotFound {
            table: "mapping",
            id,
        })?;
        if input.mappings[pos] == UNSET {
            let m = &input.p.mapping[pos];
            let mut attribute_indices = Vec::new();
            let build_id = pprof_str(input.p, m.build_id)?;
            if !build_id.is_empty() {
                attribute_indices.push(self.dict.string_attribute(keys::BUILD_ID_GNU, build_id));
            }
            for (flag, key) in [
                (m.has_functions, keys::HAS_FUNCTIONS),
                (m.has_filenames, keys::HAS_FILENAMES),
                (m.has_line_numbers, keys::HAS_LINE_NUMBERS),
                (m.has_inline_frames, keys::HAS_INLINE_FRAMES),
            ] {
                if flag {
                    attribute_indices.push(self.bool_attribute(key));
                }
            }
            let converted = Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename_strindex: self.pprof_string(input, m.filename)?,
                attribute_indices,
            };
            input.mappings[pos] = self.dict.mapping(converted);
        }
        Ok(input.mappings[pos])
    }

    fn pprof_location(&mut self, input: &mut PprofInput, id: u64) -> Result<i32, RefError> {
        let pos = input.location_ids.get(id).ok_or(RefError::NotFound {
            table: "location",
            id,
        })?;
        if input.locations[pos] == UNSET {
            let l = &input.p.location[pos];
            let mapping_index = self
                .pprof_mapping(input, l.mapping_id)
                .map_err(|e| e.in_location(id))?;
            let mut lines = Vec::with_capacity(l.line.len());
            for line in &l.line {
                lines.push(Line {
                    function_index: self
                        .pprof_function(input, line.function_id)
                        .map_err(|e| e.in_location(id))?,
                    line: line.line,
                    column: line.column,
                });
            }
            let attribute_indices = if l.is_folded {
                vec![self.bool_attribute(keys::IS_FOLDED)]
            } else {
                Vec::new()
            };
            let converted = Location {
                mapping_index,
                address: l.address,
                lines,
                attribute_indices,
            };
            input.locations[pos] = self.dict.location(converted);
        }
        Ok(input.locations[pos])
    }

    /// The link role and attribute index of a label; the attribute is only interned when the
    /// label can stay on a sample, so linked ids leave no orphans in the dictionary.
    fn pprof_label(
        &mut self,
        input: &mut PprofInput,
        label: &pprof::Label,
    ) -> Result<(IdRole, i32), RefError> {
        if let Some(&hit) = input.labels.get(label) {
            return Ok(hit);
        }
        let key_str = pprof_str(input.p, label.key)?;
        // A string label's value; a number label's unit is checked here too.
        let text = if label.str != 0 {
            Some(pprof_str(input.p, label.str)?)
        } else {
            pprof_str(input.p, label.num_unit)?;
            None
        };
        let role = self
            .linking
            .as_ref()
            .map_or(IdRole::Plain, |l| l.role(key_str, text));
        let keep = self.linking.as_ref().is_none_or(|l| l.keep_link_attributes);
        let attr = match role {
            // A linked id stays off the sample: nothing of it is interned (or copied).
            IdRole::SpanId(_) | IdRole::TraceId(_) if !keep => 0,
            _ => {
                let key = self.pprof_string(input, label.key)?;
                let (value, unit) = match text {
                    Some(text) => (str_value(text.to_owned()), 0),
                    None => (
                        AnyValue {
                            value: Some(any_value::Value::IntValue(label.num)),
                        },
                        self.pprof_string(input, label.num_unit)?,
                    ),
                };
                self.dict.attribute(key, Some(value), unit)
            }
        };
        input.labels.insert(*label, (role, attr));
        Ok((role, attr))
    }

    fn bool_attribute(&mut self, key: &str) -> i32 {
        let key = self.dict.string(key);
        self.dict.attribute(
            key,
            Some(AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            }),
            0,
        )
    }

    // Long: one pprof sample set into one OTLP scope: types, samples and attributes in one pass over the input's tables.
    #[allow(clippy::too_many_lines)]
    fn pprof_scope(
        &mut self,
        input: &mut PprofInput,
        set: &SampleSet,
    ) -> Result<ScopeProfiles, FormatError> {
        let p = input.p;
        let n = p.sample_type.len();
        let err = |what: &str, e: RefError| FormatError::Invalid(format!("pprof {what}: {e}"));
        // pprof shows its default sample type (the last, unless named); OTLP tools show the
        // first profile. Move the default to the front and record the order for the way back.
        let default = if p.default_sample_type != 0 {
            p.sample_type
                .iter()
                .position(|t| t.r#type == p.default_sample_type)
        } else {
            None
        };
        let first = default.unwrap_or(n.saturating_sub(1));
        let order: Vec<usize> = std::iter::once(first)
            .chain((0..n).filter(|&i| i != first))
            .take(n)
            .collect();

        let mut profile_attrs = Vec::new();
        for (index, key) in [
            (p.drop_frames, keys::DROP_FRAMES),
            (p.keep_frames, keys::KEEP_FRAMES),
            (p.doc_url, keys::DOC_URL),
        ] {
            let value = pprof_str(p, index).map_err(|e| err(key, e))?;
            if !value.is_empty() {
                let key = self.dict.string(key);
                profile_attrs.push(
                    self.dict
                        .attribute(key, Some(str_value(value.to_owned())), 0),
                );
            }
        }
        if !p.comment.is_empty() {
            let mut comments = Vec::with_capacity(p.comment.len());
            for (i, &c) in p.comment.iter().enumerate() {
                let c = pprof_str(p, c).map_err(|e| err(&format!("comment[{i}]"), e))?;
                comments.push(str_value(c.to_owned()));
            }
            let key = self.dict.string(keys::COMMENT);
            let value = AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: comments,
                })),
            };
            profile_attrs.push(self.dict.attribute(key, Some(value), 0));
        }
        let period_type = match p.period_type {
            Some(t) => Some(
                self.pprof_value_type(input, t)
                    .map_err(|e| err("period_type", e))?,
            ),
            None => None,
        };
        let mut profiles = Vec::with_capacity(n);
        for &column in &order {
            let sample_type = self
                .pprof_value_type(input, p.sample_type[column])
                .map_err(|e| err(&format!("sample_type[{column}]"), e))?;
            profiles.push(Profile {
                sample_type: Some(sample_type),
                samples: set.samples(column),
                time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
                duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
                period_type,
                period: p.period,
                attribute_indices: profile_attrs.clone(),
                ..Default::default()
            });
        }
        let mut attributes = vec![KeyValue {
            key: keys::SAMPLE_TYPE_ORDER.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: order
                        .iter()
                        .map(|&i| AnyValue {
                            value: Some(any_value::Value::IntValue(i as i64)),
                        })
                        .collect(),
                })),
            }),
            ..Default::default()
        }];
        if default.is_some() {
            let name = input
                .p
                .str(p.default_sample_type)
                .unwrap_or_default()
                .to_owned();
            attributes.push(KeyValue {
                key: keys::DEFAULT_SAMPLE_TYPE.into(),
                value: Some(str_value(name)),
                ..Default::default()
            });
        }
        Ok(ScopeProfiles {
            scope: Some(InstrumentationScope {
                attributes,
                ..Default::default()
            }),
            profiles,
            schema_url: String::new(),
        })
    }

    fn pprof_value_type(
        &mut self,
        input: &mut PprofInput,
        t: pprof::ValueType,
    ) -> Result<ValueType, RefError> {
        Ok(ValueType {
            type_strindex: self.pprof_string(input, t.r#type)?,
            unit_strindex: self.pprof_string(input, t.unit)?,
        })
    }
}

/// The string at `index` of a pprof string table, checked.
fn pprof_str(p: &pprof::Profile, index: i64) -> Result<&str, RefError> {
    p.str(index).ok_or(RefError::StringOutOfRange {
        index,
        len: p.string_table.len(),
    })
}

/// A reference inside a pprof profile that cannot be followed; the caller says where it was
/// (`pprof sample[3].label[0]: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RefError {
    /// A string index past the string table.
    #[error("string index {index} out of range (string_table has {len} entries)")]
    StringOutOfRange {
        /// The index given.
        index: i64,
        /// Entries in the string table.
        len: usize,
    },
    /// An id no entry of its table has.
    #[error("{table} id {id} not found")]
    NotFound {
        /// `function`, `mapping` or `location`.
        table: &'static str,
        /// The id given.
        id: u64,
    },
    /// Found following location `id`.
    #[error("location id {id}: {inner}")]
    InLocation {
        /// The location's id.
        id: u64,
        /// What is wrong.
        inner: Box<RefError>,
    },
}

impl RefError {
    /// This error, found following location `id`.
    fn in_location(self, id: u64) -> Self {
        RefError::InLocation {
            id,
            inner: Box::new(self),
        }
    }
}

fn str_value(s: String) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    }
}
