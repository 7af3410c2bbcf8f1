//! Recognising and decoding any supported input: pprof (raw or gzip), OTLP protobuf
//! (`ExportProfilesServiceRequest` / `ProfilesData`, raw or gzip) and OTLP JSON.

use prost::Message;

use crate::error::FormatError;
use crate::gzip;
use crate::otlp::ProfilesData;
use crate::pprof;

/// What kind of bytes an input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A pprof `Profile`.
    Pprof,
    /// An OTLP `ProfilesData` or `ExportProfilesServiceRequest` in protobuf.
    OtlpProtobuf,
    /// The same in OTLP JSON.
    OtlpJson,
}

/// A decoded input.
#[derive(Debug, Clone)]
pub enum Input {
    /// A pprof profile.
    Pprof(pprof::Profile),
    /// OTLP profiles.
    Otlp(ProfilesData),
}

/// Tells the kind of already-decompressed bytes. pprof and OTLP are both protobuf: an OTLP
/// message has only top-level fields 1 and 2, while pprof always has a string table (field 6).
pub fn detect_kind(raw: &[u8]) -> Result<InputKind, FormatError> {
    let first = raw.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => return Err(FormatError::UnknownInput("the input is empty".into())),
        Some(b'{') => return Ok(InputKind::OtlpJson),
        _ => {}
    }
    let mut rest = raw;
    let mut only_otlp_fields = true;
    while !rest.is_empty() {
        let (key, n) = varint(rest).ok_or_else(not_protobuf)?;
        rest = &rest[n..];
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(not_protobuf());
        }
        only_otlp_fields &= field <= 2;
        let skip = match wire {
            0 => varint(rest).ok_or_else(not_protobuf)?.1,
            1 => 8,
            2 => {
                let (len, n) = varint(rest).ok_or_else(not_protobuf)?;
                usize::try_from(len)
                    .ok()
                    .and_then(|l| l.checked_add(n))
                    .ok_or_else(not_protobuf)?
            }
            5 => 4,
            _ => return Err(not_protobuf()),
        };
        rest = rest.get(skip..).ok_or_else(not_protobuf)?;
    }
    Ok(if only_otlp_fields {
        InputKind::OtlpProtobuf
    } else {
        InputKind::Pprof
    })
}

fn not_protobuf() -> FormatError {
    FormatError::UnknownInput("neither pprof nor OTLP Profiles (protobuf or JSON); the bytes are not a valid protobuf message".into())
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Decodes any supported input, decompressing gzip up to `max_decompressed` bytes.
pub fn decode_input(bytes: &[u8], max_decompressed: usize) -> Result<Input, FormatError> {
    let raw = gzip::maybe_gunzip(bytes, max_decompressed)?;
    match detect_kind(&raw)? {
        InputKind::Pprof => pprof::decode(&raw, max_decompressed).map(Input::Pprof),
        InputKind::OtlpProtobuf => decode_otlp_protobuf(&raw).map(Input::Otlp),
        InputKind::OtlpJson => crate::json::decode_profiles_data(&raw).map(Input::Otlp),
    }
}

/// Decodes OTLP protobuf, refusing payloads written with the v1.9 Sample numbering, which
/// would otherwise decode silently into the wrong fields.
pub fn decode_otlp_protobuf(raw: &[u8]) -> Result<ProfilesData, FormatError> {
    if let Some(message) = crate::check::detect_v1_9_numbering(raw) {
        return Err(FormatError::Invalid(message));
    }
    ProfilesData::decode(raw).map_err(|e| FormatError::Protobuf {
        what: "OTLP ProfilesData",
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart() {
        let p = pprof::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
        assert_eq!(detect_kind(&pprof::encode(&p)).unwrap(), InputKind::Pprof);
        let d = ProfilesData {
            dictionary: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(
            detect_kind(&d.encode_to_vec()).unwrap(),
            InputKind::OtlpProtobuf
        );
        assert_eq!(
            detect_kind(b"  {\"resourceProfiles\":[]}").unwrap(),
            InputKind::OtlpJson
        );
        assert!(matches!(
            detect_kind(b""),
            Err(FormatError::UnknownInput(_))
        ));
        assert!(matches!(
            detect_kind(b"\xff\xff\xff"),
            Err(FormatError::UnknownInput(_))
        ));
    }
}
