//! Per-segment indexes. The active segment's index lives in memory; when a segment is sealed
//! its index is written next to it (`DIR/index/{id:016x}.idx`) and memory keeps only a
//! [`SealedSummary`] — time range, series present, counts, and Bloom filters of the span and
//! trace ids — so resident memory does not grow with the amount stored. Queries load the
//! sealed indexes they need through a small LRU cache; opening replays only the active segment.

use std::hash::BuildHasher;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use hashbrown::HashMap;

use super::state::BlockMeta;
use crate::block::Block;
use crate::codec::{CodecError, Get, Put};
use crate::log::RecordPos;
use crate::spans::{decode_spans, encode_spans, scan_spans, SpanIndex, SpanView};

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

    /// The index file's three body sections, whole: core (what a span's flame graph needs:
    /// blocks and the span map), the trace map, the spans ([`write_index`] streams the first
    /// two instead).
    #[cfg(test)]
    fn encode(&self) -> [Vec<u8>; 3] {
        let core = in_memory(|out| self.encode_core(&self.span_entries(), out));
        let traces = in_memory(|out| encode_traces(&self.trace_entries(), out));
        let mut spans = Vec::new();
        encode_spans(self.spans().iter(), &mut spans);
        [core, traces, spans]
    }

    /// The core section: blocks and the span map (`spans`: [`SegmentIndex::span_entries`]).
    fn encode_core(&self, spans: &[([u8; 8], &[u32])], out: &mut Out) -> std::io::Result<()> {
        out.buf.uvarint(self.segment);
        out.buf.uvarint(self.replaces.len() as u64);
        for &r in &self.replaces {
            out.buf.uvarint(r);
        }
        out.buf.push(u8::from(self.compaction_complete));
        out.buf.uvarint(self.blocks.len() as u64);
        for b in &self.blocks {
            let o = &mut out.buf;
            o.uvarint(b.pos.segment);
            o.uvarint(b.pos.offset);
            o.uvarint(b.pos.len.into());
            o.uvarint(b.start.into());
            o.uvarint(b.len.into());
            o.uvarint(b.series.into());
            o.ivarint(b.time_ns);
            o.ivarint(b.duration_ns);
            o.uvarint(b.samples.into());
            o.push(u8::from(b.shares_links));
            out.spill()?;
        }
        FrozenIds::encode_fixed(spans, out)
    }

    fn decode(b: &[u8]) -> Result<SegmentIndex, CodecError> {
        let mut g = Get::new(b);
        let mut x = SegmentIndex::new(g.uvarint()?);
        let n = g.count()?;
        for _ in 0..n {
            x.replaces.push(g.uvarint()?);
        }
        x.compaction_complete = g.u8()? != 0;
        let n = g.count()?;
        x.blocks.reserve_exact(n);
        for _ in 0..n {
            x.blocks.push(BlockMeta {
                pos: RecordPos {
                    segment: g.uvarint()?,
                    offset: g.uvarint()?,
                    len: g.u32()?,
                },
                start: g.u32()?,
                len: g.u32()?,
                series: g.u32()?,
                time_ns: g.ivarint()?,
                duration_ns: g.ivarint()?,
                samples: g.u32()?,
                shares_links: match g.u8()? {
                    0 => false,
                    1 if !x.blocks.is_empty() => true,
                    v => {
                        return Err(CodecError(format!(
                            "block {}: links shared with the block before ({v}) is not 0 or 1, \
                             or the first block shares",
                            x.blocks.len()
                        )))
                    }
                },
            });
        }
        x.frozen_spans = FrozenIds::decode_fixed(&mut g, n)?;
        if !g.done() {
            return Err(CodecError("trailing bytes after the segment index".into()));
        }
        Ok(x)
    }
}

/// The trace map section (`traces`: [`SegmentIndex::trace_entries`]).
fn encode_traces(traces: &[([u8; 16], &[u32])], out: &mut Out) -> std::io::Result<()> {
    out.buf.uvarint(traces.len() as u64);
    for (id, blocks) in traces {
        out.buf.extend_from_slice(id);
        out.buf.uvarint(blocks.len() as u64);
        for &b in *blocks {
            out.buf.uvarint(b.into());
        }
        out.spill()?;
    }
    Ok(())
}

/// What `encode` writes to an [`Out`], gathered.
#[cfg(test)]
fn in_memory(encode: impl FnOnce(&mut Out) -> std::io::Result<()>) -> Vec<u8> {
    let mut whole = Vec::new();
    let mut keep = |bytes: &[u8]| {
        whole.extend_from_slice(bytes);
        Ok(())
    };
    let mut out = Out::new(&mut keep);
    encode(&mut out)
        .and_then(|()| out.finish())
        .expect("encodes to memory");
    whole
}

/// Bytes an index section is encoded in before they are handed on ([`Out`]): the pieces
/// [`Pieces`] writes.
const SPILL_BYTES: usize = 1 << 20;

/// Where an index section is encoded: `buf`, handed to `spill` each time it holds
/// [`SPILL_BYTES`] (and at the end), then reused. A seal's sections are tens of MB: encoded
/// whole before they were written, they took as much memory again, in fresh pages the
/// kernel faulted in and zeroed (2 % of the server's CPU under the load bench).
struct Out<'s> {
    buf: Vec<u8>,
    spill: &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>,
}

