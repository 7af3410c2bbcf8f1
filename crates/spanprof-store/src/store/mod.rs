//! The embedded store: linked profiles and spans on one machine, durable on return from
//! ingest, answering every selection from disk.
//!
//! Layout: one [`Log`] of checksummed records in `DIR/segments/`. A record is
//! either a *snapshot* (the first record of every segment: all services' symbol tables and all
//! series) or an *ingest* (symbol and series deltas, sample blocks, spans). Because every
//! segment starts with a snapshot, retention can delete whole old segments. Opening replays
//! the log into memory: symbols, series, one small entry per block (where it is, its series,
//! time and total), the span → blocks and trace → blocks indexes, and the spans.
//!
//! A service's symbols come in generations (`state::Service`): a generation is a service
//! entry of its own, with the service's name, listed in snapshots like any other; a series
//! names the generation its blocks' stacks refer to. When a service's symbols grow past twice
//! those of the binaries its profiles use, the segment is sealed and a new generation starts;
//! an old one is emptied once retention has deleted the data of all its series. Binaries from
//! before generations existed cannot open a store in which a service has two.

mod compact;
#[cfg(test)]
mod compat_tests;
mod ingest;
mod query;
mod recent;
#[cfg(test)]
mod repeat_tests;
mod segments;
mod span_page;
#[cfg(test)]
mod span_page_tests;
#[cfg(test)]
mod split_tests;
mod state;
#[cfg(test)]
mod test_data;
#[cfg(test)]
mod unlocked_read_tests;
mod windows;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

pub use compact::CompactReport;
pub use ingest::{
    IngestReport, Request, Storing, MAX_PROFILE_TOTAL, PROFILE_NAME_ATTRIBUTE, SERVICE_LABEL,
};
pub use query::{Coverage, Selection, SpanFilter, CUT_STACK_FRAME, MAX_STACK_DEPTH};
use segments::SegmentIndex;
pub use span_page::{
    contains_regex, search_regex, sort_trace_groups, NameSuggestions, SpanCpu, SpanMatch,
    SpanMatches, SpanOrder, SpanTime, TraceGroup, MAX_MATCHES,
};
pub use state::SeriesKey;
use state::State;
pub use windows::SpanWindows;

use crate::codec::{CodecError, Get};
use crate::log::{Log, LogConfig, LogError};

/// Where and how the store keeps its data.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory (created if missing).
    pub dir: PathBuf,
    /// A segment is sealed and a new one started past this many bytes.
    pub segment_max_bytes: u64,
    /// Data older than this many nanoseconds is deleted by [`Store::enforce_retention`].
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

/// Why the store could not do something.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The log failed (I/O, or damage it could not skip).
    #[error(transparent)]
    Log(#[from] LogError),
    /// A record's payload could not be read.
    #[error("{0}")]
    Codec(#[from] CodecError),
    /// The input is not something the store can hold.
    #[error("{0}")]
    Invalid(String),
    /// A selection could not be answered.
    #[error(transparent)]
    Select(#[from] crate::select::SelectError),
    /// A label selector did not parse.
    #[error(transparent)]
    Matcher(#[from] crate::matchers::MatcherError),
    /// The query was stopped (its deadline passed, or its client went away).
    #[error(transparent)]
    Stopped(#[from] crate::query_limit::Stopped),
    /// Another process (or another `Store` in this one) has the directory open.
    #[error(
        "{} is in use by another spanprof process (it holds the lock on {}): stop it, or ask \
         it through its API, or use another directory",
        dir.display(),
        dir.join(LOCK_FILE).display()
    )]
    Locked {
        /// The store directory.
        dir: std::path::PathBuf,
    },
    /// The directory or its lock file could not be created or locked.
    #[error("{}: {source}{}", path.display(), file_on_the_way(path, source))]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// For a "Not a directory" error: which part of `path` is a file (`--data /etc/passwd/x`
/// said only "Not a directory").
fn file_on_the_way(path: &std::path::Path, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::NotADirectory {
        return String::new();
    }
    path.ancestors()
        .skip(1)
        .find(|a| a.is_file())
        .map(|f| format!(" ({} is a file, not a directory)", f.display()))
        .unwrap_or_default()
}

/// The file a store holds an exclusive lock on while it is open (`flock`; the kernel drops it
/// when the process exits, however it exits).
pub const LOCK_FILE: &str = "LOCK";

/// Locks `dir` for this store (creating it if missing).
fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, StoreError> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    if dir.exists() && !dir.is_dir() {
        // create_dir_all would say only "File exists".
        return Err(io(dir)(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "a file, not a directory: give a directory for the store (made if missing)",
        )));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    // A lock just released can stay held for a moment: by a process that is exiting, or by
    // a child that a thread of this process forks and that has not yet exec'd (it shares
    // every open file until then, and with it the lock). Wait a little before refusing.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    dir: dir.to_path_buf(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
    }
}

/// How long opening waits for a directory's lock before it reports the directory in use.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What opening the store found.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// Segments read.
    pub segments: usize,
    /// Records replayed.
    pub records: u64,
    /// Bytes of a torn tail dropped from the last segment (never acknowledged).
    pub truncated_bytes: u64,
    /// Damage found and skipped, each naming the file and offset.
    pub problems: Vec<String>,
    /// Sealed segments whose index file an earlier version wrote: rebuilt from the segment
    /// (once: the new file is of this version's format).
    pub rebuilt_indexes: usize,
}

