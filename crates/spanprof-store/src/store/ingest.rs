//! Ingest: linked OTLP profiles and spans become one log record (symbol and series deltas,
//! sample blocks, spans), appended durably, then published to the in-memory indexes.

use hashbrown::HashMap;
use spanprof_format::limits::{Measure, ProfileLimits};
use spanprof_format::link::{IdRole, LinkConfig};
use spanprof_format::otlp::{any_value, AnyValue, ProfilesData, ProfilesDictionary, Resource};
use spanprof_format::profile_type::ProfileTypeId;

use super::state::{encode_series, SeriesKey, State};
use super::{
    near_max_symbol_bytes, put_record_links, SeriesLimits, Store, StoreConfig, StoreError, INGEST,
};
use crate::block::{shared_link_table, Block, LinkIds};
use crate::codec::Put;
use crate::log::MAX_RECORD_LEN;
use crate::spans::{encode_spans, SpanRecord};
use crate::symbols::Remap;

/// Resource attribute naming the profile (`process_cpu`, `block`, …) when the sample types
/// alone cannot tell (mutex and block profiles look alike); set by receivers that know.
pub const PROFILE_NAME_ATTRIBUTE: &str = "spanprof.profile.name";

/// The label the service name is stored under (Pyroscope's convention).
pub const SERVICE_LABEL: &str = "service_name";

/// What one ingest call stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestReport {
    /// Profiles stored.
    pub profiles: u64,
    /// Profiles refused (see `problems`).
    pub rejected_profiles: u64,
    /// Of `rejected_profiles`, those refused for being over a limit (the store's or a
    /// series'); the others were not valid.
    pub limited_profiles: u64,
    /// Samples stored.
    pub samples: u64,
    /// Series created by this call.
    pub new_series: u64,
    /// Profiles not stored because the same profile was stored lately: a request sent again
    /// (see `recent.rs`). They are not refused.
    pub repeated_profiles: u64,
    /// Spans stored.
    pub spans: u64,
    /// Why profiles were refused, each naming the profile.
    pub problems: Vec<String>,
    /// For each of `problems`, the index in the call's `profiles` of the request it is in.
    pub problem_sources: Vec<usize>,
    /// For each of `problems`, the refused profile's place in its request: its indices in
    /// `resource_profiles`, `scope_profiles` and `profiles`.
    pub problem_places: Vec<[usize; 3]>,
}

/// One request to store: its profiles, and how.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The profiles.
    pub data: &'a ProfilesData,
    /// Each alone, or all or none.
    pub storing: Storing,
}

/// How the profiles of one request are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storing {
    /// Each on its own: a refused one leaves the others stored (OTLP, whose partial success
    /// says which were refused).
    EachAlone,
    /// All, or none when one is refused: for receivers whose only answers are "stored" and
    /// an error (Pyroscope's), where a 400 for a pprof of which one sample type was refused
    /// left the others stored, and its client, sending it again corrected, stored them twice.
    AllOrNone,
}

/// What ingest had done before a request, to take the request back whole
/// ([`Storing::AllOrNone`]).
struct Undo {
    services: usize,
    /// The services the request names that were there before it: each one's symbol table
    /// sizes and bytes (only these, not every service's, for each request).
    touched: Vec<(usize, [usize; 5], u64)>,
    symbol_bytes: u64,
    series: usize,
    blocks: usize,
    keys: usize,
    problems: usize,
    report: IngestReport,
}

impl Undo {
    fn take(st: &State, pending: &Pending, data: &ProfilesData) -> Undo {
        let mut touched: Vec<(usize, [usize; 5], u64)> = Vec::new();
        for rp in &data.resource_profiles {
            let (name, _, _) = resource_labels(rp.resource.as_ref());
            if let Some(&id) = st.service_ids.get(&name) {
                let s = &st.services[id as usize];
                if !touched.iter().any(|t| t.0 == id as usize) {
                    touched.push((id as usize, s.symbols.sizes(), s.bytes));
                }
            }
        }
        Undo {
            services: st.services.len(),
            touched,
            symbol_bytes: st.symbol_bytes,
            series: st.series.len(),
            blocks: pending.blocks.len(),
            keys: pending.stored_keys.len(),
            problems: pending.report.problems.len(),
            report: IngestReport {
                problems: Vec::new(),
                problem_sources: Vec::new(),
                problem_places: Vec::new(),
                ..pending.report.clone()
            },
        }
    }

    /// Takes back what the request stored: its profiles (stored, or left out as repeated)
    /// count as refused with the one that was, for the same reason (its problems stay in
    /// the report).
    fn undo(self, st: &mut State, pending: &mut Pending) {
        let stored = (pending.report.profiles - self.report.profiles)
            + (pending.report.repeated_profiles - self.report.repeated_profiles);
        let limited = pending.report.limited_profiles > self.report.limited_profiles;
        for &(id, sizes, bytes) in &self.touched {
            let service = &mut st.services[id];
            service.symbols.truncate(sizes);
            service.bytes = bytes;
        }
        let empty = crate::symbols::SymbolTable::new().sizes();
        for id in (self.services..st.services.len()).rev() {
            st.services[id].symbols.truncate(empty);
            st.forget_new_service(id as u32);
        }
        st.symbol_bytes = self.symbol_bytes;
        st.truncate_series(self.series);
        pending.blocks.truncate(self.blocks);
        pending.roots.truncate(self.blocks);
        pending.stored_keys.truncate(self.keys);
        let r = &mut pending.report;
        r.profiles = self.report.profiles;
        r.samples = self.report.samples;
        r.repeated_profiles = self.report.repeated_profiles;
        r.rejected_profiles += stored;
        if limited {
            r.limited_profiles += stored;
        }
    }
}

