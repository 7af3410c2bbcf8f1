//! Bad JFR input: each refused with an error that names the problem, never a panic. A small
//! writer of the format makes the recordings that no JVM writes (dangling references, cyclic
//! or absurdly deep metadata); real recordings are cut and corrupted for the rest.

use proptest::prelude::*;
use spanprof_format::jfr::{jfr_to_pprof, JfrOptions, SampleKind};

/// A JFR varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    for _ in 0..8 {
        if v < 0x80 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An event: its size (padded to 4 bytes, as the JDK writes it) and `body`.
fn event(body: &[u8]) -> Vec<u8> {
    let n = body.len() + 4;
    let mut out = vec![
        (n as u8 & 0x7f) | 0x80,
        ((n >> 7) as u8 & 0x7f) | 0x80,
        ((n >> 14) as u8 & 0x7f) | 0x80,
        (n >> 21) as u8 & 0x7f,
    ];
    out.extend_from_slice(body);
    out
}

fn utf8(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A type: (id, name, fields (name, type id, pooled, array)).
type ClassDef<'a> = (u64, &'a str, Vec<(&'a str, u64, bool, bool)>);

/// A metadata event describing `classes`, with the element tree nested `extra_depth` more
/// levels under the symbol's field (0: as the JDK writes it).
fn metadata(classes: &[ClassDef], extra_depth: usize) -> Vec<u8> {
    let mut strings: Vec<String> = Vec::new();
    let mut idx = |s: &str| -> u64 {
        if let Some(i) = strings.iter().position(|x| x == s) {
            return i as u64;
        }
        strings.push(s.to_owned());
        (strings.len() - 1) as u64
    };
    let mut tree = Vec::new();
    let element = |tree: &mut Vec<u8>,
                   idx: &mut dyn FnMut(&str) -> u64,
                   name: &str,
                   attrs: &[(&str, String)],
                   children: u64| {
        varint(tree, idx(name));
        varint(tree, attrs.len() as u64);
        for (k, v) in attrs {
            varint(tree, idx(k));
            varint(tree, idx(v));
        }
        varint(tree, children);
    };
    element(&mut tree, &mut idx, "root", &[], 1);
    element(&mut tree, &mut idx, "metadata", &[], classes.len() as u64);
    for (id, name, fields) in classes {
        element(
            &mut tree,
            &mut idx,
            "class",
            &[("id", id.to_string()), ("name", name.to_string())],
            fields.len() as u64,
        );
        for (fi, (fname, t, pooled, array)) in fields.iter().enumerate() {
            let mut attrs = vec![("name", fname.to_string()), ("class", t.to_string())];
            if *pooled {
                attrs.push(("constantPool", "true".into()));
            }
            if *array {
                attrs.push(("dimension", "1".into()));
            }
            let deep = fi == 0 && *name == "jdk.types.Symbol" && extra_depth > 0;
            element(&mut tree, &mut idx, "field", &attrs, u64::from(deep));
            if deep {
                for d in 0..extra_depth {
                    element(
                        &mut tree,
                        &mut idx,
                        "annotation",
                        &[],
                        u64::from(d + 1 < extra_depth),
                    );
                }
            }
        }
    }
    let mut body = Vec::new();
    varint(&mut body, 0); // type: metadata
    varint(&mut body, 0); // start
    varint(&mut body, 0); // duration
    varint(&mut body, 1); // metadata id
    varint(&mut body, strings.len() as u64);
    for s in &strings {
        utf8(&mut body, s);
    }
    body.extend_from_slice(&tree);
    event(&body)
}

/// A chunk of `metadata`, one checkpoint with `pools`, then `events`.
fn chunk(metadata: &[u8], pools: &[(u64, Vec<Vec<u8>>)], events: &[Vec<u8>]) -> Vec<u8> {
    let mut cp = Vec::new();
    varint(&mut cp, 1); // type: checkpoint
    varint(&mut cp, 0);
    varint(&mut cp, 0);
    varint(&mut cp, 0); // delta to the previous checkpoint
    cp.push(0);
    varint(&mut cp, pools.len() as u64);
    for (type_id, entries) in pools {
        varint(&mut cp, *type_id);
        varint(&mut cp, entries.len() as u64);
        for e in entries {
            cp.extend_from_slice(e);
        }
    }
    let cp = event(&cp);
    let meta_at = 68;
    let cp_at = meta_at + metadata.len();
    let mut body = Vec::new();
    body.extend_from_slice(metadata);
    body.extend_from_slice(&cp);
    for e in events {
        body.extend_from_slice(e);
    }
    let size = 68 + body.len();
    let mut out = Vec::new();
    out.extend_from_slice(b"FLR\0");
    out.extend_from_slice(&2u16.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    for v in [
        size as i64,
        cp_at as i64,
        meta_at as i64,
        1_700_000_000_000_000_000,
        1_000_000_000,
        0,
        1_000_000_000,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&1u32.to_be_bytes()); // compressed integers
    out.extend_from_slice(&body);
    out
}

const LONG: u64 = 20;
const INT: u64 = 21;
const BOOLEAN: u64 = 22;
const STRING: u64 = 23;
const SYMBOL: u64 = 24;
const CLASS: u64 = 25;
const METHOD: u64 = 26;
const FRAME: u64 = 27;
const TRACE: u64 = 28;
const SAMPLE: u64 = 29;
const UNKNOWN: u64 = 30;
const CYCLIC: u64 = 31;
const CYCLIC_EVENT: u64 = 32;

fn classes() -> Vec<ClassDef<'static>> {
    vec![
        (LONG, "long", vec![]),
        (INT, "int", vec![]),
        (BOOLEAN, "boolean", vec![]),
        (STRING, "java.lang.String", vec![]),
        (
            SYMBOL,
            "jdk.types.Symbol",
            vec![("string", STRING, false, false)],
        ),
        (
            CLASS,
            "java.lang.Class",
            vec![("name", SYMBOL, true, false)],
        ),
        (
            METHOD,
            "jdk.types.Method",
            vec![("type", CLASS, true, false), ("name", SYMBOL, true, false)],
        ),
        (
            FRAME,
            "jdk.types.StackFrame",
            vec![
                ("method", METHOD, true, false),
                ("lineNumber", INT, false, false),
            ],
        ),
        (
            TRACE,
            "jdk.types.StackTrace",
            vec![
                ("truncated", BOOLEAN, false, false),
                ("frames", FRAME, false, true),
            ],
        ),
        (
            SAMPLE,
            "jdk.ExecutionSample",
            vec![
                ("startTime", LONG, false, false),
                ("stackTrace", TRACE, true, false),
            ],
        ),
        (
            UNKNOWN,
            "x.SomethingElse",
            vec![("startTime", LONG, false, false)],
        ),
        (CYCLIC, "x.Cyclic", vec![("next", CYCLIC, false, false)]),
        (
            CYCLIC_EVENT,
            "x.CyclicEvent",
            vec![("c", CYCLIC, false, false)],
        ),
    ]
}

/// Writes one field of a constant.
type FieldWriter<'a> = &'a dyn Fn(&mut Vec<u8>);

fn entry(key: u64, fields: &[FieldWriter]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, key);
    for f in fields {
        f(&mut out);
    }
    out
}

/// Symbols 1 `demo/Main` and 2 `work`, class 1, method 1, stack trace 1 (one frame, line 7).
fn pools() -> Vec<(u64, Vec<Vec<u8>>)> {
    vec![
        (
            SYMBOL,
            vec![
                entry(1, &[&|o| utf8(o, "demo/Main")]),
                entry(2, &[&|o| utf8(o, "work")]),
            ],
        ),
        (CLASS, vec![entry(1, &[&|o| varint(o, 1)])]),
        (
            METHOD,
            vec![entry(1, &[&|o| varint(o, 1), &|o| varint(o, 2)])],
        ),
        (
            TRACE,
            vec![entry(
                1,
                &[&|o| o.push(0), &|o| {
                    varint(o, 1);
                    varint(o, 1);
                    varint(o, 7)
                }],
            )],
        ),
    ]
}

fn sample(stack: u64) -> Vec<u8> {
    let mut b = Vec::new();
    varint(&mut b, SAMPLE);
    varint(&mut b, 5);
    varint(&mut b, stack);
    event(&b)
}

fn read(bytes: &[u8]) -> Result<Vec<spanprof_format::jfr::JfrProfile>, String> {
    jfr_to_pprof(bytes, None, &JfrOptions::default())
        .map(|(p, _)| p)
        .map_err(|e| e.to_string())
}

#[track_caller]
fn refused(bytes: &[u8], needle: &str) {
    let e = read(bytes).map(|p| p.len()).expect_err("refused");
    assert!(e.contains(needle), "{e:?} lacks {needle:?}");
}

#[test]
fn the_writer_makes_what_the_reader_reads() {
    let good = chunk(&metadata(&classes(), 0), &pools(), &[sample(1), sample(1)]);
    let (profiles, report) = jfr_to_pprof(&good, None, &JfrOptions::default()).unwrap();
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].kind, SampleKind::Cpu);
    let p = &profiles[0].profile;
    assert_eq!(p.sample.len(), 1);
    assert_eq!(
        p.sample[0].value,
        vec![20_000_000],
        "two samples at the default 100 Hz"
    );
    let f = &p.function[0];
    assert_eq!(p.string_table[f.name as usize], "demo/Main.work");
    assert_eq!(p.location[0].line[0].line, 7);
    assert_eq!(report.chunks, 1);
    // Two chunks in one file read as one recording.
    let twice = [good.clone(), good].concat();
    let (profiles, report) = jfr_to_pprof(&twice, None, &JfrOptions::default()).unwrap();
    assert_eq!(report.chunks, 2);
    let total: i64 = profiles[0].profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total, 40_000_000);
}

