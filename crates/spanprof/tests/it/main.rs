//! The crate's integration tests: one binary (`cargo test -p spanprof --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof --test it <module>::`.

mod support;

mod agent;
mod bad_input;
mod check_conformance;
mod cli_output;
mod docs;
mod forward;
mod go_profiles;
mod goapp;
mod jfr;
mod scrape;
mod serve_go;
mod serve_grpc;
mod shutdown;
mod store;
mod store_write_failure;
mod tenants;
mod tls;
mod tls_listen;
mod ui;
