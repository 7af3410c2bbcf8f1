//! The pipeline between receivers and the sinks: a bounded queue and a [`Batcher`] that
//! writes many receivers' items in one durable write to each sink ([`Sinks`]: the embedded
//! store, and every forwarder's on-disk queue), then answers each receiver. How long each
//! batch's write took is the `spanprof_pipeline_write_seconds` histogram. Receivers answer
//! their clients only after that: nothing acknowledged is lost. A profile the store refuses
//! (see `IngestReport::problems`) is answered to the item it came in as refused
//! ([`SubmitError::Refused`]), not acknowledged.

mod batcher;
mod health;
mod sinks;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify};

pub use crate::work::Work;
#[cfg(test)]
use batcher::name_profiles;
pub use batcher::Batcher;
use health::Health;
pub use health::{Failing, STALL_AFTER};
use sinks::SinkFailure;
pub use sinks::Sinks;

use crate::config::ProcessorsConfig;
use crate::metrics::Metrics;

/// Why a submission was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full: try again shortly (429 / RESOURCE_EXHAUSTED).
    #[error("the ingest queue is full; retry shortly")]
    Full,
    /// A sink (the store, a forwarder's disk queue) could not write it, so none of it was
    /// kept (503 / UNAVAILABLE: a full disk is freed, a client retries).
    #[error("the server could not write this request, so none of it was kept; retry later: {0}")]
    Failed(String),
    /// The store (or a forwarder's queue) took it but a forwarder's queue could not: it is
    /// stored, and not sent to that forwarder (500: sending it again would store it twice).
    #[error(
        "this request was stored but could not be queued for forwarding, and sending it again \
         would store it twice: {0}"
    )]
    PartlyWritten(String),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Closed,
    /// The store refused profiles of it (each message names the profile and why); the rest
    /// of it is stored.
    #[error("{} refused by the store: {}", plural(.0.len(), "profile was", "profiles were"), .0.join("; "))]
    Refused(Vec<String>),
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What a batch's write says of one item: the profiles of it the store refused.
type Written = Result<Vec<String>, SinkFailure>;

struct Item {
    work: Work,
    /// [`Work::approx_bytes`], counted in [`Queued`] until the item is written.
    bytes: usize,
    done: oneshot::Sender<Written>,
    /// The tenant's sinks it goes to.
    to: Arc<Destination>,
}

/// About the bytes, and the number, of one tenant's items queued or being written, against
/// [`crate::config::BatchConfig::queue_size`] and [`crate::config::BatchConfig::queue_capacity`].
struct Queued {
    bytes: AtomicUsize,
    max: usize,
    items: AtomicUsize,
    max_items: usize,
}

