//! The stored form of one span: fixed-size ids, times in ns, and bounded sets of attributes
//! (the span's and its resource's) with their values as text.

use std::sync::Arc;

use spanprof_format::otlp::{any_value::Value, AnyValue, KeyValue};

/// Most attributes a [`SpanRecord`] keeps; later ones are dropped (spans are looked up by
/// id, not by attribute, so a bound keeps a hostile producer from bloating the store).
pub const MAX_ATTRIBUTES: usize = 32;

/// Longest attribute key or value a [`SpanRecord`] keeps, in bytes; longer text is cut at the
/// last char boundary at or below it.
pub const MAX_ATTRIBUTE_BYTES: usize = 256;

/// Longest span name, service name or status message a [`SpanRecord`] keeps, in bytes;
/// longer text is cut at the last char boundary at or below it. Unbounded, spans named with
/// a megabyte each made 660 KB of gzipped OTLP into 1.3 GB on disk.
pub const MAX_NAME_BYTES: usize = 1024;

/// Most events a [`SpanRecord`] keeps, the first ones (an exception a span recorded, a retry,
/// a cache miss: what happened in it, and when).
pub const MAX_EVENTS: usize = 16;

/// Most attributes a [`SpanEvent`] keeps. An exception event has four
/// (`exception.type`, `.message`, `.stacktrace`, `.escaped`).
pub const MAX_EVENT_ATTRIBUTES: usize = 8;

/// Longest event attribute value a [`SpanEvent`] keeps, in bytes: the top of an exception's
/// stack trace, where [`MAX_ATTRIBUTE_BYTES`] would keep its first line.
pub const MAX_EVENT_VALUE_BYTES: usize = 1024;

/// The service of spans whose resource has no `service.name` (the OpenTelemetry default).
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// One span as the store keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SpanRecord {
    /// Trace id, 16 bytes, never all zero when produced by [`super::spans_from_otlp`].
    pub trace_id: [u8; 16],
    /// Span id, 8 bytes, never all zero when produced by [`super::spans_from_otlp`].
    pub span_id: [u8; 8],
    /// Parent span id; `None` for a root span.
    pub parent_span_id: Option<[u8; 8]>,
    /// Operation name, e.g. `GET /users/{id}`.
    pub name: String,
    /// The resource's `service.name`, or [`UNKNOWN_SERVICE`].
    pub service: String,
    /// Start time, ns since the Unix epoch.
    pub start_ns: u64,
    /// End time, ns since the Unix epoch; `>= start_ns` when produced by
    /// [`super::spans_from_otlp`].
    pub end_ns: u64,
    /// OTLP `SpanKind` number (0 unspecified, 1 internal, 2 server, 3 client, 4 producer,
    /// 5 consumer).
    pub kind: i32,
    /// OTLP `StatusCode` number (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// Status message; empty when none.
    pub status_message: String,
    /// Span attributes as (key, value text), in the producer's order: at most
    /// [`MAX_ATTRIBUTES`], each key and value at most [`MAX_ATTRIBUTE_BYTES`] bytes.
    pub attributes: Vec<(String, String)>,
    /// The attributes of the span's resource other than `service.name` (which is
    /// `service`): the host, process, SDK and version that ran it, as (key, value text),
    /// bounded as `attributes` are. Shared: the spans of one resource hold one list.
    pub resource: SpanResource,
    /// What the span said happened in it, in the producer's order: at most [`MAX_EVENTS`].
    pub events: Vec<SpanEvent>,
}

/// One event of a span: a time, a name, and attributes as (key, value text), at most
/// [`MAX_EVENT_ATTRIBUTES`], keys cut to [`MAX_ATTRIBUTE_BYTES`] and values to
/// [`MAX_EVENT_VALUE_BYTES`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SpanEvent {
    /// When it happened, ns since the Unix epoch.
    pub time_ns: u64,
    /// What happened, e.g. `exception`; at most `MAX_NAME_BYTES` bytes.
    pub name: String,
    /// Its attributes, e.g. `exception.message`.
    pub attributes: Vec<(String, String)>,
}

/// A span's resource attributes (see [`SpanRecord::resource`]).
pub type SpanResource = Arc<[(String, String)]>;

impl SpanRecord {
    /// How long the span ran, in ns (0 when `end_ns` is before `start_ns`).
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The value of attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The first [`MAX_ATTRIBUTES`] of `attributes`, keys and stringified values cut to
/// [`MAX_ATTRIBUTE_BYTES`].
pub(super) fn bounded_attributes<'a>(
    attributes: impl IntoIterator<Item = &'a KeyValue>,
) -> Vec<(String, String)> {
    bounded_pairs(attributes, MAX_ATTRIBUTES, MAX_ATTRIBUTE_BYTES)
}

