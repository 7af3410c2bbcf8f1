//! Spans chosen by name and duration (`span_name`, `min_duration`, the percentiles) over the
//! remote pair: one TraceQL search on Tempo for the spans of the name (and service), the
//! percentiles and bounds applied here as the embedded store applies them, the ids then the
//! `span_selector` of Pyroscope's calls.

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;
use spanprof_format::link::parse_id;
use spanprof_store::spans::percentile;
use spanprof_store::store::{Selection, SpanFilter};

use super::client::Peer;
use super::{Remote, RemoteError};
use crate::answer::ApiError;

/// Most traces one search asks for (`limit`), and matched spans per trace (`spss`): spanprof's
/// own Tempo API's caps; a search that reaches either is refused, never answered with part
/// of the spans.
pub(crate) const SEARCH_LIMIT: usize = 10_000;
pub(crate) const SEARCH_SPSS: usize = 1_000;

/// One span a search matched: id, start and duration in ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// Span id.
    pub span_id: [u8; 8],
    /// Its trace's id.
    pub trace_id: [u8; 16],
    /// Its name, when the answer gives it.
    pub name: String,
    /// Its service, when the answer lists `service.name` among the span's attributes (it
    /// does when the query compares it).
    pub service: Option<String>,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// Duration, ns.
    pub duration_ns: u64,
}

/// The TraceQL of the spans of `f`'s name in `sel`'s service: only conditions spanprof's and
/// Tempo's TraceQL both read (`name`, `resource.service.name`).
pub fn traceql(sel: &Selection, f: &SpanFilter) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut parts = Vec::new();
    if let Some(n) = &f.name {
        parts.push(format!("name = {}", quote(n)));
    }
    if let Some(s) = &sel.service {
        parts.push(format!("resource.service.name = {}", quote(s)));
    }
    format!("{{{}}}", parts.join(" && "))
}

impl Remote {
    /// Every span of `f`'s name and `sel`'s service Tempo knows (of every time: the
    /// percentiles are over all of them, as in the embedded store).
    pub async fn search_spans(
        &self,
        sel: &Selection,
        f: &SpanFilter,
    ) -> Result<Vec<Matched>, RemoteError> {
        let q = traceql(sel, f);
        let path = format!(
            "/api/search?q={}&limit={SEARCH_LIMIT}&spss={SEARCH_SPSS}",
            utf8_percent_encode(&q, NON_ALPHANUMERIC)
        );
        let bytes = self
            .client
            .get(Peer::Tempo, &path, "application/json", false)
            .await?;
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|e| RemoteError::malformed(Peer::Tempo, "/api/search", e))?;
        parse_search(&answer)
    }

    /// The ids of the spans `f` picks in `sel` (its range, service, name, duration bounds
    /// and percentiles), as `Store::filtered_spans` picks them.
    pub async fn filtered_spans(
        &self,
        sel: &Selection,
        f: &SpanFilter,
    ) -> Result<Vec<[u8; 8]>, ApiError> {
        let all = self.search_spans(sel, f).await?;
        Ok(pick(&all, sel, f))
    }
}

/// Tempo's search answer (`traces[].spanSets[].spans[]`, or the older `spanSet`) as the
/// matched spans, each once; an answer at the caps is refused.
pub fn parse_search(answer: &Value) -> Result<Vec<Matched>, RemoteError> {
    let read = read_search(answer, SEARCH_LIMIT)?;
    match read.capped {
        None => Ok(read.spans),
        Some(Cap::Traces) => Err(RemoteError::too_many(
            Peer::Tempo,
            "/api/search",
            SEARCH_LIMIT - 1,
            "traces (narrow the selection: span name, service)",
        )),
        Some(Cap::Spans(n)) => Err(RemoteError::too_many(
            Peer::Tempo,
            "/api/search",
            n,
            "matched spans in one trace (spss)",
        )),
    }
}

/// Which cap a search answer reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// As many traces as `limit` asked for: there may be more.
    Traces,
    /// A trace matched more spans than the answer lists (`spss`, of that many).
    Spans(usize),
}

/// A search answer read: its spans, each once, and the cap it reached, if any.
#[derive(Debug, Default)]
pub struct SearchAnswer {
    /// The spans.
    pub spans: Vec<Matched>,
    /// `Some`: more spans match than these.
    pub capped: Option<Cap>,
}

