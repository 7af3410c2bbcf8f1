//! Spans with their CPU: `/api/v1/spans` (search) and `/api/v1/traces/{trace_id}`.

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::{SpanQuery, SpanRecord};
use spanprof_store::store::{Coverage, Selection, Store};

use super::error::{blocking, ApiError};
use super::params::{self, QueryParams};
use super::selection::{check_profile_type, durations_in_order, span_range, time_range};
use crate::AppState;

/// Spans a search returns when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;
/// Most spans one search returns (each costs a coverage lookup).
const MAX_LIMIT: usize = 10_000;

/// Verdicts of [`verdict`], for clients to compare against.
pub const SAMPLED: &str = "sampled";
/// The span ran long enough to be sampled but no sample landed in it (it waited).
pub const NO_CPU: &str = "no CPU used";
/// Like [`NO_CPU`] for a type that does not measure CPU.
pub const NO_SAMPLES: &str = "no samples";
/// Shorter than one sampling period: no samples is expected, not a finding.
pub const TOO_SHORT: &str = "shorter than the sampling period";
/// No profile of the span's service covers its time.
pub const NOT_PROFILED: &str = "no profile covers the span";
/// Profiles cover less than one sampling period of the span, or less than half of it: it
/// fell (mostly) between two windows of a pull profiler, and no sample in the part watched
/// says little of the rest.
pub const PARTLY_PROFILED: &str = "profiles cover too little of the span";

/// What a span's coverage means, in words.
pub fn verdict(c: &Coverage) -> &'static str {
    // "No CPU used" only where samples are taken on a CPU (CPU time or CPU sample counts;
    // not wall-clock time, not allocations).
    let cpu_type = c
        .profile_type
        .as_ref()
        .is_some_and(ProfileTypeId::samples_cpu);
    if c.value > 0 {
        return SAMPLED;
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

/// The coverage lookups of one request: the profile type asked for.
struct CoverageOf {
    profile_type: Option<String>,
}

impl CoverageOf {
    /// Checks `type` as `span_coverage` resolves it (over every service).
    fn new(store: &Store, profile_type: Option<(String, String)>) -> Result<Self, ApiError> {
        if let Some((shown, wanted)) = &profile_type {
            check_profile_type(store, None, shown, wanted)?;
        }
        Ok(CoverageOf {
            profile_type: profile_type.map(|(_, w)| w),
        })
    }

    /// The spans as JSON, each with its own samples (children excluded) and coverage.
    fn spans_json(
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
        let attributes: Map<String, Value> = span
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let v = json!({
            "trace_id": to_hex(&span.trace_id),
            "span_id": to_hex(&span.span_id),
            "parent_span_id": span.parent_span_id.map(|p| to_hex(&p)),
            "service": span.service,
            "name": span.name,
            "kind": span.kind,
            "status_code": span.status_code,
            "start_ns": span.start_ns.to_string(),
            "duration_ns": span.duration_ns(),
            "self_ns": c.self_ns,
            "profile_type": c.profile_type.as_ref().map(ToString::to_string),
            "unit": c.profile_type.as_ref().map(|t| t.sample_unit.as_str()),
            "total": c.value,
            "samples": c.samples,
            "possible_samples": c.possible_samples,
            "covered_ns": c.covered_ns,
            "period": c.period,
            "has_samples": store.has_samples(&span.span_id)?,
            "coverage": verdict(c),
            "attributes": attributes,
        });
        let Value::Object(map) = v else {
            unreachable!("json! of an object")
        };
        Ok(map)
    }
}

fn type_param(p: &QueryParams) -> Result<Option<(String, String)>, ApiError> {
    Ok(p.one("type")?
        .map(|x| (x.shown.to_owned(), x.value.to_owned())))
}

/// `GET /api/v1/spans?service&name&min_duration&max_duration&from&to&limit&type` (`span_name`
/// is taken for `name`, as the profile endpoints call it).
pub async fn search(
    State(app): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/spans",
        &[
            "service",
            "name",
            "span_name",
            "min_duration",
            "max_duration",
            "from",
            "to",
            "limit",
            "type",
        ],
    )?;
    let (from_ns, to_ns) = span_range(time_range(&p, params::now_ns())?);
    let name = match (p.one("name")?, p.one("span_name")?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "name and span_name are the same parameter here: give one",
            ))
        }
        (a, b) => a.or(b).map(|x| x.value.to_owned()),
    };
    let q = SpanQuery {
        service: p.one("service")?.map(|x| x.value.to_owned()),
        name,
        min_duration_ns: p.parsed("min_duration", params::duration)?,
        max_duration_ns: p.parsed("max_duration", params::duration)?,
        from_ns,
        to_ns,
        limit: p
            .parsed("limit", params::count(1, MAX_LIMIT))?
            .unwrap_or(DEFAULT_LIMIT),
        attributes: Vec::new(),
    };
    durations_in_order(&p, q.min_duration_ns, q.max_duration_ns)?;
    let profile_type = type_param(&p)?;
    let service_param = p.one("service")?.map(|x| x.shown.to_owned());
    let spans = blocking(&app, move |store| {
        let found = store.search_spans(&q)?;
        if found.is_empty() {
            if let (Some(shown), Some(service)) = (&service_param, &q.service) {
                unknown_service(store, shown, service)?;
            }
        }
        let coverage = CoverageOf::new(store, profile_type)?;
        Ok(coverage
            .spans_json(store, &found)?
            .into_iter()
            .map(Value::Object)
            .collect::<Vec<Value>>())
    })
    .await?;
    Ok(axum::Json(json!({ "spans": spans })).into_response())
}

