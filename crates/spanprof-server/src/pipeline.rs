//! The pipeline between receivers and the sinks: a bounded queue and a batcher that writes
//! many receivers' items in one durable write to each sink (the embedded store, and every
//! forwarder's on-disk queue), then answers each receiver. How long each batch's write took
//! is the `spanprof_pipeline_write_seconds` histogram. Receivers answer their clients
//! only after that: nothing acknowledged is lost. A profile the store refuses (see
//! `IngestReport::problems`) is answered to the item it came in as refused
//! ([`SubmitError::Refused`]), not acknowledged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hashbrown::HashMap;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{IngestReport, Request, Store, Storing};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::config::QueueConfig;
use crate::forward::Forwarders;
use crate::metrics::{Metrics, DURATION_BUCKETS};

/// Where accepted work goes; both may be on.
#[derive(Clone)]
pub struct Sinks {
    /// The embedded store, unless the server runs as a pure collector.
    pub store: Option<Arc<Store>>,
    /// The forwarders (possibly none).
    pub forward: Arc<Forwarders>,
    /// Woken when a store write fails: retention runs early (a full disk makes room).
    pub write_failed: Arc<Notify>,
    /// Woken when a write leaves the store past its size limit: retention runs early (a
    /// store under heavy ingest grew a minute of data past it, waiting for the minute's run).
    pub over_limit: Arc<Notify>,
}

/// What a receiver hands over: linked profiles, or spans.
#[derive(Debug)]
pub enum Work {
    /// Profiles, already decoded and linked, and how the store takes them: each alone, or
    /// all or none (receivers that can only answer "stored" or an error).
    Profiles(ProfilesData, Storing),
    /// Spans from OTLP traces: the records the store keeps, and, when forwarders take
    /// traces, the request they came in without its rejected spans, which forwarders send on
    /// as it came (a record keeps attributes as text and a bounded number of events, and no
    /// links or scopes). Without it, forwarders send the records.
    Spans(Vec<SpanRecord>, Option<ExportTraceServiceRequest>),
}

impl Work {
    /// About the bytes it takes in memory (its vectors and strings, not the allocator's
    /// rounding): what [`QueueConfig::max_bytes`] counts.
    pub fn approx_bytes(&self) -> usize {
        use spanprof_format::otlp as o;
        use std::mem::size_of;
        match self {
            Work::Profiles(data, _) => {
                let d = data.dictionary.as_ref();
                let dictionary = d.map_or(0, |d| {
                    d.string_table.iter().map(|s| s.len() + 24).sum::<usize>()
                        + d.mapping_table.len() * size_of::<o::Mapping>()
                        + d.function_table.len() * size_of::<o::Function>()
                        + d.link_table.len() * (size_of::<o::Link>() + 24)
                        + d.attribute_table.len() * (size_of::<o::KeyValueAndUnit>() + 32)
                        + d.location_table
                            .iter()
                            .map(|l| {
                                size_of::<o::Location>() + l.lines.len() * size_of::<o::Line>()
                            })
                            .sum::<usize>()
                        + d.stack_table
                            .iter()
                            .map(|st| size_of::<o::Stack>() + st.location_indices.len() * 4)
                            .sum::<usize>()
                });
                let samples: usize = data
                    .resource_profiles
                    .iter()
                    .flat_map(|r| &r.scope_profiles)
                    .flat_map(|s| &s.profiles)
                    .flat_map(|p| &p.samples)
                    .map(|s| {
                        size_of::<o::Sample>()
                            + s.values.len() * 8
                            + s.attribute_indices.len() * 4
                            + s.timestamps_unix_nano.len() * 8
                    })
                    .sum();
                dictionary + samples
            }
            Work::Spans(spans, request) => {
                let records: usize = spans
                    .iter()
                    .map(|s| {
                        size_of::<SpanRecord>()
                            + s.name.len()
                            + s.service.len()
                            + s.status_message.len()
                            + s.attributes
                                .iter()
                                .map(|(k, v)| 48 + k.len() + v.len())
                                .sum::<usize>()
                    })
                    .sum();
                // Its encoding, which about is what its strings and ids take.
                records + request.as_ref().map_or(0, prost::Message::encoded_len)
            }
        }
    }
}

/// The shortest time between the starts of two batch writes: each ends with a sync, and a
/// sync per request fell behind at 80 % load; this bounds them to 500 a second (commit
/// c141caa).
const MIN_WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(2);

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
type Written = Result<Vec<String>, WriteFailure>;

/// What a batch's write says of all its items: the profiles the store refused, each with
/// the index of the request it is in.
type BatchWritten = Result<Vec<(usize, String)>, WriteFailure>;

