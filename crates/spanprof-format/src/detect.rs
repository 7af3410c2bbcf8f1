//! Recognising and decoding any supported input: pprof (raw or gzip), OTLP protobuf
//! (`ExportProfilesServiceRequest` / `ProfilesData`, raw or gzip), OTLP JSON, and JFR
//! recordings (raw or gzip).

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
    /// A JFR recording (starts with `FLR\0`).
    Jfr,
}

/// A decoded input.
#[derive(Debug, Clone)]
pub enum Input {
    /// A pprof profile.
    Pprof(pprof::Profile),
    /// OTLP profiles.
    Otlp(ProfilesData),
    /// A JFR recording: one pprof profile per kind of sample, and what reading it found.
    Jfr(Vec<crate::jfr::JfrProfile>, crate::jfr::JfrReport),
}

/// Tells the kind of already-decompressed bytes. pprof and OTLP are both protobuf: an OTLP
/// message has only top-level fields 1 and 2, while pprof always has a string table (field 6).
pub fn detect_kind(raw: &[u8]) -> Result<InputKind, FormatError> {
    if crate::jfr::is_jfr(raw) {
        return Ok(InputKind::Jfr);
    }
    let first = raw.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => return Err(FormatError::UnknownInput("the input is empty".into())),
        Some(b'{') => return Ok(InputKind::OtlpJson),
        _ => {}
    }
    protobuf_kind(raw).map_err(|e| text_instead(raw).unwrap_or(e))
}

/// When `raw` is text (an error message or page saved where a profile was expected: Go
/// answers "Could not enable CPU profiling: cpu profiling already in use" while another
/// CPU profile is being taken), an error quoting its start.
fn text_instead(raw: &[u8]) -> Option<FormatError> {
    let head = &raw[..raw.len().min(160)];
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // Cut inside a multi-byte character: what is valid before it.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let printable = text
        .chars()
        .all(|c| !c.is_control() || c.is_ascii_whitespace());
    if !printable || text.trim().is_empty() {
        return None;
    }
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(FormatError::UnknownInput(format!(
        "neither pprof nor OTLP Profiles: the input is text, {line:?}{} (an error message \
         saved in place of a profile?)",
        if raw.len() > head.len() { "…" } else { "" }
    )))
}

fn protobuf_kind(raw: &[u8]) -> Result<InputKind, FormatError> {
    let mut rest = raw;
    let mut only_otlp_fields = true;
    while !rest.is_empty() {
        let at = raw.len() - rest.len();
        let (key, n) = varint(rest).ok_or_else(|| cut_varint(raw.len(), at, 0, rest))?;
        rest = &rest[n..];
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(not_protobuf());
        }
        only_otlp_fields &= field <= 2;
        let skip = match wire {
            0 => {
                varint(rest)
                    .ok_or_else(|| cut_varint(raw.len(), at, field, rest))?
                    .1
            }
            1 => 8,
            2 => {
                let (len, n) =
                    varint(rest).ok_or_else(|| cut_varint(raw.len(), at, field, rest))?;
                usize::try_from(len)
                    .ok()
                    .and_then(|l| l.checked_add(n))
                    .ok_or_else(not_protobuf)?
            }
            5 => 4,
            _ => return Err(not_protobuf()),
        };
        rest = rest
            .get(skip..)
            .ok_or_else(|| truncated(raw.len(), at, field, skip - rest.len()))?;
    }
    Ok(if only_otlp_fields {
        InputKind::OtlpProtobuf
    } else {
        InputKind::Pprof
    })
}

/// A field of a known message (pprof's fields are 1-14, OTLP's 1-2) that runs past the end
/// by no more than the largest input read: a file cut short, named so rather than "not
/// protobuf". Longer runs are more likely garbage.
fn truncated(len: usize, at: usize, field: u64, missing: usize) -> FormatError {
    if field > 14 || missing > 1 << 30 {
        return not_protobuf();
    }
    FormatError::UnknownInput(format!(
        "the input is truncated: it ends after {len} bytes, {missing} bytes short of the end \
         of the protobuf field that starts at byte {at} (a file cut short, or a download \
         interrupted?)"
    ))
}

/// A varint that `rest` ends inside of (every byte says more follow) is a cut; else not
/// protobuf. `field` 0: the cut is in the key, which counts only after a whole field.
fn cut_varint(len: usize, at: usize, field: u64, rest: &[u8]) -> FormatError {
    if (field > 0 || at > 0) && rest.len() < 10 && rest.iter().all(|b| b & 0x80 != 0) {
        truncated(len, at, field.max(1), 1)
    } else {
        not_protobuf()
    }
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
    decode_input_with_labels(bytes, max_decompressed, None)
}

/// [`decode_input`], with the labels snapshot that gives a JFR recording's `contextId`s
/// their labels (the Pyroscope Java agent uploads one beside each recording).
pub fn decode_input_with_labels(
    bytes: &[u8],
    max_decompressed: usize,
    labels: Option<&crate::jfr::LabelsSnapshot>,
) -> Result<Input, FormatError> {
    let raw = gzip::maybe_gunzip(bytes, max_decompressed)?;
    match detect_kind(&raw)? {
        InputKind::Jfr => {
            let (profiles, report) =
                crate::jfr::jfr_to_pprof(&raw, labels, &crate::jfr::JfrOptions::default())?;
            Ok(Input::Jfr(profiles, report))
        }
        InputKind::Pprof => pprof::decode(&raw, max_decompressed).map(Input::Pprof),
        InputKind::OtlpProtobuf => decode_otlp_protobuf(&raw).map(Input::Otlp),
        InputKind::OtlpJson => crate::json::decode_profiles_data(&raw).map(Input::Otlp),
    }
}

