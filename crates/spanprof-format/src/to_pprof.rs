//! OTLP Profiles → pprof: lossless for everything pprof can express. Profiles of one scope that
//! came from one pprof (recorded by `pprof.scope.sample_type_order`) become one pprof with
//! several sample types again; links become `span_id` / `trace_id` labels in hex (unless the
//! sample kept its id labels as attributes: then those, as they were).

use hashbrown::HashMap;

use crate::error::FormatError;
use crate::link::{parse_id, to_hex};
use crate::merge::{slot, DictError};
use crate::otlp::{
    any_value, AnyValue, Profile, ProfilesData, ProfilesDictionary, Resource, ScopeProfiles,
};
use crate::pprof;
use crate::to_otlp::keys;

/// Label keys for link ids on the way back to pprof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PprofOptions {
    /// Label key for the span id (hex), `span_id` by default.
    pub span_id_label: String,
    /// Label key for the trace id (hex), `trace_id` by default.
    pub trace_id_label: String,
}

impl Default for PprofOptions {
    fn default() -> Self {
        PprofOptions {
            span_id_label: "span_id".into(),
            trace_id_label: "trace_id".into(),
        }
    }
}

/// One pprof made from a group of OTLP profiles, with where it came from.
#[derive(Debug, Clone)]
pub struct PprofOutput {
    /// Index into `resource_profiles`.
    pub resource_index: usize,
    /// Index into that resource's `scope_profiles`.
    pub scope_index: usize,
    /// Indices of the OTLP profiles (in the scope) that became this pprof's sample types.
    pub profile_indices: Vec<usize>,
    /// The converted profile.
    pub profile: pprof::Profile,
}

/// Converts every (resource, scope, sample-type group) of `data` to its own pprof.
pub fn otlp_to_pprof(
    data: &ProfilesData,
    opts: &PprofOptions,
) -> Result<Vec<PprofOutput>, FormatError> {
    let empty = ProfilesDictionary::default();
    let dict = data.dictionary.as_ref().unwrap_or(&empty);
    let mut out = Vec::new();
    for (ri, rp) in data.resource_profiles.iter().enumerate() {
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            for group in sample_type_groups(sp) {
                let mut b = PprofBuilder::new(dict, opts);
                b.add_group(
                    sp,
                    &group,
                    &format!("resource_profiles[{ri}].scope_profiles[{si}]"),
                )?;
                out.push(PprofOutput {
                    resource_index: ri,
                    scope_index: si,
                    profile_indices: group.iter().map(|&(p, _)| p).collect(),
                    profile: b.finish(),
                });
            }
        }
    }
    Ok(out)
}

/// Converts all of `data` into one pprof, summing samples with the same stack and labels (like
/// `go tool pprof` merging files). Every group must have the same sample types.
pub fn otlp_to_merged_pprof(
    data: &ProfilesData,
    opts: &PprofOptions,
) -> Result<pprof::Profile, FormatError> {
    let empty = ProfilesDictionary::default();
    let dict = data.dictionary.as_ref().unwrap_or(&empty);
    let mut b = PprofBuilder::new(dict, opts);
    for (ri, rp) in data.resource_profiles.iter().enumerate() {
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            for group in sample_type_groups(sp) {
                b.add_group(
                    sp,
                    &group,
                    &format!("resource_profiles[{ri}].scope_profiles[{si}]"),
                )?;
            }
        }
    }
    Ok(b.finish())
}

/// The resource's `service.name`, if any.
pub fn service_name(resource: &Resource) -> Option<&str> {
    resource
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        })
}

/// Groups a scope's profiles into pprofs: (profile index in scope, pprof sample-type position).
fn sample_type_groups(sp: &ScopeProfiles) -> Vec<Vec<(usize, usize)>> {
    let n = sp.profiles.len();
    if n == 0 {
        // A scope without profiles (a pprof without sample types) makes no pprof.
        return Vec::new();
    }
    let order: Option<Vec<usize>> = sp.scope.as_ref().and_then(|s| {
        let kv = s
            .attributes
            .iter()
            .find(|kv| kv.key == keys::SAMPLE_TYPE_ORDER)?;
        let Some(any_value::Value::ArrayValue(a)) = kv.value.as_ref()?.value.as_ref() else {
            return None;
        };
        a.values
            .iter()
            .map(|v| match v.value {
                Some(any_value::Value::IntValue(i)) => usize::try_from(i).ok(),
                _ => None,
            })
            .collect()
    });
    if let Some(order) = order {
        let k = order.len();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        let is_permutation = sorted.iter().enumerate().all(|(i, &x)| i == x);
        if k > 0 && n.is_multiple_of(k) && is_permutation {
            return (0..n / k)
                .map(|g| (0..k).map(|i| (g * k + i, order[i])).collect())
                .collect();
        }
    }
    // No recorded order: one pprof when the profiles look like one recording with several
    // sample types, otherwise one pprof per profile.
    let same_window = sp.profiles.windows(2).all(|w| {
        w[0].time_unix_nano == w[1].time_unix_nano
            && w[0].duration_nano == w[1].duration_nano
            && w[0].period == w[1].period
    });
    let mut types: Vec<_> = sp
        .profiles
        .iter()
        .map(|p| p.sample_type.map(|t| (t.type_strindex, t.unit_strindex)))
        .collect();
    types.sort_unstable();
    types.dedup();
    if same_window && types.len() == n {
        vec![(0..n).map(|i| (i, i)).collect()]
    } else {
        (0..n).map(|i| vec![(i, 0)]).collect()
    }
}

