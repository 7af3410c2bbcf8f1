//! OTLP JSON → trace messages, with the profile decoder's reader and its resource, scope and
//! attribute readers: every field under its lowerCamelCase and its snake_case name, unknown
//! fields skipped, `null` left at the default.

use super::span::{Event, Link, SpanKind};
use super::status::StatusCode;
use super::{ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status};
use crate::json::decode::{
    hex_id, key_values, message, resource, scope, string, SPAN_ID_LEN, TRACE_ID_LEN,
};
use crate::json::reader::{Error, InField, Kind, Reader};

/// Decodes a whole document holding one `ExportTraceServiceRequest` object.
pub(super) fn document(
    json: &[u8],
    pool: Option<&dyn crate::allowance::Pool>,
) -> Result<ExportTraceServiceRequest, crate::FormatError> {
    let mut reader = Reader::new(json, pool);
    message(&mut reader, |m: &mut ExportTraceServiceRequest, r, key| {
        match key {
            "resourceSpans" | "resource_spans" => {
                m.resource_spans = r.list(resource_spans).in_field("resourceSpans")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
    .and_then(|request| reader.finish().map(|()| request))
    .map_err(|e| reader.error(e, "OTLP JSON ExportTraceServiceRequest"))
}

/// An enum given as its number (or numeric string), or as its proto value name.
fn enumeration(r: &mut Reader<'_>, from_name: fn(&str) -> Option<i32>) -> Result<i32, Error> {
    if r.peek()? != Kind::String {
        return r.integer();
    }
    let text = r.string()?;
    from_name(&text)
        .or_else(|| text.parse().ok())
        .ok_or_else(|| Error::new(format!("unknown enum value {text:?}")))
}

fn resource_spans(r: &mut Reader<'_>) -> Result<ResourceSpans, Error> {
    message(r, |m: &mut ResourceSpans, r, key| {
        match key {
            "resource" => m.resource = Some(resource(r).in_field("resource")?),
            "scopeSpans" | "scope_spans" => {
                m.scope_spans = r.list(scope_spans).in_field("scopeSpans")?;
            }
            "schemaUrl" | "schema_url" => m.schema_url = string(r).in_field("schemaUrl")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn scope_spans(r: &mut Reader<'_>) -> Result<ScopeSpans, Error> {
    message(r, |m: &mut ScopeSpans, r, key| {
        match key {
            "scope" => m.scope = Some(scope(r).in_field("scope")?),
            "spans" => m.spans = r.list(span).in_field("spans")?,
            "schemaUrl" | "schema_url" => m.schema_url = string(r).in_field("schemaUrl")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn span(r: &mut Reader<'_>) -> Result<Span, Error> {
    message(r, |m: &mut Span, r, key| {
        match key {
            "traceId" | "trace_id" => m.trace_id = hex_id(r, TRACE_ID_LEN).in_field("traceId")?,
            "spanId" | "span_id" => m.span_id = hex_id(r, SPAN_ID_LEN).in_field("spanId")?,
            "traceState" | "trace_state" => m.trace_state = string(r).in_field("traceState")?,
            "parentSpanId" | "parent_span_id" => {
                m.parent_span_id = hex_id(r, SPAN_ID_LEN).in_field("parentSpanId")?;
            }
            "flags" => m.flags = r.integer().in_field("flags")?,
            "name" => m.name = string(r).in_field("name")?,
            "kind" => {
                let from_name = |s: &str| SpanKind::from_str_name(s).map(|k| k as i32);
                m.kind = enumeration(r, from_name).in_field("kind")?;
            }
            "startTimeUnixNano" | "start_time_unix_nano" => {
                m.start_time_unix_nano = r.integer().in_field("startTimeUnixNano")?;
            }
            "endTimeUnixNano" | "end_time_unix_nano" => {
                m.end_time_unix_nano = r.integer().in_field("endTimeUnixNano")?;
            }
            "attributes" => m.attributes = key_values(r, 1).in_field("attributes")?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            "events" => m.events = r.list(event).in_field("events")?,
            "droppedEventsCount" | "dropped_events_count" => {
                m.dropped_events_count = r.integer().in_field("droppedEventsCount")?;
            }
            "links" => m.links = r.list(link).in_field("links")?,
            "droppedLinksCount" | "dropped_links_count" => {
                m.dropped_links_count = r.integer().in_field("droppedLinksCount")?;
            }
            "status" => m.status = Some(status(r).in_field("status")?),
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn event(r: &mut Reader<'_>) -> Result<Event, Error> {
    message(r, |m: &mut Event, r, key| {
        match key {
            "timeUnixNano" | "time_unix_nano" => {
                m.time_unix_nano = r.integer().in_field("timeUnixNano")?;
            }
            "name" => m.name = string(r).in_field("name")?,
            "attributes" => m.attributes = key_values(r, 1).in_field("attributes")?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn link(r: &mut Reader<'_>) -> Result<Link, Error> {
    message(r, |m: &mut Link, r, key| {
        match key {
            "traceId" | "trace_id" => m.trace_id = hex_id(r, TRACE_ID_LEN).in_field("traceId")?,
            "spanId" | "span_id" => m.span_id = hex_id(r, SPAN_ID_LEN).in_field("spanId")?,
            "traceState" | "trace_state" => m.trace_state = string(r).in_field("traceState")?,
            "attributes" => m.attributes = key_values(r, 1).in_field("attributes")?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = r.integer().in_field("droppedAttributesCount")?;
            }
            "flags" => m.flags = r.integer().in_field("flags")?,
            _ => r.skip()?,
        }
        Ok(())
    })
}

fn status(r: &mut Reader<'_>) -> Result<Status, Error> {
    message(r, |m: &mut Status, r, key| {
        match key {
            "message" => m.message = string(r).in_field("message")?,
            "code" => {
                let from_name = |s: &str| StatusCode::from_str_name(s).map(|c| c as i32);
                m.code = enumeration(r, from_name).in_field("code")?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })
}
