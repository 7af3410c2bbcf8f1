//! Samples of one export window, aggregated by (stack, thread, span) and turned into one OTLP
//! Profiles request: a CPU profile whose samples carry one link per (trace, span), their
//! timestamps and a `thread.id` attribute.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Link, Location, Profile, ProfilesDictionary, ResourceProfiles,
    Sample, ScopeProfiles, Stack, ValueType,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::symbols::Symbolizer;

/// (trace id, span id) of a sample.
pub type SpanLink = ([u8; 16], [u8; 8]);

#[derive(Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    /// Program counters, leaf first.
    stack: Vec<u64>,
    tid: i32,
    link: Option<SpanLink>,
}

/// The samples of the current window; at most `max_samples` are held, the rest counted.
pub struct WindowProfile {
    /// (time ns since the epoch, periods) of each sample of a key.
    samples: HashMap<SampleKey, Vec<(u64, u32)>>,
    held: usize,
    max_samples: usize,
    /// Samples not held because the window was full.
    pub dropped: u64,
    start_unix_ns: u64,
}

/// What every exported profile says about its producer.
#[derive(Clone, Debug)]
pub struct ProfileMeta {
    /// `service.name` of the resource.
    pub service_name: String,
    /// Further resource attributes.
    pub resource_attributes: Vec<(String, String)>,
    /// The sampling period, ns of CPU time per sample.
    pub period_ns: u64,
}

impl WindowProfile {
    /// An empty window starting at `start_unix_ns` that holds at most `max_samples` samples.
    pub fn new(start_unix_ns: u64, max_samples: usize) -> WindowProfile {
        WindowProfile {
            samples: HashMap::new(),
            held: 0,
            max_samples,
            dropped: 0,
            start_unix_ns,
        }
    }

    /// This window again, with no drops counted (they were), to go on adding samples to it.
    pub fn reopen(mut self, max_samples: usize) -> WindowProfile {
        self.dropped = 0;
        self.max_samples = max_samples;
        self
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Adds one sample taken at `time_unix_ns` standing for `periods` sampling periods; counts
    /// it as dropped when the window is full.
    pub fn add(
        &mut self,
        stack: &[u64],
        tid: i32,
        link: Option<SpanLink>,
        time_unix_ns: u64,
        periods: u32,
    ) {
        if self.held >= self.max_samples {
            self.dropped += 1;
            return;
        }
        self.held += 1;
        let key = SampleKey {
            stack: stack.to_vec(),
            tid,
            link,
        };
        self.samples
            .entry(key)
            .or_default()
            .push((time_unix_ns, periods.max(1)));
    }

    /// The request for this window, ending at `end_unix_ns`; `None` when it holds no sample.
    pub fn into_request(
        self,
        end_unix_ns: u64,
        meta: &ProfileMeta,
        symbols: &mut Symbolizer,
    ) -> Option<ExportProfilesServiceRequest> {
        if self.samples.is_empty() {
            return None;
        }
        let mut d = DictionaryBuilder::new();
        let cpu = d.string("cpu");
        let ns = d.string("nanoseconds");
        let mut samples = Vec::with_capacity(self.samples.len());
        for (key, mut taken) in self.samples {
            taken.sort_unstable();
            let locations = key
                .stack
                .iter()
                .enumerate()
                .map(|(i, &pc)| d.location(pc, i > 0, symbols))
                .collect();
            samples.push(Sample {
                stack_index: d.stack(locations),
                attribute_indices: vec![d.thread_attribute(key.tid)],
                link_index: key.link.map_or(0, |l| d.link(l)),
                values: taken
                    .iter()
                    .map(|&(_, periods)| meta.period_ns as i64 * i64::from(periods))
                    .collect(),
                timestamps_unix_nano: taken.iter().map(|&(t, _)| t).collect(),
            });
        }
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: cpu,
                unit_strindex: ns,
            }),
            samples,
            time_unix_nano: self.start_unix_ns,
            duration_nano: end_unix_ns.saturating_sub(self.start_unix_ns),
            period_type: Some(ValueType {
                type_strindex: cpu,
                unit_strindex: ns,
            }),
            period: meta.period_ns as i64,
            ..Default::default()
        };
        let mut resource = vec![string_kv("service.name", &meta.service_name)];
        resource.extend(
            meta.resource_attributes
                .iter()
                .map(|(k, v)| string_kv(k, v)),
        );
        resource.push(KeyValue {
            key: "process.pid".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(i64::from(std::process::id()))),
            }),
            ..Default::default()
        });
        Some(ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: resource,
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "spanprof-agent".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    profiles: vec![profile],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
            dictionary: Some(d.finish()),
        })
    }
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// Deduplicated dictionary tables; entry 0 of each is the zero value, as the proto requires.
struct DictionaryBuilder {
    dict: ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<(i32, i32), i32>,
    locations: HashMap<(u64, bool), i32>,
    stacks: HashMap<Vec<i32>, i32>,
    links: HashMap<SpanLink, i32>,
    threads: HashMap<i32, i32>,
}

