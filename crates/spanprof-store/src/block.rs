//! A block: the samples of one profile of one series, as columns — stack node, value, link —
//! plus the block's own link table. Span and trace ids live here, per sample, never in series
//! labels.
//!
//! # Encoding (format version 1)
//!
//! Integers are LEB128 varints (`uv`); signed ones are zigzag-encoded first (`iv`).
//!
//! ```text
//! block     = 0x81 0x00                     format version 1, as a two-byte varint (see below)
//!             series:uv · time_ns:iv · duration_ns:iv · period:iv
//!             samples:uv · links:uv · traces:uv
//!             trace id [u8; 16] × traces   each distinct non-zero trace id of the links, once
//!             span id  [u8; 8]  × links    link_table[i].1, in table order
//!             flags:u8                     bit 0: values are stored divided by period
//!                                          bit 1: the columns are deflated
//!             columns                      as they are, or raw_len:uv · byte_len:uv · raw
//!                                          deflate stream of exactly raw_len bytes of them
//! columns   = link trace uv × links        0 = none (all-zero trace id), 1 = the next trace id
//!                                          not named yet (they are in first-use order),
//!                                          1 + i = trace id i (from 1) again
//!             node       iv × samples      difference from the previous sample's node (first: from 0)
//!             link       iv × samples      difference from the previous sample's link (first: from 0)
//!             value      iv × samples      value, or value / period when flag bit 0 is set
//! ```
//!
//! Why this shape, measured on 1,000 consecutive Go CPU profiles of one program (598 samples,
//! 235 spans each; `tests/store_disk.rs`): the span ids are random and take most of what is
//! left, so they are stored raw, once per link; a trace id is stored once per block, and not
//! at all when ingest found the span stored already (the link then carries only the span id,
//! and queries bind it to the stored span's trace). Ingest orders a block's samples by stack
//! node, so node differences are small; links are numbered in first-use order, so link
//! differences are small too. CPU values are whole multiples of the sampling period. Deflate
//! then roughly halves the columns; it is kept only when it makes the block smaller. Samples
//! keep the order they are given in: decoding an encoded block gives it back unchanged.
//!
//! On that stream the profiles take 32.9 % of the gzipped pprof on disk when their spans were
//! stored first (the unversioned layout: 105 %), 78.1 % when no spans are stored (105 %). Of
//! the 32.9 %, 22.6 % are the span ids: a profile's two sample types are two blocks, and each
//! block, read on its own, carries its own ids.
//!
//! **Versions.** Blocks written before the format was versioned start with their series id as
//! a canonical varint. A versioned block starts with its version `v` (1–127) written as the
//! two-byte varint `0x80 | v, 0x00`, which is not canonical (a canonical varint never ends in a
//! zero byte after the first), so no unversioned block starts that way and both are read.
//! Reading is bounds-checked: damaged bytes give a [`CodecError`], never a panic, and never an
//! allocation larger than what the bytes hold (deflated columns: than what they inflate to).

use std::io::{Read, Write};

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

/// The format version [`Block::encode`] writes.
pub const BLOCK_FORMAT_VERSION: u8 = 1;

/// Flag bit: values are stored divided by the period.
const IN_PERIODS: u8 = 1;
/// Flag bit: the columns are deflated.
const DEFLATED: u8 = 2;
/// Columns shorter than this are stored as they are (deflate would not pay for its header).
const DEFLATE_MIN_BYTES: usize = 32;
/// Deflate level (1–9): zlib's default; 9 came out 0.1 % larger on the measured stream.
const DEFLATE_LEVEL: u32 = 6;
/// Most bytes raw deflate can expand one input byte to (its limit is 1032:1), to bound what a
/// damaged length can make a reader allocate.
const MAX_INFLATE_RATIO: usize = 1032;

