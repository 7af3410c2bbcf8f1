//! The JSON query API under `/api/v1/` — being written.

use axum::Router;

use crate::AppState;

/// The query routes.
pub fn routes() -> Router<AppState> {
    Router::new()
}
