//! Finding spans over the remote pair (`/api/v1/spans`, `/api/v1/span-points`,
//! `/api/v1/span-names`): the spans from one TraceQL search on Tempo (the filters said as
//! TraceQL; one it cannot say is a 400), each span's CPU from Pyroscope (`span_values.rs`),
//! sorted and paged as the embedded store does, the page's spans read whole from their traces.

use std::collections::HashMap;
use std::sync::Arc;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::{CompareOp, SpanQuery, SpanRecord, TextField};
use spanprof_store::store::{SpanMatch, SpanMatches, SpanOrder};

use super::client::Peer;
use super::span_filter::{read_search, SEARCH_LIMIT, SEARCH_SPSS};
use super::span_values::{span_values, ValuesFrom};
use super::views::{span_json, view_type, views_note, with_values_from};
use super::{Remote, RemoteError};
use crate::answer::{span_points_json, ApiError};

/// Traces of a page read from Tempo at once.
const CONCURRENT_TRACES: usize = 8;
/// Most traces `group=trace` reads from Tempo for one answer (each is one call).
pub(super) const MAX_GROUPED_TRACES: usize = 2_000;

/// `s` as a TraceQL string literal.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// An attribute name TraceQL reads unquoted; others cannot be said here (a 400).
fn attribute_name(scope: &str, key: &str) -> Result<String, ApiError> {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | ':'));
    if !plain {
        return Err(ApiError::bad_request(format!(
            "attribute {key:?}: the remote backend asks Tempo in TraceQL, which this \
             version writes only for names of letters, digits and _ . - / :"
        )));
    }
    Ok(format!("{scope}{key}"))
}

/// The TraceQL of `q`'s filters (its range goes as the search's `start` and `end`). The
/// service is always compared (`=~ ".*"` when not given) so that Tempo lists it with each
/// span; a span whose resource has no `service.name` is then not found.
pub fn span_traceql(q: &SpanQuery) -> Result<String, ApiError> {
    let mut parts = Vec::new();
    match &q.service {
        Some(s) => parts.push(format!("resource.service.name = {}", quote(s))),
        None => parts.push("resource.service.name =~ \".*\"".to_owned()),
    }
    if let Some(n) = &q.name {
        parts.push(format!("name = {}", quote(n)));
    }
    if let Some(d) = q.min_duration_ns {
        parts.push(format!("duration >= {d}ns"));
    }
    if let Some(d) = q.max_duration_ns {
        parts.push(format!("duration <= {d}ns"));
    }
    if let Some(code) = q.status_code {
        parts.push(format!(
            "status = {}",
            spanprof_store::spans::status_name(code)
        ));
    }
    for (scope, pairs) in [
        ("span.", &q.attributes),
        ("resource.", &q.resource),
        (".", &q.either),
    ] {
        for (k, v) in pairs {
            parts.push(format!("{} = {}", attribute_name(scope, k)?, quote(v)));
        }
    }
    for c in &q.conditions {
        let (op, value) = c.comparison();
        let (field, bare) = match &c.field {
            TextField::Service => ("resource.service.name".to_owned(), false),
            TextField::Name => ("name".to_owned(), false),
            TextField::Status => ("status".to_owned(), true),
            TextField::StatusMessage => ("statusMessage".to_owned(), false),
            TextField::Kind => ("kind".to_owned(), true),
            TextField::Attribute(k) => (attribute_name("span.", k)?, false),
            TextField::Resource(k) => (attribute_name("resource.", k)?, false),
            TextField::Either(k) => (attribute_name(".", k)?, false),
        };
        let number = matches!(
            op,
            CompareOp::Gt | CompareOp::Ge | CompareOp::Lt | CompareOp::Le
        );
        let value = if bare || number { value } else { quote(&value) };
        parts.push(format!("{field} {op} {value}"));
    }
    Ok(format!("{{{}}}", parts.join(" && ")))
}

/// Tempo's `start` and `end` (unix s) of `[from, to]` ns: an open end (`u64::MAX`) is now,
/// not a time 500 years ahead.
fn search_range(from_ns: u64, to_ns: u64) -> (u64, u64) {
    let now = u64::try_from(crate::clock::now_ns()).unwrap_or(0);
    let start = from_ns / 1_000_000_000;
    let end = to_ns.min(now).div_ceil(1_000_000_000).max(start);
    (start, end)
}

