//! Answers: which blocks and samples a selection covers, and what is built from them.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use hashbrown::{HashMap, HashSet};
use spanprof_format::link::to_hex;
use spanprof_format::pprof;
use spanprof_format::profile_type::ProfileTypeId;

use std::sync::Arc;

use super::segments::SealedSummary;
use super::segments::SegmentIndex;
use super::state::{segment_overlaps, IndexRef, SeriesKey, State};
use super::{Store, StoreError};
use crate::block::{Block, LinkIds};
use crate::codec::Get;
use crate::flamegraph::FlameTree;
use crate::matchers::{matches_all, parse_selector, LabelMatcher};
use crate::select::{ProfileType, SelectionSummary};
use crate::spans::{percentile, Longest, SpanQuery, SpanRecord, SpanView};

/// Which samples a query is about.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Service name (`service_name` label); `None` = every service.
    pub service: Option<String>,
    /// Profile type: a Pyroscope id, `type:unit`, `type` or a name; `None` = the CPU type when
    /// there is one, else the first type present.
    pub profile_type: Option<String>,
    /// Start of the time range, in nanoseconds since the Unix epoch.
    pub from_ns: i64,
    /// End of the time range (exclusive), in nanoseconds since the Unix epoch; 0 = no end.
    pub to_ns: i64,
    /// Label selector, e.g. `{region="eu", span_name=~"GET .*"}`.
    pub label_selector: Option<String>,
    /// Only samples of these spans.
    pub span_ids: Vec<[u8; 8]>,
    /// Only samples of this trace (its spans known from traces, or links naming it).
    pub trace_id: Option<[u8; 16]>,
    /// Add the samples of every descendant of the selected spans.
    pub include_child_spans: bool,
    /// Only samples of spans passing this filter.
    pub span_filter: Option<SpanFilter>,
    /// Count every profile whose window overlaps the time range, not only those taken in it
    /// (what covered a span's time). Selections of spans or a trace always do.
    pub overlapping: bool,
}

impl Selection {
    /// What the selection shows, for an image's heading: service, spans or trace, span
    /// name, then the type (`goapp · span 79141fc6e5920f9a and its children ·
    /// process_cpu:cpu:…`).
    pub fn describe(&self, profile_type: &str) -> String {
        let sel = self;
        let mut parts: Vec<String> = Vec::new();
        parts.extend(sel.service.clone());
        let children = if sel.include_child_spans {
            " and their children"
        } else {
            ""
        };
        match sel.span_ids.as_slice() {
            [] => {}
            [one] => parts.push(format!(
                "span {}{}",
                to_hex(one),
                if sel.include_child_spans {
                    " and its children"
                } else {
                    ""
                }
            )),
            many => parts.push(format!("{} spans{children}", many.len())),
        }
        if let Some(t) = &sel.trace_id {
            parts.push(format!("trace {}", to_hex(t)));
        }
        if let Some(name) = sel.span_filter.as_ref().and_then(|f| f.name.as_ref()) {
            parts.push(format!("{name:?} spans{children}"));
        }
        parts.push(profile_type.to_owned());
        parts.join(" · ")
    }
}

/// Spans chosen by name and duration rather than by id.
#[derive(Debug, Clone, Default)]
pub struct SpanFilter {
    /// Span name (exact).
    pub name: Option<String>,
    /// Only spans at least this long, in nanoseconds.
    pub min_duration_ns: Option<u64>,
    /// Only spans at most this long, in nanoseconds.
    pub max_duration_ns: Option<u64>,
    /// Only spans at or above this percentile (0–100) of the durations of spans of that name.
    pub above_percentile: Option<f64>,
    /// Only spans at or below this percentile (0–100) of the durations of spans of that name.
    pub below_percentile: Option<f64>,
}

/// How well a span was sampled: what it got against what its duration allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Coverage {
    /// Sampling ticks of the span: its value divided by the period when both are in one unit
    /// (Go CPU: ns / 10 ms), or its value when the type counts samples.
    pub samples: u64,
    /// Sum of their values, in the profile type's unit.
    pub value: i64,
    /// The span's duration in nanoseconds, when the span is known.
    pub duration_ns: Option<u64>,
    /// The span's own time: its duration outside its stored child spans that have samples of
    /// their own (their union), when the span is known. Its own samples can only come from
    /// then, unless a child runs beside it (an asynchronous one), which this does not tell.
    /// A child without samples (an auto-instrumented client span sets no labels) counts as
    /// the parent's time.
    pub self_ns: Option<u64>,
    /// The sampling period of the profiles that hold its samples (e.g. 10000000 ns).
    pub period: Option<i64>,
    /// How many samples one fully busy thread would have produced in the span's own time
    /// (`self_ns` / period); `samples` near 0 with this ≥ 1 means "no CPU used", this < 1
    /// means "too short to be sampled". For a span without samples the time counted is
    /// only the part of its own time that profiles cover ([`Coverage::covered_ns`]).
    pub possible_samples: Option<f64>,
    /// For a known span without samples: how many nanoseconds of its own time the windows
    /// of its service's profiles of the type cover (their union; a profile without a duration counts
    /// as covering the whole span). A pull profiler leaves gaps between its windows, and a
    /// span that fell into one was not missed but not watched. `None` otherwise.
    pub covered_ns: Option<u64>,
    /// For a known span without samples that no window covers: a window of its service's
    /// profiles of the type ended within `BETWEEN_WINDOWS_NS` before it started and another
    /// began within that after it ended. It fell into the gap a pull profiler leaves between
    /// two windows (Go's build and answer, the next request), so the profiler was running.
    pub between_windows: bool,
    /// For a known span without samples that no window covers: none of the profiles of the
    /// type that stand for its service (its own, or those whose samples name its spans in
    /// the trace, when it is profiled under another name) reaches the span's time yet: the
    /// profile of that time is still to come (a scraped window is stored when it ends, a
    /// pushing profiler's with its next upload), or the profiler stopped before it. When
    /// none stands for it yet (a target named otherwise has not sent the trace's samples):
    /// some service with profiles of the type has none from the span's time on yet.
    pub after_last_window: bool,
    /// The profile type `samples` and `value` are of (a span's default is the CPU type of its
    /// samples, or wall-clock time); `None` when the store has no profile at all.
    pub profile_type: Option<ProfileTypeId>,
}

/// A span's own samples of one type, as [`Store::span_coverages`] reads them.
struct OwnSamples {
    /// Sum of their values.
    value: i64,
    /// Their sampling period; `None` without samples.
    period: Option<i64>,
    /// The type they were read in.
    profile_type: ProfileTypeId,
}

impl OwnSamples {
    /// Their type, unless the store had none to resolve.
    fn known_type(&self) -> Option<ProfileTypeId> {
        resolved_type(&self.profile_type)
    }

    /// Sampling ticks: a value in the period's unit counts value / period ticks (Go CPU:
    /// ns / 10 ms); counts are ticks already.
    fn ticks(&self) -> u64 {
        let t = &self.profile_type;
        match self.period {
            // Values may be negative (a diff profile's): no ticks, not 2^64 of them.
            Some(p) if p > 0 && t.sample_unit == t.period_unit => (self.value / p).max(0) as u64,
            _ => self.value.max(0) as u64,
        }
    }
}

/// How close to a span the windows around it end and begin for it to have fallen between
/// them ([`Coverage::between_windows`]): back-to-back Go CPU windows are 1-300 ms apart.
pub const BETWEEN_WINDOWS_NS: u64 = 1_000_000_000;

/// What a selection resolved to.
pub(crate) struct Resolved {
    pub profile_type: ProfileTypeId,
    /// (segment index, block) pairs to read.
    pub blocks: Vec<(Arc<SegmentIndex>, u32)>,
    /// When set, only samples whose link's span is in here.
    pub spans: Option<HashSet<[u8; 8]>>,
    /// When set, only samples whose link names this trace or one of its stored spans.
    pub trace: Option<([u8; 16], HashSet<[u8; 8]>)>,
    pub available: Vec<ProfileTypeId>,
    /// `available` are the types of the selected spans' or trace's samples (not the
    /// service's, or every service's, for a selection of spans without samples).
    pub of_samples: bool,
}

/// `[start, end)` less the union of `holes`, as sorted disjoint intervals.
fn outside(start: u64, end: u64, holes: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut holes: Vec<(u64, u64)> = holes
        .map(|(a, b)| (a.max(start), b.min(end)))
        .filter(|(a, b)| a < b)
        .collect();
    holes.sort_unstable();
    let (mut parts, mut at) = (Vec::new(), start);
    for (a, b) in holes {
        if a > at {
            parts.push((at, a));
        }
        at = at.max(b);
    }
    if at < end {
        parts.push((at, end));
    }
    parts
}

