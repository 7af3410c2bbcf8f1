//! Base64 (RFC 4648) for OTLP JSON `bytes` fields (and gRPC's binary headers): the standard
//! alphabet with padding on output; the standard or URL-safe alphabet, padded or not, on
//! input (as proto3 JSON allows).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends the padded standard base64 of `bytes` to `out`.
pub fn encode_into(bytes: &[u8], out: &mut String) {
    out.reserve(bytes.len().div_ceil(3) * 4);
    let mut push = |n: u32, chars: usize| {
        for k in 0..chars {
            let sextet = (n >> (18 - 6 * k)) & 63;
            out.push(char::from(ALPHABET[sextet as usize]));
        }
        for _ in chars..4 {
            out.push('=');
        }
    };
    let mut chunks = bytes.chunks_exact(3);
    for c in &mut chunks {
        push(
            u32::from(c[0]) << 16 | u32::from(c[1]) << 8 | u32::from(c[2]),
            4,
        );
    }
    match *chunks.remainder() {
        [a] => push(u32::from(a) << 16, 2),
        [a, b] => push(u32::from(a) << 16 | u32::from(b) << 8, 3),
        _ => {}
    }
}

fn sextet(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes base64 text; the error says what is wrong and where, in characters.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let all = text.as_bytes();
    let data = all
        .strip_suffix(b"==")
        .or_else(|| all.strip_suffix(b"="))
        .unwrap_or(all);
    if data.len() != all.len() && !all.len().is_multiple_of(4) {
        return Err("invalid base64: padded text must be a multiple of 4 characters".into());
    }
    if data.len() % 4 == 1 {
        return Err(format!(
            "invalid base64: {} characters cannot encode whole bytes",
            data.len()
        ));
    }
    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 2);
    for (chunk_no, chunk) in data.chunks(4).enumerate() {
        let mut n = 0u32;
        for (k, &c) in chunk.iter().enumerate() {
            let v = sextet(c).ok_or_else(|| {
                format!(
                    "invalid base64 character {:?} at offset {}",
                    char::from(c),
                    chunk_no * 4 + k
                )
            })?;
            n |= v << (18 - 6 * k);
        }
        let [_, b0, b1, b2] = n.to_be_bytes();
        // A chunk of k characters carries k - 1 whole bytes; trailing bits are ignored, as Go does.
        out.extend_from_slice(&[b0, b1, b2][..chunk.len() - 1]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{decode, encode_into};

    fn encode(bytes: &[u8]) -> String {
        let mut s = String::new();
        encode_into(bytes, &mut s);
        s
    }

    #[test]
    fn json_base64_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, coded) in vectors {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
            assert_eq!(
                decode(coded.trim_end_matches('=')).unwrap(),
                plain.as_bytes()
            );
        }
    }

    #[test]
    fn json_base64_accepts_url_safe_and_all_byte_values() {
        let all: Vec<u8> = (0..=255).collect();
        let std = encode(&all);
        assert_eq!(decode(&std).unwrap(), all);
        let url = std.replace('+', "-").replace('/', "_");
        assert_eq!(decode(&url).unwrap(), all);
    }

    #[test]
    fn json_base64_rejects_malformed_text() {
        for bad in [
            "Z", "Zg=", "Zm9vY", "Zm9v=", "====", "Z===", "Zm 9v", "Zm9v\n", "é",
        ] {
            assert!(decode(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            decode("Zm*v").unwrap_err(),
            "invalid base64 character '*' at offset 2"
        );
    }
}
