//! The pipeline's health as `/health` reports it: a run of failed writes, and a batch that
//! takes too long.

use super::sinks::SinkFailure;

/// A run of batches the pipeline could not write to every sink (a full disk, a file size
/// limit, a log that refuses writes after a failed `fdatasync`): meanwhile receivers answer
/// 503. It ends with the next batch written. What `/health` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When the first batch of the run failed.
    pub since: std::time::SystemTime,
    /// Batches that failed in a row.
    pub batches: u64,
    /// The sink the last one failed in ("the store", "forwarder NAME's queue").
    pub sink: String,
    /// Its error.
    pub error: String,
}

/// How long one batch may take (gathered, then written) before `/health` says the pipeline
/// is stuck (a write that hangs: a disk that does not answer). A batch is written in
/// milliseconds; a slow disk's fsync takes seconds.
pub const STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The run of failed writes going on, and when the batcher last moved, shared by the
/// batcher and the pipeline's handles.
#[derive(Default)]
pub(super) struct Health {
    pub(super) failing: std::sync::Mutex<Option<Failing>>,
    /// When the batch being gathered or written was started; `None` while the batcher
    /// waits for requests.
    batch_since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Health {
    /// A batch starts (`true`) or is done (`false`).
    pub(super) fn batch(&self, started: bool) {
        *self
            .batch_since
            .lock()
            .expect("pipeline health lock poisoned") = started.then(std::time::Instant::now);
    }

    /// How long the batch under way has taken at `now`, when that is [`STALL_AFTER`] or
    /// more.
    pub(super) fn stalled(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        let since = (*self
            .batch_since
            .lock()
            .expect("pipeline health lock poisoned"))?;
        Some(now.saturating_duration_since(since)).filter(|d| *d >= STALL_AFTER)
    }

    pub(super) fn note<T>(&self, written: &Result<T, SinkFailure>) {
        let mut failing = self.failing.lock().expect("pipeline health lock poisoned");
        match (written, failing.as_mut()) {
            (Ok(_), _) => {
                // The end of a run is said: its start was an error line, and /health's 503.
                if let Some(run) = failing.take() {
                    let seconds = run.since.elapsed().unwrap_or_default().as_secs();
                    tracing::info!(sink = %run.sink, failed_batches = run.batches, seconds, "writing again: requests are taken again");
                }
            }
            (Err(e), Some(run)) => {
                run.batches += 1;
                run.sink.clone_from(&e.sink);
                run.error.clone_from(&e.message);
            }
            (Err(e), None) => {
                *failing = Some(Failing {
                    since: std::time::SystemTime::now(),
                    batches: 1,
                    sink: e.sink.clone(),
                    error: e.message.clone(),
                });
            }
        }
    }
}
