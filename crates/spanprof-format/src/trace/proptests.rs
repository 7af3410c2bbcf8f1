//! Property tests: random requests survive protobuf and OTLP JSON exactly, and no input makes
//! either decoder panic.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use prost::Message;

use super::span::{Event, Link};
use super::*;
use crate::json::proptests::{attributes, edits, id, num, resource, text};

/// Known enum numbers mostly, an unknown one now and then (proto3 keeps those).
fn enumeration(known: i32) -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..=known, 1 => any::<i32>()]
}

fn event() -> impl Strategy<Value = Event> {
    (num(), text(), attributes(), num()).prop_map(|(time, name, attributes, dropped)| Event {
        time_unix_nano: time,
        name,
        attributes,
        dropped_attributes_count: dropped,
    })
}

fn link() -> impl Strategy<Value = Link> {
    (id(16), id(8), text(), attributes(), num(), num()).prop_map(
        |(trace_id, span_id, trace_state, attributes, dropped, flags)| Link {
            trace_id,
            span_id,
            trace_state,
            attributes,
            dropped_attributes_count: dropped,
            flags,
        },
    )
}

fn status() -> impl Strategy<Value = Status> {
    (text(), enumeration(2)).prop_map(|(message, code)| Status { message, code })
}

fn span() -> impl Strategy<Value = Span> {
    let ids = (id(16), id(8), text(), id(8), num(), text(), enumeration(5));
    let times = (num(), num(), attributes(), num(), vec(event(), 0..2), num());
    let rest = (vec(link(), 0..2), num(), option::of(status()));
    (ids, times, rest).prop_map(
        |(
            (trace_id, span_id, trace_state, parent_span_id, flags, name, kind),
            (start, end, attributes, dropped_attributes_count, events, dropped_events_count),
            (links, dropped_links_count, status),
        )| Span {
            trace_id,
            span_id,
            trace_state,
            parent_span_id,
            flags,
            name,
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            dropped_attributes_count,
            events,
            dropped_events_count,
            links,
            dropped_links_count,
            status,
        },
    )
}

fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope = (text(), text(), attributes(), num()).prop_map(|(name, version, attrs, n)| {
        InstrumentationScope {
            name,
            version,
            attributes: attrs,
            dropped_attributes_count: n,
        }
    });
    let scope_spans =
        (option::of(scope), vec(span(), 0..3), text()).prop_map(|(scope, spans, schema_url)| {
            ScopeSpans {
                scope,
                spans,
                schema_url,
            }
        });
    let resource_spans = (option::of(resource()), vec(scope_spans, 0..3), text()).prop_map(
        |(resource, scope_spans, schema_url)| ResourceSpans {
            resource,
            scope_spans,
            schema_url,
        },
    );
    vec(resource_spans, 0..3)
        .prop_map(|resource_spans| ExportTraceServiceRequest { resource_spans })
}

/// The bytes a decoded request holds on the heap: element structs and string or bytes
/// contents (allocator rounding and spare `Vec` capacity aside).
fn held_bytes(request: &ExportTraceServiceRequest) -> usize {
    use crate::otlp::{any_value::Value, AnyValue};
    use std::mem::size_of;
    fn any(v: &AnyValue) -> usize {
        match &v.value {
            Some(Value::StringValue(s)) => s.len(),
            Some(Value::BytesValue(b)) => b.len(),
            Some(Value::ArrayValue(a)) => {
                a.values.len() * size_of::<AnyValue>() + a.values.iter().map(any).sum::<usize>()
            }
            Some(Value::KvlistValue(l)) => attributes(&l.values),
            _ => 0,
        }
    }
    fn attributes(kvs: &[KeyValue]) -> usize {
        kvs.iter()
            .map(|kv| size_of::<KeyValue>() + kv.key.len() + kv.value.as_ref().map_or(0, any))
            .sum()
    }
    let mut n = 0;
    for rs in &request.resource_spans {
        n += size_of::<ResourceSpans>() + rs.schema_url.len();
        if let Some(r) = &rs.resource {
            n += attributes(&r.attributes);
            for e in &r.entity_refs {
                n += size_of_val(e) + e.schema_url.len() + e.r#type.len();
                for k in e.id_keys.iter().chain(&e.description_keys) {
                    n += size_of::<String>() + k.len();
                }
            }
        }
        for ss in &rs.scope_spans {
            n += size_of::<ScopeSpans>() + ss.schema_url.len();
            if let Some(s) = &ss.scope {
                n += s.name.len() + s.version.len() + attributes(&s.attributes);
            }
            for sp in &ss.spans {
                n += size_of::<Span>() + sp.trace_id.len() + sp.span_id.len();
                n += sp.trace_state.len() + sp.parent_span_id.len() + sp.name.len();
                n += attributes(&sp.attributes);
                n += sp.status.as_ref().map_or(0, |s| s.message.len());
                for e in &sp.events {
                    n += size_of::<Event>() + e.name.len() + attributes(&e.attributes);
                }
                for l in &sp.links {
                    n += size_of::<Link>() + l.trace_id.len() + l.span_id.len();
                    n += l.trace_state.len() + attributes(&l.attributes);
                }
            }
        }
    }
    n
}