impl DictionaryBuilder {
    fn new() -> DictionaryBuilder {
        let dict = ProfilesDictionary {
            mapping_table: vec![Default::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            link_table: vec![Link {
                trace_id: vec![0; 16],
                span_id: vec![0; 8],
            }],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
        };
        DictionaryBuilder {
            dict,
            strings: HashMap::from([(String::new(), 0)]),
            functions: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
            links: HashMap::new(),
            threads: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.dict.string_table.len() as i32;
        self.dict.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn location(&mut self, pc: u64, is_return: bool, symbols: &mut Symbolizer) -> i32 {
        if let Some(&i) = self.locations.get(&(pc, is_return)) {
            return i;
        }
        let functions = symbols.resolve(pc, is_return);
        let lines = functions
            .iter()
            .map(|f| {
                let name = self.string(&f.name);
                let file = self.string(&f.file);
                let next = self.dict.function_table.len() as i32;
                let function_index = *self.functions.entry((name, file)).or_insert(next);
                if function_index == next {
                    self.dict.function_table.push(Function {
                        name_strindex: name,
                        system_name_strindex: name,
                        filename_strindex: file,
                        start_line: 0,
                    });
                }
                Line {
                    function_index,
                    line: i64::from(f.line),
                    column: 0,
                }
            })
            .collect();
        let i = self.dict.location_table.len() as i32;
        self.dict.location_table.push(Location {
            mapping_index: 0,
            address: pc,
            lines,
            attribute_indices: vec![],
        });
        self.locations.insert((pc, is_return), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.dict.stack_table.len() as i32;
        self.dict.stack_table.push(Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    fn link(&mut self, link: SpanLink) -> i32 {
        let next = self.dict.link_table.len() as i32;
        let i = *self.links.entry(link).or_insert(next);
        if i == next {
            self.dict.link_table.push(Link {
                trace_id: link.0.to_vec(),
                span_id: link.1.to_vec(),
            });
        }
        i
    }

    fn thread_attribute(&mut self, tid: i32) -> i32 {
        if let Some(&i) = self.threads.get(&tid) {
            return i;
        }
        let key = self.string("thread.id");
        let i = self.dict.attribute_table.len() as i32;
        self.dict.attribute_table.push(KeyValueAndUnit {
            key_strindex: key,
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(i64::from(tid))),
            }),
            unit_strindex: 0,
        });
        self.threads.insert(tid, i);
        i
    }

    fn finish(self) -> ProfilesDictionary {
        self.dict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_link_per_span_and_paired_timestamps() {
        let mut w = WindowProfile::new(1_000, 3);
        let here = one_link_per_span_and_paired_timestamps as *const () as u64;
        let a = ([1; 16], [1; 8]);
        w.add(&[here], 7, Some(a), 1_020, 1);
        w.add(&[here], 7, Some(a), 1_010, 2);
        w.add(&[here], 8, None, 1_030, 1);
        w.add(&[here], 8, None, 1_040, 1); // over the limit
        assert_eq!((w.len(), w.dropped), (3, 1));
        let meta = ProfileMeta {
            service_name: "svc".into(),
            resource_attributes: vec![],
            period_ns: 10_000_000,
        };
        let req = w
            .into_request(2_000, &meta, &mut Symbolizer::default())
            .unwrap();
        let dict = req.dictionary.unwrap();
        assert_eq!(dict.link_table.len(), 2);
        assert_eq!(dict.link_table[1].span_id, vec![1; 8]);
        let p = &req.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(p.duration_nano, 1_000);
        let linked = p.samples.iter().find(|s| s.link_index == 1).unwrap();
        assert_eq!(linked.timestamps_unix_nano, vec![1_010, 1_020]);
        assert_eq!(linked.values, vec![20_000_000, 10_000_000]);
        assert_eq!(p.samples.len(), 2);
    }
}
