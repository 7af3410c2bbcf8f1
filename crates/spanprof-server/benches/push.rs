//! The push.v1 forwarder's CPU per export: queued OTLP profile records (the real Go CPU
//! profile `testdata/go/cpu-10s.pb.gz`, 598 samples, linked as the pipeline queues it, each
//! record with fresh span and trace ids) to one `PushRequest`. Three ways, same run:
//! merging the records, re-encoding and decoding the merged request, then converting it (how
//! the forwarder did it first); converting each record on its own (how it does now); and the
//! OTLP/HTTP forwarder's own work on the same export (decode, merge, encode), the peer the
//! push forwarder has to keep up with. Throughput is in records, so figures read as records
//! per second of one core.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use spanprof_format::merge::merge;
use spanprof_format::otlp::{ProfilesData, Resource};
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::{pprof, LinkConfig};
use spanprof_server::forward::push::{push_request, push_request_of};

// The binary runs on mimalloc; measure the exporter the way it ships.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");
/// Records per export: what a forwarder under load takes at once (its batch holds up to 256).
const RECORDS: usize = 64;

/// Queued record `k`: the template with every hex id string (16 or 32 digits) replaced by a
/// fresh one, linked to OTLP.
fn record(template: &pprof::Profile, k: usize) -> Vec<u8> {
    let mut p = template.clone();
    for (j, s) in p.string_table.iter_mut().enumerate() {
        let hex = s.bytes().all(|b| b.is_ascii_hexdigit());
        if hex && (s.len() == 16 || s.len() == 32) {
            let n = (k as u128) << 64 | j as u128;
            *s = format!("{:0width$x}", n | 1, width = s.len());
        }
    }
    let (data, _) = pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default()))
        .expect("testdata profile converts");
    data.encode_to_vec()
}

fn merged(bodies: &[Vec<u8>]) -> Vec<u8> {
    let decoded: Vec<ProfilesData> = bodies
        .iter()
        .map(|b| ProfilesData::decode(b.as_slice()).unwrap())
        .collect();
    merge(decoded.iter(), None).unwrap().0.encode_to_vec()
}

fn push_export(c: &mut Criterion) {
    let template = pprof::decode(CPU, 64 << 20).unwrap();
    let bodies: Vec<Vec<u8>> = (0..RECORDS).map(|k| record(&template, k)).collect();
    let mut g = c.benchmark_group("push_export");
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.bench_function("merge_reencode_convert", |b| {
        b.iter(|| push_request(&merged(&bodies), false).unwrap())
    });
    g.bench_function("convert_each_record", |b| {
        b.iter(|| {
            let converted = push_request_of(&bodies, false);
            assert!(converted.failed.is_empty());
            converted.request
        })
    });
    g.bench_function("otlp_http_peer_merge", |b| b.iter(|| merged(&bodies)));
    g.finish();
}

criterion_group!(benches, push_export);
criterion_main!(benches);