/// Sizes and counts, for `/metrics` and `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes on disk (all segments).
    pub disk_bytes: u64,
    /// Segment files.
    pub segments: usize,
    /// Services (by name; each may hold several generations of symbols).
    pub services: usize,
    /// Series.
    pub series: usize,
    /// Sample blocks (one per profile per series).
    pub blocks: usize,
    /// Samples in those blocks.
    pub samples: u64,
    /// Spans.
    pub spans: usize,
    /// Stack nodes over all services' symbol tables.
    pub stack_nodes: usize,
    /// Entries of all services' symbol tables, per table: strings, mappings, functions,
    /// locations, stack nodes (the zero entries included), over every generation.
    pub symbols: [usize; 5],
    /// About the bytes of all services' symbols, as counted against
    /// [`StoreConfig::max_symbol_bytes`].
    pub symbol_bytes: u64,
    /// Generations of symbols held, over all services (one per service, plus one per earlier
    /// generation whose data retention has not deleted yet).
    pub symbol_generations: usize,
}

/// The embedded store. Cheap to share (`Arc<Store>`); ingest calls are serialized, queries run
/// concurrently with them.
pub struct Store {
    cfg: StoreConfig,
    log: Log,
    state: Arc<RwLock<State>>,
    writer: Mutex<()>,
    /// Threads writing the index files of segments sealed by ingest (joined on drop).
    sealers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The index of a segment sealed before, emptied, for the next active segment to reuse
    /// the memory of (see [`SegmentIndex::sized_like`]).
    spare_index: Arc<Mutex<Option<SegmentIndex>>>,
    /// Bytes of the snapshot that starts the active segment (every symbol and series). A
    /// segment is sealed once it holds `segment_max_bytes` past it: counted in, a snapshot
    /// larger than a segment (many series, a large program's symbols) sealed the segment at
    /// every ingest, each new one starting with the whole snapshot again (measured: 3,000
    /// one-line profiles with 256 KiB segments made 1,784 segments, 608 MB).
    snapshot_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// When an ingest may try again to seal the full segment, after a failed try.
    seal_retry_at: Mutex<Option<std::time::Instant>>,
    /// Held while the store is open: one process per directory.
    _lock: std::fs::File,
}

