//! Bounded gzip decompression shared by every decoder, and compression for encoders.

use std::borrow::Cow;
use std::io::{Read, Write};

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
pub fn gunzip(bytes: &[u8], max: usize) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4).min(max));
    let decoder = flate2::read::MultiGzDecoder::new(bytes);
    // Read one byte past the limit so that "exactly max" and "more than max" differ.
    let n = decoder
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| FormatError::Gzip(e.to_string()))?;
    if n > max {
        return Err(FormatError::TooLarge { limit: max });
    }
    Ok(out)
}

/// Compresses `bytes` with gzip at the default level.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4 + 64),
        flate2::Compression::default(),
    );
    enc.write_all(bytes).expect("writing to a Vec cannot fail");
    enc.finish().expect("writing to a Vec cannot fail")
}