/// Why a batch was not written to every sink.
#[derive(Debug, Clone)]
struct WriteFailure {
    /// The sink that failed, for `/health`: "the store", "forwarder NAME's queue".
    sink: String,
    message: String,
    /// Some sink kept it (the store, or a forwarder's queue before the one that failed).
    kept: bool,
}

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
struct Health {
    failing: std::sync::Mutex<Option<Failing>>,
    /// When the batch being gathered or written was started; `None` while the batcher
    /// waits for requests.
    batch_since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Health {
    /// A batch starts (`true`) or is done (`false`).
    fn batch(&self, started: bool) {
        *self
            .batch_since
            .lock()
            .expect("pipeline health lock poisoned") = started.then(std::time::Instant::now);
    }

    /// How long the batch under way has taken at `now`, when that is [`STALL_AFTER`] or
    /// more.
    fn stalled(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        let since = (*self
            .batch_since
            .lock()
            .expect("pipeline health lock poisoned"))?;
        Some(now.saturating_duration_since(since)).filter(|d| *d >= STALL_AFTER)
    }

    fn note<T>(&self, written: &Result<T, WriteFailure>) {
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

struct Item {
    work: Work,
    /// [`Work::approx_bytes`], counted in [`Queued`] until the item is written.
    bytes: usize,
    done: oneshot::Sender<Written>,
    /// The tenant's sinks it goes to.
    to: Arc<Destination>,
}

/// About the bytes, and the number, of one tenant's items queued or being written, against
/// [`QueueConfig::max_bytes`] and [`QueueConfig::capacity`].
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
        self.metrics.set(
            "spanprof_queue_depth",
            &[],
            q.items.load(Ordering::Acquire) as f64,
        );
        self.metrics.set(
            "spanprof_queue_bytes",
            &[],
            q.bytes.load(Ordering::Acquire) as f64,
        );
    }
}

/// The batcher every tenant's [`Pipeline`] feeds: one group commit for all of them, so
/// tenants' writes share their syncs' wait instead of each paying its own. Cheap to clone;
/// the batcher stops once every handle (and every [`Pipeline`]) is dropped and the queue is
/// drained.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Item>,
    /// Requests taken by receivers and not yet queued (or refused): work on its way.
    preparing: Arc<Preparing>,
    /// Items a tenant may have queued.
    capacity: usize,
}

impl Batcher {
    /// Starts the batcher, for up to `tenants` tenants each queueing up to
    /// [`QueueConfig::capacity`] items.
    pub fn start(cfg: QueueConfig, tenants: usize) -> (Batcher, tokio::task::JoinHandle<()>) {
        let capacity = cfg.capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity.saturating_mul(tenants.max(1)));
        let preparing = Arc::new(Preparing::default());
        let task = tokio::spawn(batcher(cfg, rx, Arc::clone(&preparing)));
        (
            Batcher {
                tx,
                preparing,
                capacity,
            },
            task,
        )
    }
}

/// A tenant's handle to submit work; cheap to clone.
#[derive(Clone)]
pub struct Pipeline {
    batcher: Batcher,
    to: Arc<Destination>,
}