/// Every span of `q` Tempo finds (at most its search caps: `more` says so), as the embedded
/// store's matches: overlapping `[from, to]`, names and services interned.
pub(super) async fn matches(remote: &Remote, q: &SpanQuery) -> Result<SpanMatches, ApiError> {
    let traceql = span_traceql(q)?;
    let (start, end) = search_range(q.from_ns, q.to_ns);
    let path = format!(
        "/api/search?q={}&limit={SEARCH_LIMIT}&spss={SEARCH_SPSS}&start={start}&end={end}",
        utf8_percent_encode(&traceql, NON_ALPHANUMERIC)
    );
    let bytes = remote
        .client
        .get(Peer::Tempo, &path, "application/json", false)
        .await?;
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|e| RemoteError::malformed(Peer::Tempo, "/api/search", e))?;
    let read = read_search(&answer, SEARCH_LIMIT)?;
    let mut found = SpanMatches {
        more: read.capped.is_some(),
        ..Default::default()
    };
    let mut interned: HashMap<String, u32> = HashMap::new();
    let mut intern = |names: &mut Vec<String>, s: &str| -> u32 {
        *interned.entry(s.to_owned()).or_insert_with(|| {
            names.push(s.to_owned());
            (names.len() - 1) as u32
        })
    };
    for m in read.spans {
        let end = m.start_ns.saturating_add(m.duration_ns);
        let kept = m.start_ns <= q.to_ns
            && end >= q.from_ns
            && q.min_duration_ns.is_none_or(|d| m.duration_ns >= d)
            && q.max_duration_ns.is_none_or(|d| m.duration_ns <= d);
        if !kept {
            continue;
        }
        let name = intern(&mut found.names, &m.name);
        let service = intern(&mut found.names, m.service.as_deref().unwrap_or(""));
        found.matches.push(SpanMatch {
            span_id: m.span_id,
            trace_id: m.trace_id,
            start_ns: m.start_ns,
            duration_ns: m.duration_ns,
            name,
            service,
            cpu: 0,
        });
    }
    Ok(found)
}

/// The `[from, to]` (ms) the matches' samples may be in: their spans' times.
fn range_ms(m: &[SpanMatch]) -> (i64, i64) {
    let from = m.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let to = m
        .iter()
        .map(|s| s.start_ns.saturating_add(s.duration_ns))
        .max()
        .unwrap_or(from);
    ((from / 1_000_000) as i64, to.div_ceil(1_000_000) as i64)
}

/// Sets `m`'s `cpu` to each span's own value of `t`.
async fn add_cpu(
    remote: &Arc<Remote>,
    t: &ProfileTypeId,
    m: &mut [SpanMatch],
) -> Result<ValuesFrom, ApiError> {
    let ids: Vec<[u8; 8]> = m.iter().map(|s| s.span_id).collect();
    let (values, from) = span_values(remote, t, &ids, range_ms(m)).await?;
    for (s, v) in m.iter_mut().zip(values) {
        s.cpu = i64::try_from(v).unwrap_or(i64::MAX);
    }
    Ok(from)
}

/// The spans of `page` read whole from their traces in Tempo, by span id.
async fn records(
    remote: &Arc<Remote>,
    page: &[SpanMatch],
) -> Result<HashMap<[u8; 8], SpanRecord>, ApiError> {
    let mut traces: Vec<[u8; 16]> = page.iter().map(|s| s.trace_id).collect();
    traces.sort_unstable();
    traces.dedup();
    let read = traces_of(remote, &traces).await?;
    Ok(read
        .into_iter()
        .flat_map(|(_, spans)| spans)
        .map(|s| (s.span_id, s))
        .collect())
}

/// Each of `traces` read from Tempo (`CONCURRENT_TRACES` at once), in no given order; a
/// trace Tempo does not know has no spans.
pub(super) async fn traces_of(
    remote: &Arc<Remote>,
    traces: &[[u8; 16]],
) -> Result<Vec<([u8; 16], Vec<SpanRecord>)>, ApiError> {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_TRACES));
    let mut calls = tokio::task::JoinSet::new();
    for &id in traces {
        let (remote, permits) = (Arc::clone(remote), Arc::clone(&permits));
        calls.spawn(async move {
            let _permit = permits.acquire_owned().await;
            remote.trace(&id).await.map(|spans| (id, spans))
        });
    }
    let mut out = Vec::with_capacity(traces.len());
    while let Some(done) = calls.join_next().await {
        out.push(done.map_err(|e| ApiError::internal(format!("a trace: {e}")))??);
    }
    Ok(out)
}

/// A span Tempo's search matched but its trace (read cut at `MAX_TRACE_SPANS`) does not
/// hold: the fields the search gave.
fn matched_only(m: &SpanMatch, names: &[String]) -> SpanRecord {
    SpanRecord {
        trace_id: m.trace_id,
        span_id: m.span_id,
        name: names[m.name as usize].clone(),
        service: names[m.service as usize].clone(),
        start_ns: m.start_ns,
        end_ns: m.start_ns.saturating_add(m.duration_ns),
        ..Default::default()
    }
}

/// `/api/v1/spans` over the remote (spans, not `group=trace`).
pub async fn search(
    remote: &Arc<Remote>,
    q: &SpanQuery,
    (order, descending): (SpanOrder, bool),
    (offset, limit): (usize, usize),
    wanted: Option<&str>,
    mut body: Value,
) -> Result<Value, ApiError> {
    let mut found = matches(remote, q).await?;
    let t = view_type(remote, wanted).await?;
    let mut from = ValuesFrom::NoSamples;
    if order == SpanOrder::Cpu {
        if let Some(t) = &t {
            from = add_cpu(remote, t, &mut found.matches).await?;
        }
    }
    found.sort(order, descending);
    let end = found.matches.len().min(offset.saturating_add(limit));
    let mut page: Vec<SpanMatch> = found.matches.get(offset..end).unwrap_or_default().to_vec();
    if order != SpanOrder::Cpu {
        if let Some(t) = &t {
            from = add_cpu(remote, t, &mut page).await?;
        }
    }
    let mut whole = records(remote, &page).await?;
    let spans: Vec<Value> = page
        .iter()
        .map(|m| {
            let record = whole
                .remove(&m.span_id)
                .unwrap_or_else(|| matched_only(m, &found.names));
            Value::Object(span_json(&record, t.as_ref(), m.cpu.max(0) as u64))
        })
        .collect();
    body["count"] = found.matches.len().into();
    body["more"] = found.more.into();
    body["spans"] = spans.into();
    body["remote"] = with_values_from(search_note(), from);
    Ok(body)
}

