//! `grpc-status-details-bin`: a base64 `google.rpc.Status` whose details may hold a
//! `RetryInfo`, which OTLP clients need before they retry RESOURCE_EXHAUSTED.

use std::time::Duration;

use prost::Message;

use super::proto::google::protobuf::{Any, Duration as ProtoDuration};
use super::proto::google::rpc::{RetryInfo, Status};
use super::Code;

/// The `type_url` of a `google.rpc.RetryInfo` in a `google.protobuf.Any`.
pub const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// A `grpc-status-details-bin` value: the base64 `google.rpc.Status` of `code` and `message`
/// with a `RetryInfo` of `seconds`.
pub fn retry_details(code: Code, message: String, seconds: u32) -> String {
    let status = Status {
        code: code.as_u32() as i32,
        message,
        details: vec![Any {
            type_url: RETRY_INFO_TYPE.into(),
            value: RetryInfo {
                retry_delay: Some(ProtoDuration {
                    seconds: seconds.into(),
                    nanos: 0,
                }),
            }
            .encode_to_vec(),
        }],
    };
    let mut encoded = String::new();
    spanprof_format::json::base64::encode_into(&status.encode_to_vec(), &mut encoded);
    encoded
}

/// The delay of the `google.rpc.RetryInfo` in a `grpc-status-details-bin` value (a base64
/// `google.rpc.Status`), if it holds one.
pub fn retry_delay(details_bin: &str) -> Option<Duration> {
    let bytes = spanprof_format::json::base64::decode(details_bin.trim()).ok()?;
    let status = Status::decode(&bytes[..]).ok()?;
    let info = status
        .details
        .iter()
        .find(|d| d.type_url == RETRY_INFO_TYPE)?;
    let delay = RetryInfo::decode(&info.value[..]).ok()?.retry_delay?;
    let seconds = u64::try_from(delay.seconds).ok()?;
    let nanos = u32::try_from(delay.nanos).ok()?;
    Some(Duration::new(seconds, nanos.min(999_999_999)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_round_trips() {
        let details = retry_details(Code::ResourceExhausted, "busy".into(), 3);
        assert_eq!(retry_delay(&details), Some(Duration::from_secs(3)));
        assert_eq!(retry_delay("not base64 !"), None);
    }
}
