//! Span and trace look-ups: by id, by trace, by search, and the spans a span filter selects.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use hashbrown::{HashMap, HashSet};

use super::coverage::span_sample_services;
use super::selection::{Selection, SpanFilter};
use super::SPAN_TIME_LOOKUPS;
use crate::spans::{percentile, Longest, SpanQuery, SpanRecord, SpanView};
use crate::store::segments::SealedSummary;
use crate::store::segments::SegmentIndex;
use crate::store::state::{segment_overlaps, IndexRef, State};
use crate::store::{Store, StoreError};

impl State {
    /// A stored span, from whichever segment holds it.
    pub(crate) fn span_record(&self, id: &[u8; 8]) -> Result<Option<SpanRecord>, StoreError> {
        if let Some(s) = self.active.spans().get(id) {
            return Ok(Some(s.clone()));
        }
        let indexes = self.indexes(0, 0, |summary| summary.span_bloom.may_contain(id))?;
        Ok(indexes
            .iter()
            .rev()
            .find_map(|i| i.spans().get(id).cloned()))
    }

    /// The stored spans of a trace over all segments, in start order.
    pub(crate) fn trace_records(&self, t: &[u8; 16]) -> Result<Vec<SpanRecord>, StoreError> {
        let indexes = self.indexes(0, 0, |summary| summary.trace_bloom.may_contain(t))?;
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
}

impl Store {
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
    pub(super) fn traces_of(
        &self,
        spans: HashSet<[u8; 8]>,
    ) -> Result<HashMap<[u8; 8], [u8; 16]>, StoreError> {
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

    /// The spans `f` (of `sel`) picks: by name, service and duration, durations also as
    /// percentiles of all the spans of the name (of every time), in `sel`'s time range.
    pub(super) fn filtered_spans(
        &self,
        sel: &Selection,
        f: &SpanFilter,
    ) -> Result<Vec<[u8; 8]>, StoreError> {
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
    pub(super) fn warm_spans(
        &self,
        keep: impl Fn(&SealedSummary) -> bool,
    ) -> Result<(), StoreError> {
        let (refs, loader) = self
            .state
            .read()
            .expect("store state lock poisoned")
            .index_refs(0, 0, keep);
        for r in refs.iter().filter(|r| matches!(r, IndexRef::Sealed(_))) {
            if let Some(index) = loader.load(r)? {
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
            let Some(index) = loader.load(r)? else {
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
