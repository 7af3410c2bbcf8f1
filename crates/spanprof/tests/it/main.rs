//! The crate's integration tests: one binary (`cargo test -p spanprof --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof --test it <module>::`.

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

/// The test kit finds the CLI beside the test executable; this is the binary cargo built.
#[test]
fn the_test_kit_runs_the_cli_cargo_built() {
    assert_eq!(
        spanprof_testkit::spanprof_bin(),
        std::path::Path::new(env!("CARGO_BIN_EXE_spanprof"))
    );
}

#[test]
fn the_crate_has_one_integration_test_binary() {
    spanprof_testkit::assert_one_test_binary(env!("CARGO_MANIFEST_DIR"));
}
