//! Per-segment indexes. The active segment's index lives in memory; when a segment is sealed
//! its index is written next to it (`DIR/index/{id:016x}.idx`) and memory keeps only a
//! [`SealedSummary`] — time range, series present, counts, and Bloom filters of the span and
//! trace ids — so resident memory does not grow with the amount stored. Queries load the
//! sealed indexes they need through a small LRU cache; opening replays only the active segment.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;

use super::state::BlockMeta;
use crate::block::Block;
use crate::codec::{CodecError, Get, Put};
use crate::log::RecordPos;
use crate::spans::{decode_spans, encode_spans, SpanIndex};

/// Everything one segment holds, indexed.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentIndex {
    pub segment: u64,
    pub blocks: Vec<BlockMeta>,
    /// Span id → blocks holding samples of that span.
    pub by_span: HashMap<[u8; 8], Vec<u32>>,
    /// Trace id → blocks holding samples linked to that trace.
    pub by_trace: HashMap<[u8; 16], Vec<u32>>,
    pub spans: SpanIndex,
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

    /// Adds a block to the indexes.
    pub fn index_block(&mut self, pos: RecordPos, start: u32, len: u32, block: &Block) {
        let id = self.blocks.len() as u32;
        self.blocks.push(BlockMeta {
            pos,
            start,
            len,
            series: block.series,
            time_ns: block.time_ns,
            duration_ns: block.duration_ns,
            samples: block.nodes.len() as u32,
        });
        for (trace, span) in &block.link_table {
            push_once(self.by_span.entry(*span).or_default(), id);
            if *trace != [0; 16] {
                push_once(self.by_trace.entry(*trace).or_default(), id);
            }
        }
    }

    /// Time range of the segment's data (blocks and spans), in ns since the epoch.
    pub fn time_range(&self) -> (i64, i64) {
        let blocks = self
            .blocks
            .iter()
            .map(|b| (b.time_ns, b.time_ns.saturating_add(b.duration_ns)));
        let spans = self
            .spans
            .iter()
            .map(|s| (s.start_ns as i64, s.end_ns as i64));
        blocks
            .chain(spans)
            .fold((i64::MAX, i64::MIN), |(a, b), (s, e)| (a.min(s), b.max(e)))
    }

    /// The summary kept in memory once the segment is sealed.
    pub fn summary(&self, index_bytes: u64) -> SealedSummary {
        let mut span_bloom = Bloom::with_capacity(self.by_span.len() + self.spans.len());
        let mut trace_bloom = Bloom::with_capacity(self.by_trace.len() + self.spans.len());
        for id in self.by_span.keys() {
            span_bloom.insert(&id[..]);
        }
        for id in self.by_trace.keys() {
            trace_bloom.insert(&id[..]);
        }
        for s in self.spans.iter() {
            span_bloom.insert(&s.span_id[..]);
            trace_bloom.insert(&s.trace_id[..]);
        }
        let mut series: HashMap<u32, (i64, i64)> = HashMap::new();
        for b in &self.blocks {
            let (s, e) = (b.time_ns, b.time_ns.saturating_add(b.duration_ns));
            let r = series.entry(b.series).or_insert((s, e));
            *r = (r.0.min(s), r.1.max(e));
        }
        let mut series: Vec<(u32, i64, i64)> =
            series.into_iter().map(|(k, (s, e))| (k, s, e)).collect();
        series.sort_unstable();
        SealedSummary {
            time_range: self.time_range(),
            series,
            blocks: self.blocks.len() as u64,
            samples: self.blocks.iter().map(|b| u64::from(b.samples)).sum(),
            spans: self.spans.len() as u64,
            span_bloom,
            trace_bloom,
            index_bytes,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.uvarint(self.segment);
        out.uvarint(self.replaces.len() as u64);
        for &r in &self.replaces {
            out.uvarint(r);
        }
        out.push(u8::from(self.compaction_complete));
        out.uvarint(self.blocks.len() as u64);
        for b in &self.blocks {
            out.uvarint(b.pos.segment);
            out.uvarint(b.pos.offset);
            out.uvarint(b.pos.len.into());
            out.uvarint(b.start.into());
            out.uvarint(b.len.into());
            out.uvarint(b.series.into());
            out.ivarint(b.time_ns);
            out.ivarint(b.duration_ns);
            out.uvarint(b.samples.into());
        }
        let mut spans: Vec<(&[u8; 8], &Vec<u32>)> = self.by_span.iter().collect();
        spans.sort_unstable();
        out.uvarint(spans.len() as u64);
        for (id, blocks) in spans {
            out.extend_from_slice(id);
            out.uvarint(blocks.len() as u64);
            for &b in blocks {
                out.uvarint(b.into());
            }
        }
        let mut traces: Vec<(&[u8; 16], &Vec<u32>)> = self.by_trace.iter().collect();
        traces.sort_unstable();
        out.uvarint(traces.len() as u64);
        for (id, blocks) in traces {
            out.extend_from_slice(id);
            out.uvarint(blocks.len() as u64);
            for &b in blocks {
                out.uvarint(b.into());
            }
        }
        let spans: Vec<_> = self.spans.iter().cloned().collect();
        let mut sb = Vec::new();
        encode_spans(&spans, &mut sb);
        out.bytes(&sb);
        out
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
            });
        }
        let block_ids = |g: &mut Get| -> Result<Vec<u32>, CodecError> {
            let k = g.count()?;
            (0..k)
                .map(|_| {
                    g.u32().and_then(|v| {
                        if (v as usize) < n {
                            Ok(v)
                        } else {
                            Err(CodecError(format!("block {v} out of range")))
                        }
                    })
                })
                .collect()
        };
        let m = g.count()?;
        x.by_span.reserve(m);
        for _ in 0..m {
            let id = g.fixed::<8>()?;
            x.by_span.insert(id, block_ids(&mut g)?);
        }
        let m = g.count()?;
        x.by_trace.reserve(m);
        for _ in 0..m {
            let id = g.fixed::<16>()?;
            x.by_trace.insert(id, block_ids(&mut g)?);
        }
        for s in decode_spans(g.bytes()?).map_err(|e| CodecError(e.to_string()))? {
            x.spans.insert(s);
        }
        if !g.done() {
            return Err(CodecError("trailing bytes after the segment index".into()));
        }
        Ok(x)
    }
}