const UNSET: u64 = 0;

struct PprofBuilder<'a> {
    d: &'a ProfilesDictionary,
    opts: &'a PprofOptions,
    out: pprof::Profile,
    strings: HashMap<String, i64>,
    functions: Vec<u64>,
    mappings: Vec<u64>,
    locations: Vec<u64>,
    /// Link index → string indices of its span and trace id in hex (0: none), once made:
    /// most samples carry a link, and hexing and interning its ids per sample cost two
    /// allocations and two lookups each.
    links: Vec<Option<(i64, i64)>>,
    /// String indices of the span and trace id label keys, once interned.
    id_keys: Option<(i64, i64)>,
    /// OTLP sample identity (stack, link, attributes) → index into `out.sample`.
    samples: HashMap<(i32, i32, Vec<i32>), usize>,
    /// Sample type (type, unit) strings in pprof order, fixed by the first group.
    types: Vec<(String, String)>,
    window: Option<(u64, u64)>,
}

impl<'a> PprofBuilder<'a> {
    fn new(d: &'a ProfilesDictionary, opts: &'a PprofOptions) -> Self {
        let mut strings = HashMap::new();
        strings.insert(String::new(), 0);
        PprofBuilder {
            d,
            opts,
            out: pprof::Profile {
                string_table: vec![String::new()],
                ..Default::default()
            },
            strings,
            functions: vec![UNSET; d.function_table.len()],
            mappings: vec![UNSET; d.mapping_table.len()],
            locations: vec![UNSET; d.location_table.len()],
            links: vec![None; d.link_table.len()],
            id_keys: None,
            samples: HashMap::new(),
            types: Vec::new(),
            window: None,
        }
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.out.string_table.len() as i64;
        self.out.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn dict_str(&self, index: i32) -> Result<&'a str, DictError> {
        let i = slot(index, self.d.string_table.len(), "string_table")?;
        Ok(self.d.string_table[i].as_str())
    }

    fn string_of(&mut self, index: i32) -> Result<i64, DictError> {
        let s = self.dict_str(index)?;
        Ok(self.string(s))
    }

    fn add_group(
        &mut self,
        sp: &ScopeProfiles,
        group: &[(usize, usize)],
        path: &str,
    ) -> Result<(), FormatError> {
        let err = |e: DictError| FormatError::Invalid(format!("{path}: {e}"));
        let k = group.len();
        // Sample types of this group in pprof order.
        let mut types = vec![(String::new(), String::new()); k];
        for &(pi, pos) in group {
            let t = sp.profiles[pi].sample_type.unwrap_or_default();
            types[pos] = (
                self.dict_str(t.type_strindex).map_err(err)?.to_owned(),
                self.dict_str(t.unit_strindex).map_err(err)?.to_owned(),
            );
        }
        let columns: Vec<usize> = if self.types.is_empty() {
            self.start(sp, group).map_err(err)?;
            self.types = types.clone();
            (0..k).collect()
        } else {
            if types.len() != self.types.len() {
                return Err(FormatError::Invalid(format!(
                    "cannot merge profiles with sample types {} and {}",
                    type_list(&self.types),
                    type_list(&types)
                )));
            }
            let mut cols = Vec::with_capacity(k);
            for t in &types {
                cols.push(self.types.iter().position(|x| x == t).ok_or_else(|| {
                    FormatError::Invalid(format!(
                        "cannot merge profiles with sample types {} and {}",
                        type_list(&self.types),
                        type_list(&types)
                    ))
                })?);
            }
            cols
        };
        let width = self.types.len();
        for &(pi, pos) in group {
            let p = &sp.profiles[pi];
            self.widen_window(p);
            let column = columns[pos];
            for (i, s) in p.samples.iter().enumerate() {
                let at = |e: DictError| {
                    FormatError::Invalid(format!("{path}.profiles[{pi}].samples[{i}]: {e}"))
                };
                let mut attrs = s.attribute_indices.clone();
                attrs.sort_unstable();
                let key = (s.stack_index, s.link_index, attrs);
                let index = match self.samples.get(&key) {
                    Some(&index) => index,
                    None => {
                        let sample = self
                            .new_sample(s.stack_index, s.link_index, &s.attribute_indices, width)
                            .map_err(at)?;
                        self.out.sample.push(sample);
                        self.samples.insert(key, self.out.sample.len() - 1);
                        self.out.sample.len() - 1
                    }
                };
                let value = if s.values.is_empty() {
                    s.timestamps_unix_nano.len() as i64
                } else {
                    s.values.iter().fold(0i64, |a, v| a.saturating_add(*v))
                };
                let slot = &mut self.out.sample[index].value[column];
                *slot = slot.saturating_add(value);
            }
        }
        Ok(())
    }

