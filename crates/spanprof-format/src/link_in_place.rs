//! Linking OTLP input where it lies: the id attributes of each sample become a link in the
//! request's own dictionary, and nothing is re-interned.
//!
//! [`crate::merge::link`] rebuilds the whole dictionary to do the same, and for one request
//! that costs more than decoding it. Here every index a sample reaches is checked the same way
//! and in the same order as there, so the same payloads are refused with the same message, and
//! the samples mean the same: same stacks, same links, same attributes (the property test
//! below compares the two on random input). What differs:
//!
//! - nothing is deduplicated or aggregated: equal samples stay separate samples;
//! - entries no sample uses any more (the id attributes and their strings) stay in the tables:
//!   the store never reads them, and a forwarder drops them when it merges an export's
//!   queued requests into one (a request exported alone is merged with itself for this);
//! - a profile's own attribute list loses its id attributes (merge points them at entry 0),
//!   and location and mapping attributes are left as they are.

use hashbrown::HashMap;

use crate::batch::ConversionReport;
use crate::error::FormatError;
use std::sync::Arc;

use crate::link::{IdRole, LinkConfig, LinkTables, ProfileIds, SampleLinker, SpanParents};
use crate::merge::{link_ids, resolve_key_values, resolve_value, slot, DictError};
use crate::otlp::{
    any_value, AnyValue, KeyValueAndUnit, Link, Profile, ProfilesData, ProfilesDictionary, Sample,
    ValueType,
};

/// Links the id attributes of every sample of `data` (the pipeline stage for OTLP input),
/// checking every index a sample reaches; see the module documentation. The first profile
/// that does not check refuses the whole request, as [`crate::merge::link`] does.
pub fn link_in_place(
    data: ProfilesData,
    config: &LinkConfig,
) -> Result<(ProfilesData, ConversionReport), FormatError> {
    link_in_place_with(data, config, None)
}

/// As [`link_in_place`], with known spans to tell nested span ids apart with.
pub fn link_in_place_with(
    data: ProfilesData,
    config: &LinkConfig,
    parents: Option<Arc<dyn SpanParents>>,
) -> Result<(ProfilesData, ConversionReport), FormatError> {
    let linked = link_each_in_place_with(data, config, parents)?;
    match linked.refused.into_iter().next() {
        Some(first) => Err(first),
        None => Ok((linked.data, linked.report)),
    }
}

/// What [`link_each_in_place`] made of a request.
#[derive(Debug)]
pub struct Linked {
    /// The request, linked, without the profiles refused.
    pub data: ProfilesData,
    /// Counts of the profiles kept.
    pub report: ConversionReport,
    /// Why profiles were refused, each naming its place in the request, in request order:
    /// a profile, or a resource or scope whose attributes do not check, with all its
    /// profiles.
    pub refused: Vec<FormatError>,
    /// How many profiles were refused.
    pub refused_profiles: u64,
}

/// As [`link_in_place`], but a profile that does not check (an index out of range, a link id
/// of the wrong length) is left out and named in [`Linked::refused`], and the rest is linked:
/// OTLP's partial success, so that one bad profile does not cost an exporter the good ones
/// sent with it. What linking added to the dictionary for a refused profile is taken out
/// again. A request with profiles, every one of them refused, is refused whole, with the
/// first reason.
pub fn link_each_in_place(data: ProfilesData, config: &LinkConfig) -> Result<Linked, FormatError> {
    link_each_in_place_with(data, config, None)
}

