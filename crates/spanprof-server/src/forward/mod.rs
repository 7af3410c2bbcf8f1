//! Forwarders: the second sink. Each is a downstream endpoint (OTLP over gRPC or HTTP, or
//! Pyroscope's push.v1 for profiles) that gets a copy of the profiles and spans the pipeline
//! accepts.
//!
//! The pipeline appends each batch durably to every forwarder's [`queue::DiskQueue`] before it
//! acknowledges the receivers; a task per forwarder then reads the queue, combines records
//! into exports (count, bytes, age), sends them, retries with exponential backoff and jitter
//! (honouring `Retry-After` and gRPC's `RetryInfo`), and moves the queue's cursor only after
//! the downstream acknowledged. So a restart, or a downstream outage shorter than the queue's
//! size allows, loses nothing. An export the downstream refuses for good (a 4xx other than
//! 429; a gRPC error OTLP does not retry, RESOURCE_EXHAUSTED without `RetryInfo` included)
//! is dropped and counted rather than retried forever ahead of the rest of the queue; but an
//! answer that refuses the endpoint itself (401, 403, 404, 405, 407, 421; gRPC
//! PERMISSION_DENIED, UNIMPLEMENTED, UNAUTHENTICATED: a wrong path, port or credentials) is
//! retried, the forwarder failing, so that fixing the configuration delivers the queue.

pub mod export;
pub mod lag;
pub mod push;
pub mod queue;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::body::Bytes;
use prost::Message;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::log::LogError;
use tokio::sync::{watch, Notify};

use crate::config::{ForwardProtocol, ForwarderConfig};
use crate::metrics::{DropReason, Metrics};
use export::{Exporter, Outcome};
use queue::{DiskQueue, Pending, Signal};

/// Why forwarding could not start or a batch could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// A forwarder's settings are unusable.
    #[error("forwarder {name}: {source}")]
    Config {
        /// The forwarder.
        name: String,
        /// What is wrong.
        #[source]
        source: crate::config::ConfigError,
    },
    /// The forwarders' names are unusable (each names itself in the message).
    #[error("{0}")]
    Names(crate::config::ConfigError),
    /// A forwarder's on-disk queue failed.
    #[error("forwarder {name}: queue: {source}")]
    Queue {
        /// The forwarder.
        name: String,
        /// What failed.
        #[source]
        source: LogError,
        /// Whether the queue of a forwarder before this one took the batch (it will be
        /// sent there): the batch was partly written.
        queued_elsewhere: bool,
    },
}

/// One downstream endpoint: its settings, queue and client.
struct Forwarder {
    cfg: ForwarderConfig,
    /// Its name in logs and metrics: `name`, or `name/tenant` for a tenant's own.
    label: String,
    queue: DiskQueue,
    exporter: Exporter,
    wake: Notify,
}

/// Every configured forwarder; empty when none is. `Send + Sync`.
pub struct Forwarders {
    list: Vec<Arc<Forwarder>>,
    metrics: Arc<Metrics>,
}

