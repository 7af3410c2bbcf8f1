//! Tempo's side: a trace by id (`/api/v2/traces/{id}`, protobuf), and a span's descendants
//! within it.

use std::collections::{HashMap, HashSet};

use prost::Message;
use spanprof_format::link::to_hex;
use spanprof_format::trace::TracesData;
use spanprof_store::spans::SpanRecord;

use super::client::Peer;
use super::{Remote, RemoteError};

/// Tempo's `TraceByIDResponse` (`tempopb`): field 1 the trace, wire-identical to OTLP
/// `TracesData`.
#[derive(Clone, PartialEq, Message)]
pub struct TraceByIdResponse {
    /// The trace.
    #[prost(message, optional, tag = "1")]
    pub trace: Option<TracesData>,
}

impl Remote {
    /// The spans of trace `id` from Tempo, the earliest [`crate::answer::MAX_TRACE_SPANS`] of
    /// them; empty when Tempo does not know it (404).
    pub async fn trace(&self, id: &[u8; 16]) -> Result<Vec<SpanRecord>, RemoteError> {
        let path = format!("/api/v2/traces/{}", to_hex(id));
        let bytes = match self
            .client
            .get(Peer::Tempo, &path, "application/protobuf", false)
            .await
        {
            Ok(b) => b,
            Err(e) if e.status == Some(404) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let answer = TraceByIdResponse::decode(bytes)
            .map_err(|e| RemoteError::malformed(Peer::Tempo, &path, e))?;
        let resource_spans = answer.trace.map(|t| t.resource_spans).unwrap_or_default();
        let (mut spans, _) = spanprof_store::spans::spans_from_otlp(&resource_spans);
        if spans.iter().any(|s| s.trace_id != *id) {
            return Err(RemoteError::new(
                Peer::Tempo,
                &path,
                "the answer holds spans of another trace".to_owned(),
            ));
        }
        spans.sort_by_key(|s| (s.start_ns, s.span_id));
        spans.truncate(crate::answer::MAX_TRACE_SPANS);
        Ok(spans)
    }
}

/// `roots` and every span below them in `spans` (by parent ids), roots first.
pub fn with_descendants(spans: &[SpanRecord], roots: &[[u8; 8]]) -> Vec<[u8; 8]> {
    let mut children: HashMap<[u8; 8], Vec<[u8; 8]>> = HashMap::new();
    for s in spans {
        if let Some(p) = s.parent_span_id {
            children.entry(p).or_default().push(s.span_id);
        }
    }
    let mut seen: HashSet<[u8; 8]> = HashSet::new();
    let mut out = Vec::new();
    let mut todo: Vec<[u8; 8]> = roots.to_vec();
    while let Some(id) = todo.pop() {
        // A cycle of parent ids (a broken producer) must not loop.
        if !seen.insert(id) {
            continue;
        }
        out.push(id);
        if let Some(c) = children.get(&id) {
            todo.extend(c.iter().copied());
        }
    }
    out
}
