//! Spans with their CPU, as the search (`span_search.rs`) and `/api/v1/traces/{trace_id}`
//! show them.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::{CompareOp, SpanQuery, SpanRecord};
use spanprof_store::store::{Coverage, Selection, Store};

use super::error::{blocking, ApiError};
use super::params::{self, QueryParams};
use super::selection::check_profile_type;
use crate::api::Queries;

// Verdicts of [`verdict`], for clients to compare against (`SAMPLED` is shared with the
// remote backend).
pub use crate::answer::SAMPLED;
/// The span ran long enough to be sampled but no sample landed in it (it waited).
pub const NO_CPU: &str = "no CPU used";
/// Like [`NO_CPU`] for a type that does not measure CPU.
pub const NO_SAMPLES: &str = "no samples";
/// Shorter than one sampling period: no samples is expected, not a finding.
pub const TOO_SHORT: &str = "shorter than the sampling period";
/// No profile of the span's service covers its time.
pub const NOT_PROFILED: &str = "no profile covers the span";
/// The span ended lately, and no profile of its service reaches its time yet: the one of its
/// time is still to come (a scraped CPU window is stored when it ends, a push SDK's with its
/// next upload). Answered [`NOT_PROFILED`] once it ended `PENDING_FOR_NS` (2 minutes) ago.
pub const PENDING: &str = "profile not received yet";
/// How long after a span ended a profile of its time may still arrive, ns: a window of a
/// scrape interval (15 s by default) and its scrape timeout, or a push SDK's upload interval,
/// with room to spare.
pub const PENDING_FOR_NS: u64 = 120_000_000_000;
/// Profiles cover less than one sampling period of the span, or less than half of it: it
/// fell (mostly) between two windows of a pull profiler, and no sample in the part watched
/// says little of the rest.
pub const PARTLY_PROFILED: &str = "profiles cover too little of the span";

/// No sample names the span, but an ancestor of its service has some, no span of that
/// service below the first of the trace's visit to it has any, and spans of its name have
/// none elsewhere either: its profiler seems to label only the first span of each request
/// (pyroscope-otel labels local root spans only), so what the span ran, if anything, is in
/// that ancestor's samples. `sampled_ancestor` names where to look.
pub const ON_ANCESTOR: &str = "samples on an ancestor span";

/// No sample is linked to the span, but samples carry its id under a label key spanprof does
/// not link (`unlinked_span_key` names it): its CPU is there, unlinked.
pub const UNLINKED_LABEL: &str = "samples under a label that is no link key";

/// What a span's coverage means, in words; `recent`: the span ended less than
/// `PENDING_FOR_NS` (2 minutes) ago.
pub fn verdict(c: &Coverage, recent: bool) -> &'static str {
    // "No CPU used" only where samples are taken on a CPU (CPU time or CPU sample counts;
    // not wall-clock time, not allocations).
    let cpu_type = c
        .profile_type
        .as_ref()
        .is_some_and(ProfileTypeId::samples_cpu);
    if c.value > 0 {
        return SAMPLED;
    }
    if c.after_last_window && recent {
        return PENDING;
    }
    // Against its own time: what its children ran is theirs.
    let (unwatched, mostly_unwatched) = match (c.covered_ns, c.self_ns) {
        (Some(covered), Some(own)) if covered < own => (Some(covered), covered < own / 2),
        _ => (None, false),
    };
    match c.possible_samples {
        Some(p) if p < 1.0 && unwatched == Some(0) && !c.between_windows => NOT_PROFILED,
        Some(p) if p < 1.0 && unwatched.is_some() => PARTLY_PROFILED,
        Some(_) if mostly_unwatched => PARTLY_PROFILED,
        Some(p) if p < 1.0 => TOO_SHORT,
        Some(_) if cpu_type => NO_CPU,
        Some(_) => NO_SAMPLES,
        None if c.period.is_some() => NO_SAMPLES,
        None => NOT_PROFILED,
    }
}

/// The coverage lookups of one request: the profile type asked for, and the label keys seen
/// holding span ids that are no link keys.
pub(super) struct CoverageOf {
    profile_type: Option<String>,
    unlinked_keys: Vec<String>,
}

