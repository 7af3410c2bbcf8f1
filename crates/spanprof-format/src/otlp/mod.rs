//! The OTLP Profiles model (proto v1.10+ numbering), re-exported from `opentelemetry-proto`,
//! and its protobuf decoder.

mod decode;
mod legacy;

pub(crate) use decode::decode_tallied;
pub use legacy::detect_v1_9_numbering;
pub(crate) use legacy::Tally;

pub use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
pub use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
pub use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesData,
    ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
pub use opentelemetry_proto::tonic::resource::v1::Resource;

/// A `KeyValue` with a string value (resource and span attributes).
pub fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}
