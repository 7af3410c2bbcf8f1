//! Why a profile is not valid for the store (as opposed to over a limit): the texts its
//! refusal carries back to the client.

use super::limits::Refusal;

/// Most the values of one profile may add up to: 2^53, more than any real profile holds (104
/// days of CPU or wall-clock time in nanoseconds, 8 PiB of allocations), and what a JSON
/// number carries exactly. One sample of `i64::MAX` made every total of its service's
/// answers saturate, and the real values beside it vanished from view.
pub const MAX_PROFILE_TOTAL: i64 = 1 << 53;

/// A profile the store cannot keep as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Invalid {
    /// A string index past the dictionary's string table.
    #[error("string index {index} out of range ({len} strings)")]
    StringOutOfRange {
        /// The index given.
        index: i32,
        /// Strings in the table.
        len: usize,
    },
    /// A sample value below zero.
    #[error(
        "samples[{sample}].values: {value} is negative (a profile's values count or measure \
         what happened)"
    )]
    NegativeValue {
        /// The sample's index in the profile.
        sample: usize,
        /// The value.
        value: i64,
    },
    /// The profile's values add up past [`MAX_PROFILE_TOTAL`].
    #[error(
        "samples[{sample}]: the profile's values add up to more than {MAX_PROFILE_TOTAL} \
         (2^53), more than any real profile holds"
    )]
    TotalTooLarge {
        /// The sample at which the total passed it.
        sample: usize,
    },
    /// A window ending after what an `i64` of nanoseconds holds.
    #[error(
        "time_unix_nano {time} and duration_nano {duration} end past the latest time the \
         store keeps ({max} ns since the epoch, in the year 2262)",
        max = i64::MAX
    )]
    PastLatestTime {
        /// `time_unix_nano`, ns since the epoch.
        time: u64,
        /// `duration_nano`, ns.
        duration: u64,
    },
    /// No sample type.
    #[error("profile has no sample type")]
    NoSampleType,
    /// A part of the profile type with a `:` in it (shown shortened).
    #[error(
        "{part:?}, a part of the profile type, has a ':' in it, which separates the parts of \
         a profile type id (name:sample_type:sample_unit:period_type:period_unit)"
    )]
    ColonInType {
        /// The part, shortened for the message.
        part: String,
    },
}

impl From<Invalid> for Refusal {
    fn from(e: Invalid) -> Self {
        Refusal::from(e.to_string())
    }
}
