//! The span side of the store, pure (no I/O): OTLP spans become bounded [`SpanRecord`]s,
//! batches of records are encoded compactly for the log, a [`SpanIndex`] answers lookups by
//! span id, trace and parent, and [`search`] / [`duration_percentile`] answer queries.
//!
//! All times are ns since the Unix epoch; all durations are ns.
//!
//! ```
//! use spanprof_format::trace::decode_request_json;
//! use spanprof_store::spans::{decode_spans, encode_spans, search, spans_from_otlp, SpanIndex, SpanQuery};
//!
//! let request = decode_request_json(br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
//!     "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
//!     "name":"GET /work","startTimeUnixNano":"100","endTimeUnixNano":"350"}]}]}]}"#)?;
//! let (records, report) = spans_from_otlp(&request.resource_spans);
//! assert_eq!((report.accepted, report.rejected), (1, 0));
//!
//! let mut log_record = Vec::new();
//! encode_spans(&records, &mut log_record);
//! let mut index = SpanIndex::new();
//! for span in decode_spans(&log_record)? {
//!     index.insert(span);
//! }
//! let slow = search(index.iter(), &SpanQuery { min_duration_ns: Some(200), ..Default::default() });
//! assert_eq!(slow[0].service, "unknown_service");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
mod index;
mod ingest;
pub mod otlp;
mod record;
mod search;
mod view;

#[cfg(test)]
mod codec_tests;
#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod search_tests;

pub use codec::{decode_spans, encode_spans, scan_spans, SpanDecodeError, SPAN_FORMAT_VERSION};
pub use index::SpanIndex;
pub use ingest::{spans_from_otlp, spans_from_otlp_retaining, SpanIngestReport, MAX_REASONS};
pub use record::{
    SpanEvent, SpanRecord, SpanResource, MAX_ATTRIBUTES, MAX_ATTRIBUTE_BYTES, MAX_EVENTS,
    MAX_EVENT_ATTRIBUTES, MAX_EVENT_VALUE_BYTES, UNKNOWN_SERVICE,
};
pub use search::{
    duration_percentile, kind_name, percentile, search, status_name, CompareOp, SpanQuery,
    TextCondition, TextField,
};
pub use view::{Longest, SpanView};
