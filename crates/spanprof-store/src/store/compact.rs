//! Compaction: runs of small sealed segments (a restart or a quiet hour each leaves one) are
//! copied into one new segment in fewer, larger records, then deleted.
//!
//! Crash safety: the new segment holds `BEGIN(sources)`, then `COPY` records (the sources'
//! blocks and spans, without their symbol deltas — the segment's snapshot has every symbol;
//! the blocks re-encoded against one link table per COPY record, merged from their records'),
//! then `END`. On open, a segment with both BEGIN and END replaces its sources (which are
//! skipped and deleted); COPY records of a segment without END are ignored, so a crash at any
//! point neither loses nor doubles data.

use std::ops::ControlFlow;

use hashbrown::HashSet;

use super::{
    get_record_links, put_record_links, Store, StoreError, COMPACT_BEGIN, COMPACT_END, COPY, INGEST,
};
use crate::block::{shared_link_table, Block};
use crate::codec::{CodecError, Get, Put};
use crate::spans::{decode_spans, encode_spans, SpanRecord};

/// Largest copied record, in bytes, before another is started.
const COPY_RECORD_BYTES: usize = 4 << 20;

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Segments merged (and deleted).
    pub merged_segments: usize,
    /// Bytes of the merged segments.
    pub bytes_before: u64,
    /// Bytes of the segment that replaced them.
    pub bytes_after: u64,
}

/// Per segment, what compaction records it holds.
#[derive(Debug, Default)]
pub(crate) struct CompactionMarks {
    /// Segments replaced by a completed compaction.
    pub replaced: HashSet<u64>,
    /// Segments whose COPY records belong to a completed compaction.
    pub complete: HashSet<u64>,
}

/// Which segments completed compactions replaced: from the indexes of sealed segments, and by
/// scanning the segments that have none.
pub(crate) fn read_marks(
    log: &crate::log::Log,
    indexed: &[(u64, super::segments::SealedSummary)],
    unindexed: &[u64],
) -> Result<CompactionMarks, StoreError> {
    let mut marks = CompactionMarks::default();
    for (id, summary) in indexed {
        if summary.compaction_complete {
            marks.replaced.extend(summary.replaces.iter().copied());
            marks.complete.insert(*id);
        }
    }
    for &id in unindexed {
        let (mut sources, mut ended) = (None, false);
        log.scan(id, |_, payload| {
            match payload.first() {
                Some(&COMPACT_BEGIN) => sources = decode_ids(&payload[1..]).ok(),
                Some(&COMPACT_END) => ended = true,
                _ => {}
            }
            ControlFlow::Continue(())
        })?;
        if let (Some(sources), true) = (sources, ended) {
            marks.replaced.extend(sources);
            marks.complete.insert(id);
        }
    }
    Ok(marks)
}

fn decode_ids(b: &[u8]) -> Result<Vec<u64>, CodecError> {
    let mut g = Get::new(b);
    let n = g.count()?;
    (0..n).map(|_| g.uvarint()).collect()
}

/// The blocks (decoded: their links are re-indexed into the link table of the COPY record they
/// go to) and spans of an INGEST or COPY record; returns the bytes its blocks took.
fn record_data(
    payload: &[u8],
    blocks: &mut Vec<Block>,
    spans: &mut Vec<SpanRecord>,
) -> Result<usize, CodecError> {
    let mut g = Get::new(payload);
    g.u8()?;
    let links = get_record_links(&mut g)?;
    skip_deltas(&mut g)?;
    let n = g.count()?;
    let mut bytes = 0;
    for _ in 0..n {
        let b = g.bytes()?;
        bytes += b.len();
        blocks.push(Block::decode(&mut Get::new(b), &links)?);
    }
    spans.extend(decode_spans(g.bytes()?).map_err(|e| CodecError(e.to_string()))?);
    Ok(bytes)
}

/// Skips the symbol and series sections of a record.
fn skip_deltas(g: &mut Get) -> Result<(), CodecError> {
    let n = g.count()?;
    for _ in 0..n {
        g.u32()?;
        g.str()?;
        crate::symbols::SymbolTable::skip(g)?;
    }
    let (_start, k) = (g.index()?, g.count()?);
    for _ in 0..k {
        g.u32()?;
        g.str()?;
        let labels = g.count()?;
        for _ in 0..labels {
            g.str()?;
            g.str()?;
        }
    }
    Ok(())
}