impl Drop for Store {
    /// Waits for index files still being written, so a reopen finds them.
    fn drop(&mut self) {
        let sealers = std::mem::take(
            self.sealers
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for s in sealers {
            let _ = s.join();
        }
    }
}

impl Store {
    /// Opens (or creates) the store in `cfg.dir`, replaying what is on disk. Fails with
    /// [`StoreError::Locked`] while another `Store` has the directory open.
    pub fn open(cfg: StoreConfig) -> Result<(Store, OpenReport), StoreError> {
        let lock = lock_dir(&cfg.dir)?;
        let state = Arc::new(RwLock::new(State::new(
            cfg.dir.join("index"),
            cfg.cache_segments,
        )));
        let snapshot_of = Arc::clone(&state);
        let snapshot_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let snapshot_len = Arc::clone(&snapshot_bytes);
        let log_cfg = LogConfig {
            dir: cfg.dir.join("segments"),
            sync: cfg.sync,
        };
        let (log, recovery) = Log::open(log_cfg, move |_segment| {
            let snapshot = snapshot_of
                .read()
                .expect("store state lock poisoned")
                .encode_snapshot();
            snapshot_len.store(snapshot.len() as u64, std::sync::atomic::Ordering::Relaxed);
            snapshot
        })?;
        let mut report = OpenReport {
            segments: recovery.segments,
            truncated_bytes: recovery.truncated_bytes,
            problems: recovery.problems.clone(),
            ..Default::default()
        };
        let index_dir = cfg.dir.join("index");
        // Sealed segments with a valid index need no replay; the others are read once.
        let active_id = log.active_segment();
        let mut indexed: Vec<(u64, segments::SealedSummary)> = Vec::new();
        let mut to_replay = vec![active_id];
        for seg in log.segments().into_iter().filter(|s| !s.active) {
            match segments::read_summary(&index_dir, seg.id) {
                Ok(Some(summary)) => indexed.push((seg.id, summary)),
                Ok(None) => {
                    // There, but of an earlier version's format.
                    if segments::index_path(&index_dir, seg.id).exists() {
                        report.rebuilt_indexes += 1;
                    }
                    to_replay.push(seg.id);
                }
                Err(problem) => {
                    report.problems.push(problem);
                    to_replay.push(seg.id);
                }
            }
        }
        if report.rebuilt_indexes > 0 {
            // Said before the work: a large store takes minutes over it.
            tracing::info!(
                segments = report.rebuilt_indexes,
                "rebuilding the index files an earlier version of spanprof wrote, from their \
                 segments (once: they are written in this version's format)"
            );
        }
        let marks = compact::read_marks(&log, &indexed, &to_replay)?;
        {
            let mut st = state.write().expect("store state lock poisoned");
            // The active segment first: its snapshot holds every symbol and series, so the
            // deltas of older segments replayed after it only repeat known ids.
            for id in to_replay {
                if marks.replaced.contains(&id) {
                    continue;
                }
                let mut into = SegmentIndex::new(id);
                report.records += replay_segment(
                    &log,
                    &mut st,
                    &mut into,
                    marks.complete.contains(&id),
                    &mut report.problems,
                )?;
                if id == active_id {
                    into.reserve_for(log.active_bytes(), cfg.segment_max_bytes);
                    st.active = Arc::new(into);
                } else {
                    let summary = segments::write_index(&index_dir, &into).map_err(|e| {
                        StoreError::Invalid(format!(
                            "writing {}: {e}",
                            segments::index_path(&index_dir, id).display()
                        ))
                    })?;
                    st.sealed.insert(id, summary);
                }
            }
            for (id, summary) in indexed {
                if !marks.replaced.contains(&id) {
                    st.sealed.insert(id, summary);
                }
            }
            // A crash after a compaction completed but before its sources were deleted.
            for id in &marks.replaced {
                if log.segments().iter().any(|s| s.id == *id && !s.active) {
                    log.delete_segment(*id)?;
                }
                st.forget_segment(*id);
            }
            // The snapshot has every series of its time; retention may have deleted the data
            // of some since.
            st.forget_unused_series();
            // Also recounts the symbols' bytes.
            st.drop_unused_generations();
            // The active segment's snapshot: at most about what one would take now (its
            // symbols, and some 100 bytes a series), without encoding one (seconds for a
            // large store).
            snapshot_bytes.fetch_max(
                st.symbol_bytes + 100 * st.series.len() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        Ok((
            Store {
                cfg,
                log,
                state,
                writer: Mutex::new(()),
                sealers: Mutex::new(Vec::new()),
                spare_index: Arc::default(),
                snapshot_bytes,
                seal_retry_at: Mutex::new(None),
                _lock: lock,
            },
            report,
        ))
    }

    /// When the first and the last profile stored were taken (their start times, ns since the
    /// epoch); `None` when no profile is stored.
    pub fn profile_time_range(&self) -> Option<(i64, i64)> {
        self.state
            .read()
            .expect("store state lock poisoned")
            .profile_time_range()
    }

    /// Counts and sizes.
    pub fn stats(&self) -> StoreStats {
        let st = self.state.read().expect("store state lock poisoned");
        let mut s = st.stats();
        s.disk_bytes = self.log.total_bytes() + st.index_bytes();
        s.segments = self.log.segments().len();
        s
    }

    /// Whether the store is past its size limit ([`StoreConfig::retention_bytes`]): the
    /// next [`Store::enforce_retention`] has segments to delete.
    pub fn over_size_limit(&self) -> bool {
        self.cfg.retention_bytes.is_some_and(|max| {
            let index_bytes = self
                .state
                .read()
                .expect("store state lock poisoned")
                .index_bytes();
            self.log.total_bytes() + index_bytes > max
        })
    }

    /// Deletes whole sealed segments whose data is all older than the retention age, then the
    /// oldest ones while the store is over the size limit or the disk is nearly full
    /// ([`StoreConfig::min_free_disk_bytes`]). Returns the segments deleted.
    pub fn enforce_retention(&self, now_ns: u64) -> Result<usize, StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        let segments = self.log.segments();
        let mut total: u64 = segments.iter().map(|s| s.bytes).sum::<u64>()
            + self
                .state
                .read()
                .expect("store state lock poisoned")
                .index_bytes();
        let newest = {
            self.state
                .read()
                .expect("store state lock poisoned")
                .newest_per_segment()
        };
        // What the volume lacks of its free space: taken from the oldest segments, by their
        // sizes (a file a query still reads is freed only once it is done with it).
        let mut disk_deficit = self.disk_deficit();
        let lacking = disk_deficit;
        let mut deleted = 0;
        // Segments deleted only for the disk: (how many, the newest of them).
        let mut for_disk = (0, 0);
        for seg in segments.iter().filter(|s| !s.active) {
            let newest_ns = newest.get(&seg.id).copied().unwrap_or(0);
            let too_old = self
                .cfg
                .retention_age_ns
                .is_some_and(|age| newest_ns < now_ns.saturating_sub(age) as i64);
            let too_big = self.cfg.retention_bytes.is_some_and(|max| total > max);
            let disk_low = disk_deficit > 0;
            if !(too_old || too_big || disk_low) {
                continue;
            }
            if disk_low && !(too_old || too_big) {
                for_disk = (for_disk.0 + 1, seg.id);
            }
            self.log.delete_segment(seg.id)?;
            let freed = seg.bytes
                + self
                    .state
                    .read()
                    .expect("store state lock poisoned")
                    .sealed
                    .get(&seg.id)
                    .map_or(0, |x| x.index_bytes);
            total -= freed;
            disk_deficit = disk_deficit.saturating_sub(freed);
            self.state
                .write()
                .expect("store state lock poisoned")
                .forget_segment(seg.id);
            deleted += 1;
        }
        if for_disk.0 > 0 {
            tracing::warn!(
                segments = for_disk.0,
                up_to_segment = for_disk.1,
                lacking_bytes = lacking,
                min_free_disk = self.cfg.min_free_disk_bytes,
                "retention: the disk is nearly full, so the oldest segments were deleted"
            );
        }
        if deleted > 0 {
            let mut st = self.state.write().expect("store state lock poisoned");
            let forgotten = st.forget_unused_series();
            if forgotten > 0 {
                tracing::info!(
                    segments = deleted,
                    series = forgotten,
                    "retention: series with no data left are forgotten"
                );
            }
            let bytes_before = st.symbol_bytes;
            let dropped = st.drop_unused_generations();
            if dropped > 0 {
                tracing::info!(
                    generations = dropped,
                    freed_bytes = bytes_before.saturating_sub(st.symbol_bytes),
                    symbol_bytes = st.symbol_bytes,
                    "retention: symbols of earlier builds with no data left are dropped"
                );
            }
        }
        Ok(deleted)
    }

    /// Bytes the data directory's volume lacks to have as much available as the smaller of
    /// [`StoreConfig::min_free_disk_bytes`] and [`StoreConfig::min_free_disk_ratio`] of its
    /// size (0 when it has them, or when that cannot be told).
    fn disk_deficit(&self) -> u64 {
        if self.cfg.min_free_disk_bytes == 0 {
            return 0;
        }
        disk_space(&self.cfg.dir).map_or(0, |(available, total)| {
            let by_ratio = (self.cfg.min_free_disk_ratio * total as f64) as u64;
            self.cfg
                .min_free_disk_bytes
                .min(by_ratio)
                .saturating_sub(available)
        })
    }

    /// Whether the active segment holds `segment_max_bytes` past its snapshot, and at least
    /// as much as the snapshot itself: every segment starts with all symbols and series, and
    /// with a snapshot larger than the data after it (many services and builds, 16 MiB
    /// segments), most of the disk and of every rotation's writing was snapshots. So the
    /// snapshots take at most half of the store.
    pub(crate) fn segment_is_full(&self) -> bool {
        let snapshot = self
            .snapshot_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        self.log.active_bytes().saturating_sub(snapshot) > self.cfg.segment_max_bytes.max(snapshot)
    }

    /// Starts a new log segment (its snapshot written), after starting new symbol generations
    /// for the services due one ([`State::roll_generations`]): the snapshot has them, empty,
    /// before any record refers to them. Returns the new segment's id. The
    /// caller holds the writer lock.
    fn rotate_log(&self) -> Result<u64, StoreError> {
        let (len, rolled) = {
            let mut st = self.state.write().expect("store state lock poisoned");
            let len = st.services.len();
            (len, st.roll_generations())
        };
        match self.log.rotate() {
            Ok(next) => {
                for (service, bytes) in rolled {
                    tracing::info!(
                        service,
                        symbol_bytes = bytes,
                        "the service's symbols are more than twice those of the binaries its \
                         profiles use (new builds): a new generation of them starts, and the \
                         old one is dropped once retention deletes the data that refers to it"
                    );
                }
                Ok(next)
            }
            Err(e) => {
                self.state
                    .write()
                    .expect("store state lock poisoned")
                    .undo_roll(len);
                Err(e.into())
            }
        }
    }

    /// Seals the active segment now (normally done when it passes `segment_max_bytes`).
    pub fn rotate(&self) -> Result<(), StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        self.rotate_locked()
    }

