//! What a span search lists, page by page: every matching span counted, ordered by duration,
//! start, name or its own sampled CPU ("costly spans"), the matches grouped by trace, and the
//! span names a search box offers. Separate from `query.rs`, which answers one span or trace.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use hashbrown::{HashMap, HashSet};
use spanprof_format::profile_type::ProfileTypeId;

use super::query::Selection;
use super::{Store, StoreError};
use crate::spans::{SpanQuery, SpanRecord};

/// Most matches one search collects (about 48 bytes each in memory); past it the count is a
/// lower bound ([`SpanMatches::more`]) and order and pages are among those collected.
pub const MAX_MATCHES: usize = 1_000_000;

/// What a span list is ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanOrder {
    /// Duration (end − start), ns.
    Duration,
    /// Start time, ns since the Unix epoch.
    Start,
    /// The span's own sampled value of the profile type (CPU time, ns, by default): its
    /// child spans' samples are theirs.
    Cpu,
    /// Span name (a trace: its root's), byte order.
    Name,
}

impl SpanOrder {
    /// The order called `text` (`duration`, `start`, `cpu`, `name`).
    pub fn parse(text: &str) -> Option<SpanOrder> {
        Some(match text {
            "duration" => SpanOrder::Duration,
            "start" => SpanOrder::Start,
            "cpu" => SpanOrder::Cpu,
            "name" => SpanOrder::Name,
            _ => return None,
        })
    }
}

/// One matching span, the little of it a list is ordered and paged by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanMatch {
    /// Span id.
    pub span_id: [u8; 8],
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Start, ns since the Unix epoch.
    pub start_ns: u64,
    /// Duration, ns.
    pub duration_ns: u64,
    /// Index of its name in [`SpanMatches::names`].
    pub name: u32,
    /// Index of its service in [`SpanMatches::names`].
    pub service: u32,
    /// Its own samples' summed value, in the unit of [`SpanMatches::profile_type`]; 0 until
    /// [`Store::add_span_cpu`] has run.
    pub cpu: i64,
}

/// Every span a query matched (each once, however often it was sent), unordered.
#[derive(Clone, Debug, Default)]
pub struct SpanMatches {
    /// The matches.
    pub matches: Vec<SpanMatch>,
    /// Names and services, interned (a store has few distinct ones).
    pub names: Vec<String>,
    /// More spans match than [`MAX_MATCHES`]: `matches.len()` is a lower bound.
    pub more: bool,
    /// The type of the `cpu` values (set by [`Store::add_span_cpu`]); `None`: no sample.
    pub profile_type: Option<ProfileTypeId>,
}

impl SpanMatches {
    /// Orders the matches by `order` (`descending`: largest first), ties by start then span
    /// id, so that pages do not overlap.
    pub fn sort(&mut self, order: SpanOrder, descending: bool) {
        let names = &self.names;
        let key = |a: &SpanMatch, b: &SpanMatch| -> Ordering {
            let first = match order {
                SpanOrder::Duration => a.duration_ns.cmp(&b.duration_ns),
                SpanOrder::Start => a.start_ns.cmp(&b.start_ns),
                SpanOrder::Cpu => a.cpu.cmp(&b.cpu),
                SpanOrder::Name => names[a.name as usize].cmp(&names[b.name as usize]),
            };
            if descending {
                first.reverse()
            } else {
                first
            }
        };
        self.matches.sort_unstable_by(|a, b| {
            key(a, b)
                .then(a.start_ns.cmp(&b.start_ns))
                .then(a.span_id.cmp(&b.span_id))
        });
    }
}

/// The matching spans of one trace, and the trace around them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceGroup {
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Name and service of its root span (the earliest without a stored parent); `None`
    /// when none of its spans in the range is stored.
    pub root: Option<(String, String)>,
    /// Services of its spans, sorted.
    pub services: Vec<String>,
    /// Its stored spans in the searched range.
    pub spans: usize,
    /// Of them, the spans the query matched.
    pub matched: usize,
    /// Earliest start, ns since the Unix epoch.
    pub start_ns: u64,
    /// Latest end less earliest start, ns.
    pub duration_ns: u64,
    /// Its spans' own samples summed, in the unit of the answer's type.
    pub cpu: i64,
}

