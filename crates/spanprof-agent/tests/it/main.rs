//! The crate's integration tests: one binary (`cargo test -p spanprof-agent --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof-agent --test it <module>::`.

mod export;
mod sampler;