impl<'s> Out<'s> {
    fn new(spill: &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Self {
        Out {
            buf: Vec::with_capacity(SPILL_BYTES + 4096),
            spill,
        }
    }

    /// Hands the bytes on once there are [`SPILL_BYTES`] of them.
    fn spill(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= SPILL_BYTES {
            (self.spill)(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Hands on what is left.
    fn finish(self) -> std::io::Result<()> {
        (self.spill)(&self.buf)
    }
}

/// `n` and an eighth more: room for a segment a little bigger than the one it is sized from.
fn with_headroom(n: usize) -> usize {
    n + n / 8
}

/// The sections of an index file read on first use: the trace map and the spans.
#[derive(Debug)]
struct LazySections {
    path: PathBuf,
    traces_at: u64,
    spans_at: u64,
}

impl LazySections {
    /// The checksummed section at byte `at` of the file.
    fn read(&self, at: u64, what: &str) -> Result<Vec<u8>, String> {
        use std::io::{Seek, SeekFrom};
        let damaged = |why: String| format!("{}: {why}", self.path.display());
        let mut f = std::fs::File::open(&self.path).map_err(|e| damaged(e.to_string()))?;
        f.seek(SeekFrom::Start(at))
            .map_err(|e| damaged(e.to_string()))?;
        read_section(&mut f, what).map_err(damaged)
    }
}

/// Ids with their block lists, read-only: ids sorted and unique, the lists one after the
/// other in `blocks` (`ends[i]` is where the list of `ids[i]` ends).
#[derive(Debug, Clone, Default)]
struct FrozenIds<const N: usize> {
    ids: Vec<[u8; N]>,
    ends: Vec<u32>,
    blocks: Vec<u32>,
}

impl<const N: usize> FrozenIds<N> {
    /// Reads `count · (id · n · block…)…` as `encode` writes it (ids ascending); block ids
    /// must be below `blocks`.
    fn decode(g: &mut Get, blocks: usize) -> Result<Self, CodecError> {
        let m = g.count()?;
        let mut x = FrozenIds {
            ids: Vec::with_capacity(m),
            ends: Vec::with_capacity(m),
            // Block ids take a byte or more each: room for all of them that the rest of the
            // section could hold, so the list never moves while it grows (only the pages
            // written to are ever touched).
            blocks: Vec::with_capacity(g.remaining().saturating_sub(m * (N + 1))),
        };
        for _ in 0..m {
            let id = g.fixed::<N>()?;
            if x.ids.last().is_some_and(|last| *last >= id) {
                return Err(CodecError("index ids out of order".into()));
            }
            x.ids.push(id);
            let k = g.count()?;
            for _ in 0..k {
                let v = g.u32()?;
                if v as usize >= blocks {
                    return Err(CodecError(format!("block {v} out of range")));
                }
                x.blocks.push(v);
            }
            let end = u32::try_from(x.blocks.len())
                .map_err(|_| CodecError("too many block ids".into()))?;
            x.ends.push(end);
        }
        Ok(x)
    }

    /// Writes `entries` (sorted by id) in fixed-width fields, so that reading them back is
    /// a few linear copies and checks rather than a varint decode per field (a cold span
    /// query waits for it): `count:uv · total:uv · (id · end:u32le)×count · block:u32le×total`.
    fn encode_fixed(entries: &[([u8; N], &[u32])], out: &mut Out) -> std::io::Result<()> {
        let total: usize = entries.iter().map(|e| e.1.len()).sum();
        out.buf.uvarint(entries.len() as u64);
        out.buf.uvarint(total as u64);
        let mut end = 0u32;
        for (id, blocks) in entries {
            end += blocks.len() as u32;
            out.buf.extend_from_slice(&id[..]);
            out.buf.extend_from_slice(&end.to_le_bytes());
            out.spill()?;
        }
        for (_, blocks) in entries {
            for b in *blocks {
                out.buf.extend_from_slice(&b.to_le_bytes());
            }
            out.spill()?;
        }
        Ok(())
    }

    /// Reads what [`FrozenIds::encode_fixed`] wrote, checking that ids ascend, that the
    /// lists are in bounds and that every block id is below `blocks`.
    fn decode_fixed(g: &mut Get, blocks: usize) -> Result<Self, CodecError> {
        let m = g.count()?;
        let total = g.uvarint()?;
        let table = g.slice(
            m.checked_mul(N + 4)
                .ok_or_else(|| CodecError("span map too large".into()))?,
        )?;
        let total = usize::try_from(total)
            .ok()
            .filter(|&t| t <= g.remaining() / 4)
            .ok_or_else(|| CodecError(format!("{total} block ids exceed the index")))?;
        let ids_raw = g.slice(total * 4)?;
        let mut x = FrozenIds {
            ids: Vec::with_capacity(m),
            ends: Vec::with_capacity(m),
            blocks: Vec::with_capacity(total),
        };
        let mut previous_end = 0u32;
        for entry in table.chunks_exact(N + 4) {
            let id: [u8; N] = entry[..N].try_into().expect("N bytes");
            if x.ids.last().is_some_and(|last| *last >= id) {
                return Err(CodecError("index ids out of order".into()));
            }
            let end = u32::from_le_bytes(entry[N..].try_into().expect("4 bytes"));
            if end < previous_end || end as usize > total {
                return Err(CodecError(format!("block list end {end} out of range")));
            }
            previous_end = end;
            x.ids.push(id);
            x.ends.push(end);
        }
        if previous_end as usize != total {
            return Err(CodecError("block lists do not cover the block ids".into()));
        }
        for v in ids_raw.chunks_exact(4) {
            let v = u32::from_le_bytes(v.try_into().expect("4 bytes"));
            if v as usize >= blocks {
                return Err(CodecError(format!("block {v} out of range")));
            }
            x.blocks.push(v);
        }
        Ok(x)
    }

    fn range(&self, i: usize) -> &[u32] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.blocks[start as usize..self.ends[i] as usize]
    }

    fn get(&self, id: &[u8; N]) -> &[u32] {
        match self.ids.binary_search(id) {
            Ok(i) => self.range(i),
            Err(_) => &[],
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8; N], &[u32])> {
        self.ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id, self.range(i)))
    }
}

/// Id → the blocks with samples of it, for a live index. Entries are appended in order; an
/// open-addressed table of 8-byte slots (a 32-bit hash tag and the entry's position, linear
/// probing, at most [`MAX_LOAD`] full) finds them. A segment's ids are hundreds of thousands
/// of random ones, so nearly every slot read is a cache miss: one line a lookup here, where a
/// `hashbrown` table read its control bytes and its slots apart (two misses, 8 % of the
/// server's CPU under the load bench), and [`IdBlocks::push_all`] prefetches the slots of a
/// block's ids ahead of inserting them, so that those misses overlap.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdBlocks<const N: usize> {
    hasher: hashbrown::DefaultHashBuilder,
    /// `0` for an empty slot, else `tag << 32 | (position + 1)`; a power of two long.
    slots: Vec<u64>,
    entries: Vec<([u8; N], BlockIds)>,
    /// The hashes of the ids being added, kept for their allocation.
    hashes: Vec<u64>,
}

