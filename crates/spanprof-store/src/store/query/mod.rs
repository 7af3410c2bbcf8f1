//! Answers: which blocks and samples a selection covers, and what is built from them.

mod catalog;
mod coverage;
mod pprof_export;
mod read;
mod resolve;
mod selection;
mod spans;

use super::segments::SegmentIndex;
pub use coverage::Coverage;
use hashbrown::HashSet;
pub use pprof_export::CUT_STACK_FRAME;
pub use pprof_export::MAX_STACK_DEPTH;
pub use selection::Selection;
pub use selection::SpanFilter;
use spanprof_format::profile_type::ProfileTypeId;
use std::sync::Arc;

/// What a selection resolved to.
pub(crate) struct Resolved {
    pub profile_type: ProfileTypeId,
    /// (segment index, block) pairs to read.
    pub blocks: Vec<(Arc<SegmentIndex>, u32)>,
    /// When set, only samples whose link's span is in here.
    pub spans: Option<HashSet<[u8; 8]>>,
    /// When set, only samples whose link names this trace or one of its stored spans.
    pub trace: Option<([u8; 16], HashSet<[u8; 8]>)>,
    pub available: Vec<ProfileTypeId>,
    /// `available` are the types of the selected spans' or trace's samples (not the
    /// service's, or every service's, for a selection of spans without samples).
    pub of_samples: bool,
}

/// The distinct times of the resolved blocks: the profiles a selection reads.
fn profile_times(r: &Resolved) -> u64 {
    r.blocks
        .iter()
        .map(|(index, b)| index.blocks[*b as usize].time_ns)
        .collect::<HashSet<i64>>()
        .len() as u64
}

/// Whether a profile taken at `time_ns` lies in `[from_ns, to_ns)` (0 = open end).
fn starts_in(time_ns: i64, from_ns: i64, to_ns: i64) -> bool {
    time_ns >= from_ns && (to_ns == 0 || time_ns < to_ns)
}

fn overlaps(time_ns: i64, duration_ns: i64, from_ns: i64, to_ns: i64) -> bool {
    let end = time_ns.saturating_add(duration_ns.max(0));
    (to_ns == 0 || time_ns < to_ns) && end >= from_ns
}

/// Selected spans looked up for a pprof export's time (beyond, the profiles' windows give it:
/// a span filter can select thousands).
const SPAN_TIME_LOOKUPS: usize = 1024;

/// Series a scan matches with the store read-locked, at most, before it lets writers in
/// (fewer in tests, so that a scan of a few chunks needs few series).
pub(crate) const SERIES_CHUNK: usize = if cfg!(test) { 8 } else { 256 };

/// How long a series scan holds the store read-locked, about, before it lets writers in: a
/// chunk of 256 series took 150 ms under a label regex over 2,000-byte values, and every
/// ingest waited that long (bench/query-ingest.sh).
pub(crate) const SCAN_LOCK_HOLD: std::time::Duration = std::time::Duration::from_millis(2);

/// One read-locked stretch of a series scan: it ends after [`SERIES_CHUNK`] series or
/// [`SCAN_LOCK_HOLD`], whichever comes first.
pub(crate) struct ScanHold {
    started: std::time::Instant,
    series: usize,
}

impl ScanHold {
    pub(crate) fn new() -> ScanHold {
        ScanHold {
            started: std::time::Instant::now(),
            series: 0,
        }
    }

    /// Counts one more series scanned; whether the stretch is over. The clock is read every
    /// fourth series: a series' matchers cost less than reading it, most of the time.
    pub(crate) fn over(&mut self) -> bool {
        self.series += 1;
        self.series >= SERIES_CHUNK
            || (self.series.is_multiple_of(4) && self.started.elapsed() >= SCAN_LOCK_HOLD)
    }
}

#[cfg(test)]
thread_local! {
    /// Run by a series scan on this thread between two chunks, the store unlocked (tests).
    pub(crate) static BETWEEN_SERIES_CHUNKS: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
fn between_series_chunks() {
    BETWEEN_SERIES_CHUNKS.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}
