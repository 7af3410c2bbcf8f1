//! Pyroscope's query API, `querier.v1.QuerierService`, as Connect unary calls, so Grafana's
//! Pyroscope data source (Explore, Traces to profiles, the span flame graph) and the
//! Pyroscope UI can read spanprof.
//!
//! Transport, methods and what is refused: `docs/api/pyroscope.md`; request bodies are at
//! most [`MAX_QUERY_BODY`] bytes.

mod heatmap;
mod json;
mod messages;
mod methods;
mod render;
pub(crate) mod tree_bytes;

use std::future::Future;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;

use crate::api::Queries;
use crate::auth::Access;
use crate::config::ServerSection;
use crate::receivers::body::{decode, Rejection};
use crate::routes::Routes;
use json::ToJson;

/// The largest query request body, as sent and once decompressed: 1 MiB. A real one is a
/// selector and a few names, under 1 KiB. Ingest's limits (32 MiB sent, 64 MiB decompressed)
/// would let a 30 KB gzip body of empty repeated strings be decoded into 900 MB (measured on
/// `Series`: protobuf's two bytes each become a 24-byte `String`), held by the server after.
pub const MAX_QUERY_BODY: usize = 1 << 20;

/// A Connect error: a code and a message.
#[derive(Debug)]
pub struct ConnectError {
    /// Connect code, e.g. `invalid_argument`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

impl ConnectError {
    /// `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ConnectError {
            code: "invalid_argument",
            message: message.into(),
        }
    }

    /// `unimplemented`.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        ConnectError {
            code: "unimplemented",
            message: message.into(),
        }
    }

    /// `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        ConnectError {
            code: "internal",
            message: message.into(),
        }
    }

    /// The HTTP status of the code (connectrpc.com/docs/protocol, "Error Codes").
    pub fn status(&self) -> StatusCode {
        match self.code {
            "canceled" => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "permission_denied" => StatusCode::FORBIDDEN,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code, "message": self.message }).to_string();
        (self.status(), [("content-type", "application/json")], body).into_response()
    }
}

/// The two Connect unary codecs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Codec {
    /// `application/proto`.
    Proto,
    /// `application/json`.
    Json,
}

fn codec(headers: &HeaderMap) -> Option<Codec> {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/proto" | "application/x-protobuf" | "application/protobuf" => {
            Some(Codec::Proto)
        }
        "application/json" => Some(Codec::Json),
        _ => None,
    }
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all("accept-encoding")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut parts = e.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00"));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// One unary call: decodes the request in its codec, runs `method`, encodes the answer.
async fn unary<S, Req, Resp, F, Fut>(
    state: S,
    server: &ServerSection,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    method: F,
) -> Response
where
    Req: Message + Default + serde::de::DeserializeOwned,
    Resp: Message + ToJson,
    F: FnOnce(S, Req, Codec) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let Some(codec) = codec(&headers) else {
        // Connect: an unknown content type is HTTP 415.
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            [("accept-post", "application/proto, application/json")],
            "use Content-Type application/proto or application/json\n",
        )
            .into_response();
    };
    let limits = ServerSection {
        max_body_size: MAX_QUERY_BODY,
        max_decompressed_size: MAX_QUERY_BODY,
        ..server.clone()
    };
    let raw = match &body {
        Ok(body) => decode(&headers, body, &limits),
        Err(e) => Err(Rejection::new(
            e.status(),
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                format!("the query request is larger than {MAX_QUERY_BODY} bytes")
            } else {
                format!("the request body could not be read: {}", e.body_text())
            },
        )),
    };
    let raw = match raw {
        Ok(raw) => raw,
        Err(r) => {
            let code = match r.status {
                StatusCode::PAYLOAD_TOO_LARGE => "resource_exhausted",
                StatusCode::UNSUPPORTED_MEDIA_TYPE => "unimplemented",
                _ => "invalid_argument",
            };
            return ConnectError {
                code,
                message: r.message,
            }
            .into_response();
        }
    };
    let request = match codec {
        Codec::Proto => Req::decode(raw.as_ref())
            .map_err(|e| ConnectError::invalid(format!("invalid protobuf request: {e}"))),
        Codec::Json => {
            let text: &[u8] = if raw.iter().all(u8::is_ascii_whitespace) {
                b"{}"
            } else {
                raw.as_ref()
            };
            json::read::<Req>(text).map_err(|e| ConnectError::invalid(e.to_string()))
        }
    };
    let answer = match request {
        Ok(req) => method(state, req, codec).await,
        Err(e) => Err(e),
    };
    let reply = match answer {
        Ok(reply) => reply,
        Err(e) => return e.into_response(),
    };
    let (content_type, bytes) = match codec {
        Codec::Proto => ("application/proto", reply.encode_to_vec()),
        Codec::Json => match reply.to_json() {
            Ok(bytes) => ("application/json", bytes),
            Err(e) => return ConnectError::internal(e.to_string()).into_response(),
        },
    };
    if bytes.len() >= 1024 && accepts_gzip(&headers) {
        (
            [
                ("content-type", content_type),
                ("content-encoding", "gzip"),
                ("vary", "accept-encoding"),
            ],
            spanprof_format::gzip::gzip(&bytes),
        )
            .into_response()
    } else {
        ([("content-type", content_type)], bytes).into_response()
    }
}

