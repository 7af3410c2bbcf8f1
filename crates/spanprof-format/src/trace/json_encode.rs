//! Trace messages → OTLP JSON text, with the profile encoder's writer and its resource, scope
//! and attribute writers. Fields come in proto field-number order and are left out at their
//! proto3 default; enums are numbers.

use super::span::{Event, Link};
use super::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    ResourceSpans, ScopeSpans, Span, Status,
};
use crate::json::encode::{key_value, resource, scope, Writer};

fn writer() -> Writer {
    Writer {
        out: String::with_capacity(1024),
        pretty: false,
        depth: 0,
        empty: true,
    }
}

pub(super) fn request(m: &ExportTraceServiceRequest) -> String {
    let mut w = writer();
    w.object(|w| w.list_field("resourceSpans", &m.resource_spans, resource_spans));
    w.out
}

pub(super) fn response(m: &ExportTraceServiceResponse) -> String {
    let mut w = writer();
    w.object(|w| {
        w.message_field(
            "partialSuccess",
            m.partial_success.as_ref(),
            partial_success,
        )
    });
    w.out
}

fn partial_success(w: &mut Writer, m: &ExportTracePartialSuccess) {
    w.object(|w| {
        w.i64_field("rejectedSpans", m.rejected_spans);
        w.string_field("errorMessage", &m.error_message);
    });
}

fn resource_spans(w: &mut Writer, m: &ResourceSpans) {
    w.object(|w| {
        w.message_field("resource", m.resource.as_ref(), resource);
        w.list_field("scopeSpans", &m.scope_spans, scope_spans);
        w.string_field("schemaUrl", &m.schema_url);
    });
}

fn scope_spans(w: &mut Writer, m: &ScopeSpans) {
    w.object(|w| {
        w.message_field("scope", m.scope.as_ref(), scope);
        w.list_field("spans", &m.spans, span);
        w.string_field("schemaUrl", &m.schema_url);
    });
}

fn span(w: &mut Writer, m: &Span) {
    w.object(|w| {
        w.hex_field("traceId", &m.trace_id);
        w.hex_field("spanId", &m.span_id);
        w.string_field("traceState", &m.trace_state);
        w.hex_field("parentSpanId", &m.parent_span_id);
        w.string_field("name", &m.name);
        w.i32_field("kind", m.kind);
        w.u64_field("startTimeUnixNano", m.start_time_unix_nano);
        w.u64_field("endTimeUnixNano", m.end_time_unix_nano);
        w.list_field("attributes", &m.attributes, key_value);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
        w.list_field("events", &m.events, event);
        w.u32_field("droppedEventsCount", m.dropped_events_count);
        w.list_field("links", &m.links, link);
        w.u32_field("droppedLinksCount", m.dropped_links_count);
        w.message_field("status", m.status.as_ref(), status);
        w.u32_field("flags", m.flags);
    });
}

fn event(w: &mut Writer, m: &Event) {
    w.object(|w| {
        w.u64_field("timeUnixNano", m.time_unix_nano);
        w.string_field("name", &m.name);
        w.list_field("attributes", &m.attributes, key_value);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
    });
}

fn link(w: &mut Writer, m: &Link) {
    w.object(|w| {
        w.hex_field("traceId", &m.trace_id);
        w.hex_field("spanId", &m.span_id);
        w.string_field("traceState", &m.trace_state);
        w.list_field("attributes", &m.attributes, key_value);
        w.u32_field("droppedAttributesCount", m.dropped_attributes_count);
        w.u32_field("flags", m.flags);
    });
}

fn status(w: &mut Writer, m: &Status) {
    w.object(|w| {
        w.string_field("message", &m.message);
        w.i32_field("code", m.code);
    });
}