    /// Seals the active segment as ingest does when it is full: appends go to a new segment at
    /// once, and the old one's index file (encoding its index, Bloom filters, an fsync: seconds
    /// for a full segment) is written by a thread of its own, while queries read that
    /// index from memory until the file is there. Were it written here, the ingest call that filled the segment would
    /// stall for as long (measured: 2.4 s, in a p99 of 19 ms) and queries with it. A failed
    /// write leaves the index in memory; the next start rebuilds it from the log, as after a
    /// crash before the file was written. At most two seals run at once (a third waits), so
    /// memory stays bounded if the disk is slower than ingest. The caller holds the writer
    /// lock.
    /// Seals the active segment an ingest has just filled (or whose services are due a new
    /// symbol generation), as [`Store::rotate_in_background`]. That ingest's record is
    /// durable and published already, so a failure does not fail it (its client would send
    /// it again, and it would be stored twice): it is logged, the segment stays active past
    /// its size, and an ingest [`StoreConfig::seal_retry`] later tries again.
    pub(crate) fn seal_after_ingest(&self) {
        let mut retry_at = self
            .seal_retry_at
            .lock()
            .expect("store seal retry lock poisoned");
        let now = std::time::Instant::now();
        if retry_at.is_some_and(|at| now < at) {
            return;
        }
        match self.rotate_in_background() {
            Ok(()) => *retry_at = None,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    retry_in = ?self.cfg.seal_retry,
                    "sealing the full segment failed: what was ingested is stored, and the \
                     segment takes more until a later ingest seals it"
                );
                *retry_at = Some(now + self.cfg.seal_retry);
            }
        }
    }

    pub(crate) fn rotate_in_background(&self) -> Result<(), StoreError> {
        let next = self.rotate_log()?;
        let spare = self
            .spare_index
            .lock()
            .expect("store spare index lock poisoned")
            .take();
        let index = self
            .state
            .write()
            .expect("store state lock poisoned")
            .begin_seal(next, spare);
        let spare_index = Arc::clone(&self.spare_index);
        let state = Arc::clone(&self.state);
        let dir = state
            .read()
            .expect("store state lock poisoned")
            .index_dir
            .clone();
        let mut sealers = self.sealers.lock().expect("store sealers lock poisoned");
        sealers.retain(|s| !s.is_finished());
        while sealers.len() >= 2 {
            let _ = sealers.remove(0).join();
        }
        let seal = move || {
            lower_priority();
            let segment = index.segment;
            match segments::write_index(&dir, &index) {
                Ok(summary) => {
                    drop(index);
                    let sealed = state
                        .write()
                        .expect("store state lock poisoned")
                        .finish_seal(segment, summary);
                    match sealed {
                        // Emptied for the next segment here, with no lock held, unless a
                        // query still reads it (then freed by the query).
                        Some(index) => {
                            if let Ok(index) = Arc::try_unwrap(index) {
                                let emptied = index.emptied();
                                *spare_index.lock().expect("store spare index lock poisoned") =
                                    Some(emptied);
                            }
                        }
                        // Deleted while its index was written (retention, compaction).
                        None => {
                            let _ = std::fs::remove_file(segments::index_path(&dir, segment));
                        }
                    }
                }
                Err(e) => tracing::error!(
                    segment,
                    dir = %dir.display(),
                    error = %e,
                    "writing a sealed segment's index failed: it stays in memory, and the next \
                     start rebuilds it from the log"
                ),
            }
        };
        let handle = std::thread::Builder::new()
            .name("spanprof-seal".into())
            .spawn(seal)
            .map_err(|source| StoreError::Io {
                path: self.cfg.dir.clone(),
                source,
            })?;
        sealers.push(handle);
        Ok(())
    }

    /// Seals the active segment (its index goes to disk before this returns) and starts the
    /// next. The caller holds the writer lock.
    pub(crate) fn rotate_locked(&self) -> Result<(), StoreError> {
        let next = self.rotate_log()?;
        let mut st = self.state.write().expect("store state lock poisoned");
        let dir = st.index_dir.clone();
        st.seal_active(next).map_err(|e| {
            StoreError::Invalid(format!(
                "writing the index of a sealed segment in {}: {e}",
                dir.display()
            ))
        })
    }
}

