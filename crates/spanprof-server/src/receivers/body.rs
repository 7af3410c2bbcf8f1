//! Request bodies: gzip (by `Content-Encoding` or magic bytes), size limits, and the error
//! answer every receiver gives for a bad request.

use std::borrow::Cow;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use spanprof_format::FormatError;

use crate::config::Limits;
use crate::pipeline::SubmitError;

/// A request that cannot be taken, with the status and message to answer.
#[derive(Debug)]
pub struct Rejection {
    /// HTTP status.
    pub status: StatusCode,
    /// What is wrong, for the client.
    pub message: String,
}

impl Rejection {
    /// 400 with `message`.
    pub fn bad(message: impl Into<String>) -> Self {
        Rejection {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut r = (self.status, self.message + "\n").into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        r
    }
}

impl From<SubmitError> for Rejection {
    fn from(e: SubmitError) -> Self {
        let status = match e {
            SubmitError::Full => StatusCode::TOO_MANY_REQUESTS,
            SubmitError::Closed => StatusCode::SERVICE_UNAVAILABLE,
            SubmitError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Rejection {
            status,
            message: e.to_string(),
        }
    }
}

/// The body, decompressed when it is gzip, within the limits.
pub fn decode<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    limits: &Limits,
) -> Result<Cow<'a, [u8]>, Rejection> {
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" | "gzip" | "x-gzip" => {}
        other => {
            return Err(Rejection {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: format!("Content-Encoding {other:?} is not supported (use gzip or none)"),
            })
        }
    }
    if encoding.ends_with("gzip") && !spanprof_format::gzip::is_gzip(body) {
        return Err(Rejection::bad(
            "Content-Encoding says gzip but the body is not gzip",
        ));
    }
    spanprof_format::gzip::maybe_gunzip(body, limits.max_decompressed_bytes).map_err(|e| match e {
        FormatError::TooLarge { limit } => Rejection {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is larger than {limit} bytes once decompressed"),
        },
        other => Rejection::bad(format!("the request body is not valid gzip: {other}")),
    })
}

/// Whether the request says its body is JSON.
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
}
