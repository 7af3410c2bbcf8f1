//! Hex text for the ids OTLP JSON writes in hex: `traceId`, `spanId` and `profileId`.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends the lower-case hex of `bytes` to `out`.
pub(super) fn encode_into(bytes: &[u8], out: &mut String) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes the hex (either case) of an id; the empty string is the unset id. An id of other
/// than `len` bytes is decoded as it is, as protobuf's bytes are: its length is judged where a
/// protobuf id's is (the conformance check names it, linking refuses its profile, a span
/// with it is rejected alone), so one wrong id does not make a whole JSON document
/// unreadable. `len` is the id's proper length, for the hint on base64.
pub(super) fn decode_id(text: &str, len: usize) -> Result<Vec<u8>, String> {
    let b = text.as_bytes();
    let decoded = b
        .len()
        .is_multiple_of(2)
        .then(|| {
            b.chunks_exact(2)
                .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
                .collect::<Option<Vec<u8>>>()
        })
        .flatten();
    decoded.ok_or_else(|| {
        let mut m = format!("invalid hex id {text:?}");
        if b.len() != 2 * len && looks_like_base64(b, len) {
            m.push_str(&format!(
                " (base64, as protobuf's own JSON mapping writes bytes: OTLP/JSON writes ids \
                 in hex, {} digits for {len} bytes)",
                2 * len
            ));
        } else if !b.len().is_multiple_of(2) {
            m.push_str(" (an odd number of digits: each byte is two)");
        }
        m
    })
}

/// Whether `b` is padded base64 of `len` bytes (what `MessageToJson` and `protojson` make of an
/// id; its length is never that of the id's hex).
fn looks_like_base64(b: &[u8], len: usize) -> bool {
    let body = b.strip_suffix(b"==").or(b.strip_suffix(b"=")).unwrap_or(b);
    b.len() == len.div_ceil(3) * 4
        && body
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::{decode_id, encode_into};

    #[test]
    fn json_hex_round_trips_and_checks_length() {
        let mut s = String::new();
        encode_into(&[0x00, 0xab, 0xff, 0x10], &mut s);
        assert_eq!(s, "00abff10");
        assert_eq!(decode_id("00ABfF10", 4).unwrap(), [0x00, 0xab, 0xff, 0x10]);
        assert_eq!(decode_id("", 4).unwrap(), Vec::<u8>::new());
        // Another length is decoded: whoever reads the id judges its length.
        assert_eq!(decode_id("00ab", 4).unwrap(), [0x00, 0xab]);
        assert_eq!(
            decode_id("00abfg10", 4).unwrap_err(),
            "invalid hex id \"00abfg10\""
        );
        assert_eq!(
            decode_id("00abf", 4).unwrap_err(),
            "invalid hex id \"00abf\" (an odd number of digits: each byte is two)"
        );
        assert!(decode_id("ééé", 3).is_err());
        // protobuf's JSON mapping writes bytes in base64.
        assert_eq!(
            decode_id("3I8kPXFTimiWrpsqe5GAng==", 16).unwrap_err(),
            "invalid hex id \"3I8kPXFTimiWrpsqe5GAng==\" (base64, as protobuf's own JSON \
             mapping writes bytes: OTLP/JSON writes ids in hex, 32 digits for 16 bytes)"
        );
        assert!(decode_id("AAECAwQFBgc=", 8).unwrap_err().contains("base64"));
        assert!(!decode_id("00abx", 8).unwrap_err().contains("base64"));
    }
}