/// Tempo's search answer asked with `limit` traces (`traces[].spanSets[].spans[]`, or the
/// older `spanSet`).
pub fn read_search(answer: &Value, limit: usize) -> Result<SearchAnswer, RemoteError> {
    let call = "/api/search";
    let bad = |what: &str| RemoteError::malformed(Peer::Tempo, call, what);
    let traces = answer["traces"]
        .as_array()
        .ok_or_else(|| bad("no traces list"))?;
    let mut capped = (traces.len() >= limit).then_some(Cap::Traces);
    if traces.len() > limit {
        return Err(RemoteError::too_many(Peer::Tempo, call, limit, "traces"));
    }
    let mut out: Vec<Matched> = Vec::new();
    for t in traces {
        let trace_id = t["traceID"]
            .as_str()
            .and_then(trace_id)
            .ok_or_else(|| bad("a trace without a valid traceID"))?;
        let sets: Vec<&Value> = match t["spanSets"].as_array() {
            Some(sets) => sets.iter().collect(),
            None => t.get("spanSet").into_iter().collect(),
        };
        for set in sets {
            let spans = set["spans"].as_array().map_or(&[][..], Vec::as_slice);
            let matched = set["matched"].as_u64().unwrap_or(spans.len() as u64);
            if matched as usize > spans.len() && capped.is_none() {
                capped = Some(Cap::Spans(spans.len()));
            }
            for s in spans {
                let number = |k: &str| -> Result<u64, RemoteError> {
                    match &s[k] {
                        Value::String(n) => n.parse().ok(),
                        n => n.as_u64(),
                    }
                    .ok_or_else(|| bad(&format!("a span without {k}")))
                };
                let span_id = s["spanID"]
                    .as_str()
                    .and_then(parse_id::<8>)
                    .ok_or_else(|| bad("a span without a valid spanID"))?;
                let service = s["attributes"].as_array().and_then(|a| {
                    a.iter()
                        .find(|kv| {
                            matches!(
                                kv["key"].as_str(),
                                Some("service.name" | "resource.service.name")
                            )
                        })
                        .and_then(|kv| kv["value"]["stringValue"].as_str())
                        .map(str::to_owned)
                });
                out.push(Matched {
                    span_id,
                    trace_id,
                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                    service,
                    start_ns: number("startTimeUnixNano")?,
                    duration_ns: number("durationNanos")?,
                });
            }
        }
    }
    out.sort_by_key(|m| (m.span_id, m.start_ns));
    out.dedup_by_key(|m| m.span_id);
    Ok(SearchAnswer { spans: out, capped })
}

/// A trace id as Tempo writes it: hex, its leading zeros perhaps left out.
fn trace_id(hex: &str) -> Option<[u8; 16]> {
    if hex.is_empty() || hex.len() > 32 {
        return None;
    }
    parse_id::<16>(&format!("{hex:0>32}"))
}

/// The spans of `all` that `f` picks in `sel`'s range: the percentiles of the durations of
/// `all`, then bounds, then overlap with `[from, to]`.
pub fn pick(all: &[Matched], sel: &Selection, f: &SpanFilter) -> Vec<[u8; 8]> {
    let mut min = f.min_duration_ns;
    let mut max = f.max_duration_ns;
    if f.name.is_some() && (f.above_percentile.is_some() || f.below_percentile.is_some()) {
        let mut durations: Vec<u64> = all.iter().map(|m| m.duration_ns).collect();
        if let Some(p) = f.above_percentile {
            min = min.max(percentile(&mut durations, p));
        }
        if let Some(p) = f.below_percentile {
            if let Some(d) = percentile(&mut durations, p) {
                max = Some(max.map_or(d, |m| m.min(d)));
            }
        }
    }
    let from = sel.from_ns.max(0) as u64;
    let to = if sel.to_ns == 0 {
        u64::MAX
    } else {
        sel.to_ns as u64
    };
    all.iter()
        .filter(|m| {
            min.is_none_or(|x| m.duration_ns >= x)
                && max.is_none_or(|x| m.duration_ns <= x)
                && m.start_ns <= to
                && m.start_ns.saturating_add(m.duration_ns) >= from
        })
        .map(|m| m.span_id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_answer_is_read_each_span_once_and_a_capped_one_is_refused() {
        let answer = serde_json::json!({"traces": [
            {"traceID": "01", "spanSets": [{"matched": 2, "spans": [
                {"spanID": "0000000000000001", "startTimeUnixNano": "100", "durationNanos": "5"},
                {"spanID": "0000000000000002", "startTimeUnixNano": "200", "durationNanos": "50"}]}],
             "spanSet": {"matched": 1, "spans": []}},
            {"traceID": "02", "spanSet": {"matched": 1, "spans": [
                {"spanID": "0000000000000001", "startTimeUnixNano": "100", "durationNanos": "5"}]}}]});
        let m = parse_search(&answer).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[1].start_ns, m[1].duration_ns), (200, 50));
        let capped = serde_json::json!({"traces": [{"traceID": "0a", "spanSets": [{"matched": 9, "spans": []}]}]});
        assert!(parse_search(&capped)
            .unwrap_err()
            .to_string()
            .contains("spss"));
    }

    #[test]
    fn percentiles_and_ranges_pick_as_the_store_does() {
        let all: Vec<Matched> = (1..=10u64)
            .map(|i| Matched {
                span_id: [i as u8; 8],
                trace_id: [1; 16],
                name: "x".into(),
                service: None,
                start_ns: i * 1000,
                duration_ns: i * 10,
            })
            .collect();
        let f = SpanFilter {
            name: Some("x".into()),
            above_percentile: Some(90.0),
            ..Default::default()
        };
        // p90 of ten is the ninth: 90 ns and above.
        assert_eq!(pick(&all, &Selection::default(), &f), [[9; 8], [10; 8]]);
        let f = SpanFilter {
            name: Some("x".into()),
            below_percentile: Some(50.0),
            ..Default::default()
        };
        let sel = Selection {
            from_ns: 3000,
            to_ns: 4000,
            ..Default::default()
        };
        assert_eq!(pick(&all, &sel, &f), [[3; 8], [4; 8]]);
        assert_eq!(
            traceql(
                &Selection {
                    service: Some("a\"b".into()),
                    ..Default::default()
                },
                &f
            ),
            "{name = \"x\" && resource.service.name = \"a\\\"b\"}"
        );
    }
}
