//! Store hot paths on real Go CPU profiles (598 samples and 235 spans each, fresh span and
//! trace ids per run of profiles; see `examples/store_scale.rs`): durable ingest of 20 profiles
//! per call, and flame graphs of one span and of one service over a store of 2,000 profiles,
//! answered from its segment files; sealing a segment of 2,000 profiles. Throughput is in pprof samples (the store keeps two values
//! per sample, `samples/count` and `cpu/nanoseconds`, as two blocks). Each hot path has a peer
//! measured in the same run: ingest without fsync and the pprof → OTLP conversion before it;
//! the in-memory selector over OTLP for the flame graphs.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

// The example holds the profile stream (and declares mimalloc, the binary's allocator, as the
// global allocator of this bench too).
#[path = "../examples/store_scale.rs"]
#[allow(dead_code)]
mod store_scale;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use spanprof_format::otlp::ProfilesData;
use spanprof_format::pprof;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, Store, StoreConfig};
use spanprof_store::{FlameTree, SampleSelector};
use store_scale::synthetic::{Synthetic, SERVICE};

/// Profiles per ingest call.
const BATCH: u64 = 20;
/// Batches made up front for the ingest benches, then ingested again round-robin.
const POOL: u64 = 16;
/// Profiles in the store the flame graphs are asked of.
const QUERY_PROFILES: u64 = 2_000;
/// One distinct span per this many pprof samples (the script's 10 M samples / 1 M spans).
const SAMPLES_PER_SPAN: u64 = 10;

fn stream(profiles: u64) -> Synthetic {
    let samples = profiles * Synthetic::new(1, 1, 1).samples_per_profile();
    Synthetic::new(samples, samples / SAMPLES_PER_SPAN, 6)
}

/// Profiles `first..first + n` converted as the receiver does, with their new spans.
fn converted(syn: &Synthetic, first: u64, n: u64) -> (Vec<ProfilesData>, Vec<SpanRecord>) {
    (first..first + n)
        .map(|k| (syn.otlp(k, &syn.pprof(k)), syn.new_spans(k)))
        .fold((Vec::new(), Vec::new()), |(mut d, mut s), (data, spans)| {
            d.push(data);
            s.extend(spans);
            (d, s)
        })
}

fn open(dir: &std::path::Path, sync: bool) -> Store {
    let mut cfg = StoreConfig::new(dir);
    cfg.sync = sync;
    Store::open(cfg).expect("store opens").0
}

