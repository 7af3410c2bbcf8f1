//! Request bodies: gzip (by `Content-Encoding` or magic bytes), size limits, and the media
//! types of OTLP answers.

use std::borrow::Cow;

use axum::http::{HeaderMap, StatusCode};
use spanprof_format::FormatError;

use super::inflight::{Charge, ChargedBody};
pub(crate) use super::rejection::with_retry_hint;
pub use super::rejection::{rejection_reason, Rejection};
use crate::config::ServerSection;

/// A request body as it is decoded: the body itself (or the message in it), or its
/// decompressed bytes, with its charge to the server's in-flight budget. Owned, so a receiver
/// can let it go once the request is decoded, before waiting for the store: a waiting request
/// otherwise held its body and its decompressed copy (100 concurrent uploads of 7 MB:
/// gigabytes), and its charge kept other requests out.
#[derive(Debug)]
pub struct Payload {
    data: Data,
    charge: Charge,
}

#[derive(Debug)]
enum Data {
    /// As sent (or a part of what was sent).
    Sent(axum::body::Bytes),
    /// Decompressed.
    Decompressed(Vec<u8>),
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        match &self.data {
            Data::Sent(b) => b,
            Data::Decompressed(v) => v,
        }
    }
}

impl Payload {
    /// Bytes of the in-flight budget this payload holds.
    pub fn charged(&self) -> usize {
        self.charge.bytes()
    }

    /// `body` as it arrived.
    pub fn sent(body: ChargedBody) -> Self {
        Payload {
            data: Data::Sent(body.bytes),
            charge: body.charge,
        }
    }

    /// The part `range` of a payload as sent (a gRPC message in its frame).
    pub fn slice(self, range: std::ops::Range<usize>) -> Self {
        let data = match self.data {
            Data::Sent(b) => Data::Sent(b.slice(range)),
            Data::Decompressed(v) => Data::Decompressed(v[range].to_vec()),
        };
        Payload {
            data,
            charge: self.charge,
        }
    }

    /// This payload's gzip decompressed, at most `max` bytes, charged to the in-flight budget
    /// (whatever it holds, the request may decompress no more than the budget has left: 429
    /// past it). `what` names the payload in errors ("the request body").
    pub fn gunzip(self, max: usize, what: &str) -> Result<Self, Rejection> {
        let Payload { data, mut charge } = self;
        let room = charge.inflight().available();
        let sent = match &data {
            Data::Sent(b) => &b[..],
            Data::Decompressed(v) => &v[..],
        };
        let plain = spanprof_format::gzip::gunzip(sent, max.min(room)).map_err(|e| match e {
            FormatError::TooLarge { .. } if room < max => charge.inflight().full(&format!(
                "{what} is larger, decompressed, than the {room} bytes left for requests \
                     being received and decoded"
            )),
            FormatError::TooLarge { limit } => decompressed_too_large(what, limit),
            other => Rejection::bad(format!("{what} is not valid gzip: {other}")),
        })?;
        charge.grow(plain.len())?;
        let before = sent.len();
        drop(data);
        charge.release(before);
        Ok(Payload {
            data: Data::Decompressed(plain),
            charge,
        })
    }
}

