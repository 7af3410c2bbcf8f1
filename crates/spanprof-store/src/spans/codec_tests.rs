//! The span codec: random batches round-trip exactly, every truncation is an error, and
//! damaged or arbitrary bytes never panic.

use proptest::collection::vec;
use proptest::prelude::*;

use std::ops::ControlFlow;

use super::codec::{decode_spans, encode_spans, scan_spans, SpanDecodeError, SPAN_FORMAT_VERSION};
use super::record::{SpanEvent, SpanRecord, SpanResource};

/// Times and durations: the extremes the wrapping deltas must survive, and anything.
fn ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![0, 1, u64::MAX - 1, u64::MAX, 1 << 63]),
        0..1_000u64,
        any::<u64>(),
    ]
}

/// Texts that repeat (so the string table dedupes), need escaping elsewhere, or are anything.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["", "GET /cart", "checkout", "é€😀", "a\0b\"c"])
            .prop_map(String::from),
        any::<String>(),
    ]
}

fn span() -> impl Strategy<Value = SpanRecord> {
    let trace = prop_oneof![Just([7u8; 16]), any::<[u8; 16]>()];
    let ids = (trace, any::<[u8; 8]>(), prop::option::of(any::<[u8; 8]>()));
    let texts = (
        text(),
        text(),
        text(),
        vec((text(), text()), 0..4),
        resource(),
        vec(event(), 0..3),
    );
    (ids, texts, ns(), ns(), any::<i32>(), any::<i32>()).prop_map(
        |(
            (trace_id, span_id, parent_span_id),
            (name, service, status_message, attributes, resource, events),
            start_ns,
            end_ns,
            kind,
            status_code,
        )| SpanRecord {
            trace_id,
            span_id,
            parent_span_id,
            name,
            service,
            start_ns,
            end_ns,
            kind,
            status_code,
            status_message,
            attributes,
            resource,
            events,
        },
    )
}

fn event() -> impl Strategy<Value = SpanEvent> {
    (ns(), text(), vec((text(), text()), 0..3)).prop_map(|(time_ns, name, attributes)| SpanEvent {
        time_ns,
        name,
        attributes,
    })
}

/// Resources that repeat (so the resource table dedupes) or are anything.
fn resource() -> impl Strategy<Value = SpanResource> {
    prop_oneof![
        Just(Vec::new()),
        Just(vec![("host.name".to_owned(), "web-1".to_owned())]),
        vec((text(), text()), 0..3),
    ]
    .prop_map(SpanResource::from)
}

fn batch() -> impl Strategy<Value = Vec<SpanRecord>> {
    vec(span(), 0..8)
}

