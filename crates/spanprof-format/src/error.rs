//! Errors of the format crate: every variant names what was wrong with the input.

/// Why an input could not be decoded or converted.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The gzip stream is corrupt or truncated.
    #[error("gzip: {0}")]
    Gzip(String),
    /// Decompression or input size passed the configured limit, in bytes.
    #[error("input exceeds the decompressed size limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// Decoding the message would take more memory than its size allows (see
    /// [`crate::budget`]): mostly empty elements, as in a decompression bomb.
    #[error(
        "the {what} would take more than {limit} bytes of memory once decoded ({per} times its {encoded} bytes, plus {base}): too many empty elements for its size, as in a decompression bomb",
        per = crate::budget::DECODED_PER_BYTE,
        base = crate::budget::DECODED_BASE
    )]
    DecodedTooLarge {
        what: &'static str,
        limit: usize,
        encoded: usize,
    },
    /// A profile holds more than a [`crate::limits::ProfileLimits`] allows.
    #[error("the profile has {count} {what}, more than the limit of {limit} ({key})")]
    ProfileTooBig {
        what: &'static str,
        count: usize,
        limit: usize,
        key: &'static str,
    },
    /// The bytes are not a valid protobuf message of the expected type.
    #[error("not a valid {what}: {source}")]
    Protobuf {
        what: &'static str,
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