/// The most of a table's slots in use, as a fraction: linear probing stays within a cache
/// line or two below it.
const MAX_LOAD: (usize, usize) = (7, 10);

/// How many ids ahead of the one being added [`IdBlocks::push_all`] prefetches the slot of.
const PREFETCH_AHEAD: usize = 12;

impl<const N: usize> IdBlocks<N> {
    /// Adds block `block` to `id`'s blocks unless it is the last one already.
    #[cfg(test)]
    fn push_once(&mut self, id: [u8; N], block: u32) {
        self.push_all(std::iter::once(id), block);
    }

    /// Adds block `block` to the blocks of each of `ids` (a block's ids, in one go), unless
    /// it is the last one already.
    fn push_all(&mut self, ids: impl Iterator<Item = [u8; N]> + Clone, block: u32) {
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.clear();
        hashes.extend(ids.clone().map(|id| self.hasher.hash_one(id)));
        self.reserve(hashes.len());
        for &hash in hashes.iter().take(PREFETCH_AHEAD) {
            self.prefetch(hash);
        }
        for (i, id) in ids.enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.prefetch(ahead);
            }
            let at = self.find_or_insert(hashes[i], id);
            self.entries[at].1.push_once(block);
        }
        self.hashes = hashes;
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn prefetch(&self, hash: u64) {
        prefetch(&self.slots[hash as usize & self.mask()]);
    }

    /// Where `id` (of hash `hash`) is: `Ok` its entry's position, or `Err` the empty slot
    /// it would go in. The table is not empty.
    fn probe(&self, hash: u64, id: &[u8; N]) -> Result<usize, usize> {
        let tag = hash >> 32 << 32;
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Err(i);
            }
            if slot >> 32 << 32 == tag {
                let at = (slot as u32 - 1) as usize;
                if self.entries[at].0 == *id {
                    return Ok(at);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The position of `id`'s entry, added if it has none. The table has room.
    fn find_or_insert(&mut self, hash: u64, id: [u8; N]) -> usize {
        self.probe(hash, &id).unwrap_or_else(|empty| {
            let at = self.entries.len();
            self.entries.push((id, BlockIds::default()));
            self.slots[empty] = hash >> 32 << 32 | (at as u64 + 1);
            at
        })
    }

    fn get(&self, id: &[u8; N]) -> Option<&[u32]> {
        if self.slots.is_empty() {
            return None;
        }
        let at = self.probe(self.hasher.hash_one(id), id).ok()?;
        Some(&self.entries[at].1)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    /// No ids, with the table's and the entries' memory kept.
    fn clear(&mut self) {
        self.slots.fill(0);
        self.entries.clear();
    }

    /// Slots for the entries there are and `n` more, within [`MAX_LOAD`].
    fn slots_for(n: usize) -> usize {
        (n.saturating_mul(MAX_LOAD.1) / MAX_LOAD.0 + 1)
            .next_power_of_two()
            .max(16)
    }

    /// Room for `n` more ids without the table or the entries growing. Growing rebuilds the
    /// table from the entries.
    fn reserve(&mut self, n: usize) {
        let need = Self::slots_for(self.entries.len() + n);
        if need > self.slots.len() {
            // Zeroed memory straight from the allocator: its pages are mapped as slots are
            // first written, so room reserved for a segment that never fills costs little.
            self.slots = vec![0; need];
            let mask = self.mask();
            for (at, (id, _)) in self.entries.iter().enumerate() {
                let hash = self.hasher.hash_one(id);
                let mut i = hash as usize & mask;
                while self.slots[i] != 0 {
                    i = (i + 1) & mask;
                }
                self.slots[i] = hash >> 32 << 32 | (at as u64 + 1);
            }
        }
        self.entries.reserve(n);
    }

    /// How many slots the table has (for the tests of its sizing).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The ids, in first-insert order.
    fn ids(&self) -> impl Iterator<Item = &[u8; N]> {
        self.entries.iter().map(|(id, _)| id)
    }

    /// (id, blocks), in first-insert order.
    fn iter(&self) -> impl Iterator<Item = ([u8; N], &[u32])> {
        self.entries.iter().map(|(id, blocks)| (*id, &blocks[..]))
    }
}

/// Asks the CPU to bring the cache line of `x` in, without waiting for it: tables indexed
/// by hash miss the cache on nearly every access, and a loop that prefetches a few entries
/// ahead overlaps those misses.
// The prefetch intrinsic is unsafe to call, though it touches no memory.
#[allow(unsafe_code)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint with no effect on memory; the pointer is to a live
        // value, and SSE is in every x86-64 target.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Block ids a [`BlockIds`] holds without an allocation.
const INLINE_BLOCK_IDS: usize = 5;

/// The blocks of one span or trace in a live index, in the order they were added. Most ids
/// are in a few blocks (one per sample type and label set of the profile that carried them;
/// 3.4 on average in the serve load bench's real Go profiles), kept inline: an allocation per
/// span id was the largest cost of indexing a block, and freeing them a large part of sealing.
#[derive(Debug, Clone)]
pub(crate) enum BlockIds {
    /// Up to [`INLINE_BLOCK_IDS`] ids (`len` of them).
    Inline {
        len: u8,
        ids: [u32; INLINE_BLOCK_IDS],
    },
    /// More.
    Heap(Vec<u32>),
}

impl Default for BlockIds {
    fn default() -> Self {
        BlockIds::Inline {
            len: 0,
            ids: [0; INLINE_BLOCK_IDS],
        }
    }
}

impl BlockIds {
    /// Adds `id` unless it is the last one already (a block adds each of its ids once, and
    /// blocks are added in order).
    fn push_once(&mut self, id: u32) {
        if self.last() == Some(&id) {
            return;
        }
        match self {
            BlockIds::Inline { len, ids } if (*len as usize) < ids.len() => {
                ids[*len as usize] = id;
                *len += 1;
            }
            BlockIds::Inline { ids, .. } => {
                let mut v = Vec::with_capacity(8);
                v.extend_from_slice(ids);
                v.push(id);
                *self = BlockIds::Heap(v);
            }
            BlockIds::Heap(v) => v.push(id),
        }
    }
}

impl std::ops::Deref for BlockIds {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            BlockIds::Inline { len, ids } => &ids[..*len as usize],
            BlockIds::Heap(v) => v,
        }
    }
}

