//! spanprof's data formats: the pprof codec, pprof ⇄ OTLP Profiles conversion with per-sample
//! span links, dictionary merging, and the OTLP Profiles conformance checker.
//!
//! Pure functions: no I/O, no async. Inside spanprof a profile is always an OTLP
//! [`otlp::ProfilesData`]; pprof is converted at the edges.
// Library and binary code only: a function past clippy.toml's limit (100 lines) is split
// at its steps or carries #[allow(clippy::too_many_lines)] with its reason. Tests (unit and
// integration), examples and benches are not held to it, so it is not in [workspace.lints].
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod allowance;
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