/// Record kinds (the first byte of a record payload).
pub(crate) const SNAPSHOT: u8 = 1;
pub(crate) const INGEST: u8 = 2;
/// First record of a compaction's output segment: the segments it replaces.
pub(crate) const COMPACT_BEGIN: u8 = 3;
/// Blocks and spans copied by compaction (the layout of INGEST).
///
/// Both INGEST and COPY: `kind · [0x81 0x00 · link table] · symbol deltas · series deltas ·
/// blocks · spans`; the link table (absent in records written before it existed, and in
/// records without links) holds every link of the record's blocks once, and version 2 blocks
/// index into it (`crate::block`).
pub(crate) const COPY: u8 = 4;
/// Last record of a completed compaction.
pub(crate) const COMPACT_END: u8 = 5;

/// After the kind byte of an INGEST or COPY record: the record has a link table, which its
/// blocks index into. It is the non-canonical varint of 1 (`0x81 0x00`), so no record written
/// without a table (whose kind byte is followed by a canonical count) starts that way.
const RECORD_LINKS: [u8; 2] = [0x81, 0x00];

/// Appends the link table of an INGEST or COPY record (right after its kind byte). A record
/// without links gets none, and reads as records written before link tables existed.
pub(crate) fn put_record_links(out: &mut Vec<u8>, table: &[crate::block::LinkIds]) {
    if !table.is_empty() {
        out.extend_from_slice(&RECORD_LINKS);
        crate::block::encode_link_table(table, out);
    }
}

