//! Whether a span's time is covered by profiles: [`Coverage`], built from the windows around
//! the span so the UI can say why a span has no samples.

use std::collections::BTreeSet;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use spanprof_format::profile_type::ProfileTypeId;

use super::resolve::resolved_type;
use super::selection::Selection;
use crate::block::Block;
use crate::codec::Get;
use crate::spans::SpanRecord;
use crate::store::segments::SegmentIndex;
use crate::store::state::State;
use crate::store::{Store, StoreError};

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

/// The period of each block read for a span without samples, by its place (record and
/// offset): the spans of one trace share their profiles' blocks, and each block is decoded
/// once per call, not once per span (a trace of 950 spans without samples: 950 decodes).
type Periods = HashMap<(crate::log::RecordPos, u32), Option<i64>>;

/// The selection of one span's own samples of `profile_type` (default: the CPU type of its
/// samples): how a span's type is resolved, alone or among many.
fn one_span(span_id: [u8; 8], profile_type: Option<&str>) -> Selection {
    Selection {
        span_ids: vec![span_id],
        profile_type: profile_type.map(str::to_owned),
        ..Default::default()
    }
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

/// `[start, end)` less the union of `holes`, as sorted disjoint intervals.
pub(super) fn outside(
    start: u64,
    end: u64,
    holes: impl Iterator<Item = (u64, u64)>,
) -> Vec<(u64, u64)> {
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

impl Store {
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
        let own = self.own_samples_of(spans, profile_type)?;
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
        let mut periods = Periods::new();
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
                self.coverage_of(&st, span, &parts, own, (&services, &profiled), &mut periods)
            })
            .collect()
    }

    /// [`Store::own_samples`] of each of `spans`, in one pass over their blocks per type:
    /// a trace's spans share their profiles' blocks, and a pass per span decoded a block
    /// once per span (a trace view of 1,000 spans: 1,000 decodes of the same block, four
    /// fifths of its time). Each span's type is resolved as when it is asked alone (a short
    /// name, or none, resolves by the span's own samples); the spans of each type are then
    /// read together in that type, named in full.
    fn own_samples_of(
        &self,
        spans: &[SpanRecord],
        profile_type: Option<&str>,
    ) -> Result<Vec<OwnSamples>, StoreError> {
        let read = || self.state.read().expect("store state lock poisoned");
        // A type named in full resolves to itself whatever a span's samples are.
        let named = profile_type.and_then(ProfileTypeId::parse);
        let mut types = Vec::with_capacity(spans.len());
        for s in spans {
            types.push(match &named {
                Some(t) => t.clone(),
                None => {
                    read()
                        .resolve(&one_span(s.span_id, profile_type))?
                        .profile_type
                }
            });
        }
        let mut own: HashMap<[u8; 8], (i64, Option<i64>)> = HashMap::new();
        let distinct: BTreeSet<&ProfileTypeId> = types.iter().collect();
        for t in distinct {
            let full = t.to_string();
            if ProfileTypeId::parse(&full).as_ref() != Some(t) {
                continue; // no type at all (an empty store): no samples to read
            }
            let sel = Selection {
                span_ids: spans
                    .iter()
                    .zip(&types)
                    .filter(|(_, of)| *of == t)
                    .map(|(s, _)| s.span_id)
                    .collect(),
                profile_type: Some(full),
                ..Default::default()
            };
            // Resolved under the lock; the blocks are read without it.
            let r = read().resolve(&sel)?;
            self.for_each_sample(&r, |block, i| {
                // Only samples linked to a selected span are passed (`links[i]` is not 0).
                let (_, span) = block.link_table[block.links[i] as usize - 1];
                let sum = own.entry(span).or_insert((0, None));
                sum.0 = sum.0.saturating_add(block.values[i]);
                sum.1.get_or_insert(block.period);
            })?;
        }
        Ok(spans
            .iter()
            .zip(types)
            .map(|(s, profile_type)| {
                let (value, period) = own.get(&s.span_id).copied().unwrap_or((0, None));
                OwnSamples {
                    value,
                    period,
                    profile_type,
                }
            })
            .collect())
    }

    /// The samples of span `span_id` itself, of `profile_type` (default: the CPU type of
    /// its samples).
    fn own_samples(
        &self,
        st: &State,
        span_id: [u8; 8],
        profile_type: Option<&str>,
    ) -> Result<OwnSamples, StoreError> {
        let r = st.resolve(&one_span(span_id, profile_type))?;
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
        (services, profiled): (&[String], &[String]),
        periods: &mut Periods,
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
                    own.period = self.block_period(index, *b, periods)?;
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
                            own.period = self.block_period(&index, b, periods)?;
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

    fn block_period(
        &self,
        index: &SegmentIndex,
        b: u32,
        periods: &mut Periods,
    ) -> Result<Option<i64>, StoreError> {
        let meta = &index.blocks[b as usize];
        if let Some(&known) = periods.get(&(meta.pos, meta.start)) {
            return Ok(known);
        }
        let bytes = self.log.read(meta.pos)?;
        let slice = bytes
            .get(meta.start as usize..(meta.start + meta.len) as usize)
            .ok_or_else(|| StoreError::Invalid("block lies outside its record".into()))?;
        let period =
            Some(Block::decode(&mut Get::new(slice), &crate::store::record_links(&bytes)?)?.period);
        periods.insert((meta.pos, meta.start), period);
        Ok(period)
    }
}

/// The services whose profiles hold samples linked to this span (of any type; none when it
/// has no samples), from the indexes alone.
pub(super) fn span_sample_services(
    st: &State,
    span_id: &[u8; 8],
) -> Result<BTreeSet<u32>, StoreError> {
    let indexes = st.indexes(0, 0, |summary| summary.span_bloom.may_contain(span_id))?;
    Ok(indexes
        .iter()
        .flat_map(|i| {
            i.span_blocks(span_id)
                .map(|b| st.series[i.blocks[b as usize].series as usize].service)
        })
        .collect())
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