#[test]
fn unknown_event_types_are_skipped_and_counted() {
    let mut other = Vec::new();
    varint(&mut other, UNKNOWN);
    varint(&mut other, 1);
    let bytes = chunk(
        &metadata(&classes(), 0),
        &pools(),
        &[event(&other), sample(1), event(&other)],
    );
    let (profiles, report) = jfr_to_pprof(&bytes, None, &JfrOptions::default()).unwrap();
    assert_eq!(profiles.len(), 1);
    assert_eq!(report.events.get("x.SomethingElse"), Some(&2));
    assert_eq!(report.skipped_events, 2);
    // An event of a type the metadata does not describe at all: skipped, counted by id.
    let mut undescribed = Vec::new();
    varint(&mut undescribed, 999);
    let bytes = chunk(
        &metadata(&classes(), 0),
        &pools(),
        &[event(&undescribed), sample(1)],
    );
    let (_, report) = jfr_to_pprof(&bytes, None, &JfrOptions::default()).unwrap();
    assert_eq!(report.events.get("unknown type 999"), Some(&1));
}

#[test]
fn references_that_point_nowhere_are_named() {
    let bytes = chunk(&metadata(&classes(), 0), &pools(), &[sample(99)]);
    refused(&bytes, "stack trace 99 is in no constant pool");
    let mut p = pools();
    p[2] = (
        METHOD,
        vec![entry(1, &[&|o| varint(o, 5), &|o| varint(o, 2)])],
    );
    refused(
        &chunk(&metadata(&classes(), 0), &p, &[sample(1)]),
        "class 5 is in no constant pool",
    );
    let mut p = pools();
    p[3] = (
        TRACE,
        vec![entry(
            1,
            &[&|o| o.push(0), &|o| {
                varint(o, 1);
                varint(o, 8);
                varint(o, 7)
            }],
        )],
    );
    refused(
        &chunk(&metadata(&classes(), 0), &p, &[sample(1)]),
        "method 8 is in no constant pool",
    );
    // A pool of a type the metadata lacks.
    let mut p = pools();
    p.push((77, vec![entry(1, &[])]));
    refused(
        &chunk(&metadata(&classes(), 0), &p, &[]),
        "type 77 is not described",
    );
}