/// Reads the link table of an INGEST or COPY record, `g` being just past its kind byte; empty
/// when it has none.
pub(crate) fn get_record_links(g: &mut Get) -> Result<Vec<crate::block::LinkIds>, CodecError> {
    if g.peek(RECORD_LINKS.len()) != Some(&RECORD_LINKS[..]) {
        return Ok(Vec::new());
    }
    g.skip(RECORD_LINKS.len());
    crate::block::decode_link_table(g)
}

/// The link table of a whole INGEST or COPY record payload.
pub(crate) fn record_links(payload: &[u8]) -> Result<Vec<crate::block::LinkIds>, CodecError> {
    let mut g = Get::new(payload);
    match record_kind(&mut g)? {
        INGEST | COPY => get_record_links(&mut g),
        k => Err(CodecError(format!("record kind {k} holds no blocks"))),
    }
}

pub(crate) fn record_kind(g: &mut Get) -> Result<u8, CodecError> {
    match g.u8()? {
        k @ (SNAPSHOT | INGEST | COMPACT_BEGIN | COPY | COMPACT_END) => Ok(k),
        k => Err(CodecError(format!("unknown record kind {k}"))),
    }
}

/// Replays one segment's records into `into`; returns how many were read. Damage stops the
/// segment there and is reported (the log already skipped what failed its checksum).
fn replay_segment(
    log: &Log,
    st: &mut State,
    into: &mut SegmentIndex,
    copies_count: bool,
    problems: &mut Vec<String>,
) -> Result<u64, StoreError> {
    let mut records = 0;
    let mut problem = None;
    let path = log
        .segments()
        .into_iter()
        .find(|s| s.id == into.segment)
        .map(|s| s.path);
    log.scan(into.segment, |pos, payload| {
        records += 1;
        // Copies of an interrupted compaction duplicate segments that still exist.
        if payload.first() == Some(&COPY) && !copies_count {
            return std::ops::ControlFlow::Continue(());
        }
        if let Err(e) = st.replay(into, pos, payload) {
            let file = path
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string());
            problem = Some(format!(
                "{file}: record at offset {}: {e}; the rest of this segment is skipped",
                pos.offset
            ));
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    })?;
    problems.extend(problem);
    Ok(records)
}

