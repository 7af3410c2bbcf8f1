//! gRPC as this server speaks it, for receivers and forwarders alike: the framing of a unary
//! call, status codes, the `google.rpc.Status` details that carry a retry delay, and the
//! standard health service.
//!
//! gRPC unary calls are HTTP/2 POSTs whose body is one length-prefixed message and whose status
//! travels in trailers; that is all this needs, so it runs on the same HTTP stack as everything
//! else instead of a separate gRPC framework.

mod code;
mod frame;
pub mod health;
pub mod proto;
mod response;
mod status;

pub use code::Code;
pub use frame::{frame, unframe, Frame, FrameError};
pub use response::{ok, status};
pub use status::{retry_delay, retry_details, RETRY_INFO_TYPE};

/// gRPC method path of OTLP profile export.
pub const PROFILES_EXPORT: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
/// gRPC method path of OTLP trace export.
pub const TRACES_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// gRPC method path of the standard health check (`grpc.health.v1`), which Kubernetes gRPC
/// probes and gRPC load balancers call.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