struct Pending {
    /// The identities of the profiles stored, remembered once the record is written.
    stored_keys: Vec<u64>,
    blocks: Vec<Block>,
    /// For each of `blocks`, the first block of the same samples (its own index, or that of
    /// the block of the profile's first sample type it repeats with other values): the
    /// record holds each after that one, so that blocks of the same links are next to each
    /// other and indexed once ([`SegmentIndex::index_block`]).
    roots: Vec<u32>,
    /// Byte range of each block inside the record, in the order the record holds them.
    ranges: Vec<(u32, u32)>,
    report: IngestReport,
}

impl Pending {
    /// The order the record holds `blocks` in: each after its root, the blocks of one root
    /// in the order they came.
    fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.blocks.len()).collect();
        order.sort_unstable_by_key(|&i| (self.roots[i], i));
        order
    }
}

impl Store {
    /// Stores profiles (already linked by the pipeline) and spans. Returns once they are
    /// durable. A profile that cannot be stored (out-of-range indices) is refused and named in
    /// the report; the rest are stored.
    ///
    /// One call is one log record, unless its record would be larger than a record may be
    /// ([`MAX_RECORD_LEN`]): then its requests, or its spans, are split in halves, each
    /// written on its own (many large profile or trace requests in one pipeline batch failed
    /// the whole batch, and again at every retry).
    pub fn ingest(
        &self,
        profiles: &[&ProfilesData],
        spans: Vec<SpanRecord>,
    ) -> Result<IngestReport, StoreError> {
        let requests: Vec<Request<'_>> = profiles
            .iter()
            .map(|&data| Request {
                data,
                storing: Storing::EachAlone,
            })
            .collect();
        self.ingest_requests(&requests, spans)
    }