    /// Profile-level fields from the first group.
    fn start(&mut self, sp: &ScopeProfiles, group: &[(usize, usize)]) -> Result<(), DictError> {
        let mut sample_type = vec![pprof::ValueType::default(); group.len()];
        for &(pi, pos) in group {
            let t = sp.profiles[pi].sample_type.unwrap_or_default();
            sample_type[pos] = pprof::ValueType {
                r#type: self.string_of(t.type_strindex)?,
                unit: self.string_of(t.unit_strindex)?,
            };
        }
        self.out.sample_type = sample_type;
        let first = &sp.profiles[group[0].0];
        if let Some(t) = first.period_type {
            self.out.period_type = Some(pprof::ValueType {
                r#type: self.string_of(t.type_strindex)?,
                unit: self.string_of(t.unit_strindex)?,
            });
        }
        self.out.period = first.period;
        for &a in &first.attribute_indices {
            let i = slot(a, self.d.attribute_table.len(), "attribute_table")?;
            let kv = &self.d.attribute_table[i];
            let key = self.dict_str(kv.key_strindex)?;
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            match (key, value) {
                (keys::DROP_FRAMES, Some(any_value::Value::StringValue(s))) => {
                    self.out.drop_frames = self.string(s)
                }
                (keys::KEEP_FRAMES, Some(any_value::Value::StringValue(s))) => {
                    self.out.keep_frames = self.string(s)
                }
                (keys::DOC_URL, Some(any_value::Value::StringValue(s))) => {
                    self.out.doc_url = self.string(s)
                }
                (keys::COMMENT, Some(any_value::Value::ArrayValue(a))) => {
                    for v in &a.values {
                        if let Some(any_value::Value::StringValue(s)) = &v.value {
                            let c = self.string(s);
                            self.out.comment.push(c);
                        }
                    }
                }
                _ => {}
            }
        }
        let default = sp.scope.as_ref().and_then(|s| {
            s.attributes
                .iter()
                .find(|kv| kv.key == keys::DEFAULT_SAMPLE_TYPE)
        });
        if let Some(Some(any_value::Value::StringValue(name))) =
            default.map(|kv| kv.value.as_ref().and_then(|v| v.value.as_ref()))
        {
            self.out.default_sample_type = self.string(name);
        } else if group.len() > 1 && group[0].1 != group.len() - 1 {
            // Without a recorded default, keep the OTLP default (the first profile) as pprof's.
            self.out.default_sample_type = self.out.sample_type[group[0].1].r#type;
        }
        Ok(())
    }

    fn widen_window(&mut self, p: &Profile) {
        let (start, end) = (
            p.time_unix_nano,
            p.time_unix_nano.saturating_add(p.duration_nano),
        );
        let (s, e) = match self.window {
            Some((s, e)) => (s.min(start), e.max(end)),
            None => (start, end),
        };
        self.window = Some((s, e));
    }