/// What memory keeps of a sealed segment.
#[derive(Debug, Clone)]
pub(crate) struct SealedSummary {
    /// (first, last) ns of the segment's data; (MAX, MIN) when empty.
    pub time_range: (i64, i64),
    /// (series, first ns, last ns) of the times its profiles were taken (their starts; before
    /// 2026-12 the last one's end), sorted by series.
    pub series: Vec<(u32, i64, i64)>,
    pub blocks: u64,
    pub samples: u64,
    pub spans: u64,
    pub span_bloom: Bloom,
    pub trace_bloom: Bloom,
    /// Size of the index file, in bytes.
    pub index_bytes: u64,
    /// Segments a completed compaction wrote this one to replace.
    pub replaces: Vec<u64>,
    pub compaction_complete: bool,
}

impl SealedSummary {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.ivarint(self.time_range.0);
        out.ivarint(self.time_range.1);
        out.uvarint(self.series.len() as u64);
        for &(id, a, b) in &self.series {
            out.uvarint(id.into());
            out.ivarint(a);
            out.ivarint(b);
        }
        for n in [self.blocks, self.samples, self.spans] {
            out.uvarint(n);
        }
        for bloom in [&self.span_bloom, &self.trace_bloom] {
            out.uvarint(bloom.bits.len() as u64);
            for w in &bloom.bits {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out.uvarint(self.replaces.len() as u64);
        for &r in &self.replaces {
            out.uvarint(r);
        }
        out.push(u8::from(self.compaction_complete));
        out
    }

    fn decode(b: &[u8], index_bytes: u64) -> Result<SealedSummary, CodecError> {
        let mut g = Get::new(b);
        let time_range = (g.ivarint()?, g.ivarint()?);
        let n = g.count()?;
        let mut series = Vec::with_capacity(n);
        for _ in 0..n {
            series.push((g.u32()?, g.ivarint()?, g.ivarint()?));
        }
        let (blocks, samples, spans) = (g.uvarint()?, g.uvarint()?, g.uvarint()?);
        let mut blooms = Vec::new();
        for _ in 0..2 {
            let words = g.count()?;
            let mut bits = Vec::with_capacity(words);
            for _ in 0..words {
                bits.push(u64::from_le_bytes(g.fixed::<8>()?));
            }
            if bits.is_empty() || bits.len() % BLOCK_WORDS != 0 {
                return Err(CodecError(format!(
                    "a Bloom filter of {} words, not whole blocks of {BLOCK_WORDS}",
                    bits.len()
                )));
            }
            blooms.push(Bloom { bits });
        }
        let n = g.count()?;
        let replaces = (0..n).map(|_| g.uvarint()).collect::<Result<_, _>>()?;
        let compaction_complete = g.u8()? != 0;
        let trace_bloom = blooms.pop().expect("two blooms");
        let span_bloom = blooms.pop().expect("two blooms");
        Ok(SealedSummary {
            time_range,
            series,
            blocks,
            samples,
            spans,
            span_bloom,
            trace_bloom,
            index_bytes,
            replaces,
            compaction_complete,
        })
    }
}

/// Bits an id sets in a [`Bloom`] filter.
const PROBES: usize = 4;
/// 64-bit words per Bloom block: an id's probes all fall in one 512-bit block, one cache line.
const BLOCK_WORDS: usize = 8;

/// A blocked Bloom filter over ids: about 10 bits and 4 probes per id (≈1.3 % false
/// positives). Each id picks one 512-bit block and sets 4 bits in it: one cache miss per id
/// instead of one per probe, and no division (sealing inserts every id of a segment: with 4
/// probes over the whole filter, inserting took 29 % of a seal).
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    /// Whole blocks of [`BLOCK_WORDS`] words.
    bits: Vec<u64>,
}

impl Bloom {
    fn with_capacity(n: usize) -> Self {
        let blocks = (n * 10).div_ceil(64 * BLOCK_WORDS).max(1);
        Bloom {
            bits: vec![0; blocks * BLOCK_WORDS],
        }
    }

    /// The block's first word, and the bit (0..512) of each probe in it.
    fn probes(&self, id: &[u8]) -> (usize, [usize; PROBES]) {
        let mut h = [0u8; 8];
        let mut h2 = [0u8; 8];
        for (i, b) in id.iter().enumerate() {
            if i < 8 {
                h[i] ^= b
            } else {
                h2[i - 8] ^= b
            }
        }
        let a = splitmix(u64::from_le_bytes(h) ^ splitmix(u64::from_le_bytes(h2)));
        let b = splitmix(a ^ 0x2545_f491_4f6c_dd1d);
        let blocks = (self.bits.len() / BLOCK_WORDS) as u64;
        // `a` scaled to 0..blocks: a multiply instead of a division.
        let block = ((u128::from(a) * u128::from(blocks)) >> 64) as usize;
        let bit = |i: usize| ((b >> (9 * i)) & 511) as usize;
        (block * BLOCK_WORDS, [bit(0), bit(1), bit(2), bit(3)])
    }

