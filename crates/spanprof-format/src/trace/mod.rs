//! OTLP traces: the wire messages of `opentelemetry/proto/trace/v1/trace.proto` and
//! `collector/trace/v1/trace_service.proto`, declared here with prost derives (field numbers
//! checked against upstream and against the Python `opentelemetry-proto` package in the tests),
//! and their OTLP JSON encoding.
//!
//! Resource, scope and attributes are the `opentelemetry-proto` crate's types
//! ([`crate::otlp`]), so a span's resource is the same type as a profile's.
//!
//! ```
//! use spanprof_format::trace::{decode_request_json, encode_request_json};
//!
//! let json = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
//!     "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
//!     "name":"GET /work","kind":2,
//!     "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000250000000"}]}]}]}"#;
//! let request = decode_request_json(json)?;
//! let span = &request.resource_spans[0].scope_spans[0].spans[0];
//! assert_eq!(span.end_time_unix_nano - span.start_time_unix_nano, 250_000_000);
//! assert_eq!(decode_request_json(encode_request_json(&request).as_bytes())?, request);
//! # Ok::<(), spanprof_format::FormatError>(())
//! ```

mod json_decode;
mod json_encode;

#[cfg(test)]
mod json_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod python_tests;

use prost::Message;

use std::mem::size_of;

use opentelemetry_proto::tonic::common::v1::EntityRef;

use crate::budget::{check_decoded_size, Cost, Shape, KEY_VALUE};
use crate::error::FormatError;
use crate::otlp::{InstrumentationScope, KeyValue, Resource};

/// Body of an OTLP trace export (gRPC `TraceService/Export`, OTLP/HTTP `POST /v1/traces`).
#[derive(Clone, PartialEq, Message)]
pub struct ExportTraceServiceRequest {
    /// Spans grouped by the resource that produced them.
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

/// Answer to an [`ExportTraceServiceRequest`]; `partial_success` is left unset when every
/// span was accepted.
#[derive(Clone, PartialEq, Message)]
pub struct ExportTraceServiceResponse {
    /// How many spans were rejected and why, when some were (or a warning).
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportTracePartialSuccess>,
}

/// The part of a trace export that the receiver did not accept.
#[derive(Clone, PartialEq, Message)]
pub struct ExportTracePartialSuccess {
    /// Number of spans rejected; 0 with a non-empty message is a warning.
    #[prost(int64, tag = "1")]
    pub rejected_spans: i64,
    /// Why, for people (English).
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// Spans as stored or embedded outside the OTLP protocol; same fields as
/// [`ExportTraceServiceRequest`], so one encodes as the other.
#[derive(Clone, PartialEq, Message)]
pub struct TracesData {
    /// Spans grouped by the resource that produced them.
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

/// The spans of one resource (a service instance).
#[derive(Clone, PartialEq, Message)]
pub struct ResourceSpans {
    /// The resource; unset means unknown.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// Spans grouped by instrumentation scope.
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
    /// Schema URL of `resource`.
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

/// The spans that one instrumentation scope (library) produced.
#[derive(Clone, PartialEq, Message)]
pub struct ScopeSpans {
    /// The instrumentation scope; unset means an unknown (empty) scope.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// The spans.
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<Span>,
    /// Schema URL of the spans and their events.
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

/// One operation of a trace. Ids are raw bytes: a valid trace id has 16, a valid span id 8,
/// and neither is all zeros (this type does not check).
#[derive(Clone, PartialEq, Message)]
pub struct Span {
    /// Trace id, 16 bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    /// Span id, 8 bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
    /// W3C `tracestate` header value.
    #[prost(string, tag = "3")]
    pub trace_state: String,
    /// Parent span id, 8 bytes; empty for a root span.
    #[prost(bytes = "vec", tag = "4")]
    pub parent_span_id: Vec<u8>,
    /// Bit field: bits 0-7 W3C trace flags, bit 8 "is-remote known", bit 9 "parent is remote".
    #[prost(fixed32, tag = "16")]
    pub flags: u32,
    /// Operation name, e.g. `GET /users/{id}`.
    #[prost(string, tag = "5")]
    pub name: String,
    /// [`span::SpanKind`] as its number; unknown numbers are kept.
    #[prost(enumeration = "span::SpanKind", tag = "6")]
    pub kind: i32,
    /// Start time, ns since the Unix epoch.
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    /// End time, ns since the Unix epoch; expected to be `>= start_time_unix_nano`.
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    /// Span attributes (unique keys).
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    /// Attributes the producer discarded.
    #[prost(uint32, tag = "10")]
    pub dropped_attributes_count: u32,
    /// Time-stamped annotations.
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<span::Event>,
    /// Events the producer discarded.
    #[prost(uint32, tag = "12")]
    pub dropped_events_count: u32,
    /// References to other spans, in this trace or others.
    #[prost(message, repeated, tag = "13")]
    pub links: Vec<span::Link>,
    /// Links the producer discarded.
    #[prost(uint32, tag = "14")]
    pub dropped_links_count: u32,
    /// Final status; unset means [`status::StatusCode::Unset`].
    #[prost(message, optional, tag = "15")]
    pub status: Option<Status>,
}

/// Types nested in [`Span`].
pub mod span {
    use prost::Message;

