//! Whole-buffer raw deflate through libdeflate.
//!
//! - [`inflate_into`], for inputs whose output size is known or bounded before they are
//!   inflated (a gzip member with its ISIZE trailer, a store block with its column length).
//!   libdeflate inflates such a buffer in one call, about twice as fast as a streaming
//!   inflater (measured on a Go CPU profile: 95 µs against zlib-rs' 190 µs), but it says only
//!   that the data is bad, not how: callers fall back to their streaming inflater on `None`
//!   for a precise error (and for output that does not fit).
//! - [`deflate_into`], for small buffers compressed whole (the store's block columns, about
//!   700 bytes each): libdeflate's level 1 took 12-15 µs a block where zlib-rs' level 2 took
//!   20-25 µs (whose reset clears 64 KiB of hash table each time), and its output was 1 %
//!   smaller.
//! - [`gzip_into`], for whole bodies sent gzipped (pprof answers, forwarded OTLP requests).

use std::ffi::c_void;
use std::ptr::NonNull;

use libdeflate_sys::{
    libdeflate_alloc_compressor, libdeflate_alloc_decompressor, libdeflate_compressor,
    libdeflate_decompressor, libdeflate_deflate_compress, libdeflate_deflate_compress_bound,
    libdeflate_deflate_decompress_ex, libdeflate_free_compressor, libdeflate_free_decompressor,
    libdeflate_gzip_compress, libdeflate_gzip_compress_bound, libdeflate_result_LIBDEFLATE_SUCCESS,
};

/// The level of [`deflate_into`]: libdeflate's fastest, which compresses store columns
/// better than zlib-rs' level 2 did.
pub const DEFLATE_LEVEL: i32 = 1;

/// One libdeflate decompressor (about 10 KiB of tables), owned by one thread.
struct Decompressor(NonNull<libdeflate_decompressor>);

impl Decompressor {
    fn new() -> Option<Self> {
        // SAFETY: no arguments; a null result (out of memory) is checked.
        NonNull::new(unsafe { libdeflate_alloc_decompressor() }).map(Decompressor)
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_decompressor and freed once, here.
        unsafe { libdeflate_free_decompressor(self.0.as_ptr()) }
    }
}

/// One libdeflate compressor at one level, owned by one thread.
struct Compressor(NonNull<libdeflate_compressor>);

impl Compressor {
    fn new(level: i32) -> Option<Self> {
        // SAFETY: a valid level (1-12); a null result (out of memory) is checked.
        NonNull::new(unsafe { libdeflate_alloc_compressor(level) }).map(Compressor)
    }
}

impl Drop for Compressor {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_compressor and freed once, here.
        unsafe { libdeflate_free_compressor(self.0.as_ptr()) }
    }
}

/// The level of [`gzip_into`]: zlib's default, as gzip streams were made before.
pub const GZIP_LEVEL: i32 = 6;

thread_local! {
    /// Allocating one per call would cost more than small inputs take to inflate.
    static DECOMPRESSOR: Option<Decompressor> = Decompressor::new();
    /// Likewise (their tables are larger than most inputs).
    static RAW_COMPRESSOR: Option<Compressor> = Compressor::new(DEFLATE_LEVEL);
    static GZIP_COMPRESSOR: Option<Compressor> = Compressor::new(GZIP_LEVEL);
}

/// A libdeflate compression call: its output bound and the compression itself (raw deflate
/// or gzip), as libdeflate declares them.
type Bound = unsafe extern "C" fn(*mut libdeflate_compressor, usize) -> usize;
type Compress = unsafe extern "C" fn(
    *mut libdeflate_compressor,
    *const c_void,
    usize,
    *mut c_void,
    usize,
) -> usize;

/// Appends the raw deflate stream of `raw` to `out`, compressed whole at [`DEFLATE_LEVEL`].
///
/// # Panics
///
/// When libdeflate cannot allocate its compressor (out of memory).
pub fn deflate_into(raw: &[u8], out: &mut Vec<u8>) {
    RAW_COMPRESSOR.with(|c| {
        compress(
            c,
            raw,
            out,
            libdeflate_deflate_compress_bound,
            libdeflate_deflate_compress,
        )
    })
}

