//! The pprof format (`profile.proto` of google/pprof), as typed messages, and its codec.
//!
//! Messages are declared with prost derives from the documented field numbers, so no `protoc`
//! is needed to build. Ids in pprof (`Mapping.id`, `Location.id`, `Function.id`) are arbitrary
//! non-zero numbers; string fields are indices into `string_table`, whose entry 0 is `""`.

mod codec;
pub(crate) mod decode;
pub mod delta;

pub use codec::{decode, decode_into, decode_into_drawing, encode, encode_gzip};

/// A whole pprof profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// One entry per value in every sample, e.g. `samples/count`, `cpu/nanoseconds`.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: stacks with their values.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The mapped binaries locations point into.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The program counters samples point at, by id.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions lines point at, by id.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; entry 0 is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// String index of a regex of frames to drop.
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// String index of a regex of frames to keep.
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was collected, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile covers, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The unit of `period`, e.g. (`cpu`, `nanoseconds`).
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Sampling period, in `period_type` units (e.g. 10000000 ns for Go CPU profiles).
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// String indices of free-form comments.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// String index of the sample type shown by default (0: the last sample type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
    /// String index of a URL documenting the profile.
    #[prost(int64, tag = "15")]
    pub doc_url: i64,
}

/// A (type, unit) pair of string indices, e.g. (`cpu`, `nanoseconds`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    /// String index of the type, e.g. `cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index of the unit, e.g. `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `Profile.sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels of the sample (span ids among them).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A sample label: a string label (`str` set) or a numeric label (`num`, optional `num_unit`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    /// String index of the label name.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value of a string label (0 for a numeric one).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Value of a numeric label, in `num_unit`.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the unit of `num` (0: none given).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A mapped binary.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Mapping {
    /// Non-zero id locations refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Address where the binary is mapped, in bytes.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Address just past the mapping, in bytes.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// Offset in the file of `memory_start`, in bytes.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the binary's path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the binary's build id.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether locations in this mapping were symbolized to functions.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Whether their lines have file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Whether their lines have line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Whether inlined frames were expanded.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A program counter with its source lines; several lines mean inlined frames, caller last.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Location {
    /// Non-zero id samples refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Id of the mapping holding `address` (0: none).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The program counter, as mapped in the process.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Source lines, callee first (several: inlined frames).
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether identical frames were folded into this one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A source line of a function.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Line {
    /// Id of the function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number in the function's file (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Column number (0: unknown).
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function; names and file are string indices.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Function {
    /// Non-zero id lines refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the function's name, demangled.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of its name as the linker knows it.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of its source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Line number where it starts (0: unknown).
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

impl Profile {
    /// The string at `index`, or `None` when the index is outside the string table.
    pub fn str(&self, index: i64) -> Option<&str> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.string_table.get(i))
            .map(String::as_str)
    }
}