fn ingest(c: &mut Criterion) {
    let syn = stream(POOL * BATCH);
    let batches: Vec<_> = (0..POOL)
        .map(|b| converted(&syn, b * BATCH, BATCH))
        .collect();
    let pprofs: Vec<pprof::Profile> = (0..BATCH).map(|k| syn.pprof(k)).collect();

    let mut g = c.benchmark_group("store_ingest");
    g.throughput(Throughput::Elements(BATCH * syn.samples_per_profile()));
    for (name, sync) in [
        ("durable_20_profiles", true),
        ("no_fsync_20_profiles", false),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path(), sync);
        let mut next = 0;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    next += 1;
                    let (data, spans) = &batches[next % batches.len()];
                    (data, spans.clone())
                },
                |(data, spans)| {
                    let refs: Vec<&ProfilesData> = data.iter().collect();
                    store.ingest(&refs, spans).expect("ingest")
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.bench_function("peer_pprof_to_otlp_20_profiles", |b| {
        b.iter(|| {
            pprofs
                .iter()
                .enumerate()
                .map(|(k, p)| syn.otlp(k as u64, p))
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

fn flame(c: &mut Criterion) {
    let syn = stream(QUERY_PROFILES);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path(), true);
    for first in (0..QUERY_PROFILES).step_by(BATCH as usize) {
        let (data, spans) = converted(&syn, first, BATCH);
        let refs: Vec<&ProfilesData> = data.iter().collect();
        store.ingest(&refs, spans).expect("ingest");
    }
    let span = syn.new_spans(0)[0].span_id;
    let one_span = Selection {
        span_ids: vec![span],
        ..Default::default()
    };
    let (first_ns, last_ns) = syn.time_range_ns();
    let service = Selection {
        service: Some(SERVICE.to_owned()),
        from_ns: first_ns,
        to_ns: last_ns,
        ..Default::default()
    };
    let service_samples = store
        .flame_graph(&service)
        .expect("flame")
        .1
        .samples_selected;
    let profile = syn.otlp(0, &syn.pprof(0));
    let in_memory = |span_ids: Vec<[u8; 8]>| {
        let selector = SampleSelector {
            span_ids,
            ..Default::default()
        };
        FlameTree::from_profiles(&profile, &selector).expect("select")
    };
    assert!(in_memory(vec![span]).1.samples_selected > 0);

    let mut g = c.benchmark_group("store_flame");
    g.sample_size(10);
    g.bench_function("one_span_2000_profiles", |b| {
        b.iter(|| store.flame_graph(&one_span).expect("flame"))
    });
    g.bench_function("peer_one_span_in_memory_one_profile", |b| {
        b.iter(|| in_memory(vec![span]))
    });
    g.throughput(Throughput::Elements(service_samples));
    g.bench_function("one_service_all_time_2000_profiles", |b| {
        b.iter(|| store.flame_graph(&service).expect("flame"))
    });
    g.throughput(Throughput::Elements(syn.samples_per_profile()));
    g.bench_function("peer_all_samples_in_memory_one_profile", |b| {
        b.iter(|| in_memory(Vec::new()))
    });
    g.finish();

    // A trace view's coverages: each span's own samples and, for spans without, the period of
    // the profiles around them, for the spans of the first profiles at once (they share
    // blocks). Peer: the flame graph of the same spans, one pass over the same samples.
    let spans: Vec<SpanRecord> = (0..4).flat_map(|k| syn.new_spans(k)).collect();
    let cpu = store
        .flame_graph(&one_span)
        .expect("flame")
        .1
        .profile_type_id;
    let cpu = cpu.expect("the span's samples have a type").to_string();
    let same_spans = Selection {
        span_ids: spans.iter().map(|s| s.span_id).collect(),
        profile_type: Some(cpu.clone()),
        ..Default::default()
    };
    let mut g = c.benchmark_group("store_coverage");
    g.sample_size(10);
    g.throughput(Throughput::Elements(spans.len() as u64));
    g.bench_function("span_coverages_of_the_spans_of_4_profiles", |b| {
        b.iter(|| store.span_coverages(&spans, Some(&cpu)).expect("coverage"))
    });
    // As a span list asks them: no type, each span's resolved by its own samples.
    g.bench_function("span_coverages_of_the_spans_of_4_profiles_no_type", |b| {
        b.iter(|| store.span_coverages(&spans, None).expect("coverage"))
    });
    g.bench_function("peer_flame_graph_of_the_same_spans", |b| {
        b.iter(|| store.flame_graph(&same_spans).expect("flame"))
    });
    g.finish();
}

/// Sealing a segment of `QUERY_PROFILES` profiles with many spans each: the index file (sorted
/// span and trace maps), Bloom filters, fsync. Its maps must outgrow the CPU caches, as a full
/// segment's do (a few hundred profiles' fit and hide what a real seal pays). Peer: writing and syncing as
/// many bytes, the floor for any seal.
fn seal(c: &mut Criterion) {
    // About 240 spans per profile, as in bench/serve-load.sh's profiles.
    let samples = QUERY_PROFILES * Synthetic::new(1, 1, 1).samples_per_profile();
    let syn = Synthetic::new(samples, samples * 2 / 5, 6);
    let batches: Vec<_> = (0..QUERY_PROFILES / BATCH)
        .map(|b| converted(&syn, b * BATCH, BATCH))
        .collect();
    let filled = || {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = StoreConfig::new(dir.path());
        cfg.segment_max_bytes = u64::MAX;
        let store = Store::open(cfg).expect("store opens").0;
        for (data, spans) in &batches {
            let refs: Vec<&ProfilesData> = data.iter().collect();
            store.ingest(&refs, spans.clone()).expect("ingest");
        }
        (dir, store)
    };
    let (dir, store) = filled();
    store.rotate().expect("seal");
    let index_bytes: u64 = std::fs::read_dir(dir.path().join("index"))
        .expect("store dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    assert!(index_bytes > 0, "the seal wrote no index file");
    let bytes = vec![7u8; index_bytes as usize];

    let mut g = c.benchmark_group("store_seal");
    g.sample_size(10);
    g.throughput(Throughput::Elements(QUERY_PROFILES));
    g.bench_function("seal_2000_profiles", |b| {
        b.iter_batched_ref(
            filled,
            |(_, store)| store.rotate().expect("seal"),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("peer_write_and_fsync_the_index_bytes", |b| {
        let path = dir.path().join("peer");
        b.iter(|| {
            std::fs::write(&path, &bytes).expect("write");
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .expect("fsync");
        })
    });
    g.finish();
}

criterion_group!(name = store; config = Criterion::default().sample_size(20); targets = ingest, flame, seal);
criterion_main!(store);