/// Compares encoded bytes, not messages: a NaN attribute never equals itself.
fn assert_json_round_trips(request: &ExportTraceServiceRequest) -> Result<(), TestCaseError> {
    let json = encode_request_json(request);
    let back = decode_request_json(json.as_bytes())
        .map_err(|e| TestCaseError::fail(format!("{e} in {json}")))?;
    prop_assert!(
        back.encode_to_vec() == request.encode_to_vec(),
        "{back:?}\n!=\n{request:?}\nvia {json}"
    );
    Ok(())
}

proptest! {
    #[test]
    fn trace_protobuf_random_requests_round_trip(request in request()) {
        let bytes = request.encode_to_vec();
        let back = decode_request(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.encode_to_vec(), bytes);
    }

    #[test]
    fn trace_json_random_requests_round_trip(request in request()) {
        assert_json_round_trips(&request)?;
    }

    /// The budget's estimate of what prost allocates counts every field that allocates: it
    /// is at least what the decoded request holds.
    #[test]
    fn trace_budget_estimate_covers_the_decoded_request(request in request()) {
        let bytes = request.encode_to_vec();
        let estimate = crate::budget::estimate(&bytes, &REQUEST);
        let decoded = decode_request(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(estimate >= held_bytes(&decoded), "{} < {}", estimate, held_bytes(&decoded));
    }

    #[test]
    fn trace_decoders_survive_arbitrary_bytes(bytes in vec(any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes);
        let _ = decode_request_json(&bytes);
    }

    #[test]
    fn trace_decoders_survive_edited_documents(request in request(), edits in edits()) {
        let mut json = encode_request_json(&request).into_bytes();
        let mut proto = request.encode_to_vec();
        for bytes in [&mut json, &mut proto] {
            for &(at, kind, byte) in &edits {
                let i = at.index(bytes.len() + 1);
                match kind {
                    0 => bytes.truncate(i),
                    1 if i < bytes.len() => bytes[i] = byte,
                    2 => bytes.insert(i, byte),
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {}
                }
            }
        }
        if let Ok(decoded) = decode_request_json(&json) {
            assert_json_round_trips(&decoded)?;
        }
        // Only what OTLP JSON can carry: its ids are exactly 16 or 8 bytes (or unset), while
        // protobuf bytes fields take any length (the span ingest refuses those spans then).
        // And through JSON once, then stable: a double NaN's payload bits (an edited byte
        // makes one) have no JSON form, so the first pass writes the plain NaN.
        if let Ok(decoded) = decode_request(&proto) {
            if ids_json_can_carry(&decoded) {
                let once = decode_request_json(encode_request_json(&decoded).as_bytes())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                assert_json_round_trips(&once)?;
            }
        }
    }
}

/// Whether every id of `request` is unset or of its length (16 bytes a trace, 8 a span).
fn ids_json_can_carry(request: &ExportTraceServiceRequest) -> bool {
    let ok = |id: &[u8], len: usize| id.is_empty() || id.len() == len;
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .all(|s| {
            ok(&s.trace_id, 16)
                && ok(&s.span_id, 8)
                && ok(&s.parent_span_id, 8)
                && s.links
                    .iter()
                    .all(|l| ok(&l.trace_id, 16) && ok(&l.span_id, 8))
        })
}