impl Forwarders {
    /// Opens each forwarder's queue under `data_dir/forward/{name}/` (records left by an
    /// earlier run are sent first). A tenant's forwarders (`tenant`) are named
    /// `name/tenant` in logs and metrics.
    pub fn open(
        configs: &[ForwarderConfig],
        data_dir: &Path,
        metrics: Arc<Metrics>,
        tenant: Option<String>,
    ) -> Result<Forwarders, ForwardError> {
        // Checked with the rest of the configuration before the server starts; again here,
        // where the names become directories.
        crate::config::check_forwarder_names(configs).map_err(ForwardError::Names)?;
        let mut list: Vec<Arc<Forwarder>> = Vec::new();
        for cfg in configs {
            let config_error = |source| ForwardError::Config {
                name: cfg.name.clone(),
                source,
            };
            let exporter = Exporter::new(cfg).map_err(config_error)?;
            let dir = data_dir.join("forward").join(&cfg.name);
            let queue_error = |source| ForwardError::Queue {
                name: cfg.name.clone(),
                source,
                queued_elsewhere: false,
            };
            std::fs::create_dir_all(&dir).map_err(|source| {
                queue_error(LogError::Io {
                    path: dir.clone(),
                    source,
                })
            })?;
            let (queue, problems) = DiskQueue::open(&dir, cfg.queue_size).map_err(queue_error)?;
            for p in problems {
                tracing::warn!(forwarder = %cfg.name, problem = %p, "forward queue damage skipped");
            }
            if cfg.tls.insecure_skip_verify {
                tracing::warn!(forwarder = %cfg.name, endpoint = %cfg.endpoint, "TLS certificates are not checked (tls.insecure_skip_verify): anyone on the path can pose as the endpoint");
            }
            let signals = match (cfg.sends_profiles(), cfg.sends_traces()) {
                (true, true) => "profiles, traces",
                (true, false) => "profiles",
                _ => "traces",
            };
            tracing::info!(forwarder = %cfg.name, endpoint = %cfg.endpoint, protocol = %cfg.protocol, signals, queued = queue.pending_records(), "forwarding");
            let f = Forwarder {
                cfg: cfg.clone(),
                label: match &tenant {
                    Some(t) => format!("{}/{t}", cfg.name),
                    None => cfg.name.clone(),
                },
                queue,
                exporter,
                wake: Notify::new(),
            };
            f.gauges(&metrics);
            list.push(Arc::new(f));
        }
        Ok(Forwarders { list, metrics })
    }

    /// True when no forwarder is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Appends a pipeline batch durably to every forwarder's queue (blocking: call it off the
    /// async threads). When it returns `Ok`, the batch will reach every downstream.
    pub fn enqueue(
        &self,
        profiles: &[&ProfilesData],
        traces: &ExportTraceServiceRequest,
    ) -> Result<(), ForwardError> {
        if self.list.is_empty() {
            return Ok(());
        }
        let profiles: Vec<Vec<u8>> = profiles.iter().map(|p| p.encode_to_vec()).collect();
        let traces = (!traces.resource_spans.is_empty()).then(|| traces.encode_to_vec());
        let mut queued = false;
        for f in &self.list {
            let mut records: Vec<(Signal, &[u8])> = Vec::new();
            if f.cfg.sends_profiles() {
                records.extend(profiles.iter().map(|p| (Signal::Profiles, p.as_slice())));
            }
            if let (true, Some(t)) = (f.cfg.sends_traces(), &traces) {
                records.push((Signal::Traces, t.as_slice()));
            }
            if records.is_empty() {
                continue;
            }
            let dropped = f
                .queue
                .append(&records)
                .map_err(|source| ForwardError::Queue {
                    name: f.cfg.name.clone(),
                    source,
                    queued_elsewhere: queued,
                })?;
            queued = true;
            if dropped > 0 {
                tracing::warn!(forwarder = %f.label, records = dropped, max_bytes = f.cfg.queue_size, "forward queue full: oldest records dropped");
                let dropped_records = &self.metrics.forward_dropped_records;
                dropped_records.add(&[&f.label], DropReason::QueueFull, dropped as f64);
            }
            f.gauges(&self.metrics);
            f.wake.notify_one();
        }
        Ok(())
    }

    /// Starts one sending task per forwarder; each stops, after the export in flight, once
    /// `stop` turns true. What is still queued stays on disk for the next start.
    pub fn start(&self, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        self.list
            .iter()
            .map(|f| {
                tokio::spawn(send_loop(
                    Arc::clone(f),
                    Arc::clone(&self.metrics),
                    stop.clone(),
                ))
            })
            .collect()
    }
}

impl Forwarder {
    fn gauges(&self, metrics: &Metrics) {
        let labels = [self.label.as_str()];
        let records = self.queue.pending_records() as f64;
        metrics.forward_queued_records.set(&labels, (), records);
        let bytes = self.queue.disk_bytes() as f64;
        metrics.forward_queue_bytes.set(&labels, (), bytes);
    }

