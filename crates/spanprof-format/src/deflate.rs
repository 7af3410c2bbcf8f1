//! Whole-buffer raw deflate through libdeflate (the `libdeflater` wrapper).
//!
//! - [`inflate_into`], for inputs whose output size is known or bounded before they are
//!   inflated (a gzip member with its ISIZE trailer, a store block with its column length).
//!   libdeflate inflates such a buffer in one call, about twice as fast as a streaming
//!   inflater, but it says only that the data is bad, not how, nor where the stream ended:
//!   callers check the length against what they expected and fall back to their streaming
//!   inflater on `None` for a precise error (and for output that does not fit).
//! - [`deflate_into`], for small buffers compressed whole (the store's block columns, about
//!   700 bytes each): libdeflate's level 1 is faster than zlib-rs' level 2 and 1 % smaller.
//! - [`gzip_into`], for whole bodies sent gzipped (pprof answers, forwarded OTLP requests).

use std::cell::RefCell;

use libdeflater::{CompressionError, CompressionLvl, Compressor, Decompressor};

/// The level of [`deflate_into`]: libdeflate's fastest, which compresses store columns
/// better than zlib-rs' level 2 did.
pub const DEFLATE_LEVEL: i32 = 1;

/// The level of [`gzip_into`]: zlib's default, as gzip streams were made before.
pub const GZIP_LEVEL: i32 = 6;

thread_local! {
    /// Allocating one per call (about 10 KiB of tables) would cost more than small inputs
    /// take to inflate.
    static DECOMPRESSOR: RefCell<Decompressor> = RefCell::new(Decompressor::new());
    /// Likewise (their tables are larger than most inputs).
    static RAW_COMPRESSOR: RefCell<Compressor> = RefCell::new(Compressor::new(level(DEFLATE_LEVEL)));
    static GZIP_COMPRESSOR: RefCell<Compressor> = RefCell::new(Compressor::new(level(GZIP_LEVEL)));
}

fn level(level: i32) -> CompressionLvl {
    CompressionLvl::new(level).expect("a level libdeflate has (0-12)")
}

/// Appends the raw deflate stream of `raw` to `out`, compressed whole at [`DEFLATE_LEVEL`].
///
/// # Panics
///
/// When libdeflate cannot allocate its compressor (out of memory).
pub fn deflate_into(raw: &[u8], out: &mut Vec<u8>) {
    RAW_COMPRESSOR.with_borrow_mut(|c| {
        let bound = c.deflate_compress_bound(raw.len());
        compress(out, bound, |dst| c.deflate_compress(raw, dst))
    })
}

/// Appends a single-member gzip stream of `raw` to `out`, compressed whole at
/// [`GZIP_LEVEL`]: on a 45 KB Go CPU profile faster than zlib-rs at that level, and 5 %
/// smaller (16,085 bytes against 16,877).
///
/// # Panics
///
/// When libdeflate cannot allocate its compressor (out of memory).
pub fn gzip_into(raw: &[u8], out: &mut Vec<u8>) {
    GZIP_COMPRESSOR.with_borrow_mut(|c| {
        let bound = c.gzip_compress_bound(raw.len());
        compress(out, bound, |dst| c.gzip_compress(raw, dst))
    })
}

/// Runs `compress` on `bound` bytes appended to `out`, then keeps only those it wrote.
fn compress(
    out: &mut Vec<u8>,
    bound: usize,
    compress: impl FnOnce(&mut [u8]) -> Result<usize, CompressionError>,
) {
    let start = out.len();
    out.resize(start + bound, 0);
    // The bound is libdeflate's own for an input of this length: it always suffices.
    let written = compress(&mut out[start..]).expect("libdeflate's bound holds any input");
    out.truncate(start + written);
}

