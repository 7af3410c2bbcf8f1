//! The crate's integration tests: one binary (`cargo test -p spanprof-store --test it`), one module
//! per concern, so the workspace links one test executable per crate instead of one per file.
//! Run one module with `cargo test -p spanprof-store --test it <module>::`.

mod common;

mod diff;
mod disk_space;
mod golden;
mod log_crash;
mod matchers;
mod profile_times;
mod refused_profiles;
mod sample_types;
mod segment_size;
mod select;
mod series;
mod span_details;
mod store_answers;
mod store_compact;
mod store_crash;
mod store_disk;
mod store_model;
mod symbol_generations;

/// The name libtest gives test `name` of module `module` (its `module_path!()`): the path below
/// the crate root, which is what `--exact` matches when a test re-runs itself as a child.
pub fn libtest_name(module: &str, name: &str) -> String {
    let below_root = module.split_once("::").map_or("", |(_, rest)| rest);
    format!("{below_root}::{name}")
}

#[test]
fn the_crate_has_one_integration_test_binary() {
    spanprof_testkit::assert_one_test_binary(env!("CARGO_MANIFEST_DIR"));
}
