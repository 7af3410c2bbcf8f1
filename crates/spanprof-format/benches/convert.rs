//! Hot paths of the format crate on a real Go CPU profile (10 s under load, 598 samples with
//! span labels): pprof and OTLP decode, pprof → linked OTLP, OTLP → pprof, and merge. Throughput is in pprof
//! samples, so figures read as samples per second.
//!
//! Beside it, JFR → linked OTLP on a real async-profiler recording with its labels snapshot
//! (testdata/jfr/dump2: CPU, wall, allocation and live-object events with span contexts),
//! gunzip included, in the recording's sample events per second.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use prost::Message;
use spanprof_format::detect::decode_otlp_protobuf;
use spanprof_format::gzip;
use spanprof_format::jfr::{jfr_to_pprof, JfrOptions, LabelsSnapshot};
use spanprof_format::merge::merge;
use spanprof_format::otlp::Resource;
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::to_pprof::{otlp_to_merged_pprof, otlp_to_pprof, PprofOptions};
use spanprof_format::{pprof, Batch, LinkConfig};

// The binary runs on mimalloc; measure the library the way it ships.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");
const JFR: &[u8] = include_bytes!("../../../testdata/jfr/dump2.jfr.gz");
const JFR_LABELS: &[u8] = include_bytes!("../../../testdata/jfr/dump2.labels.pb.gz");
const LIMIT: usize = 64 << 20;

fn benches(c: &mut Criterion) {
    let profile = pprof::decode(CPU, LIMIT).unwrap();
    let samples = profile.sample.len() as u64;
    let (otlp, _) =
        pprof_to_otlp(&profile, Resource::default(), Some(LinkConfig::default())).unwrap();

    let mut g = c.benchmark_group("format");
    g.throughput(Throughput::Elements(samples));
    g.bench_function("pprof_decode_gzip", |b| {
        b.iter(|| pprof::decode(CPU, LIMIT).unwrap())
    });
    g.bench_function("pprof_to_linked_otlp_incl_gunzip", |b| {
        b.iter(|| {
            let p = pprof::decode(CPU, LIMIT).unwrap();
            let mut batch = Batch::new(Some(LinkConfig::default()));
            batch.add_pprof(&p, Resource::default()).unwrap();
            batch.finish()
        })
    });
    g.finish();

    // JFR → linked OTLP, as /ingest?format=jfr runs it (gunzip, read, one pprof per kind,
    // each added to one linked batch).
    let labels =
        LabelsSnapshot::decode_snapshot(&gzip::gunzip(JFR_LABELS, LIMIT).unwrap()).unwrap();
    let jfr_to_otlp = || {
        let raw = gzip::gunzip(JFR, LIMIT).unwrap();
        let (profiles, report) = jfr_to_pprof(&raw, Some(&labels), &JfrOptions::default()).unwrap();
        let mut batch = Batch::new(Some(LinkConfig::default()));
        for p in &profiles {
            batch.add_pprof(&p.profile, Resource::default()).unwrap();
        }
        (batch.finish(), report)
    };
    let (_, report) = jfr_to_otlp();
    let sample_events: u64 = [
        "jdk.ExecutionSample",
        "profiler.WallClockSample",
        "jdk.ObjectAllocationInNewTLAB",
        "jdk.ObjectAllocationOutsideTLAB",
        "profiler.LiveObject",
    ]
    .iter()
    .filter_map(|t| report.events.get(*t))
    .sum();
    let mut g = c.benchmark_group("format");
    g.throughput(Throughput::Elements(sample_events));
    g.bench_function("jfr_to_linked_otlp_incl_gunzip", |b| b.iter(jfr_to_otlp));
    g.finish();

    let mut g = c.benchmark_group("format");
    g.throughput(Throughput::Elements(samples));
    // What the OTLP receivers run (with the v1.9 numbering check), and prost's derived
    // decoder on the same bytes as the peer.
    let otlp_bytes = otlp.encode_to_vec();
    g.bench_function("otlp_decode", |b| {
        b.iter(|| decode_otlp_protobuf(&otlp_bytes).unwrap())
    });
    g.bench_function("otlp_decode_prost", |b| {
        b.iter(|| spanprof_format::otlp::ProfilesData::decode(otlp_bytes.as_slice()).unwrap())
    });
    g.bench_function("otlp_to_pprof", |b| {
        b.iter(|| otlp_to_pprof(&otlp, &PprofOptions::default()).unwrap())
    });
    g.finish();

    // Merging: 100 converted scrapes into one request, as a forwarder batches them.
    let many: Vec<_> = (0..100).map(|_| otlp.clone()).collect();
    let mut g = c.benchmark_group("merge");
    g.throughput(Throughput::Elements(samples * many.len() as u64));
    g.bench_function("merge_100_otlp", |b| b.iter(|| merge(&many, None).unwrap()));
    g.bench_function("merge_100_pprof_into_one", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut batch = Batch::new(Some(LinkConfig::default()));
                for _ in 0..100 {
                    batch
                        .add_pprof(&pprof::decode(CPU, LIMIT).unwrap(), Resource::default())
                        .unwrap();
                }
                otlp_to_merged_pprof(&batch.finish().0, &PprofOptions::default()).unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(name = convert; config = Criterion::default().sample_size(20); targets = benches);
criterion_main!(convert);