/// How many nanoseconds of `parts` (sorted, disjoint) the union of `(time_ns, duration_ns)`
/// windows covers; a window without a duration covers them all.
fn covered(parts: &[(u64, u64)], windows: impl Iterator<Item = (i64, i64)>) -> u64 {
    let mut union: Vec<(u64, u64)> = Vec::new();
    for (time, duration) in windows {
        if duration <= 0 {
            return parts.iter().map(|(a, b)| b - a).sum();
        }
        let (from, to) = (
            time.max(0) as u64,
            time.saturating_add(duration).max(0) as u64,
        );
        if from < to {
            union.push((from, to));
        }
    }
    union.sort_unstable();
    union.dedup_by(|next, kept| {
        let overlaps = next.0 <= kept.1;
        if overlaps {
            kept.1 = kept.1.max(next.1);
        }
        overlaps
    });
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < parts.len() && j < union.len() {
        let (from, to) = (parts[i].0.max(union[j].0), parts[i].1.min(union[j].1));
        if from < to {
            total += to - from;
        }
        if parts[i].1 < union[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// Whether series `k` passes every matcher, its profile type counting as the labels
/// `__profile_type__` (the id) and `__name__` (its name), as [`Store::series`] lists them:
/// Grafana's label pickers ask with `{__profile_type__="…"}`.
/// One series' labels, sorted by name: `(name, value)`.
pub type SeriesLabels = Vec<(String, String)>;

/// Bytes of label text: names and values.
fn label_bytes(labels: &[(String, String)]) -> usize {
    labels.iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn series_matches(matchers: &[LabelMatcher], k: &SeriesKey) -> bool {
    matchers.iter().all(|m| match m.name.as_str() {
        "__profile_type__" => m.matches(Some(&k.profile_type.to_string())),
        "__name__" => m.matches(Some(&k.profile_type.name)),
        _ => matches_all(std::slice::from_ref(m), &k.labels),
    })
}

/// The distinct times of the resolved blocks: the profiles a selection reads.
fn profile_times(r: &Resolved) -> u64 {
    r.blocks
        .iter()
        .map(|(index, b)| index.blocks[*b as usize].time_ns)
        .collect::<HashSet<i64>>()
        .len() as u64
}

/// Whether a profile taken at `time_ns` lies in `[from_ns, to_ns)` (0 = open end).
fn starts_in(time_ns: i64, from_ns: i64, to_ns: i64) -> bool {
    time_ns >= from_ns && (to_ns == 0 || time_ns < to_ns)
}

fn overlaps(time_ns: i64, duration_ns: i64, from_ns: i64, to_ns: i64) -> bool {
    let end = time_ns.saturating_add(duration_ns.max(0));
    (to_ns == 0 || time_ns < to_ns) && end >= from_ns
}

/// Selected spans looked up for a pprof export's time (beyond, the profiles' windows give it:
/// a span filter can select thousands).
const SPAN_TIME_LOOKUPS: usize = 1024;

/// Series a scan matches with the store read-locked, before it lets writers in (fewer in
/// tests, so that a scan of a few chunks needs few series).
pub(crate) const SERIES_CHUNK: usize = if cfg!(test) { 8 } else { 256 };

#[cfg(test)]
thread_local! {
    /// Run by a series scan on this thread between two chunks, the store unlocked (tests).
    pub(crate) static BETWEEN_SERIES_CHUNKS: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
fn between_series_chunks() {
    BETWEEN_SERIES_CHUNKS.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}

impl State {
    /// What `sel` selects: its blocks, spans, trace and profile type. A selection with a
    /// span filter goes through [`Store::read_resolved`], which finds the filter's spans
    /// first with the store unlocked; here it would select no span.
    pub(crate) fn resolve(&self, sel: &Selection) -> Result<Resolved, StoreError> {
        debug_assert!(
            sel.span_filter.is_none(),
            "span filters resolve in Store::read_resolved"
        );
        let series = self.series_of(sel, 0..self.series.len())?;
        self.resolve_with(sel, Vec::new(), series)
    }

    /// The series among `ids` whose service and labels `sel` takes (a selection by spans or a
    /// trace takes any service: see [`State::resolve_with`]).
    fn series_of(
        &self,
        sel: &Selection,
        ids: std::ops::Range<usize>,
    ) -> Result<HashSet<u32>, StoreError> {
        let matchers: Vec<LabelMatcher> = match &sel.label_selector {
            Some(s) if !s.trim().is_empty() => parse_selector(s)?.matchers,
            _ => Vec::new(),
        };
        let by_spans =
            !sel.span_ids.is_empty() || sel.span_filter.is_some() || sel.trace_id.is_some();
        let service_ok = |k: &SeriesKey| {
            sel.service
                .as_deref()
                .is_none_or(|s| self.services[k.service as usize].name == s)
        };
        let mut series = HashSet::new();
        let end = ids.end.min(self.series.len());
        for i in ids.start..end {
            // Label regexes over many long values cost seconds: a stopped query stops here.
            if i % 256 == 0 {
                crate::query_limit::check()?;
            }
            let k = &self.series[i];
            if (by_spans || service_ok(k)) && series_matches(&matchers, k) {
                series.insert(i as u32);
            }
        }
        Ok(series)
    }

    /// [`State::resolve`], with `filtered` the spans of `sel`'s span filter
    /// ([`Store::filtered_spans`]) and `series` those it takes ([`State::series_of`]).
    fn resolve_with(
        &self,
        sel: &Selection,
        filtered: Vec<[u8; 8]>,
        series: HashSet<u32>,
    ) -> Result<Resolved, StoreError> {
        let service_ok = |k: &SeriesKey| {
            sel.service
                .as_deref()
                .is_none_or(|s| self.services[k.service as usize].name == s)
        };
        // Span selection: the ids, narrowed by the span filter, plus descendants. A trace
        // narrows further: a sample passes when its link names the trace or its span is one of
        // the trace's stored spans (late binding of span-only samples).
        let mut spans: Option<HashSet<[u8; 8]>> = None;
        if !sel.span_ids.is_empty() || sel.span_filter.is_some() {
            let mut set: HashSet<[u8; 8]> = match &sel.span_filter {
                Some(_) => filtered.into_iter().collect(),
                None => sel.span_ids.iter().copied().collect(),
            };
            if sel.span_filter.is_some() && !sel.span_ids.is_empty() {
                set.retain(|s| sel.span_ids.contains(s));
            }
            if sel.include_child_spans {
                let roots: Vec<[u8; 8]> = set.iter().copied().collect();
                let found = self.descendants_of_all(&roots)?;
                set.extend(found);
            }
            spans = Some(set);
        }
        // With spans or a trace selected, their ids say which samples count, and `service` is
        // theirs (the tracer's service.name, as the span filter reads it), not the profiles':
        // a scrape target named otherwise holds their samples too, and so do other services'
        // profiles for child spans there. The type then defaults to the CPU type of the
        // spans' own samples.
        let by_spans = spans.is_some() || sel.trace_id.is_some();
        let trace = match sel.trace_id {
            Some(t) => Some((
                t,
                self.trace_records(&t)?
                    .iter()
                    .map(|s| s.span_id)
                    .collect::<HashSet<_>>(),
            )),
            None => None,
        };
        // Which segments can hold the samples: all that overlap the time range, narrowed by
        // their span and trace Bloom filters when spans or a trace are selected.
        let probe: Vec<[u8; 8]> = match (&spans, &trace) {
            (Some(set), _) => set.iter().copied().collect(),
            (None, Some((_, of_trace))) => of_trace.iter().copied().collect(),
            (None, None) => Vec::new(),
        };
        let filtering = spans.is_some() || trace.is_some();
        let indexes = self
            .indexes(sel.from_ns, sel.to_ns, |summary| {
                !filtering
                    || probe.iter().any(|s| summary.span_bloom.may_contain(s))
                    || trace
                        .as_ref()
                        .is_some_and(|(t, _)| summary.trace_bloom.may_contain(t))
            })
            .map_err(StoreError::Invalid)?;
        let mut blocks = Vec::new();
        for index in indexes {
            let mut ids: Vec<u32> = if filtering {
                let mut ids: Vec<u32> = probe.iter().flat_map(|s| index.span_blocks(s)).collect();
                if let Some((t, _)) = &trace {
                    if spans.is_none() {
                        ids.extend(index.trace_blocks(t));
                    }
                }
                ids
            } else {
                (0..index.blocks.len() as u32).collect()
            };
            ids.sort_unstable();
            ids.dedup();
            // Selected spans are found in every profile window that overlaps the range (a
            // span can start in a window that began before it). Otherwise a profile counts at
            // its time, as the series buckets it and Pyroscope selects it: 15 s windows
            // counted whole whenever they overlapped made 36 s of CPU in a 30 s range.
            ids.retain(|&b| {
                let m = &index.blocks[b as usize];
                series.contains(&m.series)
                    && if filtering || sel.overlapping {
                        overlaps(m.time_ns, m.duration_ns, sel.from_ns, sel.to_ns)
                    } else {
                        starts_in(m.time_ns, sel.from_ns, sel.to_ns)
                    }
            });
            blocks.extend(ids.into_iter().map(|b| (Arc::clone(&index), b)));
        }
        let type_of = |index: &SegmentIndex, b: u32| {
            &self.series[index.blocks[b as usize].series as usize].profile_type
        };
        // Types present among the series this selection could touch: the spans' samples',
        // else the service's series' (spans without samples still have a type to count in:
        // their coverage reads its period), else every series'.
        let of_series = |ok: &dyn Fn(&SeriesKey) -> bool| -> BTreeSet<ProfileTypeId> {
            self.series
                .iter()
                .filter(|k| ok(k))
                .map(|k| k.profile_type.clone())
                .collect()
        };
        let mut available: BTreeSet<ProfileTypeId> = if by_spans {
            blocks
                .iter()
                .map(|(index, b)| type_of(index, *b).clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        // Whether they are the types of the selected samples, not a fallback.
        let of_samples = !available.is_empty();
        if available.is_empty() {
            available = of_series(&service_ok);
        }
        if available.is_empty() && by_spans {
            available = of_series(&|_| true);
        }
        // The default of spans' samples: the preferred type of the services that hold them,
        // not of the samples alone. A span whose CPU window has not arrived yet, but whose
        // goroutines were counted meanwhile, read "sampled" with a total of 1 goroutine next
        // to spans with their CPU time.
        // (Only when the samples' own types have no CPU time: a scan of every series per
        // span of a search.)
        let mut candidates = available.clone();
        let best = ProfileTypeId::preferred(&available).map(ProfileTypeId::default_rank);
        if by_spans && of_samples && best != Some(0) {
            let services: HashSet<u32> = blocks
                .iter()
                .map(|(index, b)| self.series[index.blocks[*b as usize].series as usize].service)
                .collect();
            candidates.extend(of_series(&|k| {
                services.contains(&k.service) && !super::state::is_forgotten(k)
            }));
        }
        let mut available: Vec<ProfileTypeId> = available.into_iter().collect();
        let profile_type = match &sel.profile_type {
            Some(wanted) => {
                // A name like `process_cpu` covers several types: prefer CPU time (or
                // wall-clock time).
                let m = ProfileTypeId::preferred(available.iter().filter(|t| t.matches(wanted)));
                // A type with no data gives an empty answer (the summary lists what exists).
                m.map_or_else(
                    || ProfileTypeId::parse(wanted).unwrap_or_default(),
                    Clone::clone,
                )
            }
            None => ProfileTypeId::preferred(&candidates)
                .cloned()
                .unwrap_or_default(),
        };
        blocks.retain(|(index, b)| *type_of(index, *b) == profile_type);
        available.sort();
        Ok(Resolved {
            profile_type,
            blocks,
            spans,
            trace,
            available,
            of_samples,
        })
    }

    /// A stored span, from whichever segment holds it.
    pub(crate) fn span_record(&self, id: &[u8; 8]) -> Result<Option<SpanRecord>, StoreError> {
        if let Some(s) = self.active.spans().get(id) {
            return Ok(Some(s.clone()));
        }
        let indexes = self
            .indexes(0, 0, |summary| summary.span_bloom.may_contain(id))
            .map_err(StoreError::Invalid)?;
        Ok(indexes
            .iter()
            .rev()
            .find_map(|i| i.spans().get(id).cloned()))
    }

    /// The stored spans of a trace over all segments, in start order.
    pub(crate) fn trace_records(&self, t: &[u8; 16]) -> Result<Vec<SpanRecord>, StoreError> {
        let indexes = self
            .indexes(0, 0, |summary| summary.trace_bloom.may_contain(t))
            .map_err(StoreError::Invalid)?;
        let mut out: Vec<SpanRecord> = Vec::new();
        let mut seen = HashSet::new();
        for i in indexes.iter().rev() {
            for s in i.spans().trace(t) {
                if seen.insert(s.span_id) {
                    out.push(s.clone());
                }
            }
        }
        out.sort_by_key(|s| (s.start_ns, s.span_id));
        Ok(out)
    }

    /// The descendants of every span of `roots` (their traces' spans, whichever segments
    /// they are in): each trace's spans are gathered once and walked once for all its roots
    /// (2,500 spans of one 30,000-span trace rebuilt and walked the trace 2,500 times: 58 s).
    pub(crate) fn descendants_of_all(
        &self,
        roots: &[[u8; 8]],
    ) -> Result<HashSet<[u8; 8]>, StoreError> {
        let mut by_trace: HashMap<[u8; 16], Vec<[u8; 8]>> = HashMap::new();
        for root in roots {
            if let Some(span) = self.span_record(root)? {
                by_trace.entry(span.trace_id).or_default().push(*root);
            }
        }
        let mut found: HashSet<[u8; 8]> = HashSet::new();
        for (trace_id, roots) in by_trace {
            let mut trace = crate::spans::SpanIndex::default();
            for s in self.trace_records(&trace_id)? {
                trace.insert(s);
            }
            found.extend(trace.below_any(&roots));
        }
        Ok(found)
    }

    /// The series of every stored block (a series may appear more than once).
    pub(crate) fn stored_series(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .sealed
            .values()
            .flat_map(|s| s.series.iter().map(|&(series, _, _)| series))
            .collect();
        out.extend(
            std::iter::once(&self.active)
                .chain(self.sealing.values())
                .flat_map(|a| a.blocks.iter())
                .map(|b| b.series),
        );
        out
    }

    /// The series with a profile taken in `[from_ns, to_ns)` (0 = open end), as the profile
    /// queries count them. A sealed segment's summary says when its first and last profile of
    /// each series were taken; its index is read only when the range falls between the two.
    pub(crate) fn series_taken_in(&self, from_ns: i64, to_ns: i64) -> HashSet<u32> {
        let mut live: HashSet<u32> = HashSet::new();
        let mut unsure: Vec<(u64, &SealedSummary)> = Vec::new();
        for (&id, summary) in &self.sealed {
            for &(series, first, last) in &summary.series {
                if !overlaps(first, last - first, from_ns, to_ns) {
                    continue;
                }
                if starts_in(first, from_ns, to_ns) || starts_in(last, from_ns, to_ns) {
                    live.insert(series);
                } else if unsure.last().is_none_or(|(u, _)| *u != id) {
                    unsure.push((id, summary));
                }
            }
        }
        for (id, summary) in unsure {
            match self.cache.get(&self.index_dir, id) {
                Ok(index) => live.extend(
                    index
                        .blocks
                        .iter()
                        .filter(|m| starts_in(m.time_ns, from_ns, to_ns))
                        .map(|m| m.series),
                ),
                // An index that cannot be read: its summary's answer, wider than exact.
                Err(e) => {
                    tracing::warn!(segment = id, "listing from the segment's summary: {e}");
                    live.extend(summary.series.iter().filter_map(|&(series, first, last)| {
                        overlaps(first, last - first, from_ns, to_ns).then_some(series)
                    }));
                }
            }
        }
        live.extend(
            std::iter::once(&self.active)
                .chain(self.sealing.values())
                .flat_map(|a| a.blocks.iter())
                .filter(|m| starts_in(m.time_ns, from_ns, to_ns))
                .map(|m| m.series),
        );
        live
    }
}

/// Reports a record a query had to skip (once per record and process is plenty).
fn tracing_skip(path: &std::path::Path, offset: u64, reason: &str) {
    static SEEN: std::sync::Mutex<Vec<(std::path::PathBuf, u64)>> =
        std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !seen.iter().any(|(p, o)| p == path && *o == offset) {
        seen.push((path.to_owned(), offset));
        tracing::warn!(file = %path.display(), offset, reason, "skipping a damaged record; answering from the rest");
    }
}

/// Values summed per (service, stack node), and what was read.
pub(crate) struct Aggregate {
    pub by_node: HashMap<(u32, u32), i64>,
    pub samples: u64,
    pub period: Option<i64>,
    pub window: Option<(i64, i64)>,
}

impl Store {
    /// Reads the blocks of a resolved selection and calls `f(block, sample index)` for every
    /// selected sample. Needs no lock on the store's state: callers read with it unlocked
    /// (held, a flame graph or pprof of a large selection stalled every ingest for as long as
    /// it read, 18 s for a pprof of 20 million samples). The blocks of a segment deleted
    /// meanwhile (retention, compaction) are skipped.
    pub(crate) fn for_each_sample(
        &self,
        r: &Resolved,
        mut f: impl FnMut(&Block, usize),
    ) -> Result<(), StoreError> {
        // The record last read, and its link table (decoded once for all its blocks).
        let mut record: Option<(crate::log::RecordPos, Vec<u8>, Vec<LinkIds>)> = None;
        for (index, b) in &r.blocks {
            crate::query_limit::check()?;
            let meta = &index.blocks[*b as usize];
            if record.as_ref().is_none_or(|(p, _, _)| *p != meta.pos) {
                match self.log.read(meta.pos) {
                    Ok(bytes) => {
                        let links = super::record_links(&bytes)?;
                        record = Some((meta.pos, bytes, links));
                    }
                    // Damage found after the index was written: answer from the rest.
                    Err(crate::log::LogError::Corrupt {
                        path,
                        offset,
                        reason,
                    }) => {
                        tracing_skip(&path, offset, &reason);
                        record = None;
                        continue;
                    }
                    Err(crate::log::LogError::UnknownSegment { .. }) => {
                        record = None;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let (_, bytes, links) = record.as_ref().expect("just read");
            let slice = bytes
                .get(meta.start as usize..(meta.start + meta.len) as usize)
                .ok_or_else(|| StoreError::Invalid(format!("block {b} lies outside its record")))?;
            let block = Block::decode(&mut Get::new(slice), links)?;
            // Which of the block's links are selected.
            let filtering = r.spans.is_some() || r.trace.is_some();
            let wanted: Option<Vec<bool>> = filtering.then(|| {
                std::iter::once(false)
                    .chain(block.link_table.iter().map(|(trace, span)| {
                        r.spans.as_ref().is_none_or(|set| set.contains(span))
                            && r.trace
                                .as_ref()
                                .is_none_or(|(t, of_trace)| t == trace || of_trace.contains(span))
                    }))
                    .collect()
            });
            for i in 0..block.nodes.len() {
                if wanted.as_ref().is_none_or(|w| w[block.links[i] as usize]) {
                    f(&block, i);
                }
            }
        }
        Ok(())
    }

    /// The selection's samples summed per (service, stack node), read unlocked; `services`
    /// is the service of each series ([`series_services`]).
    pub(crate) fn aggregate(
        &self,
        r: &Resolved,
        services: &HashMap<u32, u32>,
    ) -> Result<Aggregate, StoreError> {
        let mut agg = Aggregate {
            by_node: HashMap::new(),
            samples: 0,
            period: None,
            window: None,
        };
        self.for_each_sample(r, |block, i| {
            let service = services[&block.series];
            let v = agg.by_node.entry((service, block.nodes[i])).or_default();
            *v = v.saturating_add(block.values[i]);
            agg.samples += 1;
            agg.period.get_or_insert(block.period);
            let (s, e) = (
                block.time_ns,
                block.time_ns.saturating_add(block.duration_ns),
            );
            agg.window = Some(agg.window.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        })?;
        Ok(agg)
    }

    /// The merged flame graph of the selection, and what it was built from.
    pub fn flame_graph(
        &self,
        sel: &Selection,
    ) -> Result<(FlameTree, SelectionSummary), StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        let services = series_services(&st, &r);
        let (profile_type_id, type_ids) = type_ids(&st, sel, &r);
        drop(st);
        let agg = self.aggregate(&r, &services)?;
        // The stacks' frames, with the state locked again: symbol tables only grow while a
        // service has data (one emptied meanwhile, its data deleted, leaves cut stacks).
        let st = self.state.read().expect("store state lock poisoned");
        let mut tree = FlameTree::new();
        let mut frames = Vec::new();
        let mut locations = Vec::new();
        let mut summary = SelectionSummary {
            available_types: r.available.iter().map(ProfileType::from).collect(),
            used_types: vec![ProfileType::from(&r.profile_type)],
            samples_selected: agg.samples,
            profile_times: profile_times(&r),
            profile_type_id,
            type_ids,
            ..Default::default()
        };
        for (&(service, node), &value) in &agg.by_node {
            let Ok(v) = u64::try_from(value) else {
                summary.samples_non_positive += 1;
                continue;
            };
            if v == 0 {
                continue;
            }
            let Some(symbols) = st.services.get(service as usize).map(|s| &s.symbols) else {
                continue;
            };
            locations.clear();
            let mut n = node;
            while n != 0 && locations.len() < MAX_STACK_DEPTH {
                let Some(x) = symbols.node(n) else { break };
                locations.push(x.location);
                n = x.parent;
            }
            frames.clear();
            if n != 0 {
                frames.push(CUT_STACK_FRAME.to_owned());
            }
            for &l in locations.iter().rev() {
                symbols.frame_names(l, &mut frames);
            }
            tree.add(&frames, v);
            summary.value_selected = summary.value_selected.saturating_add(v);
        }
        Ok((tree, summary))
    }

    /// How many profiles (distinct profile times) the selection reads: what a snapshot
    /// type's sums are averaged over.
    pub fn profile_times(&self, sel: &Selection) -> Result<u64, StoreError> {
        let r = self.resolved(sel)?;
        Ok(profile_times(&r))
    }

    /// The selection as one pprof profile (for `go tool pprof`): one sample per stack and
    /// span, with `span_id` / `trace_id` labels (trace ids bound from stored spans).
    pub fn pprof(&self, sel: &Selection) -> Result<pprof::Profile, StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        let mut b = PprofWriter::default();
        let t = &r.profile_type;
        let (ty, unit, pty, punit) = (
            b.s(&t.sample_type),
            b.s(&t.sample_unit),
            b.s(&t.period_type),
            b.s(&t.period_unit),
        );
        b.p.sample_type = vec![pprof::ValueType { r#type: ty, unit }];
        b.p.period_type = Some(pprof::ValueType {
            r#type: pty,
            unit: punit,
        });
        // Per series (whose labels the samples carry), stack and link.
        let mut samples: HashMap<(u32, u32, [u8; 16], [u8; 8]), i64> = HashMap::new();
        let mut window: Option<(i64, i64)> = None;
        drop(st);
        self.for_each_sample(&r, |block, i| {
            let link = match block.links[i] {
                0 => ([0; 16], [0; 8]),
                l => block.link_table[l as usize - 1],
            };
            let v = samples
                .entry((block.series, block.nodes[i], link.0, link.1))
                .or_default();
            *v = v.saturating_add(block.values[i]);
            b.p.period = block.period;
            let (s, e) = (
                block.time_ns,
                block.time_ns.saturating_add(block.duration_ns),
            );
            window = Some(window.map_or((s, e), |(a, z)| (a.min(s), z.max(e))));
        })?;
        let mut keys: Vec<_> = samples.keys().copied().collect();
        keys.sort_unstable();
        let elided = keys
            .iter()
            .filter(|(_, _, trace, span)| *trace == [0; 16] && *span != [0; 8])
            .map(|k| k.3)
            .collect();
        let traces = self.traces_of(elided)?;
        // The spans' own times, when there are few (see below).
        let mut of_spans: Option<(i64, i64)> = None;
        if let Some(spans) = r.spans.as_ref().filter(|s| s.len() <= SPAN_TIME_LOOKUPS) {
            for id in spans {
                if let Some(span) = self.span(id)? {
                    let (s, e) = (span.start_ns as i64, span.end_ns as i64);
                    of_spans = Some(of_spans.map_or((s, e), |(a, z)| (a.min(s), z.max(e))));
                }
            }
        }
        // Each series' service and labels and each stack's locations with the state locked
        // again (see `flame_graph`): there are far fewer of them than samples, which are made
        // unlocked (all of them, locked, stalled ingest for seconds).
        let mut of_series: HashMap<u32, Option<(u32, Vec<pprof::Label>)>> = HashMap::new();
        let mut stacks: HashMap<(u32, u32), Option<Vec<u64>>> = HashMap::new();
        {
            let st = self.state.read().expect("store state lock poisoned");
            for &(series, node, _, _) in &keys {
                let known = of_series.entry(series).or_insert_with(|| {
                    let sk = st.series.get(series as usize)?;
                    // The series' labels (span_name, the SDK's tags, service_name) but the
                    // internal ones (`__name__`, …), for go tool pprof's -tags and -tagfocus.
                    let labels = sk.labels.iter().filter(|(k, _)| !k.starts_with("__"));
                    let labels = labels.map(|(k, v)| pprof::Label {
                        key: b.s(k),
                        str: b.s(v),
                        ..Default::default()
                    });
                    Some((sk.service, labels.collect()))
                });
                let Some((service, _)) = *known else {
                    continue;
                };
                if stacks.contains_key(&(service, node)) {
                    continue;
                }
                let stack = st.services.get(service as usize).map(|s| {
                    let symbols = &s.symbols;
                    let mut location_id = Vec::new();
                    let mut n = node;
                    while n != 0 && location_id.len() < MAX_STACK_DEPTH {
                        let Some(x) = symbols.node(n) else { break };
                        location_id.push(b.location(service, symbols, x.location));
                        n = x.parent;
                    }
                    if n != 0 {
                        location_id.push(b.cut_location());
                    }
                    location_id
                });
                stacks.insert((service, node), stack);
            }
        }
        let (mut span_key, mut trace_key) = (None, None);
        for key @ (series, node, trace, span) in keys {
            let Some(Some((service, labels))) = of_series.get(&series) else {
                continue;
            };
            let Some(Some(location_id)) = stacks.get(&(*service, node)) else {
                continue;
            };
            let mut label = labels.clone();
            if span != [0; 8] {
                let trace = if trace == [0; 16] {
                    traces.get(&span).copied().unwrap_or(trace)
                } else {
                    trace
                };
                label.push(pprof::Label {
                    key: *span_key.get_or_insert_with(|| b.s("span_id")),
                    str: b.s(&spanprof_format::link::to_hex(&span)),
                    ..Default::default()
                });
                if trace != [0; 16] {
                    label.push(pprof::Label {
                        key: *trace_key.get_or_insert_with(|| b.s("trace_id")),
                        str: b.s(&spanprof_format::link::to_hex(&trace)),
                        ..Default::default()
                    });
                }
            }
            b.p.sample.push(pprof::Sample {
                location_id: location_id.clone(),
                value: vec![samples[&key]],
                label,
            });
        }
        // The profile's time: the selected spans' own (go tool pprof then says what share of
        // a span's duration was on CPU, not of the scrape window's), else the windows of the
        // profiles read.
        if let Some((s, e)) = of_spans.or(window) {
            b.p.time_nanos = s;
            b.p.duration_nanos = e - s;
        }
        Ok(b.p)
    }

    /// Sampling coverage of one span (see [`Store::span_coverages`]); of a span not stored,
    /// only its samples.
    pub fn span_coverage(
        &self,
        span_id: [u8; 8],
        profile_type: Option<&str>,
    ) -> Result<Coverage, StoreError> {
        let span = {
            let st = self.state.read().expect("store state lock poisoned");
            st.span_record(&span_id)?
        };
        match span {
            Some(span) => Ok(self
                .span_coverages(std::slice::from_ref(&span), profile_type)?
                .remove(0)),
            None => {
                let st = self.state.read().expect("store state lock poisoned");
                let own = self.own_samples(&st, span_id, profile_type)?;
                Ok(Coverage {
                    samples: own.ticks(),
                    value: own.value,
                    duration_ns: None,
                    self_ns: None,
                    period: own.period,
                    possible_samples: None,
                    covered_ns: None,
                    between_windows: false,
                    after_last_window: false,
                    profile_type: own.known_type(),
                })
            }
        }
    }

    /// Per-span sampling coverage of `spans`: their own samples (their child spans' not
    /// counted) of `profile_type` (default: the CPU type of each span's samples), against
    /// their own time ([`Coverage::self_ns`]: a parent waiting for its children is not
    /// sampled meanwhile, and counting that time made a parent whose own 8 ms went
    /// unsampled read "no CPU used" against 3.2 possible samples). Each trace's spans are
    /// read once for all the spans of it. The store is read-locked span by span, not for
    /// the whole answer: writers wait for one span's lookups at most.
    ///
    /// A span without samples is measured against the windows of its service's profiles.
    /// When its service has no profile of the type under its name (a scrape target named
    /// otherwise than the tracer names it), the services that hold the samples of the spans
    /// of its service in its trace stand for it (the same whatever else is asked about with
    /// it).
    pub fn span_coverages(
        &self,
        spans: &[SpanRecord],
        profile_type: Option<&str>,
    ) -> Result<Vec<Coverage>, StoreError> {
        let read = || self.state.read().expect("store state lock poisoned");
        let mut own = Vec::with_capacity(spans.len());
        for s in spans {
            own.push(self.own_samples(&read(), s.span_id, profile_type)?);
        }
        // Each span's children that have samples of their own: the labelled ones, whose
        // samples are theirs. A child without any (an auto-instrumented client span, which
        // sets no labels) ran on its parent's labels, or waited: its time stays the parent's.
        let mut children: HashMap<[u8; 8], Vec<(u64, u64)>> = HashMap::new();
        // (trace, tracer service) → the services whose profiles hold the samples of that
        // service's spans in that trace.
        let mut profiled_as: HashMap<([u8; 16], String), BTreeSet<u32>> = HashMap::new();
        let mut traces_read = HashSet::new();
        for s in spans {
            if traces_read.insert(s.trace_id) {
                // The segments of the trace, read and their spans decoded unlocked first: a
                // sealed segment's spans take long to decode, and writers would wait.
                self.warm_spans(|summary| summary.trace_bloom.may_contain(&s.trace_id))?;
                let records = read().trace_records(&s.trace_id)?;
                // Locked span by span: a trace of hundreds of spans, each looked up in the
                // segments its Bloom filters may hold, is long, and writers wait meanwhile.
                for c in records {
                    let services = span_sample_services(&read(), &c.span_id)?;
                    if services.is_empty() {
                        continue;
                    }
                    if let Some(parent) = c.parent_span_id {
                        children
                            .entry(parent)
                            .or_default()
                            .push((c.start_ns, c.end_ns));
                    }
                    profiled_as
                        .entry((c.trace_id, c.service))
                        .or_default()
                        .extend(services);
                }
            }
        }
        // (service name, type) of every series, when a span without samples needs to know
        // whether its service is profiled under its name.
        let mut named: Option<HashSet<(String, ProfileTypeId)>> = None;
        spans
            .iter()
            .zip(own)
            .map(|(span, own)| {
                let parts = outside(
                    span.start_ns,
                    span.end_ns,
                    children.get(&span.span_id).into_iter().flatten().copied(),
                );
                let st = read();
                let mut services: Vec<String> = vec![span.service.clone()];
                // When none stands for it: the services with profiles of its type.
                let mut profiled = Vec::new();
                if own.period.is_none() {
                    let named = named.get_or_insert_with(|| {
                        st.series
                            .iter()
                            .map(|k| {
                                (
                                    st.services[k.service as usize].name.clone(),
                                    k.profile_type.clone(),
                                )
                            })
                            .collect()
                    });
                    if !named.contains(&(span.service.clone(), own.profile_type.clone())) {
                        services = profiled_as
                            .get(&(span.trace_id, span.service.clone()))
                            .into_iter()
                            .flatten()
                            .map(|&i| st.services[i as usize].name.clone())
                            .collect();
                    }
                    if services.is_empty() {
                        profiled = named
                            .iter()
                            .filter(|(_, t)| *t == own.profile_type)
                            .map(|(name, _)| name.clone())
                            .collect();
                    }
                }
                self.coverage_of(&st, span, &parts, own, &services, &profiled)
            })
            .collect()
    }

    /// The samples of span `span_id` itself, of `profile_type` (default: the CPU type of
    /// its samples).
    fn own_samples(
        &self,
        st: &State,
        span_id: [u8; 8],
        profile_type: Option<&str>,
    ) -> Result<OwnSamples, StoreError> {
        let sel = Selection {
            span_ids: vec![span_id],
            profile_type: profile_type.map(str::to_owned),
            ..Default::default()
        };
        let r = st.resolve(&sel)?;
        let (mut value, mut period) = (0i64, None);
        self.for_each_sample(&r, |block, i| {
            value = value.saturating_add(block.values[i]);
            period.get_or_insert(block.period);
        })?;
        Ok(OwnSamples {
            value,
            period,
            profile_type: r.profile_type,
        })
    }

    /// `span`'s coverage from its own samples, its own time (`parts`) and the windows of
    /// the profiles of `services` around it; `profiled`, when `services` is empty: the
    /// services with profiles of its type, one of which may yet send its samples.
    fn coverage_of(
        &self,
        st: &State,
        span: &SpanRecord,
        parts: &[(u64, u64)],
        mut own: OwnSamples,
        services: &[String],
        profiled: &[String],
    ) -> Result<Coverage, StoreError> {
        let self_ns: u64 = parts.iter().map(|(a, b)| b - a).sum();
        let (mut covered_ns, mut between_windows) = (None, false);
        let mut after_last_window = false;
        if own.period.is_none() {
            // No samples: the period of the service's profiles that cover the span, and how
            // much of its own time they cover, tell "no CPU used" from "too short to be
            // sampled".
            let mut windows = Vec::new();
            for service in services {
                let around = Selection {
                    service: Some(service.clone()),
                    profile_type: Some(own.profile_type.to_string()),
                    from_ns: span.start_ns as i64,
                    to_ns: span.end_ns.max(span.start_ns + 1) as i64,
                    overlapping: true,
                    ..Default::default()
                };
                let covering = st.resolve(&around)?;
                if let Some((index, b)) = covering.blocks.first().filter(|_| own.period.is_none()) {
                    own.period = self.block_period(index, *b)?;
                }
                windows.extend(covering.blocks.iter().map(|(index, b)| {
                    let m = &index.blocks[*b as usize];
                    (m.time_ns, m.duration_ns)
                }));
                if windows.is_empty() && self_ns > 0 {
                    // The period of the windows around it, if it fell between two.
                    if let Some((index, b)) = self.window_before(st, &around, span)? {
                        between_windows = true;
                        if own.period.is_none() {
                            own.period = self.block_period(&index, b)?;
                        }
                    }
                }
            }
            // Windows that overlap only its children's time watched the process too.
            between_windows |= !windows.is_empty();
            covered_ns = Some(covered(parts, windows.into_iter()));
            between_windows &= covered_ns == Some(0);
            if covered_ns == Some(0) && !between_windows {
                // Whether `service` has no window of the type from the span's start on.
                let behind = |service: &String| -> Result<bool, StoreError> {
                    let since = Selection {
                        service: Some(service.clone()),
                        profile_type: Some(own.profile_type.to_string()),
                        from_ns: span.start_ns as i64,
                        overlapping: true,
                        ..Default::default()
                    };
                    Ok(st.resolve(&since)?.blocks.is_empty())
                };
                // With a service that stands for it: none has a window from its start on.
                // Without (one profiled under another name whose samples of the trace are
                // still to come): a service with profiles of the type has a window to come.
                after_last_window = match services.is_empty() {
                    true => profiled
                        .iter()
                        .try_fold(false, |any, s| Ok::<_, StoreError>(any || behind(s)?))?,
                    false => services
                        .iter()
                        .try_fold(true, |all, s| Ok::<_, StoreError>(all && behind(s)?))?,
                };
            }
        }
        let t = &own.profile_type;
        // Only time periods turn a duration into a number of possible samples.
        let time_period = own
            .period
            .filter(|&p| p > 0 && t.period_unit == "nanoseconds");
        let possible_samples = covered_ns
            .or(Some(self_ns))
            .zip(time_period)
            .map(|(d, p)| d as f64 / p as f64);
        Ok(Coverage {
            samples: own.ticks(),
            value: own.value,
            duration_ns: Some(span.duration_ns()),
            self_ns: Some(self_ns),
            period: own.period,
            possible_samples,
            covered_ns,
            between_windows,
            after_last_window,
            profile_type: own.known_type(),
        })
    }

    /// A window of `around`'s service and type that ends just before `span`, when another
    /// begins just after it ([`Coverage::between_windows`]).
    fn window_before(
        &self,
        st: &State,
        around: &Selection,
        span: &SpanRecord,
    ) -> Result<Option<(Arc<SegmentIndex>, u32)>, StoreError> {
        let margin = BETWEEN_WINDOWS_NS as i64;
        let (start, end) = (span.start_ns as i64, span.end_ns as i64);
        let near = Selection {
            from_ns: start.saturating_sub(margin),
            to_ns: end.saturating_add(margin),
            ..around.clone()
        };
        let (mut before, mut after) = (None, false);
        for (index, b) in st.resolve(&near)?.blocks {
            let (time, duration) = {
                let m = &index.blocks[b as usize];
                (m.time_ns, m.duration_ns)
            };
            after |= time >= end;
            if time.saturating_add(duration) <= start {
                before = Some((index, b));
            }
        }
        Ok(before.filter(|_| after))
    }

    fn block_period(&self, index: &SegmentIndex, b: u32) -> Result<Option<i64>, StoreError> {
        let meta = &index.blocks[b as usize];
        let bytes = self.log.read(meta.pos)?;
        let slice = bytes
            .get(meta.start as usize..(meta.start + meta.len) as usize)
            .ok_or_else(|| StoreError::Invalid("block lies outside its record".into()))?;
        Ok(Some(
            Block::decode(&mut Get::new(slice), &super::record_links(&bytes)?)?.period,
        ))
    }

    /// Profile types present (for one service, when given).
    pub fn profile_types(&self, service: Option<&str>) -> Vec<ProfileTypeId> {
        types_of_service(
            &self.state.read().expect("store state lock poisoned"),
            service,
        )
    }

    /// When the first and the last profile the store holds were taken (ns since the epoch),
    /// of `service` only when given; `None` when it holds none. For messages that say why a
    /// time range matched nothing.
    pub fn profiles_taken_between(&self, service: Option<&str>) -> Option<(i64, i64)> {
        let st = self.state.read().expect("store state lock poisoned");
        let wanted = |series: u32| {
            service.is_none_or(|name| {
                st.services[st.series[series as usize].service as usize].name == name
            })
        };
        let sealed = st.sealed.values().flat_map(|s| &s.series).copied();
        let live = std::iter::once(&st.active)
            .chain(st.sealing.values())
            .flat_map(|a| a.blocks.iter())
            .map(|m| (m.series, m.time_ns, m.time_ns));
        sealed
            .chain(live)
            .filter(|&(series, _, _)| wanted(series))
            .fold(None, |r, (_, first, last)| {
                Some(r.map_or((first, last), |(a, b): (i64, i64)| {
                    (a.min(first), b.max(last))
                }))
            })
    }

    /// Services with profiles taken in the time range (0 = open end), as the profile queries
    /// count them: a window that began before the range is not in it.
    pub fn services(&self, from_ns: i64, to_ns: i64) -> Vec<String> {
        let st = self.state.read().expect("store state lock poisoned");
        let set: BTreeSet<&str> = st
            .series_taken_in(from_ns, to_ns)
            .into_iter()
            .map(|series| {
                st.services[st.series[series as usize].service as usize]
                    .name
                    .as_str()
            })
            .collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// Series with profiles taken in the selection's time range, as their labels (with `__profile_type__`
    /// and `__name__`). Span filters are ignored; the selection's profile type is optional
    /// here (`None` = every type).
    pub fn series(&self, sel: &Selection) -> Result<Vec<SeriesLabels>, StoreError> {
        Ok(self.series_limited(sel, usize::MAX)?.0)
    }

    /// [`Store::series`] holding at most about `max_bytes` of label text, and whether series
    /// were left out for it (then which ones is arbitrary): an answer over every series of a
    /// store with long label values took gigabytes to build.
    pub fn series_limited(
        &self,
        sel: &Selection,
        max_bytes: usize,
    ) -> Result<(Vec<SeriesLabels>, bool), StoreError> {
        let mut out: Vec<SeriesLabels> = Vec::new();
        let mut bytes = 0usize;
        let truncated = self.each_selected_series(sel, |k| {
            let size = label_bytes(&k.labels) + k.profile_type.to_string().len();
            if bytes.saturating_add(size) > max_bytes {
                return ControlFlow::Break(());
            }
            bytes += size;
            let mut labels = k.labels.clone();
            labels.push(("__profile_type__".into(), k.profile_type.to_string()));
            labels.push(("__name__".into(), k.profile_type.name.clone()));
            labels.sort();
            out.push(labels);
            ControlFlow::Continue(())
        })?;
        out.sort();
        out.dedup();
        Ok((out, truncated))
    }

    /// Calls `each` with every series the selection takes (its service, type, time and label
    /// matchers) until it breaks; returns whether it broke.
    fn each_selected_series(
        &self,
        sel: &Selection,
        mut each: impl FnMut(&SeriesKey) -> ControlFlow<()>,
    ) -> Result<bool, StoreError> {
        let matchers: Vec<LabelMatcher> = match &sel.label_selector {
            Some(s) if !s.trim().is_empty() => parse_selector(s)?.matchers,
            _ => Vec::new(),
        };
        let live = self
            .state
            .read()
            .expect("store state lock poisoned")
            .series_taken_in(sel.from_ns, sel.to_ns);
        // Read-locked chunk by chunk, as in `series_in_chunks`.
        let mut from = 0;
        loop {
            {
                let st = self.state.read().expect("store state lock poisoned");
                let end = (from + SERIES_CHUNK).min(st.series.len());
                if from >= end {
                    return Ok(false);
                }
                crate::query_limit::check()?;
                for i in from..end {
                    let k = &st.series[i];
                    let taken = live.contains(&(i as u32))
                        && sel
                            .service
                            .as_deref()
                            .is_none_or(|s| st.services[k.service as usize].name == s)
                        && sel
                            .profile_type
                            .as_deref()
                            .is_none_or(|t| k.profile_type.matches(t))
                        && series_matches(&matchers, k);
                    if taken && each(k).is_break() {
                        return Ok(true);
                    }
                }
                from = end;
            }
            #[cfg(test)]
            between_series_chunks();
        }
    }

    /// Label names of the selected series, sorted.
    pub fn label_names(&self, sel: &Selection) -> Result<Vec<String>, StoreError> {
        let mut set: BTreeSet<String> = BTreeSet::new();
        let mut any = false;
        self.each_selected_series(sel, |k| {
            any = true;
            for (name, _) in &k.labels {
                if !set.contains(name) {
                    set.insert(name.clone());
                }
            }
            ControlFlow::Continue(())
        })?;
        if any {
            set.extend(["__name__".to_owned(), "__profile_type__".to_owned()]);
        }
        Ok(set.into_iter().collect())
    }

    /// Values of label `name` over the selected series, sorted.
    pub fn label_values(&self, sel: &Selection, name: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.label_values_limited(sel, name, usize::MAX)?.0)
    }

    /// [`Store::label_values`] holding at most about `max_bytes` of values, and whether values
    /// were left out for it. Only the values are copied, not the series' other labels.
    pub fn label_values_limited(
        &self,
        sel: &Selection,
        name: &str,
        max_bytes: usize,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let mut set: BTreeSet<String> = BTreeSet::new();
        let mut bytes = 0usize;
        let truncated = self.each_selected_series(sel, |k| {
            let value = match name {
                "__profile_type__" => std::borrow::Cow::Owned(k.profile_type.to_string()),
                "__name__" => std::borrow::Cow::Borrowed(k.profile_type.name.as_str()),
                _ => match k.labels.iter().find(|(n, _)| n == name) {
                    Some((_, v)) => std::borrow::Cow::Borrowed(v.as_str()),
                    None => return ControlFlow::Continue(()),
                },
            };
            if set.contains(value.as_ref()) {
                return ControlFlow::Continue(());
            }
            if bytes.saturating_add(value.len()) > max_bytes {
                return ControlFlow::Break(());
            }
            bytes += value.len();
            set.insert(value.into_owned());
            ControlFlow::Continue(())
        })?;
        Ok((set.into_iter().collect(), truncated))
    }

    /// Totals of the selection over time: (block start ns, value, top span of the block) for
    /// every block, with the series' value of label `group_by` when given.
    pub fn points(
        &self,
        sel: &Selection,
        group_by: Option<&str>,
    ) -> Result<Vec<(Option<String>, crate::series::Point)>, StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        drop(st);
        // Per block: the value of each span, and of samples without one. One point each, so
        // bucket totals are exact and exemplars carry their own span's value.
        let mut per_block: HashMap<(i64, u32), BlockTotals> = HashMap::new();
        self.for_each_sample(&r, |block, i| {
            let e = per_block.entry((block.time_ns, block.series)).or_default();
            let v = match block.links[i] {
                0 => &mut e.0,
                l => e.1.entry(block.link_table[l as usize - 1]).or_default(),
            };
            *v = v.saturating_add(block.values[i]);
        })?;
        let elided = per_block
            .values()
            .flat_map(|(_, spans)| spans.keys())
            .filter(|(trace, _)| *trace == [0; 16])
            .map(|&(_, span)| span)
            .collect();
        // Exemplars without their trace when it cannot be read.
        let traces = self.traces_of(elided).unwrap_or_default();
        // Each series' value of `group_by`, with the state locked again; the points (one per
        // block and span: millions for a large selection) are made unlocked.
        let mut groups: HashMap<u32, String> = HashMap::new();
        if let Some(g) = group_by {
            let st = self.state.read().expect("store state lock poisoned");
            for &(_, series) in per_block.keys() {
                groups.entry(series).or_insert_with(|| {
                    let label = st.series.get(series as usize).and_then(|s| s.label(g));
                    label.unwrap_or("").to_owned()
                });
            }
        }
        let mut out = Vec::new();
        for ((time_ns, series), (unlinked, spans)) in per_block {
            let group = group_by.map(|_| groups[&series].clone());
            if unlinked != 0 {
                out.push((
                    group.clone(),
                    crate::series::Point {
                        time_ns,
                        value: unlinked,
                        span: None,
                    },
                ));
            }
            for ((t, s), value) in spans {
                let t = if t == [0; 16] {
                    traces.get(&s).copied().unwrap_or(t)
                } else {
                    t
                };
                out.push((
                    group.clone(),
                    crate::series::Point {
                        time_ns,
                        value,
                        span: Some((t, s)),
                    },
                ));
            }
        }
        out.sort_by_key(|(g, p)| (g.clone(), p.time_ns, p.span));
        Ok(out)
    }

    /// The type the selection resolves to (`None` when it resolves to none), and the types
    /// it has: its service's, or with spans or a trace selected those of their samples (none
    /// for spans without samples). Full ids, names included (`mutex:…` and `block:…` have
    /// the same sample types).
    pub fn selection_types(
        &self,
        sel: &Selection,
    ) -> Result<(Option<ProfileTypeId>, Vec<ProfileTypeId>), StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        Ok(type_ids(&st, sel, &r))
    }

    /// What a time series of the selection needs before it is read, from one resolve: the
    /// type it resolves to (`type`, else the CPU type of what it selects, else as
    /// [`ProfileTypeId::preferred`] picks; `None` when it selects no type), and the longest
    /// window one of its profiles covers, in ns (0 without any), what one point stands for
    /// (a step shorter than it shows each window's total in one step and none after).
    pub fn type_and_longest_window(
        &self,
        sel: &Selection,
    ) -> Result<(Option<ProfileTypeId>, i64), StoreError> {
        let r = self.resolved(sel)?;
        let longest = r
            .blocks
            .iter()
            .map(|(index, b)| index.blocks[*b as usize].duration_ns)
            .max()
            .unwrap_or(0)
            .max(0);
        Ok((resolved_type(&r.profile_type), longest))
    }

    /// A stored span; as for [`Store::trace`], its segments are read unlocked first.
    pub fn span(&self, span_id: &[u8; 8]) -> Result<Option<SpanRecord>, StoreError> {
        self.warm_spans(|summary| summary.span_bloom.may_contain(span_id))?;
        self.state
            .read()
            .expect("store state lock poisoned")
            .span_record(span_id)
    }

    /// The trace of each of `spans` that is stored, for links stored without their trace
    /// (bound to the span's record). A few are looked up one by one; more in one pass over
    /// the segments' spans, unlocked (one by one, each a lock and often an index file read
    /// with it held).
    fn traces_of(&self, spans: HashSet<[u8; 8]>) -> Result<HashMap<[u8; 8], [u8; 16]>, StoreError> {
        let mut out = HashMap::new();
        if spans.len() <= SPAN_TIME_LOOKUPS {
            for id in &spans {
                if let Some(s) = self.span(id)? {
                    out.insert(*id, s.trace_id);
                }
            }
            return Ok(out);
        }
        self.for_each_segment_span(&SpanQuery::default(), |s| {
            if spans.contains(&s.span_id) {
                out.insert(s.span_id, s.trace_id);
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// The spans of a trace, in start order. The segments that may hold it are read, and
    /// their spans decoded, before the store is locked (`Store::warm_spans`).
    pub fn trace(&self, trace_id: &[u8; 16]) -> Result<Vec<SpanRecord>, StoreError> {
        self.warm_spans(|summary| summary.trace_bloom.may_contain(trace_id))?;
        self.state
            .read()
            .expect("store state lock poisoned")
            .trace_records(trace_id)
    }

    /// Spans matching `q` over the segments that overlap its time range, longest first.
    /// Segments are searched one at a time, with the store unlocked, their spans read in
    /// place ([`Store::for_each_segment_span`]): only the `q.limit` longest so far are
    /// copied out.
    pub fn search_spans(&self, q: &SpanQuery) -> Result<Vec<SpanRecord>, StoreError> {
        // The same span in two segments (sent twice) is one span: `Longest` keeps it once.
        let mut longest = Longest::new(q.limit);
        self.for_each_segment_span(q, |span| {
            if q.matches_view(span) {
                longest.offer(span);
            }
            ControlFlow::Continue(())
        })?;
        Ok(longest.into_sorted())
    }

    /// `sel` resolved, and the store's state read-locked for the caller to read what it
    /// resolved to. A span filter's spans are found first, with the store unlocked: it reads
    /// every segment's spans (seconds on a large store, every ingest waiting, when locked).
    fn read_resolved(
        &self,
        sel: &Selection,
    ) -> Result<(std::sync::RwLockReadGuard<'_, State>, Resolved), StoreError> {
        let filtered = match &sel.span_filter {
            Some(f) => self.filtered_spans(sel, f)?,
            None => Vec::new(),
        };
        let series = self.series_in_chunks(|st, ids| st.series_of(sel, ids))?;
        let st = self.state.read().expect("store state lock poisoned");
        let r = st.resolve_with(sel, filtered, series)?;
        Ok((st, r))
    }

    /// What `part` finds in every chunk of [`SERIES_CHUNK`] series, the store read-locked
    /// chunk by chunk: a label regex over 10,000 series of 2,000-byte values took 40 s, and
    /// with the lock held for the whole scan every ingest waited as long. Series ids are
    /// never reused, so a chunk read after an ingest still names the series it did; series
    /// added meanwhile may be in the answer or not, as if they came just before or after it.
    fn series_in_chunks(
        &self,
        mut part: impl FnMut(&State, std::ops::Range<usize>) -> Result<HashSet<u32>, StoreError>,
    ) -> Result<HashSet<u32>, StoreError> {
        let mut all = HashSet::new();
        let mut from = 0;
        loop {
            {
                let st = self.state.read().expect("store state lock poisoned");
                let end = (from + SERIES_CHUNK).min(st.series.len());
                if from >= end {
                    return Ok(all);
                }
                all.extend(part(&st, from..end)?);
                from = end;
            }
            #[cfg(test)]
            between_series_chunks();
        }
    }

    /// `sel` resolved ([`Store::read_resolved`]), for a caller that needs no more of the
    /// store's state.
    fn resolved(&self, sel: &Selection) -> Result<Resolved, StoreError> {
        Ok(self.read_resolved(sel)?.1)
    }

    /// The spans `f` (of `sel`) picks: by name, service and duration, durations also as
    /// percentiles of all the spans of the name (of every time), in `sel`'s time range.
    fn filtered_spans(&self, sel: &Selection, f: &SpanFilter) -> Result<Vec<[u8; 8]>, StoreError> {
        let every_time = SpanQuery::default();
        let mut min = f.min_duration_ns;
        let mut max = f.max_duration_ns;
        if let Some(name) = &f.name {
            if f.above_percentile.is_some() || f.below_percentile.is_some() {
                let mut durations = Vec::new();
                self.for_each_segment_span(&every_time, |s| {
                    if s.name == name && sel.service.as_deref().is_none_or(|svc| s.service == svc) {
                        durations.push(s.duration_ns());
                    }
                    ControlFlow::Continue(())
                })?;
                if let Some(p) = f.above_percentile {
                    min = min.max(percentile(&mut durations, p));
                }
                if let Some(p) = f.below_percentile {
                    if let Some(d) = percentile(&mut durations, p) {
                        max = Some(max.map_or(d, |m| m.min(d)));
                    }
                }
            }
        }
        let q = SpanQuery {
            service: sel.service.clone(),
            name: f.name.clone(),
            min_duration_ns: min,
            max_duration_ns: max,
            from_ns: sel.from_ns.max(0) as u64,
            to_ns: if sel.to_ns == 0 {
                u64::MAX
            } else {
                sel.to_ns as u64
            },
            limit: usize::MAX,
            ..Default::default()
        };
        let mut found = Vec::new();
        self.for_each_segment_span(&every_time, |s| {
            if q.matches_view(s) {
                found.push(s.span_id);
            }
            ControlFlow::Continue(())
        })?;
        Ok(found)
    }

    /// Reads into the index cache, with the store unlocked, the sealed indexes `keep` picks,
    /// with their spans decoded, so that a locked lookup that follows (a trace's spans) finds
    /// them there: read and decoded with the lock held, one segment's spans took about a
    /// second, and every writer waited.
    fn warm_spans(&self, keep: impl Fn(&SealedSummary) -> bool) -> Result<(), StoreError> {
        let (refs, loader) = self
            .state
            .read()
            .expect("store state lock poisoned")
            .index_refs(0, 0, keep);
        for r in refs.iter().filter(|r| matches!(r, IndexRef::Sealed(_))) {
            if let Some(index) = loader.load(r).map_err(StoreError::Invalid)? {
                index.spans();
            }
        }
        Ok(())
    }

    /// Calls `f` with the index of every segment whose time range overlaps `q`'s, one at a
    /// time, until `f` breaks. The store's state is locked only to list them: sealed indexes
    /// are read from their files (through the cache) and their spans decoded while writers
    /// go on (held locked, a span search of a large store stalled every ingest for seconds),
    /// and only the one in hand is kept beside the cache's (all of them at once took
    /// gigabytes). A segment deleted meanwhile (retention, compaction) is skipped, and so is
    /// a sealed one without spans (a store of profiles pushed without traces read each
    /// segment's index for every span search).
    fn for_each_segment(
        &self,
        q: &SpanQuery,
        mut f: impl FnMut(&SegmentIndex) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let (from, to) = span_range(q);
        let (refs, loader) = self
            .state
            .read()
            .expect("store state lock poisoned")
            .index_refs(from, to, |summary| summary.spans > 0);
        for r in &refs {
            let Some(index) = loader.load(r).map_err(StoreError::Invalid)? else {
                continue;
            };
            if f(&index).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// Calls `f` with every span of the segments whose time range overlaps `q`'s, whatever
    /// its filters (and its own times: `q.matches_view` tells), until `f` breaks; a span
    /// sent twice (into two segments) is visited twice. Every span of a trace is there unless
    /// [`Store::trace_may_be_outside`] says otherwise. Nothing is copied: each span is a view,
    /// of a sealed segment's file read in place (`SegmentIndex::visit_spans`), for answers
    /// that keep a little of each span (tag names, traces found, the longest), where
    /// collecting every matching span of a large store took gigabytes. `f` runs with the
    /// store's state unlocked, one segment at a time (`Store::for_each_segment`).
    pub fn for_each_segment_span(
        &self,
        q: &SpanQuery,
        mut f: impl FnMut(&SpanView<'_>) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        self.for_each_segment(q, |index| index.visit_spans(&mut f))
    }

    /// The services of the spans in `[from_ns, to_ns]` (ns since the epoch, inclusive), sorted:
    /// a tracer's service name, which the profiles of the same program may not share.
    pub fn span_services(&self, from_ns: u64, to_ns: u64) -> Result<Vec<String>, StoreError> {
        let q = SpanQuery {
            from_ns,
            to_ns,
            ..Default::default()
        };
        let mut services: BTreeSet<String> = BTreeSet::new();
        self.for_each_segment_span(&q, |s| {
            if q.matches_view(s) && !services.contains(s.service) {
                services.insert(s.service.to_owned());
            }
            ControlFlow::Continue(())
        })?;
        Ok(services.into_iter().collect())
    }

    /// Whether trace `trace_id` may have spans in a segment outside `q`'s time range (one
    /// that [`Store::for_each_segment_span`] does not visit): a filter of the segments'
    /// trace ids, so false means certainly not.
    pub fn trace_may_be_outside(&self, trace_id: &[u8; 16], q: &SpanQuery) -> bool {
        let st = self.state.read().expect("store state lock poisoned");
        let (from, to) = span_range(q);
        st.sealed.values().any(|summary| {
            !segment_overlaps(summary.time_range, from, to)
                && summary.trace_bloom.may_contain(trace_id)
        })
    }

    /// Whether any stored sample is linked to this span (directly).
    pub fn has_samples(&self, span_id: &[u8; 8]) -> Result<bool, StoreError> {
        let st = self.state.read().expect("store state lock poisoned");
        Ok(!span_sample_services(&st, span_id)?.is_empty())
    }
}

/// The type `r` (resolved from `sel`) is in, and the types the selection has, as
/// [`Store::selection_types`] gives them.
/// The service of each series of `r`'s blocks.
fn series_services(st: &State, r: &Resolved) -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    for (index, b) in &r.blocks {
        let series = index.blocks[*b as usize].series;
        out.entry(series)
            .or_insert_with(|| st.series[series as usize].service);
    }
    out
}

fn type_ids(
    st: &State,
    sel: &Selection,
    r: &Resolved,
) -> (Option<ProfileTypeId>, Vec<ProfileTypeId>) {
    let by_spans = r.spans.is_some() || r.trace.is_some();
    let available = match (by_spans, r.of_samples) {
        (true, true) => r.available.clone(),
        (true, false) => Vec::new(),
        (false, _) => types_of_service(st, sel.service.as_deref()),
    };
    (resolved_type(&r.profile_type), available)
}

/// A selection's resolved type, `None` when there was none to resolve (the empty default
/// [`State::resolve`] gives then).
fn resolved_type(t: &ProfileTypeId) -> Option<ProfileTypeId> {
    (*t != ProfileTypeId::default()).then(|| t.clone())
}

/// Profile types present (of one service, when given), sorted.
fn types_of_service(st: &State, service: Option<&str>) -> Vec<ProfileTypeId> {
    let set: BTreeSet<ProfileTypeId> = st
        .series
        .iter()
        .filter(|k| !super::state::is_forgotten(k))
        .filter(|k| service.is_none_or(|s| st.services[k.service as usize].name == s))
        .map(|k| k.profile_type.clone())
        .collect();
    set.into_iter().collect()
}

/// The services whose profiles hold samples linked to this span (of any type; none when it
/// has no samples), from the indexes alone.
fn span_sample_services(st: &State, span_id: &[u8; 8]) -> Result<BTreeSet<u32>, StoreError> {
    let indexes = st
        .indexes(0, 0, |summary| summary.span_bloom.may_contain(span_id))
        .map_err(StoreError::Invalid)?;
    Ok(indexes
        .iter()
        .flat_map(|i| {
            i.span_blocks(span_id)
                .map(|b| st.series[i.blocks[b as usize].series as usize].service)
        })
        .collect())
}

/// `q`'s time range as segment time ranges are compared with it: from, and
/// to (0 for no end).
fn span_range(q: &SpanQuery) -> (i64, i64) {
    let from = q.from_ns.min(i64::MAX as u64) as i64;
    let to = if q.to_ns >= i64::MAX as u64 {
        0
    } else {
        q.to_ns as i64
    };
    (from, to)
}

/// Most frames (locations) of one stack an answer shows: a deeper stack keeps its leaf-most
/// ones, below one root frame named [`CUT_STACK_FRAME`] so that the cut shows.
pub const MAX_STACK_DEPTH: usize = 4096;

/// The root frame of a stack cut at [`MAX_STACK_DEPTH`] frames.
pub const CUT_STACK_FRAME: &str = "[stack cut: deeper than 4096 frames]";

/// A block's value without a span, and its value per link (trace id, span id).
type BlockTotals = (i64, HashMap<crate::block::LinkIds, i64>);

/// Builds a pprof profile from symbol tables, one service's ids remapped at a time.
#[derive(Default)]
struct PprofWriter {
    p: pprof::Profile,
    strings: HashMap<String, i64>,
    locations: HashMap<(u32, u32), u64>,
    functions: HashMap<(u32, u32), u64>,
    mappings: HashMap<(u32, u32), u64>,
    /// The location of [`CUT_STACK_FRAME`], once made.
    cut: Option<u64>,
}

impl PprofWriter {
    /// The location standing for the frames of a stack past [`MAX_STACK_DEPTH`].
    fn cut_location(&mut self) -> u64 {
        if let Some(id) = self.cut {
            return id;
        }
        let function_id = self.p.function.len() as u64 + 1;
        let name = self.s(CUT_STACK_FRAME);
        self.p.function.push(pprof::Function {
            id: function_id,
            name,
            system_name: name,
            ..Default::default()
        });
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(pprof::Location {
            id,
            line: vec![pprof::Line {
                function_id,
                ..Default::default()
            }],
            ..Default::default()
        });
        self.cut = Some(id);
        id
    }

    fn s(&mut self, v: &str) -> i64 {
        if self.p.string_table.is_empty() {
            self.p.string_table.push(String::new());
            self.strings.insert(String::new(), 0);
        }
        if let Some(&i) = self.strings.get(v) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(v.to_owned());
        self.strings.insert(v.to_owned(), i);
        i
    }

    fn location(&mut self, service: u32, sym: &crate::symbols::SymbolTable, l: u32) -> u64 {
        if let Some(&id) = self.locations.get(&(service, l)) {
            return id;
        }
        let loc = sym.location(l).cloned().unwrap_or_default();
        let mapping_id = if loc.mapping == 0 {
            0
        } else {
            self.mapping(service, sym, loc.mapping)
        };
        let line = loc
            .lines
            .iter()
            .map(|&(f, line, column)| pprof::Line {
                function_id: self.function(service, sym, f),
                line,
                column,
            })
            .collect();
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(pprof::Location {
            id,
            mapping_id,
            address: loc.address,
            line,
            is_folded: false,
        });
        self.locations.insert((service, l), id);
        id
    }

    fn function(&mut self, service: u32, sym: &crate::symbols::SymbolTable, f: u32) -> u64 {
        if let Some(&id) = self.functions.get(&(service, f)) {
            return id;
        }
        let x = sym.function(f).copied().unwrap_or_default();
        let id = self.p.function.len() as u64 + 1;
        let (name, system_name, filename) = (
            self.s(sym.string(x.name)),
            self.s(sym.string(x.system_name)),
            self.s(sym.string(x.filename)),
        );
        self.p.function.push(pprof::Function {
            id,
            name,
            system_name,
            filename,
            start_line: x.start_line,
        });
        self.functions.insert((service, f), id);
        id
    }

    fn mapping(&mut self, service: u32, sym: &crate::symbols::SymbolTable, m: u32) -> u64 {
        if let Some(&id) = self.mappings.get(&(service, m)) {
            return id;
        }
        let x = sym.mapping(m).cloned().unwrap_or_default();
        let id = self.p.mapping.len() as u64 + 1;
        let (filename, build_id) = (
            self.s(sym.string(x.filename)),
            self.s(sym.string(x.build_id)),
        );
        self.p.mapping.push(pprof::Mapping {
            id,
            memory_start: x.memory_start,
            memory_limit: x.memory_limit,
            file_offset: x.file_offset,
            filename,
            build_id,
            has_functions: true,
            ..Default::default()
        });
        self.mappings.insert((service, m), id);
        id
    }
}

impl Store {
    /// Two selections as one diff flame graph (Pyroscope's layout): e.g. slow spans against
    /// fast spans of one endpoint, or one span against its endpoint's baseline.
    pub fn diff(
        &self,
        left: &Selection,
        right: &Selection,
        max_nodes: usize,
    ) -> Result<crate::diff::FlameGraphDiffLayout, StoreError> {
        let (l, _) = self.flame_graph(left)?;
        let (r, _) = self.flame_graph(right)?;
        Ok(crate::diff::diff_layout(&l, &r, max_nodes))
    }

    /// Totals of the selection per `step_ns`, optionally one series per value of label
    /// `group_by`, with up to `exemplars` spans per point.
    pub fn time_series(
        &self,
        sel: &Selection,
        step_ns: i64,
        group_by: Option<&str>,
        aggregation: crate::series::Aggregation,
        exemplars: usize,
    ) -> Result<Vec<(String, Vec<crate::series::SeriesPoint>)>, StoreError> {
        let points = self.points(sel, group_by)?;
        let to_ns = if sel.to_ns == 0 {
            points
                .iter()
                .map(|(_, p)| p.time_ns + 1)
                .max()
                .unwrap_or(sel.from_ns)
        } else {
            sel.to_ns
        };
        let grouped = points.into_iter().map(|(g, p)| (g.unwrap_or_default(), p));
        crate::series::bucket_grouped(grouped, sel.from_ns, to_ns, step_ns, aggregation, exemplars)
            .map_err(|e| StoreError::Invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_values_are_no_ticks() {
        let own = |value| OwnSamples {
            value,
            period: Some(10_000_000),
            profile_type: ProfileTypeId::parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds")
                .unwrap(),
        };
        assert_eq!(own(35_000_000).ticks(), 3);
        assert_eq!(own(-5).ticks(), 0);
        assert_eq!(own(-20_000_000).ticks(), 0);
        let count = OwnSamples {
            profile_type: ProfileTypeId::parse("process_cpu:samples:count:cpu:nanoseconds")
                .unwrap(),
            ..own(-3)
        };
        assert_eq!(count.ticks(), 0);
    }
}
