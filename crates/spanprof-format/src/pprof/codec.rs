use prost::Message;

use super::Profile;
use crate::allowance::{Budget, Pool};
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
/// `super::decode::decode_into`): for a caller that decodes one profile after another.
pub fn decode_into(
    bytes: &[u8],
    max_decompressed: usize,
    profile: &mut Profile,
) -> Result<(), FormatError> {
    decode_into_from(bytes, max_decompressed, profile, None)
}

/// [`decode_into`], with what the decoder allocates also drawn from `pool`
/// ([`FormatError::NoRoom`] when the pool runs out).
pub fn decode_into_drawing(
    bytes: &[u8],
    max_decompressed: usize,
    profile: &mut Profile,
    pool: &dyn Pool,
) -> Result<(), FormatError> {
    decode_into_from(bytes, max_decompressed, profile, Some(pool))
}

fn decode_into_from(
    bytes: &[u8],
    max_decompressed: usize,
    profile: &mut Profile,
    pool: Option<&dyn Pool>,
) -> Result<(), FormatError> {
    let raw = gzip::maybe_gunzip(bytes, max_decompressed)?;
    let budget = Budget::drawing(raw.len(), pool);
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