    /// The records to send now (taken), or how long to wait before a batch is due.
    fn due(&self) -> Result<Vec<Pending>, Option<Duration>> {
        let Some(front) = self.queue.front() else {
            return Err(None);
        };
        let age = front.since.elapsed();
        let full = self.queue.untaken_records() >= self.cfg.batch_size;
        if full || age >= self.cfg.batch_age {
            Ok(self
                .queue
                .take(self.cfg.batch_size, self.cfg.batch_max_bytes))
        } else {
            Err(Some(self.cfg.batch_age - age))
        }
    }
}

/// What an export task came back with.
struct Sent {
    export: Combined,
    outcome: Outcome,
}

/// Reads and combines `batch`, then sends it: one export in flight.
async fn send(f: Arc<Forwarder>, metrics: Arc<Metrics>, batch: Vec<Pending>) -> Option<Sent> {
    let reader = Arc::clone(&f);
    // Off the runtime threads: reading, merging and (push.v1) converting to pprof are CPU
    // work, and the exports in flight do theirs in parallel.
    let (export, unconvertible) = tokio::task::spawn_blocking(move || {
        if reader.cfg.protocol == ForwardProtocol::Push && batch.first()?.signal == Signal::Profiles
        {
            // push.v1 sends pprof per series: converted once here, not again on each retry.
            push_export(&reader, &metrics, batch)
        } else {
            combine(&reader.queue, batch).map(|export| (export, None))
        }
    })
    .await
    .expect("reading the forward queue panicked")?;
    if let Some(e) = unconvertible {
        let outcome = Outcome::Rejected(format!("not convertible to a push.v1 request: {e}"));
        return Some(Sent { export, outcome });
    }
    let outcome = f
        .exporter
        .export(export.signal, export.message.clone())
        .await;
    Some(Sent { export, outcome })
}

/// The push.v1 export of the profile records `batch`: each record converted to pprof on its
/// own (see [`push::push_request_of`]). Records that do not convert are dropped here, counted
/// as rejected; when none converts, the export is returned with why, to be dropped whole.
fn push_export(
    f: &Forwarder,
    metrics: &Metrics,
    batch: Vec<Pending>,
) -> Option<(Combined, Option<String>)> {
    let (read, bodies, _) = read_batch(&f.queue, &batch)?;
    let converted = push::push_request_of(&bodies, f.cfg.gzip);
    if converted.failed.len() == bodies.len() {
        let reason = converted
            .failed
            .into_iter()
            .next()
            .map(|(_, e)| e.to_string());
        let export = Combined {
            signal: Signal::Profiles,
            message: Bytes::new(),
            records: read.len(),
            taken: batch,
        };
        return Some((export, reason));
    }
    if let Some((_, first)) = converted.failed.first() {
        let n = converted.failed.len();
        tracing::error!(forwarder = %f.label, records = n, reason = %first, "queued profiles not convertible to a push.v1 request; dropped");
        let dropped = &metrics.forward_dropped_records;
        dropped.add(&[&f.label], DropReason::Rejected, n as f64);
    }
    Some((
        Combined {
            signal: Signal::Profiles,
            message: converted.request.into(),
            records: read.len() - converted.failed.len(),
            taken: batch,
        },
        None,
    ))
}

/// Sends again an export that failed.
async fn resend(f: Arc<Forwarder>, export: Combined) -> Option<Sent> {
    let outcome = f
        .exporter
        .export(export.signal, export.message.clone())
        .await;
    Some(Sent { export, outcome })
}

