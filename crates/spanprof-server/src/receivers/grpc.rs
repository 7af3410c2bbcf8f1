//! OTLP over gRPC (`:4317`): `ProfilesService/Export` and `TraceService/Export`.
//!
//! gRPC unary calls are HTTP/2 POSTs whose body is one length-prefixed message (a flag byte
//! for compression, a 4-byte big-endian length) and whose status travels in trailers; that is
//! all this needs, so it runs on the same HTTP stack as everything else instead of a separate
//! gRPC framework. Errors use Trailers-Only responses with OTLP's status codes.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;
use prost::Message;

use super::body::{Payload, Rejection};
use super::inflight::ChargedBody;
use super::otlp::{ingest_profiles, ingest_traces};
use crate::auth::Access;
use crate::grpc_proto::google::protobuf::{Any, Duration};
use crate::grpc_proto::google::rpc::{RetryInfo, Status};
use crate::grpc_proto::grpc::health::v1::health_check_response::ServingStatus;
use crate::grpc_proto::grpc::health::v1::HealthCheckResponse;
use crate::grpc_proto::RETRY_INFO_TYPE;
use crate::routes::Routes;
use crate::AppState;

/// gRPC method paths.
pub const PROFILES_EXPORT: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
/// gRPC method path of trace export.
pub const TRACES_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// gRPC method path of the standard health check (`grpc.health.v1`), which Kubernetes gRPC
/// probes and gRPC load balancers call.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// The gRPC listener's routes.
pub fn routes_of_listener() -> Routes {
    Routes::new()
        .post(PROFILES_EXPORT, Access::Write, profiles)
        .post(TRACES_EXPORT, Access::Write, traces)
        .post(HEALTH_CHECK, Access::Public, health_check)
        .map(|r| r.fallback(|| async { status(12, "unknown method: this server implements OTLP ProfilesService/Export and TraceService/Export, and grpc.health.v1.Health/Check") }))
}

/// `grpc.health.v1.Health/Check`: SERVING while `/health` says ok, else NOT_SERVING, for the
/// server as a whole whatever service the request names.
async fn health_check(State(app): State<AppState>) -> Response {
    let status = match crate::api::ops::not_ready(&app) {
        None => ServingStatus::Serving,
        Some(_) => ServingStatus::NotServing,
    };
    ok(HealthCheckResponse {
        status: status.into(),
    }
    .encode_to_vec())
}

