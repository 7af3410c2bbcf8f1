//! The embedded store: linked profiles and spans on one machine, durable on return from
//! ingest, answering every selection from disk.
//!
//! Layout: one [`Log`](crate::log::Log) of checksummed records in `DIR/segments/`. A record is
//! either a *snapshot* (the first record of every segment: all services' symbol tables and all
//! series) or an *ingest* (symbol and series deltas, sample blocks, spans). Because every
//! segment starts with a snapshot, retention can delete whole old segments. Opening replays
//! the log into memory: symbols, series, one small entry per block (where it is, its series,
//! time and total), the span → blocks and trace → blocks indexes, and the spans.

mod compact;
mod ingest;
mod query;
mod state;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

pub use compact::CompactReport;
pub use ingest::IngestReport;
pub use query::{Coverage, Selection, SpanFilter};
pub use state::SeriesKey;
use state::State;

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
    /// fsync before an ingest returns (turn off only for tests and benchmarks of the rest).
    pub sync: bool,
}

impl StoreConfig {
    /// Defaults for a data directory: 64 MiB segments, no retention limits, durable ingest.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            segment_max_bytes: 64 << 20,
            retention_age_ns: None,
            retention_bytes: None,
            sync: true,
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
}

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
}

/// Sizes and counts, for `/metrics` and `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes on disk (all segments).
    pub disk_bytes: u64,
    /// Segment files.
    pub segments: usize,
    /// Services.
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
}

/// The embedded store. Cheap to share (`Arc<Store>`); ingest calls are serialized, queries run
/// concurrently with them.
pub struct Store {
    cfg: StoreConfig,
    log: Log,
    state: Arc<RwLock<State>>,
    writer: Mutex<()>,
}

impl Store {
    /// Opens (or creates) the store in `cfg.dir`, replaying what is on disk.
    pub fn open(cfg: StoreConfig) -> Result<(Store, OpenReport), StoreError> {
        let state = Arc::new(RwLock::new(State::default()));
        let snapshot_of = Arc::clone(&state);
        let log_cfg = LogConfig {
            dir: cfg.dir.join("segments"),
            sync: cfg.sync,
        };
        let (log, recovery) = Log::open(log_cfg, move |_segment| {
            snapshot_of
                .read()
                .expect("store state lock poisoned")
                .encode_snapshot()
        })?;
        let mut report = OpenReport {
            segments: recovery.segments,
            truncated_bytes: recovery.truncated_bytes,
            problems: recovery.problems.clone(),
            ..Default::default()
        };
        let marks = compact::read_marks(&log)?;
        {
            let mut st = state.write().expect("store state lock poisoned");
            for seg in log.segments() {
                if marks.replaced.contains(&seg.id) {
                    continue;
                }
                let copies_count = marks.complete.contains(&seg.id);
                let mut problem = None;
                log.scan(seg.id, |pos, payload| {
                    report.records += 1;
                    // Copies of an interrupted compaction duplicate segments that still exist.
                    if payload.first() == Some(&COPY) && !copies_count {
                        return std::ops::ControlFlow::Continue(());
                    }
                    if let Err(e) = st.replay(pos, payload) {
                        problem = Some(format!(
                            "{}: record at offset {}: {e}; the rest of this segment is skipped",
                            seg.path.display(),
                            pos.offset
                        ));
                        return std::ops::ControlFlow::Break(());
                    }
                    std::ops::ControlFlow::Continue(())
                })?;
                report.problems.extend(problem);
            }
        }
        // A crash after a compaction completed but before its sources were deleted.
        for id in marks.replaced {
            if log.segments().iter().any(|s| s.id == id && !s.active) {
                log.delete_segment(id)?;
            }
        }
        Ok((
            Store {
                cfg,
                log,
                state,
                writer: Mutex::new(()),
            },
            report,
        ))
    }

    /// Counts and sizes.
    pub fn stats(&self) -> StoreStats {
        let st = self.state.read().expect("store state lock poisoned");
        let mut s = st.stats();
        s.disk_bytes = self.log.total_bytes();
        s.segments = self.log.segments().len();
        s
    }

    /// Deletes whole sealed segments whose data is all older than the retention age, then the
    /// oldest ones while the store is over the size limit. Returns the segments deleted.
    pub fn enforce_retention(&self, now_ns: u64) -> Result<usize, StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        let segments = self.log.segments();
        let mut total: u64 = segments.iter().map(|s| s.bytes).sum();
        let newest = {
            self.state
                .read()
                .expect("store state lock poisoned")
                .newest_per_segment()
        };
        let mut deleted = 0;
        for seg in segments.iter().filter(|s| !s.active) {
            let newest_ns = newest.get(&seg.id).copied().unwrap_or(0);
            let too_old = self
                .cfg
                .retention_age_ns
                .is_some_and(|age| newest_ns < now_ns.saturating_sub(age) as i64);
            let too_big = self.cfg.retention_bytes.is_some_and(|max| total > max);
            if !(too_old || too_big) {
                continue;
            }
            self.log.delete_segment(seg.id)?;
            total -= seg.bytes;
            self.state
                .write()
                .expect("store state lock poisoned")
                .forget_segment(seg.id, true);
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Seals the active segment now (normally done when it passes `segment_max_bytes`).
    pub fn rotate(&self) -> Result<(), StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        self.log.rotate()?;
        Ok(())
    }
}

/// Record kinds (the first byte of a record payload).
pub(crate) const SNAPSHOT: u8 = 1;
pub(crate) const INGEST: u8 = 2;
/// First record of a compaction's output segment: the segments it replaces.
pub(crate) const COMPACT_BEGIN: u8 = 3;
/// Blocks and spans copied by compaction (the layout of INGEST).
pub(crate) const COPY: u8 = 4;
/// Last record of a completed compaction.
pub(crate) const COMPACT_END: u8 = 5;

pub(crate) fn record_kind(g: &mut Get) -> Result<u8, CodecError> {
    match g.u8()? {
        k @ (SNAPSHOT | INGEST | COMPACT_BEGIN | COPY | COMPACT_END) => Ok(k),
        k => Err(CodecError(format!("unknown record kind {k}"))),
    }
}
