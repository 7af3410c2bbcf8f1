//! Runs one phase many times, for instruction-count profiling:
//! `valgrind --tool=callgrind target/release/examples/convert_loop PHASE N`.
use spanprof_format::otlp::Resource;
use spanprof_format::{gzip, pprof, Batch, LinkConfig};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[2].parse().unwrap();
    for _ in 0..n {
        match args[1].as_str() {
            "gunzip" => drop(gzip::gunzip(CPU, 64 << 20).unwrap()),
            "decode" => drop(pprof::decode(CPU, 64 << 20).unwrap()),
            "convert" => {
                let p = pprof::decode(CPU, 64 << 20).unwrap();
                let mut b = Batch::new(Some(LinkConfig::default()));
                b.add_pprof(&p, Resource::default()).unwrap();
                drop(b.finish());
            }
            _ => panic!("phase: gunzip | decode | convert"),
        }
    }
}