/// Decodes OTLP protobuf, refusing payloads written with the v1.9 Sample numbering, which
/// would otherwise decode silently into the wrong fields. The decoder tallies how each sample
/// would read under either numbering as it goes; only bytes it refuses are looked at again
/// ([`crate::check::detect_v1_9_numbering`]), as v1.9 attribute indices do not decode under
/// v1.10 and deserve a better answer than a wire type error.
///
/// A message that would decode to more than its [`crate::budget`] allows is
/// [`FormatError::DecodedTooLarge`].
pub fn decode_otlp_protobuf(raw: &[u8]) -> Result<ProfilesData, FormatError> {
    decode_otlp_protobuf_from(raw, None)
}

/// [`decode_otlp_protobuf`], with what the decoder allocates also drawn from `pool`
/// ([`FormatError::NoRoom`] when the pool runs out).
pub fn decode_otlp_protobuf_drawing(
    raw: &[u8],
    pool: &dyn crate::allowance::Pool,
) -> Result<ProfilesData, FormatError> {
    decode_otlp_protobuf_from(raw, Some(pool))
}

fn decode_otlp_protobuf_from(
    raw: &[u8],
    pool: Option<&dyn crate::allowance::Pool>,
) -> Result<ProfilesData, FormatError> {
    let mut samples = crate::otlp::Tally::default();
    let budget = crate::allowance::Budget::drawing(raw.len(), pool);
    match crate::otlp::decode_tallied(raw, &budget, &mut samples) {
        Ok(data) => match samples.verdict() {
            Some(message) => Err(FormatError::Invalid(message)),
            None => Ok(data),
        },
        Err(_) if budget.exceeded() => Err(budget.error("OTLP ProfilesData")),
        Err(e) => Err(FormatError::Invalid(
            crate::check::detect_v1_9_numbering(raw)
                .unwrap_or_else(|| format!("not a valid OTLP ProfilesData: {}", e.0)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn text_in_place_of_a_profile_is_quoted() {
        let go = b"Could not enable CPU profiling: cpu profiling already in use\n";
        let e = detect_kind(go).unwrap_err().to_string();
        assert!(
            e.contains(
                "the input is text, \"Could not enable CPU profiling: cpu profiling already in use\""
            ) && e.contains("an error message saved in place of a profile?"),
            "{e}"
        );
        let page = "<html>\n<title>502 Bad Gateway</title> ".repeat(20);
        let e = detect_kind(page.as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains("\"<html> <title>502 Bad Gateway</title>") && e.contains("…"),
            "{e}"
        );
        // A message cut short says so: the first 5,000 bytes of an OTLP request.
        let d = ProfilesData {
            resource_profiles: vec![Default::default(); 3],
            dictionary: Some(crate::otlp::ProfilesDictionary {
                string_table: (0..1000).map(|i| format!("function {i}")).collect(),
                ..Default::default()
            }),
        };
        let bytes = d.encode_to_vec();
        for cut in [bytes.len() / 2, bytes.len() - 1, 7] {
            let e = detect_kind(&bytes[..cut]).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "the input is truncated: it ends after {cut} bytes"
                )),
                "{cut}: {e}"
            );
        }
        // Binary that is not protobuf says so, as before.
        let e = detect_kind(b"\xff\xff\xff").unwrap_err().to_string();
        assert!(e.contains("not a valid protobuf message"), "{e}");
    }

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

    #[test]
    fn v1_9_numbering_is_refused_whether_or_not_it_decodes() {
        use crate::otlp::{Profile, ResourceProfiles, Sample, ScopeProfiles};
        // Decodes under v1.10, misread: v1.9's values (field 2) read as attribute indices,
        // and no sample has v1.10 values or timestamps.
        let misread = ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples: vec![
                            Sample {
                                stack_index: 1,
                                attribute_indices: vec![10],
                                ..Default::default()
                            };
                            2
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: None,
        };
        let e = decode_otlp_protobuf(&misread.encode_to_vec()).unwrap_err();
        assert!(e.to_string().contains("2 of 2 samples look v1.9"), "{e}");
        // Does not decode under v1.10: v1.9's packed attribute indices are field 3, v1.10's
        // link_index, a varint.
        let wrap = |sample: &[u8]| {
            let mut bytes = sample.to_vec();
            for field in [2u8, 2, 2, 1] {
                bytes = [&[(field << 3) | 2, bytes.len() as u8][..], &bytes].concat();
            }
            bytes
        };
        let e = decode_otlp_protobuf(&wrap(&[0x08, 0x01, 0x12, 0x01, 0x05, 0x1a, 0x01, 0x01]))
            .unwrap_err();
        assert!(e.to_string().contains("1 of 1 samples look v1.9"), "{e}");
        // A packed field 3 beside a packed field 4 is not v1.9 either: the wire error, with
        // the path of its field.
        let e = decode_otlp_protobuf(&wrap(&[0x08, 0x01, 0x1a, 0x01, 0x01, 0x22, 0x01, 0x05]))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a valid OTLP ProfilesData: resource_profiles[0].scope_profiles[0].profiles[0]\
             .samples[0]: Sample field 3 has wire type 2, which does not fit its type"
        );
    }
}
