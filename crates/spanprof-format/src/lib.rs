//! spanprof's data formats: the pprof codec, pprof ⇄ OTLP Profiles conversion with per-sample
//! span links, dictionary merging, and the OTLP Profiles conformance checker.
//!
//! Pure functions: no I/O, no async. Inside spanprof a profile is always an OTLP
//! [`otlp::ProfilesData`]; pprof is converted at the edges.

pub mod check;
pub mod error;
pub mod gzip;
pub mod json;
pub mod otlp;
pub mod pprof;

pub use error::FormatError;
