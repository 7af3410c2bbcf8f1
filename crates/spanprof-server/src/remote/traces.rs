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

/// The same answer read for its spans' ids only (`tempopb.TraceByIDResponse` → OTLP
/// `TracesData` → `ResourceSpans` → `ScopeSpans` → `Span`, other fields skipped): the child
/// roll-up needs the tree, and reading every attribute into records was most of its time
/// (a trace of 1,000 spans: ~1 ms of a 3 ms query).
mod ids_only {
    /// `TraceByIDResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Answer {
        #[prost(message, optional, tag = "1")]
        pub trace: Option<Trace>,
    }
    /// `TracesData`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }
    /// `ResourceSpans`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }
    /// `ScopeSpans`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }
    /// `Span`: ids and times.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
    }
}

/// A span of the tree: its id, its parent's, its start (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanLink {
    /// The span's id.
    pub span_id: [u8; 8],
    /// Its parent's id (`None`: a root).
    pub parent_span_id: Option<[u8; 8]>,
    /// Its start, ns since the epoch.
    pub start_ns: u64,
}

impl Remote {
    /// The tree of trace `id` from Tempo: the spans [`Remote::trace`] gives (the same ones
    /// kept, the same earliest cut), their ids only.
    pub async fn trace_tree(&self, id: &[u8; 16]) -> Result<Vec<SpanLink>, RemoteError> {
        let (path, Some(bytes)) = self.trace_bytes(id).await? else {
            return Ok(Vec::new());
        };
        links_of(bytes, id).map_err(|e| RemoteError::new(Peer::Tempo, &path, e))
    }

    /// Tempo's `TraceByIDResponse` of trace `id` (protobuf), with the path asked; `None` when
    /// Tempo does not know the trace (404).
    async fn trace_bytes(
        &self,
        id: &[u8; 16],
    ) -> Result<(String, Option<axum::body::Bytes>), RemoteError> {
        let path = format!("/api/v2/traces/{}", to_hex(id));
        match self
            .client
            .get(Peer::Tempo, &path, "application/protobuf", false)
            .await
        {
            Ok(b) => Ok((path, Some(b))),
            Err(e) if e.status == Some(404) => Ok((path, None)),
            Err(e) => Err(e),
        }
    }
}

/// The tree of the spans of trace `id` in a `TraceByIDResponse`; `Err` saying why the bytes
/// are not one of that trace.
fn links_of(bytes: axum::body::Bytes, id: &[u8; 16]) -> Result<Vec<SpanLink>, String> {
    let answer = ids_only::Answer::decode(bytes)
        .map_err(|e| format!("the answer is not a valid Tempo message: {e}"))?;
    let id_of = |b: &[u8]| <[u8; 8]>::try_from(b).ok().filter(|i| *i != [0; 8]);
    let mut links = Vec::new();
    for span in answer
        .trace
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
    {
        // Kept as the full read keeps them (spanprof_store::spans::spans_from_otlp).
        let trace = <[u8; 16]>::try_from(span.trace_id.as_slice()).ok();
        let Some(trace) = trace.filter(|t| *t != [0; 16]) else {
            continue;
        };
        let Some(span_id) = id_of(&span.span_id) else {
            continue;
        };
        let parent_span_id = match span.parent_span_id.len() {
            0 => None,
            _ if span.parent_span_id.iter().all(|&b| b == 0) => None,
            _ => match id_of(&span.parent_span_id) {
                Some(p) => Some(p),
                None => continue,
            },
        };
        if span.start_time_unix_nano > i64::MAX as u64 || span.end_time_unix_nano > i64::MAX as u64
        {
            continue;
        }
        if trace != *id {
            return Err("the answer holds spans of another trace".to_owned());
        }
        links.push(SpanLink {
            span_id,
            parent_span_id,
            start_ns: span.start_time_unix_nano,
        });
    }
    links.sort_by_key(|s| (s.start_ns, s.span_id));
    links.truncate(crate::answer::MAX_TRACE_SPANS);
    Ok(links)
}

impl Remote {
    /// The spans of trace `id` from Tempo, the earliest [`crate::answer::MAX_TRACE_SPANS`] of
    /// them; empty when Tempo does not know it (404).
    pub async fn trace(&self, id: &[u8; 16]) -> Result<Vec<SpanRecord>, RemoteError> {
        let (path, Some(bytes)) = self.trace_bytes(id).await? else {
            return Ok(Vec::new());
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
pub fn with_descendants(spans: &[SpanLink], roots: &[[u8; 8]]) -> Vec<[u8; 8]> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::trace::{ResourceSpans, ScopeSpans, Span};

    #[test]
    fn the_ids_only_read_keeps_the_spans_the_full_read_keeps() {
        let span = |id: u8, parent: Vec<u8>, start: u64| Span {
            trace_id: vec![7; 16],
            span_id: vec![id; 8],
            parent_span_id: parent,
            name: format!("s{id}"),
            start_time_unix_nano: start,
            end_time_unix_nano: start + 5,
            ..Default::default()
        };
        let mut spans = vec![
            span(1, vec![], 30),
            span(2, vec![1; 8], 10),
            span(3, vec![0; 8], 20),
            span(4, vec![2; 3], 40),
        ];
        // Rejected by both: a zero id, a wrong length, a time past i64.
        spans.push(span(0, vec![], 1));
        spans.push(Span {
            span_id: vec![5; 7],
            ..span(5, vec![], 2)
        });
        spans.push(span(6, vec![], u64::MAX - 10));
        let answer = TraceByIdResponse {
            trace: Some(TracesData {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }),
        };
        let bytes = axum::body::Bytes::from(answer.encode_to_vec());
        let links = links_of(bytes.clone(), &[7; 16]).unwrap();
        let resource_spans = answer.trace.unwrap().resource_spans;
        let (mut full, _) = spanprof_store::spans::spans_from_otlp(&resource_spans);
        full.sort_by_key(|s| (s.start_ns, s.span_id));
        let from_full: Vec<SpanLink> = full
            .iter()
            .map(|s| SpanLink {
                span_id: s.span_id,
                parent_span_id: s.parent_span_id,
                start_ns: s.start_ns,
            })
            .collect();
        assert_eq!(links, from_full);
        assert_eq!(links.len(), 3);
        assert_eq!(with_descendants(&links, &[[1; 8]]), vec![[1; 8], [2; 8]]);
        // Another trace's spans: refused, as the full read refuses them.
        let e = links_of(bytes, &[8; 16]).unwrap_err();
        assert!(e.contains("another trace"), "{e}");
    }
}