#[test]
fn cyclic_and_absurdly_deep_metadata_are_refused() {
    let mut b = Vec::new();
    varint(&mut b, CYCLIC_EVENT);
    // Each level of the cyclic type is written in place: 40 levels of nothing but nesting.
    let bytes = chunk(&metadata(&classes(), 0), &pools(), &[event(&b)]);
    // Not wanted by the reader (no sample comes of it): skipped without being decoded.
    assert!(read(&bytes).is_ok());
    let mut p = pools();
    p.push((CYCLIC, vec![entry(1, &[])]));
    refused(
        &chunk(&metadata(&classes(), 0), &p, &[]),
        "nests values deeper than 32 levels",
    );
    refused(
        &chunk(&metadata(&classes(), 100), &pools(), &[]),
        "metadata elements nest deeper than 16",
    );
}

#[test]
fn truncated_and_oversized_chunks_are_named() {
    let good = chunk(&metadata(&classes(), 0), &pools(), &[sample(1)]);
    refused(&good[..good.len() - 3], "past the end of the file");
    refused(&good[..40], "truncated chunk header");
    let mut big = good.clone();
    big[8..16].copy_from_slice(&(1i64 << 40).to_be_bytes());
    refused(&big, "past the end of the file");
    let mut meta_past = good.clone();
    meta_past[24..32].copy_from_slice(&(good.len() as i64 + 5).to_be_bytes());
    refused(&meta_past, "metadata offset");
    // An event whose size runs past its chunk.
    let mut ev = sample(1);
    ev[0] = 0xff;
    ev[1] = 0xff;
    refused(
        &chunk(&metadata(&classes(), 0), &pools(), &[ev]),
        "is not within its chunk",
    );
    refused(b"", "no chunk");
    refused(
        b"PK\x03\x04 not jfr at all, but long enough to hold a whole header of a chunk....",
        "not a JFR chunk",
    );
    let mut v1 = good;
    v1[5] = 1;
    v1[4] = 0;
    refused(&v1, "JFR version 1.1 is not supported");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = read(&bytes);
        let mut framed = b"FLR\0\0\x02\0\x01".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = read(&framed);
    }

    #[test]
    fn corrupted_recordings_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = chunk(&metadata(&classes(), 0), &pools(), &[sample(1), sample(1)]);
        let n = bytes.len();
        for (at, v) in flips {
            bytes[at % n] = v;
        }
        let _ = read(&bytes);
    }
}

fn real_recording() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/jfr/new_spancontext.jfr.gz");
    spanprof_format::gzip::gunzip(&std::fs::read(path).unwrap(), 64 << 20).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// async-profiler's recording with bytes changed anywhere: an error or profiles, never
    /// a panic.
    #[test]
    fn a_corrupted_real_recording_never_panics(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..16), cut in any::<usize>()) {
        let mut bytes = real_recording();
        let n = bytes.len();
        for (at, v) in flips {
            bytes[at % n] = v;
        }
        let _ = read(&bytes);
        let _ = read(&bytes[..cut % n]);
    }
}
