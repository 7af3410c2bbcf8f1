//! The query APIs (our own, Pyroscope's, Tempo's), `/metrics`, and the query slots and
//! timeouts they share.

pub mod ops;
pub mod pyroscope_query;
pub mod query;
pub mod tempo;

use std::sync::{Arc, LazyLock};

use std::sync::atomic::{AtomicBool, Ordering};

use spanprof_store::query_limit::{self, QueryLimit};
use spanprof_store::store::Store;
use tokio::sync::Semaphore;

use crate::config::ServerConfig;
use crate::span_keys::SpanKeys;

pub use crate::answer::{MAX_ANSWER_LABEL_BYTES, MAX_TRACE_SPANS};

/// Queries computing at once, at most: one over a large selection holds its whole tree in
/// memory (a flame graph over 15 M distinct stack nodes peaked at 1.4 GB), so more wait their
/// turn instead of taking the server out of memory together (two at once peaked at 9 GB).
/// As many as the cores, 2 to 8.
static QUERY_SLOTS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(query_slots())));

/// The number of [`QUERY_SLOTS`].
fn query_slots() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    cores.clamp(2, 8)
}

/// The query slots one tenant may hold at once: all of them when the server has one tenant,
/// else one fewer, so that one tenant's slow queries never hold every slot and another
/// tenant's queries always get one.
pub fn tenant_query_slots(several_tenants: bool) -> Arc<Semaphore> {
    let all = query_slots();
    Arc::new(Semaphore::new(if several_tenants { all - 1 } else { all }))
}

/// Why a query gave no answer (a query that ran answers itself, errors included).
#[derive(Debug, thiserror::Error)]
pub enum QueryFailed {
    /// The query slots were closed (the server is stopping).
    #[error("{0}")]
    Closed(#[from] tokio::sync::AcquireError),
    /// The query panicked (or its task was cancelled).
    #[error("{0}")]
    Panicked(#[from] tokio::task::JoinError),
}

/// What the query handlers take of a tenant's state: where they read and how long they may
/// take. Made from [`crate::AppState`] by axum's `FromRef`.
#[derive(Clone)]
pub struct Queries {
    /// The embedded store.
    pub store: Arc<Store>,
    /// The query slots the tenant may hold at once ([`tenant_query_slots`]).
    pub slots: Arc<Semaphore>,
    /// The configuration (`server.query_timeout`, `span_profiles_include_children`, `demo`).
    pub config: Arc<ServerConfig>,
    /// The remote pair queries are answered from; `None`: the embedded store.
    pub remote: Option<Arc<crate::remote::Remote>>,
    /// Sample labels seen holding span ids under keys that are no link keys (answers name them).
    pub span_keys: Arc<SpanKeys>,
}

/// Runs `query` over the store with the tenant's query slots and the query timeout
/// (see [`run_query`]).
pub async fn run_app_query<T: Send + 'static>(
    queries: &Queries,
    query: impl FnOnce(&Store) -> T + Send + 'static,
) -> Result<T, QueryFailed> {
    let store = Arc::clone(&queries.store);
    run_tenant_query(
        &queries.slots,
        store,
        queries.config.server.query_timeout,
        query,
    )
    .await
}

/// [`run_query`] once one of the tenant's `slots` is free: a tenant waits on its own slots,
/// holding none of the server's.
async fn run_tenant_query<T: Send + 'static>(
    slots: &Arc<Semaphore>,
    store: Arc<Store>,
    timeout: std::time::Duration,
    query: impl FnOnce(&Store) -> T + Send + 'static,
) -> Result<T, QueryFailed> {
    let _tenant_slot = Arc::clone(slots).acquire_owned().await?;
    run_query(store, timeout, query).await
}

/// When each query running now started, by a number of its own: `/ready` says when one has
/// run far past its time ([`stalled_query`]).
static RUNNING: LazyLock<std::sync::Mutex<std::collections::HashMap<u64, std::time::Instant>>> =
    LazyLock::new(Default::default);

