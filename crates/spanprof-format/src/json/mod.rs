//! OTLP JSON encoding of profiles, following the OTLP/HTTP JSON rules rather than plain
//! proto3 JSON:
//!
//! - keys are lowerCamelCase on output; the decoder also takes the snake_case proto names
//!   and ignores fields it does not know;
//! - `Link.traceId`/`spanId` and `Profile.profileId` are hex (either case on input);
//!   other bytes are base64, padded standard alphabet on output, padded or not (standard or
//!   URL-safe) on input;
//! - 64-bit integers are decimal strings on output and numbers or strings on input; 32-bit
//!   integers are numbers (strings accepted);
//! - fields at their default are left out, but every table entry is written, so zero
//!   entries read `{}` and `stringTable` keeps its leading `""`;
//! - doubles are numbers, except `"NaN"`, `"Infinity"` and `"-Infinity"`.
//!
//! The crate's own `with-serde` derive is not used: it writes link ids as byte arrays and
//! most 64-bit integers as numbers.

pub mod base64;
pub(crate) mod decode;
pub(crate) mod encode;
mod hex;
pub(crate) mod reader;

#[cfg(test)]
mod decode_tests;
#[cfg(test)]
pub(crate) mod proptests;
#[cfg(test)]
mod tests;

use crate::error::FormatError;
use crate::otlp::ProfilesData;

/// Deepest nesting of `arrayValue`/`kvlistValue` that [`decode_profiles_data`] accepts in one
/// attribute value, counting an attribute's own value as level 1. Deeper input is an error
/// rather than unbounded recursion; the encoder does not check it.
pub const MAX_VALUE_DEPTH: usize = 64;

/// Encodes `data` as compact OTLP JSON (no whitespace).
///
/// An `ExportProfilesServiceRequest` has the same fields: convert it to `ProfilesData` first.
/// Ids are written in hex whatever their length; only 16-byte trace and profile ids and
/// 8-byte span ids (or empty ones) decode again.
pub fn encode_profiles_data(data: &ProfilesData) -> String {
    encode::document(data, false)
}

/// Encodes `data` as OTLP JSON indented by two spaces per level, for people to read.
/// It decodes to the same message as [`encode_profiles_data`]'s output.
pub fn encode_profiles_data_pretty(data: &ProfilesData) -> String {
    encode::document(data, true)
}

/// Decodes an OTLP JSON `ProfilesData` (or `ExportProfilesServiceRequest`) document.
///
/// Fails with [`FormatError::Json`] naming the path of the offending value, e.g.
/// `resourceProfiles[0].scopeProfiles[0].profiles[2].samples[3].values[0]: expected an
/// integer, found an object`. Never panics, whatever the input.
pub fn decode_profiles_data(json: &[u8]) -> Result<ProfilesData, FormatError> {
    decode_profiles_data_from(json, None)
}

/// [`decode_profiles_data`], with what the decoder allocates also drawn from `pool`
/// ([`FormatError::NoRoom`] when the pool runs out).
pub fn decode_profiles_data_drawing(
    json: &[u8],
    pool: &dyn crate::allowance::Pool,
) -> Result<ProfilesData, FormatError> {
    decode_profiles_data_from(json, Some(pool))
}

fn decode_profiles_data_from(
    json: &[u8],
    pool: Option<&dyn crate::allowance::Pool>,
) -> Result<ProfilesData, FormatError> {
    let data = decode::document(json, pool)?;
    // Another signal's OTLP JSON decodes as empty profiles (unknown fields are skipped):
    // said rather than taken as nothing.
    if data.resource_profiles.is_empty() {
        if let Some((key, signal)) = other_signal(json) {
            return Err(FormatError::Invalid(format!(
                "this is OTLP {signal} ({key}), not OTLP Profiles (resourceProfiles)"
            )));
        }
    }
    Ok(data)
}

/// The top-level key of another OTLP signal in `json`, and the signal.
fn other_signal(json: &[u8]) -> Option<(&'static str, &'static str)> {
    let text = String::from_utf8_lossy(&json[..json.len().min(1 << 16)]);
    [
        ("resourceSpans", "traces"),
        ("resource_spans", "traces"),
        ("resourceMetrics", "metrics"),
        ("resource_metrics", "metrics"),
        ("resourceLogs", "logs"),
        ("resource_logs", "logs"),
    ]
    .into_iter()
    .find(|(key, _)| text.contains(&format!("\"{key}\"")))
}
