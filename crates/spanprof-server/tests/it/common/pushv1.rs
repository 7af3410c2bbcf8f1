//! `push.v1` / `types.v1` messages, the server's own generated types: both come from
//! `proto/push/v1/push.proto`, which follows Pyroscope's published definition.

// Each test binary uses a different part of common/.
#![allow(unused_imports)]

pub use spanprof_server::pyroscope_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
pub use spanprof_server::pyroscope_proto::types::v1::LabelPair;
