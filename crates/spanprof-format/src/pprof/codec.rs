use prost::Message;

use super::Profile;
use crate::budget::Budget;
use crate::error::FormatError;
use crate::gzip;

/// Decodes a pprof profile from raw or gzip-compressed bytes (detected from the gzip magic).
///
/// Decompression stops with [`FormatError::TooLarge`] past `max_decompressed` bytes, and
/// decoding with [`FormatError::DecodedTooLarge`] past its [`crate::budget`].
pub fn decode(bytes: &[u8], max_decompressed: usize) -> Result<Profile, FormatError> {
    let mut profile = Profile::default();
    decode_into(bytes, max_decompressed, &mut profile)?;
    Ok(profile)
}

/// [`decode`] into `profile`, whose samples', locations' and strings' memory is reused (see
/// [`super::decode::decode_into`]): for a caller that decodes one profile after another.
pub fn decode_into(
    bytes: &[u8],
    max_decompressed: usize,
    profile: &mut Profile,
) -> Result<(), FormatError> {
    let raw = gzip::maybe_gunzip(bytes, max_decompressed)?;
    let budget = Budget::for_message(raw.len());
    super::decode::decode_into(profile, raw.as_ref(), &budget).map_err(|e| {
        if budget.exceeded() {
            budget.error("pprof profile")
        } else {
            FormatError::Invalid(format!("not a valid pprof Profile: {}", e.0))
        }
    })?;
    if profile.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(FormatError::Invalid(
            "pprof string_table[0] must be the empty string".into(),
        ));
    }
    Ok(())
}

/// Encodes a pprof profile without compression.
pub fn encode(profile: &Profile) -> Vec<u8> {
    profile.encode_to_vec()
}

/// Encodes a pprof profile gzip-compressed, as `go tool pprof` and `/debug/pprof` exchange it.
pub fn encode_gzip(profile: &Profile) -> Vec<u8> {
    gzip::gzip(&profile.encode_to_vec())
}
