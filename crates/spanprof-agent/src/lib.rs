//! Span profiles inside Rust async services.
//!
//! A tokio task moves between worker threads at every `.await`, so a profiler that tags OS
//! threads at the start of a request is wrong by the first poll. `tracing`'s instrumented futures
//! enter their span on every poll: [`SpanSlotLayer`] writes the innermost entered span of each
//! thread into a fixed per-thread record ([`slot`], laid out as the OpenTelemetry Thread-Local
//! Context Record of OTEP 4947), and the [`Agent`]'s CPU-time sampler copies that record in its
//! signal handler, so every sample carries the span that was really running.
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! use tracing_subscriber::prelude::*;
//!
//! tracing_subscriber::registry()
//!     // .with(tracing_opentelemetry::layer().with_tracer(tracer)) first, for OTel ids
//!     .with(spanprof_agent::SpanSlotLayer::new())
//!     .init();
//! let agent = spanprof_agent::Agent::start(spanprof_agent::AgentConfig {
//!     endpoint: "http://127.0.0.1:4318/v1development/profiles".into(),
//!     service_name: "checkout".into(),
//!     ..Default::default()
//! })
//! .expect("profiling agent");
//! // ... serve ...
//! let stats = agent.shutdown();
//! # }
//! ```
//!
//! The sampler, the exporter and the [`Agent`] are Linux-only; the layer and the slot build
//! everywhere. See the crate README for frame pointers, the gaps (work outside any span is
//! sampled unlabelled) and the `Span::enter`-across-`.await` misuse.
// Library and binary code only: a function past clippy.toml's limit (100 lines) is split
// at its steps or carries #[allow(clippy::too_many_lines)] with its reason. Tests (unit and
// integration), examples and benches are not held to it, so it is not in [workspace.lints].
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod layer;
// The TLS record a signal handler reads: raw pointers swapped under compiler fences.
#[allow(unsafe_code)]
pub mod slot;

pub use layer::SpanSlotLayer;

#[cfg(target_os = "linux")]
mod agent;
#[cfg(target_os = "linux")]
pub mod http;
#[cfg(target_os = "linux")]
// A memfd page published for out-of-process readers (mmap, raw header writes).
#[allow(unsafe_code)]
pub mod process_ctx;
#[cfg(target_os = "linux")]
pub mod profile;
#[cfg(target_os = "linux")]
// Per-thread CPU timers and the SIGPROF handler: libc calls and a lock-free ring.
#[allow(unsafe_code)]
pub mod sampler;
#[cfg(target_os = "linux")]
pub mod symbols;

#[cfg(target_os = "linux")]
pub use agent::{Agent, AgentConfig, AgentStats};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A setting is out of range or malformed; the message names it.
    #[error("spanprof-agent configuration: {0}")]
    Config(String),
    /// Another sampler runs in this process (there is one `SIGPROF` handler per process).
    #[error("spanprof-agent: a sampler is already running in this process")]
    AlreadyRunning,
    /// A system call failed.
    #[error("spanprof-agent: {0}: {1}")]
    Os(&'static str, #[source] std::io::Error),
}