    #[cfg(test)]
    fn insert(&mut self, id: &[u8]) {
        self.insert_all([id]);
    }

    /// Inserts every id, a few at a time: the blocks of the next ones are prefetched before
    /// the bits of the first are set (each block is a cache miss: a third of a seal).
    fn insert_all<'a>(&mut self, ids: impl IntoIterator<Item = &'a [u8]>) {
        const AT_ONCE: usize = 16;
        let mut ids = ids.into_iter();
        loop {
            let mut probes = [(0, [0; PROBES]); AT_ONCE];
            let mut n = 0;
            for id in ids.by_ref().take(AT_ONCE) {
                probes[n] = self.probes(id);
                prefetch(&self.bits[probes[n].0]);
                n += 1;
            }
            if n == 0 {
                return;
            }
            for &(first, bits) in &probes[..n] {
                let block = &mut self.bits[first..first + BLOCK_WORDS];
                for p in bits {
                    block[p / 64] |= 1 << (p % 64);
                }
            }
        }
    }

    /// False when the id is certainly absent.
    pub fn may_contain(&self, id: &[u8]) -> bool {
        let (first, bits) = self.probes(id);
        let block = &self.bits[first..first + BLOCK_WORDS];
        bits.iter().all(|&p| block[p / 64] & (1 << (p % 64)) != 0)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Version 3: the body in three sections (core, traces, spans); version 4: the core's span
/// map in fixed-width fields ([`FrozenIds::encode_fixed`]); version 5: blocked Bloom filters
/// ([`Bloom`]); version 6: a block's flag that it shares the links of the block before
/// ([`BlockMeta::shares_links`]). An index file of an older version reads as
/// missing-with-a-reason, and the segment is replayed once.
const INDEX_MAGIC: &[u8; 8] = b"SPANIDX6";

/// Whether `magic` is that of an index file of an earlier version (`SPANIDX1` to the one
/// before [`INDEX_MAGIC`]).
fn is_older_index(magic: &[u8; 8]) -> bool {
    let (prefix, current) = INDEX_MAGIC.split_at(7);
    magic.starts_with(prefix) && (b'1'..current[0]).contains(&magic[7])
}

/// Path of a segment's index file.
pub(crate) fn index_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:016x}.idx"))
}

/// A file written in 1 MiB pieces, each handed to the disk as it is written: an index is tens
/// of MiB, and flushed all at once by the final fsync it held up the log's fdatasync (which
/// acknowledgements wait for) by 15-40 ms on ext4.
struct Pieces {
    f: std::fs::File,
    at: usize,
}

impl Pieces {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        for piece in bytes.chunks(1 << 20) {
            self.f.write_all(piece)?;
            start_writeback(&self.f, self.at, piece.len());
            self.at += piece.len();
        }
        Ok(())
    }

    /// One section that `encode` writes as it goes ([`Out`]): its length is written once
    /// known, over the zeros that kept its place.
    fn streamed_section(
        &mut self,
        encode: impl FnOnce(&mut Out) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let start = self.at;
        self.write(&[0; 8])?;
        let mut crc = flate2::Crc::new();
        {
            let mut spill = |bytes: &[u8]| {
                crc.update(bytes);
                self.write(bytes)
            };
            let mut out = Out::new(&mut spill);
            encode(&mut out)?;
            out.finish()?;
        }
        let len = (self.at - start - 8) as u64;
        self.write(&crc.sum().to_le_bytes())?;
        self.f.write_all_at(&len.to_le_bytes(), start as u64)
    }

    /// One section: length, bytes, checksum.
    fn section(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut crc = flate2::Crc::new();
        crc.update(bytes);
        self.write(&(bytes.len() as u64).to_le_bytes())?;
        self.write(bytes)?;
        self.write(&crc.sum().to_le_bytes())
    }
}

/// Writes a sealed segment's index durably (temporary file, fsync, rename, fsync the
/// directory) and returns its summary. The file holds, each with its own checksum: the
/// summary (all that opening the store reads), the core (blocks and the span map: all that a
/// span's flame graph needs, so a cold one reads only that), the trace map and the spans
/// (read when a query first needs them).
pub(crate) fn write_index(dir: &Path, index: &SegmentIndex) -> std::io::Result<SealedSummary> {
    std::fs::create_dir_all(dir)?;
    let mut summary = index.summary(0);
    let summary_bytes = summary.encode();
    let path = index_path(dir, index.segment);
    let tmp = path.with_extension("idx.tmp");
    // Written as encoded, a MiB at a time ([`Out`]), not encoded whole and then written.
    let mut file = Pieces {
        f: std::fs::File::create(&tmp)?,
        at: 0,
    };
    file.write(INDEX_MAGIC)?;
    file.section(&summary_bytes)?;
    file.streamed_section(|out| index.encode_core(&index.span_entries(), out))?;
    file.streamed_section(|out| encode_traces(&index.trace_entries(), out))?;
    let mut spans = Vec::new();
    encode_spans(index.spans().iter(), &mut spans);
    file.section(&spans)?;
    file.f.sync_all()?;
    drop(file.f);
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    summary.index_bytes = file.at as u64;
    Ok(summary)
}

/// Starts writing `len` bytes of `f` at `offset` to the disk, without waiting (Linux
/// `sync_file_range`; elsewhere nothing: the final fsync does it all).
// sync_file_range has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn start_writeback(f: &std::fs::File, offset: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the duration of the call; the call only reads
        // its integer arguments. A failure is harmless: the caller's fsync follows.
        unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, offset, len);
}