/// 400 when `service` (parameter `shown`) has neither spans nor profiles at any time: a typo
/// in a span search answered "no span matches", as if the service had no such spans. (A
/// search that found nothing asks this; a service without profiles costs a read of every
/// span once more.)
fn unknown_service(store: &Store, shown: &str, service: &str) -> Result<(), ApiError> {
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
    State(app): State<AppState>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/traces/{trace_id}", &["type"])?;
    let trace_id = params::trace_id(&id).map_err(|r| ApiError::bad_param("trace_id", &id, r))?;
    // Ids are answered in lower case, whatever case they were asked in.
    let id = to_hex(&trace_id);
    let profile_type = type_param(&p)?;
    let body = blocking(&app, move |store| {
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
        let coverage = CoverageOf::new(store, profile_type)?;
        let start = records.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let end = records.iter().map(|s| s.end_ns).max().unwrap_or(start);
        let depths = depths(&records);
        let (mut total, mut samples) = (0i64, 0u64);
        let shown = records.len().min(crate::api::MAX_TRACE_SPANS);
        let mut spans = Vec::with_capacity(shown);
        for (s, mut span) in records
            .iter()
            .zip(coverage.spans_json(store, &records[..shown])?)
        {
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
    let mut on_path: std::collections::HashSet<[u8; 8]> = std::collections::HashSet::new();
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

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(verdict(&c), want, "{duration} ms, {covered:?} ms covered");
        }
        let sampled = Coverage {
            value: 10,
            ..coverage(200, None)
        };
        assert_eq!(verdict(&sampled), SAMPLED);
        // Windows end just before it and begin just after: it fell into the gap of a pull
        // profiler that was running.
        let between = Coverage {
            between_windows: true,
            ..coverage(200, Some(0))
        };
        assert_eq!(verdict(&between), PARTLY_PROFILED);
        // Of a type other than CPU time (wall-clock time, a count), no sample is no sample.
        let wall = Coverage {
            profile_type: ProfileTypeId::parse("wall:wall:nanoseconds:wall:nanoseconds"),
            ..coverage(200, Some(200))
        };
        assert_eq!(verdict(&wall), NO_SAMPLES);
        // A parent whose children ran all but 5 ms of its 200: its own time is short, and
        // profiles watched all of it.
        let parent = Coverage {
            self_ns: Some(5_000_000),
            possible_samples: Some(0.5),
            ..coverage(200, Some(5))
        };
        assert_eq!(verdict(&parent), TOO_SHORT);
    }
}