/// The first `count` of `attributes`, keys cut to [`MAX_ATTRIBUTE_BYTES`] and stringified
/// values to `value_bytes`.
pub(super) fn bounded_pairs<'a>(
    attributes: impl IntoIterator<Item = &'a KeyValue>,
    count: usize,
    value_bytes: usize,
) -> Vec<(String, String)> {
    attributes
        .into_iter()
        .take(count)
        .map(|kv| {
            let value = kv.value.as_ref().map(stringify).unwrap_or_default();
            (bounded(&kv.key), bounded_to(&value, value_bytes))
        })
        .collect()
}

/// `text` cut to at most [`MAX_ATTRIBUTE_BYTES`] bytes at a char boundary.
pub(super) fn bounded(text: &str) -> String {
    bounded_to(text, MAX_ATTRIBUTE_BYTES)
}

/// `text` cut to at most `max` bytes at a char boundary.
pub(super) fn bounded_to(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// An attribute value as text: strings as they are, numbers and booleans as Rust prints them,
/// bytes as lower-case hex, arrays and key-value lists as compact JSON.
pub(super) fn stringify(value: &AnyValue) -> String {
    match &value.value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BytesValue(b)) => hex(b),
        None => String::new(),
        Some(_) => match to_json(value) {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        },
    }
}

fn to_json(value: &AnyValue) -> serde_json::Value {
    use serde_json::Value as Json;
    match &value.value {
        None => Json::Null,
        Some(Value::StringValue(s)) => Json::String(s.clone()),
        Some(Value::BoolValue(b)) => Json::Bool(*b),
        Some(Value::IntValue(i)) => Json::from(*i),
        // NaN and infinities have no JSON number: keep their Rust names as strings.
        Some(Value::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map_or_else(|| Json::String(d.to_string()), Json::Number),
        Some(Value::BytesValue(b)) => Json::String(hex(b)),
        Some(Value::ArrayValue(a)) => Json::Array(a.values.iter().map(to_json).collect()),
        Some(Value::KvlistValue(l)) => Json::Object(
            l.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value.as_ref().map_or(Json::Null, to_json),
                    )
                })
                .collect(),
        ),
        // Only meaningful against a profiles dictionary, which spans do not have.
        Some(Value::StringValueStrindex(i)) => Json::String(format!("strindex:{i}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::otlp::{ArrayValue, KeyValueList};

    fn value(v: Value) -> AnyValue {
        AnyValue { value: Some(v) }
    }

    #[test]
    fn spans_attribute_values_are_stringified() {
        let cases = [
            (value(Value::StringValue("a b".into())), "a b"),
            (value(Value::BoolValue(true)), "true"),
            (value(Value::IntValue(-42)), "-42"),
            (value(Value::DoubleValue(0.25)), "0.25"),
            (value(Value::DoubleValue(f64::NAN)), "NaN"),
            (value(Value::BytesValue(vec![0x00, 0xab])), "00ab"),
            (AnyValue { value: None }, ""),
            (
                value(Value::ArrayValue(ArrayValue {
                    values: vec![
                        value(Value::IntValue(1)),
                        value(Value::StringValue("x".into())),
                    ],
                })),
                r#"[1,"x"]"#,
            ),
            (
                value(Value::KvlistValue(KeyValueList {
                    values: vec![KeyValue {
                        key: "k".into(),
                        value: Some(value(Value::BoolValue(false))),
                        ..Default::default()
                    }],
                })),
                r#"{"k":false}"#,
            ),
        ];
        for (v, want) in cases {
            assert_eq!(stringify(&v), want, "for {v:?}");
        }
    }

    #[test]
    fn spans_attributes_are_bounded_in_number_and_bytes() {
        let attrs: Vec<KeyValue> = (0..40)
            .map(|i| KeyValue {
                key: format!("k{i}"),
                value: Some(value(Value::IntValue(i))),
                ..Default::default()
            })
            .collect();
        let kept = bounded_attributes(&attrs);
        assert_eq!(kept.len(), MAX_ATTRIBUTES);
        assert_eq!(kept[31], ("k31".to_string(), "31".to_string()));

        // 'é' is 2 bytes: 255 ASCII bytes then 'é' would end at byte 257, so it goes.
        let long = format!("{}é{}", "a".repeat(255), "b".repeat(10));
        let cut = bounded(&long);
        assert_eq!(cut, "a".repeat(255));
        let exact = "é".repeat(128);
        assert_eq!(bounded(&exact), exact);
        let kv = KeyValue {
            key: long.clone(),
            value: Some(value(Value::StringValue("€".repeat(100)))),
            ..Default::default()
        };
        let (k, v) = &bounded_attributes(&[kv])[0];
        assert_eq!((k.len(), v.len()), (255, 255));
        assert!(v.chars().all(|c| c == '€'));
    }

    #[test]
    fn spans_duration_never_underflows() {
        let mut s = SpanRecord {
            start_ns: 10,
            end_ns: 25,
            ..Default::default()
        };
        assert_eq!(s.duration_ns(), 15);
        s.end_ns = 5;
        assert_eq!(s.duration_ns(), 0);
    }
}
