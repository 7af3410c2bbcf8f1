//! Runs one phase many times, for instruction-count profiling:
//! `valgrind --tool=callgrind target/release/examples/convert_loop PHASE N`.
use prost::Message;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::otlp::Resource;
use spanprof_format::{detect, gzip, pprof, Batch, LinkConfig};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[2].parse().unwrap();
    // The OTLP phases decode the linked conversion of the same profile.
    let otlp = args[1].starts_with("otlp").then(|| {
        let p = pprof::decode(CPU, 64 << 20).unwrap();
        let mut b = Batch::new(Some(LinkConfig::default()));
        b.add_pprof(&p, Resource::default()).unwrap();
        b.finish().0.encode_to_vec()
    });
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
            "otlp" => drop(detect::decode_otlp_protobuf(otlp.as_deref().unwrap()).unwrap()),
            "otlp-prost" => drop(ProfilesData::decode(otlp.as_deref().unwrap()).unwrap()),
            _ => panic!("phase: gunzip | decode | convert | otlp | otlp-prost"),
        }
    }
}
