//! Per-segment indexes. The active segment's index lives in memory; when a segment is sealed
//! its index is written next to it (`DIR/index/{id:016x}.idx`) and memory keeps only a
//! [`SealedSummary`] — time range, series present, counts, and Bloom filters of the span and
//! trace ids — so resident memory does not grow with the amount stored. Queries load the
//! sealed indexes they need through a small LRU cache; opening replays only the active segment.

mod bloom;
mod cache;
mod file;
mod id_map;
mod out;
mod prefetch;

use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

use hashbrown::HashMap;

use crate::block::Block;
use crate::codec::Get;
use crate::log::RecordPos;
use crate::spans::{decode_spans, scan_spans, SpanIndex, SpanView};
use file::{with_headroom, LazySections};
use id_map::FrozenIds;

pub(crate) use bloom::Bloom;
pub(crate) use cache::IndexCache;
pub(crate) use file::index_path;
pub(crate) use file::read_summary;
pub(crate) use file::write_index;
pub use file::IndexError;
pub(crate) use file::SealedSummary;
pub(crate) use id_map::IdBlocks;

/// Where a block is and what it holds.
#[derive(Debug, Clone)]
pub(crate) struct BlockMeta {
    pub pos: RecordPos,
    /// Byte range of the block inside the record payload.
    pub start: u32,
    pub len: u32,
    pub series: u32,
    pub time_ns: i64,
    pub duration_ns: i64,
    pub samples: u32,
    /// Its samples link to the same spans and traces as those of the block before it (the
    /// next sample type of the same profile): it is in the span and trace maps through that
    /// block, not under ids of its own ([`SegmentIndex::index_block`]).
    pub shares_links: bool,
}

/// Everything one segment holds, indexed.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentIndex {
    pub segment: u64,
    pub blocks: Vec<BlockMeta>,
    /// Span id → blocks holding samples of that span.
    by_span: IdBlocks<8>,
    /// Trace id → blocks holding samples linked to that trace.
    by_trace: IdBlocks<16>,
    /// The segment's spans, read and decoded on first use (a span's flame graph needs only
    /// the block maps).
    spans: OnceLock<SpanIndex>,
    /// `by_span` and `by_trace` of an index read back from its file: flat and sorted, built
    /// without an allocation per id (a cold query waits for it). Live indexes use the maps.
    /// The trace map is read from the file on first use, as the spans are.
    frozen_spans: FrozenIds<8>,
    frozen_traces: OnceLock<FrozenIds<16>>,
    /// Where the lazily read sections of an index read back from its file are.
    lazy: Option<Arc<LazySections>>,
    /// Segments this one replaces (a completed compaction's sources).
    pub replaces: Vec<u64>,
    /// The compaction writing this segment reached its END record.
    pub compaction_complete: bool,
}

impl SegmentIndex {
    pub fn new(segment: u64) -> Self {
        SegmentIndex {
            segment,
            ..Default::default()
        }
    }

    /// An empty index for `segment` with room for an eighth more than `like` holds, so its
    /// tables never grow with the state lock held (commit dd9256a: 40 ms stalls). `spare`, an
    /// index sealed before and emptied ([`SegmentIndex::emptied`]), lends its tables, whose
    /// memory is mapped already (commit 266f2ff).
    pub fn sized_like(segment: u64, like: &SegmentIndex, spare: Option<SegmentIndex>) -> Self {
        let mut index = SegmentIndex::new(segment);
        if let Some(spare) = spare {
            index.blocks = spare.blocks;
            index.by_span = spare.by_span;
            index.by_trace = spare.by_trace;
        }
        index.blocks.reserve(with_headroom(like.blocks.len()));
        index.by_span.reserve(with_headroom(like.span_count()));
        index.by_trace.reserve(with_headroom(like.trace_count()));
        let spans = like.spans();
        let (n, traces) = (spans.len(), spans.trace_count());
        index
            .spans_mut()
            .reserve(with_headroom(n), with_headroom(traces));
        index
    }

