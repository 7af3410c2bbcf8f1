//! A query's bound in time, and its cancellation, checked by the store's scans: a query whose
//! client has gone, or that ran past its deadline, stops at its next block or series instead of
//! computing on for minutes and holding a query slot.
//!
//! The bound is set per thread around a query ([`within`]), so every store call made inside it
//! is bounded without each taking a parameter.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a query was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// It ran past its deadline; the duration is the time it was given.
    #[error("the query ran past its time limit of {}s", .0.as_secs_f64())]
    Deadline(Duration),
    /// Its client went away.
    #[error("the query's client went away")]
    Cancelled,
}

/// A query's deadline and the flag its client's departure sets.
#[derive(Debug, Clone)]
pub struct QueryLimit {
    deadline: Instant,
    allowed: Duration,
    cancelled: Arc<AtomicBool>,
}

impl QueryLimit {
    /// A query that may take `allowed` from now, and is stopped once `cancelled` is set.
    pub fn new(allowed: Duration, cancelled: Arc<AtomicBool>) -> QueryLimit {
        QueryLimit {
            deadline: Instant::now() + allowed,
            allowed,
            cancelled,
        }
    }
}

thread_local! {
    static LIMIT: RefCell<Option<QueryLimit>> = const { RefCell::new(None) };
}

/// Runs `query` with `limit` over every store scan it makes on this thread.
pub fn within<T>(limit: QueryLimit, query: impl FnOnce() -> T) -> T {
    struct Restore(Option<QueryLimit>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            LIMIT.with(|l| *l.borrow_mut() = previous);
        }
    }
    let _restore = Restore(LIMIT.with(|l| l.borrow_mut().replace(limit)));
    query()
}

/// `Err` once the current query is past its deadline or cancelled; `Ok` outside a query.
/// Costs a clock read: call it per block or per batch of series, not per sample.
pub fn check() -> Result<(), Stopped> {
    LIMIT.with(|l| match &*l.borrow() {
        Some(limit) if limit.cancelled.load(Ordering::Relaxed) => Err(Stopped::Cancelled),
        Some(limit) if Instant::now() >= limit.deadline => Err(Stopped::Deadline(limit.allowed)),
        _ => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_stopped_past_its_deadline_or_once_cancelled_and_only_inside() {
        assert_eq!(check(), Ok(()));
        let flag = Arc::new(AtomicBool::new(false));
        let past = QueryLimit::new(Duration::ZERO, flag.clone());
        assert_eq!(within(past, check), Err(Stopped::Deadline(Duration::ZERO)));
        let long = QueryLimit::new(Duration::from_secs(3600), flag.clone());
        assert_eq!(within(long.clone(), check), Ok(()));
        flag.store(true, Ordering::Relaxed);
        assert_eq!(within(long, check), Err(Stopped::Cancelled));
        assert_eq!(check(), Ok(()), "the limit ends with its query");
    }
}
