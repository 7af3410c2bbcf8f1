//! gRPC's protobuf messages, `google.rpc` (status and retry info) and `grpc.health.v1`,
//! generated at build time (`build.rs`) from our own `.proto` files under `proto/`, which name
//! the upstream files they follow.

/// `google.*`: the error model and the well-known types it uses.
pub mod google {
    /// `google.rpc`: `Status` and `RetryInfo`.
    pub mod rpc {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
    /// `google.protobuf`: `Any` and `Duration`.
    pub mod protobuf {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/google.protobuf.rs"));
    }
}

/// `grpc.*`: the standard health check.
pub mod grpc {
    /// `grpc.health`.
    pub mod health {
        /// Version 1.
        pub mod v1 {
            // Generated: the `.proto` file under proto/ documents each message and field.
            #![allow(missing_docs)]
            include!(concat!(env!("OUT_DIR"), "/grpc.health.v1.rs"));
        }
    }
}
