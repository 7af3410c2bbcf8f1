//! The batcher every tenant's pipeline feeds: it gathers what queued up into one batch per
//! tenant, writes each to its tenant's [`Sinks`](super::Sinks) on a blocking thread, and
//! answers every item.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use spanprof_format::otlp::ProfilesData;
use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Request, Storing};
use tokio::sync::{mpsc, oneshot};

use super::sinks::{Refusals, SinkBatch, SinkFailure};
use super::{Destination, Item, Preparing, Work, Written};
use crate::config::ProcessorsConfig;

/// The shortest time between the starts of two batch writes: each ends with a sync, and a
/// sync per request fell behind at 80 % load; this bounds them to 500 a second (commit
/// c141caa).
const MIN_WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(2);

/// What a batch's write says of all its items: the profiles the store refused, each with
/// the index of the request it is in.
type BatchWritten = Result<Refusals, SinkFailure>;

/// The batcher every tenant's [`Pipeline`](super::Pipeline) feeds: one group commit for all
/// of them, so tenants' writes share their syncs' wait instead of each paying its own. Cheap
/// to clone; the batcher stops once every handle (and every `Pipeline`) is dropped and the
/// queue is drained.
#[derive(Clone)]
pub struct Batcher {
    pub(super) tx: mpsc::Sender<Item>,
    /// Requests taken by receivers and not yet queued (or refused): work on its way.
    pub(super) preparing: Arc<Preparing>,
    /// Items a tenant may have queued.
    pub(super) capacity: usize,
}

impl Batcher {
    /// Starts the batcher, for up to `tenants` tenants each queueing up to
    /// [`crate::config::BatchConfig::queue_capacity`] items.
    pub fn start(cfg: ProcessorsConfig, tenants: usize) -> (Batcher, tokio::task::JoinHandle<()>) {
        let capacity = cfg.batch.queue_capacity.max(1);
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

async fn batcher(cfg: ProcessorsConfig, mut rx: mpsc::Receiver<Item>, preparing: Arc<Preparing>) {
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
        let deadline = tokio::time::Instant::now() + cfg.batch.max_age.0;
        let earliest = last_write.map(|t| t + MIN_WRITE_INTERVAL);
        loop {
            while items.len() < cfg.batch.max_items {
                match rx.try_recv() {
                    Ok(item) => items.push(item),
                    Err(_) => break,
                }
            }
            if items.len() >= cfg.batch.max_items {
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
                    Err(SinkFailure {
                        sink: "the pipeline".into(),
                        message: format!("writing a batch panicked: {e}"),
                        kept: true,
                    }),
                    Vec::new(),
                ),
            };
            to.health.note(&result);
            to.health.batch(false);
            let failing = f64::from(u8::from(result.is_err()));
            to.metrics.pipeline_write_failing.set((), failing);
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
        to.metrics.pipeline_batches.add((), 1.0);
        to.metrics.pipeline_batch_items.add((), items.len() as f64);
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
        let batch = SinkBatch {
            profiles: &requests,
            spans: self.spans,
            traces: &traces,
        };
        let result = to.sinks.write(batch, &to.metrics);
        drop(requests);
        let seconds = started.elapsed().as_secs_f64();
        to.metrics.pipeline_write_seconds().observe(seconds);
        (result, self.profiles)
    }
}

/// Gives each profile of `data` that has no id (an empty or all-zero `profile_id`) one of
/// its own, random. A forwarder whose export is sent again after its answer was lost (the
/// receiver wrote it, then the connection broke) then names the same profiles twice, and a
/// receiver that remembers the profiles it stored lately, as spanprof's store does, keeps
/// them once instead of counting them twice.
pub(super) fn name_profiles(data: &mut ProfilesData) {
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
