//! The `querier.v1` and `types.v1` messages the methods read and write: the types generated
//! at build time from our own `.proto` files (see [`crate::pyroscope_proto`]).

pub use crate::pyroscope_proto::querier::v1::*;
pub use crate::pyroscope_proto::types::v1::*;
