//! A batch of profiles being assembled into one `ProfilesData` with one shared dictionary.
//!
//! pprof inputs enter through [`Batch::add_pprof`] (in `to_otlp.rs`) and OTLP inputs through
//! [`Batch::add_profiles_data`] (in `merge.rs`); both intern into the same dictionary and run
//! the same linking, so converting, merging, splitting and linking are one mechanism.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::dictionary::DictionaryBuilder;
use crate::link::{LinkConfig, LinkReport, SampleLinker};
use crate::otlp::{ProfilesData, Resource, ResourceProfiles, Sample, ScopeProfiles};

/// Counts of what a conversion produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConversionReport {
    /// Inputs added (pprof profiles or OTLP messages).
    pub inputs: u64,
    /// OTLP profiles produced.
    pub profiles: u64,
    /// Samples over all produced profiles.
    pub samples: u64,
    /// Distinct (trace, span) links in the dictionary.
    pub links: u64,
    /// Samples of the produced profiles that carry a link.
    pub linked_samples: u64,
    /// pprof samples that repeated a label key (the first value is kept).
    pub duplicate_label_keys: u64,
    /// What linking did.
    pub link: LinkReport,
}

impl fmt::Display for ConversionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} input{}: {} profiles, {} samples, {} links ({} linked samples), {} invalid ids, {} span ids without trace id",
            self.inputs,
            if self.inputs == 1 { "" } else { "s" },
            self.profiles,
            self.samples,
            self.links,
            self.linked_samples,
            self.link.invalid_ids,
            self.link.span_ids_without_trace_id,
        )?;
        if self.link.trace_ids_without_span_id > 0 {
            write!(
                f,
                ", {} trace ids without span id",
                self.link.trace_ids_without_span_id
            )?;
        }
        if self.link.conflicting_ids > 0 {
            write!(
                f,
                ", {} samples with conflicting ids",
                self.link.conflicting_ids
            )?;
        }
        if self.duplicate_label_keys > 0 {
            write!(f, ", {} repeated label keys", self.duplicate_label_keys)?;
        }
        Ok(())
    }
}

/// Profiles under construction, sharing one dictionary.
#[derive(Debug)]
pub struct Batch {
    pub(crate) dict: DictionaryBuilder,
    pub(crate) linking: Option<LinkConfig>,
    pub(crate) linker: SampleLinker,
    pub(crate) report: ConversionReport,
    resources: Vec<ResourceProfiles>,
    /// Each resource of `resources` (encoded, with its schema URL) → its index: a push of
    /// many series (each its own resource) searched the list for each, 92 s for 50,000.
    resource_at: hashbrown::HashMap<Vec<u8>, usize>,
}

impl Batch {
    /// An empty batch; with `linking`, id attributes of every added sample become links.
    pub fn new(linking: Option<LinkConfig>) -> Self {
        Batch {
            dict: DictionaryBuilder::new(),
            linking,
            linker: SampleLinker::default(),
            report: ConversionReport::default(),
            resources: Vec::new(),
            resource_at: hashbrown::HashMap::new(),
        }
    }

    /// Appends `scope` under `resource`, reusing an equal resource already in the batch.
    /// Known spans to tell nested span ids apart with (see [`SampleLinker`]).
    pub fn set_span_parents(&mut self, parents: std::sync::Arc<dyn crate::link::SpanParents>) {
        self.linker.set_span_parents(parents);
    }

    pub(crate) fn push_scope(
        &mut self,
        resource: Resource,
        schema_url: &str,
        scope: ScopeProfiles,
    ) {
        self.report.profiles += scope.profiles.len() as u64;
        self.report.samples += scope
            .profiles
            .iter()
            .map(|p| p.samples.len() as u64)
            .sum::<u64>();
        self.report.linked_samples += scope
            .profiles
            .iter()
            .flat_map(|p| &p.samples)
            .filter(|x| x.link_index != 0)
            .count() as u64;
        // Equal resources encode the same: the encoding is the key.
        let mut key = prost::Message::encode_to_vec(&resource);
        key.push(0xff); // not a protobuf tag of `Resource`'s: ends the message
        key.extend_from_slice(schema_url.as_bytes());
        match self.resource_at.get(&key) {
            Some(&at) => self.resources[at].scope_profiles.push(scope),
            None => {
                self.resource_at.insert(key, self.resources.len());
                self.resources.push(ResourceProfiles {
                    resource: Some(resource),
                    scope_profiles: vec![scope],
                    schema_url: schema_url.to_owned(),
                });
            }
        }
    }

    /// What the batch holds so far.
    pub fn report(&self) -> ConversionReport {
        let mut r = self.report;
        r.links = self.dict.link_count() as u64;
        r.link = self.linker.report;
        r
    }