/// Moves past one section (length, bytes, checksum) without reading it, checking that it
/// fits in the file.
fn skip_section(f: &mut std::fs::File, what: &str) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| format!("{what}: {e}"))?;
    let len = u64::from_le_bytes(len);
    let at = f.stream_position().map_err(|e| e.to_string())?;
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    if len.saturating_add(4) > size.saturating_sub(at) {
        return Err(format!("{what}: length {len} is past the end of the file"));
    }
    f.seek(SeekFrom::Current(len as i64 + 4))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(())
}

/// Reads one checksummed section at `pos` of an index file.
fn read_section(f: &mut std::fs::File, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| format!("{what}: {e}"))?;
    let len = u64::from_le_bytes(len);
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    if len > size {
        return Err(format!("{what}: length {len} is past the end of the file"));
    }
    let mut bytes = vec![0u8; len as usize];
    f.read_exact(&mut bytes)
        .map_err(|e| format!("{what}: {e}"))?;
    let mut sum = [0u8; 4];
    f.read_exact(&mut sum).map_err(|e| format!("{what}: {e}"))?;
    let mut crc = flate2::Crc::new();
    crc.update(&bytes);
    if crc.sum().to_le_bytes() != sum {
        return Err(format!("{what}: checksum mismatch"));
    }
    Ok(bytes)
}

/// Opens an index file and checks its magic; `Ok(None)` when there is none.
fn open_index(dir: &Path, segment: u64) -> Result<Option<(std::fs::File, PathBuf)>, String> {
    use std::io::Read;
    let path = index_path(dir, segment);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut magic = [0u8; 8];
    if f.read_exact(&mut magic).is_ok() && is_older_index(&magic) {
        // Written by an earlier version: rebuilt from its segment like a missing one, and
        // counted apart from damage ([`super::OpenReport::rebuilt_indexes`]).
        return Ok(None);
    }
    if &magic != INDEX_MAGIC {
        return Err(format!(
            "{}: not a segment index (or one of a newer version); rebuilding it from the segment",
            path.display()
        ));
    }
    Ok(Some((f, path)))
}

/// Reads only a segment index's summary (what opening the store needs).
pub(crate) fn read_summary(dir: &Path, segment: u64) -> Result<Option<SealedSummary>, String> {
    let Some((mut f, path)) = open_index(dir, segment)? else {
        return Ok(None);
    };
    let damaged =
        |why: String| format!("{}: {why}; rebuilding it from the segment", path.display());
    let bytes = read_section(&mut f, "summary").map_err(damaged)?;
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    SealedSummary::decode(&bytes, size)
        .map(Some)
        .map_err(|e| damaged(e.to_string()))
}

/// Reads a segment's whole index; an error names the file when it is missing or damaged.
pub(crate) fn read_index(dir: &Path, segment: u64) -> Result<Option<(SegmentIndex, u64)>, String> {
    let Some((mut f, path)) = open_index(dir, segment)? else {
        return Ok(None);
    };
    use std::io::{Seek, SeekFrom};
    let damaged = |why: String| format!("{}: {why}", path.display());
    let io = |e: std::io::Error| damaged(e.to_string());
    skip_section(&mut f, "summary").map_err(damaged)?;
    let core = read_section(&mut f, "core").map_err(damaged)?;
    let mut index = SegmentIndex::decode(&core).map_err(|e| damaged(e.to_string()))?;
    if index.segment != segment {
        return Err(damaged("it belongs to another segment".into()));
    }
    let traces_at = f.stream_position().map_err(io)?;
    skip_section(&mut f, "traces").map_err(damaged)?;
    let spans_at = f.stream_position().map_err(io)?;
    skip_section(&mut f, "spans").map_err(damaged)?;
    let end = f.stream_position().map_err(io)?;
    let size = f.seek(SeekFrom::End(0)).map_err(io)?;
    if end != size {
        return Err(damaged(format!(
            "{} bytes after the last section",
            size - end
        )));
    }
    index.lazy = Some(Arc::new(LazySections {
        path,
        traces_at,
        spans_at,
    }));
    Ok(Some((index, size)))
}

/// Recently used sealed indexes, at most `capacity`.
#[derive(Debug)]
pub(crate) struct IndexCache {
    capacity: usize,
    entries: Mutex<Vec<(u64, Arc<SegmentIndex>)>>,
}

