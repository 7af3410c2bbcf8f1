//! Bounded gzip decompression shared by every decoder, and compression for encoders.

use std::borrow::Cow;

use crate::error::FormatError;

/// The default cap on decompressed input, in bytes (64 MiB, the OTLP recommendation).
pub const DEFAULT_MAX_DECOMPRESSED: usize = 64 << 20;

/// Whether `bytes` start with the gzip magic number.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Returns `bytes` decompressed when they are gzip, or unchanged otherwise.
///
/// A decompressed size over `max` is [`FormatError::TooLarge`]; uncompressed input larger
/// than `max` is refused the same way, so the limit bounds memory whatever the input.
pub fn maybe_gunzip(bytes: &[u8], max: usize) -> Result<Cow<'_, [u8]>, FormatError> {
    if !is_gzip(bytes) {
        if bytes.len() > max {
            return Err(FormatError::TooLarge { limit: max });
        }
        return Ok(Cow::Borrowed(bytes));
    }
    gunzip(bytes, max).map(Cow::Owned)
}

/// Decompresses a (possibly multi-member) gzip stream, refusing to produce more than `max` bytes.
///
/// Checks each member's CRC-32 and length. A single-member stream (what every client sends)
/// is inflated in one call by libdeflate ([`crate::deflate`]) into the size its trailer
/// says; anything else (several members, a forged size, damage) goes member by member
/// through zlib-rs' streaming inflater, which grows the output and says what is wrong.
pub fn gunzip(bytes: &[u8], max: usize) -> Result<Vec<u8>, FormatError> {
    if let Some(out) = gunzip_one_member(bytes, max) {
        return Ok(out);
    }
    let mut out = Vec::with_capacity(initial_capacity(bytes, max));
    let mut inflater = None;
    let mut rest = bytes;
    loop {
        let body = skip_header(rest)?;
        let member_start = out.len();
        let inflater = inflater.get_or_insert_with(|| flate2::Decompress::new(false));
        let consumed = inflate_member(inflater, body, &mut out, max)?;
        if out.len() > max {
            return Err(FormatError::TooLarge { limit: max });
        }
        let trailer = body.get(consumed..consumed + 8).ok_or_else(|| {
            FormatError::Gzip("truncated: the CRC-32 and size trailer is missing".into())
        })?;
        let mut crc = flate2::Crc::new();
        crc.update(&out[member_start..]);
        let (want_crc, want_len) = (le32(&trailer[..4]), le32(&trailer[4..]));
        if crc.sum() != want_crc {
            return Err(FormatError::Gzip(
                "CRC-32 mismatch: the data is corrupt".into(),
            ));
        }
        if (out.len() - member_start) as u32 != want_len {
            return Err(FormatError::Gzip(
                "length mismatch: the data is corrupt".into(),
            ));
        }
        rest = &body[consumed + 8..];
        if rest.is_empty() {
            return Ok(out);
        }
    }
}

/// The stream inflated in one libdeflate call, when it is one well-formed member whose
/// output fits `max`: its trailer (the last 8 bytes) gives the size to inflate into and the
/// CRC-32 to check. `None` for anything else, which [`gunzip`] reads member by member (and
/// says what is wrong).
fn gunzip_one_member(bytes: &[u8], max: usize) -> Option<Vec<u8>> {
    let body = skip_header(bytes).ok()?;
    let (stream, trailer) = body.split_at(body.len().checked_sub(8)?);
    // libdeflate does not say where the deflate stream ended, so a second member would go
    // unseen (with identical content, even its trailer would match): a stream holding a
    // member header's bytes (rare in deflate data, 2^-24 a position) goes the slow way.
    if memchr::memmem::find(stream, &[0x1f, 0x8b, 0x08]).is_some() {
        return None;
    }
    let want_len = le32(&trailer[4..]) as usize;
    // Deflate's best ratio is about 1032:1: a larger size is forged.
    if want_len > max || want_len > stream.len().saturating_mul(1032) {
        return None;
    }
    let mut out = Vec::new();
    if crate::deflate::inflate_into(stream, &mut out, want_len)? != want_len {
        return None;
    }
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    (crc.sum() == le32(&trailer[..4])).then_some(out)
}