/// What a remote span list cannot hold, said in it.
pub(super) fn search_note() -> Value {
    let mut note = views_note();
    if let Some(list) = note["not_available"].as_array_mut() {
        list.push(json!(
            "more: Tempo's search is capped (limit, spss); count is then a lower bound"
        ));
    }
    note
}

/// `/api/v1/span-points` over the remote: the `limit` longest matches with their CPU, in
/// start order.
pub async fn points(
    remote: &Arc<Remote>,
    q: &SpanQuery,
    limit: usize,
    wanted: Option<&str>,
) -> Result<Value, ApiError> {
    let mut found = matches(remote, q).await?;
    let count = found.matches.len();
    found.sort(SpanOrder::Duration, true);
    found.matches.truncate(limit);
    let t = view_type(remote, wanted).await?;
    let mut from = ValuesFrom::NoSamples;
    if let Some(t) = &t {
        from = add_cpu(remote, t, &mut found.matches).await?;
    }
    let any = found.matches.iter().any(|m| m.cpu > 0);
    let t = t.filter(|_| any);
    found.sort(SpanOrder::Start, false);
    let mut body = span_points_json(count, &found, t.as_ref());
    body["remote"] = with_values_from(search_note(), from);
    Ok(body)
}

/// `/api/v1/span-names` over the remote: Tempo's values of the `name` tag (of the service's
/// spans when given, over `[from, to]` ns) containing `text` (ASCII case ignored), those
/// starting with it first, as the embedded store orders them.
pub async fn names(
    remote: &Remote,
    service: Option<&str>,
    (from_ns, to_ns): (u64, u64),
    text: &str,
    limit: usize,
) -> Result<Value, ApiError> {
    let (start, end) = search_range(from_ns, to_ns);
    let mut path = format!("/api/v2/search/tag/name/values?start={start}&end={end}");
    if let Some(s) = service {
        let q = format!("{{resource.service.name = {}}}", quote(s));
        path.push_str(&format!("&q={}", utf8_percent_encode(&q, NON_ALPHANUMERIC)));
    }
    let call = "/api/v2/search/tag/name/values";
    let bytes = remote
        .client
        .get(Peer::Tempo, &path, "application/json", false)
        .await?;
    let answer: Value =
        serde_json::from_slice(&bytes).map_err(|e| RemoteError::malformed(Peer::Tempo, call, e))?;
    let values = answer["tagValues"]
        .as_array()
        .ok_or_else(|| RemoteError::malformed(Peer::Tempo, call, "no tagValues list"))?;
    let needle = text.to_ascii_lowercase();
    let mut names: Vec<String> = values
        .iter()
        .filter_map(|v| v.as_str().or_else(|| v["value"].as_str()))
        .filter(|n| n.to_ascii_lowercase().contains(&needle))
        .map(str::to_owned)
        .collect();
    names.sort_by(|a, b| {
        let starts = |n: &str| !n.to_ascii_lowercase().starts_with(&needle);
        starts(a).cmp(&starts(b)).then(a.cmp(b))
    });
    names.dedup();
    let more = names.len() > limit;
    names.truncate(limit);
    Ok(json!({ "names": names, "more": more }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_store::spans::TextCondition;

    #[test]
    fn filters_are_said_in_traceql_and_what_it_cannot_say_is_refused() {
        let q = SpanQuery {
            name: Some("GET /x".into()),
            min_duration_ns: Some(1_000_000),
            status_code: Some(2),
            attributes: vec![("http.route".into(), "/cart".into())],
            conditions: vec![
                TextCondition::new(TextField::Kind, CompareOp::Eq, "server").unwrap(),
                TextCondition::new(TextField::Attribute("code".into()), CompareOp::Ge, "500")
                    .unwrap(),
                TextCondition::new(TextField::Name, CompareOp::Re, "a\"b.*").unwrap(),
            ],
            ..Default::default()
        };
        assert_eq!(
            span_traceql(&q).unwrap(),
            "{resource.service.name =~ \".*\" && name = \"GET /x\" && duration >= 1000000ns \
             && status = error && span.http.route = \"/cart\" && kind = server \
             && span.code >= 500 && name =~ \"a\\\"b.*\"}"
        );
        let odd = SpanQuery {
            resource: vec![("host name".into(), "a".into())],
            ..Default::default()
        };
        let e = span_traceql(&odd).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(e.message.contains("host name"), "{}", e.message);
    }
}
