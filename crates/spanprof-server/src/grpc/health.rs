//! `grpc.health.v1.Health/Check`, the standard health service: its answer.

use axum::response::Response;
use prost::Message;

use super::proto::grpc::health::v1::health_check_response::ServingStatus;
use super::proto::grpc::health::v1::HealthCheckResponse;

/// The answer to a health check: SERVING, or NOT_SERVING.
pub fn answer(serving: bool) -> Response {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    super::ok(
        &HealthCheckResponse {
            status: status.into(),
        }
        .encode_to_vec(),
    )
}