/// Counts receivers' requests between arrival and queueing; the batcher waits for them
/// (see [`QueueConfig::batch_age`]) and is woken whenever one is queued or refused.
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
    pub async fn submit(mut self, work: Work, receiver: &'static str) -> Result<(), SubmitError> {
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
                to.metrics.add(
                    "spanprof_rejected_total",
                    &[("receiver", receiver), ("reason", "queue_full")],
                    1.0,
                );
                return Err(SubmitError::Full);
            }
            Err(e) => return Err(e),
        }
        to.gauge_queue();
        match wait.await {
            Ok(Ok(refused)) if refused.is_empty() => Ok(()),
            Ok(Ok(refused)) => Err(SubmitError::Refused(refused)),
            Ok(Err(WriteFailure {
                message,
                kept: false,
                ..
            })) => Err(SubmitError::Failed(message)),
            Ok(Err(WriteFailure {
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
        cfg: QueueConfig,
        metrics: Arc<Metrics>,
    ) -> (Pipeline, tokio::task::JoinHandle<()>) {
        let max_bytes = cfg.max_bytes;
        let (batcher, task) = Batcher::start(cfg, 1);
        (Pipeline::on(&batcher, sinks, max_bytes, metrics), task)
    }

    /// A tenant's pipeline on the shared `batcher`: its work goes to `sinks`, up to
    /// `max_bytes` of it queued ([`QueueConfig::max_bytes`]), counted in `metrics`.
    pub fn on(
        batcher: &Batcher,
        sinks: Sinks,
        max_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Pipeline {
        // Every series an alert may watch exists from the start, at 0: `increase()` of a
        // series that appears with its first event misses that event.
        for gauge in [
            "spanprof_queue_depth",
            "spanprof_queue_bytes",
            "spanprof_pipeline_write_failing",
        ] {
            metrics.set(gauge, &[], 0.0);
        }
        metrics.add("spanprof_pipeline_batches_total", &[], 0.0);
        if sinks.store.is_some() {
            for counter in [
                "spanprof_stored_profiles_total",
                "spanprof_stored_samples_total",
                "spanprof_stored_spans_total",
                "spanprof_repeated_profiles_total",
                "spanprof_store_errors_total",
            ] {
                metrics.add(counter, &[], 0.0);
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
    pub async fn submit(&self, work: Work, receiver: &'static str) -> Result<(), SubmitError> {
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

async fn batcher(cfg: QueueConfig, mut rx: mpsc::Receiver<Item>, preparing: Arc<Preparing>) {
    // When the previous write started.
    let mut last_write: Option<tokio::time::Instant> = None;
    while let Some(first) = rx.recv().await {
        first.to.health.batch(true);
        // Group commit: what queued up during the previous write goes into this batch, and
        // while receivers are still decoding requests the batch waits for them (up to
        // `batch_age`): one durable write for all, and no wait when nothing more is coming.
        // Nor does a write start within MIN_WRITE_INTERVAL of the previous one: requests
        // spread out in time (a steady rate below capacity) would each pay a sync of their own.
        let mut items = vec![first];
        let deadline = tokio::time::Instant::now() + cfg.batch_age;
        let earliest = last_write.map(|t| t + MIN_WRITE_INTERVAL);
        loop {
            while items.len() < cfg.batch_max {
                match rx.try_recv() {
                    Ok(item) => items.push(item),
                    Err(_) => break,
                }
            }
            if items.len() >= cfg.batch_max {
                break;
            }
            let idle = preparing.count.load(Ordering::Acquire) == 0;
            let wake = match earliest {
                Some(e) if idle && tokio::time::Instant::now() < e => e.min(deadline),
                _ if idle => break,
                _ => deadline,
            };
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => items.push(item),
                    None => break,
                },
                () = preparing.changed.notified() => {}
                () = tokio::time::sleep_until(wake) => break,
            }
        }
        last_write = Some(tokio::time::Instant::now());
        // Each tenant's part is written to its sinks at the same time as the others' (their
        // syncs overlap), and answered when written.
        let writing: Vec<_> = by_destination(items)
            .into_iter()
            .map(|(to, items)| {
                to.health.batch(true);
                let (batch, answers) = Batch::gather(items, &to, &cfg.transform);
                let sinks = Arc::clone(&to);
                let write = tokio::task::spawn_blocking(move || batch.write(&sinks));
                (to, answers, write)
            })
            .collect();
        for (to, answers, write) in writing {
            let (result, profiles) = match write.await {
                Ok(r) => r,
                // What it wrote before is unknown: not worth a retry that could store it twice.
                Err(e) => (
                    Err(WriteFailure {
                        sink: "the pipeline".into(),
                        message: format!("writing a batch panicked: {e}"),
                        kept: true,
                    }),
                    Vec::new(),
                ),
            };
            to.health.note(&result);
            to.health.batch(false);
            to.metrics.set(
                "spanprof_pipeline_write_failing",
                &[],
                f64::from(u8::from(result.is_err())),
            );
            let (items, bytes) = (answers.items(), answers.bytes);
            answers.send(&result);
            // Freed here, after the answers, on the runtime thread that decoded them rather
            // than on the blocking thread that wrote them: the allocator frees a block on its
            // own thread with no atomic and no later collection pass (measured: 23 % of the
            // runtime thread's CPU was the allocator taking back thousands of blocks per
            // profile that other threads had freed).
            drop(profiles);
            to.queued.give_back(items, bytes);
            to.gauge_queue();
        }
    }
}

/// `items` by the tenant they go to, in the order each tenant first came.
fn by_destination(items: Vec<Item>) -> Vec<(Arc<Destination>, Vec<Item>)> {
    let mut groups: Vec<(Arc<Destination>, Vec<Item>)> = Vec::new();
    for item in items {
        match groups.iter_mut().find(|(to, _)| Arc::ptr_eq(to, &item.to)) {
            Some((_, group)) => group.push(item),
            None => groups.push((Arc::clone(&item.to), vec![item])),
        }
    }
    groups
}

/// One tenant's part of a batch, as its sinks take it.
struct Batch {
    profiles: Vec<ProfilesData>,
    /// How the store takes each of `profiles`.
    storing: Vec<Storing>,
    spans: Vec<SpanRecord>,
    /// The spans' requests as they came, for forwarders.
    traces: Vec<spanprof_format::trace::ResourceSpans>,
}

/// Where the answers of a tenant's part of a batch go.
struct Answers {
    /// Each item's answer, and the index in the batch's profiles of its profiles (if any).
    done: Vec<(oneshot::Sender<Written>, Option<usize>)>,
    /// The items' [`Item::bytes`].
    bytes: usize,
}

impl Answers {
    fn items(&self) -> usize {
        self.done.len()
    }

    /// Answers each item: the batch's failure, or the profiles of it the store refused.
    fn send(self, result: &BatchWritten) {
        for (d, source) in self.done {
            let answer = result.as_ref().map_err(Clone::clone).map(|refused| {
                refused
                    .iter()
                    .filter(|(s, _)| Some(*s) == source)
                    .map(|(_, problem)| problem.clone())
                    .collect()
            });
            let _ = d.send(answer);
        }
    }
}

impl Batch {
    fn gather(
        items: Vec<Item>,
        to: &Destination,
        transform: &crate::transform::Transform,
    ) -> (Batch, Answers) {
        to.metrics.add("spanprof_pipeline_batches_total", &[], 1.0);
        to.metrics.add(
            "spanprof_pipeline_batch_items_total",
            &[],
            items.len() as f64,
        );
        let mut batch = Batch {
            profiles: Vec::new(),
            storing: Vec::new(),
            spans: Vec::new(),
            traces: Vec::new(),
        };
        let mut answers = Answers {
            done: Vec::with_capacity(items.len()),
            bytes: items.iter().map(|i| i.bytes).sum(),
        };
        let forwarding = !to.sinks.forward.is_empty();
        for mut item in items {
            // The transform stage (processors.transform), before any sink sees the work.
            transform.apply(&mut item.work);
            let source = match item.work {
                Work::Profiles(mut p, how) => {
                    if forwarding {
                        name_profiles(&mut p);
                    }
                    batch.profiles.push(p);
                    batch.storing.push(how);
                    Some(batch.profiles.len() - 1)
                }
                Work::Spans(s, request) => {
                    if forwarding {
                        let request = request
                            .unwrap_or_else(|| spanprof_store::spans::otlp::export_request(&s));
                        batch.traces.extend(request.resource_spans);
                    }
                    batch.spans.extend(s);
                    None
                }
            };
            answers.done.push((item.done, source));
        }
        (batch, answers)
    }

    /// Writes it to `to`'s sinks (on a blocking thread); gives back the profiles, to be
    /// freed by the caller.
    fn write(self, to: &Destination) -> (BatchWritten, Vec<ProfilesData>) {
        let started = std::time::Instant::now();
        let traces = ExportTraceServiceRequest {
            resource_spans: self.traces,
        };
        let requests: Vec<Request<'_>> = self
            .profiles
            .iter()
            .zip(&self.storing)
            .map(|(data, &storing)| Request { data, storing })
            .collect();
        let result = write(&to.sinks, &requests, self.spans, &traces, &to.metrics);
        drop(requests);
        to.metrics.observe(
            "spanprof_pipeline_write_seconds",
            DURATION_BUCKETS,
            started.elapsed().as_secs_f64(),
        );
        (result, self.profiles)
    }
}

/// Gives each profile of `data` that has no id (an empty or all-zero `profile_id`) one of
/// its own, random. A forwarder whose export is sent again after its answer was lost (the
/// receiver wrote it, then the connection broke) then names the same profiles twice, and a
/// receiver that remembers the profiles it stored lately, as spanprof's store does, keeps
/// them once instead of counting them twice.
fn name_profiles(data: &mut ProfilesData) {
    use std::hash::BuildHasher;
    use std::sync::atomic::AtomicU64;
    // Keyed from the OS's randomness once per process; a counter makes each id new.
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let keys = KEYS.get_or_init(std::hash::RandomState::new);
    let profiles = data
        .resource_profiles
        .iter_mut()
        .flat_map(|r| &mut r.scope_profiles)
        .flat_map(|s| &mut s.profiles);
    for p in profiles.filter(|p| p.profile_id.iter().all(|&b| b == 0)) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let (a, b) = (keys.hash_one((n, 0u8)), keys.hash_one((n, 1u8)));
        p.profile_id = [a.to_le_bytes(), b.to_le_bytes()].concat();
    }
}

/// Writes one batch durably to every sink: the store first, then the forwarders' queues with
/// what the store took (what is acknowledged is what goes on: a profile the store refused is
/// not sent downstream either, where an invalid one could fail a whole export) and `traces`,
/// the batch's spans as they came. Returns the profiles the store refused: the index in
/// `profiles` of the request each is in, and why.
fn write(
    sinks: &Sinks,
    profiles: &[Request<'_>],
    spans: Vec<SpanRecord>,
    traces: &ExportTraceServiceRequest,
    metrics: &Metrics,
) -> BatchWritten {
    let forwarding = !sinks.forward.is_empty();
    let report = match &sinks.store {
        None => IngestReport::default(),
        Some(store) => store_write(store, profiles, spans, metrics)
            .map_err(|e| {
                sinks.write_failed.notify_one();
                WriteFailure {
                    sink: "the store".into(),
                    message: e,
                    kept: false,
                }
            })
            .inspect(|_| {
                if store.over_size_limit() {
                    sinks.over_limit.notify_one();
                }
            })?,
    };
    if forwarding {
        let forwarded = without_refused(profiles, &report);
        let refs: Vec<&ProfilesData> = forwarded.iter().map(|p| p.as_ref()).collect();
        if let Err(e) = sinks.forward.enqueue(&refs, traces) {
            if let Some(suppressed) =
                metrics.refusal_to_log("forward_queue", "write_failed", Instant::now())
            {
                tracing::error!(error = %e, suppressed, "forward queue write failed");
            }
            metrics.add("spanprof_forward_queue_errors_total", &[], 1.0);
            let (sink, queued_elsewhere) = match &e {
                crate::forward::ForwardError::Queue {
                    name,
                    queued_elsewhere,
                    ..
                } => (format!("forwarder {name}'s queue"), *queued_elsewhere),
                _ => ("the forwarders".to_owned(), false),
            };
            return Err(WriteFailure {
                sink,
                message: e.to_string(),
                kept: sinks.store.is_some() || queued_elsewhere,
            });
        }
    }
    Ok(report
        .problem_sources
        .into_iter()
        .zip(report.problems)
        .collect())
}

/// Each request of `profiles` without the profiles the store refused (and without the scopes
/// and resources left empty); a request with nothing refused is not copied, one with nothing
/// left (or stored all or none, with one refused) is left out.
fn without_refused<'a>(
    profiles: &[Request<'a>],
    report: &IngestReport,
) -> Vec<std::borrow::Cow<'a, ProfilesData>> {
    use std::borrow::Cow;
    let mut refused: HashMap<usize, Vec<[usize; 3]>> = HashMap::new();
    for (&source, &place) in report.problem_sources.iter().zip(&report.problem_places) {
        refused.entry(source).or_default().push(place);
    }
    let mut out = Vec::with_capacity(profiles.len());
    for (i, &Request { data, storing }) in profiles.iter().enumerate() {
        let Some(places) = refused.get(&i) else {
            out.push(Cow::Borrowed(data));
            continue;
        };
        if storing == Storing::AllOrNone {
            continue;
        }
        let mut kept = data.clone();
        for (ri, rp) in kept.resource_profiles.iter_mut().enumerate() {
            for (si, sp) in rp.scope_profiles.iter_mut().enumerate() {
                let mut pi = 0;
                sp.profiles.retain(|_| {
                    let keep = !places.contains(&[ri, si, pi]);
                    pi += 1;
                    keep
                });
            }
            rp.scope_profiles.retain(|sp| !sp.profiles.is_empty());
        }
        kept.resource_profiles
            .retain(|rp| !rp.scope_profiles.is_empty());
        if !kept.resource_profiles.is_empty() {
            out.push(Cow::Owned(kept));
        }
    }
    out
}

/// Ingests into the store, counting what it stored and refused.
fn store_write(
    store: &Store,
    profiles: &[Request<'_>],
    spans: Vec<SpanRecord>,
    metrics: &Metrics,
) -> Result<IngestReport, String> {
    match store.ingest_requests(profiles, spans) {
        Ok(report) => {
            metrics.add(
                "spanprof_stored_profiles_total",
                &[],
                report.profiles as f64,
            );
            metrics.add("spanprof_stored_samples_total", &[], report.samples as f64);
            metrics.add(
                "spanprof_repeated_profiles_total",
                &[],
                report.repeated_profiles as f64,
            );
            metrics.add("spanprof_stored_spans_total", &[], report.spans as f64);
            if report.rejected_profiles > 0 {
                let invalid = report.rejected_profiles - report.limited_profiles;
                let now = Instant::now();
                for (reason, n) in [("invalid", invalid), ("limit", report.limited_profiles)] {
                    if n == 0 {
                        continue;
                    }
                    metrics.add(
                        "spanprof_rejected_total",
                        &[("receiver", "store"), ("reason", reason)],
                        n as f64,
                    );
                    // Once per 10 s and reason at most, as receivers' refusals: a sender
                    // past a limit repeats at every batch.
                    if let Some(suppressed) = metrics.refusal_to_log("store", reason, now) {
                        tracing::warn!(
                            reason,
                            problems = ?report.problems,
                            suppressed,
                            "profiles refused by the store"
                        );
                    }
                }
            }
            Ok(report)
        }
        Err(e) => {
            // Once per 10 s at most: a full disk fails every batch until space is freed.
            if let Some(suppressed) =
                metrics.refusal_to_log("store", "write_failed", Instant::now())
            {
                // A full disk: what makes room, beside freeing space by hand.
                let hint = if e.to_string().contains("No space left") {
                    "; free space on the disk, or let retention make room: storage.max_size \
                     (--max-size), storage.min_free_disk"
                } else {
                    ""
                };
                tracing::error!(
                    error = %e,
                    suppressed,
                    "store write failed: the batch's requests are answered 503 (retry \
                     later){hint}"
                );
            }
            metrics.add("spanprof_store_errors_total", &[], 1.0);
            Err(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    /// Profiles without an id get one of their own, 16 bytes, each different; an id given
    /// by the producer stays.
    #[test]
    fn forwarded_profiles_are_named_where_they_have_no_id() {
        use spanprof_format::otlp::{Profile, ResourceProfiles, ScopeProfiles};
        let own = vec![5; 16];
        let profiles = vec![
            Profile::default(),
            Profile {
                profile_id: vec![0; 16],
                ..Default::default()
            },
            Profile {
                profile_id: own.clone(),
                ..Default::default()
            },
        ];
        let mut data = super::ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut again = data.clone();
        super::name_profiles(&mut data);
        super::name_profiles(&mut again);
        let ids = |d: &super::ProfilesData| -> Vec<Vec<u8>> {
            let p = &d.resource_profiles[0].scope_profiles[0].profiles;
            p.iter().map(|p| p.profile_id.clone()).collect()
        };
        let (a, b) = (ids(&data), ids(&again));
        assert_eq!((a[2].clone(), b[2].clone()), (own.clone(), own));
        let named = [&a[0], &a[1], &b[0], &b[1]];
        assert!(named
            .iter()
            .all(|id| id.len() == 16 && id.iter().any(|&x| x != 0)));
        let distinct: std::collections::HashSet<_> = named.iter().collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn health_says_stalled_only_while_a_batch_takes_too_long() {
        let health = super::Health::default();
        let now = std::time::Instant::now();
        assert_eq!(health.stalled(now + super::STALL_AFTER), None, "idle");
        health.batch(true);
        let later = now + 2 * super::STALL_AFTER;
        assert!(health
            .stalled(later)
            .is_some_and(|d| d >= super::STALL_AFTER));
        assert_eq!(
            health.stalled(std::time::Instant::now()),
            None,
            "just started"
        );
        health.batch(false);
        assert_eq!(health.stalled(later), None, "done");
    }

    use std::time::{Duration, Instant};

    use prost::Message;
    use spanprof_format::otlp::string_kv;
    use spanprof_store::spans::SpanRecord;
    use spanprof_store::store::{Store, StoreConfig};

    use super::*;
    use crate::config::{ForwardProtocol, ForwarderConfig};
    use crate::forward::queue::{DiskQueue, Signal};

    fn span(n: u8) -> SpanRecord {
        SpanRecord {
            trace_id: [n; 16],
            span_id: [n; 8],
            name: format!("span {n}"),
            service: "svc".into(),
            start_ns: 1_000,
            end_ns: 2_000,
            ..Default::default()
        }
    }

    /// A pipeline on a real store in a temporary directory, with no forwarders.
    fn pipeline(dir: &std::path::Path, batch_age: Duration) -> (Pipeline, Arc<Metrics>) {
        pipeline_on(StoreConfig::new(dir.join("store")), dir, batch_age)
    }

    fn pipeline_on(
        store: StoreConfig,
        dir: &std::path::Path,
        batch_age: Duration,
    ) -> (Pipeline, Arc<Metrics>) {
        let (p, metrics, _task) = pipeline_with(store, &[], dir, batch_age, 0);
        (p, metrics)
    }

    /// A pipeline on a real store and forwarders (never started: what is queued for them
    /// stays in their queues under `dir`), and its batcher's task.
    fn pipeline_with(
        store: StoreConfig,
        forward: &[ForwarderConfig],
        dir: &std::path::Path,
        batch_age: Duration,
        max_bytes: usize,
    ) -> (Pipeline, Arc<Metrics>, tokio::task::JoinHandle<()>) {
        let metrics = Arc::new(Metrics::default());
        let (store, _) = Store::open(store).unwrap();
        let forward = Forwarders::open(forward, dir, Arc::clone(&metrics), None).unwrap();
        let sinks = Sinks {
            store: Some(Arc::new(store)),
            forward: Arc::new(forward),
            write_failed: Arc::new(Notify::new()),
            over_limit: Arc::new(Notify::new()),
        };
        let cfg = QueueConfig {
            capacity: 16,
            max_bytes,
            batch_max: 256,
            batch_age,
            transform: Default::default(),
        };
        let (p, task) = Pipeline::start(sinks, cfg, Arc::clone(&metrics));
        (p, metrics, task)
    }

    fn batches(m: &Metrics) -> (f64, f64) {
        (
            m.get("spanprof_pipeline_batches_total", &[]),
            m.get("spanprof_pipeline_batch_items_total", &[]),
        )
    }

    /// Yields (the test runtime has one thread) until the batcher holds the one item just
    /// submitted: it was queued (depth 1) and the queue is empty again.
    async fn until_the_batcher_holds_it(p: &Pipeline, metrics: &Metrics) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(metrics.get("spanprof_queue_depth", &[]) == 1.0
            && p.batcher.tx.capacity() == p.batcher.tx.max_capacity())
        {
            assert!(
                Instant::now() < deadline,
                "the item never reached the batcher"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_batch_waits_for_announced_requests_and_no_longer() {
        let dir = tempfile::tempdir().unwrap();
        let (p, metrics) = pipeline(dir.path(), Duration::from_secs(30));
        // Alone, an item is written at once: nothing else was announced.
        let t = Instant::now();
        p.submit(Work::Spans(vec![span(1)], None), "test")
            .await
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(batches(&metrics), (1.0, 1.0));

        // An announced request holds the batch until it is queued: one write for both.
        let announced = p.incoming();
        let first = tokio::spawn({
            let p = p.clone();
            async move { p.submit(Work::Spans(vec![span(2)], None), "test").await }
        });
        until_the_batcher_holds_it(&p, &metrics).await;
        // It took the item and decided nothing: a batch is counted when it is decided.
        assert_eq!(
            batches(&metrics),
            (1.0, 1.0),
            "written while a request was announced"
        );
        assert!(!first.is_finished());
        announced
            .submit(Work::Spans(vec![span(3)], None), "test")
            .await
            .unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(batches(&metrics), (2.0, 3.0));

        // A request refused before it was queued releases the batch at once.
        let refused = p.incoming();
        let t = Instant::now();
        let waiting = tokio::spawn({
            let p = p.clone();
            async move { p.submit(Work::Spans(vec![span(4)], None), "test").await }
        });
        until_the_batcher_holds_it(&p, &metrics).await;
        assert_eq!(
            batches(&metrics),
            (2.0, 3.0),
            "written while a request was announced"
        );
        assert!(!waiting.is_finished());
        drop(refused);
        waiting.await.unwrap().unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(batches(&metrics), (3.0, 4.0));
        // Every batch's write was timed.
        let text = metrics.render();
        assert!(
            text.lines()
                .any(|l| l == "spanprof_pipeline_write_seconds_count 3"),
            "{text}"
        );
    }

    /// Two tenants' pipelines on one batcher: requests of both in flight together make one
    /// batch (one sync wait for both), each written to its own tenant's store and counted in
    /// its own metrics; a tenant's queue limit is its own.
    #[tokio::test]
    async fn tenants_share_a_batch_and_keep_their_data_apart() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = QueueConfig {
            capacity: 2,
            max_bytes: 0,
            batch_max: 256,
            batch_age: Duration::from_secs(30),
            transform: Default::default(),
        };
        let (batcher, task) = Batcher::start(cfg, 2);
        let tenant = |name: &str| {
            let metrics = Arc::new(Metrics::default());
            let (store, _) = Store::open(StoreConfig::new(dir.path().join(name))).unwrap();
            let store = Arc::new(store);
            let sinks = Sinks {
                store: Some(Arc::clone(&store)),
                forward: Arc::new(
                    Forwarders::open(&[], dir.path(), Arc::clone(&metrics), None).unwrap(),
                ),
                write_failed: Arc::new(Notify::new()),
                over_limit: Arc::new(Notify::new()),
            };
            let pipeline = Pipeline::on(&batcher, sinks, 0, Arc::clone(&metrics));
            (pipeline, metrics, store)
        };
        let (a, a_metrics, a_store) = tenant("a");
        let (b, b_metrics, b_store) = tenant("b");
        // b's request is announced before a's is queued: the batch waits for it.
        let b_coming = b.incoming();
        let a_sent = tokio::spawn({
            let a = a.clone();
            async move { a.submit(Work::Spans(vec![span(1)], None), "test").await }
        });
        until_the_batcher_holds_it(&a, &a_metrics).await;
        assert!(
            !a_sent.is_finished(),
            "written while b's request was announced"
        );
        b_coming
            .submit(Work::Spans(vec![span(2)], None), "test")
            .await
            .unwrap();
        a_sent.await.unwrap().unwrap();
        assert_eq!(batches(&a_metrics), (1.0, 1.0));
        assert_eq!(batches(&b_metrics), (1.0, 1.0));
        assert!(a_store.span(&[1; 8]).unwrap().is_some());
        assert!(
            a_store.span(&[2; 8]).unwrap().is_none(),
            "b's span in a's store"
        );
        assert!(b_store.span(&[2; 8]).unwrap().is_some());
        assert!(
            b_store.span(&[1; 8]).unwrap().is_none(),
            "a's span in b's store"
        );

        // A tenant holding its whole capacity is refused; the other tenant is not.
        let held = [a.incoming(), a.incoming()];
        let waiting: Vec<_> = (3..5)
            .map(|n| {
                let a = a.clone();
                tokio::spawn(
                    async move { a.submit(Work::Spans(vec![span(n)], None), "test").await },
                )
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while a_metrics.get("spanprof_queue_depth", &[]) < 2.0 {
            assert!(Instant::now() < deadline, "a's requests never queued");
            tokio::task::yield_now().await;
        }
        let refused = a.submit(Work::Spans(vec![span(5)], None), "test").await;
        assert!(matches!(refused, Err(SubmitError::Full)), "{refused:?}");
        drop(held);
        b.submit(Work::Spans(vec![span(6)], None), "test")
            .await
            .unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        drop((a, b, batcher));
        task.await.unwrap();
    }

    /// Past `max_bytes` of queued work, a submission is refused as a full queue (429) while
    /// others wait, and taken again once they are written; one item alone is always taken.
    #[tokio::test]
    async fn a_queue_full_of_bytes_refuses_more_until_written() {
        let dir = tempfile::tempdir().unwrap();
        let spans = |n: u8| Work::Spans((0..50).map(|i| span(n.wrapping_add(i))).collect(), None);
        let each = spans(1).approx_bytes();
        assert!(each > 50 * std::mem::size_of::<SpanRecord>(), "{each}");
        let (p, metrics, _task) = pipeline_with(
            StoreConfig::new(dir.path().join("store")),
            &[],
            dir.path(),
            Duration::from_secs(30),
            each + each / 2,
        );
        // Alone, even past the limit: taken.
        let (big, _, _) = pipeline_with(
            StoreConfig::new(dir.path().join("store2")),
            &[],
            &dir.path().join("d2"),
            Duration::from_secs(30),
            1,
        );
        big.submit(spans(1), "test").await.unwrap();
        // One item held in a batch (a request announced): a second does not fit beside it.
        let announced = p.incoming();
        let first = tokio::spawn({
            let p = p.clone();
            async move { p.submit(spans(1), "test").await }
        });
        until_the_batcher_holds_it(&p, &metrics).await;
        assert_eq!(metrics.get("spanprof_queue_bytes", &[]), each as f64);
        match p.submit(spans(100), "test").await {
            Err(SubmitError::Full) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            metrics.get(
                "spanprof_rejected_total",
                &[("receiver", "test"), ("reason", "queue_full")]
            ),
            1.0
        );
        drop(announced);
        first.await.unwrap().unwrap();
        assert_eq!(metrics.get("spanprof_queue_bytes", &[]), 0.0);
        p.submit(spans(100), "test").await.unwrap();
    }

    /// In one batch, the profiles the store refuses are answered to the item they came in,
    /// and only to it.
    #[tokio::test]
    async fn refused_profiles_are_answered_to_their_own_item() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            max_profile_series: 1,
            ..StoreConfig::new(dir.path().join("store"))
        };
        let (p, metrics) = pipeline_on(cfg, dir.path(), Duration::from_secs(30));
        let cpu = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");
        let labelled = spanprof_format::pprof::decode(cpu, 64 << 20).unwrap();
        let mut plain = labelled.clone();
        plain.sample.iter_mut().for_each(|s| s.label.clear());
        let otlp = |p: &spanprof_format::pprof::Profile| {
            spanprof_format::to_otlp::pprof_to_otlp(p, Default::default(), None)
                .unwrap()
                .0
        };
        let announced = p.incoming();
        let first = tokio::spawn({
            let (p, data) = (p.clone(), otlp(&labelled));
            async move {
                p.submit(Work::Profiles(data, Storing::EachAlone), "test")
                    .await
            }
        });
        until_the_batcher_holds_it(&p, &metrics).await;
        announced
            .submit(Work::Profiles(otlp(&plain), Storing::EachAlone), "test")
            .await
            .unwrap();
        match first.await.unwrap() {
            Err(SubmitError::Refused(problems)) => {
                assert_eq!(problems.len(), 2, "{problems:?}");
                assert!(
                    problems[0].contains("server.max_profile_series"),
                    "{problems:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(batches(&metrics), (1.0, 2.0));
    }

    /// The real Go profile in one request of two resources, each with its two sample types;
    /// the second resource's first profile names a stack its dictionary does not hold.
    fn request() -> ProfilesData {
        let cpu = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");
        let p = spanprof_format::pprof::decode(cpu, 64 << 20).unwrap();
        let mut data = spanprof_format::to_otlp::pprof_to_otlp(&p, Default::default(), None)
            .unwrap()
            .0;
        let mut bad = data.resource_profiles[0].clone();
        bad.resource.get_or_insert_default().attributes = vec![string_kv("service.name", "bad")];
        bad.scope_profiles[0].profiles[0].samples[0].stack_index = 1 << 30;
        data.resource_profiles.push(bad);
        data
    }

    /// What the store refuses is not forwarded either: the forwarder's queue holds the request
    /// without that profile.
    #[tokio::test]
    async fn forwarders_get_what_the_store_took() {
        let dir = tempfile::tempdir().unwrap();
        let down = ForwarderConfig::new("down", ForwardProtocol::Grpc, "http://127.0.0.1:9");
        let (p, _, task) = pipeline_with(
            StoreConfig::new(dir.path().join("store")),
            &[down],
            dir.path(),
            Duration::from_secs(1),
            0,
        );
        let sent = request();
        match p
            .submit(Work::Profiles(sent.clone(), Storing::EachAlone), "test")
            .await
        {
            Err(SubmitError::Refused(problems)) => {
                assert_eq!(problems.len(), 1, "{problems:?}");
                assert!(
                    problems[0].starts_with("resource_profiles[1].scope_profiles[0].profiles[0]"),
                    "{problems:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        drop(p);
        task.await.unwrap();

        let (queue, _) =
            DiskQueue::open(&dir.path().join("forward").join("down"), 1 << 30).unwrap();
        let pending = queue.peek(10, 64 << 20);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].signal, Signal::Profiles);
        let mut forwarded = ProfilesData::decode(&queue.read(&pending[0]).unwrap()[..]).unwrap();
        let mut want = sent;
        want.resource_profiles[1].scope_profiles[0]
            .profiles
            .remove(0);
        // Each named on the way (see `name_profiles`), as the sent ones were not.
        for rp in &mut forwarded.resource_profiles {
            for p in rp.scope_profiles.iter_mut().flat_map(|s| &mut s.profiles) {
                assert_eq!(p.profile_id.len(), 16);
                p.profile_id.clear();
            }
        }
        assert!(forwarded == want, "the request without the refused profile");
    }
}