fn encode(spans: &[SpanRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_spans(spans, &mut out);
    out
}

proptest! {
    #[test]
    fn spans_codec_round_trips_random_batches(spans in batch()) {
        prop_assert_eq!(decode_spans(&encode(&spans)), Ok(spans));
    }

    /// Scanning hands out views that read as the records, attribute lookups included, and
    /// stops where the visitor says.
    #[test]
    fn spans_codec_scans_views_in_place_and_stops_when_told(
        spans in batch(),
        stop in any::<prop::sample::Index>(),
    ) {
        let bytes = encode(&spans);
        let mut seen = Vec::new();
        let flow = scan_spans(&bytes, |v| {
            let record = v.to_record();
            for (k, value) in &record.attributes {
                assert!(v.attributes().any(|a| a == (k.as_str(), value.as_str())));
            }
            assert_eq!(v.attribute("no such key"), record.attribute("no such key"));
            seen.push(record);
            ControlFlow::Continue(())
        });
        prop_assert_eq!(flow, Ok(ControlFlow::Continue(())));
        prop_assert_eq!(&seen, &spans);
        if !spans.is_empty() {
            let stop = stop.index(spans.len());
            let mut visited = 0;
            let flow = scan_spans(&bytes, |_| {
                visited += 1;
                if visited > stop { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            });
            prop_assert_eq!(flow, Ok(ControlFlow::Break(())));
            prop_assert_eq!(visited, stop + 1);
        }
    }

    #[test]
    fn spans_codec_rejects_every_truncation(spans in batch(), at in any::<prop::sample::Index>()) {
        let bytes = encode(&spans);
        let len = at.index(bytes.len());
        prop_assert!(decode_spans(&bytes[..len]).is_err(), "prefix of {} bytes decoded", len);
    }

    #[test]
    fn spans_codec_survives_damaged_blocks(
        spans in batch(),
        edits in vec((any::<prop::sample::Index>(), 0..3u8, any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&spans);
        for (at, kind, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        // Whatever decodes must be a batch that encodes and decodes again.
        if let Ok(decoded) = decode_spans(&bytes) {
            prop_assert_eq!(decode_spans(&encode(&decoded)), Ok(decoded));
        }
    }

    #[test]
    fn spans_codec_survives_arbitrary_bytes(mut bytes in vec(any::<u8>(), 0..128)) {
        let _ = decode_spans(&bytes);
        // Past the version byte, where most of the decoder is, in each version it reads.
        for version in 1..=SPAN_FORMAT_VERSION {
            if let Some(first) = bytes.first_mut() {
                *first = version;
            }
            let _ = decode_spans(&bytes);
        }
    }
}

#[test]
fn spans_codec_appends_and_is_compact() {
    let resource = SpanResource::from(vec![
        ("host.name".to_owned(), "web-1".to_owned()),
        ("process.pid".to_owned(), "4242".to_owned()),
    ]);
    let span = |i: u8| SpanRecord {
        trace_id: [7; 16],
        span_id: [i; 8],
        parent_span_id: Some([1; 8]),
        name: "GET /cart".into(),
        service: "checkout".into(),
        start_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1000,
        end_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1000 + 250_000,
        kind: 2,
        status_code: 0,
        status_message: String::new(),
        attributes: vec![("http.method".into(), "GET".into())],
        resource: resource.clone(),
        // One span in the batch recorded an exception, 0.2 ms in.
        events: (i == 50)
            .then(|| SpanEvent {
                time_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1000 + 200_000,
                name: "exception".into(),
                attributes: vec![("exception.type".into(), "TimeoutError".into())],
            })
            .into_iter()
            .collect(),
    };
    let spans: Vec<SpanRecord> = (1..=100).map(span).collect();
    let mut out = b"prefix".to_vec();
    encode_spans(&spans, &mut out);
    assert_eq!(&out[..6], b"prefix");
    assert_eq!(out[6], SPAN_FORMAT_VERSION);
    let decoded = decode_spans(&out[6..]).unwrap();
    assert_eq!(decoded, spans);
    // The spans of one resource share one list again.
    assert!(decoded
        .iter()
        .all(|s| std::sync::Arc::ptr_eq(&s.resource, &decoded[0].resource)));
    // 18 bytes of trace index, span and parent id, 15 for everything else, and the
    // resource's texts once for all (the same span takes about 90 bytes as OTLP protobuf).
    let per_span = (out.len() - 6) / spans.len();
    assert!(per_span <= 34, "{per_span} bytes per span");
    assert_eq!(decode_spans(&encode(&[])).unwrap(), vec![]);
}

/// A block as version 1 wrote it (no resources) still reads, its spans with no resource
/// attributes.
#[test]
fn spans_codec_reads_version_1_blocks() {
    let mut v1 = vec![1, 3, 3, b'G', b'E', b'T', 3, b'a', b'p', b'i', 0, 1];
    v1.extend([7; 16]);
    // One span: trace 0, its id, no parent, start +100 (zigzag 200), 50 long, kind 2
    // (zigzag 4), status 0, name "GET", service "api", no message, one attribute.
    v1.extend([1, 0]);
    v1.extend([1; 8]);
    v1.extend([0, 0xc8, 0x01, 50, 4, 0, 0, 1, 2, 1, 1, 0]);
    let want = SpanRecord {
        trace_id: [7; 16],
        span_id: [1; 8],
        name: "GET".into(),
        service: "api".into(),
        start_ns: 100,
        end_ns: 150,
        kind: 2,
        attributes: vec![("api".into(), "GET".into())],
        ..Default::default()
    };
    assert_eq!(decode_spans(&v1), Ok(vec![want]));
    // A resource index in a version 1 block is a byte too many.
    let mut longer = v1.clone();
    longer.push(0);
    assert!(decode_spans(&longer).is_err());
}

#[test]
fn spans_codec_errors_say_where() {
    assert_eq!(
        decode_spans(&[]),
        Err(SpanDecodeError::Truncated {
            offset: 0,
            what: "version"
        })
    );
    assert_eq!(
        decode_spans(&[9]).unwrap_err().to_string(),
        "span block has layout version 9; this build reads versions 1 to 2"
    );
    let mut bytes = encode(&[SpanRecord::default()]);
    bytes.push(0);
    let last = bytes.len() - 1;
    assert_eq!(
        decode_spans(&bytes),
        Err(SpanDecodeError::Damaged {
            offset: last,
            what: "bytes left after the last span"
        })
    );
    // A count of 2^63 strings, which no input could hold.
    let huge = [
        1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
    ];
    assert_eq!(
        decode_spans(&huge).unwrap_err().to_string(),
        "span block is damaged at byte 1: count larger than the rest of the input can hold"
    );
    let too_long = [
        1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ];
    assert_eq!(
        decode_spans(&too_long).unwrap_err().to_string(),
        "span block is damaged at byte 1: varint longer than 64 bits"
    );
    // One string whose bytes are not UTF-8.
    assert_eq!(
        decode_spans(&[1, 1, 1, 0xff, 0, 0])
            .unwrap_err()
            .to_string(),
        "span block is damaged at byte 3: string is not UTF-8"
    );
    // A string longer than what is left.
    assert_eq!(
        decode_spans(&[1, 1, 5, b'a']).unwrap_err().to_string(),
        "span block is truncated: string missing at byte 4"
    );
}
