//! The two kinds of telemetry spanprof takes and forwards: profiles and traces.

/// What a queued record holds; its first payload byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// An OTLP `ProfilesData` (same wire layout as `ExportProfilesServiceRequest`).
    Profiles = 1,
    /// An OTLP `ExportTraceServiceRequest`.
    Traces = 2,
}

impl Signal {
    /// The signal of a queued record's first payload byte.
    pub(crate) fn from_byte(b: u8) -> Option<Signal> {
        match b {
            1 => Some(Signal::Profiles),
            2 => Some(Signal::Traces),
            _ => None,
        }
    }

    /// `profiles` or `traces`, for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Profiles => "profiles",
            Signal::Traces => "traces",
        }
    }
}
