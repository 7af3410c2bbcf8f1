//! Real messages fit their budget with room to spare; messages of empty elements do not,
//! whichever decoder reads them, and are refused before they are allocated.

use prost::Message;

use std::cell::Cell;

use super::*;
use crate::allowance::POOL_DRAW;
use crate::otlp::Resource;
use crate::trace::{ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span, Status};

const GO_CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

/// A length-delimited field.
fn field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for mut v in [number << 3 | 2, payload.len() as u64] {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out.extend_from_slice(payload);
    out
}

/// `n` empty elements of field `number`: two bytes each.
fn empty_elements(number: u64, n: usize) -> Vec<u8> {
    field(number, &[]).repeat(n)
}

/// Spans as an instrumented HTTP server sends them: ids, a name, times, a few attributes.
fn real_trace_request() -> ExportTraceServiceRequest {
    let kv = |k: &str, v: &str| crate::otlp::string_kv(k, v);
    let spans = (0..200u32)
        .map(|i| Span {
            trace_id: [(i / 4) as u8; 16].to_vec(),
            span_id: [i as u8, 1, 2, 3, 4, 5, 6, 7].to_vec(),
            parent_span_id: if i % 4 == 0 {
                Vec::new()
            } else {
                [(i - 1) as u8, 1, 2, 3, 4, 5, 6, 7].to_vec()
            },
            name: "GET /cpu-heavy".into(),
            kind: 2,
            start_time_unix_nano: 1_795_945_079_507_854_997 + u64::from(i),
            end_time_unix_nano: 1_795_945_079_607_854_997 + u64::from(i),
            attributes: vec![
                kv("http.request.method", "GET"),
                kv("url.path", "/cpu-heavy"),
                kv("http.response.status_code", "200"),
            ],
            status: Some(Status::default()),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "goapp")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// What decoding took, per byte decoded.
fn ratio(used: usize, len: usize) -> f64 {
    used as f64 / len as f64
}

#[test]
fn real_messages_take_a_few_times_their_size() {
    let raw = crate::gzip::gunzip(GO_CPU, 64 << 20).unwrap();
    let budget = Budget::for_message(raw.len());
    let mut profile = crate::pprof::Profile::default();
    crate::pprof::decode::decode_into(&mut profile, &raw, &budget).unwrap();
    let pprof = ratio(budget.used(), raw.len());

    let (data, _) = crate::to_otlp::pprof_to_otlp(
        &profile,
        Resource::default(),
        Some(crate::LinkConfig::default()),
    )
    .unwrap();
    let otlp = data.encode_to_vec();
    let budget = Budget::for_message(otlp.len());
    crate::otlp::decode_tallied(&otlp, &budget, &mut Default::default()).unwrap();
    let otlp_ratio = ratio(budget.used(), otlp.len());

    let traces = real_trace_request().encode_to_vec();
    let trace_ratio = ratio(estimate(&traces, &crate::trace::REQUEST), traces.len());
    eprintln!(
        "decoded bytes per encoded byte: pprof {pprof:.2}, OTLP {otlp_ratio:.2}, traces {trace_ratio:.2}"
    );
    // Half the budget at most, so that real messages of other shapes fit too.
    for (what, r) in [
        ("pprof", pprof),
        ("OTLP", otlp_ratio),
        ("traces", trace_ratio),
    ] {
        assert!(
            r > 0.5 && r <= (DECODED_PER_BYTE / 2) as f64,
            "{what}: {r:.2} bytes decoded per byte"
        );
    }
    // And they decode through the public entry points, JSON included.
    crate::pprof::decode(GO_CPU, 64 << 20).unwrap();
    crate::detect::decode_otlp_protobuf(&otlp).unwrap();
    crate::json::decode_profiles_data(crate::json::encode_profiles_data(&data).as_bytes()).unwrap();
    crate::trace::decode_request(&traces).unwrap();
    let json = crate::trace::encode_request_json(&real_trace_request());
    crate::trace::decode_request_json(json.as_bytes()).unwrap();
}

/// 4 MiB of empty elements: each decoder refuses them as too large once decoded.
#[test]
fn empty_elements_are_refused_as_too_large_whatever_the_decoder() {
    const N: usize = 2 << 20;
    let too_large = |what: &str, r: Result<(), FormatError>| match r {
        Err(e @ FormatError::DecodedTooLarge { .. }) => {
            let text = e.to_string();
            assert!(text.contains("once decoded"), "{what}: {text}");
        }
        other => panic!("{what}: {other:?}"),
    };
    // pprof: empty samples.
    too_large(
        "pprof samples",
        crate::pprof::decode(&empty_elements(2, N), 64 << 20).map(drop),
    );
    // OTLP: empty samples of one profile; empty locations of the dictionary.
    let profile = field(1, &field(2, &field(2, &empty_elements(2, N))));
    too_large(
        "OTLP samples",
        crate::detect::decode_otlp_protobuf(&profile).map(drop),
    );
    too_large(
        "OTLP locations",
        crate::detect::decode_otlp_protobuf(&field(2, &empty_elements(2, N))).map(drop),
    );
    // OTLP: an attribute whose key-value list holds empty pairs (a vector that grows as it
    // is read).
    let list = field(6, &empty_elements(1, N));
    let attribute = field(2, &list);
    too_large(
        "OTLP key-value list",
        crate::detect::decode_otlp_protobuf(&field(2, &field(6, &attribute))).map(drop),
    );
    // Traces: empty spans, and empty attributes of one span.
    too_large(
        "trace spans",
        crate::trace::decode_request(&field(1, &field(2, &empty_elements(2, N)))).map(drop),
    );
    too_large(
        "trace attributes",
        crate::trace::decode_request(&field(1, &field(2, &field(2, &empty_elements(9, N)))))
            .map(drop),
    );
    // JSON: empty samples; empty spans.
    let objects = vec!["{}"; N].join(",");
    let json = format!(
        r#"{{"resourceProfiles":[{{"scopeProfiles":[{{"profiles":[{{"samples":[{objects}]}}]}}]}}]}}"#
    );
    too_large(
        "JSON samples",
        crate::json::decode_profiles_data(json.as_bytes()).map(drop),
    );
    let json = format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{objects}]}}]}}]}}"#);
    too_large(
        "JSON spans",
        crate::trace::decode_request_json(json.as_bytes()).map(drop),
    );
}