impl CoverageOf {
    /// Checks `type` as `span_coverage` resolves it (over every service).
    pub(super) fn new(
        store: &Store,
        profile_type: Option<(String, String)>,
        unlinked_keys: Vec<String>,
    ) -> Result<Self, ApiError> {
        if let Some((shown, wanted)) = &profile_type {
            check_profile_type(store, None, shown, wanted)?;
        }
        Ok(CoverageOf {
            profile_type: profile_type.map(|(_, w)| w),
            unlinked_keys,
        })
    }

    /// The first of the unlinked keys under which samples of the span's service and time
    /// carry the span's id.
    fn unlinked_key(&self, store: &Store, span: &SpanRecord) -> Result<Option<String>, ApiError> {
        let id = to_hex(&span.span_id);
        for key in &self.unlinked_keys {
            let sel = Selection {
                service: Some(span.service.clone()),
                profile_type: self.profile_type.clone(),
                from_ns: i64::try_from(span.start_ns).unwrap_or(i64::MAX),
                to_ns: i64::try_from(span.end_ns.saturating_add(1)).unwrap_or(i64::MAX),
                label_selector: Some(format!("{{{key}={id:?}}}")),
                overlapping: true,
                ..Selection::default()
            };
            if !store.series(&sel)?.is_empty() {
                return Ok(Some(key.clone()));
            }
        }
        Ok(None)
    }

    /// The spans as JSON, each with its own samples (children excluded) and coverage.
    pub(super) fn spans_json(
        &self,
        store: &Store,
        spans: &[SpanRecord],
    ) -> Result<Vec<Map<String, Value>>, ApiError> {
        let coverages = store.span_coverages(spans, self.profile_type.as_deref())?;
        spans
            .iter()
            .zip(coverages)
            .map(|(span, c)| self.span_json(store, span, &c))
            .collect()
    }

    fn span_json(
        &self,
        store: &Store,
        span: &SpanRecord,
        c: &Coverage,
    ) -> Result<Map<String, Value>, ApiError> {
        let mut map = crate::answer::with_fields(
            crate::answer::span_fields(span),
            json!({
                "self_ns": c.self_ns,
                "profile_type": c.profile_type.as_ref().map(ToString::to_string),
                "unit": c.profile_type.as_ref().map(|t| t.sample_unit.as_str()),
                "total": c.value,
                "samples": c.samples,
                "possible_samples": c.possible_samples,
                "covered_ns": c.covered_ns,
                "period": c.period,
                "has_samples": store.has_samples(&span.span_id)?,
                "coverage": verdict(c, ended_lately(span)),
                "sampled_ancestor": null,
            }),
        );
        if c.value == 0 && !self.unlinked_keys.is_empty() {
            if let Some(key) = self.unlinked_key(store, span)? {
                map.insert("coverage".into(), UNLINKED_LABEL.into());
                map.insert("unlinked_span_key".into(), key.into());
            }
        }
        Ok(map)
    }
}

/// Whether `span` ended less than [`PENDING_FOR_NS`] ago (or ends after now, by the server's
/// clock).
fn ended_lately(span: &SpanRecord) -> bool {
    let now_ns = crate::clock::now_ns().max(0) as u64;
    now_ns.saturating_sub(span.end_ns) < PENDING_FOR_NS
}

pub(super) fn type_param(p: &QueryParams) -> Result<Option<(String, String)>, ApiError> {
    Ok(p.one("type")?
        .map(|x| (x.shown.to_owned(), x.value.to_owned())))
}

/// Why a search of `service` found nothing, when it has profiles but no span at any time: a
/// scrape target named otherwise than its tracer names the service (`--scrape checkout=…` for
/// a program whose spans say `goapp`) answered an empty list and nothing more.
pub(super) fn profiles_without_spans(
    store: &Store,
    service: &str,
) -> Result<Option<String>, ApiError> {
    if store.profile_types(Some(service)).is_empty() {
        return Ok(None);
    }
    let with_spans = store.span_services(0, u64::MAX)?;
    if with_spans.iter().any(|s| s == service) {
        return Ok(None);
    }
    let known = match with_spans.len() {
        0 => "no service has spans yet".to_owned(),
        n if n > 20 => format!(
            "services with spans: {} and {} more",
            with_spans[..20].join(", "),
            n - 20
        ),
        _ => format!("services with spans: {}", with_spans.join(", ")),
    };
    Ok(Some(format!(
        "{service} has profiles but no spans: spans are stored under the service.name their \
         tracer gives them ({known}); name the scrape target or push as the tracer names the \
         service, and its spans and profiles are found under one name"
    )))
}

