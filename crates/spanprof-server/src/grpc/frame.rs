//! The body of a unary gRPC call: one message behind a flag byte (1: compressed per
//! `grpc-encoding`) and its 4-byte big-endian length.

/// Bytes before the message: the compression flag and the length.
const PREFIX: usize = 5;

/// `message` framed for a call; `compressed` sets the flag byte.
pub fn frame(compressed: bool, message: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(PREFIX + message.len());
    framed.push(u8::from(compressed));
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed
}

/// Where the one message of a unary body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Whether the message is compressed per `grpc-encoding`.
    pub compressed: bool,
    /// The message's byte range in the body.
    pub message: std::ops::Range<usize>,
}

/// Why a body is not one framed message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the prefix.
    #[error("the gRPC body is shorter than its 5-byte message prefix")]
    Short,
    /// The length says more than the body holds.
    #[error("the gRPC message says {said} bytes but the body holds {held}")]
    Truncated {
        /// Bytes the prefix announces.
        said: usize,
        /// Bytes after the prefix.
        held: usize,
    },
    /// Bytes after the message.
    #[error("a unary gRPC request carries exactly one message")]
    Trailing,
    /// A flag byte other than 0 and 1.
    #[error("unknown gRPC compression flag {0}")]
    Flag(u8),
}

/// The one message of a unary call's `body`.
pub fn unframe(body: &[u8]) -> Result<Frame, FrameError> {
    if body.len() < PREFIX {
        return Err(FrameError::Short);
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let held = body.len() - PREFIX;
    if held < len {
        return Err(FrameError::Truncated { said: len, held });
    }
    if held != len {
        return Err(FrameError::Trailing);
    }
    let compressed = match body[0] {
        0 => false,
        1 => true,
        f => return Err(FrameError::Flag(f)),
    };
    Ok(Frame {
        compressed,
        message: PREFIX..PREFIX + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips_and_is_checked() {
        let framed = frame(true, &[7, 8]);
        assert_eq!(framed, [1, 0, 0, 0, 2, 7, 8]);
        assert_eq!(
            unframe(&framed),
            Ok(Frame {
                compressed: true,
                message: 5..7
            })
        );
        assert_eq!(unframe(&[0, 0, 0]), Err(FrameError::Short));
        assert_eq!(
            unframe(&[0, 0, 0, 0, 9, 7]),
            Err(FrameError::Truncated { said: 9, held: 1 })
        );
        assert_eq!(unframe(&[0, 0, 0, 0, 0, 7]), Err(FrameError::Trailing));
        assert_eq!(unframe(&[2, 0, 0, 0, 0]), Err(FrameError::Flag(2)));
    }
}
