//! What a receiver hands the pipeline: linked profiles, or spans.

use spanprof_format::otlp::ProfilesData;
use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::Storing;

/// What a receiver hands over: linked profiles, or spans.
#[derive(Debug)]
pub enum Work {
    /// Profiles, already decoded and linked, and how the store takes them: each alone, or
    /// all or none (receivers that can only answer "stored" or an error).
    Profiles(ProfilesData, Storing),
    /// Spans from OTLP traces: the records the store keeps, and, when forwarders take
    /// traces, the request they came in without its rejected spans, which forwarders send on
    /// as it came (a record keeps attributes as text and a bounded number of events, and no
    /// links or scopes). Without it, forwarders send the records.
    Spans(Vec<SpanRecord>, Option<ExportTraceServiceRequest>),
}

impl Work {
    /// About the bytes it takes in memory (its vectors and strings, not the allocator's
    /// rounding): what [`crate::config::BatchConfig::queue_size`] counts.
    pub fn approx_bytes(&self) -> usize {
        use spanprof_format::otlp as o;
        use std::mem::size_of;
        match self {
            Work::Profiles(data, _) => {
                let d = data.dictionary.as_ref();
                let dictionary = d.map_or(0, |d| {
                    d.string_table.iter().map(|s| s.len() + 24).sum::<usize>()
                        + d.mapping_table.len() * size_of::<o::Mapping>()
                        + d.function_table.len() * size_of::<o::Function>()
                        + d.link_table.len() * (size_of::<o::Link>() + 24)
                        + d.attribute_table.len() * (size_of::<o::KeyValueAndUnit>() + 32)
                        + d.location_table
                            .iter()
                            .map(|l| {
                                size_of::<o::Location>() + l.lines.len() * size_of::<o::Line>()
                            })
                            .sum::<usize>()
                        + d.stack_table
                            .iter()
                            .map(|st| size_of::<o::Stack>() + st.location_indices.len() * 4)
                            .sum::<usize>()
                });
                let samples: usize = data
                    .resource_profiles
                    .iter()
                    .flat_map(|r| &r.scope_profiles)
                    .flat_map(|s| &s.profiles)
                    .flat_map(|p| &p.samples)
                    .map(|s| {
                        size_of::<o::Sample>()
                            + s.values.len() * 8
                            + s.attribute_indices.len() * 4
                            + s.timestamps_unix_nano.len() * 8
                    })
                    .sum();
                dictionary + samples
            }
            Work::Spans(spans, request) => {
                let records: usize = spans
                    .iter()
                    .map(|s| {
                        size_of::<SpanRecord>()
                            + s.name.len()
                            + s.service.len()
                            + s.status_message.len()
                            + s.attributes
                                .iter()
                                .map(|(k, v)| 48 + k.len() + v.len())
                                .sum::<usize>()
                    })
                    .sum();
                // Its encoding, which about is what its strings and ids take.
                records + request.as_ref().map_or(0, prost::Message::encoded_len)
            }
        }
    }
}
