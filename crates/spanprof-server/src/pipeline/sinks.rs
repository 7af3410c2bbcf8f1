//! The sinks a batch is written to, the embedded store and the forwarders' on-disk queues,
//! behind one call: [`Sinks::write`] of a batch gives the profiles the store refused, or the
//! one [`SinkFailure`] that stopped it.

use std::sync::Arc;
use std::time::Instant;

use hashbrown::HashMap;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{IngestReport, Request, Store, Storing};
use tokio::sync::Notify;

use crate::forward::{ForwardError, Forwarders};
use crate::metrics::RejectReason::{Invalid, Limit};
use crate::metrics::{Metrics, Receiver};

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

/// The profiles of a batch the store refused: the index of the request each is in, and why.
pub(super) type Refusals = Vec<(usize, String)>;

/// One tenant's batch as its sinks take it.
pub(super) struct SinkBatch<'a> {
    /// The profiles' requests, and how the store takes each.
    pub(super) profiles: &'a [Request<'a>],
    /// The spans' records, for the store.
    pub(super) spans: Vec<SpanRecord>,
    /// The spans as they came, for forwarders.
    pub(super) traces: &'a ExportTraceServiceRequest,
}

/// Why a batch was not written to every sink: the one sink a batch's write reports.
#[derive(Debug, Clone)]
pub(super) struct SinkFailure {
    /// The sink that failed, for `/health`: "the store", "forwarder NAME's queue".
    pub(super) sink: String,
    pub(super) message: String,
    /// Some sink kept it (the store, or a forwarder's queue before the one that failed).
    pub(super) kept: bool,
}

impl Sinks {
    /// Writes one batch durably to every sink: the store first, then the forwarders' queues
    /// with what the store took (what is acknowledged is what goes on: a profile the store
    /// refused is not sent downstream either, where an invalid one could fail a whole export)
    /// and the batch's spans as they came. Returns the profiles the store refused.
    pub(super) fn write(
        &self,
        batch: SinkBatch<'_>,
        metrics: &Metrics,
    ) -> Result<Refusals, SinkFailure> {
        let SinkBatch {
            profiles,
            spans,
            traces,
        } = batch;
        let forwarding = !self.forward.is_empty();
        let report = match &self.store {
            None => IngestReport::default(),
            Some(store) => store_write(store, profiles, spans, metrics)
                .map_err(|e| {
                    self.write_failed.notify_one();
                    SinkFailure {
                        sink: "the store".into(),
                        message: e.to_string(),
                        kept: false,
                    }
                })
                .inspect(|_| {
                    if store.over_size_limit() {
                        self.over_limit.notify_one();
                    }
                })?,
        };
        if forwarding {
            let forwarded = without_refused(profiles, &report);
            let refs: Vec<&ProfilesData> = forwarded.iter().map(|p| p.as_ref()).collect();
            if let Err(e) = self.forward.enqueue(&refs, traces) {
                if let Some(suppressed) =
                    metrics.refusal_to_log("forward_queue", "write_failed", Instant::now())
                {
                    tracing::error!(error = %e, suppressed, "forward queue write failed");
                }
                metrics.forward_queue_errors.add((), 1.0);
                return Err(forward_failure(&e, self.store.is_some()));
            }
        }
        Ok(report
            .problem_sources
            .into_iter()
            .zip(report.problems)
            .collect())
    }
}

/// A forwarder queue's failure as a sink's: which queue, and whether the batch was kept
/// anyway (by the store, or by a queue written before the one that failed).
fn forward_failure(e: &ForwardError, stored: bool) -> SinkFailure {
    let (sink, queued_elsewhere) = match e {
        ForwardError::Queue {
            name,
            queued_elsewhere,
            ..
        } => (format!("forwarder {name}'s queue"), *queued_elsewhere),
        _ => ("the forwarders".to_owned(), false),
    };
    SinkFailure {
        sink,
        message: e.to_string(),
        kept: stored || queued_elsewhere,
    }
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
) -> Result<IngestReport, spanprof_store::store::StoreError> {
    match store.ingest_requests(profiles, spans) {
        Ok(report) => {
            metrics.stored_profiles.add((), report.profiles as f64);
            metrics.stored_samples.add((), report.samples as f64);
            let repeated = report.repeated_profiles as f64;
            metrics.repeated_profiles.add((), repeated);
            metrics.stored_spans.add((), report.spans as f64);
            if report.rejected_profiles > 0 {
                let invalid = report.rejected_profiles - report.limited_profiles;
                let now = Instant::now();
                for (reason, n) in [(Invalid, invalid), (Limit, report.limited_profiles)] {
                    if n == 0 {
                        continue;
                    }
                    metrics.rejected.add((Receiver::Store, reason), n as f64);
                    // Once per 10 s and reason at most, as receivers' refusals: a sender
                    // past a limit repeats at every batch.
                    if let Some(suppressed) = metrics.refusal_to_log("store", reason.as_str(), now)
                    {
                        tracing::warn!(
                            reason = reason.as_str(),
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
            metrics.store_errors.add((), 1.0);
            Err(e)
        }
    }
}