impl IndexCache {
    pub fn new(capacity: usize) -> Self {
        IndexCache {
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The index of sealed segment `segment`, loaded from `dir` on a miss.
    pub fn get(&self, dir: &Path, segment: u64) -> Result<Arc<SegmentIndex>, String> {
        self.get_if_present(dir, segment)?
            .ok_or_else(|| format!("the index of segment {segment} is missing"))
    }

    /// [`IndexCache::get`], `None` when the index file is not there (its segment deleted).
    pub fn get_if_present(
        &self,
        dir: &Path,
        segment: u64,
    ) -> Result<Option<Arc<SegmentIndex>>, String> {
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        if let Some(i) = e.iter().position(|(id, _)| *id == segment) {
            let hit = e.remove(i);
            let index = Arc::clone(&hit.1);
            e.insert(0, hit);
            return Ok(Some(index));
        }
        drop(e);
        let Some((index, _)) = read_index(dir, segment)? else {
            return Ok(None);
        };
        let index = Arc::new(index);
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        e.insert(0, (segment, Arc::clone(&index)));
        e.truncate(self.capacity);
        Ok(Some(index))
    }

    pub fn forget(&self, segment: u64) {
        self.entries
            .lock()
            .expect("index cache lock poisoned")
            .retain(|(id, _)| *id != segment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spread-out span id per `k`.
    fn id(k: u64) -> [u8; 8] {
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

    #[test]
    fn id_blocks_find_every_id_through_growth_and_keep_insert_order() {
        let mut m = IdBlocks::<8>::default();
        // No reserve: the table grows (rehashing from the entries) many times.
        for block in 0..3u32 {
            for k in 0..20_000u64 {
                if k % 3 != 2 || block == 0 {
                    m.push_once(id(k), block);
                    m.push_once(id(k), block);
                }
            }
        }
        assert_eq!(m.len(), 20_000);
        for k in 0..20_000u64 {
            let want: &[u32] = if k % 3 == 2 { &[0] } else { &[0, 1, 2] };
            assert_eq!(m.get(&id(k)), Some(want), "id {k}");
        }
        assert_eq!(m.get(&id(20_000)), None);
        let order: Vec<[u8; 8]> = m.ids().copied().collect();
        assert_eq!(order, (0..20_000u64).map(id).collect::<Vec<_>>());
        assert!(m.iter().all(|(k, blocks)| m.get(&k) == Some(blocks)));
        // Reserving keeps what is there findable.
        m.reserve(100_000);
        assert_eq!(m.get(&id(19_997)), Some(&[0][..]));
        assert_eq!(m.get(&id(19_998)), Some(&[0, 1, 2][..]));
    }

    /// Ids that are not random (a producer counting them up, or ids alike but for their
    /// high bytes) are found as well, in a table as full as it gets, and an absent one is not.
    #[test]
    fn id_blocks_find_ids_that_are_not_random() {
        let mut m = IdBlocks::<8>::default();
        let counted = (0..5_000u64).map(u64::to_le_bytes);
        let high = (0..5_000u64).map(|k| (k << 48).to_le_bytes());
        m.push_all(counted.clone().chain(high.clone()), 7);
        assert_eq!(m.len(), 9_999, "0 is in both runs");
        let full = m.len() as f64 / m.capacity() as f64;
        assert!(full > 0.5 && full <= 0.7, "{full}");
        assert!(counted.chain(high).all(|k| m.get(&k) == Some(&[7][..])));
        assert_eq!(m.get(&u64::MAX.to_le_bytes()), None);
    }

    #[test]
    fn block_ids_keep_order_skip_repeats_and_spill_when_full() {
        let mut ids = BlockIds::default();
        assert!(ids.is_empty());
        let mut want = Vec::new();
        for id in 1..=INLINE_BLOCK_IDS as u32 {
            ids.push_once(id);
            ids.push_once(id);
            want.push(id);
        }
        assert_eq!(&ids[..], &want[..]);
        assert!(matches!(ids, BlockIds::Inline { .. }));
        for id in [90, 90, 91] {
            ids.push_once(id);
        }
        want.extend([90, 91]);
        assert_eq!(&ids[..], &want[..]);
        assert!(matches!(ids, BlockIds::Heap(_)));
    }

    #[test]
    fn fixed_width_span_maps_round_trip_and_refuse_nonsense() {
        let (a, b, c) = ([1u8; 8], [2u8; 8], [3u8; 8]);
        let entries: Vec<([u8; 8], &[u32])> = vec![(a, &[0, 2]), (b, &[]), (c, &[1])];
        let out = in_memory(|out| FrozenIds::encode_fixed(&entries, out));
        let x = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 3).unwrap();
        assert_eq!(x.iter().map(|(k, v)| (*k, v)).collect::<Vec<_>>(), entries);
        assert_eq!(
            (x.get(&a), x.get(&c), x.get(&[9; 8])),
            (&[0, 2][..], &[1][..], &[][..])
        );
        // A block id past the segment's blocks.
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 2).unwrap_err();
        assert!(err.to_string().contains("block 2 out of range"), "{err}");
        // Ids out of order.
        let out = in_memory(|out| FrozenIds::encode_fixed(&[(b, &[0][..]), (a, &[0][..])], out));
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 1).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
        // Cut short.
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out[..out.len() - 1]), 1);
        assert!(err.is_err());
    }

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::with_capacity(10_000);
        for i in 0u64..10_000 {
            b.insert(&i.to_be_bytes());
        }
        assert!((0u64..10_000).all(|i| b.may_contain(&i.to_be_bytes())));
        let fp = (10_000u64..110_000)
            .filter(|i| b.may_contain(&i.to_be_bytes()))
            .count();
        assert!(fp < 2_000, "{fp} false positives in 100000");
    }

    /// A block of one sample of series `series` linked to `link`, at record offset 24 of
    /// segment `segment` (its position).
    fn linked_block(segment: u64, series: u32, link: ([u8; 16], [u8; 8])) -> (RecordPos, Block) {
        let pos = RecordPos {
            segment,
            offset: 24,
            len: 100,
        };
        let block = Block {
            series,
            time_ns: 5,
            duration_ns: 10,
            link_table: vec![link],
            nodes: vec![1],
            values: vec![3],
            links: vec![1],
            ..Default::default()
        };
        (pos, block)
    }

    /// Sections of several spills are written whole: the file holds the bytes encoding them
    /// in memory gives, each with its length and checksum, and reads back.
    #[test]
    fn sections_of_several_spills_are_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let trace = |k: u64| {
            let mut t = [1u8; 16];
            t[..8].copy_from_slice(&k.to_le_bytes());
            t
        };
        let mut x = SegmentIndex::new(9);
        for k in 0..120_000u64 {
            let (pos, block) = linked_block(9, 0, (trace(k), id(k)));
            x.index_block(pos, 0, 10, &block, None);
        }
        let [core, traces, spans] = x.encode();
        assert!(core.len() > 2 * SPILL_BYTES && traces.len() > 2 * SPILL_BYTES);
        write_index(dir.path(), &x).unwrap();
        let file = std::fs::read(index_path(dir.path(), 9)).unwrap();
        let mut sections = Vec::new();
        let mut at = INDEX_MAGIC.len();
        while at < file.len() {
            let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
            let bytes = &file[at + 8..at + 8 + len];
            let mut crc = flate2::Crc::new();
            crc.update(bytes);
            assert_eq!(file[at + 8 + len..at + 12 + len], crc.sum().to_le_bytes());
            sections.push(bytes.to_vec());
            at += 12 + len;
        }
        assert_eq!(sections.len(), 4);
        assert!(sections[1] == core && sections[2] == traces && sections[3] == spans);
        let (y, _) = read_index(dir.path(), 9).unwrap().unwrap();
        for k in [0, 65_537, 119_999] {
            assert_eq!(y.span_blocks(&id(k)).collect::<Vec<_>>(), [k as u32]);
            assert_eq!(y.trace_blocks(&trace(k)).collect::<Vec<_>>(), [k as u32]);
        }
    }

    /// The next sample type of a profile (a block with the links of the block before it, in
    /// the same record) is listed once under its spans and traces, found through the block
    /// listed, and stays so in the index file; a block of other links, or of another record,
    /// is listed on its own.
    #[test]
    fn blocks_of_the_same_links_are_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let block = |series: u32, span: u8| linked_block(3, series, ([1; 16], [span; 8])).1;
        let (pos, _) = linked_block(3, 0, ([1; 16], [2; 8]));
        let (cpu, count, other) = (block(0, 2), block(1, 2), block(0, 4));
        let mut x = SegmentIndex::new(3);
        x.index_block(pos, 0, 10, &cpu, None);
        x.index_block(pos, 10, 10, &count, Some(&cpu));
        x.index_block(pos, 20, 10, &other, Some(&count));
        // The same links as the block before, but that block is of another record.
        x.index_block(pos, 30, 10, &block(1, 4), None);
        let sharing =
            |x: &SegmentIndex| x.blocks.iter().map(|m| m.shares_links).collect::<Vec<_>>();
        let found = |x: &SegmentIndex| {
            (
                x.span_blocks(&[2; 8]).collect::<Vec<_>>(),
                x.span_blocks(&[4; 8]).collect::<Vec<_>>(),
                x.trace_blocks(&[1; 16]).collect::<Vec<_>>(),
            )
        };
        assert_eq!(sharing(&x), [false, true, false, false]);
        assert_eq!(x.by_span.get(&[2; 8]).unwrap(), &[0]);
        assert_eq!(found(&x), (vec![0, 1], vec![2, 3], vec![0, 1, 2, 3]));
        write_index(dir.path(), &x).unwrap();
        let (y, _) = read_index(dir.path(), 3).unwrap().unwrap();
        assert_eq!(sharing(&y), sharing(&x));
        assert_eq!(found(&y), found(&x));
        // A first block cannot share: an index that says so is refused.
        let mut bad = SegmentIndex::new(4);
        bad.index_block(pos, 0, 10, &cpu, None);
        bad.blocks[0].shares_links = true;
        let [core, ..] = bad.encode();
        let e = SegmentIndex::decode(&core).unwrap_err();
        assert!(e.to_string().contains("the first block shares"), "{e}");
    }

    #[test]
    fn index_files_round_trip_and_damage_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut x = SegmentIndex::new(7);
        let block = Block {
            series: 1,
            time_ns: 5,
            duration_ns: 10,
            link_table: vec![([1; 16], [2; 8])],
            nodes: vec![1],
            values: vec![3],
            links: vec![1],
            ..Default::default()
        };
        x.index_block(
            RecordPos {
                segment: 7,
                offset: 24,
                len: 100,
            },
            5,
            20,
            &block,
            None,
        );
        x.replaces = vec![3, 4];
        x.compaction_complete = true;
        x.spans_mut().insert(crate::spans::SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            name: "GET /".into(),
            service: "svc".into(),
            start_ns: 5,
            end_ns: 9,
            ..Default::default()
        });
        let summary = write_index(dir.path(), &x).unwrap();
        let read = read_summary(dir.path(), 7).unwrap().unwrap();
        assert_eq!(
            (
                read.blocks,
                read.replaces.clone(),
                read.compaction_complete,
                read.index_bytes
            ),
            (1, vec![3, 4], true, summary.index_bytes)
        );
        assert!(read.span_bloom.may_contain(&[2; 8]) && read.trace_bloom.may_contain(&[1; 16]));
        let (y, _) = read_index(dir.path(), 7).unwrap().unwrap();
        assert_eq!(
            (
                y.blocks.len(),
                y.span_count(),
                y.trace_count(),
                y.replaces.clone(),
                y.compaction_complete
            ),
            (1, 1, 1, vec![3, 4], true)
        );
        assert_eq!(
            (
                y.span_blocks(&[2; 8]).collect::<Vec<_>>(),
                y.trace_blocks(&[1; 16]).collect::<Vec<_>>()
            ),
            (vec![0], vec![0])
        );
        assert!(
            y.span_blocks(&[3; 8]).next().is_none() && y.trace_blocks(&[0; 16]).next().is_none()
        );
        assert!(read_index(dir.path(), 8).unwrap().is_none());
        // The lazily read sections: read when first asked for.
        assert_eq!(
            y.spans().get(&[2; 8]).map(|s| s.name.as_str()),
            Some("GET /")
        );
        let p = index_path(dir.path(), 7);
        let good = std::fs::read(&p).unwrap();
        let n = good.len();
        // Inside the spans (the last section), just before its checksum: the core still
        // reads, and the spans come out empty (logged) instead of wrong.
        let mut bytes = good.clone();
        bytes[n - 6] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let (z, _) = read_index(dir.path(), 7).unwrap().unwrap();
        assert_eq!(z.span_blocks(&[2; 8]).collect::<Vec<_>>(), [0]);
        assert!(z.spans().is_empty());
        // Inside the core (after the magic and the summary section): the index is refused.
        let summary_len = u64::from_le_bytes(good[8..16].try_into().unwrap()) as usize;
        let core = 8 + 8 + summary_len + 4;
        let mut bytes = good.clone();
        bytes[core + 8] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        assert!(read_index(dir.path(), 7)
            .unwrap_err()
            .contains("core: checksum mismatch"));
        // Cut short: refused too.
        std::fs::write(&p, &good[..n - 3]).unwrap();
        assert!(read_index(dir.path(), 7)
            .unwrap_err()
            .contains("past the end of the file"));
    }
}