// One loop over the sender's states (sending, backing off, stopping), kept whole so the
// order of their checks reads in one place.
#[allow(clippy::too_many_lines)]
async fn send_loop(f: Arc<Forwarder>, metrics: Arc<Metrics>, mut stop: watch::Receiver<bool>) {
    let name = f.label.clone();
    let mut failures = 0u32;
    let mut jitter = Jitter::new();
    let failing = |on: bool| {
        let on = f64::from(u8::from(on));
        metrics.forward_failing.set(&[&name], (), on);
    };
    failing(false);
    // Its series exist from the start, at 0 (an alert's `increase()` sees the first event).
    let signals = [
        (Signal::Profiles, f.cfg.sends_profiles()),
        (Signal::Traces, f.cfg.sends_traces()),
    ];
    for (signal, _) in signals.iter().filter(|(_, on)| *on) {
        metrics.forwarded_records.add(&[&name], *signal, 0.0);
        metrics.forward_failed.add(&[&name], *signal, 0.0);
    }
    for reason in [DropReason::Rejected, DropReason::QueueFull] {
        metrics.forward_dropped_records.add(&[&name], reason, 0.0);
    }
    let mut growth = lag::Growth::new(f.queue.pending_bytes());
    lag::publish(&metrics, &name, &growth, &f.queue);
    let mut tick = tokio::time::interval(lag::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight: tokio::task::JoinSet<Option<Sent>> = tokio::task::JoinSet::new();
    // Exports that failed, to send again (first) once `resume` has passed.
    let mut retry: std::collections::VecDeque<Combined> = std::collections::VecDeque::new();
    let mut resume = tokio::time::Instant::now();
    loop {
        if *stop.borrow() {
            break;
        }
        // While exports fail, one at a time: a downstream that is down gets one probe, not
        // `max_in_flight` of them.
        let limit = if failures > 0 { 1 } else { f.cfg.max_in_flight };
        let mut wait = None;
        if tokio::time::Instant::now() >= resume {
            while in_flight.len() < limit {
                if let Some(export) = retry.pop_front() {
                    in_flight.spawn(resend(Arc::clone(&f), export));
                    continue;
                }
                match f.due() {
                    Ok(batch) if batch.is_empty() => break,
                    Ok(batch) => {
                        in_flight.spawn(send(Arc::clone(&f), Arc::clone(&metrics), batch));
                    }
                    Err(w) => {
                        wait = w;
                        break;
                    }
                }
            }
        } else {
            wait = Some(resume - tokio::time::Instant::now());
        }
        let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
        let done = tokio::select! {
            _ = f.wake.notified() => None,
            _ = sleep => None,
            _ = tick.tick() => {
                growth.sample(f.queue.pending_bytes());
                lag::publish(&metrics, &name, &growth, &f.queue);
                None
            }
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => Some(done),
            _ = stop.changed() => None,
        };
        let Some(done) = done else { continue };
        let Some(Sent { export, outcome }) = done.expect("an export task panicked") else {
            continue;
        };
        let (labels, signal) = ([name.as_str()], export.signal);
        match outcome {
            Outcome::Delivered => {
                let records = export.records as f64;
                metrics.forwarded_records.add(&labels, signal, records);
                if failures > 0 {
                    tracing::info!(forwarder = %name, after_failures = failures, "forwarding resumed");
                    failing(false);
                }
                failures = 0;
                ack(&f, &export.taken, &metrics);
            }
            Outcome::Rejected(reason) => {
                tracing::error!(forwarder = %name, signal = export.signal.name(), records = export.records, %reason, "downstream refused an export; dropped");
                let records = export.records as f64;
                let dropped = &metrics.forward_dropped_records;
                dropped.add(&labels, DropReason::Rejected, records);
                failures = 0;
                failing(false);
                ack(&f, &export.taken, &metrics);
            }
            Outcome::Retry { after, reason } => {
                metrics.forward_failed.add(&labels, signal, 1.0);
                failing(true);
                failures = failures.saturating_add(1);
                let delay = after
                    .unwrap_or_else(|| backoff(&f.cfg, failures, &mut jitter))
                    .min(f.cfg.retry_max.max(after.unwrap_or_default()));
                if failures == 1 || failures.is_multiple_of(10) {
                    tracing::warn!(forwarder = %name, signal = export.signal.name(), attempt = failures, retry_in = ?delay, queued = f.queue.pending_records(), %reason, "export failed; will retry");
                }
                resume = resume.max(tokio::time::Instant::now() + delay);
                retry.push_back(export);
            }
        }
    }
    // The exports in flight end (each within the timeout); their answers are kept.
    while let Some(done) = in_flight.join_next().await {
        if let Ok(Some(Sent {
            export,
            outcome: Outcome::Delivered,
        })) = done
        {
            let records = export.records as f64;
            metrics
                .forwarded_records
                .add(&[&name], export.signal, records);
            ack(&f, &export.taken, &metrics);
        }
    }
    f.gauges(&metrics);
}

fn ack(f: &Forwarder, taken: &[Pending], metrics: &Metrics) {
    if let Err(e) = f.queue.ack(taken) {
        // The records are delivered in memory anyway; a restart may send them again.
        tracing::error!(forwarder = %f.label, error = %e, "writing the forward cursor failed");
    }
    f.gauges(metrics);
}

/// One export: its message, what it holds, and the queue records it covers.
struct Combined {
    signal: Signal,
    message: Bytes,
    records: usize,
    /// The records taken for it, acknowledged with it.
    taken: Vec<Pending>,
}

/// Reads `batch` (taken from the queue) and makes one export message of it: traces by
/// concatenation (the request's only field is repeated, so concatenated messages decode as
/// one), profiles by merging dictionaries. `None` when nothing could be read (records
/// dropped meanwhile; they are acknowledged).
fn combine(queue: &DiskQueue, batch: Vec<Pending>) -> Option<Combined> {
    let signal = batch.first()?.signal;
    let (read, mut bodies, mut gone) = read_batch(queue, &batch)?;
    let records = bodies.len();
    let message: Bytes = match signal {
        Signal::Traces => bodies.concat().into(),
        // One request is merged too, with itself: what the receiver linked in place still
        // holds the id attributes it turned into links, and their strings (about a quarter
        // of a request of Go CPU profile samples labelled with span ids), which merging
        // leaves out as it does for several.
        Signal::Profiles => match merge_profiles(&bodies) {
            Ok(m) => m.into(),
            Err(e) if records == 1 => {
                tracing::debug!(error = %e, "a queued profile request does not merge; sending it as it is");
                bodies.pop().expect("one body").into()
            }
            Err(e) => {
                // Send the first alone; the rest go back to the queue for later exports.
                tracing::warn!(error = %e, "queued profiles do not merge; sending one at a time");
                queue.release(&read[1..]);
                gone.push(read[0]);
                return Some(Combined {
                    signal,
                    message: bodies.swap_remove(0).into(),
                    records: 1,
                    taken: gone,
                });
            }
        },
    };
    Some(Combined {
        signal,
        message,
        records,
        taken: batch,
    })
}

/// The records of `batch` that can still be read, with their bodies, and those gone
/// (dropped from a full queue meanwhile); `None` (and `batch` acknowledged) when none can be.
type ReadBatch = (Vec<Pending>, Vec<Vec<u8>>, Vec<Pending>);

fn read_batch(queue: &DiskQueue, batch: &[Pending]) -> Option<ReadBatch> {
    let mut read = Vec::with_capacity(batch.len());
    let mut bodies = Vec::with_capacity(batch.len());
    let mut gone = Vec::new();
    for p in batch {
        match queue.read(p) {
            Ok(b) => {
                read.push(*p);
                bodies.push(b);
            }
            Err(e) => {
                tracing::warn!(error = %e, "a queued record is gone (dropped from a full queue?)");
                gone.push(*p);
            }
        }
    }
    if bodies.is_empty() {
        if let Err(e) = queue.ack(batch) {
            tracing::error!(error = %e, "writing the forward cursor failed");
        }
        return None;
    }
    Some((read, bodies, gone))
}

/// Why queued profile requests do not merge into one.
#[derive(Debug, thiserror::Error)]
enum MergeFailed {
    /// One is not OTLP Profiles.
    #[error("{0}")]
    Decode(#[from] prost::DecodeError),
    /// They do not merge.
    #[error("{0}")]
    Merge(#[from] spanprof_format::FormatError),
}

fn merge_profiles(bodies: &[Vec<u8>]) -> Result<Vec<u8>, MergeFailed> {
    let decoded: Vec<ProfilesData> = bodies
        .iter()
        .map(|b| ProfilesData::decode(b.as_slice()))
        .collect::<Result<_, _>>()?;
    let (merged, _) = spanprof_format::merge::merge(decoded.iter(), None)?;
    Ok(merged.encode_to_vec())
}

/// `retry_initial · 2^(failures-1)`, capped at `retry_max`, times a jitter in [0.5, 1.5).
fn backoff(cfg: &ForwarderConfig, failures: u32, jitter: &mut Jitter) -> Duration {
    let exp = cfg
        .retry_initial
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    exp.min(cfg.retry_max).mul_f64(0.5 + jitter.next_unit())
}

/// A xorshift generator: jitter only needs to keep forwarders from retrying in lockstep.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let addr = &nanos as *const u64 as u64;
        Jitter((nanos ^ addr.rotate_left(32) ^ Instant::now().elapsed().as_nanos() as u64) | 1)
    }

    /// A number in [0, 1).
    fn next_unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ForwardProtocol;
    use spanprof_format::to_pprof::{otlp_to_merged_pprof, PprofOptions};

    /// Each sample of `data` as its stack (function names, leaf first) and labels, with its
    /// values summed over equal ones: what a profile means, whatever its dictionary holds.
    fn meaning(data: &ProfilesData) -> std::collections::BTreeMap<String, Vec<i64>> {
        let p = otlp_to_merged_pprof(data, &PprofOptions::default()).unwrap();
        let name = |s: i64| p.string_table[s as usize].clone();
        let mut out = std::collections::BTreeMap::<String, Vec<i64>>::new();
        for s in &p.sample {
            let mut key: Vec<String> = s
                .location_id
                .iter()
                .flat_map(|&id| &p.location.iter().find(|l| l.id == id).unwrap().line)
                .map(|l| {
                    name(
                        p.function
                            .iter()
                            .find(|f| f.id == l.function_id)
                            .unwrap()
                            .name,
                    )
                })
                .collect();
            let mut labels: Vec<String> = s
                .label
                .iter()
                .map(|l| format!("{}={}", name(l.key), name(l.str)))
                .collect();
            labels.sort();
            key.extend(labels);
            let sum = out
                .entry(key.join(";"))
                .or_insert_with(|| vec![0; s.value.len()]);
            for (a, v) in sum.iter_mut().zip(&s.value) {
                *a += v;
            }
        }
        out
    }

    #[test]
    fn a_request_exported_alone_leaves_out_what_linking_left_unused() {
        // The real Go CPU profile, its span and trace id labels sent as sample attributes (as
        // the collector's pprof receiver sends them), linked in place as the receiver does.
        let cpu = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");
        let pprof = spanprof_format::pprof::decode(cpu, 64 << 20).unwrap();
        let (unlinked, _) =
            spanprof_format::to_otlp::pprof_to_otlp(&pprof, Default::default(), None).unwrap();
        let config = spanprof_format::LinkConfig::default();
        let (linked, report) =
            spanprof_format::link_in_place::link_in_place(unlinked, &config).unwrap();
        assert!(report.linked_samples > 0, "{report:?}");
        let body = linked.encode_to_vec();

        let dir = tempfile::tempdir().unwrap();
        let (queue, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        queue.append(&[(Signal::Profiles, &body)]).unwrap();
        let batch = queue.take(10, 1 << 20);
        let export = combine(&queue, batch).unwrap();
        assert_eq!(export.records, 1);
        let sent = ProfilesData::decode(export.message.as_ref()).unwrap();

        assert_eq!(
            meaning(&sent),
            meaning(&linked),
            "the same samples, stacks and links"
        );
        let d = sent.dictionary.as_ref().unwrap();
        let id_keys = ["span_id", "trace_id"];
        for a in &d.attribute_table {
            let key = &d.string_table[a.key_strindex as usize];
            assert!(
                !id_keys.contains(&key.as_str()),
                "{key} is left in the attribute table"
            );
        }
        assert!(
            export.message.len() * 10 < body.len() * 9,
            "{} bytes sent for {} received",
            export.message.len(),
            body.len()
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut cfg = ForwarderConfig::new("b", ForwardProtocol::Http, "http://127.0.0.1:1");
        cfg.retry_initial = Duration::from_millis(100);
        cfg.retry_max = Duration::from_secs(1);
        let mut j = Jitter::new();
        for (failures, base_ms) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (30, 1000),
        ] {
            let d = backoff(&cfg, failures, &mut j).as_secs_f64() * 1000.0;
            let base = base_ms as f64;
            assert!(d >= base * 0.5 && d < base * 1.5, "{failures}: {d} ms");
        }
    }
}