    fn new_sample(
        &mut self,
        stack: i32,
        link: i32,
        attrs: &[i32],
        width: usize,
    ) -> Result<pprof::Sample, DictError> {
        let mut location_id = Vec::new();
        if stack != 0 {
            let i = slot(stack, self.d.stack_table.len(), "stack_table")
                .map_err(|e| e.field("stack_index"))?;
            for &l in &self.d.stack_table[i].location_indices {
                location_id.push(
                    self.location(l)
                        .map_err(|e| e.at(format!("stack_table[{i}]")))?,
                );
            }
        }
        // The link's ids, unless an attribute of the sample already says them (the id labels
        // kept when linking, `keep_link_attributes`): those come back as they were, under their
        // own key and in their own case, and the link adds no second label.
        let d = self.d;
        let (mut span, mut trace, link_slot) = match link {
            0 => (None, None, None),
            _ => {
                let i = slot(link, d.link_table.len(), "link_table")
                    .map_err(|e| e.field("link_index"))?;
                let l = &d.link_table[i];
                (
                    Some(&l.span_id).filter(|id| !id.is_empty()),
                    Some(&l.trace_id).filter(|id| !id.is_empty()),
                    Some(i),
                )
            }
        };
        let mut label = Vec::with_capacity(attrs.len() + 2);
        for &a in attrs {
            let i = slot(a, self.d.attribute_table.len(), "attribute_table")
                .map_err(|e| e.at("attribute_indices".into()))?;
            let kv = &self.d.attribute_table[i];
            if i == 0 {
                continue;
            }
            let key = self
                .string_of(kv.key_strindex)
                .map_err(|e| e.at(format!("attribute_table[{i}]")))?;
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            label.push(match value {
                Some(any_value::Value::IntValue(n)) => pprof::Label {
                    key,
                    num: *n,
                    num_unit: self.string_of(kv.unit_strindex)?,
                    ..Default::default()
                },
                other => {
                    let s = self.value_text(other)?;
                    if span.is_some_and(|id| parse_id::<8>(&s).is_some_and(|p| p[..] == id[..])) {
                        span = None;
                    }
                    if trace.is_some_and(|id| parse_id::<16>(&s).is_some_and(|p| p[..] == id[..])) {
                        trace = None;
                    }
                    pprof::Label {
                        key,
                        str: self.string(&s),
                        ..Default::default()
                    }
                }
            });
        }
        if let Some(i) = link_slot.filter(|_| span.is_some() || trace.is_some()) {
            let (span_key, trace_key) = self.id_keys();
            let (span_str, trace_str) = self.link_strings(i);
            for (key, str, id) in [(span_key, span_str, span), (trace_key, trace_str, trace)] {
                if id.is_some() {
                    label.push(pprof::Label {
                        key,
                        str,
                        ..Default::default()
                    });
                }
            }
        }
        Ok(pprof::Sample {
            location_id,
            value: vec![0; width],
            label,
        })
    }

    /// The string indices of the span and trace id label keys.
    fn id_keys(&mut self) -> (i64, i64) {
        if let Some(keys) = self.id_keys {
            return keys;
        }
        let opts = self.opts;
        let keys = (
            self.string(&opts.span_id_label),
            self.string(&opts.trace_id_label),
        );
        self.id_keys = Some(keys);
        keys
    }

    /// The string indices of link `i`'s span and trace id in hex (0 for an empty id).
    fn link_strings(&mut self, i: usize) -> (i64, i64) {
        if let Some(strings) = self.links[i] {
            return strings;
        }
        let l = &self.d.link_table[i];
        let mut hex = |id: &[u8]| {
            if id.is_empty() {
                0
            } else {
                self.string(&to_hex(id))
            }
        };
        let strings = (hex(&l.span_id), hex(&l.trace_id));
        self.links[i] = Some(strings);
        strings
    }

    fn value_text(&self, v: Option<&any_value::Value>) -> Result<String, DictError> {
        Ok(match v {
            None => String::new(),
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::StringValueStrindex(i)) => self.dict_str(*i)?.to_owned(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            Some(any_value::Value::IntValue(n)) => n.to_string(),
            Some(any_value::Value::DoubleValue(d)) => d.to_string(),
            Some(any_value::Value::BytesValue(b)) => to_hex(b),
            Some(other) => format!(
                "{:?}",
                AnyValue {
                    value: Some(other.clone())
                }
            ),
        })
    }

    fn location(&mut self, index: i32) -> Result<u64, DictError> {
        let i = slot(index, self.locations.len(), "location_table")?;
        if self.locations[i] == UNSET {
            let l = &self.d.location_table[i];
            let mapping_id = if l.mapping_index == 0 {
                0
            } else {
                self.mapping(l.mapping_index)
                    .map_err(|e| e.at(format!("location_table[{i}]")))?
            };
            let mut line = Vec::with_capacity(l.lines.len());
            for ln in &l.lines {
                let function_id = self
                    .function(ln.function_index)
                    .map_err(|e| e.at(format!("location_table[{i}]")))?;
                line.push(pprof::Line {
                    function_id,
                    line: ln.line,
                    column: ln.column,
                });
            }
            let is_folded = self.has_flag(&l.attribute_indices, keys::IS_FOLDED);
            let id = self.out.location.len() as u64 + 1;
            self.out.location.push(pprof::Location {
                id,
                mapping_id,
                address: l.address,
                line,
                is_folded,
            });
            self.locations[i] = id;
        }
        Ok(self.locations[i])
    }