impl Block {
    /// Appends the block's encoding (the current format version) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        debug_assert!(
            self.nodes.len() == self.values.len() && self.nodes.len() == self.links.len()
        );
        out.extend_from_slice(&[0x80 | BLOCK_FORMAT_VERSION, 0x00]);
        out.uvarint(self.series.into());
        out.ivarint(self.time_ns);
        out.ivarint(self.duration_ns);
        out.ivarint(self.period);
        out.uvarint(self.nodes.len() as u64);
        out.uvarint(self.link_table.len() as u64);
        // Distinct trace ids, first use first; per link: 0 = none, 1 = the next trace id not
        // used yet, 1 + i = trace id i (from 1) again.
        let mut traces: Vec<[u8; 16]> = Vec::new();
        let mut trace_of_link = Vec::with_capacity(self.link_table.len());
        let mut first_use: HashMap<[u8; 16], usize> = HashMap::new();
        for (trace, _) in &self.link_table {
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
            trace_of_link.push(code as u64);
        }
        out.uvarint(traces.len() as u64);
        for t in &traces {
            out.extend_from_slice(t);
        }
        for (_, span) in &self.link_table {
            out.extend_from_slice(span);
        }
        let in_periods = self.period > 0
            && self
                .values
                .iter()
                .all(|v| v.checked_rem(self.period) == Some(0));
        let mut columns = Vec::with_capacity(self.link_table.len() + 3 * self.nodes.len());
        for &i in &trace_of_link {
            columns.uvarint(i);
        }
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
        let flags = if in_periods { IN_PERIODS } else { 0 };
        match (columns.len() >= DEFLATE_MIN_BYTES)
            .then(|| deflate(&columns))
            .filter(|z| z.len() + 2 * 5 < columns.len())
        {
            Some(z) => {
                out.push(flags | DEFLATED);
                out.uvarint(columns.len() as u64);
                out.bytes(&z);
            }
            None => {
                out.push(flags);
                out.extend_from_slice(&columns);
            }
        }
    }

    /// Reads a block written by [`Block::encode`], in any format version this build knows
    /// (including the unversioned one written before versions existed).
    pub(crate) fn decode(g: &mut Get) -> Result<Block, CodecError> {
        let before = g.remaining();
        let first = g.uvarint()?;
        let canonical_len = varint_len(first);
        if before - g.remaining() == canonical_len {
            // An unversioned block: that was its series id.
            let series = u32::try_from(first)
                .map_err(|_| CodecError(format!("{first} does not fit 32 bits")))?;
            return decode_unversioned(series, g);
        }
        match first {
            1 if canonical_len + 1 == before - g.remaining() => decode_v1(g),
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

/// Bytes of the canonical varint of `v`.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn deflate(raw: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(raw.len() / 2),
        flate2::Compression::new(DEFLATE_LEVEL),
    );
    z.write_all(raw).expect("writing to a Vec cannot fail");
    z.finish().expect("writing to a Vec cannot fail")
}