/// Span names offered for a text ([`Store::span_names`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameSuggestions {
    /// Names containing the text (ASCII case ignored): those that start with it first, then
    /// the others, each part sorted.
    pub names: Vec<String>,
    /// More names contain it than were returned.
    pub more: bool,
}

/// Each span's own samples summed ([`Store::span_cpu`]).
#[derive(Clone, Debug, Default)]
pub struct SpanCpu {
    /// Summed value per span id, in the unit of `profile_type`; spans without samples are
    /// left out.
    pub by_span: HashMap<[u8; 8], i64>,
    /// The type summed; `None` when no span has samples.
    pub profile_type: Option<ProfileTypeId>,
}

/// A span and its time: (span id, start ns, end ns, since the Unix epoch).
pub type SpanTime = ([u8; 8], u64, u64);

/// A trace's stored span, for grouping: its time and parent.
struct TraceSpan {
    id: [u8; 8],
    start_ns: u64,
    end_ns: u64,
    parent: Option<[u8; 8]>,
}

/// Interns strings into `names`.
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

impl Store {
    /// Every span matching `q` (its `limit` is not read), each once, at most [`MAX_MATCHES`].
    /// One pass over the segments of its range, spans read in place.
    pub fn span_matches(&self, q: &SpanQuery) -> Result<SpanMatches, StoreError> {
        let mut seen: HashSet<[u8; 8]> = HashSet::new();
        let mut strings = Interner::default();
        let mut out = SpanMatches::default();
        self.for_each_segment_span(q, |s| {
            if !q.matches_view(s) || !seen.insert(s.span_id) {
                return ControlFlow::Continue(());
            }
            if out.matches.len() == MAX_MATCHES {
                out.more = true;
                return ControlFlow::Break(());
            }
            out.matches.push(SpanMatch {
                span_id: s.span_id,
                trace_id: s.trace_id,
                start_ns: s.start_ns,
                duration_ns: s.duration_ns(),
                name: strings.id(s.name),
                service: strings.id(s.service),
                cpu: 0,
            });
            ControlFlow::Continue(())
        })?;
        out.names = strings.names;
        Ok(out)
    }

    /// Each span's own samples summed, of `profile_type` (default: the CPU type of the spans'
    /// samples), and that type; `None` when none of them has samples. Reads only the blocks
    /// the segments' span indexes name.
    pub fn span_cpu(
        &self,
        spans: &[SpanTime],
        profile_type: Option<&str>,
    ) -> Result<SpanCpu, StoreError> {
        let mut out = HashMap::new();
        if spans.is_empty() {
            return Ok(SpanCpu::default());
        }
        // The samples of a span lie in profile windows that overlap it.
        let from = spans.iter().map(|s| s.1).min().unwrap_or(0);
        let to = spans.iter().map(|s| s.2).max().unwrap_or(0);
        let sel = Selection {
            span_ids: spans.iter().map(|s| s.0).collect(),
            profile_type: profile_type.map(str::to_owned),
            from_ns: i64::try_from(from).unwrap_or(i64::MAX),
            to_ns: i64::try_from(to.saturating_add(1)).unwrap_or(0),
            overlapping: true,
            ..Selection::default()
        };
        let r = {
            let st = self.state.read().expect("store state lock poisoned");
            st.resolve(&sel)?
        };
        if r.blocks.is_empty() {
            return Ok(SpanCpu::default());
        }
        self.for_each_sample(&r, |block, i| {
            let link = block.links[i] as usize;
            if let Some((_, span)) = link.checked_sub(1).and_then(|l| block.link_table.get(l)) {
                let v = out.entry(*span).or_insert(0i64);
                *v = v.saturating_add(block.values[i]);
            }
        })?;
        Ok(SpanCpu {
            by_span: out,
            profile_type: Some(r.profile_type),
        })
    }