impl Store {
    /// Merges every sealed segment smaller than `small_bytes` into one new segment (when there
    /// are at least two). Ingest waits while it runs.
    // Long: pick, merge, write and swap under one hold of the writer lock.
    #[allow(clippy::too_many_lines)]
    pub fn compact(&self, small_bytes: u64) -> Result<CompactReport, StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        let small: Vec<crate::log::SegmentInfo> = self
            .log
            .segments()
            .into_iter()
            .filter(|s| !s.active && s.bytes < small_bytes)
            .collect();
        if small.len() < 2 {
            return Ok(CompactReport::default());
        }
        let sources: Vec<u64> = small.iter().map(|s| s.id).collect();
        let mut report = CompactReport {
            merged_segments: small.len(),
            bytes_before: small.iter().map(|s| s.bytes).sum(),
            bytes_after: 0,
        };
        // The output gets a segment of its own: seal the active one first.
        self.rotate_locked()?;
        let output = self.log.active_segment();
        let mut begin = vec![COMPACT_BEGIN];
        begin.uvarint(sources.len() as u64);
        for &id in &sources {
            begin.uvarint(id);
        }
        let mut written = vec![(self.log.append(&[&begin])?[0], begin)];
        let series_len = self
            .state
            .read()
            .expect("store state lock poisoned")
            .series
            .len();
        let (mut blocks, mut spans) = (Vec::new(), Vec::new());
        let mut pending_bytes = 0usize;
        let flush = |blocks: &mut Vec<Block>,
                     spans: &mut Vec<SpanRecord>,
                     written: &mut Vec<_>|
         -> Result<(), StoreError> {
            if blocks.is_empty() && spans.is_empty() {
                return Ok(());
            }
            let mut rec = vec![COPY];
            // The copied blocks' links, each once, merged from their records' tables.
            let (links, table_index) = shared_link_table(blocks);
            put_record_links(&mut rec, &links);
            rec.uvarint(0); // no symbol deltas
            rec.uvarint(series_len as u64);
            rec.uvarint(0); // no series deltas
            rec.uvarint(blocks.len() as u64);
            let mut scratch = Vec::new();
            for (b, table_index) in blocks.iter().zip(&table_index) {
                scratch.clear();
                b.encode_linked(table_index, &mut scratch);
                rec.bytes(&scratch);
            }
            blocks.clear();
            let mut sb = Vec::new();
            encode_spans(spans.iter(), &mut sb);
            spans.clear();
            rec.bytes(&sb);
            written.push((self.log.append(&[&rec])?[0], rec));
            Ok(())
        };
        for seg in &small {
            let mut problem = None;
            self.log.scan(seg.id, |_, payload| {
                if matches!(payload.first(), Some(&INGEST) | Some(&COPY)) {
                    match record_data(payload, &mut blocks, &mut spans) {
                        Ok(bytes) => pending_bytes += bytes,
                        Err(e) => {
                            problem = Some(e);
                            return ControlFlow::Break(());
                        }
                    }
                }
                ControlFlow::Continue(())
            })?;
            if let Some(e) = problem {
                return Err(e.into());
            }
            if pending_bytes >= COPY_RECORD_BYTES {
                flush(&mut blocks, &mut spans, &mut written)?;
                pending_bytes = 0;
            }
        }
        flush(&mut blocks, &mut spans, &mut written)?;
        let end = vec![COMPACT_END];
        written.push((self.log.append(&[&end])?[0], end));
        // Durable. Index the copies into the output's index and seal it (its index file records
        // the sources it replaces), then the sources can go.
        {
            let mut st = self.state.write().expect("store state lock poisoned");
            let mut out = (*st.active).clone();
            for (pos, payload) in &written {
                st.replay(&mut out, *pos, payload)?;
            }
            st.active = std::sync::Arc::new(out);
        }
        self.rotate_locked()?;
        for &id in &sources {
            self.log.delete_segment(id)?;
            self.state
                .write()
                .expect("store state lock poisoned")
                .forget_segment(id);
        }
        report.bytes_after = self
            .log
            .segments()
            .iter()
            .find(|s| s.id == output)
            .map_or(0, |s| s.bytes);
        Ok(report)
    }
}
