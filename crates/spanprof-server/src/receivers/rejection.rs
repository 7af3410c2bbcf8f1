//! The refusal of a request ([`Rejection`]): its HTTP status, message and metric reason, and
//! how each protocol words it (plain text, OTLP's `google.rpc.Status`, gRPC codes).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use spanprof_format::FormatError;

use crate::grpc::proto::google::rpc::Status as RpcStatus;
use crate::grpc::Code;
use crate::metrics::{Receiver, RejectReason};
use crate::pipeline::SubmitError;

/// The JSON media type.
pub const JSON: &str = "application/json";

/// A request that cannot be taken, with the status and message to answer.
#[derive(Debug)]
pub struct Rejection {
    /// HTTP status.
    pub status: StatusCode,
    /// What is wrong, for the client.
    pub message: String,
    /// Why, as the `reason` label of `spanprof_rejected_total`.
    pub reason: RejectReason,
}

/// The `reason` label of `spanprof_rejected_total` for a refusal with `status`.
pub fn rejection_reason(status: StatusCode) -> RejectReason {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => RejectReason::TooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => RejectReason::Unsupported,
        StatusCode::REQUEST_TIMEOUT => RejectReason::Timeout,
        StatusCode::TOO_MANY_REQUESTS => RejectReason::Busy,
        s if s.is_server_error() => RejectReason::Failed,
        _ => RejectReason::Invalid,
    }
}

impl Rejection {
    /// `status` with `message`, its reason the status's.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Rejection {
            status,
            message: message.into(),
            reason: rejection_reason(status),
        }
    }

    /// 400 with `message`.
    pub fn bad(message: impl Into<String>) -> Self {
        Rejection::new(StatusCode::BAD_REQUEST, message)
    }

    /// A decoder's refusal of a request, as `context: error`: 413 when decoding would take
    /// more memory than the message's size allows (a decompression bomb of empty elements),
    /// 400 when the message is not valid.
    pub fn undecodable(context: &str, e: &FormatError) -> Self {
        let status = match e {
            FormatError::DecodedTooLarge { .. }
            | FormatError::TooLarge { .. }
            | FormatError::ProfileTooBig { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            // Out of the in-flight budget (see `Drawing::refusal`, which tells busy from
            // too large).
            FormatError::NoRoom { .. } => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        };
        let message = match status {
            StatusCode::BAD_REQUEST => format!("{context}: {e}"),
            _ => e.to_string(),
        };
        Rejection::new(status, message)
    }

    /// Counts and logs this refusal of a request to `receiver` (see
    /// [`crate::metrics::Metrics::record_refused`]).
    pub fn record(&self, app: &crate::AppState, receiver: Receiver) {
        app.metrics
            .record_refused(receiver, self.reason, self.status.as_u16(), &self.message);
    }

    /// Seconds after which sending the same request again may succeed, for a refusal that
    /// is worth retrying: 1 for a busy server (429: the queue drains in well under a second),
    /// 5 for one that cannot write or is stopping (503). None for the rest, 413 included:
    /// the same request would be refused again. Sent as `Retry-After`, and to gRPC clients as
    /// `RetryInfo` (without which OTLP clients must not retry RESOURCE_EXHAUSTED).
    pub fn retry_after(&self) -> Option<u32> {
        retry_after(self.status)
    }

    /// The gRPC status code OTLP gives this HTTP status.
    pub fn grpc_code(&self) -> Code {
        match self.status {
            StatusCode::BAD_REQUEST => Code::InvalidArgument,
            StatusCode::PAYLOAD_TOO_LARGE => Code::ResourceExhausted,
            // Retryable, with the RetryInfo the receiver adds.
            StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::Unimplemented,
            StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
            _ => Code::Internal,
        }
    }

    /// The answer of an OTLP/HTTP receiver: the same status, and as the body the
    /// `google.rpc.Status` (code and message) OTLP/HTTP requires of every 4xx and 5xx, in the
    /// request's encoding (binary protobuf, or JSON when the request was JSON).
    pub fn into_otlp_response(self, content_type: &'static str) -> Response {
        let code = self.grpc_code().as_u32();
        let body = if content_type == JSON {
            let status = serde_json::json!({ "code": code, "message": self.message });
            status.to_string().into_bytes()
        } else {
            let status = RpcStatus {
                code: code as i32,
                message: self.message,
                details: Vec::new(),
            };
            prost::Message::encode_to_vec(&status)
        };
        with_retry_hint(
            self.status,
            (self.status, [("content-type", content_type)], body).into_response(),
        )
    }
}

/// See [`Rejection::retry_after`].
fn retry_after(status: StatusCode) -> Option<u32> {
    match status {
        StatusCode::TOO_MANY_REQUESTS => Some(1),
        StatusCode::SERVICE_UNAVAILABLE => Some(5),
        _ => None,
    }
}

/// Adds `Retry-After` to an answer with `status` when retrying is worth it.
pub(crate) fn with_retry_hint(status: StatusCode, mut r: Response) -> Response {
    if let Some(seconds) = retry_after(status) {
        r.headers_mut()
            .insert("retry-after", axum::http::HeaderValue::from(seconds));
    }
    r
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        with_retry_hint(
            self.status,
            (self.status, self.message + "\n").into_response(),
        )
    }
}

impl From<SubmitError> for Rejection {
    fn from(e: SubmitError) -> Self {
        let status = match e {
            SubmitError::Full => StatusCode::TOO_MANY_REQUESTS,
            SubmitError::Closed => StatusCode::SERVICE_UNAVAILABLE,
            // Nothing of it was kept, and a full disk is freed: the client sends it again.
            SubmitError::Failed(_) => StatusCode::SERVICE_UNAVAILABLE,
            SubmitError::PartlyWritten(_) => StatusCode::INTERNAL_SERVER_ERROR,
            // What the store cannot keep: sending it again would not help.
            SubmitError::Refused(_) => StatusCode::BAD_REQUEST,
        };
        let reason = match e {
            SubmitError::Full => RejectReason::QueueFull,
            _ => rejection_reason(status),
        };
        Rejection {
            status,
            message: e.to_string(),
            reason,
        }
    }
}
