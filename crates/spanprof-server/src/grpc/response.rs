//! A unary call's answer as the server sends it: one message then `grpc-status: 0` in
//! trailers, or a Trailers-Only error status.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;

use super::Code;

/// A Trailers-Only response carrying an error status.
pub fn status(code: Code, message: &str) -> Response {
    let mut r = (StatusCode::OK, [("content-type", "application/grpc")]).into_response();
    r.headers_mut()
        .insert("grpc-status", HeaderValue::from(code.as_u32()));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        r.headers_mut().insert("grpc-message", v);
    }
    r
}

/// One message, then `grpc-status: 0` in trailers.
pub fn ok(message: &[u8]) -> Response {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = UnaryBody {
        data: Some(Bytes::from(super::frame(false, message))),
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
    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(super::percent_encode("a%b\nc"), "a%25b%0Ac");
    }
}
