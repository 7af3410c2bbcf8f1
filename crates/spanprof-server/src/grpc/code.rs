//! gRPC status codes (`google.rpc.Code`), so no call site writes a bare number.

/// A gRPC status code, as sent in `grpc-status` and `google.rpc.Status.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// The caller cancelled the call.
    Cancelled = 1,
    /// An error without a better code.
    Unknown = 2,
    /// The request is not valid, whatever the server's state.
    InvalidArgument = 3,
    /// The deadline passed before the call completed.
    DeadlineExceeded = 4,
    /// No such entity.
    NotFound = 5,
    /// The entity exists already.
    AlreadyExists = 6,
    /// The caller may not do this.
    PermissionDenied = 7,
    /// Out of some resource (a quota, room); retryable only with a `RetryInfo`, per OTLP.
    ResourceExhausted = 8,
    /// The system is not in the state the call needs.
    FailedPrecondition = 9,
    /// Aborted, typically by a concurrency conflict.
    Aborted = 10,
    /// Past the valid range.
    OutOfRange = 11,
    /// No such method or service here.
    Unimplemented = 12,
    /// The server broke an invariant.
    Internal = 13,
    /// The service is unavailable for now; retryable.
    Unavailable = 14,
    /// Data was lost or corrupted.
    DataLoss = 15,
    /// The call carries no valid credential.
    Unauthenticated = 16,
}

impl Code {
    /// Every code, by number.
    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code numbered `n`, None past the 17 gRPC defines.
    pub fn from_u32(n: u32) -> Option<Code> {
        Code::ALL.get(n as usize).copied()
    }

    /// Its number on the wire.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

impl From<Code> for u32 {
    fn from(c: Code) -> u32 {
        c.as_u32()
    }
}

#[cfg(test)]
mod tests {
    use super::Code;

    #[test]
    fn numbers_round_trip() {
        for n in 0..17 {
            assert_eq!(Code::from_u32(n).unwrap().as_u32(), n);
        }
        assert_eq!(Code::from_u32(17), None);
        assert_eq!(Code::ResourceExhausted.as_u32(), 8);
        assert_eq!(Code::Unauthenticated.as_u32(), 16);
    }
}
