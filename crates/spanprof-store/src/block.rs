//! A block: the samples of one profile of one series, as columns — stack node, value, link —
//! plus the block's link table. Span and trace ids live in blocks (or in the link table of
//! their record), per sample, never in series labels.
//!
//! # Encoding (format version 2)
//!
//! Integers are LEB128 varints (`uv`); signed ones are zigzag-encoded first (`iv`).
//!
//! The store writes a block into a record (INGEST or COPY, see `crate::store`) together with
//! the other blocks of that record, and the ids of their links go into the record's link
//! table, once per record; a block holds only indices into it. A Go CPU profile's two sample
//! types (`samples/count`, `cpu/nanoseconds`) are blocks of the same links, and one trace is
//! often split over the blocks of several label sets: both share one copy of the ids.
//!
//! ```text
//! links     = links:uv · traces:uv          a record's link table
//!             trace id [u8; 16] × traces   each distinct non-zero trace id of the links, once
//!             span id  [u8; 8]  × links    in table order
//!             flags:u8                     bit 1: the codes are deflated
//!             codes                        as they are, or raw_len:uv · byte_len:uv · raw
//!                                          deflate stream of exactly raw_len bytes of them
//! codes     = link trace uv × links        0 = none (all-zero trace id), 1 = the next trace id
//!                                          not named yet (they are in first-use order),
//!                                          1 + i = trace id i (from 1) again
//!
//! block v2  = 0x82 0x00                     format version 2, as a two-byte varint (see below)
//!             series:uv · time_ns:iv · duration_ns:iv · period:iv
//!             samples:uv · links:uv
//!             flags:u8                     bit 0: values are stored divided by period
//!                                          bit 1: the columns are deflated
//!             columns                      as they are, or raw_len:uv · byte_len:uv · raw
//!                                          deflate stream of exactly raw_len bytes of them
//! columns   = table     iv × links         link_table[i] is entry t_i (from 0) of the record's
//!                                          table: t_i - t_(i-1), with t_(-1) = -1
//!             node      iv × samples       difference from the previous sample's node (first: from 0)
//!             link      iv × samples       difference from the previous sample's link (first: from 0)
//!             value     iv × samples       value, or value / period when flag bit 0 is set
//! ```
//!
//! Format version 1 ([`Block::encode`]) is the self-contained block: the same header, then
//! `links:uv · traces:uv · trace ids · span ids` of its own link table (as in `links` above),
//! flags, and columns whose first column is the `codes` of its links instead of `table`. The
//! store wrote it before record link tables existed, and still reads it.
//!
//! Why this shape, measured on 1,000 consecutive Go CPU profiles of one program (598 samples,
//! 235 spans each; `tests/store_disk.rs`): the span ids are random and take most of what is
//! left, so they are stored raw, once per record; a trace id is stored once per record, and
//! not at all when ingest found the span stored already (the link then carries only the span
//! id, and queries bind it to the stored span's trace). Ingest orders a block's samples by
//! stack node, so node differences are small; links are numbered in first-use order, so link
//! differences are small too, and a block's table indices mostly step by one. CPU values are
//! whole multiples of the sampling period. Deflate then roughly halves the columns; it is kept
//! only when it makes them smaller. Samples keep the order they are given in: decoding an
//! encoded block gives it back unchanged.
//!
//! On that stream the profiles take 21.7 % of the gzipped pprof on disk when their spans were
//! stored first (version 1, a link table per block: 32.9 %; the unversioned layout: 105 %),
//! 37.4 % when no spans are stored (version 1: 78.1 %; unversioned: 105 %). Of the 21.7 %,
//! 11.3 % are the span ids, stored once.
//!
//! **Versions.** Blocks written before the format was versioned start with their series id as
//! a canonical varint. A versioned block starts with its version `v` (1–127) written as the
//! two-byte varint `0x80 | v, 0x00`, which is not canonical (a canonical varint never ends in a
//! zero byte after the first), so no unversioned block starts that way and all are read.
//! Reading is bounds-checked: damaged bytes give a `CodecError`, never a panic, and never an
//! allocation larger than what the bytes hold (deflated columns: than what they inflate to); a
//! version 2 block's indices are checked against the table it is read with.

