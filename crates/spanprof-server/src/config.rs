//! Server settings. Every setting has a default; `spanprof serve` with no flags runs the
//! whole thing on one machine.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spanprof_format::LinkConfig;
use spanprof_store::store::StoreConfig;

/// Everything `spanprof serve` runs with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// UI, API, Pyroscope ingest and OTLP/HTTP profiles (default `0.0.0.0:4040`).
    pub http_addr: SocketAddr,
    /// OTLP/HTTP traces and profiles (default `0.0.0.0:4318`); `None` disables it.
    pub otlp_http_addr: Option<SocketAddr>,
    /// OTLP gRPC traces and profiles; `None` (the library's default, so embedders and tests
    /// do not all claim :4317) disables it. `spanprof serve` enables it on `0.0.0.0:4317`.
    pub otlp_grpc_addr: Option<SocketAddr>,
    /// Store directory (default `./spanprof-data`).
    pub data_dir: PathBuf,
    /// Which sample attributes become span links.
    pub link: LinkConfig,
    /// Request size limits.
    pub limits: Limits,
    /// The pipeline's queue and batching.
    pub queue: QueueConfig,
    /// Targets to pull profiles from.
    pub scrape: Vec<ScrapeTarget>,
}

/// Request size limits, in bytes.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body as sent (compressed).
    pub max_body_bytes: usize,
    /// Largest request body after decompression (OTLP recommends 64 MiB).
    pub max_decompressed_bytes: usize,
}

/// The pipeline's bounded queue and batching.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Items waiting at most; beyond, receivers answer 429 / RESOURCE_EXHAUSTED.
    pub capacity: usize,
    /// Items written to the store in one durable write at most.
    pub batch_max: usize,
    /// How long a batch may wait for more items before it is written.
    pub batch_age: Duration,
}

/// One service to pull `/debug/pprof/*` from.
#[derive(Debug, Clone)]
pub struct ScrapeTarget {
    /// Service name given to its profiles.
    pub service: String,
    /// Base URL, e.g. `http://127.0.0.1:6060` (the `/debug/pprof/...` paths are appended).
    pub url: String,
    /// Profiles to take: `cpu`, `heap`, `allocs`, `goroutine`, `mutex`, `block`.
    pub profiles: Vec<String>,
    /// Time between non-CPU scrapes; also the CPU window length (windows are back to back).
    pub interval: Duration,
    /// Extra resource labels for its profiles.
    pub labels: Vec<(String, String)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            http_addr: SocketAddr::from(([0, 0, 0, 0], 4040)),
            otlp_http_addr: Some(SocketAddr::from(([0, 0, 0, 0], 4318))),
            otlp_grpc_addr: None,
            data_dir: PathBuf::from("./spanprof-data"),
            link: LinkConfig::default(),
            limits: Limits {
                max_body_bytes: 32 << 20,
                max_decompressed_bytes: 64 << 20,
            },
            queue: QueueConfig {
                capacity: 1024,
                batch_max: 256,
                batch_age: Duration::from_millis(20),
            },
            scrape: Vec::new(),
        }
    }
}

impl ScrapeTarget {
    /// A target with the default profiles (cpu, heap, goroutine) every 15 s.
    pub fn new(service: impl Into<String>, url: impl Into<String>) -> Self {
        ScrapeTarget {
            service: service.into(),
            url: url.into().trim_end_matches('/').to_owned(),
            profiles: vec!["cpu".into(), "heap".into(), "goroutine".into()],
            interval: Duration::from_secs(15),
            labels: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// The store settings for the data directory.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig::new(&self.data_dir)
    }
}
