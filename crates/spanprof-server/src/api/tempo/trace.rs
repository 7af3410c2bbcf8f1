//! Trace by id (`/api/traces/{id}`, `/api/v2/traces/{id}`): a stored trace as OTLP, each span
//! with samples marked so Grafana links it to its profile.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use hashbrown::HashMap;
use prost::Message;
use spanprof_format::link::to_hex;
use spanprof_format::otlp::{string_kv, KeyValue};
use spanprof_format::trace::{
    encode_request_json, ExportTraceServiceRequest, Span, Status, TracesData,
};
use spanprof_store::spans::SpanRecord;

use super::{blocking, json_text, protobuf, wants_protobuf, PROFILE_ID_ATTRIBUTE};
use crate::api::query::ApiError;
use crate::api::Queries;
use spanprof_store::spans::otlp::{by_resource, otlp_events};

pub(super) async fn trace_v1(
    State(queries): State<Queries>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let data = load_trace(&queries, &id).await?;
    if wants_protobuf(&headers) {
        return Ok(protobuf(data.encode_to_vec()));
    }
    let json = otlp_json(data);
    // Tempo's v1 JSON names the list `batches`.
    let body = match json.strip_prefix("{\"resourceSpans\":") {
        Some(rest) => format!("{{\"batches\":{rest}"),
        None => "{\"batches\":[]}".to_owned(),
    };
    Ok(json_text(body))
}

pub(super) async fn trace_v2(
    State(queries): State<Queries>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let data = load_trace(&queries, &id).await?;
    if wants_protobuf(&headers) {
        let response = TraceByIdResponse { trace: Some(data) };
        return Ok(protobuf(response.encode_to_vec()));
    }
    Ok(json_text(format!(
        "{{\"trace\":{},\"metrics\":{{}}}}",
        otlp_json(data)
    )))
}

/// Tempo's `TraceByIDResponse`; its `Trace` is wire-identical to OTLP `TracesData`.
#[derive(Clone, PartialEq, Message)]
struct TraceByIdResponse {
    #[prost(message, optional, tag = "1")]
    trace: Option<TracesData>,
}

/// The stored trace with profile links (module docs), or 404.
async fn load_trace(queries: &Queries, id: &str) -> Result<TracesData, ApiError> {
    let trace_id = parse_trace_id(id)?;
    let include_children = queries.config.server.span_profiles_include_children;
    let (spans, profiled) = blocking(queries, move |store| {
        let mut spans = store.trace(&trace_id)?;
        // The earliest ones only (see MAX_TRACE_SPANS).
        spans.truncate(crate::api::MAX_TRACE_SPANS);
        let own = spans
            .iter()
            .map(|s| store.has_samples(&s.span_id))
            .collect::<Result<Vec<bool>, _>>()?;
        let profiled = if include_children {
            roll_up(&spans, &own)
        } else {
            own
        };
        Ok((spans, profiled))
    })
    .await?;
    if spans.is_empty() {
        return Err(ApiError::not_found(format!("trace {id} not found")));
    }
    Ok(traces_data(&spans, &profiled))
}

/// Tempo's `HexStringToTraceID`: up to 32 hex digits, left-padded with zeros.
fn parse_trace_id(s: &str) -> Result<[u8; 16], ApiError> {
    let bad = |why: &str| ApiError::bad_param("traceID", s, why);
    if s.is_empty() || s.len() > 32 {
        return Err(bad("expected 1 to 32 hex characters"));
    }
    let padded = format!("{s:0>32}");
    let mut out = [0u8; 16];
    for (i, pair) in padded.as_bytes().chunks_exact(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| bad("not hex"))?;
        out[i] = u8::from_str_radix(text, 16).map_err(|_| bad("not hex"))?;
    }
    if out == [0u8; 16] {
        return Err(bad("a trace id is never all zeros"));
    }
    Ok(out)
}

/// Whether each span has samples itself or below it: every span with samples marks itself
/// and its ancestors (the parent chain inside the trace; a cycle stops at a marked span).
fn roll_up(spans: &[SpanRecord], own: &[bool]) -> Vec<bool> {
    let index: HashMap<[u8; 8], usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id, i))
        .collect();
    let mut marked = vec![false; spans.len()];
    for (i, _) in own.iter().enumerate().filter(|(_, has)| **has) {
        let mut at = Some(i);
        while let Some(j) = at {
            if marked[j] {
                break;
            }
            marked[j] = true;
            at = spans[j].parent_span_id.and_then(|p| index.get(&p).copied());
        }
    }
    marked
}

/// One `ResourceSpans` per service and resource (first-seen order), spans in the store's
/// start order.
fn traces_data(spans: &[SpanRecord], profiled: &[bool]) -> TracesData {
    TracesData {
        resource_spans: by_resource(
            spans
                .iter()
                .zip(profiled)
                .map(|(record, has_profile)| (record, otlp_span(record, *has_profile))),
        ),
    }
}

fn otlp_span(r: &SpanRecord, has_profile: bool) -> Span {
    let mut attributes: Vec<KeyValue> = r
        .attributes
        .iter()
        .filter(|(k, _)| k != PROFILE_ID_ATTRIBUTE)
        .map(|(k, v)| string_kv(k, v))
        .collect();
    if has_profile {
        attributes.push(string_kv(PROFILE_ID_ATTRIBUTE, &to_hex(&r.span_id)));
    }
    let status = (r.status_code != 0 || !r.status_message.is_empty()).then(|| Status {
        message: r.status_message.clone(),
        code: r.status_code,
    });
    Span {
        trace_id: r.trace_id.to_vec(),
        span_id: r.span_id.to_vec(),
        parent_span_id: r.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        name: r.name.clone(),
        kind: r.kind,
        start_time_unix_nano: r.start_ns,
        end_time_unix_nano: r.end_ns,
        attributes,
        status,
        events: otlp_events(r),
        ..Default::default()
    }
}

/// `TracesData` as OTLP JSON, `{"resourceSpans":[…]}`.
fn otlp_json(data: TracesData) -> String {
    encode_request_json(&ExportTraceServiceRequest {
        resource_spans: data.resource_spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn span(id: u8, parent: Option<u8>) -> SpanRecord {
        SpanRecord {
            trace_id: [1; 16],
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            ..Default::default()
        }
    }

    #[test]
    fn tempo_roll_up_marks_ancestors_of_spans_with_samples_only() {
        // 1 ─ 2 ─ 3 (samples), 1 ─ 4, 5 ↔ 6 a cycle with samples on 6.
        let spans = [
            span(1, None),
            span(2, Some(1)),
            span(3, Some(2)),
            span(4, Some(1)),
            span(5, Some(6)),
            span(6, Some(5)),
        ];
        let own = [false, false, true, false, false, true];
        assert_eq!(
            roll_up(&spans, &own),
            vec![true, true, true, false, true, true]
        );
    }

    #[test]
    fn tempo_trace_ids_are_left_padded_hex() {
        assert_eq!(parse_trace_id("1").unwrap()[15], 1);
        assert!(parse_trace_id("xyz").is_err());
        assert!(parse_trace_id(&"0".repeat(32)).is_err());
        assert!(parse_trace_id(&"1".repeat(33)).is_err());
    }
}