/// `bytes` (a part of a request, such as a profile in a multipart upload or a push message)
/// decompressed when it is gzip, at most `max` bytes, with the decompressed copy charged to
/// the in-flight budget until the returned charge is dropped: 429 past what the budget has
/// left, [`Unpacked::TooLarge`] past `max` (for the caller to word). Not gzip: `bytes`, and
/// nothing charged. Gzip inside gzip is refused: it would decompress again outside the limits.
pub fn gunzip_part<'a>(
    inflight: &std::sync::Arc<super::inflight::Inflight>,
    bytes: &'a [u8],
    max: usize,
    what: &str,
) -> Result<(Cow<'a, [u8]>, Charge), Unpacked> {
    let mut charge = Charge::new(inflight);
    if !spanprof_format::gzip::is_gzip(bytes) {
        return Ok((Cow::Borrowed(bytes), charge));
    }
    let room = inflight.available();
    let plain = spanprof_format::gzip::gunzip(bytes, max.min(room)).map_err(|e| match e {
        FormatError::TooLarge { .. } if room < max => Unpacked::Refused(inflight.full(&format!(
            "{what} is larger, decompressed, than the {room} bytes left for requests being \
             received and decoded"
        ))),
        FormatError::TooLarge { .. } => Unpacked::TooLarge,
        other => Unpacked::Refused(Rejection::bad(format!("{what} is not valid gzip: {other}"))),
    })?;
    if spanprof_format::gzip::is_gzip(&plain) {
        return Err(Unpacked::Refused(Rejection::bad(format!(
            "{what} is gzip inside gzip; gzip it once"
        ))));
    }
    charge.grow(plain.len()).map_err(Unpacked::Refused)?;
    Ok((Cow::Owned(plain), charge))
}

/// Why [`gunzip_part`] gave nothing.
#[derive(Debug)]
pub enum Unpacked {
    /// Larger than its limit once decompressed.
    TooLarge,
    /// Not valid, or no room in the in-flight budget: the answer.
    Refused(Rejection),
}

/// Whether `body` is gzip: by its magic bytes, checked against `Content-Encoding` (gzip or
/// none; a body said to be gzip must be).
fn is_gzip(headers: &HeaderMap, body: &[u8]) -> Result<bool, Rejection> {
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" | "gzip" | "x-gzip" => {}
        other => {
            return Err(Rejection::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {other:?} is not supported (use gzip or none)"),
            ))
        }
    }
    let gzip = spanprof_format::gzip::is_gzip(body);
    if encoding.ends_with("gzip") && !gzip {
        return Err(Rejection::bad(
            "Content-Encoding says gzip but the body is not gzip",
        ));
    }
    Ok(gzip)
}

/// The 413 of a body past `limit` bytes once decompressed.
fn decompressed_too_large(what: &str, limit: usize) -> Rejection {
    Rejection::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "{what} is larger than {limit} bytes once decompressed (server.max_decompressed_size)"
        ),
    )
}

/// A receiver's request body, decompressed when it is gzip (by `Content-Encoding` or magic
/// bytes), within the limits and the in-flight budget.
pub fn payload(
    headers: &HeaderMap,
    body: ChargedBody,
    limits: &ServerSection,
) -> Result<Payload, Rejection> {
    let gzip = is_gzip(headers, &body.bytes)?;
    let body = Payload::sent(body);
    if gzip {
        return body.gunzip(limits.max_decompressed_size, "the request body");
    }
    if body.as_ref().len() > limits.max_decompressed_size {
        return Err(decompressed_too_large(
            "the request body",
            limits.max_decompressed_size,
        ));
    }
    Ok(body)
}

/// A small request body (a query's), decompressed when it is gzip, within `limits` (fixed
/// for queries: no setting is named); not charged to the in-flight budget.
pub fn decode<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    limits: &ServerSection,
) -> Result<Cow<'a, [u8]>, Rejection> {
    let max = limits.max_decompressed_size;
    let too_large = || {
        Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {max} bytes once decompressed"),
        )
    };
    if !is_gzip(headers, body)? {
        if body.len() > max {
            return Err(too_large());
        }
        return Ok(Cow::Borrowed(body));
    }
    spanprof_format::gzip::gunzip(body, max)
        .map(Cow::Owned)
        .map_err(|e| match e {
            FormatError::TooLarge { .. } => too_large(),
            other => Rejection::bad(format!("the request body is not valid gzip: {other}")),
        })
}

pub use super::rejection::JSON;

/// The media type of an OTLP/HTTP answer: the request's, as the specification says
/// (`application/json`, `application/protobuf`, else `application/x-protobuf`).
pub fn otlp_answer_type(headers: &HeaderMap) -> &'static str {
    if is_json(headers) {
        return JSON;
    }
    let protobuf = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/protobuf"));
    if protobuf {
        "application/protobuf"
    } else {
        "application/x-protobuf"
    }
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
