//! The crate's integration tests: one binary (`cargo test -p spanprof --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof --test it <module>::`.

mod agent;
mod bad_input;
mod check_conformance;
mod cli_output;
mod collector;
mod docs;
mod forward;
mod forward_push;
mod go_profiles;
mod goapp;
mod jfr;
mod remote_topology;
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
mod ui_keyboard;
mod ui_remote;
mod ui_span;

/// The test kit finds the CLI and cargo's scratch directory from the test executable (cargo
/// tells them to test crates only); these are the ones cargo built and made.
#[test]
fn the_test_kit_finds_what_cargo_tells_test_crates() {
    use std::path::Path;
    assert_eq!(
        spanprof_testkit::spanprof_bin(),
        Path::new(env!("CARGO_BIN_EXE_spanprof"))
    );
    assert_eq!(
        spanprof_testkit::scratch_dir(),
        Path::new(env!("CARGO_TARGET_TMPDIR"))
    );
}

#[test]
fn the_crate_has_one_integration_test_binary() {
    spanprof_testkit::assert_one_test_binary(env!("CARGO_MANIFEST_DIR"));
}