impl Queued {
    /// Counts one more item of `n` bytes, unless that goes past a limit while other items
    /// are there.
    fn take(&self, n: usize) -> bool {
        if self.items.fetch_add(1, Ordering::AcqRel) >= self.max_items {
            self.items.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let before = self.bytes.fetch_add(n, Ordering::AcqRel);
        if self.max != 0 && before > 0 && before.saturating_add(n) > self.max {
            self.give_back(1, n);
            return false;
        }
        true
    }

    fn give_back(&self, items: usize, bytes: usize) {
        self.items.fetch_sub(items, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// One tenant's end of the pipeline: its sinks, its counters and its health.
struct Destination {
    sinks: Sinks,
    metrics: Arc<Metrics>,
    queued: Queued,
    health: Health,
}

impl Destination {
    /// Sets the queue gauges from [`Queued`].
    fn gauge_queue(&self) {
        let q = &self.queued;
        let (depth, bytes) = (&self.metrics.queue_depth, &self.metrics.queue_bytes);
        depth.set((), q.items.load(Ordering::Acquire) as f64);
        bytes.set((), q.bytes.load(Ordering::Acquire) as f64);
    }
}

/// A tenant's handle to submit work; cheap to clone.
#[derive(Clone)]
pub struct Pipeline {
    batcher: Batcher,
    to: Arc<Destination>,
}

/// Counts receivers' requests between arrival and queueing; the batcher waits for them
/// (see [`crate::config::BatchConfig::max_age`]) and is woken whenever one is queued or refused.
#[derive(Default)]
struct Preparing {
    count: AtomicUsize,
    changed: Notify,
}

/// A request a receiver has taken and will submit: from [`Pipeline::incoming`] until
/// [`Incoming::submit`] queues it or the value is dropped (the request was refused), the
/// batcher knows one more item is on its way and waits for it rather than write a small batch.
pub struct Incoming {
    pipeline: Pipeline,
    counted: bool,
}

impl Incoming {
    fn release(&mut self) {
        if std::mem::take(&mut self.counted) {
            let p = &self.pipeline.batcher.preparing;
            p.count.fetch_sub(1, Ordering::AcqRel);
            p.changed.notify_one();
        }
    }

    /// Queues `work` and waits until it is durable. Never blocks on a full queue: that is
    /// [`SubmitError::Full`] at once, so receivers can answer 429.
    pub async fn submit(
        mut self,
        work: Work,
        receiver: crate::metrics::Receiver,
    ) -> Result<(), SubmitError> {
        let (done, wait) = oneshot::channel();
        let bytes = work.approx_bytes();
        let to = &self.pipeline.to;
        let sent = if to.queued.take(bytes) {
            let item = Item {
                work,
                bytes,
                done,
                to: Arc::clone(to),
            };
            let sent = self.pipeline.batcher.tx.try_send(item);
            if sent.is_err() {
                to.queued.give_back(1, bytes);
            }
            sent.map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => SubmitError::Full,
                mpsc::error::TrySendError::Closed(_) => SubmitError::Closed,
            })
        } else {
            Err(SubmitError::Full)
        };
        self.release();
        let to = &self.pipeline.to;
        match sent {
            Ok(()) => {}
            Err(SubmitError::Full) => {
                let reason = crate::metrics::RejectReason::QueueFull;
                to.metrics.rejected.add((receiver, reason), 1.0);
                return Err(SubmitError::Full);
            }
            Err(e) => return Err(e),
        }
        to.gauge_queue();
        match wait.await {
            Ok(Ok(refused)) if refused.is_empty() => Ok(()),
            Ok(Ok(refused)) => Err(SubmitError::Refused(refused)),
            Ok(Err(SinkFailure {
                message,
                kept: false,
                ..
            })) => Err(SubmitError::Failed(message)),
            Ok(Err(SinkFailure {
                message,
                kept: true,
                ..
            })) => Err(SubmitError::PartlyWritten(message)),
            Err(_) => Err(SubmitError::Closed),
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.release();
    }
}

impl Pipeline {
    /// Starts a batcher of its own and a pipeline on it (a server of one tenant, tests).
    pub fn start(
        sinks: Sinks,
        cfg: ProcessorsConfig,
        metrics: Arc<Metrics>,
    ) -> (Pipeline, tokio::task::JoinHandle<()>) {
        let max_bytes = cfg.batch.queue_bytes();
        let (batcher, task) = Batcher::start(cfg, 1);
        (Pipeline::on(&batcher, sinks, max_bytes, metrics), task)
    }

    /// A tenant's pipeline on the shared `batcher`: its work goes to `sinks`, up to
    /// `max_bytes` of it queued ([`crate::config::BatchConfig::queue_size`]), counted in `metrics`.
    pub fn on(
        batcher: &Batcher,
        sinks: Sinks,
        max_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Pipeline {
        // Every series an alert may watch exists from the start, at 0: `increase()` of a
        // series that appears with its first event misses that event.
        let m = &metrics;
        for gauge in [&m.queue_depth, &m.queue_bytes, &m.pipeline_write_failing] {
            gauge.set((), 0.0);
        }
        m.pipeline_batches.add((), 0.0);
        if sinks.store.is_some() {
            for counter in [
                &m.stored_profiles,
                &m.stored_samples,
                &m.stored_spans,
                &m.repeated_profiles,
                &m.store_errors,
            ] {
                counter.add((), 0.0);
            }
        }
        Pipeline {
            batcher: batcher.clone(),
            to: Arc::new(Destination {
                sinks,
                metrics,
                queued: Queued {
                    bytes: AtomicUsize::new(0),
                    max: max_bytes,
                    items: AtomicUsize::new(0),
                    max_items: batcher.capacity,
                },
                health: Health::default(),
            }),
        }
    }

    /// Announces a request that will be submitted: call it as soon as a receiver takes one,
    /// before decoding it, and submit through the returned value.
    pub fn incoming(&self) -> Incoming {
        self.batcher.preparing.count.fetch_add(1, Ordering::AcqRel);
        Incoming {
            pipeline: self.clone(),
            counted: true,
        }
    }

    /// Queues `work` and waits until it is durable ([`Incoming::submit`] for work that was
    /// not announced).
    pub async fn submit(
        &self,
        work: Work,
        receiver: crate::metrics::Receiver,
    ) -> Result<(), SubmitError> {
        self.incoming().submit(work, receiver).await
    }

    /// The run of batches that could not be written going on, if any: `Some` from a batch a
    /// sink failed to write until the next batch written.
    pub fn failing(&self) -> Option<Failing> {
        self.to
            .health
            .failing
            .lock()
            .expect("pipeline health lock poisoned")
            .clone()
    }

    /// How long the batch under way has taken, when that is [`STALL_AFTER`] or more: a
    /// sink's write that hangs, with its requests (and those queued behind) waiting.
    pub fn stalled(&self) -> Option<std::time::Duration> {
        self.to.health.stalled(std::time::Instant::now())
    }
}
