//! Ingest: linked OTLP profiles and spans become one log record (symbol and series deltas,
//! sample blocks, spans), appended durably, then published to the in-memory indexes.

mod blocks;
mod builder;
mod invalid;
mod labels;
mod limits;

use spanprof_format::otlp::ProfilesData;

use super::state::{encode_series, State};
use super::{put_record_links, Store, StoreError, INGEST};
use crate::block::{shared_link_table, Block};
use crate::codec::Put;
use crate::log::MAX_RECORD_LEN;
use crate::spans::{encode_spans, SpanRecord};
use blocks::add_profiles;
use labels::resource_labels;
use limits::warn_near_series_limit;

pub use invalid::MAX_PROFILE_TOTAL;

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
    // Long: intern, build, write, publish: one record in the order durability needs, under the writer lock.
    #[allow(clippy::too_many_lines)]
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