    /// The finished `ProfilesData` and its report.
    pub fn finish(self) -> (ProfilesData, ConversionReport) {
        let report = self.report();
        let data = ProfilesData {
            resource_profiles: self.resources,
            dictionary: Some(self.dict.finish()),
        };
        (data, report)
    }
}

/// Samples keyed by identity (stack, link, attribute set), each with `width` summed values.
#[derive(Debug)]
pub(crate) struct SampleSet {
    hasher: DefaultHashBuilder,
    table: HashTable<u32>,
    width: usize,
    stacks: Vec<i32>,
    links: Vec<i32>,
    attr_spans: Vec<(u32, u32)>,
    attrs: Vec<i32>,
    values: Vec<i64>,
}

impl SampleSet {
    /// A set for about `capacity` distinct samples of `width` values each.
    pub(crate) fn new(width: usize, capacity: usize) -> Self {
        SampleSet {
            hasher: DefaultHashBuilder::default(),
            table: HashTable::with_capacity(capacity),
            width,
            stacks: Vec::with_capacity(capacity),
            links: Vec::with_capacity(capacity),
            attr_spans: Vec::with_capacity(capacity),
            attrs: Vec::with_capacity(capacity * 2),
            values: Vec::with_capacity(capacity * width),
        }
    }

    /// Adds `values` to the sample with this identity; `attrs` must be sorted.
    pub(crate) fn add(&mut self, stack: i32, link: i32, attrs: &[i32], values: &[i64]) {
        debug_assert_eq!(values.len(), self.width);
        let hash = self.hasher.hash_one((stack, link, attrs));
        let (stacks, links, spans, all_attrs) =
            (&self.stacks, &self.links, &self.attr_spans, &self.attrs);
        let eq = |&slot: &u32| {
            let s = slot as usize;
            let (a, b) = spans[s];
            stacks[s] == stack && links[s] == link && &all_attrs[a as usize..b as usize] == attrs
        };
        let slot = match self.table.find(hash, eq) {
            Some(&slot) => slot as usize,
            None => {
                let slot = self.stacks.len();
                self.stacks.push(stack);
                self.links.push(link);
                let start = self.attrs.len() as u32;
                self.attrs.extend_from_slice(attrs);
                self.attr_spans.push((start, self.attrs.len() as u32));
                self.values.resize(self.values.len() + self.width, 0);
                let hasher = &self.hasher;
                let (stacks, links, spans, all_attrs) =
                    (&self.stacks, &self.links, &self.attr_spans, &self.attrs);
                self.table.insert_unique(hash, slot as u32, |&s| {
                    let s = s as usize;
                    let (a, b) = spans[s];
                    hasher.hash_one((stacks[s], links[s], &all_attrs[a as usize..b as usize]))
                });
                slot
            }
        };
        let row = &mut self.values[slot * self.width..(slot + 1) * self.width];
        for (acc, v) in row.iter_mut().zip(values) {
            *acc = acc.saturating_add(*v);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }

    /// The OTLP samples holding value column `column`, one value each, in insertion order.
    pub(crate) fn samples(&self, column: usize) -> Vec<Sample> {
        (0..self.len())
            .map(|s| {
                let (a, b) = self.attr_spans[s];
                Sample {
                    stack_index: self.stacks[s],
                    attribute_indices: self.attrs[a as usize..b as usize].to_vec(),
                    link_index: self.links[s],
                    values: vec![self.values[s * self.width + column]],
                    timestamps_unix_nano: Vec::new(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::string_kv;

    /// Scopes under equal resources (and schema URLs) share one `ResourceProfiles`, in the
    /// order resources first came; a different attribute or schema URL is another.
    #[test]
    fn equal_resources_share_one_entry() {
        let resource = |pod: &str| Resource {
            attributes: vec![string_kv("service.name", "a"), string_kv("pod", pod)],
            ..Default::default()
        };
        let mut b = Batch::new(None);
        for (pod, schema) in [("p1", ""), ("p2", ""), ("p1", ""), ("p1", "s"), ("p2", "")] {
            b.push_scope(resource(pod), schema, ScopeProfiles::default());
        }
        let (data, _) = b.finish();
        let shape: Vec<(String, &str, usize)> = data
            .resource_profiles
            .iter()
            .map(|r| {
                let pod = format!("{:?}", r.resource.as_ref().unwrap().attributes[1].value);
                (pod, r.schema_url.as_str(), r.scope_profiles.len())
            })
            .collect();
        assert_eq!(shape.len(), 3);
        assert!(shape[0].0.contains("p1") && shape[0].1.is_empty() && shape[0].2 == 2);
        assert!(shape[1].0.contains("p2") && shape[1].2 == 2);
        assert!(shape[2].0.contains("p1") && shape[2].1 == "s" && shape[2].2 == 1);
    }
}
