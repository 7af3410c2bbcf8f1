use prost::Message;

use super::Profile;
use crate::error::FormatError;
use crate::gzip;

/// Decodes a pprof profile from raw or gzip-compressed bytes (detected from the gzip magic).
///
/// Decompression stops with [`FormatError::TooLarge`] past `max_decompressed` bytes.
pub fn decode(bytes: &[u8], max_decompressed: usize) -> Result<Profile, FormatError> {
    let raw = gzip::maybe_gunzip(bytes, max_decompressed)?;
    let profile = super::decode::decode_profile(raw.as_ref())
        .map_err(|e| FormatError::Invalid(format!("not a valid pprof Profile: {}", e.0)))?;
    if profile.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(FormatError::Invalid(
            "pprof string_table[0] must be the empty string".into(),
        ));
    }
    Ok(profile)
}

/// Encodes a pprof profile without compression.
pub fn encode(profile: &Profile) -> Vec<u8> {
    profile.encode_to_vec()
}

/// Encodes a pprof profile gzip-compressed, as `go tool pprof` and `/debug/pprof` exchange it.
pub fn encode_gzip(profile: &Profile) -> Vec<u8> {
    gzip::gzip(&profile.encode_to_vec())
}
