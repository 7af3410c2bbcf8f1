//! The main listener's routes: receivers, the query API, and operations endpoints.

pub mod ops;
pub mod pyroscope_query;
pub mod query;
pub mod tempo;

use std::sync::{Arc, LazyLock};

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use spanprof_store::store::Store;
use tokio::sync::Semaphore;

use crate::{receivers, AppState};

/// Most spans a trace answer holds (the earliest ones): a trace of a million spans was a
/// 389 MB answer built in 5.3 GB. Tempo refuses traces past 5 MB at ingest
/// (`max_bytes_per_trace`), some 20,000 spans.
pub const MAX_TRACE_SPANS: usize = 20_000;

/// Most label text (names and values, bytes) a label-values or series answer holds; past it the
/// answer is cut and says so (`truncated`): over 100,000 series with 2,000-byte values, one
/// label-values answer was 200 MB and took 1.16 GB to build.
pub const MAX_ANSWER_LABEL_BYTES: usize = 16 << 20;

/// Queries computing at once, at most: one over a large selection holds its whole tree in
/// memory (a flame graph over 15 M distinct stack nodes peaked at 1.4 GB), so more wait their
/// turn instead of taking the server out of memory together (two at once peaked at 9 GB).
/// As many as the cores, 2 to 8.
static QUERY_SLOTS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    Arc::new(Semaphore::new(cores.clamp(2, 8)))
});

/// Runs `query` on a blocking thread (store calls read from disk) once one of the
/// `QUERY_SLOTS` is free; the slot is held until the query ends, even when its client
/// leaves first. `Err` when the query panicked.
pub async fn run_query<T: Send + 'static>(
    store: Arc<Store>,
    query: impl FnOnce(&Store) -> T + Send + 'static,
) -> Result<T, String> {
    let slot = Arc::clone(&QUERY_SLOTS)
        .acquire_owned()
        .await
        .map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        query(&store)
    })
    .await
    .map_err(|e| e.to_string())
}

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
        .route("/ready", get(ops::health))
        .route("/live", get(ops::live))
        .route("/metrics", get(ops::metrics))
        .method_not_allowed_fallback(ops::method_not_allowed)
        .fallback(ops::not_found_main)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use spanprof_store::store::StoreConfig;

    use super::*;

    /// More queries than slots: as many as the slots compute at once (each of the first
    /// waits until all slots are taken), never more, and all end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_wait_for_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
        let store = Arc::new(store);
        let slots = QUERY_SLOTS.available_permits();
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let queries: Vec<_> = (0..3 * slots)
            .map(|_| {
                let (now, most) = (Arc::clone(&now), Arc::clone(&most));
                tokio::spawn(run_query(Arc::clone(&store), move |_| {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while most.load(Ordering::SeqCst) < slots
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::yield_now();
                    }
                    now.fetch_sub(1, Ordering::SeqCst);
                }))
            })
            .collect();
        for q in queries {
            q.await.unwrap().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), slots);
    }
}