/// Inflates the deflate stream at the start of `body` onto `out` with a streaming inflater,
/// growing `out` by doubling but never past one byte over `max`; the bytes of `body` read.
fn inflate_member(
    inflater: &mut flate2::Decompress,
    body: &[u8],
    out: &mut Vec<u8>,
    max: usize,
) -> Result<usize, FormatError> {
    inflater.reset(false);
    loop {
        if out.len() == out.capacity() {
            let grow = out
                .len()
                .max(32 << 10)
                .min(max.saturating_add(1) - out.len());
            out.reserve_exact(grow);
        }
        let consumed = inflater.total_in() as usize;
        let produced = out.len();
        let status = inflater
            .decompress_vec(&body[consumed..], out, flate2::FlushDecompress::None)
            .map_err(|e| {
                FormatError::Gzip(format!("corrupt deflate data: {}", inflate_problem(&e)))
            })?;
        if out.len() > max {
            return Err(FormatError::TooLarge { limit: max });
        }
        match status {
            flate2::Status::StreamEnd => return Ok(inflater.total_in() as usize),
            _ if inflater.total_in() as usize == consumed && out.len() == produced => {
                return Err(FormatError::Gzip(
                    "truncated: the data ends before the end of the compressed stream".into(),
                ));
            }
            _ => {}
        }
    }
}

/// A first guess at the output size: the trailer's ISIZE of a single-member stream, bounded
/// by the limit and by deflate's best possible ratio (about 1032:1), so a forged trailer
/// cannot make us allocate much.
fn initial_capacity(bytes: &[u8], max: usize) -> usize {
    let isize = bytes
        .len()
        .checked_sub(4)
        .map_or(0, |i| le32(&bytes[i..]) as usize);
    isize.min(bytes.len().saturating_mul(1032)).min(max) + 1
}