    /// This live index, emptied for [`SegmentIndex::sized_like`] to reuse: its block list
    /// and id tables keep their memory, the rest is freed. Emptying frees each id's block list
    /// that spilled to the heap, and clears the tables' slots: done by the thread that sealed
    /// the index, with no lock held.
    pub fn emptied(self) -> SegmentIndex {
        let (mut blocks, mut by_span, mut by_trace) = (self.blocks, self.by_span, self.by_trace);
        blocks.clear();
        by_span.clear();
        by_trace.clear();
        SegmentIndex {
            blocks,
            by_span,
            by_trace,
            ..SegmentIndex::default()
        }
    }

    /// Makes room for what this segment will hold once `full_bytes` of it are written, of
    /// which `filled_bytes` are (and indexed here), so that its maps do not grow, stalling
    /// ingest while every entry moves, as it fills. A store's first segment has no segment
    /// before it to be sized like ([`SegmentIndex::sized_like`]), and the active segment of a
    /// reopened store was indexed by replay with no room to grow: this is called for both.
    /// With enough written to go by, the counts so far are extrapolated; otherwise the sizes
    /// are guessed from those of Go CPU profiles with a span on every sample (measured: a
    /// 16 MiB segment held about 630,000 span ids, 425,000 trace ids and 26,700 blocks). Room
    /// that is never written to costs address space and a byte per id.
    pub fn reserve_for(&mut self, filled_bytes: u64, full_bytes: u64) {
        const ENOUGH_TO_GO_BY: u64 = 1 << 20;
        const GUESSED_BYTES_PER_ID: u64 = 24;
        const GUESSED_BYTES_PER_BLOCK: u64 = 512;
        const MOST_IDS: u64 = 4 << 20;
        let expected = |now: usize, guess_bytes_each: u64| {
            let n = if filled_bytes >= ENOUGH_TO_GO_BY {
                (now as u128 * u128::from(full_bytes) / u128::from(filled_bytes)) as u64
            } else {
                full_bytes / guess_bytes_each
            };
            with_headroom(n.min(MOST_IDS) as usize).saturating_sub(now)
        };
        let spans = expected(self.by_span.len(), GUESSED_BYTES_PER_ID);
        let traces = expected(self.by_trace.len(), GUESSED_BYTES_PER_ID);
        let blocks = expected(self.blocks.len(), GUESSED_BYTES_PER_BLOCK);
        self.by_span.reserve(spans);
        self.by_trace.reserve(traces);
        self.blocks.reserve(blocks);
    }

    /// The segment's spans.
    pub fn spans(&self) -> &SpanIndex {
        self.spans.get_or_init(|| {
            let mut index = SpanIndex::default();
            // A live segment's spans are inserted as they come.
            let Some(lazy) = &self.lazy else {
                return index;
            };
            match lazy
                .read(lazy.spans_at, "spans")
                .and_then(|raw| decode_spans(&raw).map_err(|e| e.to_string()))
            {
                Ok(spans) => spans.into_iter().for_each(|s| index.insert(s)),
                Err(e) => tracing::error!(segment = self.segment, error = %e, "cannot read the spans of a segment index: queries see none of them"),
            }
            index
        })
    }