/// Damaged bytes are the decoder's to name: the size check lets them through.
#[test]
fn the_size_check_leaves_damaged_bytes_to_the_decoder() {
    let damaged = field(1, &[0x12, 0x05, 0x08]);
    assert!(check_decoded_size(&damaged, &crate::trace::REQUEST, "request").is_ok());
    let e = crate::trace::decode_request(&damaged).unwrap_err();
    assert!(matches!(e, FormatError::Protobuf { .. }), "{e}");
    // Unknown fields cost nothing: prost drops them.
    let unknown = empty_elements(15, 1 << 20);
    assert_eq!(estimate(&unknown, &crate::trace::REQUEST), 0);
}

#[test]
fn json_values_are_counted_outside_strings() {
    // 1 MiB of numbers: 512 Ki values of 64 bytes each is 32 MiB, over 16 MiB + 1 MiB.
    let numbers = format!("[{}]", vec!["0"; 512 << 10].join(","));
    let e = check_json_values(numbers.as_bytes(), 64, "numbers").unwrap_err();
    assert!(
        e.to_string().contains("numbers would take more than"),
        "{e}"
    );
    // The same bytes as one string (brackets, commas, colons and escaped quotes inside it
    // are not values) pass.
    let string = format!(
        r#"{{"s":"{}\"[,:"}}"#,
        numbers.replace('[', "(").replace(']', ")")
    );
    check_json_values(string.as_bytes(), 64, "a string").unwrap();
    // Damaged documents pass, for the parser to name the problem.
    check_json_values(br#"{"a":"unterminated"#, 64, "damaged").unwrap();
}

/// A pool of `room` bytes that counts what it gave.
struct TestPool {
    room: Cell<usize>,
    given: Cell<usize>,
}

impl TestPool {
    fn new(room: usize) -> Self {
        TestPool {
            room: Cell::new(room),
            given: Cell::new(0),
        }
    }
}

impl Pool for TestPool {
    fn take(&self, bytes: usize) -> bool {
        match self.room.get().checked_sub(bytes) {
            Some(left) => {
                self.room.set(left);
                self.given.set(self.given.get() + bytes);
                true
            }
            None => false,
        }
    }
}

/// A decoder drawing from a pool takes what it allocates from it, in steps, and never more
/// than its message's own limit; a pool without room for a message stops its decoder with
/// [`FormatError::NoRoom`], whichever decoder it is.
#[test]
fn decoders_draw_what_they_allocate_from_the_pool() {
    let raw = crate::gzip::gunzip(GO_CPU, 64 << 20).unwrap();
    let budget = Budget::for_message(raw.len());
    crate::pprof::decode::decode_into(&mut Default::default(), &raw, &budget).unwrap();
    let used = budget.used();

    let pool = TestPool::new(usize::MAX);
    let mut profile = crate::pprof::Profile::default();
    crate::pprof::decode_into_drawing(GO_CPU, 64 << 20, &mut profile, &pool).unwrap();
    let given = pool.given.get();
    assert!(
        given >= used && given < used + POOL_DRAW && given <= decoded_limit(raw.len()),
        "the pool gave {given} bytes for a profile that took {used}"
    );

    let no_room = |what: &str, r: Result<(), FormatError>| match r {
        Err(e @ FormatError::NoRoom { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("left for messages being decoded"),
                "{what}: {text}"
            );
        }
        other => panic!("{what}: {other:?}"),
    };
    let (data, _) = crate::to_otlp::pprof_to_otlp(&profile, Resource::default(), None).unwrap();
    let otlp = data.encode_to_vec();
    let short = || TestPool::new(used / 2);
    no_room(
        "pprof",
        crate::pprof::decode_into_drawing(GO_CPU, 64 << 20, &mut profile, &short()),
    );
    no_room(
        "OTLP",
        crate::detect::decode_otlp_protobuf_drawing(&otlp, &short()).map(drop),
    );
    crate::detect::decode_otlp_protobuf_drawing(&otlp, &TestPool::new(usize::MAX)).unwrap();
    let traces = real_trace_request().encode_to_vec();
    let estimate = estimate(&traces, &crate::trace::REQUEST);
    no_room(
        "traces",
        crate::trace::decode_request_drawing(&traces, &TestPool::new(estimate / 2)).map(drop),
    );
    let pool = TestPool::new(usize::MAX);
    crate::trace::decode_request_drawing(&traces, &pool).unwrap();
    assert!(
        pool.given.get() >= estimate,
        "{} < {estimate}",
        pool.given.get()
    );
    // The JSON decoders and the JSON estimate too.
    let otlp_json = crate::json::encode_profiles_data(&data);
    no_room(
        "OTLP JSON",
        crate::json::decode_profiles_data_drawing(otlp_json.as_bytes(), &short()).map(drop),
    );
    crate::json::decode_profiles_data_drawing(otlp_json.as_bytes(), &TestPool::new(usize::MAX))
        .unwrap();
    let traces_json = crate::trace::encode_request_json(&real_trace_request());
    no_room(
        "traces JSON",
        crate::trace::decode_request_json_drawing(traces_json.as_bytes(), &TestPool::new(1024))
            .map(drop),
    );
    no_room(
        "JSON values",
        check_json_values_drawing(
            traces_json.as_bytes(),
            64,
            "a document",
            &TestPool::new(1024),
        ),
    );
    check_json_values_drawing(
        traces_json.as_bytes(),
        64,
        "a document",
        &TestPool::new(usize::MAX),
    )
    .unwrap();
}
