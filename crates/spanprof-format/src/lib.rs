//! spanprof's data formats: the pprof codec, pprof ⇄ OTLP Profiles conversion with per-sample
//! span links, dictionary merging, and the OTLP Profiles conformance checker.
//!
//! Pure functions: no I/O, no async. Inside spanprof a profile is always an OTLP
//! [`otlp::ProfilesData`]; pprof is converted at the edges.

pub mod budget;
pub mod check;
pub mod deflate;
pub mod error;
pub mod gzip;
pub mod jfr;
pub mod json;
pub mod limits;
pub mod otlp;
pub mod pprof;
pub mod profile_type;

pub use error::FormatError;
pub mod batch;
pub mod detect;
pub mod dictionary;
pub mod link;
pub mod link_in_place;
pub mod merge;
pub mod to_otlp;
pub mod to_pprof;
pub mod trace;
mod wire;

pub use batch::{Batch, ConversionReport};
pub use link::LinkConfig;
