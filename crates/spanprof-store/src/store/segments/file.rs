//! A sealed segment's index file: its sections (summary, core, traces) written streamed and
//! read back whole or lazily, and the summary kept for every sealed segment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bloom::{Bloom, BLOCK_WORDS};
use super::id_map::FrozenIds;
#[cfg(test)]
use super::out::in_memory;
use super::out::Out;
use super::BlockMeta;
use super::SegmentIndex;
use crate::codec::{CodecError, Get, Put};
use crate::log::RecordPos;
use crate::spans::encode_spans;

impl SegmentIndex {
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

    pub(super) fn decode(b: &[u8]) -> Result<SegmentIndex, CodecError> {
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

/// `n` and an eighth more: room for a segment a little bigger than the one it is sized from.
pub(super) fn with_headroom(n: usize) -> usize {
    n + n / 8
}

/// The sections of an index file read on first use: the trace map and the spans.
#[derive(Debug)]
pub(super) struct LazySections {
    path: PathBuf,
    pub(super) traces_at: u64,
    pub(super) spans_at: u64,
}

impl LazySections {
    /// The checksummed section at byte `at` of the file.
    pub(super) fn read(&self, at: u64, what: &str) -> Result<Vec<u8>, String> {
        use std::io::{Seek, SeekFrom};
        let damaged = |why: String| format!("{}: {why}", self.path.display());
        let mut f = std::fs::File::open(&self.path).map_err(|e| damaged(e.to_string()))?;
        f.seek(SeekFrom::Start(at))
            .map_err(|e| damaged(e.to_string()))?;
        read_section(&mut f, what).map_err(damaged)
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

    pub(super) fn decode(b: &[u8], index_bytes: u64) -> Result<SealedSummary, CodecError> {
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

/// A segment's index file that cannot be used: the store rebuilds it from its segment, or a
/// query reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The file cannot be read, or is damaged: its path and why.
    #[error("{}: {reason}", path.display())]
    Damaged {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A query needed the index of a segment that has none (deleted meanwhile).
    #[error("the index of segment {0} is missing")]
    Missing(u64),
}

/// Opens an index file and checks its magic; `Ok(None)` when there is none.
fn open_index(dir: &Path, segment: u64) -> Result<Option<(std::fs::File, PathBuf)>, IndexError> {
    use std::io::Read;
    let path = index_path(dir, segment);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(IndexError::Damaged {
                path,
                reason: e.to_string(),
            })
        }
    };
    let mut magic = [0u8; 8];
    if f.read_exact(&mut magic).is_ok() && is_older_index(&magic) {
        // Written by an earlier version: rebuilt from its segment like a missing one, and
        // counted apart from damage ([`crate::store::OpenReport::rebuilt_indexes`]).
        return Ok(None);
    }
    if &magic != INDEX_MAGIC {
        return Err(IndexError::Damaged {
            path,
            reason: "not a segment index (or one of a newer version); rebuilding it from the \
                     segment"
                .into(),
        });
    }
    Ok(Some((f, path)))
}

/// Reads only a segment index's summary (what opening the store needs).
pub(crate) fn read_summary(dir: &Path, segment: u64) -> Result<Option<SealedSummary>, IndexError> {
    let Some((mut f, path)) = open_index(dir, segment)? else {
        return Ok(None);
    };
    let damaged = |why: String| IndexError::Damaged {
        path: path.clone(),
        reason: format!("{why}; rebuilding it from the segment"),
    };
    let bytes = read_section(&mut f, "summary").map_err(damaged)?;
    let size = f
        .metadata()
        .map_err(|e| IndexError::Damaged {
            path: path.clone(),
            reason: e.to_string(),
        })?
        .len();
    SealedSummary::decode(&bytes, size)
        .map(Some)
        .map_err(|e| damaged(e.to_string()))
}

/// Reads a segment's whole index; an error names the file when it is missing or damaged.
pub(crate) fn read_index(
    dir: &Path,
    segment: u64,
) -> Result<Option<(SegmentIndex, u64)>, IndexError> {
    let Some((mut f, path)) = open_index(dir, segment)? else {
        return Ok(None);
    };
    use std::io::{Seek, SeekFrom};
    let damaged = |reason: String| IndexError::Damaged {
        path: path.clone(),
        reason,
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Block;
    use crate::store::segments::out::SPILL_BYTES;
    use crate::store::segments::tests::id;

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
            .to_string()
            .contains("core: checksum mismatch"));
        // Cut short: refused too.
        std::fs::write(&p, &good[..n - 3]).unwrap();
        assert!(read_index(dir.path(), 7)
            .unwrap_err()
            .to_string()
            .contains("past the end of the file"));
    }
}