/// The longest a query has been running, when that is past twice `timeout` (and at least
/// 10 s): queries stop at their deadline, so one still running means the query path is
/// stuck (a read that hangs), and queries wait for slots behind it.
pub fn stalled_query(timeout: std::time::Duration) -> Option<std::time::Duration> {
    running_past((2 * timeout).max(std::time::Duration::from_secs(10)))
}

/// How long the oldest running query has run, when that is past `limit`.
fn running_past(limit: std::time::Duration) -> Option<std::time::Duration> {
    let oldest = RUNNING
        .lock()
        .expect("running queries lock")
        .values()
        .map(|t| t.elapsed())
        .max()?;
    (oldest > limit).then_some(oldest)
}

/// Runs `query` on a blocking thread (store calls read from disk) once one of the
/// `QUERY_SLOTS` is free, for at most `timeout`; the slot is held until the query ends. When
/// this future is dropped (its client left) the query is told, and stops at its next block or
/// series (see [`spanprof_store::query_limit`]). `Err` when the query panicked.
pub async fn run_query<T: Send + 'static>(
    store: Arc<Store>,
    timeout: std::time::Duration,
    query: impl FnOnce(&Store) -> T + Send + 'static,
) -> Result<T, QueryFailed> {
    /// Sets the flag when the request's future is dropped before the query has answered.
    struct ClientGone(Option<Arc<AtomicBool>>);
    impl Drop for ClientGone {
        fn drop(&mut self) {
            if let Some(flag) = self.0.take() {
                flag.store(true, Ordering::Relaxed);
            }
        }
    }
    let slot = Arc::clone(&QUERY_SLOTS).acquire_owned().await?;
    let cancelled = Arc::new(AtomicBool::new(false));
    let limit = QueryLimit::new(timeout, Arc::clone(&cancelled));
    let mut gone = ClientGone(Some(cancelled));
    let answer = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        /// Takes the query out of [`RUNNING`] however it ends.
        struct Running(u64);
        impl Drop for Running {
            fn drop(&mut self) {
                RUNNING
                    .lock()
                    .expect("running queries lock")
                    .remove(&self.0);
            }
        }
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let running = Running(IDS.fetch_add(1, Ordering::Relaxed));
        RUNNING
            .lock()
            .expect("running queries lock")
            .insert(running.0, std::time::Instant::now());
        query_limit::within(limit, || query(&store))
    })
    .await
    .map_err(QueryFailed::from);
    // Answered: nothing is left to stop.
    gone.0 = None;
    answer
}

