//! `grpc.health.v1.Health/Check`, the standard health service.

use axum::extract::State;
use axum::response::Response;
use prost::Message;

use super::proto::grpc::health::v1::health_check_response::ServingStatus;
use super::proto::grpc::health::v1::HealthCheckResponse;
use crate::AppState;

/// SERVING while `/health` says ok, else NOT_SERVING, for the server as a whole whatever
/// service the request names.
pub async fn check(State(app): State<AppState>) -> Response {
    let status = match crate::api::ops::not_ready(&app) {
        None => ServingStatus::Serving,
        Some(_) => ServingStatus::NotServing,
    };
    super::ok(
        &HealthCheckResponse {
            status: status.into(),
        }
        .encode_to_vec(),
    )
}