/// As [`link_each_in_place`], with known spans to tell nested span ids apart with.
pub fn link_each_in_place_with(
    mut data: ProfilesData,
    config: &LinkConfig,
    parents: Option<Arc<dyn SpanParents>>,
) -> Result<Linked, FormatError> {
    let mut linking = InPlace::new(data.dictionary.take().unwrap_or_default(), config);
    if let Some(parents) = parents {
        linking.linker.set_span_parents(parents);
    }
    let mut report = ConversionReport {
        inputs: 1,
        ..Default::default()
    };
    let mut refused = Vec::new();
    let mut refused_profiles = 0;
    let at = |path: String| move |e: DictError| FormatError::Invalid(format!("{path}: {e}"));
    for (ri, rp) in data.resource_profiles.iter_mut().enumerate() {
        let mut resource_ids = ProfileIds::default();
        if let Some(r) = &mut rp.resource {
            match resolve_key_values(&linking.t.d, &r.attributes) {
                Ok(mut attributes) => {
                    resource_ids = linking.take_profile_ids(&mut attributes);
                    r.attributes = attributes;
                }
                Err(e) => {
                    refused.push(at(format!("resource_profiles[{ri}].resource"))(e));
                    refused_profiles += rp
                        .scope_profiles
                        .iter()
                        .map(|s| s.profiles.len())
                        .sum::<usize>();
                    rp.scope_profiles.clear();
                    continue;
                }
            }
        }
        for (si, sp) in rp.scope_profiles.iter_mut().enumerate() {
            let path = format!("resource_profiles[{ri}].scope_profiles[{si}]");
            if let Some(s) = &mut sp.scope {
                match resolve_key_values(&linking.t.d, &s.attributes) {
                    Ok(attributes) => s.attributes = attributes,
                    Err(e) => {
                        refused.push(at(format!("{path}.scope"))(e));
                        refused_profiles += sp.profiles.len();
                        sp.profiles.clear();
                        continue;
                    }
                }
            }
            let mut kept = Vec::with_capacity(sp.profiles.len());
            for (pi, mut p) in std::mem::take(&mut sp.profiles).into_iter().enumerate() {
                let mark = linking.mark();
                match linking.profile(&mut p, resource_ids, &format!("{path}.profiles[{pi}]")) {
                    Ok(()) => {
                        report.profiles += 1;
                        report.samples += p.samples.len() as u64;
                        report.linked_samples +=
                            p.samples.iter().filter(|s| s.link_index != 0).count() as u64;
                        kept.push(p);
                    }
                    Err(e) => {
                        linking.roll_back(mark);
                        refused.push(e);
                        refused_profiles += 1;
                    }
                }
            }
            sp.profiles = kept;
        }
    }
    if report.profiles == 0 && !refused.is_empty() {
        return Err(refused.swap_remove(0));
    }
    report.link = linking.linker.report;
    let d = linking.t.finish();
    report.links = d.link_table.len().saturating_sub(1) as u64;
    data.dictionary = Some(d);
    Ok(Linked {
        data,
        report,
        refused,
        refused_profiles: refused_profiles as u64,
    })
}

/// How far linking had gone, to go back to when a profile is refused.
struct Mark {
    links: usize,
    strings: usize,
    attributes: usize,
    report: crate::link::LinkReport,
}

/// The dictionary as received, and what linking adds to it: kept apart until the end, so
/// every index in the input is checked against the tables as they were sent.
struct Tables {
    d: ProfilesDictionary,
    links: HashMap<([u8; 16], [u8; 8]), i32>,
    /// Whether `links` holds the request's own links yet (read on the first new link).
    links_seeded: bool,
    strings: HashMap<String, i32>,
    added_links: Vec<Link>,
    added_strings: Vec<String>,
    added_attributes: Vec<KeyValueAndUnit>,
}

/// Index of the next entry added to a table of `len` entries that already has `added` more,
/// after the zero entry when the table is empty (index 0 means "none" in samples).
fn next(len: usize, added: usize) -> i32 {
    // Tables are bounded by the input size limit long before i32::MAX entries.
    i32::try_from(len.max(1) + added).expect("dictionary table exceeds i32::MAX entries")
}

/// Appends `added` to `table`, behind a zero entry when the table is empty.
fn append<T: Default>(table: &mut Vec<T>, added: Vec<T>) {
    if !added.is_empty() && table.is_empty() {
        table.push(T::default());
    }
    table.extend(added);
}

impl Tables {
    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = next(self.d.string_table.len(), self.added_strings.len());
        self.added_strings.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    /// The dictionary with what linking added.
    fn finish(mut self) -> ProfilesDictionary {
        append(&mut self.d.string_table, self.added_strings);
        append(&mut self.d.attribute_table, self.added_attributes);
        append(&mut self.d.link_table, self.added_links);
        self.d
    }
}

impl LinkTables for Tables {
    fn link(&mut self, trace_id: [u8; 16], span_id: [u8; 8]) -> i32 {
        if !self.links_seeded {
            // One entry per distinct (trace, span): a pair the request already has is reused.
            self.links_seeded = true;
            // Sized once for the links the request has and about one new link per attribute
            // (new links come from span id attributes), not grown (and rehashed) link by link.
            self.links
                .reserve(self.d.link_table.len() + self.d.attribute_table.len());
            for (i, l) in self.d.link_table.iter().enumerate().skip(1) {
                if let (Ok(t), Ok(s)) = (
                    l.trace_id.as_slice().try_into(),
                    l.span_id.as_slice().try_into(),
                ) {
                    self.links.entry((t, s)).or_insert(i as i32);
                }
            }
        }
        let (len, added) = (self.d.link_table.len(), &mut self.added_links);
        *self.links.entry((trace_id, span_id)).or_insert_with(|| {
            let i = next(len, added.len());
            added.push(Link {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
            });
            i
        })
    }