async fn profiles(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Response {
    let message = match message_of(&app, &headers, body) {
        Ok(m) => m,
        Err(r) => return refused(&app, r),
    };
    match ingest_profiles(&app, message, false, crate::metrics::Receiver::OtlpGrpc).await {
        Ok(response) => ok(response.encode_to_vec()),
        Err(r) => refused(&app, r),
    }
}

async fn traces(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Response {
    let message = match message_of(&app, &headers, body) {
        Ok(m) => m,
        Err(r) => return refused(&app, r),
    };
    match ingest_traces(&app, message, false, crate::metrics::Receiver::OtlpGrpc).await {
        Ok(response) => ok(response.encode_to_vec()),
        Err(r) => refused(&app, r),
    }
}

/// The answer to a refused call, recorded. A refusal worth retrying (a busy server, one that
/// cannot write) carries a `RetryInfo` in `grpc-status-details-bin`: OTLP clients retry
/// RESOURCE_EXHAUSTED only with one, and take its delay as the time to wait.
fn refused(app: &AppState, r: Rejection) -> Response {
    r.record(app, crate::metrics::Receiver::OtlpGrpc);
    let mut response = status(r.grpc_code(), &r.message);
    if let Some(seconds) = r.retry_after() {
        let details = retry_details(r.grpc_code(), r.message, seconds);
        if let Ok(v) = HeaderValue::from_str(&details) {
            response.headers_mut().insert("grpc-status-details-bin", v);
        }
    }
    response
}

/// A `grpc-status-details-bin` value: the base64 `google.rpc.Status` of `code` and `message`
/// with a `RetryInfo` of `seconds`.
pub(crate) fn retry_details(code: u32, message: String, seconds: u32) -> String {
    let status = Status {
        code: code as i32,
        message,
        details: vec![Any {
            type_url: RETRY_INFO_TYPE.into(),
            value: RetryInfo {
                retry_delay: Some(Duration {
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

/// The request's message, or why not: a body past the size limit is a gRPC status too
/// (RESOURCE_EXHAUSTED), not a plain HTTP 413, which gRPC clients report as UNKNOWN.
fn message_of(
    app: &AppState,
    headers: &HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Result<Payload, Rejection> {
    unframe(headers, body?, app.config.limits.max_decompressed_bytes)
}

/// The one message of a unary request, decompressed per `grpc-encoding`.
fn unframe(headers: &HeaderMap, body: ChargedBody, max: usize) -> Result<Payload, Rejection> {
    let frame = &body.bytes;
    if frame.len() < 5 {
        return Err(Rejection::bad(
            "the gRPC body is shorter than its 5-byte message prefix",
        ));
    }
    let compressed = frame[0];
    let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
    if frame.len() - 5 < len {
        return Err(Rejection::bad(format!(
            "the gRPC message says {len} bytes but the body holds {}",
            frame.len() - 5
        )));
    }
    if frame.len() != 5 + len {
        return Err(Rejection::bad(
            "a unary gRPC request carries exactly one message",
        ));
    }
    let message = Payload::sent(body).slice(5..5 + len);
    match compressed {
        0 if len > max => Err(Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the gRPC message is larger than {max} bytes (server.max_decompressed_size)"),
        )),
        0 => Ok(message),
        1 => {
            let encoding = headers
                .get("grpc-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if encoding != "gzip" {
                return Err(Rejection::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("grpc-encoding {encoding:?} is not supported (use gzip or identity)"),
                ));
            }
            message.gunzip(max, "the gRPC message")
        }
        f => Err(Rejection::bad(format!("unknown gRPC compression flag {f}"))),
    }
}

/// A Trailers-Only response carrying an error status.
pub(crate) fn status(code: u32, message: &str) -> Response {
    let mut r = (StatusCode::OK, [("content-type", "application/grpc")]).into_response();
    r.headers_mut()
        .insert("grpc-status", HeaderValue::from(code));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        r.headers_mut().insert("grpc-message", v);
    }
    r
}

/// One message, then `grpc-status: 0` in trailers.
fn ok(message: Vec<u8>) -> Response {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = UnaryBody {
        data: Some(Bytes::from(framed)),
        trailers: Some(trailers),
    };
    (
        StatusCode::OK,
        [("content-type", "application/grpc")],
        Body::new(body),
    )
        .into_response()
}

/// A body of one data frame followed by trailers.
struct UnaryBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for UnaryBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// gRPC's percent-encoding of `grpc-message`: printable ASCII except `%` stays.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_checked() {
        let h = HeaderMap::new();
        let inflight = super::super::inflight::Inflight::new(1000);
        let unframe = |frame: &'static [u8], max| {
            let mut charge = super::super::inflight::Charge::new(&inflight);
            charge.grow(frame.len()).unwrap();
            let body = ChargedBody {
                bytes: Bytes::from_static(frame),
                charge,
            };
            unframe(&h, body, max)
        };
        assert_eq!(
            unframe(&[0, 0, 0, 0, 2, 7, 8], 100).unwrap().as_ref(),
            [7, 8]
        );
        assert!(unframe(&[0, 0, 0, 0, 9, 7], 100)
            .unwrap_err()
            .message
            .contains("says 9 bytes"));
        assert!(unframe(&[0, 0, 0], 100).is_err());
        assert!(unframe(&[1, 0, 0, 0, 1, 7], 100)
            .unwrap_err()
            .message
            .contains("grpc-encoding"));
        assert_eq!(
            unframe(&[0, 0, 0, 0, 2, 7, 8], 1).unwrap_err().status,
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(inflight.bytes(), 0);
        assert_eq!(percent_encode("a%b\nc"), "a%25b%0Ac");
    }
}
