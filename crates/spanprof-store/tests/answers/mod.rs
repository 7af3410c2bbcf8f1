//! The store's answers over the real Go CPU profile; see `store_answers.rs`.

pub mod fixture;
// The parser of `go tool pprof -raw` output the CLI's tests use; one parser for the tree.
#[allow(dead_code)]
#[path = "../../../spanprof/tests/support/raw.rs"]
pub mod raw;

mod coverage;
mod damage;
mod dedup;
mod export;
mod metadata;
mod retention;
mod selection;
mod time_series;
