//! The query API's error answer, `{"error": "…"}` with a status, and running store calls off
//! the async workers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use spanprof_store::store::{Store, StoreError};

use crate::AppState;

/// A request the API could not answer: the status and a message naming what is wrong.
#[derive(Debug)]
pub struct ApiError {
    /// 400 for a bad parameter, 404 for something unknown, 500 for a store failure.
    pub status: StatusCode,
    /// What is wrong, for people; a bad parameter is named first.
    pub message: String,
}

impl ApiError {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 400 for parameter `name` (as the client spelled it) with `value`: `name "value": reason`.
    pub fn bad_param(name: &str, value: &str, reason: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("{name} {value:?}: {reason}"))
    }

    /// 404 with `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 500 with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            // Selectors are checked before the store sees them; this is a second line.
            StoreError::Matcher(m) => ApiError::bad_request(format!("query: {m}")),
            StoreError::Stopped(s) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: crate::api::stopped_message(s),
            },
            other => {
                tracing::warn!(error = %other, "query failed in the store");
                ApiError::internal(format!("store: {other}"))
            }
        }
    }
}

impl ApiError {
    /// The answer for `go tool pprof`: the message as text, marked with `X-Go-Pprof`, which
    /// is how pprof knows to show a failed fetch's body (otherwise it prints only the status).
    pub fn for_go_pprof(self) -> Response {
        (
            self.status,
            [
                ("content-type", "text/plain; charset=utf-8"),
                ("x-go-pprof", "1"),
            ],
            format!("{}\n", self.message),
        )
            .into_response()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        (self.status, [("content-type", "application/json")], body).into_response()
    }
}

/// Runs `query` on a blocking thread (every store call reads from disk).
pub async fn blocking<T: Send + 'static>(
    app: &AppState,
    query: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::api::run_app_query(app, query)
        .await
        .map_err(|e| ApiError::internal(format!("the query failed: {e}")))?
}

/// A JSON body already serialized (nested trees are written as text, never as a `Value`).
pub fn json_text(body: String) -> Response {
    ([("content-type", "application/json")], body).into_response()
}
