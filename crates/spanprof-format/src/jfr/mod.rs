//! JFR (Java Flight Recorder) recordings, as the JDK and async-profiler write them (the
//! Pyroscope Java agent's uploads), read into one pprof profile per kind of sample (CPU,
//! wall clock, allocations, locks, …), named and valued as Pyroscope's own JFR conversion
//! (grafana/jfr-parser) names and values them.
//!
//! JFR becomes pprof rather than OTLP directly: every Pyroscope upload already goes pprof →
//! linked OTLP through one tested path (series labels, span-id links, limits), and the
//! pprof it makes is what Pyroscope itself makes from the same JFR, so both can be compared.
//!
//! Pure: bytes in, profiles out. A recording is several chunks, each with its header, its
//! metadata (the types, read from the file), its constant pools and its events.

mod chunk;
pub mod labels;
pub mod metadata;
pub mod pool;
mod profiles;
pub mod reader;
mod stacks;

pub use labels::LabelsSnapshot;
pub use profiles::{jfr_to_pprof, JfrOptions, JfrProfile, JfrReport, SampleKind};

/// Why a recording could not be read: what was wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JFR: {message} (at byte {offset})")]
pub struct JfrError {
    /// Offset in the recording (decompressed), in bytes.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl JfrError {
    /// An error at `offset`.
    pub fn at(offset: usize, message: String) -> Self {
        JfrError { offset, message }
    }
}

impl From<JfrError> for crate::FormatError {
    fn from(e: JfrError) -> Self {
        crate::FormatError::Invalid(e.to_string())
    }
}

/// Whether `bytes` (decompressed) start like a JFR recording.
pub fn is_jfr(bytes: &[u8]) -> bool {
    bytes.starts_with(reader::MAGIC)
}
