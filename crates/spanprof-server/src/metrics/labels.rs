//! The closed label values of the server's metrics, as enums: a typo is a compile error,
//! and a series is found by index.

use super::family::Label;

/// Declares a label enum: its label name, and each variant's rendered value.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident: $key:literal { $($(#[$vdoc:meta])* $variant:ident = $value:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// The value as rendered (and logged).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)*
                }
            }
        }

        impl Label for $name {
            const KEY: &'static str = $key;
            const ALL: &'static [Self] = &[$($name::$variant,)*];
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn index(self) -> usize {
                self as usize
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// What took a request in (or refused it): the `receiver` label.
    Receiver: "receiver" {
        /// OTLP over gRPC, profiles and traces.
        OtlpGrpc = "otlp_grpc",
        /// OTLP/HTTP profiles.
        OtlpProfiles = "otlp_profiles",
        /// OTLP/HTTP traces.
        OtlpTraces = "otlp_traces",
        /// Pyroscope's `/ingest`.
        PyroscopeIngest = "pyroscope_ingest",
        /// Pyroscope's push API.
        PyroscopePush = "pyroscope_push",
        /// The pprof scraper.
        Scrape = "scrape",
        /// Any other HTTP request (an unknown path).
        Http = "http",
        /// The store, refusing profiles of an accepted request.
        Store = "store",
        /// The demo's generated data.
        Demo = "demo",
    }
}

label_enum! {
    /// Why a request (or the store, a profile) was refused: the `reason` label of
    /// `spanprof_rejected_total`.
    RejectReason: "reason" {
        /// Larger than a size limit (413).
        TooLarge = "too_large",
        /// A content type or encoding the receiver does not take (415).
        Unsupported = "unsupported",
        /// The body did not arrive in time (408).
        Timeout = "timeout",
        /// The server is busy (429).
        Busy = "busy",
        /// The server failed (5xx).
        Failed = "failed",
        /// The request is not valid (400).
        Invalid = "invalid",
        /// The pipeline's queue is full (429).
        QueueFull = "queue_full",
        /// The in-flight budget is spent (429).
        InflightFull = "inflight_full",
        /// The client went away before its body was read.
        Aborted = "aborted",
        /// Profiles of an accepted OTLP request were not valid (its partial_success says so).
        InvalidProfile = "invalid_profile",
        /// No such path (404).
        NotFound = "not_found",
        /// Profiles past a store limit.
        Limit = "limit",
    }
}

label_enum! {
    /// What a sample with several span ids got: the `outcome` label.
    NestedOutcome: "outcome" {
        /// The innermost span, as told by the known spans or the profile's samples.
        Innermost = "innermost",
        /// The first id in label order: nothing told the innermost.
        Ambiguous = "ambiguous",
    }
}

label_enum! {
    /// Why retention ran: the `trigger` label.
    RetentionTrigger: "trigger" {
        /// Once a minute, with compaction.
        Schedule = "schedule",
        /// A store write failed (a full disk makes room).
        WriteFailed = "write_failed",
        /// The store grew past storage.max_size.
        OverLimit = "over_limit",
    }
}

label_enum! {
    /// A table of the store's symbols: the `table` label.
    SymbolTable: "table" {
        /// Interned strings.
        Strings = "strings",
        /// Mappings (binaries).
        Mappings = "mappings",
        /// Functions.
        Functions = "functions",
        /// Locations.
        Locations = "locations",
        /// Nodes of the stack tree.
        StackNodes = "stack_nodes",
    }
}

label_enum! {
    /// Why a forwarder dropped records: the `reason` label.
    DropReason: "reason" {
        /// Downstream refused them.
        Rejected = "rejected",
        /// The disk queue was full.
        QueueFull = "queue_full",
    }
}

/// What a forwarder delivered: the `signal` label.
impl Label for crate::signal::Signal {
    const KEY: &'static str = "signal";
    const ALL: &'static [Self] = &[Self::Profiles, Self::Traces];
    fn as_str(self) -> &'static str {
        self.name()
    }
    fn index(self) -> usize {
        match self {
            Self::Profiles => 0,
            Self::Traces => 1,
        }
    }
}