    fn string_attribute(&mut self, key: &str, value: &str) -> i32 {
        let key_strindex = self.string(key);
        let i = next(self.d.attribute_table.len(), self.added_attributes.len());
        self.added_attributes.push(KeyValueAndUnit {
            key_strindex,
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            unit_strindex: 0,
        });
        i
    }
}

/// Checked state of the source entries (indices into the tables as received).
struct InPlace<'c> {
    t: Tables,
    config: &'c LinkConfig,
    functions: Vec<bool>,
    mappings: Vec<bool>,
    locations: Vec<bool>,
    stacks: Vec<bool>,
    /// The link a sample's `link_index` stands for: 0 for an all-zero link.
    links: Vec<Option<i32>>,
    attributes: Vec<Option<IdRole>>,
    linker: SampleLinker,
    /// Scratch: one sample's attributes.
    attrs: Vec<i32>,
}

impl<'c> InPlace<'c> {
    fn new(d: ProfilesDictionary, config: &'c LinkConfig) -> Self {
        InPlace {
            functions: vec![false; d.function_table.len()],
            mappings: vec![false; d.mapping_table.len()],
            locations: vec![false; d.location_table.len()],
            stacks: vec![false; d.stack_table.len()],
            links: vec![None; d.link_table.len()],
            attributes: vec![None; d.attribute_table.len()],
            t: Tables {
                d,
                links: HashMap::new(),
                links_seeded: false,
                strings: HashMap::new(),
                added_links: Vec::new(),
                added_strings: Vec::new(),
                added_attributes: Vec::new(),
            },
            config,
            linker: SampleLinker::default(),
            attrs: Vec::new(),
        }
    }

