//! `querier.v1` and `types.v1` messages, declared with prost derives from the field numbers of
//! Pyroscope's `api/querier/v1/querier.proto` and `api/types/v1/types.proto`.
//!
//! Fields we never read but must recognise to refuse (`stack_trace_selector`, `async`) are
//! declared as `bytes`: same wire type as an embedded message, so their presence is seen
//! without declaring their schema.

/// `querier.v1.ProfileTypesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProfileTypesRequest {
    #[prost(int64, tag = "1")]
    pub start: i64,
    #[prost(int64, tag = "2")]
    pub end: i64,
}

/// `querier.v1.ProfileTypesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProfileTypesResponse {
    #[prost(message, repeated, tag = "1")]
    pub profile_types: Vec<ProfileType>,
}

/// `types.v1.ProfileType` (field 3 is unused upstream).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProfileType {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub sample_type: String,
    #[prost(string, tag = "5")]
    pub sample_unit: String,
    #[prost(string, tag = "6")]
    pub period_type: String,
    #[prost(string, tag = "7")]
    pub period_unit: String,
}

/// `types.v1.LabelNamesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelNamesRequest {
    #[prost(string, repeated, tag = "1")]
    pub matchers: Vec<String>,
    #[prost(int64, tag = "2")]
    pub start: i64,
    #[prost(int64, tag = "3")]
    pub end: i64,
}

/// `types.v1.LabelNamesResponse` (also the shape of `LabelValuesResponse`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamesResponse {
    #[prost(string, repeated, tag = "1")]
    pub names: Vec<String>,
}

/// `types.v1.LabelValuesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelValuesRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub matchers: Vec<String>,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
}

/// `querier.v1.SeriesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SeriesRequest {
    #[prost(string, repeated, tag = "1")]
    pub matchers: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub label_names: Vec<String>,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
}

/// `querier.v1.SeriesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SeriesResponse {
    #[prost(message, repeated, tag = "2")]
    pub labels_set: Vec<Labels>,
}

/// `types.v1.Labels`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Labels {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
}

/// `types.v1.LabelPair`, as the push receiver reads it.
pub use crate::receivers::pyroscope::LabelPair;

/// `querier.v1.FlameGraph`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FlameGraph {
    #[prost(string, repeated, tag = "1")]
    pub names: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub levels: Vec<Level>,
    #[prost(int64, tag = "3")]
    pub total: i64,
    #[prost(int64, tag = "4")]
    pub max_self: i64,
}

/// `querier.v1.Level`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Level {
    #[prost(int64, repeated, tag = "1")]
    pub values: Vec<i64>,
}

/// `querier.v1.SelectMergeSpanProfileRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectMergeSpanProfileRequest {
    #[prost(string, tag = "1")]
    pub profile_type_id: String,
    #[prost(string, tag = "2")]
    pub label_selector: String,
    #[prost(string, repeated, tag = "3")]
    pub span_selector: Vec<String>,
    #[prost(int64, tag = "4")]
    pub start: i64,
    #[prost(int64, tag = "5")]
    pub end: i64,
    #[prost(int64, optional, tag = "6")]
    pub max_nodes: Option<i64>,
    #[prost(int32, tag = "7")]
    pub format: i32,
}

/// `querier.v1.SelectMergeSpanProfileResponse` (`tree = 2` is never filled).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectMergeSpanProfileResponse {
    #[prost(message, optional, tag = "1")]
    pub flamegraph: Option<FlameGraph>,
}

/// `querier.v1.SelectMergeStacktracesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectMergeStacktracesRequest {
    #[prost(string, tag = "1")]
    pub profile_type_id: String,
    #[prost(string, tag = "2")]
    pub label_selector: String,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
    #[prost(int64, optional, tag = "5")]
    pub max_nodes: Option<i64>,
    #[prost(int32, tag = "6")]
    pub format: i32,
    /// `StackTraceSelector`: refused when present.
    #[prost(bytes = "vec", optional, tag = "7")]
    pub stack_trace_selector: Option<Vec<u8>>,
    #[prost(string, repeated, tag = "8")]
    pub profile_id_selector: Vec<String>,
    /// `AsyncQueryRequest`: refused when present.
    #[prost(bytes = "vec", optional, tag = "9")]
    pub r#async: Option<Vec<u8>>,
    #[prost(string, repeated, tag = "10")]
    pub trace_id_selector: Vec<String>,
    #[prost(string, repeated, tag = "11")]
    pub span_selector: Vec<String>,
}

