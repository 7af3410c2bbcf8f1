//! `/api/v1/spans?group=trace` over the remote pair: the traces of the spans Tempo's search
//! matches, each read whole from Tempo (its spans in the range: root, services, count, start
//! and duration), its CPU the sum of its spans' own values from Pyroscope (`span_values.rs`),
//! sorted and paged as the embedded store does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use spanprof_store::spans::{SpanQuery, SpanRecord};
use spanprof_store::store::{sort_trace_groups, SpanOrder, TraceGroup};

use super::span_list::{matches, search_note, traces_of, MAX_GROUPED_TRACES};
use super::span_values::{span_values, ValuesFrom};
use super::views::{view_type, with_values_from};
use super::Remote;
use crate::answer::{put_trace_page, ApiError};

/// A trace's spans in `[from, to]` ns (overlapping it, as the embedded store keeps them).
fn in_range(spans: Vec<SpanRecord>, q: &SpanQuery) -> Vec<SpanRecord> {
    spans
        .into_iter()
        .filter(|s| s.start_ns <= q.to_ns && s.end_ns >= q.from_ns)
        .collect()
}

/// The group of one trace's spans (CPU left 0): its root is the earliest span whose parent
/// is not among them.
fn group(trace_id: [u8; 16], spans: &[SpanRecord], matched: usize) -> TraceGroup {
    let ids: HashSet<[u8; 8]> = spans.iter().map(|s| s.span_id).collect();
    let root = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none_or(|p| !ids.contains(&p)))
        .min_by_key(|s| (s.start_ns, s.span_id))
        .map(|r| (r.name.clone(), r.service.clone()));
    let mut services: Vec<String> = spans.iter().map(|s| s.service.clone()).collect();
    services.sort();
    services.dedup();
    let start = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let end = spans.iter().map(|s| s.end_ns).max().unwrap_or(start);
    TraceGroup {
        trace_id,
        root,
        services,
        spans: ids.len(),
        matched,
        start_ns: start,
        duration_ns: end.saturating_sub(start),
        cpu: 0,
    }
}

/// `/api/v1/spans?group=trace` over the remote: `body` (the page's parameters) with the
/// count, the page of traces and the note of what the remote cannot hold.
pub async fn search(
    remote: &Arc<Remote>,
    q: &SpanQuery,
    (order, descending): (SpanOrder, bool),
    (offset, limit): (usize, usize),
    wanted: Option<&str>,
    mut body: Value,
) -> Result<Value, ApiError> {
    let found = matches(remote, q).await?;
    let mut matched: HashMap<[u8; 16], usize> = HashMap::new();
    for m in &found.matches {
        *matched.entry(m.trace_id).or_default() += 1;
    }
    if matched.len() > MAX_GROUPED_TRACES {
        return Err(ApiError::bad_request(format!(
            "group=trace over the remote backend reads each trace from Tempo: the filters \
             match spans of {} traces, more than {MAX_GROUPED_TRACES}; narrow them (from, \
             to, service, name)",
            matched.len()
        )));
    }
    let ids: Vec<[u8; 16]> = matched.keys().copied().collect();
    let traces = traces_of(remote, &ids).await?;
    let mut groups = Vec::with_capacity(traces.len());
    let mut spans_of: Vec<Vec<[u8; 8]>> = Vec::with_capacity(traces.len());
    for (trace_id, spans) in traces {
        let spans = in_range(spans, q);
        groups.push(group(trace_id, &spans, matched[&trace_id]));
        spans_of.push(spans.iter().map(|s| s.span_id).collect());
    }
    let t = view_type(remote, wanted).await?;
    let mut from = ValuesFrom::NoSamples;
    if let Some(t) = &t {
        let all: Vec<[u8; 8]> = spans_of.iter().flatten().copied().collect();
        let from_ms = groups.iter().map(|g| g.start_ns).min().unwrap_or(0) / 1_000_000;
        let to_ms = groups
            .iter()
            .map(|g| g.start_ns.saturating_add(g.duration_ns))
            .max()
            .unwrap_or(0)
            .div_ceil(1_000_000);
        let (values, how) = span_values(remote, t, &all, (from_ms as i64, to_ms as i64)).await?;
        from = how;
        let mut values = values.into_iter();
        for (g, spans) in groups.iter_mut().zip(&spans_of) {
            g.cpu = values
                .by_ref()
                .take(spans.len())
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
                .fold(0i64, i64::saturating_add);
        }
    }
    sort_trace_groups(&mut groups, order, descending);
    // The embedded answer names the type only when some span of the groups has samples.
    let t = t.filter(|_| groups.iter().any(|g| g.cpu > 0));
    put_trace_page(&mut body, &groups, t.as_ref(), (offset, limit));
    body["more"] = found.more.into();
    body["remote"] = with_values_from(search_note(), from);
    Ok(body)
}
