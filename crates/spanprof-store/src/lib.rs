//! Flame-graph answers over selected profile samples: pick the samples of a span, trace or
//! profile type out of an OTLP [`ProfilesData`](spanprof_format::otlp::ProfilesData), merge
//! them into a [`FlameTree`], and export it as collapsed stacks, nested JSON, Pyroscope's
//! `FlameGraph` layout / flamebearer JSON, a top-functions table or a standalone SVG.
//!
//! The embedded store of profiles and spans will live here too.
//!
//! ```
//! use spanprof_format::otlp::ProfilesData;
//! use spanprof_store::{render_svg, FlameTree, SampleSelector, SvgOptions};
//!
//! let data = ProfilesData::default();
//! let selector = SampleSelector { span_ids: vec![[1; 8]], ..Default::default() };
//! let (tree, summary) = FlameTree::from_profiles(&data, &selector)?;
//! assert_eq!((tree.total(), summary.samples_selected), (0, 0));
//! let _folded: String = tree.to_collapsed();
//! let _svg: String = render_svg(&tree, &SvgOptions::default());
//! # Ok::<(), spanprof_store::SelectError>(())
//! ```
// Library and binary code only: a function past clippy.toml's limit (100 lines) is split
// at its steps or carries #[allow(clippy::too_many_lines)] with its reason. Tests (unit and
// integration), examples and benches are not held to it, so it is not in [workspace.lints].
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod block;
mod codec;
pub mod diff;
pub mod flamegraph;
pub mod log;
pub mod matchers;
pub mod query_limit;
pub mod select;
pub mod series;
pub mod span_totals;
pub mod spans;
pub mod store;
pub mod svg;
pub mod symbols;
pub mod time;

pub use flamegraph::{
    FlameGraphLayout, FlameTree, FunctionOrder, FunctionTotals, NodeId, DEFAULT_MAX_NODES,
    OTHER_NAME, ROOT_NAME,
};
pub use select::{
    available_profile_types, for_each_selected_sample, ProfileType, SampleSelector, SelectError,
    SelectionSummary,
};
pub use span_totals::{span_totals, SpanTotal, SpanTotals};
pub use svg::{escape_xml, package_of, render_svg, SvgOptions};
