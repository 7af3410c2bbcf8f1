//! Receivers: they decode and link what arrives and hand it to the pipeline.

pub mod body;
pub mod grpc;
pub mod inflight;
pub mod known_spans;
pub mod otlp;
pub mod pyroscope;
pub mod rate;
pub mod rejection;
pub mod scrape;
