//! Whole-buffer deflate against zlib-rs (flate2), the peer measured in the same run: gunzip of
//! a real Go CPU profile (45 KB gzipped), gzip of it back at level 6, and raw deflate of a
//! 700-byte store-like column at level 1. Throughput is in uncompressed bytes.

// criterion_group! declares a public function without a doc comment.
#![allow(missing_docs)]

use std::io::{Read, Write};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spanprof_format::{deflate, gzip};

// The binary runs on mimalloc; measure the library the way it ships.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");
const LIMIT: usize = 64 << 20;

fn benches(c: &mut Criterion) {
    let raw = gzip::gunzip(CPU, LIMIT).unwrap();
    let mut g = c.benchmark_group("deflate");
    g.throughput(Throughput::Bytes(raw.len() as u64));
    g.bench_function("gunzip_go_cpu", |b| {
        b.iter(|| gzip::gunzip(CPU, LIMIT).unwrap())
    });
    g.bench_function("gunzip_go_cpu_zlib_rs", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(raw.len());
            flate2::read::GzDecoder::new(CPU)
                .read_to_end(&mut out)
                .unwrap();
            out
        })
    });
    g.bench_function("gzip_go_cpu", |b| b.iter(|| gzip::gzip(&raw)));
    g.bench_function("gzip_go_cpu_zlib_rs", |b| {
        b.iter(|| {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            z.write_all(&raw).unwrap();
            z.finish().unwrap()
        })
    });
    let column = &raw[raw.len() / 2..raw.len() / 2 + 700];
    g.throughput(Throughput::Bytes(column.len() as u64));
    g.bench_function("deflate_column_700", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            deflate::deflate_into(column, &mut out);
            out
        })
    });
    g.bench_function("deflate_column_700_zlib_rs", |b| {
        b.iter(|| {
            let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(2));
            z.write_all(column).unwrap();
            z.finish().unwrap()
        })
    });
    g.finish();
}

criterion_group!(name = deflate_benches; config = Criterion::default().sample_size(30); targets = benches);
criterion_main!(deflate_benches);