    /// Calls `f` with each of the segment's spans until it breaks. A sealed segment whose
    /// spans are not decoded already is read in place from its file, not decoded into a
    /// [`SpanIndex`]: a search looks at each span once, and decoding them all (hundreds of
    /// thousands of records, an allocation per text) took most of its time and the memory
    /// of every segment it passed kept in the index cache.
    pub fn visit_spans(
        &self,
        mut f: impl FnMut(&SpanView<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if let (Some(lazy), None) = (&self.lazy, self.spans.get()) {
            let read = lazy
                .read(lazy.spans_at, "spans")
                .and_then(|raw| scan_spans(&raw, &mut f).map_err(|e| e.to_string()));
            return read.unwrap_or_else(|e| {
                tracing::error!(segment = self.segment, error = %e, "cannot read the spans of a segment index: queries see none of them");
                ControlFlow::Continue(())
            });
        }
        for span in self.spans().iter() {
            f(&span.view())?;
        }
        ControlFlow::Continue(())
    }

    /// The trace map of an index read back from its file (empty for a live one).
    fn frozen_traces(&self) -> &FrozenIds<16> {
        self.frozen_traces.get_or_init(|| {
            let Some(lazy) = &self.lazy else {
                return FrozenIds::default();
            };
            let blocks = self.blocks.len();
            match lazy.read(lazy.traces_at, "traces").and_then(|raw| {
                let mut g = Get::new(&raw);
                let x = FrozenIds::decode(&mut g, blocks).map_err(|e| e.to_string())?;
                if g.done() {
                    Ok(x)
                } else {
                    Err("trailing bytes after the trace map".into())
                }
            }) {
                Ok(x) => x,
                Err(e) => {
                    tracing::error!(segment = self.segment, error = %e, "cannot read the trace map of a segment index: trace queries miss its samples");
                    FrozenIds::default()
                }
            }
        })
    }

    /// The segment's spans, for adding to.
    pub fn spans_mut(&mut self) -> &mut SpanIndex {
        self.spans();
        self.spans.get_mut().expect("initialised just above")
    }

    /// The blocks with samples of span `id`.
    pub fn span_blocks(&self, id: &[u8; 8]) -> impl Iterator<Item = u32> + '_ {
        let listed = match self.by_span.get(id) {
            Some(b) => b,
            None => self.frozen_spans.get(id),
        };
        self.with_sharers(listed)
    }