    /// Fills in the `cpu` of every match ([`Store::span_cpu`]) and the type it is of.
    pub fn add_span_cpu(
        &self,
        m: &mut SpanMatches,
        profile_type: Option<&str>,
    ) -> Result<(), StoreError> {
        let keys: Vec<SpanTime> = m
            .matches
            .iter()
            .map(|s| {
                (
                    s.span_id,
                    s.start_ns,
                    s.start_ns.saturating_add(s.duration_ns),
                )
            })
            .collect();
        let cpu = self.span_cpu(&keys, profile_type)?;
        for s in &mut m.matches {
            s.cpu = cpu.by_span.get(&s.span_id).copied().unwrap_or(0);
        }
        m.profile_type = cpu.profile_type;
        Ok(())
    }

    /// The records of the spans `ids` within `q`'s range (its filters are not read), in the
    /// order of `ids`; ids not found are left out. One pass over the range.
    pub fn span_records(
        &self,
        q: &SpanQuery,
        ids: &[[u8; 8]],
    ) -> Result<Vec<SpanRecord>, StoreError> {
        let wanted: HashMap<[u8; 8], usize> =
            ids.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let mut found: Vec<Option<SpanRecord>> = vec![None; ids.len()];
        let mut left = ids.len();
        self.for_each_segment_span(q, |s| {
            if let Some(&i) = wanted.get(&s.span_id) {
                if found[i].is_none() {
                    found[i] = Some(s.to_record());
                    left -= 1;
                }
            }
            if left == 0 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The traces of `m`'s matches, each with its root, services, spans and CPU (its stored
    /// spans in `q`'s range: a trace reaching outside it is counted within it), unordered.
    /// CPU is of `profile_type` as [`Store::span_cpu`] picks it; the type is returned.
    pub fn trace_groups(
        &self,
        q: &SpanQuery,
        m: &SpanMatches,
        profile_type: Option<&str>,
    ) -> Result<(Vec<TraceGroup>, Option<ProfileTypeId>), StoreError> {
        struct Acc {
            root: Option<(u64, String, String)>,
            services: Vec<String>,
            span_ids: HashSet<[u8; 8]>,
            spans: Vec<TraceSpan>,
            matched: usize,
        }
        let mut by_trace: HashMap<[u8; 16], Acc> = HashMap::new();
        for s in &m.matches {
            by_trace
                .entry(s.trace_id)
                .or_insert_with(|| Acc {
                    root: None,
                    services: Vec::new(),
                    span_ids: HashSet::new(),
                    spans: Vec::new(),
                    matched: 0,
                })
                .matched += 1;
        }
        let range = SpanQuery {
            from_ns: q.from_ns,
            to_ns: q.to_ns,
            ..SpanQuery::default()
        };
        self.for_each_segment_span(&range, |s| {
            if !range.matches_view(s) {
                return ControlFlow::Continue(());
            }
            if let Some(acc) = by_trace.get_mut(&s.trace_id) {
                if acc.span_ids.insert(s.span_id) {
                    acc.spans.push(TraceSpan {
                        id: s.span_id,
                        start_ns: s.start_ns,
                        end_ns: s.end_ns,
                        parent: s.parent_span_id,
                    });
                    if !acc.services.iter().any(|x| x == s.service) {
                        acc.services.push(s.service.to_owned());
                    }
                }
            }
            ControlFlow::Continue(())
        })?;
        // Roots: spans whose parent is not stored, the earliest first.
        let mut views_needed: HashMap<[u8; 8], [u8; 16]> = HashMap::new();
        for (trace, acc) in &by_trace {
            let root = acc
                .spans
                .iter()
                .filter(|s| s.parent.is_none_or(|p| !acc.span_ids.contains(&p)))
                .min_by_key(|s| (s.start_ns, s.id));
            if let Some(r) = root {
                views_needed.insert(r.id, *trace);
            }
        }
        self.for_each_segment_span(&range, |s| {
            if views_needed.get(&s.span_id) == Some(&s.trace_id) {
                if let Some(acc) = by_trace.get_mut(&s.trace_id) {
                    if acc.root.is_none() {
                        acc.root = Some((s.start_ns, s.name.to_owned(), s.service.to_owned()));
                    }
                }
            }
            ControlFlow::Continue(())
        })?;
        let keys: Vec<SpanTime> = by_trace
            .values()
            .flat_map(|a| a.spans.iter().map(|s| (s.id, s.start_ns, s.end_ns)))
            .collect();
        let cpu = self.span_cpu(&keys, profile_type)?;
        let groups = by_trace
            .into_iter()
            .map(|(trace_id, mut acc)| {
                acc.services.sort();
                let start = acc.spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
                let end = acc.spans.iter().map(|s| s.end_ns).max().unwrap_or(start);
                TraceGroup {
                    trace_id,
                    root: acc.root.map(|(_, name, service)| (name, service)),
                    services: acc.services,
                    spans: acc.spans.len(),
                    matched: acc.matched,
                    start_ns: start,
                    duration_ns: end.saturating_sub(start),
                    cpu: acc
                        .spans
                        .iter()
                        .map(|s| cpu.by_span.get(&s.id).copied().unwrap_or(0))
                        .fold(0i64, i64::saturating_add),
                }
            })
            .collect();
        Ok((groups, cpu.profile_type))
    }

    /// Distinct span names of the spans `q` matches that contain `text` (ASCII case
    /// ignored; empty: every name), at most `limit` of them.
    pub fn span_names(
        &self,
        q: &SpanQuery,
        text: &str,
        limit: usize,
    ) -> Result<NameSuggestions, StoreError> {
        let needle = text.to_ascii_lowercase();
        let mut seen: HashSet<String> = HashSet::new();
        self.for_each_segment_span(q, |s| {
            if !seen.contains(s.name)
                && q.matches_view(s)
                && s.name.to_ascii_lowercase().contains(&needle)
            {
                seen.insert(s.name.to_owned());
            }
            ControlFlow::Continue(())
        })?;
        let mut names: Vec<String> = seen.into_iter().collect();
        names.sort_by(|a, b| {
            let starts = |n: &str| !n.to_ascii_lowercase().starts_with(&needle);
            starts(a).cmp(&starts(b)).then(a.cmp(b))
        });
        let more = names.len() > limit;
        names.truncate(limit);
        Ok(NameSuggestions { names, more })
    }
}

/// Orders trace groups as [`SpanMatches::sort`] orders spans (by the root's name for
/// [`SpanOrder::Name`]), ties by start then trace id.
pub fn sort_trace_groups(groups: &mut [TraceGroup], order: SpanOrder, descending: bool) {
    groups.sort_unstable_by(|a, b| {
        let first = match order {
            SpanOrder::Duration => a.duration_ns.cmp(&b.duration_ns),
            SpanOrder::Start => a.start_ns.cmp(&b.start_ns),
            SpanOrder::Cpu => a.cpu.cmp(&b.cpu),
            SpanOrder::Name => a
                .root
                .as_ref()
                .map(|r| &r.0)
                .cmp(&b.root.as_ref().map(|r| &r.0)),
        };
        let first = if descending { first.reverse() } else { first };
        first
            .then(a.start_ns.cmp(&b.start_ns))
            .then(a.trace_id.cmp(&b.trace_id))
    });
}

/// A regex (for a fully anchored matcher, as [`crate::spans::TextCondition`] builds them)
/// that holds when the text contains `text`, ASCII case ignored.
pub fn contains_regex(text: &str) -> String {
    format!("(?i:.*{}.*)", regex_lite::escape(text))
}

/// A regex (for a fully anchored matcher) that holds when the text contains a match of
/// `regex` anywhere, as grep searches (`^`/`$` still anchor).
pub fn search_regex(regex: &str) -> String {
    format!(".*(?:{regex}).*")
}
