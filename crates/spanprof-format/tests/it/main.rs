//! The crate's integration tests: one binary (`cargo test -p spanprof-format --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof-format --test it <module>::`.

mod jfr_support;

mod bad_input;
mod jfr_bad;
mod jfr_jvm;
mod jfr_public;
mod roundtrip;
