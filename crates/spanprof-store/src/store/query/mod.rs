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

use crate::matchers::LabelMatcher;
use crate::store::state::{SeriesKey, State};
use crate::store::{Store, StoreError};

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

/// Series whose keys a scan copies under one read lock, at most (fewer in tests, so that a
/// scan of a few chunks needs few series). Only cheap checks run under the lock (time, service,
/// type); label matchers run on the copies with no lock held (see [`Store::series_chunk`]).
pub(crate) const SERIES_CHUNK: usize = if cfg!(test) { 8 } else { 1024 };

/// Series matched between two checks of the query's deadline and client: a label regex over
/// 2,000-byte values costs about 0.4 ms a series (bench/query-ingest.sh).
const SERIES_PER_CHECK: usize = 64;

/// A series' id and its key, copied out of the store's state.
pub(crate) type SharedSeries = (u32, Arc<SeriesKey>);

impl Store {
    /// The next chunk of series from id `*next` on that `keep` takes (called with the store
    /// read-locked: cheap checks only), with their ids, and `*next` moved past it; `None` once
    /// every series has been seen. The lock is held only to copy the keys' pointers: a label
    /// regex over 10,000 series of 2,000-byte values takes seconds, and with the lock held
    /// while it ran (even 2 ms at a time) ingest fell to 0.02-0.08 of its rate
    /// (bench/query-ingest.sh). Series ids are never reused, so a chunk read after an ingest
    /// still names the series it did; series added meanwhile may be in the answer or not, as if
    /// they came just before or after it.
    pub(crate) fn series_chunk(
        &self,
        next: &mut usize,
        keep: impl Fn(&State, usize, &SeriesKey) -> bool,
    ) -> Result<Option<Vec<SharedSeries>>, StoreError> {
        crate::query_limit::check()?;
        let st = self.state.read().expect("store state lock poisoned");
        if *next >= st.series.len() {
            return Ok(None);
        }
        let end = (*next + SERIES_CHUNK).min(st.series.len());
        let chunk = (*next..end)
            .filter(|&i| keep(&st, i, &st.series[i]))
            .map(|i| (i as u32, Arc::clone(&st.series[i])))
            .collect();
        *next = end;
        Ok(Some(chunk))
    }

    /// The series of `chunk` whose labels `matchers` take, matched with no lock held; checks
    /// the query's deadline every [`SERIES_PER_CHECK`] series.
    pub(crate) fn matching<'a>(
        chunk: &'a [SharedSeries],
        matchers: &'a [LabelMatcher],
    ) -> impl Iterator<Item = Result<&'a SharedSeries, StoreError>> + 'a {
        #[cfg(test)]
        while_matching();
        chunk.iter().enumerate().filter_map(move |(n, item)| {
            if n > 0 && n.is_multiple_of(SERIES_PER_CHECK) {
                if let Err(e) = crate::query_limit::check() {
                    return Some(Err(e.into()));
                }
            }
            resolve::series_matches(matchers, &item.1).then_some(Ok(item))
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Run by a series scan on this thread before it matches a chunk's labels (tests).
    pub(crate) static WHILE_MATCHING: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
fn while_matching() {
    WHILE_MATCHING.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}