/// `querier.v1.SelectMergeStacktracesResponse` (`tree = 2`, `dot = 3`, `async = 4` are never
/// filled).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectMergeStacktracesResponse {
    #[prost(message, optional, tag = "1")]
    pub flamegraph: Option<FlameGraph>,
    #[prost(message, optional, tag = "5")]
    pub pprof: Option<PprofProfile>,
}

/// `querier.v1.PprofProfile`: `google.v1.Profile profile = 1`, kept as its encoding (an
/// embedded message and `bytes` share the wire form, so this is exact).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PprofProfile {
    #[prost(bytes = "vec", tag = "1")]
    pub profile: Vec<u8>,
}

/// `querier.v1.SelectMergeProfileRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectMergeProfileRequest {
    #[prost(string, tag = "1")]
    pub profile_type_id: String,
    #[prost(string, tag = "2")]
    pub label_selector: String,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
    #[prost(int64, optional, tag = "5")]
    pub max_nodes: Option<i64>,
    /// `StackTraceSelector`: refused when present.
    #[prost(bytes = "vec", optional, tag = "6")]
    pub stack_trace_selector: Option<Vec<u8>>,
    #[prost(string, repeated, tag = "7")]
    pub profile_id_selector: Vec<String>,
    #[prost(string, repeated, tag = "8")]
    pub trace_id_selector: Vec<String>,
}

/// `querier.v1.SelectSeriesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectSeriesRequest {
    #[prost(string, tag = "1")]
    pub profile_type_id: String,
    #[prost(string, tag = "2")]
    pub label_selector: String,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
    #[prost(string, repeated, tag = "5")]
    pub group_by: Vec<String>,
    /// Seconds.
    #[prost(double, tag = "6")]
    pub step: f64,
    #[prost(int32, optional, tag = "7")]
    pub aggregation: Option<i32>,
    /// `StackTraceSelector`: refused when present.
    #[prost(bytes = "vec", optional, tag = "8")]
    pub stack_trace_selector: Option<Vec<u8>>,
    #[prost(int64, optional, tag = "9")]
    pub limit: Option<i64>,
    #[prost(int32, tag = "10")]
    pub exemplar_type: i32,
}

/// `querier.v1.SelectSeriesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SelectSeriesResponse {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<Series>,
}

/// `types.v1.Series`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Series {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub points: Vec<Point>,
}

/// `types.v1.Point` (`annotations = 3` are never filled).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Point {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
    #[prost(message, repeated, tag = "4")]
    pub exemplars: Vec<Exemplar>,
}

/// `types.v1.Exemplar`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
    #[prost(string, tag = "2")]
    pub profile_id: String,
    #[prost(string, tag = "3")]
    pub span_id: String,
    #[prost(int64, tag = "4")]
    pub value: i64,
    #[prost(message, repeated, tag = "5")]
    pub labels: Vec<LabelPair>,
    #[prost(string, tag = "6")]
    pub trace_id: String,
}

/// `querier.v1.ProfileFormat`.
pub mod format {
    pub const UNSPECIFIED: i32 = 0;
    pub const FLAMEGRAPH: i32 = 1;
    pub const TREE: i32 = 2;
    pub const DOT: i32 = 3;
    pub const PPROF: i32 = 4;
    /// Enum names, protojson spelling, by number.
    pub const NAMES: [&str; 5] = [
        "PROFILE_FORMAT_UNSPECIFIED",
        "PROFILE_FORMAT_FLAMEGRAPH",
        "PROFILE_FORMAT_TREE",
        "PROFILE_FORMAT_DOT",
        "PROFILE_FORMAT_PPROF",
    ];
}

/// `types.v1.TimeSeriesAggregationType` names by number.
pub const AGGREGATION_NAMES: [&str; 2] = [
    "TIME_SERIES_AGGREGATION_TYPE_SUM",
    "TIME_SERIES_AGGREGATION_TYPE_AVERAGE",
];

/// `types.v1.ExemplarType` names by number.
pub const EXEMPLAR_TYPE_NAMES: [&str; 4] = [
    "EXEMPLAR_TYPE_UNSPECIFIED",
    "EXEMPLAR_TYPE_NONE",
    "EXEMPLAR_TYPE_INDIVIDUAL",
    "EXEMPLAR_TYPE_SPAN",
];