    fn function(&mut self, index: i32) -> Result<u64, DictError> {
        let i = slot(index, self.functions.len(), "function_table")?;
        if self.functions[i] == UNSET {
            let f = self.d.function_table[i];
            let at = |e: DictError| e.at(format!("function_table[{i}]"));
            let id = self.out.function.len() as u64 + 1;
            let function = pprof::Function {
                id,
                name: self.string_of(f.name_strindex).map_err(at)?,
                system_name: self.string_of(f.system_name_strindex).map_err(at)?,
                filename: self.string_of(f.filename_strindex).map_err(at)?,
                start_line: f.start_line,
            };
            self.out.function.push(function);
            self.functions[i] = id;
        }
        Ok(self.functions[i])
    }

    fn mapping(&mut self, index: i32) -> Result<u64, DictError> {
        let i = slot(index, self.mappings.len(), "mapping_table")?;
        if self.mappings[i] == UNSET {
            let m = &self.d.mapping_table[i];
            let at = |e: DictError| e.at(format!("mapping_table[{i}]"));
            let mut build_id = 0;
            for &a in &m.attribute_indices {
                let ai = slot(a, self.d.attribute_table.len(), "attribute_table").map_err(at)?;
                let kv = &self.d.attribute_table[ai];
                let key = self.dict_str(kv.key_strindex).map_err(at)?;
                if key.starts_with("process.executable.build_id.")
                    && (build_id == 0 || key == keys::BUILD_ID_GNU)
                {
                    if let Some(any_value::Value::StringValue(s)) =
                        kv.value.as_ref().and_then(|v| v.value.as_ref())
                    {
                        build_id = self.string(s);
                    }
                }
            }
            let id = self.out.mapping.len() as u64 + 1;
            let mapping = pprof::Mapping {
                id,
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename: self.string_of(m.filename_strindex).map_err(at)?,
                build_id,
                has_functions: self.has_flag(&m.attribute_indices, keys::HAS_FUNCTIONS),
                has_filenames: self.has_flag(&m.attribute_indices, keys::HAS_FILENAMES),
                has_line_numbers: self.has_flag(&m.attribute_indices, keys::HAS_LINE_NUMBERS),
                has_inline_frames: self.has_flag(&m.attribute_indices, keys::HAS_INLINE_FRAMES),
            };
            self.out.mapping.push(mapping);
            self.mappings[i] = id;
        }
        Ok(self.mappings[i])
    }

    fn has_flag(&self, attrs: &[i32], key: &str) -> bool {
        attrs.iter().any(|&a| {
            let Some(kv) = usize::try_from(a)
                .ok()
                .and_then(|i| self.d.attribute_table.get(i))
            else {
                return false;
            };
            self.dict_str(kv.key_strindex).ok() == Some(key)
                && matches!(
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                    Some(any_value::Value::BoolValue(true))
                )
        })
    }

    fn finish(mut self) -> pprof::Profile {
        // Mappings in the dictionary's order, not in the order samples came to them: pprof's
        // first mapping is the main binary (`go tool pprof` names it as the profile's File and
        // Build ID), and a first sample whose leaf is in libc made libc the first.
        let mut used: Vec<(usize, u64)> = (self.mappings.iter().copied().enumerate())
            .filter(|&(_, id)| id != UNSET)
            .collect();
        used.sort_unstable();
        let mut old: Vec<Option<pprof::Mapping>> = std::mem::take(&mut self.out.mapping)
            .into_iter()
            .map(Some)
            .collect();
        let mut new_id = vec![0u64; old.len() + 1];
        for (n, &(_, id)) in used.iter().enumerate() {
            let mut m = old[id as usize - 1].take().expect("each mapping once");
            m.id = n as u64 + 1;
            new_id[id as usize] = m.id;
            self.out.mapping.push(m);
        }
        for l in &mut self.out.location {
            if let Some(&id) = new_id
                .get(l.mapping_id as usize)
                .filter(|_| l.mapping_id != 0)
            {
                l.mapping_id = id;
            }
        }
        if let Some((start, end)) = self.window {
            self.out.time_nanos = i64::try_from(start).unwrap_or(i64::MAX);
            self.out.duration_nanos = i64::try_from(end - start).unwrap_or(i64::MAX);
        }
        self.out
    }
}

fn type_list(types: &[(String, String)]) -> String {
    let names: Vec<String> = types.iter().map(|(t, u)| format!("{t}/{u}")).collect();
    format!("[{}]", names.join(", "))
}