use std::io::Read;

use hashbrown::HashMap;

use crate::codec::{CodecError, Get, Put};

/// (trace id, span id) of a link; an all-zero trace id means the producer sent only a span id
/// and the trace is bound later from the stored span.
pub type LinkIds = ([u8; 16], [u8; 8]);

/// The samples of one profile of one series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Block {
    /// Series id.
    pub series: u32,
    /// Start of the profile, in nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Length of the profile, in nanoseconds.
    pub duration_ns: i64,
    /// Sampling period, in the profile's period unit (e.g. 10000000 ns for Go CPU).
    pub period: i64,
    /// Stack node per sample.
    pub nodes: Vec<u32>,
    /// Value per sample, in the profile type's unit.
    pub values: Vec<i64>,
    /// Link per sample: 0 = none, i = `link_table[i - 1]`.
    pub links: Vec<u32>,
    /// Distinct links of the block.
    pub link_table: Vec<LinkIds>,
}

/// The newest block format version: what ingest and compaction write
/// (`Block::encode_linked`, links into the record's link table).
pub const BLOCK_FORMAT_VERSION: u8 = 2;
/// The version of a self-contained block ([`Block::encode`], its own link table).
const SELF_CONTAINED_VERSION: u8 = 1;

/// Flag bit: values are stored divided by the period.
const IN_PERIODS: u8 = 1;
/// Flag bit: the columns are deflated.
const DEFLATED: u8 = 2;
/// Columns shorter than this are stored as they are (deflate would not pay for its header).
const DEFLATE_MIN_BYTES: usize = 32;
// Columns are deflated by libdeflate at its level 1 (`spanprof_format::deflate`). Measured
// on 1,568 blocks of Go CPU profiles (about 700 bytes of columns each): 12-15 µs a block and
// 379 KB in all, where zlib-rs' level 2, used before, took 20-25 µs for 383 KB (and level 1
// 507 KB), and libdeflate's level 2 or 6 saved 1-2 % more for 20-30 % more time.
/// Most bytes raw deflate can expand one input byte to (its limit is 1032:1), to bound what a
/// damaged length can make a reader allocate.
const MAX_INFLATE_RATIO: usize = 1032;

