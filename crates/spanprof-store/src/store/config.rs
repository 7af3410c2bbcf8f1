//! What a store is opened with: [`StoreConfig`] and the [`SeriesLimits`] ingest holds series to,
//! with their defaults.

use std::path::PathBuf;

/// Where and how the store keeps its data.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory (created if missing).
    pub dir: PathBuf,
    /// A segment is sealed and a new one started past this many bytes.
    pub segment_max_bytes: u64,
    /// Data older than this many nanoseconds is deleted by [`Store::enforce_retention`](super::Store::enforce_retention).
    pub retention_age_ns: Option<u64>,
    /// Oldest segments are deleted while the store is larger than this many bytes.
    pub retention_bytes: Option<u64>,
    /// Oldest segments are also deleted while the volume of the data directory has less
    /// than this many bytes available and less than [`StoreConfig::min_free_disk_ratio`] of
    /// its size (0 = never): a full disk fails every write, and the newest data is what is
    /// looked at. 0 here; `spanprof serve` sets 10 GiB, as Pyroscope's default
    /// (`storage.min_free_disk`).
    pub min_free_disk_bytes: u64,
    /// See [`StoreConfig::min_free_disk_bytes`]: 0.05 (5 %) by default, as Pyroscope's.
    pub min_free_disk_ratio: f64,
    /// fsync before an ingest returns (turn off only for tests and benchmarks of the rest).
    pub sync: bool,
    /// Sealed segments' indexes kept loaded (each is a few MiB for a 16 MiB segment).
    pub cache_segments: usize,
    /// Series one profile may make (distinct label sets of its samples; 0 = no limit): a
    /// profile past it is refused, as series are kept in memory until retention deletes
    /// their data.
    pub max_profile_series: usize,
    /// What the store's series may be: how many in all, and how big their labels.
    pub series: SeriesLimits,
    /// Bytes the store's symbols (every service's strings, functions, locations and stack
    /// nodes) may take in a snapshot, about their size in memory (0 = no limit): a profile
    /// that would add symbols past it is refused, and what it interned is dropped. Symbols
    /// are kept until retention deletes the data of their generation
    /// ([`StoreConfig::symbol_generation_bytes`]), and each segment starts with all of them in
    /// one record, which may be at most 256 MiB: past that, every write failed
    /// (`storage.max_symbols_size`).
    pub max_symbol_bytes: u64,
    /// A service's symbols start a new generation (the segment is sealed for it) once they
    /// take this many bytes (about, as counted against `max_symbol_bytes`; 0 = never) and
    /// more than twice those of the binaries its profiles used in the last one or two
    /// [`StoreConfig::symbol_use_period`]s (frames without a binary, as interpreted code's,
    /// count by their own use over 48 periods): each build of a program interns all its symbols
    /// anew, and an old build's go once retention has deleted the last data that refers to
    /// them. 4 MiB by default.
    pub symbol_generation_bytes: u64,
    /// How often the binaries a service's profiles use are measured. 30 minutes by default:
    /// every instance of a service sends within it.
    pub symbol_use_period: std::time::Duration,
    /// How long after a failed seal of a full segment (a full disk: the next segment's
    /// snapshot could not be written) the next ingest tries again; meanwhile the segment
    /// takes more. Each try writes a whole snapshot. 10 seconds by default.
    pub seal_retry: std::time::Duration,
}

/// How many series the store keeps, and how big a series' labels may be; 0 is no limit.
///
/// A series (service, profile type, label set) is kept in memory until retention deletes the
/// last of its data (then it is forgotten, and no longer counts), about 750 bytes each with
/// short labels (measured: 99,000 series, 74 MB). [`StoreConfig::max_profile_series`]
/// bounds what one profile adds; these bound what all of them add together, and what one
/// series costs: a label whose value changes with every request, or a few long ones, would
/// otherwise grow the server without end. A profile that would make a series past one of
/// them is refused by name, with the setting that raises it. The label limits are
/// Pyroscope's (`validation.max-length-label-name` 1024, `…-label-value` 2048), except the
/// count: OpenTelemetry resources bring their attributes as labels (process, host,
/// container, Kubernetes), more than Pyroscope's 30 tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesLimits {
    /// Series in the store (`storage.max_series`).
    pub max_series: usize,
    /// Labels of one series, `service_name` included (`server.max_label_names_per_series`).
    pub max_labels: usize,
    /// Bytes of a label name (`server.max_label_name_length`).
    pub max_name_bytes: usize,
    /// Bytes of a label value (`server.max_label_value_length`).
    pub max_value_bytes: usize,
}

impl Default for SeriesLimits {
    /// 100,000 series (about 75 MB), 64 labels, names of 1 KiB and values of 2 KiB.
    fn default() -> Self {
        SeriesLimits {
            max_series: 100_000,
            max_labels: 64,
            max_name_bytes: 1024,
            max_value_bytes: 2048,
        }
    }
}

/// Whether `bytes` of symbols are 90 % of `max` or more (0 = no limit): the point to warn at.
pub fn near_max_symbol_bytes(bytes: u64, max: u64) -> bool {
    max != 0 && bytes >= max - max / 10
}

impl SeriesLimits {
    /// Whether `series` is 90 % of `max_series` or more (the point to warn at).
    pub fn near_max_series(&self, series: usize) -> bool {
        self.max_series != 0 && series >= self.max_series - self.max_series / 10
    }

    /// No limits.
    pub const NONE: SeriesLimits = SeriesLimits {
        max_series: 0,
        max_labels: 0,
        max_name_bytes: 0,
        max_value_bytes: 0,
    };
}

impl StoreConfig {
    /// Defaults for a data directory: 16 MiB segments, no retention limits, durable ingest.
    /// (With 64 MiB, the open and the sealing segment's indexes took the load bench's server
    /// to 780 MB of RSS; with 16 MiB, 290 MB. Queries over many segments lose little: a
    /// segment's summary and Bloom filters skip it, and a cold index loads in ~25 ms.)
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            segment_max_bytes: 16 << 20,
            retention_age_ns: None,
            retention_bytes: None,
            min_free_disk_bytes: 0,
            min_free_disk_ratio: 0.05,
            sync: true,
            cache_segments: 8,
            max_profile_series: spanprof_format::limits::ProfileLimits::default().max_series,
            series: SeriesLimits::default(),
            max_symbol_bytes: 128 << 20,
            symbol_generation_bytes: 4 << 20,
            symbol_use_period: std::time::Duration::from_secs(30 * 60),
            seal_retry: std::time::Duration::from_secs(10),
        }
    }
}
