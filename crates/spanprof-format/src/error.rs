//! Errors of the format crate: every variant names what was wrong with the input.

/// Bytes a message may take once decoded ([`crate::budget`]), per byte of its encoding (plus [`DECODED_BASE`]).
pub const DECODED_PER_BYTE: usize = 16;
/// Bytes any message may take once decoded, whatever its size.
pub const DECODED_BASE: usize = 1 << 20;

/// Why an input could not be decoded or converted.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The gzip stream is corrupt or truncated.
    #[error("gzip: {0}")]
    Gzip(String),
    /// Decompression or input size passed the configured limit, in bytes.
    #[error("input exceeds the decompressed size limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Decoding the message would take more memory than its size allows (see
    /// [`crate::budget`]): mostly empty elements, as in a decompression bomb.
    #[error(
        "the {what} would take more than {limit} bytes of memory once decoded ({per} times its {encoded} bytes, plus {base}): too many empty elements for its size, as in a decompression bomb",
        per = DECODED_PER_BYTE,
        base = DECODED_BASE
    )]
    DecodedTooLarge {
        /// The message's name, e.g. `pprof profile`.
        what: &'static str,
        /// The memory it may take, in bytes.
        limit: usize,
        /// Its encoded size, in bytes.
        encoded: usize,
    },
    /// Decoding the message needed more memory than the [`crate::allowance::Pool`] it draws
    /// from had left, after `drawn` bytes: the memory shared by every message being decoded
    /// at once was taken.
    #[error("decoding the {what} needed more memory than was left for messages being decoded, after {drawn} bytes")]
    NoRoom {
        /// The message's name.
        what: &'static str,
        /// What it had drawn when the pool ran out, in bytes.
        drawn: usize,
    },
    /// A profile holds more than a [`crate::limits::ProfileLimits`] allows.
    #[error("the profile has {count} {what}, more than the limit of {limit} ({key})")]
    ProfileTooBig {
        /// What there is too much of, e.g. `samples`.
        what: &'static str,
        /// How many the profile has.
        count: usize,
        /// How many are allowed.
        limit: usize,
        /// The setting that holds the limit.
        key: &'static str,
    },
    /// The bytes are not a valid protobuf message of the expected type.
    #[error("not a valid {what}: {}", collapse_repeats(&.source.to_string(), ": "))]
    Protobuf {
        /// The message's name.
        what: &'static str,
        /// prost's account of what is wrong.
        #[source]
        source: prost::DecodeError,
    },
    /// The message is well-formed protobuf but breaks a rule of its format.
    #[error("{0}")]
    Invalid(String),
    /// JSON input that does not follow the OTLP JSON encoding.
    #[error("OTLP JSON: {0}")]
    Json(String),
    /// The input kind could not be recognised.
    #[error("unrecognised input: {0}")]
    UnknownInput(String),
}

/// `s` with every run of three or more repeats of the same one to four `sep`-separated parts
/// written once, with the count: the path of an error inside a message nested a hundred deep
/// (`a.values[0].a.values[0]…`) would otherwise take kilobytes to say where it is.
pub(crate) fn collapse_repeats(s: &str, sep: &str) -> String {
    let parts: Vec<&str> = s.split(sep).collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let run = (1..=4)
            .filter(|&p| i + p <= parts.len())
            .map(|p| {
                let unit = &parts[i..i + p];
                let n = parts[i..]
                    .chunks_exact(p)
                    .take_while(|c| c == &unit)
                    .count();
                (p, n)
            })
            .find(|&(_, n)| n >= 3);
        match run {
            Some((p, n)) => {
                out.push(format!("({}) x{n}", parts[i..i + p].join(sep)));
                i += p * n;
            }
            None => {
                out.push(parts[i].to_owned());
                i += 1;
            }
        }
    }
    out.join(sep)
}

#[cfg(test)]
mod tests {
    use super::collapse_repeats;

    #[test]
    fn repeated_parts_of_a_path_are_said_once_with_their_count() {
        let deep = format!("{}x: too deep", "a.v[0].".repeat(50));
        assert_eq!(collapse_repeats(&deep, "."), "(a.v[0]) x50.x: too deep");
        assert_eq!(
            collapse_repeats("m.b[1].b[2].b[3].c", "."),
            "m.b[1].b[2].b[3].c",
            "different indices are different parts"
        );
        assert_eq!(
            collapse_repeats("A: B: A: B: A: B: C", ": "),
            "(A: B) x3: C"
        );
        assert_eq!(collapse_repeats("a.a.b", "."), "a.a.b");
        assert_eq!(collapse_repeats("", "."), "");
    }
}