/// What is wrong with the deflate data, as the inflater says it. zlib-rs reports some damage
/// it finds on its fast path (a distance too far back) as "repeated call with bad state",
/// which would send a user looking for a bug in the caller: that is said as what it is.
fn inflate_problem(e: &flate2::DecompressError) -> &str {
    match e.message() {
        Some("repeated call with bad state") | None => "invalid compressed data",
        Some(m) => m,
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The bytes after a gzip member header (RFC 1952 §2.3).
fn skip_header(b: &[u8]) -> Result<&[u8], FormatError> {
    let truncated = || FormatError::Gzip("truncated header".into());
    if b.len() < 10 {
        return Err(truncated());
    }
    if !is_gzip(b) {
        return Err(FormatError::Gzip(
            "unexpected bytes after the gzip stream (not a gzip header)".into(),
        ));
    }
    if b[2] != 8 {
        return Err(FormatError::Gzip(format!(
            "unsupported compression method {}",
            b[2]
        )));
    }
    let flags = b[3];
    if flags & 0xe0 != 0 {
        return Err(FormatError::Gzip("reserved header flags are set".into()));
    }
    let mut pos = 10;
    if flags & 0x04 != 0 {
        let xlen = b.get(pos..pos + 2).ok_or_else(truncated)?;
        pos += 2 + usize::from(u16::from_le_bytes([xlen[0], xlen[1]]));
    }
    for flag in [0x08, 0x10] {
        if flags & flag != 0 {
            let end = b
                .get(pos..)
                .and_then(|r| r.iter().position(|&c| c == 0))
                .ok_or_else(truncated)?;
            pos += end + 1;
        }
    }
    if flags & 0x02 != 0 {
        pos += 2;
    }
    b.get(pos..).ok_or_else(truncated)
}

/// Compresses `bytes` with gzip at zlib's default level ([`crate::deflate::gzip_into`]).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::deflate::gzip_into(bytes, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn round_trips_and_reads_multi_member_streams() {
        let a = gzip(b"hello ");
        let b = gzip(b"world");
        let both = [a.clone(), b].concat();
        assert_eq!(gunzip(&both, 100).unwrap(), b"hello world");
        assert_eq!(gunzip(&gzip(&[]), 100).unwrap(), b"");
        // A header with every optional field set.
        let mut enc = flate2::GzBuilder::new()
            .filename("f.pprof")
            .comment("c")
            .extra(vec![1, 2, 3])
            .write(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"payload").unwrap();
        assert_eq!(gunzip(&enc.finish().unwrap(), 100).unwrap(), b"payload");
    }

    /// A deflate bit stream, written least significant bit first.
    #[derive(Default)]
    struct Bits {
        bytes: Vec<u8>,
        used: u32,
    }

    impl Bits {
        /// The low `n` bits of `v`, lowest first (header fields, extra bits).
        fn put(&mut self, v: u32, n: u32) {
            for i in 0..n {
                if self.used.is_multiple_of(8) {
                    self.bytes.push(0);
                }
                let last = self.bytes.last_mut().expect("pushed above");
                *last |= u8::try_from((v >> i) & 1).expect("one bit") << (self.used % 8);
                self.used += 1;
            }
        }

        /// A Huffman code of `n` bits, which deflate packs highest bit first.
        fn code(&mut self, code: u32, n: u32) {
            for i in (0..n).rev() {
                self.put(code >> i, 1);
            }
        }
    }

    #[test]
    fn damage_is_reported() {
        let good = gzip(&[7u8; 1000]);
        let mut bad_crc = good.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 1;
        assert!(gunzip(&bad_crc, 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("CRC-32 mismatch"));
        assert!(gunzip(&good[..n - 3], 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("trailer is missing"));
        assert!(gunzip(&good[..n - 12], 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("truncated"));
        assert!(gunzip(&good[..5], 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("truncated header"));
        // A back-reference further back than the output so far, after enough literals for
        // zlib-rs's fast path (which called it "repeated call with bad state").
        let mut bits = Bits::default();
        bits.put(0b011, 3); // the last block, fixed Huffman codes
        for _ in 0..100 {
            bits.code(0x30 + u32::from(b'a'), 8);
        }
        bits.code(1, 7); // length 3
        bits.code(20, 5); // distance 1025 (+ 9 extra bits): only 100 bytes are written
        bits.put(0, 9);
        for _ in 0..100 {
            bits.code(0x30 + u32::from(b'b'), 8);
        }
        bits.code(0, 7); // end of block
        let far = [
            &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255][..],
            &bits.bytes,
            &[0; 8],
        ]
        .concat();
        let err = gunzip(&far, 1 << 20).unwrap_err().to_string();
        assert!(
            err.contains("corrupt deflate data") && !err.contains("bad state"),
            "{err}"
        );
        let trailing = [good.clone(), b"junk".to_vec()].concat();
        assert!(gunzip(&trailing, 1 << 20).is_err());
        assert!(matches!(
            gunzip(&good, 999),
            Err(FormatError::TooLarge { limit: 999 })
        ));
        assert_eq!(gunzip(&good, 1000).unwrap().len(), 1000);
    }

    /// The trailer's size only sizes the output: a member holding more than it says is
    /// inflated whole by the streaming inflater and then refused by the length check, as is
    /// one holding less; a size claiming more than deflate can make allocates no more.
    #[test]
    fn a_forged_size_is_only_a_guess() {
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        let good = gzip(&raw);
        let n = good.len();
        for forged in [10u32, 4999, 5001, u32::MAX] {
            let mut bad = good.clone();
            bad[n - 4..].copy_from_slice(&forged.to_le_bytes());
            let err = gunzip(&bad, 1 << 20).unwrap_err().to_string();
            assert!(err.contains("length mismatch"), "{forged}: {err}");
        }
        // Each member of a multi-member stream: the first is larger than the last one's size.
        let both = [good.clone(), gzip(b"tail")].concat();
        let out = gunzip(&both, 1 << 20).unwrap();
        assert_eq!(&out[..5000], &raw[..]);
        assert_eq!(&out[5000..], b"tail");
        assert!(matches!(
            gunzip(&both, 5003),
            Err(FormatError::TooLarge { limit: 5003 })
        ));
    }

    /// The largest limit is no limit: neither the one-call nor the streaming path overflows
    /// computing its room one byte past it.
    #[test]
    fn the_largest_limit_is_no_limit() {
        let raw: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let good = gzip(&raw);
        let both = [gzip(&raw[..40_000]), gzip(&raw[40_000..])].concat();
        let mut forged = good.clone();
        let n = forged.len();
        forged[n - 4..].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(gunzip(&good, usize::MAX).unwrap(), raw);
        assert_eq!(gunzip(&both, usize::MAX).unwrap(), raw);
        assert!(gunzip(&forged, usize::MAX).is_err());
        assert_eq!(&*maybe_gunzip(&raw, usize::MAX).unwrap(), &raw[..]);
    }
}