/// Inflates `stream`, which must hold exactly `raw_len` bytes and nothing after them.
fn inflate(stream: &[u8], raw_len: usize) -> Result<Vec<u8>, CodecError> {
    if raw_len > stream.len().saturating_mul(MAX_INFLATE_RATIO) {
        return Err(CodecError(format!(
            "{raw_len} column bytes cannot come from {} deflated bytes",
            stream.len()
        )));
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

fn decode_v1(g: &mut Get) -> Result<Block, CodecError> {
    let (series, time_ns, duration_ns, period) =
        (g.u32()?, g.ivarint()?, g.ivarint()?, g.ivarint()?);
    let n = g.uvarint()?;
    // Every link takes 8 bytes here (its span id), every trace 16.
    let k = g.count()?;
    let t = g.count()?;
    let mut traces = Vec::with_capacity(t);
    for _ in 0..t {
        traces.push(g.fixed::<16>()?);
    }
    let mut b = Block {
        series,
        time_ns,
        duration_ns,
        period,
        ..Default::default()
    };
    b.link_table.reserve_exact(k);
    for _ in 0..k {
        b.link_table.push(([0; 16], g.fixed::<8>()?));
    }
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
        let raw_len = g.uvarint()?;
        let stream = g.bytes()?;
        let raw_len =
            usize::try_from(raw_len).map_err(|_| CodecError(format!("{raw_len} column bytes")))?;
        let raw = inflate(stream, raw_len)?;
        let mut c = Get::new(&raw);
        read_columns(&mut c, &mut b, n, flags, &traces)?;
        if !c.done() {
            return Err(CodecError("bytes after the deflated columns".into()));
        }
    } else {
        read_columns(g, &mut b, n, flags, &traces)?;
    }
    Ok(b)
}

/// Reads the columns of `n` samples into `b`, whose link table holds the span ids already.
fn read_columns(
    c: &mut Get,
    b: &mut Block,
    n: u64,
    flags: u8,
    traces: &[[u8; 16]],
) -> Result<(), CodecError> {
    let k = b.link_table.len();
    // Every sample takes at least 3 column bytes and every link 1: a damaged count cannot
    // make the reader allocate more than the columns hold.
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n.saturating_mul(3).saturating_add(k) <= c.remaining())
        .ok_or_else(|| CodecError(format!("{n} samples exceed the block")))?;
    // Trace ids are in first-use order: `used` of them are named so far.
    let mut used = 0;
    for (trace, _) in b.link_table.iter_mut() {
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
                "a link names trace {i} of the block's {} with {used} named so far",
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
mod tests {
    use super::*;

    /// The unversioned layout, as the store wrote it before format versions.
    fn encode_unversioned(b: &Block) -> Vec<u8> {
        let mut out = Vec::new();
        out.uvarint(b.series.into());
        out.ivarint(b.time_ns);
        out.ivarint(b.duration_ns);
        out.ivarint(b.period);
        out.uvarint(b.nodes.len() as u64);
        for &n in &b.nodes {
            out.uvarint(n.into());
        }
        for &v in &b.values {
            out.ivarint(v);
        }
        for &l in &b.links {
            out.uvarint(l.into());
        }
        out.uvarint(b.link_table.len() as u64);
        for (trace, span) in &b.link_table {
            out.extend_from_slice(trace);
            out.extend_from_slice(span);
        }
        out
    }

    fn small() -> Block {
        Block {
            series: 7,
            time_ns: 1_700_000_000_000_000_000,
            duration_ns: 10_000_000_000,
            period: 10_000_000,
            nodes: vec![1, 5, 5, 300],
            values: vec![10_000_000, -3, 0, i64::MAX],
            links: vec![0, 1, 2, 1],
            link_table: vec![([1; 16], [2; 8]), ([0; 16], [3; 8])],
        }
    }

    /// A CPU block like a real one: many samples, values whole periods, links reused, two
    /// links per trace, some links without a trace.
    fn large(series: u32) -> Block {
        let n = 600u32;
        let k = 200u32;
        let period = 10_000_000;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut nodes: Vec<u32> = (0..n).map(|_| (next() % 4000) as u32).collect();
        nodes.sort_unstable();
        Block {
            series,
            time_ns: 1_700_000_000_000_000_000,
            duration_ns: 10_000_000_000,
            period,
            nodes,
            values: (0..n).map(|_| period * (1 + (next() % 3) as i64)).collect(),
            links: (0..n).map(|i| (i * 7 + 3) % (k + 1)).collect(),
            link_table: (0..k)
                .map(|i| {
                    let trace = if i % 3 == 0 {
                        [0; 16]
                    } else {
                        let mut t = [0; 16];
                        t[..8].copy_from_slice(&(u64::from(i / 2) + 1).to_le_bytes());
                        t
                    };
                    (trace, next().to_le_bytes())
                })
                .collect(),
        }
    }

    /// Where to cut an encoding of `len` bytes: everywhere in the first 256 bytes and the last
    /// 32, every 13th byte between (decoding a long block at every cut is slow in debug).
    fn cuts(len: usize) -> impl Iterator<Item = usize> {
        (0..len).filter(move |&c| c < 256 || c + 32 >= len || c % 13 == 0)
    }

    fn round_trip(b: &Block) -> Vec<u8> {
        let mut bytes = Vec::new();
        b.encode(&mut bytes);
        let mut g = Get::new(&bytes);
        assert_eq!(&Block::decode(&mut g).unwrap(), b);
        assert!(g.done(), "the decoder reads the whole block");
        bytes
    }

    #[test]
    fn blocks_round_trip_and_reject_damage() {
        let mut values_not_periods = large(3);
        values_not_periods.values[17] += 1;
        let mut extremes = small();
        extremes.nodes = vec![u32::MAX, 0, u32::MAX, 1];
        extremes.values = vec![i64::MIN, i64::MAX, 0, -1];
        extremes.period = -1;
        let mut whole_periods_at_the_limit = small();
        whole_periods_at_the_limit.values = vec![i64::MIN / 2 * 2, 0, 2, i64::MAX - 1];
        whole_periods_at_the_limit.period = 2;
        for b in [
            small(),
            Block::default(),
            large(0),
            large(200_000),
            values_not_periods,
            extremes,
            whole_periods_at_the_limit,
        ] {
            let bytes = round_trip(&b);
            assert_eq!(bytes[..2], [0x81, 0x00]);
            for cut in cuts(bytes.len()) {
                assert!(
                    Block::decode(&mut Get::new(&bytes[..cut])).is_err(),
                    "cut at {cut} of {}",
                    bytes.len()
                );
            }
        }
    }

    #[test]
    fn damaged_blocks_give_errors_not_panics() {
        for b in [small(), large(5)] {
            let mut bytes = Vec::new();
            b.encode(&mut bytes);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..bytes.len() * 2 {
                let mut damaged = bytes.clone();
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                damaged[i / 2] ^= 1 << (x >> 61);
                damaged[(x >> 33) as usize % bytes.len()] ^= (x >> 16) as u8;
                // Either an error or some block: never a panic.
                let _ = Block::decode(&mut Get::new(&damaged));
            }
        }
    }

    #[test]
    fn a_damaged_length_cannot_make_the_reader_allocate() {
        // Version 1, then a header claiming 2^62 samples and deflated columns of 2^62 bytes.
        let mut bytes = vec![0x81, 0x00];
        bytes.uvarint(1);
        bytes.ivarint(0);
        bytes.ivarint(0);
        bytes.ivarint(1);
        bytes.uvarint(1 << 62);
        bytes.uvarint(0);
        bytes.uvarint(0);
        bytes.push(DEFLATED);
        bytes.uvarint(1 << 62);
        bytes.bytes(&deflate(&[0; 64]));
        assert!(Block::decode(&mut Get::new(&bytes)).is_err());
    }

    #[test]
    fn unversioned_blocks_are_still_read() {
        for series in [0, 1, 7, 127, 128, 129, 0x81, 300, u32::MAX] {
            for mut b in [small(), large(0), Block::default()] {
                b.series = series;
                let old = encode_unversioned(&b);
                assert_eq!(Block::decode(&mut Get::new(&old)).unwrap(), b);
                for cut in cuts(old.len()) {
                    assert!(Block::decode(&mut Get::new(&old[..cut])).is_err());
                }
            }
        }
    }

    #[test]
    fn an_unknown_format_version_is_named() {
        let mut bytes = Vec::new();
        small().encode(&mut bytes);
        bytes[0] = 0x80 | 9;
        let e = Block::decode(&mut Get::new(&bytes)).unwrap_err();
        assert!(e.0.contains("version 9"), "{e}");
    }

    #[test]
    fn ids_are_stored_once_and_columns_take_little() {
        let b = large(1);
        let bytes = round_trip(&b);
        let traces: std::collections::HashSet<_> = b
            .link_table
            .iter()
            .filter(|(t, _)| *t != [0; 16])
            .map(|(t, _)| *t)
            .collect();
        // Ids stored once each, and the columns below two bytes per sample.
        let ids = 16 * traces.len() + 8 * b.link_table.len();
        assert!(
            bytes.len() < ids + 2 * b.nodes.len(),
            "{} bytes for {ids} bytes of ids and {} samples",
            bytes.len(),
            b.nodes.len()
        );
    }
}
