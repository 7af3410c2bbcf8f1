//! The running agent: a sampler thread that keeps a timer on every thread and drains the rings
//! into a window of raw samples, and an exporter thread that symbolizes each window, encodes it
//! and sends it, fed through a bounded queue (symbolizing a new binary's debug info can take
//! seconds: the rings must not wait for it). The application's threads only ever write their slot and take signals: a slow or
//! absent receiver costs dropped (and counted) profiles, never a blocked application.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::http::{self, Endpoint};
use crate::profile::{ProfileMeta, WindowProfile};
use crate::sampler::Sampler;
use crate::symbols::Symbolizer;
use crate::AgentError;

/// How the agent samples and where it sends profiles.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// OTLP/HTTP Profiles endpoint, e.g. `http://127.0.0.1:4318/v1development/profiles`.
    pub endpoint: String,
    /// `service.name` of the exported profiles.
    pub service_name: String,
    /// Further resource attributes (`deployment.environment.name`, …).
    pub resource_attributes: Vec<(String, String)>,
    /// Samples per second of each thread's CPU time (default 100).
    pub frequency_hz: u32,
    /// How often a profile is exported (default 10 s).
    pub export_interval: Duration,
    /// How often the rings are drained and new threads get a timer (default 100 ms).
    pub drain_interval: Duration,
    /// Samples held per export window; more are dropped and counted (default 200 000). The
    /// agent holds at most `(queue_capacity + 2) * max_samples_per_export` samples (queued
    /// windows, the one being encoded, the one filling), about 1.1 KiB each at most.
    pub max_samples_per_export: usize,
    /// Windows waiting for the exporter (default 4); while full, the filling window keeps
    /// growing up to its limit.
    pub queue_capacity: usize,
    /// Connect, write and read timeout of one export (default 5 s).
    pub http_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            endpoint: "http://127.0.0.1:4318/v1development/profiles".into(),
            service_name: "unknown_service".into(),
            resource_attributes: Vec::new(),
            frequency_hz: 100,
            export_interval: Duration::from_secs(10),
            drain_interval: Duration::from_millis(100),
            max_samples_per_export: 200_000,
            queue_capacity: 4,
            http_timeout: Duration::from_secs(5),
        }
    }
}

/// Counters of a running agent (totals since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Samples taken by the signal handler and drained.
    pub samples: u64,
    /// Samples taken while a span was entered.
    pub samples_in_spans: u64,
    /// Samples in profiles the receiver accepted (2xx).
    pub samples_exported: u64,
    /// Samples lost because a thread's ring was full between drains.
    pub dropped_ring_full: u64,
    /// Samples lost because an export window held `max_samples_per_export` already.
    pub dropped_window_full: u64,
    /// Samples lost because the exporter was gone (while running, a window the queue cannot
    /// take keeps growing instead, up to `max_samples_per_export`; at shutdown it waits).
    pub dropped_queue_full: u64,
    /// Samples lost because their export failed (unreachable, timeout, non-2xx).
    pub dropped_export_failed: u64,
    /// Exports that failed.
    pub export_errors: u64,
    /// Profiles exported successfully.
    pub exports: u64,
    /// Samples in windows handed to the exporter and not yet encoded, now.
    pub queued_samples: u64,
    /// Most samples ever waiting for the exporter.
    pub max_queued_samples: u64,
    /// Threads currently sampled.
    pub threads: u64,
}

#[derive(Default)]
struct Counters {
    samples: AtomicU64,
    samples_in_spans: AtomicU64,
    samples_exported: AtomicU64,
    dropped_ring_full: AtomicU64,
    dropped_window_full: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_export_failed: AtomicU64,
    export_errors: AtomicU64,
    exports: AtomicU64,
    queued_samples: AtomicU64,
    max_queued_samples: AtomicU64,
    threads: AtomicU64,
}

/// A running sampler and exporter; stops (flushing its last window) on [`Agent::shutdown`] or
/// drop.
pub struct Agent {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    sampler_thread: Option<JoinHandle<()>>,
    exporter_thread: Option<JoinHandle<()>>,
}

struct Batch {
    window: WindowProfile,
    end_unix_ns: u64,
}