/// A handler for `$method`, which takes the state `$state` (the query handle unless named).
macro_rules! rpc {
    ($name:ident => $method:path) => {
        rpc!($name: Queries => $method);
    };
    ($name:ident: $state:ty => $method:path) => {
        async fn $name(
            State(state): State<$state>,
            State(server): State<std::sync::Arc<crate::config::ServerConfig>>,
            headers: HeaderMap,
            body: Result<Bytes, BytesRejection>,
        ) -> Response {
            unary(state, &server.server, headers, body, $method).await
        }
    };
}

// After the macro, which it uses.
mod settings;

rpc!(profile_types => methods::profile_types);
rpc!(label_names => methods::label_names);
rpc!(label_values => methods::label_values);
rpc!(series => methods::series);
rpc!(select_merge_span_profile => methods::select_merge_span_profile);
rpc!(select_merge_stacktraces => methods::select_merge_stacktraces);
rpc!(select_merge_profile => methods::select_merge_profile);
rpc!(select_series => methods::select_series);
rpc!(diff => methods::diff);
rpc!(get_profile_stats => methods::get_profile_stats);
rpc!(select_heatmap => heatmap::select_heatmap);

/// A method of `querier.v1.QuerierService` not served: Connect's `unimplemented` (a plain-text
/// 404 told a Connect client nothing it could read), naming the methods that are.
async fn unknown_method(axum::extract::Path(method): axum::extract::Path<String>) -> ConnectError {
    ConnectError::unimplemented(format!(
        "querier.v1.QuerierService/{method} is not served here; spanprof serves ProfileTypes, \
         LabelNames, LabelValues, Series, SelectMergeSpanProfile, SelectMergeStacktraces, \
         SelectMergeProfile, SelectSeries, SelectHeatmap, Diff and GetProfileStats"
    ))
}

/// The `querier.v1.QuerierService` routes.
pub fn routes() -> Routes {
    const P: &str = "/querier.v1.QuerierService/";
    Routes::new()
        .post(&format!("{P}ProfileTypes"), Access::Read, profile_types)
        .post(&format!("{P}LabelNames"), Access::Read, label_names)
        .post(&format!("{P}LabelValues"), Access::Read, label_values)
        .post(&format!("{P}Series"), Access::Read, series)
        .post(
            &format!("{P}SelectMergeSpanProfile"),
            Access::Read,
            select_merge_span_profile,
        )
        .post(
            &format!("{P}SelectMergeStacktraces"),
            Access::Read,
            select_merge_stacktraces,
        )
        .post(
            &format!("{P}SelectMergeProfile"),
            Access::Read,
            select_merge_profile,
        )
        .post(&format!("{P}SelectSeries"), Access::Read, select_series)
        .post(&format!("{P}SelectHeatmap"), Access::Read, select_heatmap)
        .post(&format!("{P}Diff"), Access::Read, diff)
        .post(
            &format!("{P}GetProfileStats"),
            Access::Read,
            get_profile_stats,
        )
        .post(&format!("{P}{{method}}"), Access::Read, unknown_method)
        .merge(settings::routes())
        .map(|r| r.layer(DefaultBodyLimit::max(MAX_QUERY_BODY)))
        .merge(render::routes())
}
