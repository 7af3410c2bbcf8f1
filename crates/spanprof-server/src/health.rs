//! Health: `/health` (`/ready`), `/live` and gRPC's `Health/Check`, open to anyone (probes send
//! no credentials), on every listener.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Access;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::routes::Routes;

/// What readiness is judged from: the pipeline's writes, the forwarders' queues (in the
/// metrics) and how long queries may take. Made from [`crate::AppState`] by axum's `FromRef`.
#[derive(Clone)]
pub struct Readiness {
    /// Where receivers hand their data: is a batch failing or hanging?
    pub pipeline: Pipeline,
    /// The forwarders' queue figures (a queue filling faster than it drains is warned of).
    pub metrics: Arc<Metrics>,
    /// `server.query_timeout`: a query running far past it is a stalled query path.
    pub query_timeout: Duration,
}

/// `/health`, `/ready` and `/live`: open to anyone (probes send no credentials).
pub fn probes() -> Routes {
    Routes::new()
        .get("/health", Access::Public, health)
        .get("/ready", Access::Public, health)
        .get("/live", Access::Public, live)
}

/// Ready: the listeners are bound and the store is open (handlers only run then), the
/// last batch was written, and requests do not wait on a write that hangs
/// ([`crate::pipeline::STALL_AFTER`]). While batches fail (a full disk, a log that refuses
/// writes until a restart), 503 saying which sink fails, for how long and why: every
/// receiver answers 503 then, so a load balancer should send elsewhere and an operator
/// should look. A query running far past `server.query_timeout` is a stalled query path:
/// 503 too.
///
/// A forwarder whose queue grows faster than it drains (full within hours at the pace of the
/// last minute) is named below `ok`, with when it would be full: still ready (its queue holds
/// what it cannot send yet), but someone should look before the queue drops anything.
pub async fn health(State(app): State<Readiness>) -> Response {
    match not_ready(&app) {
        None => {
            let mut body = "ok\n".to_owned();
            for w in crate::forward::lag::warnings(&app.metrics) {
                body.push_str(&format!("warning: {w}\n"));
            }
            body.into_response()
        }
        Some(why) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

/// Why the server is not ready (see [`health`]), or `None` when it is.
pub fn not_ready(app: &Readiness) -> Option<String> {
    if let Some(took) = crate::api::stalled_query(app.query_timeout) {
        return Some(format!(
            "a query has run for {} s, far past server.query_timeout ({} s): the query path \
             hangs (a read that does not answer?), and queries wait for a slot behind it",
            took.as_secs(),
            app.query_timeout.as_secs()
        ));
    }
    if let Some(took) = app.pipeline.stalled() {
        return Some(format!(
            "the batch being written has taken {} s: a write hangs (a disk that does not \
             answer?); its requests and those queued wait until it ends",
            took.as_secs()
        ));
    }
    let f = app.pipeline.failing()?;
    let seconds = f.since.elapsed().map_or(0, |d| d.as_secs());
    let batches = match f.batches {
        1 => "the last batch".to_owned(),
        n => format!("the last {n} batches"),
    };
    Some(format!(
        "{} could not write {batches} (failing for {seconds} s): {}; receivers answer 503 \
         (retry later) until a write works",
        f.sink, f.error
    ))
}

/// Live: the process answers (a liveness probe). Always 200: a full disk makes `/health`
/// (readiness) 503, and restarting the process for it would not free the disk.
pub async fn live() -> &'static str {
    "ok\n"
}

/// `grpc.health.v1.Health/Check`: SERVING while `/health` says ok, else NOT_SERVING, for the
/// server as a whole whatever service the request names.
pub async fn grpc_check(State(app): State<Readiness>) -> Response {
    crate::grpc::health::answer(not_ready(&app).is_none())
}