impl Agent {
    /// Starts sampling every thread of the process and exporting to `config.endpoint`.
    ///
    /// Fails on a bad configuration, when another agent runs in this process, or when the
    /// signal handler cannot be installed.
    pub fn start(config: AgentConfig) -> Result<Agent, AgentError> {
        let endpoint = Endpoint::parse(&config.endpoint)?;
        if config.export_interval < config.drain_interval || config.drain_interval.is_zero() {
            return Err(AgentError::Config(format!(
                "export_interval {:?} must be at least drain_interval {:?} (> 0)",
                config.export_interval, config.drain_interval
            )));
        }
        if config.queue_capacity == 0 || config.max_samples_per_export == 0 {
            return Err(AgentError::Config(
                "queue_capacity and max_samples_per_export must be > 0".into(),
            ));
        }
        let sampler = Sampler::start(config.frequency_hz)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (tx, rx) = sync_channel::<Batch>(config.queue_capacity);
        let meta = ProfileMeta {
            service_name: config.service_name.clone(),
            resource_attributes: config.resource_attributes.clone(),
            period_ns: sampler.period().as_nanos() as u64,
        };
        let exporter_thread = {
            let counters = counters.clone();
            let timeout = config.http_timeout;
            std::thread::Builder::new()
                .name("spanprof-export".into())
                .spawn(move || export_loop(rx, endpoint, meta, timeout, &counters))
                .map_err(|e| AgentError::Os("spawn the export thread", e))?
        };
        let sampler_thread = {
            let (stop, counters) = (stop.clone(), counters.clone());
            std::thread::Builder::new()
                .name("spanprof-sampler".into())
                .spawn(move || sample_loop(sampler, config, tx, &stop, &counters))
                .map_err(|e| AgentError::Os("spawn the sampler thread", e))?
        };
        Ok(Agent {
            stop,
            counters,
            sampler_thread: Some(sampler_thread),
            exporter_thread: Some(exporter_thread),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> AgentStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AgentStats {
            samples: get(&c.samples),
            samples_in_spans: get(&c.samples_in_spans),
            samples_exported: get(&c.samples_exported),
            dropped_ring_full: get(&c.dropped_ring_full),
            dropped_window_full: get(&c.dropped_window_full),
            dropped_queue_full: get(&c.dropped_queue_full),
            dropped_export_failed: get(&c.dropped_export_failed),
            export_errors: get(&c.export_errors),
            exports: get(&c.exports),
            queued_samples: get(&c.queued_samples),
            max_queued_samples: get(&c.max_queued_samples),
            threads: get(&c.threads),
        }
    }

    /// Stops sampling, exports the last window and waits for the exporter (at most the queued
    /// profiles times the HTTP timeout); returns the final counters.
    pub fn shutdown(mut self) -> AgentStats {
        self.stop_threads();
        self.stats()
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.sampler_thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        if let Some(t) = self.exporter_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn sample_loop(
    mut sampler: Sampler,
    config: AgentConfig,
    tx: SyncSender<Batch>,
    stop: &AtomicBool,
    counters: &Counters,
) {
    let mut window = WindowProfile::new(now_unix_ns(), config.max_samples_per_export);
    let mut window_started = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut take = |s: &crate::sampler::ring::RawSample| {
            let link = s.span().map(|r| (r.trace_id, r.span_id));
            if link.is_some() {
                counters.samples_in_spans.fetch_add(1, Ordering::Relaxed);
            }
            counters.samples.fetch_add(1, Ordering::Relaxed);
            window.add(s.frames(), s.tid, link, s.time_unix_ns, s.weight);
        };
        let threads = sampler.refresh_threads(&mut take);
        let drained = sampler.drain(&mut take);
        counters.threads.store(threads as u64, Ordering::Relaxed);
        counters
            .dropped_ring_full
            .fetch_add(drained.dropped_ring_full, Ordering::Relaxed);
        if stopping || window_started.elapsed() >= config.export_interval {
            let now = now_unix_ns();
            let full = std::mem::replace(
                &mut window,
                WindowProfile::new(now, config.max_samples_per_export),
            );
            window_started = Instant::now();
            counters
                .dropped_window_full
                .fetch_add(full.dropped, Ordering::Relaxed);
            let samples = full.len() as u64;
            if samples > 0 {
                // Counted before sending: the exporter may take it off before try_send returns.
                let q = counters
                    .queued_samples
                    .fetch_add(samples, Ordering::Relaxed)
                    + samples;
                counters.max_queued_samples.fetch_max(q, Ordering::Relaxed);
                let batch = Batch {
                    window: full,
                    end_unix_ns: now,
                };
                // At shutdown the last window waits for room (each export is under a timeout).
                let sent = if stopping {
                    tx.send(batch).map_err(|e| TrySendError::Disconnected(e.0))
                } else {
                    tx.try_send(batch)
                };
                match sent {
                    Ok(()) => {}
                    // The exporter is behind: the window goes on growing (up to its limit,
                    // then drops are counted) and is offered again next time.
                    Err(TrySendError::Full(batch)) if !stopping => {
                        counters
                            .queued_samples
                            .fetch_sub(samples, Ordering::Relaxed);
                        window = batch.window.reopen(config.max_samples_per_export);
                    }
                    Err(_) => {
                        counters
                            .queued_samples
                            .fetch_sub(samples, Ordering::Relaxed);
                        counters
                            .dropped_queue_full
                            .fetch_add(samples, Ordering::Relaxed);
                    }
                }
            }
        }
        if stopping {
            break; // dropping `tx` ends the exporter once the queue is sent
        }
        std::thread::park_timeout(config.drain_interval);
    }
}

fn export_loop(
    rx: Receiver<Batch>,
    endpoint: Endpoint,
    meta: ProfileMeta,
    timeout: Duration,
    counters: &Counters,
) {
    let mut symbols = Symbolizer::default();
    // Loads the binary's debug info now (seconds for a large debug build), not at the first
    // window, so the first export is as quick as the others.
    symbols.resolve(export_loop as *const () as u64, false);
    for batch in rx {
        let samples = batch.window.len() as u64;
        let request = batch
            .window
            .into_request(batch.end_unix_ns, &meta, &mut symbols);
        counters
            .queued_samples
            .fetch_sub(samples, Ordering::Relaxed);
        let Some(request) = request else { continue };
        let body = request.encode_to_vec();
        match http::post(&endpoint, "application/x-protobuf", &body, timeout) {
            Ok(status) if (200..300).contains(&status) => {
                counters.exports.fetch_add(1, Ordering::Relaxed);
                counters
                    .samples_exported
                    .fetch_add(samples, Ordering::Relaxed);
            }
            _ => {
                counters.export_errors.fetch_add(1, Ordering::Relaxed);
                counters
                    .dropped_export_failed
                    .fetch_add(samples, Ordering::Relaxed);
            }
        }
    }
}