    /// The blocks with samples linked to trace `id`.
    pub fn trace_blocks(&self, id: &[u8; 16]) -> impl Iterator<Item = u32> + '_ {
        let listed = match self.by_trace.get(id) {
            Some(b) => b,
            None => self.frozen_traces().get(id),
        };
        self.with_sharers(listed)
    }

    /// The blocks `listed`, each followed by those that share its links
    /// ([`BlockMeta::shares_links`]): the maps list only the first of them.
    fn with_sharers<'a>(&'a self, listed: &'a [u32]) -> impl Iterator<Item = u32> + 'a {
        listed.iter().flat_map(move |&b| {
            let after = self.blocks.get(b as usize + 1..).unwrap_or_default();
            let sharing = after.iter().take_while(|m| m.shares_links).count() as u32;
            b..=b + sharing
        })
    }

    /// Span ids with samples here.
    pub fn span_count(&self) -> usize {
        self.by_span.len() + self.frozen_spans.ids.len()
    }

    /// Trace ids with samples here.
    pub fn trace_count(&self) -> usize {
        self.by_trace.len() + self.frozen_traces().ids.len()
    }

    /// (span id, blocks), sorted by id.
    fn span_entries(&self) -> Vec<([u8; 8], &[u32])> {
        let mut all: Vec<([u8; 8], &[u32])> = self
            .by_span
            .iter()
            .chain(self.frozen_spans.iter().map(|(k, v)| (*k, v)))
            .collect();
        // As big-endian integers ids sort in the same order, with one compare instead of a
        // byte-wise one: sealing sorts hundreds of thousands of ids. The ids are copied into
        // the entries so that a compare reads them there, not in the hash table (a cache miss
        // each: the sort took 40 % of sealing).
        all.sort_unstable_by_key(|e| u64::from_be_bytes(e.0));
        all
    }

    /// (trace id, blocks), sorted by id.
    fn trace_entries(&self) -> Vec<([u8; 16], &[u32])> {
        let mut all: Vec<([u8; 16], &[u32])> = self
            .by_trace
            .iter()
            .chain(self.frozen_traces().iter().map(|(k, v)| (*k, v)))
            .collect();
        all.sort_unstable_by_key(|e| u128::from_be_bytes(e.0));
        all
    }

    /// Adds a block to the indexes; `previous`: the block indexed just before it, when that
    /// one is of the same record. A block whose links are those of `previous` (the next sample
    /// type of a profile: a Go CPU profile's two, a heap profile's four) is not listed under
    /// its spans and traces again: it is marked to share them ([`BlockMeta::shares_links`]),
    /// and lookups return it after the block listed. The span and trace maps then list one
    /// block per profile and id, not one per sample type (a sealed index of Go CPU profiles
    /// 16 % smaller, and its seal 9 % faster, under the load bench).
    pub fn index_block(
        &mut self,
        pos: RecordPos,
        start: u32,
        len: u32,
        block: &Block,
        previous: Option<&Block>,
    ) {
        let id = self.blocks.len() as u32;
        let shares_links = id > 0
            && !block.link_table.is_empty()
            && previous.is_some_and(|p| p.link_table == block.link_table);
        self.blocks.push(BlockMeta {
            pos,
            start,
            len,
            series: block.series,
            time_ns: block.time_ns,
            duration_ns: block.duration_ns,
            samples: block.nodes.len() as u32,
            shares_links,
        });
        if shares_links {
            return;
        }
        let links = block.link_table.iter();
        self.by_span
            .push_all(links.clone().map(|(_, span)| *span), id);
        let traces = links.map(|(trace, _)| *trace).filter(|t| *t != [0; 16]);
        self.by_trace.push_all(traces, id);
    }

    /// Time range of the segment's data (blocks and spans), in ns since the epoch.
    pub fn time_range(&self) -> (i64, i64) {
        let blocks = self
            .blocks
            .iter()
            .map(|b| (b.time_ns, b.time_ns.saturating_add(b.duration_ns)));
        let spans = self
            .spans()
            .iter()
            .map(|s| (s.start_ns as i64, s.end_ns as i64));
        blocks
            .chain(spans)
            .fold((i64::MAX, i64::MIN), |(a, b), (s, e)| (a.min(s), b.max(e)))
    }

    /// The summary kept in memory once the segment is sealed.
    pub fn summary(&self, index_bytes: u64) -> SealedSummary {
        let mut span_bloom = Bloom::with_capacity(self.span_count() + self.spans().len());
        let mut trace_bloom = Bloom::with_capacity(self.trace_count() + self.spans().len());
        let spans = self.spans();
        let span_ids = self.by_span.ids().chain(&self.frozen_spans.ids);
        span_bloom.insert_all(span_ids.map(|id| &id[..]));
        span_bloom.insert_all(spans.iter().map(|s| &s.span_id[..]));
        let trace_ids = self.by_trace.ids().chain(&self.frozen_traces().ids);
        trace_bloom.insert_all(trace_ids.map(|id| &id[..]));
        trace_bloom.insert_all(spans.iter().map(|s| &s.trace_id[..]));
        // When each series' profiles were taken: the listings (services, series, labels)
        // hold a series when one was taken in their range, as the profile queries count it.
        let mut series: HashMap<u32, (i64, i64)> = HashMap::new();
        for b in &self.blocks {
            let r = series.entry(b.series).or_insert((b.time_ns, b.time_ns));
            *r = (r.0.min(b.time_ns), r.1.max(b.time_ns));
        }
        let mut series: Vec<(u32, i64, i64)> =
            series.into_iter().map(|(k, (s, e))| (k, s, e)).collect();
        series.sort_unstable();
        SealedSummary {
            time_range: self.time_range(),
            series,
            blocks: self.blocks.len() as u64,
            samples: self.blocks.iter().map(|b| u64::from(b.samples)).sum(),
            spans: self.spans().len() as u64,
            span_bloom,
            trace_bloom,
            index_bytes,
            replaces: self.replaces.clone(),
            compaction_complete: self.compaction_complete,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spread-out span id per `k`.
    pub(super) fn id(k: u64) -> [u8; 8] {
        k.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()
    }

    /// Whether span ids `from..to` go into `x` without its span map's entries moving or its
    /// table growing.
    fn fills_without_growing(x: &mut SegmentIndex, from: u64, to: u64) -> bool {
        let (entries, table) = (x.by_span.entries.as_ptr(), x.by_span.capacity());
        for k in from..to {
            x.by_span.push_once(id(k), 0);
        }
        (x.by_span.entries.as_ptr(), x.by_span.capacity()) == (entries, table)
    }

    /// A segment a little bigger than the one before it fills its tables without moving them.
    #[test]
    fn an_index_sized_like_the_last_takes_an_eighth_more_without_growing() {
        let mut like = SegmentIndex::new(1);
        for k in 0..8_000u64 {
            like.by_span.push_once(id(k), 0);
        }
        let mut x = SegmentIndex::sized_like(2, &like, None);
        assert!(fills_without_growing(&mut x, 0, 9_000), "the span map grew");
    }

    /// An index made from an emptied one holds none of its ids or blocks, finds what is
    /// added to it, and fills in the memory it was lent.
    #[test]
    fn an_index_made_from_an_emptied_one_starts_empty_in_its_memory() {
        // As in a server: segments of about the same size, each sized like the one before.
        let mut seed = SegmentIndex::new(0);
        for k in 0..8_000u64 {
            seed.by_span.push_once(id(k), 0);
        }
        let mut old = SegmentIndex::sized_like(1, &seed, None);
        for k in 0..8_000u64 {
            old.by_span.push_once(id(k), k as u32);
            old.by_trace.push_once([k as u8; 16], 7);
        }
        old.blocks.push(BlockMeta {
            pos: RecordPos {
                segment: 1,
                offset: 0,
                len: 1,
            },
            start: 0,
            len: 1,
            series: 0,
            time_ns: 0,
            duration_ns: 0,
            samples: 1,
            shares_links: false,
        });
        let like = old.clone();
        let lent = (old.by_span.entries.as_ptr(), old.by_span.slots.as_ptr());
        let mut x = SegmentIndex::sized_like(2, &like, Some(old.emptied()));
        assert_eq!(x.segment, 2);
        assert_eq!((x.blocks.len(), x.span_count(), x.trace_count()), (0, 0, 0));
        assert_eq!(x.span_blocks(&id(5)).count(), 0);
        assert_eq!(x.trace_blocks(&[5; 16]).count(), 0);
        assert_eq!(
            (x.by_span.entries.as_ptr(), x.by_span.slots.as_ptr()),
            lent,
            "the emptied index's memory was not reused"
        );
        x.by_span.push_once(id(5), 3);
        x.by_span.push_once(id(9_000), 4);
        assert_eq!(x.span_blocks(&id(5)).collect::<Vec<_>>(), [3]);
        assert_eq!(x.span_blocks(&id(9_000)).collect::<Vec<_>>(), [4]);
        assert_eq!(x.span_blocks(&id(6)).count(), 0);
        assert!(
            fills_without_growing(&mut x, 10_000, 18_000),
            "the span map grew"
        );
    }

    /// A store's first segment, and one replay left partly filled, fill up without their maps
    /// growing: from a guess when nothing is written yet, from the counts so far otherwise.
    #[test]
    fn a_segment_reserved_for_its_size_fills_without_growing() {
        // Fresh: the span ids of a 16 MiB segment of the load bench's Go CPU profiles.
        let mut fresh = SegmentIndex::new(1);
        fresh.reserve_for(0, 16 << 20);
        assert!(fills_without_growing(&mut fresh, 0, 630_000));
        // Replayed with 1 MiB of 4 written, ids denser than the guess: four times the ids it
        // holds, and an eighth more.
        let mut replayed = SegmentIndex::new(2);
        for k in 0..100_000 {
            replayed.by_span.push_once(id(k), 0);
        }
        replayed.reserve_for(1 << 20, 4 << 20);
        assert!(fills_without_growing(&mut replayed, 100_000, 400_000));
        // Unreserved, the same index grows.
        let mut unreserved = SegmentIndex::new(3);
        assert!(!fills_without_growing(&mut unreserved, 0, 20_000));
    }
}