/// Where a block's links come from when it is read.
enum Links<'a> {
    /// Version 1: the block holds its span ids (already in its link table) and these trace
    /// ids; the columns say which link has which trace.
    Own(&'a [[u8; 16]]),
    /// Version 2: the columns index into the record's link table.
    Shared(&'a [LinkIds]),
}

impl Block {
    /// Appends the block's self-contained encoding (format version 1: its own link table) to
    /// `out`. The store writes `Block::encode_linked` instead.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_header(SELF_CONTAINED_VERSION, out);
        out.uvarint(self.link_table.len() as u64);
        let (traces, codes) = trace_codes(&self.link_table);
        out.uvarint(traces.len() as u64);
        for t in &traces {
            out.extend_from_slice(t);
        }
        for (_, span) in &self.link_table {
            out.extend_from_slice(span);
        }
        let mut columns = Vec::with_capacity(codes.len() + 3 * self.nodes.len());
        columns.extend_from_slice(&codes);
        let flags = self.sample_columns(&mut columns);
        write_columns(out, flags, &columns);
    }

    /// Appends the block's encoding in the newest format version (2) to `out`: its links as
    /// indices into the link table of the record it is written to, where `link_table[i]` is
    /// entry `table_index[i]` (from 0).
    pub(crate) fn encode_linked(&self, table_index: &[u32], out: &mut Vec<u8>) {
        debug_assert_eq!(table_index.len(), self.link_table.len());
        self.encode_header(BLOCK_FORMAT_VERSION, out);
        out.uvarint(table_index.len() as u64);
        let mut columns = Vec::with_capacity(table_index.len() + 3 * self.nodes.len());
        let mut previous = -1i64;
        for &i in table_index {
            columns.ivarint(i64::from(i) - previous);
            previous = i64::from(i);
        }
        let flags = self.sample_columns(&mut columns);
        write_columns(out, flags, &columns);
    }

    /// Version, series, times, period and sample count.
    fn encode_header(&self, version: u8, out: &mut Vec<u8>) {
        debug_assert!(
            self.nodes.len() == self.values.len() && self.nodes.len() == self.links.len()
        );
        out.extend_from_slice(&[0x80 | version, 0x00]);
        out.uvarint(self.series.into());
        out.ivarint(self.time_ns);
        out.ivarint(self.duration_ns);
        out.ivarint(self.period);
        out.uvarint(self.nodes.len() as u64);
    }

    /// Appends the node, link and value columns; returns the flags they need.
    fn sample_columns(&self, columns: &mut Vec<u8>) -> u8 {
        let in_periods = self.period > 0
            && self
                .values
                .iter()
                .all(|v| v.checked_rem(self.period) == Some(0));
        let mut previous = 0i64;
        for &n in &self.nodes {
            columns.ivarint(i64::from(n) - previous);
            previous = i64::from(n);
        }
        let mut previous = 0i64;
        for &l in &self.links {
            columns.ivarint(i64::from(l) - previous);
            previous = i64::from(l);
        }
        for &v in &self.values {
            columns.ivarint(if in_periods { v / self.period } else { v });
        }
        if in_periods {
            IN_PERIODS
        } else {
            0
        }
    }

    /// Reads a block written by [`Block::encode`] or [`Block::encode_linked`], in any format
    /// version this build knows (including the unversioned one written before versions
    /// existed). `table` is the link table of the block's record (empty when it has none);
    /// only version 2 blocks use it.
    pub(crate) fn decode(g: &mut Get, table: &[LinkIds]) -> Result<Block, CodecError> {
        let before = g.remaining();
        let first = g.uvarint()?;
        let canonical_len = varint_len(first);
        if before - g.remaining() == canonical_len {
            // An unversioned block: that was its series id.
            let series = u32::try_from(first)
                .map_err(|_| CodecError(format!("{first} does not fit 32 bits")))?;
            return decode_unversioned(series, g);
        }
        let two_bytes = canonical_len + 1 == before - g.remaining();
        match first {
            1 if two_bytes => decode_versioned(g, None),
            2 if two_bytes => decode_versioned(g, Some(table)),
            v => Err(CodecError(format!(
                "block format version {v} is not one this build reads (it reads up to {BLOCK_FORMAT_VERSION})"
            ))),
        }
    }

    /// Sum of the values.
    pub fn total(&self) -> i64 {
        self.values.iter().fold(0i64, |a, v| a.saturating_add(*v))
    }
}

/// The link table of a record of `blocks`: every distinct link once, in first-use order, and
/// per block the table index of each entry of its own link table (for [`Block::encode_linked`]).
pub(crate) fn shared_link_table(blocks: &[Block]) -> (Vec<LinkIds>, Vec<Vec<u32>>) {
    let most: usize = blocks.iter().map(|b| b.link_table.len()).sum();
    let mut table = Vec::with_capacity(most);
    let mut index: HashMap<LinkIds, u32> = HashMap::with_capacity(most);
    let per_block = blocks
        .iter()
        .map(|b| {
            b.link_table
                .iter()
                .map(|ids| {
                    *index.entry(*ids).or_insert_with(|| {
                        table.push(*ids);
                        (table.len() - 1) as u32
                    })
                })
                .collect()
        })
        .collect();
    (table, per_block)
}

/// Appends a record's link table (see the module docs), which the record's version 2 blocks
/// index into.
pub(crate) fn encode_link_table(table: &[LinkIds], out: &mut Vec<u8>) {
    out.uvarint(table.len() as u64);
    let (traces, codes) = trace_codes(table);
    out.uvarint(traces.len() as u64);
    for t in &traces {
        out.extend_from_slice(t);
    }
    for (_, span) in table {
        out.extend_from_slice(span);
    }
    write_columns(out, 0, &codes);
}