/// Appends a single-member gzip stream of `raw` to `out`, compressed whole at
/// [`GZIP_LEVEL`]: on a 45 KB Go CPU profile 20-30 % faster than zlib-rs at that level, and
/// 5 % smaller (16,085 bytes against 16,877).
///
/// # Panics
///
/// When libdeflate cannot allocate its compressor (out of memory).
pub fn gzip_into(raw: &[u8], out: &mut Vec<u8>) {
    GZIP_COMPRESSOR.with(|c| {
        compress(
            c,
            raw,
            out,
            libdeflate_gzip_compress_bound,
            libdeflate_gzip_compress,
        )
    })
}

fn compress(
    c: &Option<Compressor>,
    raw: &[u8],
    out: &mut Vec<u8>,
    bound_of: Bound,
    compress: Compress,
) {
    let c = c.as_ref().expect("allocating libdeflate's compressor");
    // SAFETY: the compressor is this thread's and not in use.
    let bound = unsafe { bound_of(c.0.as_ptr(), raw.len()) };
    out.reserve(bound);
    let spare = out.spare_capacity_mut();
    // SAFETY: `raw` is readable for its length, the spare capacity writable for `bound`
    // bytes (reserved above), which is enough for any input of this length: the call
    // cannot fail, and returns the bytes it wrote.
    let written = unsafe {
        compress(
            c.0.as_ptr(),
            raw.as_ptr().cast::<c_void>(),
            raw.len(),
            spare.as_mut_ptr().cast::<c_void>(),
            bound,
        )
    };
    assert!(
        written > 0 && written <= bound,
        "libdeflate wrote {written} of at most {bound} bytes"
    );
    // SAFETY: libdeflate initialized `written` bytes of the spare capacity.
    unsafe { out.set_len(out.len() + written) };
}

/// Inflates the raw deflate stream at the start of `stream`, appending its bytes to `out`,
/// when they are at most `room` bytes: `Some(bytes of stream read)`, or `None` when the
/// stream is not valid deflate (truncated included) or holds more than `room` bytes. On
/// `None`, `out` is as it was. `out` grows by `room` bytes of capacity first: callers bound
/// it by what the output can be.
pub fn inflate_into(stream: &[u8], out: &mut Vec<u8>, room: usize) -> Option<usize> {
    out.reserve(room);
    DECOMPRESSOR.with(|d| {
        let d = d.as_ref()?;
        let (mut read, mut written) = (0usize, 0usize);
        let spare = out.spare_capacity_mut();
        // SAFETY: the decompressor is this thread's and not in use (the call does not
        // reenter); `stream` is readable for its length; the spare capacity is writable for
        // `room` bytes (reserved above), and libdeflate only writes it (reading back only
        // bytes it wrote). On success it wrote `written` bytes, at most `room`.
        let result = unsafe {
            libdeflate_deflate_decompress_ex(
                d.0.as_ptr(),
                stream.as_ptr().cast::<c_void>(),
                stream.len(),
                spare.as_mut_ptr().cast::<c_void>(),
                room,
                &mut read,
                &mut written,
            )
        };
        if result != libdeflate_result_LIBDEFLATE_SUCCESS {
            return None;
        }
        debug_assert!(written <= room && read <= stream.len());
        // SAFETY: libdeflate initialized `written` bytes of the spare capacity.
        unsafe { out.set_len(out.len() + written) };
        Some(read)
    })
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
    fn inflates_appends_and_reports_what_it_read() {
        let raw: Vec<u8> = (0..100_000u32)
            .map(|i| ((i % 251) ^ (i / 977)) as u8)
            .collect();
        let mut z = deflate(&raw);
        let len = z.len();
        z.extend_from_slice(b"after");
        let mut out = b"before".to_vec();
        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(len));
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
        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(z.len()));
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
                Some(out.len() - 4)
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
                        assert_eq!(inflate_into(&z, &mut out, raw.len()), Some(z.len()));
                        assert_eq!(out, raw);
                    }
                });
            }
        });
    }
}
