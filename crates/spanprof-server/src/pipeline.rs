//! The pipeline between receivers and the sinks: a bounded queue and a batcher that writes
//! many receivers' items in one durable write to each sink (the embedded store, and every
//! forwarder's on-disk queue), then answers each receiver. Receivers answer their clients
//! only after that: nothing acknowledged is lost.

use std::sync::Arc;

use spanprof_format::otlp::ProfilesData;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::Store;
use tokio::sync::{mpsc, oneshot};

use crate::config::QueueConfig;
use crate::forward::Forwarders;
use crate::metrics::Metrics;

/// Where accepted work goes; both may be on.
#[derive(Clone)]
pub struct Sinks {
    /// The embedded store, unless the server runs as a pure collector.
    pub store: Option<Arc<Store>>,
    /// The forwarders (possibly none).
    pub forward: Arc<Forwarders>,
}

/// What a receiver hands over: linked profiles, or spans.
#[derive(Debug)]
pub enum Work {
    /// Profiles, already decoded and linked.
    Profiles(ProfilesData),
    /// Spans from OTLP traces.
    Spans(Vec<SpanRecord>),
}

/// Why a submission was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full: try again shortly (429 / RESOURCE_EXHAUSTED).
    #[error("the ingest queue is full; retry shortly")]
    Full,
    /// The store failed to write it.
    #[error("storing failed: {0}")]
    Failed(String),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Closed,
}

struct Item {
    work: Work,
    done: oneshot::Sender<Result<(), String>>,
}

/// A handle to submit work; cheap to clone.
#[derive(Clone)]
pub struct Pipeline {
    tx: mpsc::Sender<Item>,
    metrics: Arc<Metrics>,
}

impl Pipeline {
    /// Starts the batcher; it stops once every [`Pipeline`] handle is dropped and the queue is
    /// drained.
    pub fn start(
        sinks: Sinks,
        cfg: QueueConfig,
        metrics: Arc<Metrics>,
    ) -> (Pipeline, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(cfg.capacity.max(1));
        let task = tokio::spawn(batcher(sinks, cfg, rx, Arc::clone(&metrics)));
        (Pipeline { tx, metrics }, task)
    }

    /// Queues `work` and waits until it is durable. Never blocks on a full queue: that is
    /// [`SubmitError::Full`] at once, so receivers can answer 429.
    pub async fn submit(&self, work: Work, receiver: &'static str) -> Result<(), SubmitError> {
        let (done, wait) = oneshot::channel();
        match self.tx.try_send(Item { work, done }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.add(
                    "spanprof_rejected_total",
                    &[("receiver", receiver), ("reason", "queue_full")],
                    1.0,
                );
                return Err(SubmitError::Full);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(SubmitError::Closed),
        }
        self.metrics.set(
            "spanprof_queue_depth",
            &[],
            (self.tx.max_capacity() - self.tx.capacity()) as f64,
        );
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SubmitError::Failed(e)),
            Err(_) => Err(SubmitError::Closed),
        }
    }
}

async fn batcher(
    sinks: Sinks,
    cfg: QueueConfig,
    mut rx: mpsc::Receiver<Item>,
    metrics: Arc<Metrics>,
) {
    while let Some(first) = rx.recv().await {
        let mut items = vec![first];
        let deadline = tokio::time::Instant::now() + cfg.batch_age;
        while items.len() < cfg.batch_max {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(item)) => items.push(item),
                Ok(None) | Err(_) => break,
            }
        }
        let mut profiles = Vec::new();
        let mut spans = Vec::new();
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            match item.work {
                Work::Profiles(p) => profiles.push(p),
                Work::Spans(s) => spans.extend(s),
            }
            done.push(item.done);
        }
        let sinks = sinks.clone();
        let metrics_w = Arc::clone(&metrics);
        let written =
            tokio::task::spawn_blocking(move || write(&sinks, profiles, spans, &metrics_w)).await;
        let result = match written {
            Ok(r) => r,
            Err(e) => Err(format!("writing a batch panicked: {e}")),
        };
        for d in done {
            let _ = d.send(result.clone());
        }
        metrics.set("spanprof_queue_depth", &[], rx.len() as f64);
    }
}

/// Writes one batch durably to every sink: the forwarders' queues first, then the store.
fn write(
    sinks: &Sinks,
    profiles: Vec<ProfilesData>,
    spans: Vec<SpanRecord>,
    metrics: &Metrics,
) -> Result<(), String> {
    if let Err(e) = sinks.forward.enqueue(&profiles, &spans) {
        tracing::error!(error = %e, "forward queue write failed");
        metrics.add("spanprof_forward_queue_errors_total", &[], 1.0);
        return Err(e.to_string());
    }
    let Some(store) = &sinks.store else {
        return Ok(());
    };
    let refs: Vec<&ProfilesData> = profiles.iter().collect();
    match store.ingest(&refs, spans) {
        Ok(report) => {
            metrics.add(
                "spanprof_stored_profiles_total",
                &[],
                report.profiles as f64,
            );
            metrics.add("spanprof_stored_samples_total", &[], report.samples as f64);
            metrics.add("spanprof_stored_spans_total", &[], report.spans as f64);
            if report.rejected_profiles > 0 {
                metrics.add(
                    "spanprof_rejected_total",
                    &[("receiver", "store"), ("reason", "invalid")],
                    report.rejected_profiles as f64,
                );
                tracing::warn!(problems = ?report.problems, "profiles refused by the store");
            }
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "store write failed");
            metrics.add("spanprof_store_errors_total", &[], 1.0);
            Err(e.to_string())
        }
    }
}