pub use crate::answer::stopped_message;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use spanprof_store::store::StoreConfig;

    use super::*;

    /// The tests that count `QUERY_SLOTS`' permits, one at a time.
    static SLOT_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// A query past its time, or whose client has gone, stops at its next check and frees its
    /// slot; one that answers in time is untouched.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_stop_past_their_time_or_when_their_client_goes() {
        let _alone = SLOT_TESTS.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
        let store = Arc::new(store);
        // A scan that never ends by itself: it checks its limit as the store's scans do.
        let endless = |_: &Store| loop {
            if let Err(stopped) = query_limit::check() {
                return stopped;
            }
            std::thread::yield_now();
        };
        let timeout = std::time::Duration::from_millis(50);
        let stopped = run_query(Arc::clone(&store), timeout, endless)
            .await
            .unwrap();
        assert_eq!(stopped, query_limit::Stopped::Deadline(timeout));
        assert!(stopped_message(stopped).contains("server.query_timeout"));

        let slots = QUERY_SLOTS.available_permits();
        let long = std::time::Duration::from_secs(3600);
        let (tx, rx) = std::sync::mpsc::channel();
        let query = tokio::spawn(run_query(Arc::clone(&store), long, move |s| {
            let _ = tx.send(());
            endless(s)
        }));
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        // The client goes: the request's future is dropped.
        query.abort();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while QUERY_SLOTS.available_permits() < slots {
            assert!(
                std::time::Instant::now() < deadline,
                "the slot was never freed"
            );
            tokio::task::yield_now().await;
        }
        let answered = run_query(Arc::clone(&store), long, |_| query_limit::check()).await;
        assert_eq!(answered.unwrap(), Ok(()));
    }

    /// A query that runs far past its time (one that never checks its limit) makes the query
    /// path stalled; once it ends, it is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_far_past_its_time_is_a_stalled_query_path() {
        let _alone = SLOT_TESTS.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (started, is_started) = std::sync::mpsc::channel::<()>();
        let stuck = tokio::spawn(run_query(
            Arc::new(store),
            std::time::Duration::from_millis(1),
            move |_| {
                let _ = started.send(());
                let _ = released.recv_timeout(std::time::Duration::from_secs(60));
            },
        ));
        is_started
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert_eq!(stalled_query(std::time::Duration::from_secs(3600)), None);
        let limit = std::time::Duration::from_millis(100);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while running_past(limit).is_none() {
            assert!(std::time::Instant::now() < deadline, "never stalled");
            // Between two looks at the condition.
            tokio::task::block_in_place(|| std::thread::park_timeout(limit / 10));
        }
        release.send(()).unwrap();
        stuck.await.unwrap().unwrap();
        assert_eq!(stalled_query(std::time::Duration::from_secs(3600)), None);
    }

    /// One tenant's endless queries hold at most all slots but one: another tenant's query
    /// still runs and answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_tenant_cannot_hold_every_query_slot() {
        let _alone = SLOT_TESTS.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
        let store = Arc::new(store);
        let all = QUERY_SLOTS.available_permits();
        let (greedy, other) = (tenant_query_slots(true), tenant_query_slots(true));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let long = std::time::Duration::from_secs(3600);
        let hogs: Vec<_> = (0..all)
            .map(|_| {
                let (greedy, store) = (Arc::clone(&greedy), Arc::clone(&store));
                let (stop, started) = (Arc::clone(&stop), Arc::clone(&started));
                tokio::spawn(async move {
                    run_tenant_query(&greedy, store, long, move |_| {
                        started.fetch_add(1, Ordering::SeqCst);
                        while !stop.load(Ordering::SeqCst) {
                            std::thread::yield_now();
                        }
                    })
                    .await
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while started.load(Ordering::SeqCst) < all - 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the hogs never started"
            );
            tokio::task::yield_now().await;
        }
        // The greedy tenant holds all it may; its last query waits on its own slots.
        assert_eq!(QUERY_SLOTS.available_permits(), 1);
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            run_tenant_query(&other, Arc::clone(&store), long, |_| 42),
        )
        .await
        .expect("the other tenant's query waited for the greedy one's");
        assert_eq!(answer.unwrap(), 42);
        assert_eq!(started.load(Ordering::SeqCst), all - 1);
        stop.store(true, Ordering::SeqCst);
        for h in hogs {
            h.await.unwrap().unwrap();
        }
    }

    /// More queries than slots: as many as the slots compute at once (each of the first
    /// waits until all slots are taken), never more, and all end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_wait_for_a_slot() {
        let _alone = SLOT_TESTS.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
        let store = Arc::new(store);
        let slots = QUERY_SLOTS.available_permits();
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let queries: Vec<_> = (0..3 * slots)
            .map(|_| {
                let (now, most) = (Arc::clone(&now), Arc::clone(&most));
                tokio::spawn(run_query(
                    Arc::clone(&store),
                    std::time::Duration::from_secs(60),
                    move |_| {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        let deadline =
                            std::time::Instant::now() + std::time::Duration::from_secs(10);
                        while most.load(Ordering::SeqCst) < slots
                            && std::time::Instant::now() < deadline
                        {
                            std::thread::yield_now();
                        }
                        now.fetch_sub(1, Ordering::SeqCst);
                    },
                ))
            })
            .collect();
        for q in queries {
            q.await.unwrap().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), slots);
    }
}