/// 400 when `service` (parameter `shown`) has neither spans nor profiles at any time: a typo
/// in a span search answered "no span matches", as if the service had no such spans. (A
/// search that found nothing asks this; a service without profiles costs a read of every
/// span once more.)
pub(super) fn unknown_service(store: &Store, shown: &str, service: &str) -> Result<(), ApiError> {
    if !store.profile_types(Some(service)).is_empty() {
        return Ok(());
    }
    let with_spans = store.span_services(0, u64::MAX)?;
    if with_spans.is_empty() || with_spans.iter().any(|s| s == service) {
        return Ok(());
    }
    let known = &with_spans[..with_spans.len().min(20)];
    let more = match with_spans.len() {
        n if n > 20 => format!(" and {} more", n - 20),
        _ => String::new(),
    };
    Err(ApiError::bad_param(
        shown,
        service,
        format!(
            "no spans or profiles of this service; services with spans: {}{more}",
            known.join(", ")
        ),
    ))
}

/// `GET /api/v1/traces/{trace_id}?type`.
pub async fn trace(
    State(queries): State<Queries>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/traces/{trace_id}", &["type"])?;
    let trace_id = params::trace_id(&id).map_err(|r| ApiError::bad_param("trace_id", &id, r))?;
    // Ids are answered in lower case, whatever case they were asked in.
    let id = to_hex(&trace_id);
    let profile_type = type_param(&p)?;
    if let Some(remote) = &queries.remote {
        let wanted = profile_type.as_ref().map(|(_, w)| w.as_str());
        return crate::remote::views::trace(remote, trace_id, wanted, depths).await;
    }
    let unlinked_keys = queries.span_keys.found();
    let body = blocking(&queries, move |store| {
        let records = store.trace(&trace_id)?;
        if records.is_empty() {
            return Err(ApiError::not_found(format!(
                "trace {id}: none of its spans are stored (its samples, if any, are at \
                 /api/v1/flamegraph?trace_id={id})"
            )));
        }
        // The whole trace's flame graph, resolved once: its type is every span's (without
        // `type`, the one the trace's samples resolve to: their CPU type), so that the totals
        // add up in one unit; its total less the spans' is the samples of spans not stored.
        let whole = Selection {
            trace_id: Some(trace_id),
            profile_type: profile_type.as_ref().map(|(_, wanted)| wanted.clone()),
            ..Default::default()
        };
        let (_, whole) = store.flame_graph(&whole)?;
        // What the totals are in, for clients to word them ("of CPU", "goroutines").
        let resolved = whole.profile_type_id;
        let profile_type = match profile_type {
            Some(t) => Some(t),
            None => resolved
                .as_ref()
                .map(|t| ("type".to_owned(), t.to_string())),
        };
        let coverage = CoverageOf::new(store, profile_type, unlinked_keys)?;
        let start = records.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let end = records.iter().map(|s| s.end_ns).max().unwrap_or(start);
        let depths = depths(&records);
        let (mut total, mut samples) = (0i64, 0u64);
        let shown = records.len().min(crate::api::MAX_TRACE_SPANS);
        let mut spans = Vec::with_capacity(shown);
        let mut shown_json = coverage.spans_json(store, &records[..shown])?;
        let sampled: HashSet<[u8; 8]> = records
            .iter()
            .zip(&shown_json)
            .filter(|(_, j)| j["samples"].as_u64().is_some_and(|n| n > 0))
            .map(|(s, _)| s.span_id)
            .collect();
        let ancestors = sampled_ancestors(&records, &sampled);
        let ancestors = seen_unlabelled_elsewhere(store, &records, ancestors)?;
        for (s, span) in records.iter().zip(&mut shown_json) {
            point_to_sampled_ancestor(span, ancestors.get(&s.span_id));
        }
        for (s, mut span) in records.iter().zip(shown_json) {
            total += span["total"].as_i64().unwrap_or(0);
            samples += span["samples"].as_u64().unwrap_or(0);
            span.insert("offset_ns".into(), (s.start_ns - start).into());
            span.insert("depth".into(), depths[&s.span_id].into());
            spans.push(Value::Object(span));
        }
        // The trace's samples in spans that are not stored (never received, or sent without
        // their trace's other spans): in the trace's flame graph, in no span's total.
        let whole = whole.value_selected;
        let unknown_spans_total = if shown < records.len() {
            Value::Null
        } else {
            i64::try_from(whole)
                .unwrap_or(i64::MAX)
                .saturating_sub(total)
                .max(0)
                .into()
        };
        Ok(json!({
            "trace_id": id,
            "start_ns": start.to_string(),
            "duration_ns": end.saturating_sub(start),
            "profile_type": resolved.as_ref().map(ToString::to_string),
            "unit": resolved.as_ref().map(|t| t.sample_unit.as_str()),
            "total": total,
            "samples": samples,
            "unknown_spans_total": unknown_spans_total,
            "spans_total": records.len(),
            "truncated": shown < records.len(),
            "spans": spans,
        }))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// Marks a span (its JSON) whose samples, if any, are its ancestor's ([`ON_ANCESTOR`]): only
/// a span the verdict says used no CPU (or had no samples of a non-CPU type) is.
fn point_to_sampled_ancestor(span: &mut Map<String, Value>, ancestor: Option<&[u8; 8]>) {
    let Some(ancestor) = ancestor else { return };
    if span["coverage"] == NO_CPU || span["coverage"] == NO_SAMPLES {
        span.insert("coverage".into(), ON_ANCESTOR.into());
        span.insert("sampled_ancestor".into(), to_hex(ancestor).into());
    }
}

/// [`point_to_sampled_ancestor`] for the spans a search found (`found`, their JSON in
/// `spans`), each judged in its whole trace. Only the traces of spans that may change are
/// read, once each; a span has samples there when any sample of any type names it.
pub(super) fn point_to_sampled_ancestors_found(
    store: &Store,
    found: &[SpanRecord],
    spans: &mut [Map<String, Value>],
) -> Result<(), ApiError> {
    let mut traces: HashMap<[u8; 16], HashMap<[u8; 8], [u8; 8]>> = HashMap::new();
    for (s, span) in found.iter().zip(spans) {
        let may_change = s.parent_span_id.is_some()
            && (span["coverage"] == NO_CPU || span["coverage"] == NO_SAMPLES);
        if !may_change {
            continue;
        }
        let ancestors = match traces.entry(s.trace_id) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => {
                let records = store.trace(&s.trace_id)?;
                let mut sampled = HashSet::new();
                for r in records.iter().take(crate::api::MAX_TRACE_SPANS) {
                    if store.has_samples(&r.span_id)? {
                        sampled.insert(r.span_id);
                    }
                }
                let ancestors = sampled_ancestors(&records, &sampled);
                new.insert(seen_unlabelled_elsewhere(store, &records, ancestors)?)
            }
        };
        point_to_sampled_ancestor(span, ancestors.get(&s.span_id));
    }
    Ok(())
}

/// Spans of the same service and name that [`seen_unlabelled_elsewhere`] looks at: the
/// longest this many...
const SAME_NAME_SPANS: usize = 50;
/// ...within this long of the span (either side), in ns.
const SAME_NAME_WITHIN_NS: u64 = 15 * 60 * 1_000_000_000;

/// `ancestors` ([`sampled_ancestors`] of `records`) less the spans whose name has samples in
/// other traces: one trace cannot tell a profiler that labels only the first span of a request
/// from a request whose later spans all missed their samples (a Go handler whose one
/// `sortWork` span was not sampled, where every other `sortWork` span is). A span stays
/// pointed to its ancestor when none of the longest [`SAME_NAME_SPANS`] spans of its service
/// and name within [`SAME_NAME_WITHIN_NS`] of it has a sample of any type.
fn seen_unlabelled_elsewhere(
    store: &Store,
    records: &[SpanRecord],
    mut ancestors: HashMap<[u8; 8], [u8; 8]>,
) -> Result<HashMap<[u8; 8], [u8; 8]>, ApiError> {
    let mut never_sampled: HashMap<(&str, &str), bool> = HashMap::new();
    for s in records {
        if !ancestors.contains_key(&s.span_id) {
            continue;
        }
        let key = (s.service.as_str(), s.name.as_str());
        let never = match never_sampled.get(&key) {
            Some(&never) => never,
            None => {
                let q = SpanQuery {
                    service: Some(s.service.clone()),
                    name: Some(s.name.clone()),
                    from_ns: s.start_ns.saturating_sub(SAME_NAME_WITHIN_NS),
                    to_ns: s.end_ns.saturating_add(SAME_NAME_WITHIN_NS),
                    limit: SAME_NAME_SPANS,
                    ..Default::default()
                };
                let mut never = true;
                for other in store.search_spans(&q)? {
                    if store.has_samples(&other.span_id)? {
                        never = false;
                        break;
                    }
                }
                never_sampled.insert(key, never);
                never
            }
        };
        if !never {
            ancestors.remove(&s.span_id);
        }
    }
    Ok(ancestors)
}

/// For the spans of one trace (`records`, its stored spans; `sampled`, those with samples)
/// whose samples, if any, are an ancestor's: each with its nearest ancestor that has samples.
/// Only spans of a service none of whose sampled spans in the trace has a parent of the same
/// service are: its profiler labels only the first span of each visit to the service.
/// Ancestors are walked within the service (a parent of another service ends the walk), and
/// each span once, as in [`depths`].
fn sampled_ancestors(
    records: &[SpanRecord],
    sampled: &HashSet<[u8; 8]>,
) -> HashMap<[u8; 8], [u8; 8]> {
    let by_id: HashMap<[u8; 8], &SpanRecord> = records.iter().map(|s| (s.span_id, s)).collect();
    // A span's parent in its own service: none for a local root.
    let local_parent = |s: &SpanRecord| {
        s.parent_span_id
            .and_then(|p| by_id.get(&p).copied())
            .filter(|p| p.service == s.service)
    };
    let labels_below_first: HashSet<&str> = records
        .iter()
        .filter(|s| sampled.contains(&s.span_id) && local_parent(s).is_some())
        .map(|s| s.service.as_str())
        .collect();
    // Each span's nearest sampled ancestor in its service, or none.
    let mut nearest: HashMap<[u8; 8], Option<[u8; 8]>> = HashMap::with_capacity(records.len());
    let mut path: Vec<[u8; 8]> = Vec::new();
    for s in records {
        let mut at = s;
        let found = loop {
            if let Some(&n) = nearest.get(&at.span_id) {
                break n;
            }
            // A parent cycle: its spans have none.
            if path.len() > records.len() {
                break None;
            }
            path.push(at.span_id);
            match local_parent(at) {
                None => break None,
                Some(p) if sampled.contains(&p.span_id) => break Some(p.span_id),
                Some(p) => at = p,
            }
        };
        // Every span on the path is without samples but perhaps its first: each has `found`.
        for id in path.drain(..) {
            nearest.insert(id, found);
        }
    }
    records
        .iter()
        .filter(|s| !sampled.contains(&s.span_id))
        .filter(|s| !labels_below_first.contains(s.service.as_str()))
        .filter_map(|s| Some((s.span_id, nearest.get(&s.span_id).copied().flatten()?)))
        .collect()
}

/// Each span's number of ancestors among the stored spans of its trace. Each span is
/// walked once (a walk stops at a span already counted), so a chain of n spans takes n
/// steps, not n²/2 (a 30,000-span chain took 25 s). A parent cycle counts as a root where
/// the walk that found it entered it.
fn depths(records: &[SpanRecord]) -> HashMap<[u8; 8], usize> {
    let parents: HashMap<[u8; 8], Option<[u8; 8]>> = records
        .iter()
        .map(|s| (s.span_id, s.parent_span_id))
        .collect();
    let mut depth: HashMap<[u8; 8], usize> = HashMap::with_capacity(parents.len());
    let mut path: Vec<[u8; 8]> = Vec::new();
    let mut on_path: HashSet<[u8; 8]> = HashSet::new();
    for s in records {
        // Up from `s` to a span counted already, a root, a span not stored, or a cycle.
        let mut at = s.span_id;
        let base = loop {
            if let Some(&d) = depth.get(&at) {
                break d + 1;
            }
            if !on_path.insert(at) {
                break 0; // a cycle: `at` is on the path, so it was pushed; it starts at 0
            }
            path.push(at);
            match parents.get(&at).copied().flatten() {
                Some(p) if parents.contains_key(&p) => at = p,
                _ => break 0,
            }
        };
        // The walk's last span has `base` ancestors counted; each below it one more.
        for (i, id) in path.drain(..).rev().enumerate() {
            depth.insert(id, base + i);
        }
        on_path.clear();
    }
    depth
}

/// `key=value`, `key!=value`, `key=~regex` or `key!~regex` split at its first operator, the
/// key not empty; `None` without one.
pub(super) fn comparison(pair: &str) -> Option<(&str, CompareOp, &str)> {
    let (at, text, op) = (0..pair.len())
        .filter(|&at| pair.is_char_boundary(at))
        .find_map(|at| {
            CompareOp::ALL
                .iter()
                .find(|(text, _)| pair[at..].starts_with(text))
                .map(|&(text, op)| (at, text, op))
        })?;
    (at > 0).then(|| (&pair[..at], op, &pair[at + text.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_split_at_their_first_operator() {
        use CompareOp::{Eq, Ge, Gt, Le, Lt, Ne, Nre, Re};
        assert_eq!(
            comparison("http.route=/cart"),
            Some(("http.route", Eq, "/cart"))
        );
        assert_eq!(comparison("a=b=c"), Some(("a", Eq, "b=c")));
        assert_eq!(comparison("host=~web-.*"), Some(("host", Re, "web-.*")));
        assert_eq!(comparison("host!=web-1"), Some(("host", Ne, "web-1")));
        assert_eq!(comparison("host!~web-.*"), Some(("host", Nre, "web-.*")));
        assert_eq!(comparison("k="), Some(("k", Eq, "")));
        assert_eq!(comparison("code>=500"), Some(("code", Ge, "500")));
        assert_eq!(comparison("code>500"), Some(("code", Gt, "500")));
        assert_eq!(comparison("code<=5"), Some(("code", Le, "5")));
        assert_eq!(comparison("code<5"), Some(("code", Lt, "5")));
        // The first operator decides: a value may hold another.
        assert_eq!(comparison("q=a>b"), Some(("q", Eq, "a>b")));
        assert_eq!(comparison("é=ü"), Some(("é", Eq, "ü")));
        for none in ["host", "=x", "!=x", ""] {
            assert_eq!(comparison(none), None, "{none}");
        }
    }

    #[test]
    fn depths_count_stored_ancestors_whatever_the_order_and_survive_cycles() {
        let span = |id: u8, parent: Option<u8>| SpanRecord {
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            ..Default::default()
        };
        // 1 ← 2 ← 3 ← 4, 2 ← 5; 6's parent is not stored; 7 ↔ 8 a cycle; listed leaves first.
        let records = [
            span(4, Some(3)),
            span(5, Some(2)),
            span(3, Some(2)),
            span(2, Some(1)),
            span(1, None),
            span(6, Some(9)),
            span(7, Some(8)),
            span(8, Some(7)),
        ];
        let d = depths(&records);
        let of = |id: u8| d[&[id; 8]];
        assert_eq!(
            [of(1), of(2), of(3), of(4), of(5), of(6)],
            [0, 1, 2, 3, 2, 0]
        );
        // The walk from 7 enters the cycle at 7: 8 is its root, 7 one below.
        assert_eq!((of(8), of(7)), (0, 1));
        // A long chain, each span's parent listed after it.
        let chain: Vec<SpanRecord> = (0..50_000u32)
            .map(|i| SpanRecord {
                span_id: u64::from(i + 1).to_be_bytes(),
                parent_span_id: (i > 0).then(|| u64::from(i).to_be_bytes()),
                ..Default::default()
            })
            .rev()
            .collect();
        let d = depths(&chain);
        assert_eq!(d[&50_000u64.to_be_bytes()], 49_999);
        assert_eq!(d[&1u64.to_be_bytes()], 0);
    }

    #[test]
    fn samples_on_the_first_span_of_a_service_only_are_pointed_to() {
        let span = |id: u8, parent: Option<u8>, service: &str| SpanRecord {
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            service: service.into(),
            ..Default::default()
        };
        let ids = |v: &[u8]| v.iter().map(|i| [*i; 8]).collect::<HashSet<_>>();
        // shop: 1 ← 2 ← 3, 1 ← 4; 3 calls db (5 ← 6), which calls shop again (7 ← 8).
        let records = [
            span(3, Some(2), "shop"),
            span(2, Some(1), "shop"),
            span(1, None, "shop"),
            span(4, Some(1), "shop"),
            span(5, Some(3), "db"),
            span(6, Some(5), "db"),
            span(7, Some(6), "shop"),
            span(8, Some(7), "shop"),
        ];
        // Samples on the first span of each visit: every span below one points to it; the
        // walk does not cross into another service.
        let got = sampled_ancestors(&records, &ids(&[1, 5, 7]));
        let want: HashMap<[u8; 8], [u8; 8]> = [(2, 1), (3, 1), (4, 1), (6, 5), (8, 7)]
            .map(|(s, a)| ([s; 8], [a; 8]))
            .into();
        assert_eq!(got, want);
        // A sampled span below the first in shop: shop's profiler labels every span, so its
        // unsampled spans waited; db's are still pointed up.
        let got = sampled_ancestors(&records, &ids(&[1, 2, 5]));
        let want: HashMap<[u8; 8], [u8; 8]> = [([6; 8], [5; 8])].into();
        assert_eq!(got, want);
        // A parent cycle: the walk ends, and nothing is pointed to (with nothing sampled, or
        // with a sampled span that has a parent of its service, so is below a first).
        let cycle = [span(1, Some(2), "a"), span(2, Some(1), "a")];
        assert!(sampled_ancestors(&cycle, &ids(&[])).is_empty());
        assert!(sampled_ancestors(&cycle, &ids(&[1])).is_empty());
        // A long chain below a sampled root: each span walked once (not n²/2 steps).
        let chain: Vec<SpanRecord> = (0..50_000u32)
            .map(|i| SpanRecord {
                span_id: u64::from(i + 1).to_be_bytes(),
                parent_span_id: (i > 0).then(|| u64::from(i).to_be_bytes()),
                ..Default::default()
            })
            .rev()
            .collect();
        let root = 1u64.to_be_bytes();
        let got = sampled_ancestors(&chain, &[root].into());
        assert_eq!(got.len(), 49_999);
        assert!(got.values().all(|a| *a == root));
    }

    fn coverage(duration_ms: u64, covered_ms: Option<u64>) -> Coverage {
        const MS: u64 = 1_000_000;
        let period = 10 * MS;
        let watched = covered_ms.unwrap_or(duration_ms) * MS;
        Coverage {
            samples: 0,
            value: 0,
            duration_ns: Some(duration_ms * MS),
            self_ns: Some(duration_ms * MS),
            period: Some(period as i64),
            possible_samples: Some(watched as f64 / period as f64),
            covered_ns: covered_ms.map(|c| c * MS),
            between_windows: false,
            after_last_window: false,
            profile_type: ProfileTypeId::parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds"),
        }
    }

    #[test]
    fn a_verdict_tells_waiting_from_too_short_from_unwatched() {
        for (duration, covered, want) in [
            (200, Some(200), NO_CPU),
            (200, Some(120), NO_CPU),
            // Five periods watched, but three quarters of the span not.
            (200, Some(50), PARTLY_PROFILED),
            (3, Some(3), TOO_SHORT),
            (200, Some(5), PARTLY_PROFILED),
            (200, Some(0), NOT_PROFILED),
            (3, Some(0), NOT_PROFILED),
        ] {
            let c = coverage(duration, covered);
            assert_eq!(
                verdict(&c, true),
                want,
                "{duration} ms, {covered:?} ms covered"
            );
        }
        let sampled = Coverage {
            value: 10,
            ..coverage(200, None)
        };
        assert_eq!(verdict(&sampled, true), SAMPLED);
        // Windows end just before it and begin just after: it fell into the gap of a pull
        // profiler that was running.
        let between = Coverage {
            between_windows: true,
            ..coverage(200, Some(0))
        };
        assert_eq!(verdict(&between, true), PARTLY_PROFILED);
        // Of a type other than CPU time (wall-clock time, a count), no sample is no sample.
        let wall = Coverage {
            profile_type: ProfileTypeId::parse("wall:wall:nanoseconds:wall:nanoseconds"),
            ..coverage(200, Some(200))
        };
        assert_eq!(verdict(&wall, true), NO_SAMPLES);
        // A parent whose children ran all but 5 ms of its 200: its own time is short, and
        // profiles watched all of it.
        let parent = Coverage {
            self_ns: Some(5_000_000),
            possible_samples: Some(0.5),
            ..coverage(200, Some(5))
        };
        assert_eq!(verdict(&parent, true), TOO_SHORT);
        // No profile reaches its time yet: to come, while the span is recent.
        let pending = Coverage {
            after_last_window: true,
            period: None,
            possible_samples: None,
            ..coverage(200, Some(0))
        };
        assert_eq!(verdict(&pending, true), PENDING);
        assert_eq!(verdict(&pending, false), NOT_PROFILED);
        let sampled_after = Coverage {
            value: 10,
            ..pending
        };
        assert_eq!(verdict(&sampled_after, true), SAMPLED);
    }
}