    use crate::otlp::KeyValue;

    /// What a span stands for relative to its neighbours (`Span.SpanKind`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum SpanKind {
        /// Not given; readers may assume [`SpanKind::Internal`].
        Unspecified = 0,
        /// An operation inside the application.
        Internal = 1,
        /// Handling of a remote request.
        Server = 2,
        /// A request to a remote service.
        Client = 3,
        /// Sending a message to a broker.
        Producer = 4,
        /// Receiving a message from a broker.
        Consumer = 5,
    }

    impl SpanKind {
        /// The proto enum value name, e.g. `SPAN_KIND_SERVER`.
        pub fn as_str_name(self) -> &'static str {
            match self {
                SpanKind::Unspecified => "SPAN_KIND_UNSPECIFIED",
                SpanKind::Internal => "SPAN_KIND_INTERNAL",
                SpanKind::Server => "SPAN_KIND_SERVER",
                SpanKind::Client => "SPAN_KIND_CLIENT",
                SpanKind::Producer => "SPAN_KIND_PRODUCER",
                SpanKind::Consumer => "SPAN_KIND_CONSUMER",
            }
        }

        /// The kind named by a proto enum value name, e.g. `SPAN_KIND_SERVER`.
        pub fn from_str_name(name: &str) -> Option<Self> {
            [
                SpanKind::Unspecified,
                SpanKind::Internal,
                SpanKind::Server,
                SpanKind::Client,
                SpanKind::Producer,
                SpanKind::Consumer,
            ]
            .into_iter()
            .find(|k| k.as_str_name() == name)
        }
    }

    /// A time-stamped annotation of a span.
    #[derive(Clone, PartialEq, Message)]
    pub struct Event {
        /// When it happened, ns since the Unix epoch.
        #[prost(fixed64, tag = "1")]
        pub time_unix_nano: u64,
        /// What happened.
        #[prost(string, tag = "2")]
        pub name: String,
        /// Event attributes (unique keys).
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
        /// Attributes the producer discarded.
        #[prost(uint32, tag = "4")]
        pub dropped_attributes_count: u32,
    }

    /// A reference from a span to another span.
    #[derive(Clone, PartialEq, Message)]
    pub struct Link {
        /// Trace id of the linked span, 16 bytes.
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        /// Span id of the linked span, 8 bytes.
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        /// W3C `tracestate` of the linked span.
        #[prost(string, tag = "3")]
        pub trace_state: String,
        /// Link attributes (unique keys).
        #[prost(message, repeated, tag = "4")]
        pub attributes: Vec<KeyValue>,
        /// Attributes the producer discarded.
        #[prost(uint32, tag = "5")]
        pub dropped_attributes_count: u32,
        /// Bit field, as [`Span::flags`](super::Span::flags).
        #[prost(fixed32, tag = "6")]
        pub flags: u32,
    }
}

/// How a span ended.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    /// Message for developers.
    #[prost(string, tag = "2")]
    pub message: String,
    /// [`status::StatusCode`] as its number; unknown numbers are kept.
    #[prost(enumeration = "status::StatusCode", tag = "3")]
    pub code: i32,
}

/// Types nested in [`Status`].
pub mod status {
    /// Outcome of a span (`Status.StatusCode`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum StatusCode {
        /// Not set (the default).
        Unset = 0,
        /// Marked successful by the application or operator.
        Ok = 1,
        /// Failed.
        Error = 2,
    }

    impl StatusCode {
        /// The proto enum value name, e.g. `STATUS_CODE_ERROR`.
        pub fn as_str_name(self) -> &'static str {
            match self {
                StatusCode::Unset => "STATUS_CODE_UNSET",
                StatusCode::Ok => "STATUS_CODE_OK",
                StatusCode::Error => "STATUS_CODE_ERROR",
            }
        }

        /// The code named by a proto enum value name, e.g. `STATUS_CODE_ERROR`.
        pub fn from_str_name(name: &str) -> Option<Self> {
            [StatusCode::Unset, StatusCode::Ok, StatusCode::Error]
                .into_iter()
                .find(|c| c.as_str_name() == name)
        }
    }
}

