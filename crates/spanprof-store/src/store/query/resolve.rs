//! A selection resolved to the blocks, spans and profile type it reads: series matched in
//! chunks with no lock held, then blocks and spans under the read lock.

use std::collections::BTreeSet;
use std::sync::Arc;

use hashbrown::HashSet;
use spanprof_format::profile_type::ProfileTypeId;

use super::selection::Selection;
use super::{overlaps, starts_in, Resolved};
use crate::matchers::{matches_all, parse_selector, LabelMatcher};
use crate::store::segments::SegmentIndex;
use crate::store::state::{SeriesKey, State};
use crate::store::{Store, StoreError};

impl State {
    /// What `sel` selects: its blocks, spans, trace and profile type. A selection with a
    /// span filter goes through [`Store::read_resolved`], which finds the filter's spans
    /// first with the store unlocked; here it would select no span.
    pub(crate) fn resolve(&self, sel: &Selection) -> Result<Resolved, StoreError> {
        debug_assert!(
            sel.span_filter.is_none(),
            "span filters resolve in Store::read_resolved"
        );
        let matchers = label_matchers(sel)?;
        let series = self.series_of(sel, &matchers)?;
        self.resolve_with(sel, Vec::new(), series)
    }

    /// The series whose service and labels `sel` takes (a selection by spans or a trace takes
    /// any service: see [`State::resolve_with`]), scanned with this state locked: for
    /// selections made here, not users' label regexes ([`Store::read_resolved`] scans those
    /// with no lock held).
    fn series_of(
        &self,
        sel: &Selection,
        matchers: &[LabelMatcher],
    ) -> Result<HashSet<u32>, StoreError> {
        let mut series = HashSet::new();
        for (i, k) in self.series.iter().enumerate() {
            if i.is_multiple_of(256) {
                crate::query_limit::check()?;
            }
            if takes_service(self, sel, k) && series_matches(matchers, k) {
                series.insert(i as u32);
            }
        }
        Ok(series)
    }

    /// [`State::resolve`], with `filtered` the spans of `sel`'s span filter
    /// ([`Store::filtered_spans`]) and `series` those it takes ([`State::series_of`]).
    // Long: series, blocks, spans, trace and type are decided together under one read lock.
    #[allow(clippy::too_many_lines)]
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
        let indexes = self.indexes(sel.from_ns, sel.to_ns, |summary| {
            !filtering
                || probe.iter().any(|s| summary.span_bloom.may_contain(s))
                || trace
                    .as_ref()
                    .is_some_and(|(t, _)| summary.trace_bloom.may_contain(t))
        })?;
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
                services.contains(&k.service) && !crate::store::state::is_forgotten(k)
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
}

impl Store {
    /// `sel` resolved, and the store's state read-locked for the caller to read what it
    /// resolved to. A span filter's spans are found first, with the store unlocked: it reads
    /// every segment's spans (seconds on a large store, every ingest waiting, when locked).
    pub(super) fn read_resolved(
        &self,
        sel: &Selection,
    ) -> Result<(std::sync::RwLockReadGuard<'_, State>, Resolved), StoreError> {
        let filtered = match &sel.span_filter {
            Some(f) => self.filtered_spans(sel, f)?,
            None => Vec::new(),
        };
        let matchers = label_matchers(sel)?;
        let mut series = HashSet::new();
        let mut next = 0;
        while let Some(chunk) =
            self.series_chunk(&mut next, |st, _, k| takes_service(st, sel, k))?
        {
            for found in Store::matching(&chunk, &matchers) {
                series.insert(found?.0);
            }
        }
        let st = self.state.read().expect("store state lock poisoned");
        let r = st.resolve_with(sel, filtered, series)?;
        Ok((st, r))
    }

    /// `sel` resolved ([`Store::read_resolved`]), for a caller that needs no more of the
    /// store's state.
    pub(super) fn resolved(&self, sel: &Selection) -> Result<Resolved, StoreError> {
        Ok(self.read_resolved(sel)?.1)
    }
}

/// Whether `sel` takes series `k` by its service (a selection by spans or a trace takes any).
fn takes_service(st: &State, sel: &Selection, k: &SeriesKey) -> bool {
    let by_spans = !sel.span_ids.is_empty() || sel.span_filter.is_some() || sel.trace_id.is_some();
    by_spans
        || sel
            .service
            .as_deref()
            .is_none_or(|s| st.services[k.service as usize].name == s)
}

/// The label matchers of `sel`'s selector, parsed (and their regexes compiled) once per
/// query.
fn label_matchers(sel: &Selection) -> Result<Vec<LabelMatcher>, StoreError> {
    Ok(match &sel.label_selector {
        Some(s) if !s.trim().is_empty() => parse_selector(s)?.matchers,
        _ => Vec::new(),
    })
}

pub(super) fn type_ids(
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

/// Whether series `k` passes every matcher, its profile type counting as the labels
/// `__profile_type__` (the id) and `__name__` (its name), as [`Store::series`] lists them:
/// Grafana's label pickers ask with `{__profile_type__="…"}`.
pub(super) fn series_matches(matchers: &[LabelMatcher], k: &SeriesKey) -> bool {
    matchers.iter().all(|m| match m.name.as_str() {
        "__profile_type__" => m.matches(Some(&k.profile_type.to_string())),
        "__name__" => m.matches(Some(&k.profile_type.name)),
        _ => matches_all(std::slice::from_ref(m), &k.labels),
    })
}

/// A selection's resolved type, `None` when there was none to resolve (the empty default
/// [`State::resolve`] gives then).
pub(super) fn resolved_type(t: &ProfileTypeId) -> Option<ProfileTypeId> {
    (*t != ProfileTypeId::default()).then(|| t.clone())
}

/// Profile types present (of one service, when given), sorted.
pub(super) fn types_of_service(st: &State, service: Option<&str>) -> Vec<ProfileTypeId> {
    let set: BTreeSet<ProfileTypeId> = st
        .series
        .iter()
        .filter(|k| !crate::store::state::is_forgotten(k))
        .filter(|k| service.is_none_or(|s| st.services[k.service as usize].name == s))
        .map(|k| k.profile_type.clone())
        .collect();
    set.into_iter().collect()
}
