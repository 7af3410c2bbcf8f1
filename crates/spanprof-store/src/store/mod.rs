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
mod config;
mod ingest;
mod lock;
mod query;
mod recent;
#[cfg(test)]
mod repeat_tests;
mod retention;
mod rotation;
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

use std::sync::{Arc, Mutex, RwLock};

use crate::codec::{CodecError, Get};
use crate::log::{Log, LogConfig, LogError};
use lock::lock_dir;
pub use segments::IndexError;
use segments::SegmentIndex;
use state::State;

pub use compact::CompactReport;
pub use config::near_max_symbol_bytes;
pub use config::SeriesLimits;
pub use config::StoreConfig;
pub use ingest::{
    IngestReport, Request, Storing, MAX_PROFILE_TOTAL, PROFILE_NAME_ATTRIBUTE, SERVICE_LABEL,
};
pub use lock::LOCK_FILE;
pub use query::{Coverage, Selection, SpanFilter, CUT_STACK_FRAME, MAX_STACK_DEPTH};
pub use span_page::{
    contains_regex, search_regex, sort_trace_groups, NameSuggestions, SpanCpu, SpanMatch,
    SpanMatches, SpanOrder, SpanTime, TraceGroup, MAX_MATCHES,
};
pub use state::SeriesKey;
pub use windows::SpanWindows;

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
    /// A segment's index could not be read.
    #[error(transparent)]
    Index(#[from] segments::IndexError),
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
    // Long: replay in the order recovery needs: lock, log, symbols and series, indexes, spans.
    #[allow(clippy::too_many_lines)]
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
                    report.problems.push(problem.to_string());
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