/// Reads a link table written by [`encode_link_table`].
pub(crate) fn decode_link_table(g: &mut Get) -> Result<Vec<LinkIds>, CodecError> {
    // Every link takes 8 bytes here (its span id), every trace 16.
    let k = g.count()?;
    let t = g.count()?;
    let mut traces = Vec::with_capacity(t);
    for _ in 0..t {
        traces.push(g.fixed::<16>()?);
    }
    let mut table = Vec::with_capacity(k);
    for _ in 0..k {
        table.push(([0; 16], g.fixed::<8>()?));
    }
    let flags = g.u8()?;
    if flags & !DEFLATED != 0 {
        return Err(CodecError(format!("unknown link table flags {flags:#04x}")));
    }
    if flags & DEFLATED != 0 {
        let raw = read_deflated(g)?;
        let mut c = Get::new(&raw);
        read_trace_codes(&mut c, &mut table, &traces)?;
        if !c.done() {
            return Err(CodecError("bytes after the deflated trace codes".into()));
        }
    } else {
        read_trace_codes(g, &mut table, &traces)?;
    }
    Ok(table)
}

/// The distinct non-zero trace ids of `table` in first-use order, and per link its trace code
/// as a varint: 0 = none, 1 = the next trace id not used yet, 1 + i = trace id i (from 1)
/// again.
fn trace_codes(table: &[LinkIds]) -> (Vec<[u8; 16]>, Vec<u8>) {
    let mut traces: Vec<[u8; 16]> = Vec::new();
    let mut codes = Vec::with_capacity(table.len());
    let mut first_use: HashMap<[u8; 16], usize> = HashMap::with_capacity(table.len());
    for (trace, _) in table {
        let code = if *trace == [0; 16] {
            0
        } else {
            match first_use.get(trace) {
                Some(&i) => 1 + i,
                None => {
                    traces.push(*trace);
                    first_use.insert(*trace, traces.len());
                    1
                }
            }
        };
        codes.uvarint(code as u64);
    }
    (traces, codes)
}

/// Appends `flags` and `columns`, deflated (flag [`DEFLATED`]) when that makes them smaller.
fn write_columns(out: &mut Vec<u8>, flags: u8, columns: &[u8]) {
    match (columns.len() >= DEFLATE_MIN_BYTES)
        .then(|| deflate(columns))
        .filter(|z| z.len() + 2 * 5 < columns.len())
    {
        Some(z) => {
            out.push(flags | DEFLATED);
            out.uvarint(columns.len() as u64);
            out.bytes(&z);
        }
        None => {
            out.push(flags);
            out.extend_from_slice(columns);
        }
    }
}

/// Reads `raw_len:uv · byte_len:uv · deflate stream` and inflates it.
fn read_deflated(g: &mut Get) -> Result<Vec<u8>, CodecError> {
    let raw_len = g.uvarint()?;
    let stream = g.bytes()?;
    let raw_len =
        usize::try_from(raw_len).map_err(|_| CodecError(format!("{raw_len} column bytes")))?;
    inflate(stream, raw_len)
}

/// Bytes of the canonical varint of `v`.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn deflate(raw: &[u8]) -> Vec<u8> {
    thread_local! {
        /// The last columns this thread deflated, and their streams. A Go CPU profile's two
        /// sample types become blocks with the same columns (same stacks and links, values
        /// counted in periods), written one sample type after the other, and deflate gives
        /// the same stream for the same bytes: the second sample type's blocks reuse the
        /// first's streams.
        static RECENT: std::cell::RefCell<Vec<(Vec<u8>, Vec<u8>)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    /// Streams remembered: a profile's label sets, that many blocks per sample type.
    const REMEMBERED: usize = 8;
    /// Larger columns (compaction's merged blocks) are not kept: a thread would hold 8 of
    /// them for as long as it lives.
    const REMEMBERED_MAX_BYTES: usize = 64 << 10;
    RECENT.with_borrow_mut(|recent| {
        if let Some((_, out)) = recent.iter().find(|(r, _)| r[..] == *raw) {
            return out.clone();
        }
        let mut out = Vec::new();
        spanprof_format::deflate::deflate_into(raw, &mut out);
        if raw.len() <= REMEMBERED_MAX_BYTES {
            if recent.len() == REMEMBERED {
                recent.remove(0);
            }
            recent.push((raw.to_vec(), out.clone()));
        }
        out
    })
}

