//! The embedded store's answers over a real Go CPU profile (`testdata/go/cpu-10s.pb.gz`, whose
//! samples carry trace/span ids under the OTel and Pyroscope label keys) and spans built for
//! its span ids. Every expected number is summed straight from the pprof samples' labels, or
//! read by the real `go tool pprof`.
//!
//! - `store_answers/fixture.rs`: the profile, its copies (own ids, shifted time, scaled values), the
//!   spans that meet their samples, and the per-span sums.
//! - `retention.rs`: by age and by size, whole sealed segments, never the active one.
//! - `coverage.rs`: `span_coverage` of busy, idle and too-short spans.
//! - `export.rs`: `pprof()` read back by `go tool pprof -raw` / `-top`.
//! - `selection.rs`: span filters (name, duration, percentiles), `diff`, traces, labels.
//! - `time_series.rs`: buckets, groups and exemplars.
//! - `metadata.rs`: profile types, services, series, label names and values, spans.
//! - `dedup.rs`: 100 ingests of the same profile store its symbols once.
//! - `damage.rs`: a damaged sealed segment is named and skipped; the rest still answers.

pub mod fixture;
// The parser of `go tool pprof -raw` output the CLI's tests use; one parser for the tree.
pub use spanprof_testkit::raw;

mod coverage;
mod damage;
mod dedup;
mod export;
mod metadata;
mod retention;
mod selection;
mod time_series;