/// What prost allocates for an `ExportTraceServiceRequest`, for its [`crate::budget`].
pub(crate) static REQUEST: Shape = Shape(&[(
    1,
    Cost::Messages(size_of::<ResourceSpans>(), &RESOURCE_SPANS),
)]);
static RESOURCE_SPANS: Shape = Shape(&[
    (1, Cost::Message(&RESOURCE)),
    (2, Cost::Messages(size_of::<ScopeSpans>(), &SCOPE_SPANS)),
    (3, Cost::Bytes),
]);
static RESOURCE: Shape = Shape(&[
    (1, Cost::Messages(size_of::<KeyValue>(), &KEY_VALUE)),
    (3, Cost::Messages(size_of::<EntityRef>(), &ENTITY_REF)),
]);
static ENTITY_REF: Shape = Shape(&[
    (1, Cost::Bytes),
    (2, Cost::Bytes),
    (3, Cost::Strings),
    (4, Cost::Strings),
]);
static SCOPE_SPANS: Shape = Shape(&[
    (1, Cost::Message(&SCOPE)),
    (2, Cost::Messages(size_of::<Span>(), &SPAN)),
    (3, Cost::Bytes),
]);
static SCOPE: Shape = Shape(&[
    (1, Cost::Bytes),
    (2, Cost::Bytes),
    (3, Cost::Messages(size_of::<KeyValue>(), &KEY_VALUE)),
]);
static SPAN: Shape = Shape(&[
    (1, Cost::Bytes),
    (2, Cost::Bytes),
    (3, Cost::Bytes),
    (4, Cost::Bytes),
    (5, Cost::Bytes),
    (9, Cost::Messages(size_of::<KeyValue>(), &KEY_VALUE)),
    (11, Cost::Messages(size_of::<span::Event>(), &EVENT)),
    (13, Cost::Messages(size_of::<span::Link>(), &LINK)),
    (15, Cost::Message(&STATUS)),
]);
static EVENT: Shape = Shape(&[
    (2, Cost::Bytes),
    (3, Cost::Messages(size_of::<KeyValue>(), &KEY_VALUE)),
]);
static LINK: Shape = Shape(&[
    (1, Cost::Bytes),
    (2, Cost::Bytes),
    (3, Cost::Bytes),
    (4, Cost::Messages(size_of::<KeyValue>(), &KEY_VALUE)),
]);
static STATUS: Shape = Shape(&[(2, Cost::Bytes)]);

/// Decodes a protobuf `ExportTraceServiceRequest` (or `TracesData`, which has the same
/// fields). Fails with [`FormatError::Protobuf`], or [`FormatError::DecodedTooLarge`] before
/// decoding when it would take more memory than its [`crate::budget`]; never panics.
pub fn decode_request(bytes: &[u8]) -> Result<ExportTraceServiceRequest, FormatError> {
    check_decoded_size(bytes, &REQUEST, "OTLP ExportTraceServiceRequest")?;
    decode_checked_request(bytes)
}

/// [`decode_request`], with the memory the decoded request takes drawn from `pool` first
/// ([`FormatError::NoRoom`] when it has no room for it).
pub fn decode_request_drawing(
    bytes: &[u8],
    pool: &dyn crate::allowance::Pool,
) -> Result<ExportTraceServiceRequest, FormatError> {
    crate::budget::check_decoded_size_drawing(
        bytes,
        &REQUEST,
        "OTLP ExportTraceServiceRequest",
        pool,
    )?;
    decode_checked_request(bytes)
}

fn decode_checked_request(bytes: &[u8]) -> Result<ExportTraceServiceRequest, FormatError> {
    ExportTraceServiceRequest::decode(bytes).map_err(|source| FormatError::Protobuf {
        what: "OTLP ExportTraceServiceRequest",
        source,
    })
}

/// Decodes an OTLP JSON `ExportTraceServiceRequest` (or `TracesData`) document.
///
/// Keys may be lowerCamelCase or snake_case; unknown keys are ignored; `traceId`, `spanId`
/// and `parentSpanId` are hex (either case; an id of the wrong length is decoded as it is, and
/// rejected with its span alone, as a protobuf one is); 64-bit integers are
/// numbers or decimal strings; `kind` and `status.code` are numbers (their proto names are
/// accepted too). Fails with [`FormatError::Json`] naming the path of the offending value,
/// e.g. `resourceSpans[0].scopeSpans[0].spans[2].spanId: invalid hex id "81a2b3c4d5e6f"
/// (an odd number of digits: each byte is two)`. Never panics, whatever the input.
pub fn decode_request_json(json: &[u8]) -> Result<ExportTraceServiceRequest, FormatError> {
    json_decode::document(json, None)
}

/// [`decode_request_json`], with what the decoder allocates also drawn from `pool`
/// ([`FormatError::NoRoom`] when the pool runs out).
pub fn decode_request_json_drawing(
    json: &[u8],
    pool: &dyn crate::allowance::Pool,
) -> Result<ExportTraceServiceRequest, FormatError> {
    json_decode::document(json, Some(pool))
}

/// Encodes `request` as compact OTLP JSON: lowerCamelCase keys, hex ids, 64-bit integers as
/// decimal strings, enums as numbers, fields at their default left out.
pub fn encode_request_json(request: &ExportTraceServiceRequest) -> String {
    json_encode::request(request)
}

/// Encodes `response` as OTLP JSON, e.g. `{}` or
/// `{"partialSuccess":{"rejectedSpans":"2","errorMessage":"…"}}`.
pub fn encode_response_json(response: &ExportTraceServiceResponse) -> String {
    json_encode::response(response)
}
