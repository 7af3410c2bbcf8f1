//! What the store's own tests ingest: the real Go CPU profile of `testdata/`, linked, as one
//! OTLP request, and a store that does not sync (the tests do not test durability).

use std::path::Path;

use spanprof_format::otlp::{string_kv, ProfilesData, Resource};
use spanprof_format::{pprof, Batch, LinkConfig};

use super::{Store, StoreConfig};

const CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

/// `testdata/go/cpu-10s.pb.gz` of service `service`, linked: one profile per sample type.
pub fn go_cpu_request(service: &str) -> ProfilesData {
    let p = pprof::decode(CPU, 64 << 20).unwrap();
    let mut batch = Batch::new(Some(LinkConfig::default()));
    let resource = Resource {
        attributes: vec![string_kv("service.name", service)],
        ..Default::default()
    };
    batch.add_pprof(&p, resource).unwrap();
    batch.finish().0
}

/// A store in `dir` that does not sync its writes.
pub fn unsynced_store(dir: &Path) -> Store {
    let mut cfg = StoreConfig::new(dir);
    cfg.sync = false;
    Store::open(cfg).unwrap().0
}
