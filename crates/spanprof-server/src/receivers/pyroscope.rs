//! Pyroscope push (`/ingest`, `push.v1`) — being written.

use axum::Router;

use crate::AppState;

/// The Pyroscope push routes.
pub fn routes() -> Router<AppState> {
    Router::new()
}