    /// [`Store::ingest`], each request stored as its [`Storing`] says.
    pub fn ingest_requests(
        &self,
        profiles: &[Request<'_>],
        spans: Vec<SpanRecord>,
    ) -> Result<IngestReport, StoreError> {
        let series_before = self
            .state
            .read()
            .expect("store state lock poisoned")
            .series
            .len();
        let mut report = self.ingest_split(profiles, spans)?;
        // Counted over the halves: series made by a half that was then split are not new to
        // its halves.
        let series_after = self
            .state
            .read()
            .expect("store state lock poisoned")
            .series
            .len();
        report.new_series = series_after.saturating_sub(series_before) as u64;
        Ok(report)
    }

    /// The services of `data` of which the store already holds profiles taken when `data`'s
    /// were: what storing `data` again (a file imported twice) would count twice. Profiles
    /// without a time are not asked about.
    pub fn services_already_holding(&self, data: &ProfilesData) -> Vec<String> {
        let mut found = Vec::new();
        for rp in &data.resource_profiles {
            let (service, _, _) = resource_labels(rp.resource.as_ref());
            let times = rp
                .scope_profiles
                .iter()
                .flat_map(|s| &s.profiles)
                .filter_map(|p| i64::try_from(p.time_unix_nano).ok().filter(|&t| t > 0));
            let Some((from, to)) = times.fold(None, |r: Option<(i64, i64)>, t| {
                Some(r.map_or((t, t), |(a, b)| (a.min(t), b.max(t))))
            }) else {
                continue;
            };
            if !found.contains(&service)
                && self.services(from, to.saturating_add(1)).contains(&service)
            {
                found.push(service);
            }
        }
        found
    }

    fn ingest_split(
        &self,
        profiles: &[Request<'_>],
        spans: Vec<SpanRecord>,
    ) -> Result<IngestReport, StoreError> {
        let mut spans = match self.ingest_record(profiles, spans, max_record_len())? {
            Ok(report) => return Ok(report),
            Err(spans) => spans,
        };
        tracing::info!(
            requests = profiles.len(),
            spans = spans.len(),
            "a store record would be larger than {MAX_RECORD_LEN} bytes: written in two"
        );
        // The requests in halves (the spans go with the first), else the spans.
        let (a, b, later_spans) = if profiles.len() > 1 {
            let (a, b) = profiles.split_at(profiles.len() / 2);
            (a, b, Vec::new())
        } else {
            let later = spans.split_off(spans.len() / 2);
            (profiles, &[][..], later)
        };
        let mut report = self.ingest_split(a, spans)?;
        let second = self.ingest_split(b, later_spans)?;
        report.profiles += second.profiles;
        report.repeated_profiles += second.repeated_profiles;
        report.rejected_profiles += second.rejected_profiles;
        report.limited_profiles += second.limited_profiles;
        report.samples += second.samples;
        report.spans += second.spans;
        report.problems.extend(second.problems);
        report
            .problem_sources
            .extend(second.problem_sources.into_iter().map(|i| i + a.len()));
        report.problem_places.extend(second.problem_places);
        Ok(report)
    }

    /// Writes `profiles` and `spans` as one record, unless it would be larger than `max` bytes
    /// and there is something to split (two requests or more, or two spans): then nothing is
    /// written (what was interned stays, to be written with the next record) and the spans
    /// are handed back.
    fn ingest_record(
        &self,
        profiles: &[Request<'_>],
        spans: Vec<SpanRecord>,
        max: usize,
    ) -> Result<Result<IngestReport, Vec<SpanRecord>>, StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        // 1. Intern symbols and series, build blocks and the record (state write-locked briefly).
        let (record, pending, order, marks, generation_due) = {
            let mut st = self.state.write().expect("store state lock poisoned");
            let series_before = st.series.len();
            let live_before = st.live_series();
            let touched_before: Vec<[usize; 5]> =
                st.services.iter().map(|s| s.symbols.sizes()).collect();
            let mut pending = Pending {
                stored_keys: Vec::new(),
                blocks: Vec::new(),
                roots: Vec::new(),
                ranges: Vec::new(),
                report: IngestReport::default(),
            };
            for (source, request) in profiles.iter().enumerate() {
                match request.storing {
                    Storing::EachAlone => {
                        add_profiles(&mut st, request.data, source, &self.cfg, &mut pending)
                    }
                    Storing::AllOrNone => {
                        let before = Undo::take(&st, &pending, request.data);
                        add_profiles(&mut st, request.data, source, &self.cfg, &mut pending);
                        if pending.report.problems.len() > before.problems {
                            before.undo(&mut st, &mut pending);
                        }
                    }
                }
            }
            pending.report.new_series = (st.series.len() - series_before) as u64;
            warn_near_series_limit(live_before, st.live_series(), &self.cfg.series);
            pending.report.spans = spans.len() as u64;
            let mut record = vec![INGEST];
            // Each link once per record: a profile's sample types are blocks of the same links.
            let (links, table_index) = shared_link_table(&pending.blocks);
            if !write_self_contained() {
                put_record_links(&mut record, &links);
            }
            let mut marks = Vec::new();
            let changed: Vec<u32> = (0..st.services.len() as u32)
                .filter(|&i| {
                    st.services[i as usize].symbols.has_delta()
                        || i as usize >= touched_before.len()
                })
                .collect();
            record.uvarint(changed.len() as u64);
            for &i in &changed {
                let s = &st.services[i as usize];
                record.uvarint(i.into());
                record.str(&s.name);
                marks.push((i, s.symbols.encode_delta(&mut record)));
            }
            let series_from = st.series_flushed;
            encode_series(&mut record, &st.series, series_from);
            marks.push((u32::MAX, [st.series.len(), 0, 0, 0, 0]));
            record.uvarint(pending.blocks.len() as u64);
            let order = pending.order();
            let mut scratch = Vec::new();
            for &i in &order {
                let b = &pending.blocks[i];
                scratch.clear();
                if write_self_contained() {
                    b.encode(&mut scratch);
                } else {
                    b.encode_linked(&table_index[i], &mut scratch);
                }
                record.bytes(&scratch);
                pending
                    .ranges
                    .push(((record.len() - scratch.len()) as u32, scratch.len() as u32));
            }
            scratch.clear();
            encode_spans(&spans, &mut scratch);
            record.bytes(&scratch);
            if record.len() > max && (profiles.len() > 1 || spans.len() > 1) {
                return Ok(Err(spans));
            }
            let due = st.check_generations(
                std::time::Instant::now(),
                self.cfg.symbol_use_period,
                self.cfg.symbol_generation_bytes,
            );
            (record, pending, order, marks, due)
        };
        // 2. Make it durable (no state lock held: queries go on meanwhile).
        let pos = self.log.append(&[&record])?[0];
        // 3. Publish.
        {
            let mut st = self.state.write().expect("store state lock poisoned");
            for (service, sizes) in marks {
                if service == u32::MAX {
                    st.series_flushed = st.series_flushed.max(sizes[0]);
                } else {
                    st.services[service as usize].symbols.mark_flushed(sizes);
                }
            }
            let active = std::sync::Arc::make_mut(&mut st.active);
            debug_assert_eq!(
                active.segment, pos.segment,
                "the active index follows the log's active segment"
            );
            let mut previous = None;
            for (&i, &(start, len)) in order.iter().zip(&pending.ranges) {
                let b = &pending.blocks[i];
                active.index_block(pos, start, len, b, previous);
                previous = Some(b);
            }
            for s in spans {
                active.spans_mut().insert(s);
            }
            st.recent.insert(pending.stored_keys);
        }
        // A new generation of symbols starts with a segment: the old one's data ends here.
        if self.segment_is_full() || generation_due {
            self.seal_after_ingest();
        }
        Ok(Ok(pending.report))
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: this thread's ingests write records as before record link tables existed (no
    /// table, self-contained version 1 blocks).
    pub(crate) static WRITE_SELF_CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Tests: the largest record this thread's ingests write before splitting their requests.
    pub(crate) static MAX_RECORD: std::cell::Cell<usize> = const { std::cell::Cell::new(MAX_RECORD_LEN as usize) };
}

#[cfg(test)]
fn max_record_len() -> usize {
    MAX_RECORD.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn max_record_len() -> usize {
    MAX_RECORD_LEN as usize
}

#[cfg(test)]
fn write_self_contained() -> bool {
    WRITE_SELF_CONTAINED.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn write_self_contained() -> bool {
    false
}

fn string_of(v: &AnyValue) -> Option<String> {
    Some(match v.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}

/// A sample attribute's value as a series label: strings (not empty: selectors match an empty
/// label as a missing one) and booleans. A number is a
/// measurement of the one sample (the allocation size Go's heap profiles label every sample
/// with, a thread id), not a label to split series by: one series per distinct size grew
/// without end, and a heap profile with over 1,000 sizes was refused whole. Pyroscope leaves
/// pprof's number labels out of series the same way. The store does not keep them.
fn sample_label_of(v: &AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) if s.is_empty() => None,
        any_value::Value::StringValue(_) | any_value::Value::BoolValue(_) => string_of(v),
        _ => None,
    }
}

fn resource_labels(resource: Option<&Resource>) -> (String, Option<String>, Vec<(String, String)>) {
    let mut service = None;
    let mut name = None;
    let mut labels = Vec::new();
    for kv in resource.map_or(&[][..], |r| &r.attributes) {
        // An empty value is no label (selectors match it as a missing one): an empty
        // `service.name` stored the service `""`, which no query could select.
        let Some(v) = kv
            .value
            .as_ref()
            .and_then(string_of)
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        match kv.key.as_str() {
            "service.name" => service = Some(v),
            PROFILE_NAME_ATTRIBUTE => name = Some(v),
            k => labels.push((k.to_owned(), v)),
        }
    }
    // As OpenTelemetry's resource conventions name a service without a name:
    // `unknown_service:<process.executable.name>`, else `unknown_service` (the eBPF profiler
    // profiles every process of a host; they were all one service).
    let service = service.unwrap_or_else(|| {
        match labels.iter().find(|(k, _)| k == "process.executable.name") {
            Some((_, exe)) => format!("unknown_service:{exe}"),
            None => "unknown_service".to_owned(),
        }
    });
    (service, name, labels)
}

/// Splits every profile of `data` into blocks per series (sample attribute sets become labels;
/// ids become links) and interns their symbols. A profile that cannot be stored is named in
/// the report's problems, as coming from `source`.
fn add_profiles(
    st: &mut State,
    data: &ProfilesData,
    source: usize,
    cfg: &StoreConfig,
    pending: &mut Pending,
) {
    let empty = ProfilesDictionary::default();
    let d = data.dictionary.as_ref().unwrap_or(&empty);
    let link_keys = LinkConfig::default();
    // Each link's ids, checked and with the trace elided, once per link table entry (the
    // profiles of one pprof share it; a span index lookup per sample misses the cache).
    let mut links: Vec<Option<LinkIds>> = vec![None; d.link_table.len()];
    let mut span_traces = SpanTraces::default();
    for (ri, rp) in data.resource_profiles.iter().enumerate() {
        let (service_name, name_hint, base_labels) = resource_labels(rp.resource.as_ref());
        let services_before = st.services.len();
        let service = st.service_id(&service_name);
        let stored_before = pending.report.profiles;
        let mut remap = Remap::new(d);
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            // The profile before, when stored: where its blocks start in `pending.blocks`, and
            // how they were laid out.
            let mut prev: Option<(&spanprof_format::otlp::Profile, usize, Layout)> = None;
            for (pi, p) in sp.profiles.iter().enumerate() {
                let key = st.recent.key(service, d, p);
                if let Some(k) = key {
                    if st.recent.contains(k) || pending.stored_keys.contains(&k) {
                        pending.report.repeated_profiles += 1;
                        prev = None;
                        continue;
                    }
                }
                let path = format!("resource_profiles[{ri}].scope_profiles[{si}].profiles[{pi}]");
                let first = pending.blocks.len();
                let sizes_before = st.services[service as usize].symbols.sizes();
                let series_before = st.series.len();
                // Where the blocks this profile's repeat begin, when it repeats some.
                let mut repeats = None;
                let stored = match prev.take() {
                    // The next sample type of the same pprof: only the values differ.
                    Some((before, at, layout)) if same_samples(before, p) => {
                        repeats = Some(at);
                        let before_blocks = &pending.blocks[at..at + layout.members.len()];
                        reuse_blocks(
                            st,
                            d,
                            service,
                            name_hint.as_deref(),
                            &cfg.series,
                            p,
                            &layout,
                            before_blocks,
                        )
                        .map(|blocks| (blocks, layout))
                    }
                    _ => profile_blocks(
                        st,
                        d,
                        &mut remap,
                        &mut links,
                        &mut span_traces,
                        service,
                        &base_labels,
                        name_hint.as_deref(),
                        &link_keys,
                        cfg,
                        p,
                    ),
                };
                let stored = stored
                    .and_then(|x| within_symbol_limit(st, service, sizes_before, cfg).map(|()| x));
                if stored.is_err() {
                    // Nothing of a refused profile stays: what it interned goes (the remap
                    // may name it), and so do the series it made.
                    st.services[service as usize].symbols.truncate(sizes_before);
                    st.truncate_series(series_before);
                    remap = Remap::new(d);
                }
                match stored {
                    Ok((blocks, layout)) => {
                        pending.report.profiles += 1;
                        pending.stored_keys.extend(key);
                        pending.report.samples +=
                            blocks.iter().map(|b| b.nodes.len() as u64).sum::<u64>();
                        for j in 0..blocks.len() {
                            let root =
                                repeats.map_or((first + j) as u32, |at| pending.roots[at + j]);
                            pending.roots.push(root);
                        }
                        pending.blocks.extend(blocks);
                        prev = Some((p, first, layout));
                    }
                    Err(e) => {
                        pending.report.rejected_profiles += 1;
                        pending.report.limited_profiles += u64::from(e.limit);
                        pending
                            .report
                            .problems
                            .push(format!("{path}: {}", e.message));
                        pending.report.problem_sources.push(source);
                        pending.report.problem_places.push([ri, si, pi]);
                    }
                }
            }
        }
        // A service that only refused profiles named is not made: the names of services are
        // kept for good, and refused profiles must not grow the store.
        if st.services.len() > services_before && pending.report.profiles == stored_before {
            st.forget_new_service(service);
        }
    }
}

fn dict_str(d: &ProfilesDictionary, i: i32) -> Result<&str, String> {
    usize::try_from(i)
        .ok()
        .and_then(|i| d.string_table.get(i))
        .map(String::as_str)
        .ok_or_else(|| {
            format!(
                "string index {i} out of range ({} strings)",
                d.string_table.len()
            )
        })
}

/// The link as a block stores it: without its trace id when the span, stored in the active
/// segment, names the same trace. Queries bind such a link to the stored span's trace (late
/// binding), so nothing is lost, and 16 of the link's 24 random bytes are not written.
///
/// Only the active segment's spans count: the block is written to that segment too, so the
/// span lives exactly as long as the block (retention and compaction act on whole segments,
/// blocks and spans together). A span in an older segment could be deleted by retention
/// while the block lives on, taking the trace id with it; such links keep their trace id.
fn elide_known_trace(st: &State, (trace, span): LinkIds) -> LinkIds {
    match st.active.spans().get(&span) {
        Some(s) if trace != [0; 16] && s.trace_id == trace => ([0; 16], span),
        _ => (trace, span),
    }
}

/// The trace of each span that a dictionary's links name with one, gathered on first need.
///
/// A sample that names its span but not its trace belongs to the trace the same profile
/// gives that span elsewhere: a span has one trace. SDKs that set a thread's span and trace
/// labels one call at a time (pyroscope-otel's span processor) leave such samples when the
/// profiler samples the thread between the calls; with this, trace queries find them even
/// when no span record arrives to bind them to their trace.
#[derive(Default)]
struct SpanTraces(Option<HashMap<[u8; 8], [u8; 16]>>);

impl SpanTraces {
    fn get(&mut self, d: &ProfilesDictionary, span: &[u8; 8]) -> Option<[u8; 16]> {
        let traces = self.0.get_or_insert_with(|| {
            d.link_table
                .iter()
                .filter_map(|l| {
                    let span = <[u8; 8]>::try_from(l.span_id.as_slice()).ok()?;
                    let trace = <[u8; 16]>::try_from(l.trace_id.as_slice()).ok()?;
                    (trace != [0; 16]).then_some((span, trace))
                })
                .collect()
        });
        traces.get(span).copied()
    }
}

/// How a profile's samples were split into blocks, for a profile with the same samples and
/// other values (the next sample type of one pprof) to reuse: each block's series labels, and
/// the indices of its samples in the profile, in block order.
struct Layout {
    labels: Vec<Vec<(String, String)>>,
    members: Vec<Vec<u32>>,
}

/// Whether `b` has the samples of `a` (same stacks, links and attributes, in the same order),
/// whatever their values.
fn same_samples(a: &spanprof_format::otlp::Profile, b: &spanprof_format::otlp::Profile) -> bool {
    a.samples.len() == b.samples.len()
        && a.samples.iter().zip(&b.samples).all(|(x, y)| {
            x.stack_index == y.stack_index
                && x.link_index == y.link_index
                && x.attribute_indices == y.attribute_indices
        })
}

/// Most the values of one profile may add up to: 2^53, more than any real profile holds (104
/// days of CPU or wall-clock time in nanoseconds, 8 PiB of allocations), and what a JSON
/// number carries exactly. One sample of `i64::MAX` made every total of its service's
/// answers saturate, and the real values beside it vanished from view.
pub const MAX_PROFILE_TOTAL: i64 = 1 << 53;

/// Sample `i`'s value: the sum of its values, or its number of timestamps when it has none;
/// added to `total`, the profile's so far. A negative value (profiles count or measure what
/// happened) and a total past [`MAX_PROFILE_TOTAL`] are refused.
fn sample_value(
    s: &spanprof_format::otlp::Sample,
    i: usize,
    total: &mut i64,
) -> Result<i64, String> {
    let value = if s.values.is_empty() {
        s.timestamps_unix_nano.len() as i64
    } else {
        let mut sum = 0i64;
        for &v in &s.values {
            if v < 0 {
                return Err(format!(
                    "samples[{i}].values: {v} is negative (a profile's values count or measure \
                     what happened)"
                ));
            }
            sum = sum.saturating_add(v);
        }
        sum
    };
    *total = total.saturating_add(value);
    if *total > MAX_PROFILE_TOTAL {
        return Err(format!(
            "samples[{i}]: the profile's values add up to more than {MAX_PROFILE_TOTAL} (2^53), \
             more than any real profile holds"
        ));
    }
    Ok(value)
}

/// The blocks of `p`, whose samples are those of the profile stored just before as `before`
/// (laid out as `layout`): the same stacks, links and order, with `p`'s values.
#[allow(clippy::too_many_arguments)]
fn reuse_blocks(
    st: &mut State,
    d: &ProfilesDictionary,
    service: u32,
    name_hint: Option<&str>,
    series_limits: &SeriesLimits,
    p: &spanprof_format::otlp::Profile,
    layout: &Layout,
    before: &[Block],
) -> Result<Vec<Block>, Refusal> {
    let (time_ns, duration_ns) = window(p)?;
    let profile_type = profile_type_of(d, p, name_hint)?;
    check_profile_type(&profile_type, series_limits)?;
    let mut blocks = Vec::with_capacity(before.len());
    let mut total = 0i64;
    // Read in the samples' order, then taken in the blocks' (by stack node): each sample's
    // values are behind a pointer of their own, and read in block order nearly every one
    // missed the cache (perf, OTLP requests linked in place: `sample_value` took 30 % of
    // `stack_of`'s time that way, 11 % in order).
    let all = p
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| sample_value(s, i, &mut total))
        .collect::<Result<Vec<i64>, String>>()?;
    for (b, (labels, members)) in before.iter().zip(layout.labels.iter().zip(&layout.members)) {
        let values = members.iter().map(|&i| all[i as usize]).collect();
        let key = SeriesKey {
            service,
            profile_type: profile_type.clone(),
            labels: labels.clone(),
        };
        blocks.push(Block {
            series: new_series(st, key, series_limits.max_series)?,
            time_ns,
            duration_ns,
            period: p.period,
            nodes: b.nodes.clone(),
            values,
            links: b.links.clone(),
            link_table: b.link_table.clone(),
        });
    }
    Ok(blocks)
}

/// `p`'s time and duration as the store keeps them: signed nanoseconds, up to the year 2262
/// (a later time was stored as a negative one, acknowledged and never found).
fn window(p: &spanprof_format::otlp::Profile) -> Result<(i64, i64), String> {
    match (
        i64::try_from(p.time_unix_nano),
        i64::try_from(p.duration_nano),
    ) {
        (Ok(time), Ok(duration)) if time.checked_add(duration).is_some() => Ok((time, duration)),
        _ => Err(format!(
            "time_unix_nano {} and duration_nano {} end past the latest time the store keeps \
             ({} ns since the epoch, in the year 2262)",
            p.time_unix_nano,
            p.duration_nano,
            i64::MAX
        )),
    }
}

/// The profile type of `p`, checked.
fn profile_type_of(
    d: &ProfilesDictionary,
    p: &spanprof_format::otlp::Profile,
    name_hint: Option<&str>,
) -> Result<ProfileTypeId, String> {
    let st_type = p.sample_type.unwrap_or_default();
    let pt = p.period_type.unwrap_or_default();
    let profile_type = ProfileTypeId::new(
        (
            dict_str(d, st_type.type_strindex)?,
            dict_str(d, st_type.unit_strindex)?,
        ),
        (
            dict_str(d, pt.type_strindex)?,
            dict_str(d, pt.unit_strindex)?,
        ),
        name_hint,
    );
    if profile_type.sample_type.is_empty() {
        return Err("profile has no sample type".into());
    }
    // `:` separates the parts of a type id: one inside a part made an id that named another
    // type, and that no query could name.
    for part in [
        &profile_type.name,
        &profile_type.sample_type,
        &profile_type.sample_unit,
        &profile_type.period_type,
        &profile_type.period_unit,
    ] {
        if part.contains(':') {
            return Err(format!(
                "{:?}, a part of the profile type, has a ':' in it, which separates the parts \
                 of a profile type id (name:sample_type:sample_unit:period_type:period_unit)",
                shown(part)
            ));
        }
    }
    Ok(profile_type)
}

/// Logs a warning when ingest takes the store's series past 90 % of `storage.max_series`,
/// before profiles are refused for it (once per crossing).
fn warn_near_series_limit(before: usize, after: usize, limits: &SeriesLimits) {
    if !limits.near_max_series(before) && limits.near_max_series(after) {
        tracing::warn!(
            series = after,
            limit = limits.max_series,
            "the store holds 90 % of its series limit (storage.max_series): past it, profiles \
             that would make a new series are refused; raise the limit or find the label whose \
             values keep changing (GET /api/v1/label-names, /api/v1/label-values)"
        );
    }
}

/// Counts what the profile just added to `service`'s symbols (since `sizes_before`) against
/// `StoreConfig::max_symbol_bytes`: past it, the profile is refused.
fn within_symbol_limit(
    st: &mut State,
    service: u32,
    sizes_before: [usize; 5],
    cfg: &StoreConfig,
) -> Result<(), Refusal> {
    let added = st.services[service as usize]
        .symbols
        .bytes_since(sizes_before);
    if added > 0 && cfg.max_symbol_bytes != 0 && st.symbol_bytes + added > cfg.max_symbol_bytes {
        return Err(Refusal::limit(format!(
            "the store's symbols take {} bytes and the profile would add {added}, more than \
             the limit of {} (storage.max_symbols_size): each segment starts with all of them, \
             and an earlier build's go only once retention deleted the data that refers to them",
            st.symbol_bytes, cfg.max_symbol_bytes
        )));
    }
    if !near_max_symbol_bytes(st.symbol_bytes, cfg.max_symbol_bytes)
        && near_max_symbol_bytes(st.symbol_bytes + added, cfg.max_symbol_bytes)
    {
        tracing::warn!(
            bytes = st.symbol_bytes + added,
            limit = cfg.max_symbol_bytes,
            "the store's symbols take 90 % of their limit (storage.max_symbols_size): past it, \
             profiles that add symbols (a new build or service) are refused; an earlier build's \
             symbols go once retention deleted the data that refers to them, so raise the limit \
             or shorten retention (storage.retention)"
        );
    }
    st.symbol_bytes += added;
    st.services[service as usize].bytes += added;
    Ok(())
}

/// Why a profile is refused.
struct Refusal {
    message: String,
    /// It is over a limit (it may be valid).
    limit: bool,
}

impl Refusal {
    fn limit(message: String) -> Self {
        Refusal {
            message,
            limit: true,
        }
    }
}

impl From<String> for Refusal {
    /// The profile is not valid.
    fn from(message: String) -> Self {
        Refusal {
            message,
            limit: false,
        }
    }
}

/// At most this many characters of a label name or value in a message.
const SHOWN_CHARS: usize = 64;

/// `s`, cut to [`SHOWN_CHARS`] characters with a mark when longer.
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// Checks a new series' labels against the label limits.
fn check_labels(labels: &[(String, String)], lim: &SeriesLimits) -> Result<(), Refusal> {
    let over = |n: usize, limit: usize| limit != 0 && n > limit;
    if over(labels.len(), lim.max_labels) {
        let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        return Err(Refusal::limit(format!(
            "a series of the profile has {} labels, more than the limit of {} \
             (server.max_label_names_per_series): {}",
            labels.len(),
            lim.max_labels,
            shown(&names.join(", "))
        )));
    }
    for (k, v) in labels {
        if over(k.len(), lim.max_name_bytes) {
            return Err(Refusal::limit(format!(
                "label name {:?} is {} bytes, more than the limit of {} \
                 (server.max_label_name_length)",
                shown(k),
                k.len(),
                lim.max_name_bytes
            )));
        }
        if over(v.len(), lim.max_value_bytes) {
            return Err(Refusal::limit(format!(
                "the value of label {:?} is {} bytes, more than the limit of {} \
                 (server.max_label_value_length): {:?}",
                shown(k),
                v.len(),
                lim.max_value_bytes,
                shown(v)
            )));
        }
    }
    Ok(())
}

/// Checks a profile type, which its series carry as a label (`__profile_type__` in
/// Pyroscope's answers), against the label value limit.
fn check_profile_type(t: &ProfileTypeId, lim: &SeriesLimits) -> Result<(), Refusal> {
    let len = [
        &t.name,
        &t.sample_type,
        &t.sample_unit,
        &t.period_type,
        &t.period_unit,
    ]
    .iter()
    .map(|s| s.len() + 1)
    .sum::<usize>()
        - 1;
    if lim.max_value_bytes != 0 && len > lim.max_value_bytes {
        return Err(Refusal::limit(format!(
            "the profile type is {len} bytes, more than the limit of {} \
             (server.max_label_value_length): {:?}",
            lim.max_value_bytes,
            shown(&t.to_string())
        )));
    }
    Ok(())
}

/// The id of series `key`, unless it is new and the store already holds `max` series.
fn new_series(st: &mut State, key: SeriesKey, max: usize) -> Result<u32, Refusal> {
    st.series_id_within(key, max).map_err(|key| {
        Refusal::limit(format!(
            "the store holds {} series, its limit (storage.max_series), and the profile \
             would make another: {}",
            st.live_series(),
            render_labels(&key.labels)
        ))
    })
}

/// `{k="v", …}`, each name and value cut to [`SHOWN_CHARS`].
fn render_labels(labels: &[(String, String)]) -> String {
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}={:?}", shown(k), shown(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

#[allow(clippy::too_many_arguments)]
fn profile_blocks(
    st: &mut State,
    d: &ProfilesDictionary,
    remap: &mut Remap,
    link_memo: &mut [Option<LinkIds>],
    span_traces: &mut SpanTraces,
    service: u32,
    base_labels: &[(String, String)],
    name_hint: Option<&str>,
    link_keys: &LinkConfig,
    cfg: &StoreConfig,
    p: &spanprof_format::otlp::Profile,
) -> Result<(Vec<Block>, Layout), Refusal> {
    let series_limits = &cfg.series;
    // Checked before anything is interned.
    window(p)?;
    let profile_type = profile_type_of(d, p, name_hint)?;
    check_profile_type(&profile_type, series_limits)?;
    // Sample attribute set → block; attribute index → (label, or link part).
    let mut groups: HashMap<Vec<i32>, usize> = HashMap::new();
    // Sets of at most one attribute (most profiles': a span name, or nothing) found by
    // index, not hashed and compared: `single[0]` for none, `single[a + 1]` for attribute `a`.
    let mut single: Vec<Option<usize>> = vec![None; d.attribute_table.len() + 1];
    let mut blocks: Vec<(Block, HashMap<LinkIds, u32>)> = Vec::new();
    // Per attribute table entry, once classified: its label (key, value) and role, or
    // `Some(None)` when it is no label (a number: see `sample_label_of`).
    let mut attr_roles: Vec<Option<Option<(String, String, IdRole)>>> =
        vec![None; d.attribute_table.len()];
    let mut label_attrs = Vec::new();
    let mut layout = Layout {
        labels: Vec::new(),
        members: Vec::new(),
    };
    let mut total = 0i64;
    for (i, s) in p.samples.iter().enumerate() {
        let node = st.services[service as usize]
            .symbols
            .stack_of(d, remap, s.stack_index)
            .map_err(|e| format!("samples[{i}]: {e}"))?;
        // Checked and elided (`elide_known_trace`) when it comes from the link table.
        let mut link: Option<LinkIds> = None;
        if s.link_index != 0 {
            let x = usize::try_from(s.link_index)
                .ok()
                .filter(|&x| x < d.link_table.len())
                .ok_or_else(|| {
                    format!(
                        "samples[{i}].link_index {} out of range ({} links)",
                        s.link_index,
                        d.link_table.len()
                    )
                })?;
            if link_memo[x].is_none() {
                let l = &d.link_table[x];
                match (
                    <[u8; 16]>::try_from(l.trace_id.as_slice()),
                    <[u8; 8]>::try_from(l.span_id.as_slice()),
                ) {
                    (Ok(t), Ok(sp)) if sp != [0; 8] => {
                        link_memo[x] = Some(elide_known_trace(st, (t, sp)));
                    }
                    (Ok(_), Ok(_)) => {
                        return Err(format!(
                            "samples[{i}]: link {} has an all-zero span id (a sample without \
                             a span has link_index 0)",
                            s.link_index
                        )
                        .into())
                    }
                    _ => {
                        return Err(format!(
                            "samples[{i}]: link {} has ids of {} and {} bytes (need 16 and 8)",
                            s.link_index,
                            l.trace_id.len(),
                            l.span_id.len()
                        )
                        .into())
                    }
                }
            }
            link = link_memo[x];
        }
        label_attrs.clear();
        let (mut span, mut trace) = (None, None);
        for &a in &s.attribute_indices {
            // Classified once per attribute index; samples only look the class up.
            let x = usize::try_from(a)
                .ok()
                .filter(|&x| x < d.attribute_table.len())
                .ok_or_else(|| format!("samples[{i}]: attribute index {a} out of range"))?;
            if attr_roles[x].is_none() {
                let kv = &d.attribute_table[x];
                let key = dict_str(d, kv.key_strindex)?.to_owned();
                let r = kv.value.as_ref().and_then(sample_label_of).map(|v| {
                    let role = link_keys.role(&key, Some(&v));
                    (key, v, role)
                });
                attr_roles[x] = Some(r);
            }
            match attr_roles[x].as_ref().expect("classified just above") {
                Some((_, _, IdRole::SpanId(id))) => span = span.or(Some(*id)),
                Some((_, _, IdRole::TraceId(id))) => trace = trace.or(Some(*id)),
                // Id keys never become series labels, valid or not (cardinality).
                Some((k, _, IdRole::InvalidId))
                    if link_keys.span_id_keys.contains(k)
                        || link_keys.trace_id_keys.contains(k) => {}
                Some(_) => label_attrs.push(a),
                None => {}
            }
        }
        if link.is_none() {
            // Only a span id: the trace the profile's links give that span, or bound to its
            // trace later, from the stored span.
            if let Some(sp) = span {
                let trace = trace.or_else(|| span_traces.get(d, &sp));
                link = Some(elide_known_trace(st, (trace.unwrap_or([0; 16]), sp)));
            }
        }
        label_attrs.sort_unstable();
        label_attrs.dedup();
        // Attribute indices were checked against the table above.
        let slot = match label_attrs[..] {
            [] => Some(0),
            [a] => Some(a as usize + 1),
            _ => None,
        };
        let found = match slot {
            Some(k) => single[k],
            None => groups.get(&label_attrs).copied(),
        };
        let g = match found {
            Some(g) => g,
            None => {
                // Checked before the series is made: a profile over the limit adds none past it.
                ProfileLimits {
                    max_series: cfg.max_profile_series,
                    ..ProfileLimits::NONE
                }
                .allow(Measure::Series, blocks.len() + 1)
                .map_err(|e| Refusal::limit(e.to_string()))?;
                let attrs = label_attrs.iter().filter_map(|a| {
                    let (k, v, _) = attr_roles[*a as usize].as_ref()?.as_ref()?;
                    Some((k.clone(), v.clone()))
                });
                let (block, labels) =
                    open_block(st, service, base_labels, attrs, &profile_type, p, cfg)?;
                layout.labels.push(labels);
                layout.members.push(Vec::new());
                // A block's distinct links are at most the profile's (no rehash as it fills).
                let links = HashMap::with_capacity(d.link_table.len().min(p.samples.len()));
                blocks.push((block, links));
                match slot {
                    Some(k) => single[k] = Some(blocks.len() - 1),
                    None => {
                        groups.insert(label_attrs.clone(), blocks.len() - 1);
                    }
                }
                blocks.len() - 1
            }
        };
        let (block, links) = &mut blocks[g];
        let value = sample_value(s, i, &mut total)?;
        layout.members[g].push(i as u32);
        let link_ix = match link {
            None => 0,
            Some(ids) => *links.entry(ids).or_insert_with(|| {
                block.link_table.push(ids);
                block.link_table.len() as u32
            }),
        };
        block.nodes.push(node);
        block.values.push(value);
        block.links.push(link_ix);
    }
    if p.samples.is_empty() {
        // A window without samples (a CPU profile of an idle process) is kept as an empty
        // block: it tells a span that used no CPU in it from one no profile covers.
        let (block, labels) = open_block(
            st,
            service,
            base_labels,
            std::iter::empty(),
            &profile_type,
            p,
            cfg,
        )?;
        layout.labels.push(labels);
        layout.members.push(Vec::new());
        blocks.push((block, HashMap::new()));
    }
    let blocks = blocks
        .into_iter()
        .zip(&mut layout.members)
        .map(|((mut b, _), members)| {
            let order = order_samples(&mut b);
            *members = order.iter().map(|&i| members[i as usize]).collect();
            b
        })
        .collect();
    Ok((blocks, layout))
}

/// A new block of `p`'s window, in the series of `service` with `base_labels` and `attrs`
/// (made if new), without samples yet; and the series' labels.
fn open_block(
    st: &mut State,
    service: u32,
    base_labels: &[(String, String)],
    attrs: impl Iterator<Item = (String, String)>,
    profile_type: &ProfileTypeId,
    p: &spanprof_format::otlp::Profile,
    cfg: &StoreConfig,
) -> Result<(Block, Vec<(String, String)>), Refusal> {
    let (time_ns, duration_ns) = window(p)?;
    let mut labels = base_labels.to_vec();
    labels.push((
        SERVICE_LABEL.to_owned(),
        st.services[service as usize].name.clone(),
    ));
    labels.extend(attrs);
    labels.sort();
    labels.dedup_by(|a, b| a.0 == b.0);
    check_labels(&labels, &cfg.series)?;
    let key = SeriesKey {
        service,
        profile_type: profile_type.clone(),
        labels: labels.clone(),
    };
    let series = new_series(st, key, cfg.series.max_series)?;
    let block = Block {
        series,
        time_ns,
        duration_ns,
        period: p.period,
        ..Default::default()
    };
    Ok((block, labels))
}

/// Orders a block's samples by stack node, then link. Their order means nothing (every answer
/// sums them), and in this order the block encodes node differences that are mostly tiny:
/// measured on 1,000 Go CPU profiles (`tests/store_disk.rs`), 36.1 % → 32.9 % of the gzipped
/// pprof on disk (before record link tables).
///
/// Returns the new order: for each position, the sample's position before.
fn order_samples(b: &mut Block) -> Vec<u32> {
    // (node, link) packed in one integer: one compare per step, and equal keys may go in any
    // order.
    let mut order: Vec<(u64, u32)> = (0..b.nodes.len())
        .map(|i| {
            (
                (u64::from(b.nodes[i]) << 32) | u64::from(b.links[i]),
                i as u32,
            )
        })
        .collect();
    order.sort_unstable_by_key(|&(key, _)| key);
    b.nodes = order.iter().map(|&(key, _)| (key >> 32) as u32).collect();
    b.links = order.iter().map(|&(key, _)| key as u32).collect();
    b.values = order.iter().map(|&(_, i)| b.values[i as usize]).collect();
    order.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::{near_max_symbol_bytes, resource_labels, SeriesLimits};
    use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};

    #[test]
    fn a_resource_without_a_service_name_is_its_executables_unknown_service() {
        let resource = |attrs: &[(&str, &str)]| Resource {
            attributes: attrs
                .iter()
                .map(|(k, v)| KeyValue {
                    key: (*k).into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue((*v).into())),
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let service = |attrs| resource_labels(Some(&resource(attrs))).0;
        assert_eq!(
            service(&[("process.executable.name", "nginx"), ("host.name", "h1")]),
            "unknown_service:nginx"
        );
        assert_eq!(service(&[("host.name", "h1")]), "unknown_service");
        assert_eq!(
            service(&[
                ("process.executable.name", "nginx"),
                ("service.name", "web")
            ]),
            "web"
        );
        assert_eq!(resource_labels(None).0, "unknown_service");
        // Empty is missing: no service "", no label of an empty value.
        assert_eq!(service(&[("service.name", "")]), "unknown_service");
        assert!(resource_labels(Some(&resource(&[("env", "")])))
            .2
            .is_empty());
    }

    #[test]
    fn near_the_series_and_symbol_limits_is_nine_tenths_of_them() {
        let at = |max_series| SeriesLimits {
            max_series,
            ..SeriesLimits::default()
        };
        assert!(!at(100).near_max_series(89));
        assert!(at(100).near_max_series(90));
        assert!(at(100).near_max_series(150));
        assert!(!at(0).near_max_series(1_000_000));
        assert!(!near_max_symbol_bytes(89, 100) && near_max_symbol_bytes(90, 100));
        assert!(!near_max_symbol_bytes(u64::MAX, 0));
        // Small limits: 90 % of 3 rounds up to 3.
        assert!(!at(3).near_max_series(2));
        assert!(at(3).near_max_series(3));
    }
}
