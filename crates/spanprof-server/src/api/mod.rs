//! The main listener's routes: receivers, the query API, and operations endpoints.

pub mod ops;
pub mod pyroscope_query;
pub mod query;
pub mod tempo;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;

use crate::{receivers, AppState};

/// Every route of the main listener.
pub fn router(state: AppState) -> Router {
    let limit = state.config.limits.max_body_bytes;
    Router::new()
        .merge(receivers::otlp::routes())
        .merge(receivers::pyroscope::routes())
        .merge(query::routes())
        .merge(pyroscope_query::routes())
        .merge(tempo::routes())
        .merge(crate::ui::routes())
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