/// Inflates the raw deflate stream at the start of `stream`, appending its bytes to `out`,
/// when they are at most `room` bytes: `Some(bytes written)`, or `None` when the stream is
/// not valid deflate (truncated included) or holds more than `room` bytes. Bytes of
/// `stream` after the end of the deflate stream are not looked at (libdeflate does not say
/// where it ended): callers check what they got against a length or checksum they know. On
/// `None`, `out` is as it was.
///
/// # Panics
///
/// When libdeflate cannot allocate its decompressor (out of memory).
pub fn inflate_into(stream: &[u8], out: &mut Vec<u8>, room: usize) -> Option<usize> {
    let start = out.len();
    // Zero-filled first (the safe wrapper writes only initialized memory): a memset of the
    // output, a few per cent of inflating it (crates/spanprof-format/benches/deflate.rs).
    out.resize(start + room, 0);
    let result = DECOMPRESSOR.with_borrow_mut(|d| d.deflate_decompress(stream, &mut out[start..]));
    match result {
        Ok(written) => {
            out.truncate(start + written);
            Some(written)
        }
        Err(_) => {
            out.truncate(start);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn deflate(bytes: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        z.write_all(bytes).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn inflates_appends_and_reports_what_it_wrote() {
        let raw: Vec<u8> = (0..100_000u32)
            .map(|i| ((i % 251) ^ (i / 977)) as u8)
            .collect();
        let mut z = deflate(&raw);
        let len = z.len();
        z.extend_from_slice(b"after");
        let mut out = b"before".to_vec();
        assert!(len < z.len());
        // The bytes after the stream are not read.
        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(raw.len()));
        assert_eq!(&out[..6], b"before");
        assert_eq!(&out[6..], &raw[..]);
    }

    /// Output larger than the room, a truncated stream and bytes that are not deflate are
    /// all `None`, and leave the vector as it was.
    #[test]
    fn refuses_what_does_not_fit_or_is_not_deflate() {
        let raw = vec![7u8; 50_000];
        let z = deflate(&raw);
        for (stream, room) in [
            (&z[..], raw.len() - 1),
            (&z[..z.len() - 1], raw.len()),
            (&[0xffu8; 64][..], 1 << 20),
            (&[][..], 10),
        ] {
            let mut out = b"kept".to_vec();
            assert_eq!(inflate_into(stream, &mut out, room), None, "room {room}");
            assert_eq!(out, b"kept");
        }
        let mut out = Vec::new();
        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(raw.len()));
        assert_eq!(out, raw);
    }

    /// What [`deflate_into`] writes is standard raw deflate (zlib-rs reads it back) and
    /// follows what `out` held; empty input is a valid empty stream.
    #[test]
    fn deflates_what_any_inflater_reads() {
        for raw in [
            Vec::new(),
            vec![0u8; 1],
            (0..70_000u32).map(|i| (i % 13) as u8).collect(),
            (0..5_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ] {
            let mut out = b"head".to_vec();
            deflate_into(&raw, &mut out);
            assert_eq!(&out[..4], b"head");
            let mut back = Vec::new();
            let mut z = flate2::read::DeflateDecoder::new(&out[4..]);
            std::io::Read::read_to_end(&mut z, &mut back).unwrap();
            assert_eq!(back, raw);
            let mut again = Vec::new();
            assert_eq!(
                inflate_into(&out[4..], &mut again, raw.len()),
                Some(raw.len())
            );
            assert_eq!(again, raw);
        }
    }

    /// [`gzip_into`] writes one standard gzip member (zlib-rs' reader checks its CRC-32 and
    /// size), after what `out` held.
    #[test]
    fn gzips_what_any_reader_reads() {
        let raw: Vec<u8> = (0..90_000u32).map(|i| (i % 97 * 3) as u8).collect();
        let mut out = b"x".to_vec();
        gzip_into(&raw, &mut out);
        assert!(out.len() < raw.len() / 4);
        let mut back = Vec::new();
        let mut z = flate2::read::GzDecoder::new(&out[1..]);
        std::io::Read::read_to_end(&mut z, &mut back).unwrap();
        assert_eq!(back, raw);
    }

    /// Each thread has its own decompressor and compressor.
    #[test]
    fn works_on_many_threads() {
        let raw: Vec<u8> = (0..20_000u32).map(|i| (i * 31 % 256) as u8).collect();
        let mut z = Vec::new();
        deflate_into(&raw, &mut z);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let mut mine = Vec::new();
                        deflate_into(&raw, &mut mine);
                        assert_eq!(mine, z);
                        let mut out = Vec::new();
                        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(raw.len()));
                        assert_eq!(out, raw);
                    }
                });
            }
        });
    }
}
