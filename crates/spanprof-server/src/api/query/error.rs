//! Running store calls off the async workers, and JSON answers written as text.

use axum::response::{IntoResponse, Response};
use spanprof_store::store::Store;

pub use crate::answer::ApiError;
use crate::api::Queries;

/// Runs `query` on a blocking thread (every store call reads from disk).
pub async fn blocking<T: Send + 'static>(
    queries: &Queries,
    query: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::api::run_app_query(queries, query)
        .await
        .map_err(|e| ApiError::internal(format!("the query failed: {e}")))?
}

/// A JSON body already serialized (nested trees are written as text, never as a `Value`).
pub fn json_text(body: String) -> Response {
    ([("content-type", "application/json")], body).into_response()
}