/// Inflates `stream`, which must hold exactly `raw_len` bytes and nothing after them.
fn inflate(stream: &[u8], raw_len: usize) -> Result<Vec<u8>, CodecError> {
    if raw_len > stream.len().saturating_mul(MAX_INFLATE_RATIO) {
        return Err(CodecError(format!(
            "{raw_len} column bytes cannot come from {} deflated bytes",
            stream.len()
        )));
    }
    // One call when the stream inflates to the length it should (libdeflate, twice as fast;
    // it does not say where the stream ended, and the segment's checksum covers the bytes
    // after it); otherwise the streaming inflater below, which says what is wrong.
    let mut raw = Vec::new();
    if spanprof_format::deflate::inflate_into(stream, &mut raw, raw_len) == Some(raw_len) {
        return Ok(raw);
    }
    // Grows with what actually inflates, not with the declared length.
    let mut raw = Vec::new();
    let mut z = flate2::read::DeflateDecoder::new(stream).take(raw_len as u64 + 1);
    z.read_to_end(&mut raw)
        .map_err(|e| CodecError(format!("deflated columns: {e}")))?;
    let z = z.into_inner();
    if raw.len() != raw_len || z.total_in() != stream.len() as u64 {
        return Err(CodecError(format!(
            "deflated columns hold {} bytes in {} of {} stream bytes, not {raw_len} in all",
            raw.len(),
            z.total_in(),
            stream.len()
        )));
    }
    Ok(raw)
}

/// Format versions 1 (`shared` is `None`: the block's own link table) and 2 (`shared` is the
/// record's link table).
fn decode_versioned(g: &mut Get, shared: Option<&[LinkIds]>) -> Result<Block, CodecError> {
    let (series, time_ns, duration_ns, period) =
        (g.u32()?, g.ivarint()?, g.ivarint()?, g.ivarint()?);
    let n = g.uvarint()?;
    let mut b = Block {
        series,
        time_ns,
        duration_ns,
        period,
        ..Default::default()
    };
    let mut traces = Vec::new();
    let k = match shared {
        None => {
            // Every link takes 8 bytes here (its span id), every trace 16.
            let k = g.count()?;
            let t = g.count()?;
            traces.reserve_exact(t);
            for _ in 0..t {
                traces.push(g.fixed::<16>()?);
            }
            b.link_table.reserve_exact(k);
            for _ in 0..k {
                b.link_table.push(([0; 16], g.fixed::<8>()?));
            }
            k
        }
        // Checked against the columns before anything is allocated for it.
        Some(_) => {
            let k = g.uvarint()?;
            usize::try_from(k).map_err(|_| CodecError(format!("{k} links")))?
        }
    };
    let links = match shared {
        None => Links::Own(&traces),
        Some(table) => Links::Shared(table),
    };
    let flags = g.u8()?;
    if flags & !(IN_PERIODS | DEFLATED) != 0 {
        return Err(CodecError(format!("unknown block flags {flags:#04x}")));
    }
    if flags & IN_PERIODS != 0 && period <= 0 {
        return Err(CodecError(format!(
            "values in periods of a period of {period}"
        )));
    }
    if flags & DEFLATED != 0 {
        let raw = read_deflated(g)?;
        let mut c = Get::new(&raw);
        read_columns(&mut c, &mut b, n, k, flags, links)?;
        if !c.done() {
            return Err(CodecError("bytes after the deflated columns".into()));
        }
    } else {
        read_columns(g, &mut b, n, k, flags, links)?;
    }
    Ok(b)
}