    /// Takes the id attributes out of a resource's (resolved) attributes, as its ids.
    fn take_profile_ids(&self, attributes: &mut Vec<crate::otlp::KeyValue>) -> ProfileIds {
        let mut ids = ProfileIds::default();
        attributes.retain(|kv| {
            let text = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                _ => None,
            };
            !ids.observe(self.config.role(&kv.key, text))
        });
        ids
    }

    /// Checks and links one profile (at `path`) of a resource whose attributes carried
    /// `ids`: its own attributes (their ids override the resource's), its samples and its
    /// value types.
    fn profile(
        &mut self,
        p: &mut Profile,
        mut ids: ProfileIds,
        path: &str,
    ) -> Result<(), FormatError> {
        let field =
            |f: String| move |e: DictError| FormatError::Invalid(format!("{path}.{f}: {e}"));
        let mut kept = Vec::with_capacity(p.attribute_indices.len());
        for (j, &a) in p.attribute_indices.iter().enumerate() {
            let role = self
                .attribute(a)
                .map_err(|e| field(format!("attribute_indices[{j}]"))(e))?;
            ids.observe(role);
            if !self.drops(role) {
                kept.push(a);
            }
        }
        p.attribute_indices = kept;
        self.linker.start_profile(ids);
        for i in 0..p.samples.len() {
            self.sample(p, i, path)?;
        }
        if let Some(t) = p.sample_type {
            self.value_type(t)
                .map_err(|e| field("sample_type".into())(e))?;
        }
        if let Some(t) = p.period_type {
            self.value_type(t)
                .map_err(|e| field("period_type".into())(e))?;
        }
        Ok(())
    }

    fn mark(&self) -> Mark {
        Mark {
            links: self.t.added_links.len(),
            strings: self.t.added_strings.len(),
            attributes: self.t.added_attributes.len(),
            report: self.linker.report,
        }
    }

    /// Takes out what was added to the tables since `mark`. (What was checked stays checked:
    /// entries are checked whole or not at all, and a refused profile's entries may be the
    /// next profile's too.)
    fn roll_back(&mut self, mark: Mark) {
        let t = &mut self.t;
        for l in t.added_links.drain(mark.links..) {
            if let (Ok(trace), Ok(span)) = (l.trace_id.try_into(), l.span_id.try_into()) {
                t.links.remove(&(trace, span));
            }
        }
        for s in t.added_strings.drain(mark.strings..) {
            t.strings.remove(&s);
        }
        t.added_attributes.truncate(mark.attributes);
        self.linker.report = mark.report;
    }

    /// Whether an attribute of this role leaves the sample (a linked id, not kept).
    fn drops(&self, role: IdRole) -> bool {
        matches!(role, IdRole::SpanId(_) | IdRole::TraceId(_)) && !self.config.keep_link_attributes
    }

    /// The span of link `index` (of the tables as received, or added here).
    fn link_span(&self, index: i32) -> Option<[u8; 8]> {
        let i = usize::try_from(index).ok().filter(|&i| i > 0)?;
        let len = self.t.d.link_table.len();
        let link = match self.t.d.link_table.get(i) {
            Some(l) => l,
            None => self.t.added_links.get(i - len.max(1))?,
        };
        link.span_id.as_slice().try_into().ok()
    }

    /// How many samples of a profile carry each span id, asked for at sample `at`: the
    /// samples before it are linked already (their span is their link's), the rest are as
    /// received.
    fn span_counts(&mut self, samples: &[Sample], at: usize) -> hashbrown::HashMap<[u8; 8], u32> {
        let mut counts = hashbrown::HashMap::new();
        for s in &samples[..at] {
            let span = self.link_span(s.link_index).or_else(|| {
                s.attribute_indices
                    .iter()
                    .find_map(|&a| self.linker.unlinked_span(a))
            });
            if let Some(span) = span {
                *counts.entry(span).or_insert(0) += 1;
            }
        }
        let mut roles = Vec::new();
        for s in &samples[at..] {
            if let Some(span) = self.link(s.link_index).ok().and_then(|l| self.link_span(l)) {
                *counts.entry(span).or_insert(0) += 1;
                continue;
            }
            roles.clear();
            for &a in &s.attribute_indices {
                // An attribute that does not check is refused where its sample is linked.
                if let Ok(role) = self.attribute(a) {
                    roles.push(role);
                }
            }
            self.linker.count_sample(&mut counts, roles.iter().copied());
        }
        counts
    }

    /// Checks and links one sample (`samples[i]` of the profile `p` at `path`).
    fn sample(&mut self, p: &mut Profile, i: usize, path: &str) -> Result<(), FormatError> {
        let at = |field: String| {
            move |e: DictError| FormatError::Invalid(format!("{path}.{field}: {e}"))
        };
        let s = &p.samples[i];
        self.stack(s.stack_index)
            .map_err(|e| at(format!("samples[{i}].stack_index"))(e))?;
        let source_link = self
            .link(s.link_index)
            .map_err(|e| at(format!("samples[{i}].link_index"))(e))?;
        let keep = self.config.keep_link_attributes;
        let mut attrs = std::mem::take(&mut self.attrs);
        attrs.clear();
        for (j, &a) in s.attribute_indices.iter().enumerate() {
            // Samples name the same few attributes again and again: their roles are read
            // straight from the memo. Going through `attribute` copied each role through
            // memory several times (its `Result`, then `map_err`'s), which perf showed as
            // two thirds of the linker's own time, in store-forwarding stalls.
            let known = usize::try_from(a)
                .ok()
                .and_then(|x| self.attributes.get(x).copied().flatten());
            let role = match known {
                Some(role) => role,
                None => self
                    .attribute(a)
                    .map_err(|e| at(format!("samples[{i}].attribute_indices[{j}]"))(e))?,
            };
            let stays = self.linker.observe_beside(role, keep, source_link != 0);
            if stays && !attrs.contains(&a) {
                attrs.push(a);
            }
        }
        let link_index = if source_link != 0 {
            source_link
        } else {
            if self.linker.needs_span_counts() {
                let counts = self.span_counts(&p.samples, i);
                self.linker.set_span_counts(counts);
            }
            self.linker.finish(&mut self.t, &mut attrs)
        };
        let s = &mut p.samples[i];
        s.link_index = link_index;
        attrs.sort_unstable();
        s.attribute_indices.clear();
        s.attribute_indices.extend_from_slice(&attrs);
        self.attrs = attrs;
        Ok(())
    }

    fn string(&self, index: i32) -> Result<(), DictError> {
        slot(index, self.t.d.string_table.len(), "string_table").map(|_| ())
    }

    fn value_type(&self, t: ValueType) -> Result<(), DictError> {
        self.string(t.type_strindex)?;
        self.string(t.unit_strindex)
    }

    fn function(&mut self, index: i32) -> Result<(), DictError> {
        let i = slot(index, self.functions.len(), "function_table")?;
        if !self.functions[i] {
            let f = self.t.d.function_table[i];
            let at = |e: DictError| e.at(format!("function_table[{i}]"));
            self.string(f.name_strindex).map_err(at)?;
            self.string(f.system_name_strindex).map_err(at)?;
            self.string(f.filename_strindex).map_err(at)?;
            self.functions[i] = true;
        }
        Ok(())
    }

    fn mapping(&mut self, index: i32) -> Result<(), DictError> {
        let i = slot(index, self.mappings.len(), "mapping_table")?;
        if !self.mappings[i] {
            let at = |e: DictError| e.at(format!("mapping_table[{i}]"));
            for a in 0..self.t.d.mapping_table[i].attribute_indices.len() {
                self.attribute(self.t.d.mapping_table[i].attribute_indices[a])
                    .map_err(at)?;
            }
            self.string(self.t.d.mapping_table[i].filename_strindex)
                .map_err(at)?;
            self.mappings[i] = true;
        }
        Ok(())
    }

    fn location(&mut self, index: i32) -> Result<(), DictError> {
        let i = slot(index, self.locations.len(), "location_table")?;
        if !self.locations[i] {
            let at = |e: DictError| e.at(format!("location_table[{i}]"));
            for l in 0..self.t.d.location_table[i].lines.len() {
                self.function(self.t.d.location_table[i].lines[l].function_index)
                    .map_err(at)?;
            }
            for a in 0..self.t.d.location_table[i].attribute_indices.len() {
                self.attribute(self.t.d.location_table[i].attribute_indices[a])
                    .map_err(at)?;
            }
            self.mapping(self.t.d.location_table[i].mapping_index)
                .map_err(at)?;
            self.locations[i] = true;
        }
        Ok(())
    }

    fn stack(&mut self, index: i32) -> Result<(), DictError> {
        if index == 0 {
            return Ok(());
        }
        let i = slot(index, self.stacks.len(), "stack_table")?;
        if !self.stacks[i] {
            for l in 0..self.t.d.stack_table[i].location_indices.len() {
                self.location(self.t.d.stack_table[i].location_indices[l])
                    .map_err(|e| e.at(format!("stack_table[{i}]")))?;
            }
            self.stacks[i] = true;
        }
        Ok(())
    }

    /// The link `index` stands for: itself, or 0 for an all-zero link.
    fn link(&mut self, index: i32) -> Result<i32, DictError> {
        if index == 0 {
            return Ok(0);
        }
        let i = slot(index, self.links.len(), "link_table")?;
        if let Some(link) = self.links[i] {
            return Ok(link);
        }
        let (trace, span) = link_ids(&self.t.d.link_table[i], i)?;
        let link = if trace == [0; 16] && span == [0; 8] {
            0
        } else {
            index
        };
        self.links[i] = Some(link);
        Ok(link)
    }

    /// Checks attribute `index` (values that point into the string table are resolved to
    /// strings, as merging does) and classifies it.
    fn attribute(&mut self, index: i32) -> Result<IdRole, DictError> {
        if index == 0 {
            return Ok(IdRole::Plain);
        }
        let i = slot(index, self.attributes.len(), "attribute_table")?;
        if let Some(role) = self.attributes[i] {
            return Ok(role);
        }
        let at = |e: DictError| e.at(format!("attribute_table[{i}]"));
        let d = &self.t.d;
        let kv = &d.attribute_table[i];
        let key = slot(kv.key_strindex, d.string_table.len(), "string_table").map_err(at)?;
        use any_value::Value;
        let indirect = matches!(
            kv.value.as_ref().and_then(|v| v.value.as_ref()),
            Some(Value::StringValueStrindex(_) | Value::ArrayValue(_) | Value::KvlistValue(_))
        );
        if indirect {
            let v = kv.value.as_ref().expect("matched a value");
            let resolved = resolve_value(d, v, 0).map_err(at)?;
            self.t.d.attribute_table[i].value = Some(resolved);
        }
        let d = &self.t.d;
        let kv = &d.attribute_table[i];
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        };
        let role = self.config.role(&d.string_table[key], value);
        if !self.drops(role) {
            self.string(kv.unit_strindex).map_err(at)?;
        }
        self.attributes[i] = Some(role);
        Ok(role)
    }
}

#[cfg(test)]
mod tests;