fn push_once(ids: &mut Vec<u32>, id: u32) {
    if ids.last() != Some(&id) {
        ids.push(id);
    }
}

/// What memory keeps of a sealed segment.
#[derive(Debug, Clone)]
pub(crate) struct SealedSummary {
    /// (first, last) ns of the segment's data; (MAX, MIN) when empty.
    pub time_range: (i64, i64),
    /// (series, first ns, last ns), sorted by series.
    pub series: Vec<(u32, i64, i64)>,
    pub blocks: u64,
    pub samples: u64,
    pub spans: u64,
    pub span_bloom: Bloom,
    pub trace_bloom: Bloom,
    /// Size of the index file, in bytes.
    pub index_bytes: u64,
}

/// A Bloom filter over ids: about 10 bits and 4 probes per id (≈1 % false positives).
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    bits: Vec<u64>,
}

impl Bloom {
    fn with_capacity(n: usize) -> Self {
        Bloom {
            bits: vec![0; (n * 10).div_ceil(64).max(1)],
        }
    }

    fn probes(&self, id: &[u8]) -> impl Iterator<Item = usize> + '_ {
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
        let b = splitmix(a ^ 0x2545_f491_4f6c_dd1d) | 1;
        let m = (self.bits.len() * 64) as u64;
        (0..4u64).map(move |i| (a.wrapping_add(i.wrapping_mul(b)) % m) as usize)
    }

    fn insert(&mut self, id: &[u8]) {
        let probes: Vec<usize> = self.probes(id).collect();
        for p in probes {
            self.bits[p / 64] |= 1 << (p % 64);
        }
    }

    /// False when the id is certainly absent.
    pub fn may_contain(&self, id: &[u8]) -> bool {
        self.probes(id)
            .all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

const INDEX_MAGIC: &[u8; 8] = b"SPANIDX1";

/// Path of a segment's index file.
pub(crate) fn index_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:016x}.idx"))
}

/// Writes a sealed segment's index durably (temporary file, fsync, rename, fsync the
/// directory); returns its size in bytes.
pub(crate) fn write_index(dir: &Path, index: &SegmentIndex) -> std::io::Result<u64> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let body = index.encode();
    let mut crc = flate2::Crc::new();
    crc.update(&body);
    let path = index_path(dir, index.segment);
    let tmp = path.with_extension("idx.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(INDEX_MAGIC)?;
        f.write_all(&(body.len() as u64).to_le_bytes())?;
        f.write_all(&body)?;
        f.write_all(&crc.sum().to_le_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok((INDEX_MAGIC.len() + 8 + body.len() + 4) as u64)
}

/// Reads a segment's index; `Ok(None)` when there is none, an error naming the file when it
/// is damaged (the caller rebuilds it from the segment).
pub(crate) fn read_index(dir: &Path, segment: u64) -> Result<Option<(SegmentIndex, u64)>, String> {
    let path = index_path(dir, segment);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let damaged = |why: &str| format!("{}: {why}; rebuilding it from the segment", path.display());
    if bytes.len() < 20 || &bytes[..8] != INDEX_MAGIC {
        return Err(damaged("not a segment index"));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    if bytes.len() != 16 + len + 4 {
        return Err(damaged("truncated"));
    }
    let body = &bytes[16..16 + len];
    let mut crc = flate2::Crc::new();
    crc.update(body);
    if crc.sum().to_le_bytes() != bytes[16 + len..] {
        return Err(damaged("checksum mismatch"));
    }
    let index = SegmentIndex::decode(body).map_err(|e| damaged(&e.to_string()))?;
    if index.segment != segment {
        return Err(damaged("it belongs to another segment"));
    }
    Ok(Some((index, bytes.len() as u64)))
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
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        if let Some(i) = e.iter().position(|(id, _)| *id == segment) {
            let hit = e.remove(i);
            let index = Arc::clone(&hit.1);
            e.insert(0, hit);
            return Ok(index);
        }
        drop(e);
        let (index, _) = read_index(dir, segment)?
            .ok_or_else(|| format!("the index of segment {segment} is missing"))?;
        let index = Arc::new(index);
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        e.insert(0, (segment, Arc::clone(&index)));
        e.truncate(self.capacity);
        Ok(index)
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
        assert!(fp < 3_000, "{fp} false positives in 100000");
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
        );
        x.replaces = vec![3, 4];
        x.compaction_complete = true;
        write_index(dir.path(), &x).unwrap();
        let (y, _) = read_index(dir.path(), 7).unwrap().unwrap();
        assert_eq!(
            (
                y.blocks.len(),
                y.by_span.len(),
                y.by_trace.len(),
                y.replaces.clone(),
                y.compaction_complete
            ),
            (1, 1, 1, vec![3, 4], true)
        );
        assert!(read_index(dir.path(), 8).unwrap().is_none());
        let p = index_path(dir.path(), 7);
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        assert!(read_index(dir.path(), 7)
            .unwrap_err()
            .contains("checksum mismatch"));
    }
}