/// Bytes available to this process and the size of the volume `dir` is on.
#[cfg(unix)]
// statvfs has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is a C struct of integers, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads the NUL-terminated path and writes only the struct it is given.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

#[cfg(not(unix))]
fn disk_space(_dir: &Path) -> Option<(u64, u64)> {
    None
}

/// Gives the calling thread a lower CPU priority (nice 5): sealing a segment takes a burst of
/// CPU (most of a second for a 16 MiB segment of Go CPU profiles) that receivers waiting on
/// ingest should not queue behind. Not lower: under full load a sealer starved further falls
/// behind, and sealing indexes wait in memory (nice 10 took the load bench to 420 MB RSS).
/// Under Linux the nice value is per thread. Failure only leaves the priority as it was.
// setpriority has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority only reads its integer arguments; `who` 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 5);
    }
}

#[cfg(test)]
mod tests {
    use super::{Store, StoreConfig};

    /// A data directory under a file names the file, not only "Not a directory".
    #[test]
    fn a_directory_under_a_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "x").unwrap();
        let e = Store::open(StoreConfig::new(file.join("data/store")))
            .err()
            .expect("a store under a file");
        assert!(
            e.to_string()
                .ends_with(&format!("({} is a file, not a directory)", file.display())),
            "{e}"
        );
    }
}
