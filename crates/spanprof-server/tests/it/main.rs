//! The crate's integration tests: one binary (`cargo test -p spanprof-server --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof-server --test it <module>::`.

mod common;

mod api;
mod auth;
mod jfr;
mod listen_tls;
mod pyroscope;
mod querier;
mod querier_heatmap;
mod querier_tree;
mod receivers;
mod remote;
mod remote_wire;
mod render;
mod span_focus;
mod span_search;
mod tempo;

#[test]
fn the_crate_has_one_integration_test_binary() {
    spanprof_testkit::assert_one_test_binary(env!("CARGO_MANIFEST_DIR"));
}