/// Reads the trace code of every link of `table` (whose span ids are there already).
fn read_trace_codes(
    c: &mut Get,
    table: &mut [LinkIds],
    traces: &[[u8; 16]],
) -> Result<(), CodecError> {
    // Trace ids are in first-use order: `used` of them are named so far.
    let mut used = 0;
    for (trace, _) in table.iter_mut() {
        let i = match c.index()? {
            0 => continue,
            1 => {
                used += 1;
                used
            }
            code => code - 1,
        };
        if i > used || i > traces.len() {
            return Err(CodecError(format!(
                "a link names trace {i} of the {} with {used} named so far",
                traces.len()
            )));
        }
        *trace = traces[i - 1];
    }
    if used != traces.len() {
        return Err(CodecError(format!(
            "{} trace ids, {used} of them used",
            traces.len()
        )));
    }
    Ok(())
}

/// Reads the columns of `n` samples and `k` links into `b` (whose link table holds the span
/// ids already when the links are its own).
fn read_columns(
    c: &mut Get,
    b: &mut Block,
    n: u64,
    k: usize,
    flags: u8,
    links: Links,
) -> Result<(), CodecError> {
    // Every sample takes at least 3 column bytes and every link 1: a damaged count cannot
    // make the reader allocate more than the columns hold.
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n.saturating_mul(3).saturating_add(k) <= c.remaining())
        .ok_or_else(|| CodecError(format!("{n} samples and {k} links exceed the block")))?;
    match links {
        Links::Own(traces) => read_trace_codes(c, &mut b.link_table, traces)?,
        Links::Shared(table) => {
            b.link_table.reserve_exact(k);
            let mut previous = -1i64;
            for _ in 0..k {
                previous = previous.saturating_add(c.ivarint()?);
                let ids = usize::try_from(previous)
                    .ok()
                    .and_then(|i| table.get(i))
                    .ok_or_else(|| {
                        CodecError(format!(
                            "a link names entry {previous} of the record's {} links",
                            table.len()
                        ))
                    })?;
                b.link_table.push(*ids);
            }
        }
    }
    b.nodes.reserve_exact(n);
    let mut previous = 0i64;
    for _ in 0..n {
        previous = previous.saturating_add(c.ivarint()?);
        b.nodes.push(
            u32::try_from(previous)
                .map_err(|_| CodecError(format!("stack node {previous} out of range")))?,
        );
    }
    b.links.reserve_exact(n);
    let mut previous = 0i64;
    for _ in 0..n {
        previous = previous.saturating_add(c.ivarint()?);
        match u32::try_from(previous) {
            Ok(l) if l as usize <= k => b.links.push(l),
            _ => {
                return Err(CodecError(format!(
                    "a sample's link {previous} is past the block's {k} links"
                )))
            }
        }
    }
    b.values.reserve_exact(n);
    let period = b.period;
    for _ in 0..n {
        let v = c.ivarint()?;
        b.values.push(if flags & IN_PERIODS != 0 {
            v.checked_mul(period)
                .ok_or_else(|| CodecError(format!("value {v} × period {period} overflows")))?
        } else {
            v
        });
    }
    Ok(())
}

/// The layout before format versions: every column as plain varints, every link as its full
/// 24 bytes.
fn decode_unversioned(series: u32, g: &mut Get) -> Result<Block, CodecError> {
    let (time_ns, duration_ns, period) = (g.ivarint()?, g.ivarint()?, g.ivarint()?);
    let n = g.count()?;
    let mut b = Block {
        series,
        time_ns,
        duration_ns,
        period,
        ..Default::default()
    };
    b.nodes.reserve_exact(n);
    for _ in 0..n {
        b.nodes.push(g.u32()?);
    }
    b.values.reserve_exact(n);
    for _ in 0..n {
        b.values.push(g.ivarint()?);
    }
    b.links.reserve_exact(n);
    for _ in 0..n {
        b.links.push(g.u32()?);
    }
    let k = g.count()?;
    b.link_table.reserve_exact(k);
    for _ in 0..k {
        b.link_table.push((g.fixed::<16>()?, g.fixed::<8>()?));
    }
    if b.links.iter().any(|&l| l as usize > k) {
        return Err(CodecError(format!(
            "a sample's link is past the block's {k} links"
        )));
    }
    Ok(b)
}

#[cfg(test)]
mod tests;
