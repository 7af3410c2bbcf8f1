//! OTLP over gRPC (`:4317`): `ProfilesService/Export` and `TraceService/Export`, on the
//! [`crate::grpc`] framing. Errors use Trailers-Only responses with OTLP's status codes.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use prost::Message;

use super::body::{Payload, Rejection};
use super::inflight::ChargedBody;
use super::otlp::{ingest_profiles, ingest_traces};
use crate::auth::Access;
use crate::grpc::{self, ok, status, PROFILES_EXPORT, TRACES_EXPORT};
use crate::routes::Routes;
use crate::AppState;

/// The OTLP export methods.
pub fn routes() -> Routes {
    Routes::new()
        .post(PROFILES_EXPORT, Access::Write, profiles)
        .post(TRACES_EXPORT, Access::Write, traces)
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
        Ok(response) => ok(&response.encode_to_vec()),
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
        Ok(response) => ok(&response.encode_to_vec()),
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
        let details = grpc::retry_details(r.grpc_code(), r.message, seconds);
        if let Ok(v) = HeaderValue::from_str(&details) {
            response.headers_mut().insert("grpc-status-details-bin", v);
        }
    }
    response
}

/// The request's message, or why not: a body past the size limit is a gRPC status too
/// (RESOURCE_EXHAUSTED), not a plain HTTP 413, which gRPC clients report as UNKNOWN.
fn message_of(
    app: &AppState,
    headers: &HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Result<Payload, Rejection> {
    let body = ChargedBody::counted(body, app, crate::metrics::Receiver::OtlpGrpc)?;
    unframe(headers, body, app.config.server.max_decompressed_size)
}

/// The one message of a unary request, decompressed per `grpc-encoding`.
fn unframe(headers: &HeaderMap, body: ChargedBody, max: usize) -> Result<Payload, Rejection> {
    let frame = grpc::unframe(&body.bytes).map_err(|e| Rejection::bad(e.to_string()))?;
    let len = frame.message.len();
    let message = Payload::sent(body).slice(frame.message);
    match frame.compressed {
        false if len > max => Err(Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the gRPC message is larger than {max} bytes (server.max_decompressed_size)"),
        )),
        false => Ok(message),
        true => {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

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
    }
}
