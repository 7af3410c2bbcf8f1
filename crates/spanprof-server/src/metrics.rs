//! Self-metrics in Prometheus text format: counts per receiver and sink, queue depth, store
//! size, scrape durations and errors, and how long durable writes take (a histogram).
//!
//! Every family is declared once, in [`Families`], with its name and `# HELP` text; an event
//! is an atomic add to a cell found by its enum labels (no lock, no allocation), or, for an
//! open-ended label (a scrape target, a forwarder), looked up in a small list.

mod family;
mod labels;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use family::{Cell, Family, Histogram, Label, LabelSet, Open, Series};
pub use labels::{
    DropReason, NestedOutcome, Receiver, RejectReason, RetentionTrigger, SymbolTable,
};

use crate::signal::Signal;
use family::Row;

/// Declares the metric families: the struct with one field per family, its constructor, and
/// the rows it renders.
macro_rules! families {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = ($name:literal, [$($key:literal),*]), $help:literal;)*) => {
        /// Every counter and gauge family of one tenant (the default tenant's, or another's).
        #[derive(Debug)]
        pub struct Families {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Families {
            fn new() -> Self {
                Families {
                    $($field: <$ty>::new($name, $help, &[$($key),*]),)*
                }
            }

            /// The recorded series of every family; with `tenant`, labelled `tenant=<id>`.
            fn rows(&self, tenant: Option<&str>, out: &mut Vec<Row>) {
                $(self.$field.rows(tenant, out);)*
            }

            /// Every family's name and `# HELP` text.
            #[cfg(test)]
            const HELP: &'static [(&'static str, &'static str)] = &[$(($name, $help),)*];
        }
    };
}

families! {
    /// `spanprof_received_bytes_total`.
    received_bytes: Family<Receiver> = ("spanprof_received_bytes_total", []),
        "Bytes of request bodies read whole, as sent (before decompression), per receiver.";
    /// `spanprof_received_profiles_total`.
    received_profiles: Family<Receiver> = ("spanprof_received_profiles_total", []),
        "Profiles received, per receiver (after decoding, before the store).";
    /// `spanprof_received_samples_total`.
    received_samples: Family<Receiver> = ("spanprof_received_samples_total", []),
        "Samples received, per receiver.";
    /// `spanprof_linked_samples_total`.
    linked_samples: Family<Receiver> = ("spanprof_linked_samples_total", []),
        "Received samples linked to a span, per receiver.";
    /// `spanprof_profile_level_id_samples_total`.
    profile_level_id_samples: Family<Receiver> = ("spanprof_profile_level_id_samples_total", []),
        "Received samples with no id of their own that took their profile's span and trace ids (the upload's name tags, a push series' labels, OTLP resource or profile attributes), per receiver.";
    /// `spanprof_unlinked_span_id_samples_total`.
    unlinked_span_id_samples: Open<()> = ("spanprof_unlinked_span_id_samples_total", ["key"]),
        "Received samples with a span-id-shaped label under a key that is no link key (e.g. custom.span_id), per key: they are linked to no span; spanprof serve --span-id-key KEY links them.";
    /// `spanprof_nested_span_id_samples_total`.
    nested_span_id_samples: Family<(Receiver, NestedOutcome)> = ("spanprof_nested_span_id_samples_total", []),
        "Received samples carrying several span ids (nested spans tagged one inside the other), per receiver and outcome: innermost (the known spans or the profile's samples told the innermost span, which the sample got), ambiguous (nothing told it: the sample got the first id in label order).";
    /// `spanprof_received_spans_total`.
    received_spans: Family<Receiver> = ("spanprof_received_spans_total", []),
        "Spans received, per receiver.";
    /// `spanprof_rejected_spans_total`.
    rejected_spans: Family<Receiver> = ("spanprof_rejected_spans_total", []),
        "Spans refused (bad ids or times), per receiver.";
    /// `spanprof_rejected_total`.
    rejected: Family<(Receiver, RejectReason)> = ("spanprof_rejected_total", []),
        "Requests refused, per receiver and reason (the answer said why); receiver=\"store\" counts the profiles the store refused (a request is answered 400, or OTLP's partial_success names them).";
    /// `spanprof_stored_profiles_total`.
    stored_profiles: Family<()> = ("spanprof_stored_profiles_total", []),
        "Profiles written to the store.";
    /// `spanprof_repeated_profiles_total`.
    repeated_profiles: Family<()> = ("spanprof_repeated_profiles_total", []),
        "Profiles not stored again: the same profile (OTLP profile_id, time, type) was stored lately, and a client sent it again.";
    /// `spanprof_stored_samples_total`.
    stored_samples: Family<()> = ("spanprof_stored_samples_total", []),
        "Samples written to the store.";
    /// `spanprof_stored_spans_total`.
    stored_spans: Family<()> = ("spanprof_stored_spans_total", []),
        "Spans written to the store.";
    /// `spanprof_store_errors_total`.
    store_errors: Family<()> = ("spanprof_store_errors_total", []),
        "Batches the store could not write (their requests were answered 503).";
    /// `spanprof_queue_depth`.
    queue_depth: Family<()> = ("spanprof_queue_depth", []),
        "Requests in the pipeline (between receivers and sinks): queued, or being written.";
    /// `spanprof_queue_bytes`.
    queue_bytes: Family<()> = ("spanprof_queue_bytes", []),
        "Bytes of the requests in the pipeline: queued, or being written.";
    /// `spanprof_inflight_bytes`.
    inflight_bytes: Family<()> = ("spanprof_inflight_bytes", []),
        "Bytes of request bodies being received and decoded, with their decompressed copies and decoded messages.";
    /// `spanprof_max_inflight_bytes`.
    max_inflight_bytes: Family<()> = ("spanprof_max_inflight_bytes", []),
        "Limit of spanprof_inflight_bytes (server.max_inflight_size; 0: none).";
    /// `spanprof_pipeline_batches_total`.
    pipeline_batches: Family<()> = ("spanprof_pipeline_batches_total", []),
        "Batches the pipeline wrote to its sinks.";
    /// `spanprof_pipeline_batch_items_total`.
    pipeline_batch_items: Family<()> = ("spanprof_pipeline_batch_items_total", []),
        "Requests in the batches the pipeline wrote.";
    /// `spanprof_pipeline_write_failing`.
    pipeline_write_failing: Family<()> = ("spanprof_pipeline_write_failing", []),
        "1 while batches fail to be written (/health answers 503 meanwhile), else 0.";
    /// `spanprof_scrapes_total`.
    scrapes: Open<()> = ("spanprof_scrapes_total", ["target", "instance", "profile"]),
        "Successful scrapes, per target and profile kind.";
    /// `spanprof_scrape_errors_total`.
    scrape_errors: Open<()> = ("spanprof_scrape_errors_total", ["target", "instance", "profile"]),
        "Failed scrapes, per target and profile kind.";
    /// `spanprof_scrape_up`.
    scrape_up: Open<()> = ("spanprof_scrape_up", ["target", "instance", "profile"]),
        "1 if the last scrape of the target and profile kind succeeded, else 0.";
    /// `spanprof_scrape_unprofiled_seconds_total`.
    scrape_unprofiled_seconds: Open<()> = ("spanprof_scrape_unprofiled_seconds_total", ["target", "instance"]),
        "Time between a target's CPU windows (in its clock) when it was not profiled: the target finishing a profile, the answer's transfer and the next request, or a lost window.";
    /// `spanprof_scrape_duration_seconds`.
    scrape_duration_seconds: Open<()> = ("spanprof_scrape_duration_seconds", ["target", "instance", "profile"]),
        "Duration of the last scrape (a CPU scrape lasts its window).";
    /// `spanprof_forwarded_records_total`.
    forwarded_records: Open<Signal> = ("spanprof_forwarded_records_total", ["forwarder"]),
        "Records (profile or trace requests) a forwarder delivered, per signal.";
    /// `spanprof_forward_failed_total`.
    forward_failed: Open<Signal> = ("spanprof_forward_failed_total", ["forwarder"]),
        "Export attempts that failed and will be retried, per forwarder.";
    /// `spanprof_forward_failing`.
    forward_failing: Open<()> = ("spanprof_forward_failing", ["forwarder"]),
        "1 while a forwarder's exports fail (it retries with backoff), else 0.";
    /// `spanprof_forward_dropped_records_total`.
    forward_dropped_records: Open<DropReason> = ("spanprof_forward_dropped_records_total", ["forwarder"]),
        "Records a forwarder dropped, per reason (refused downstream, or the queue full).";
    /// `spanprof_forward_queued_records`.
    forward_queued_records: Open<()> = ("spanprof_forward_queued_records", ["forwarder"]),
        "Records in a forwarder's disk queue not yet delivered.";
    /// `spanprof_forward_queue_bytes`.
    forward_queue_bytes: Open<()> = ("spanprof_forward_queue_bytes", ["forwarder"]),
        "Disk taken by a forwarder's queue (delivered records stay until their segment is reclaimed).";
    /// `spanprof_forward_queue_growth_bytes_per_second`.
    forward_queue_growth: Open<()> = ("spanprof_forward_queue_growth_bytes_per_second", ["forwarder"]),
        "Net growth of a forwarder's undelivered records over the last minute, bytes/s (negative while it drains).";
    /// `spanprof_forward_queue_full_in_seconds`.
    forward_queue_full_in: Open<()> = ("spanprof_forward_queue_full_in_seconds", ["forwarder"]),
        "Seconds until a forwarder's queue is full (and drops its oldest records) at its growth of the last minute; -1 while it does not grow. /health warns below 6 h.";
    /// `spanprof_forward_queue_errors_total`.
    forward_queue_errors: Family<()> = ("spanprof_forward_queue_errors_total", []),
        "Batches the forwarders' disk queues could not take.";
    /// `spanprof_tls_handshake_failures_total`.
    tls_handshake_failures: Open<()> = ("spanprof_tls_handshake_failures_total", ["listener", "reason"]),
        "TLS handshakes that failed, per listener and reason: timeout (not finished within the header deadline), closed (the client left halfway), plaintext_http (plain HTTP sent to a TLS listener, answered 400), not_tls (other bytes), client_certificate (none shown where one is required, or one the client CAs did not sign), client_alert (the client refused, most often not trusting the server's certificate), protocol (no common version or cipher, a broken message).";
    /// `spanprof_build_info`.
    build_info: Open<()> = ("spanprof_build_info", ["version"]),
        "1, with the running spanprof's version as a label.";
    /// `spanprof_store_disk_bytes`.
    store_disk_bytes: Family<()> = ("spanprof_store_disk_bytes", []),
        "Bytes the store takes on disk.";
    /// `spanprof_tenant_requests_total`.
    tenant_requests: Family<()> = ("spanprof_tenant_requests_total", []),
        "Requests served, per tenant (the tenant label; none for the default tenant). Every series of a tenant's own is labelled tenant=<id>; a tenant's /metrics shows only those.";
    /// `spanprof_retention_runs_total`.
    retention_runs: Family<RetentionTrigger> = ("spanprof_retention_runs_total", []),
        "Retention runs, per trigger: schedule (once a minute, with compaction), write_failed (a store write failed: a full disk makes room), over_limit (the store grew past storage.max_size).";
    /// `spanprof_store_segments`.
    store_segments: Family<()> = ("spanprof_store_segments", []),
        "Segments of the store's log.";
    /// `spanprof_store_series`.
    store_series: Family<()> = ("spanprof_store_series", []),
        "Series in the store.";
    /// `spanprof_store_max_series`.
    store_max_series: Family<()> = ("spanprof_store_max_series", []),
        "Limit of spanprof_store_series (storage.max_series; 0: none).";
    /// `spanprof_store_samples`.
    store_samples: Family<()> = ("spanprof_store_samples", []),
        "Samples in the store.";
    /// `spanprof_store_spans`.
    store_spans: Family<()> = ("spanprof_store_spans", []),
        "Spans in the store.";
    /// `spanprof_store_services`.
    store_services: Family<()> = ("spanprof_store_services", []),
        "Services in the store.";
    /// `spanprof_store_symbols`.
    store_symbols: Family<SymbolTable> = ("spanprof_store_symbols", []),
        "Symbols in the store, per table.";
    /// `spanprof_store_symbol_generations`.
    store_symbol_generations: Family<()> = ("spanprof_store_symbol_generations", []),
        "Symbol generations (a new one starts as old symbols fall out of use).";
    /// `spanprof_store_symbols_bytes`.
    store_symbols_bytes: Family<()> = ("spanprof_store_symbols_bytes", []),
        "Bytes of the store's symbols.";
    /// `spanprof_store_max_symbols_bytes`.
    store_max_symbols_bytes: Family<()> = ("spanprof_store_max_symbols_bytes", []),
        "Limit of spanprof_store_symbols_bytes (storage.max_symbols_size; 0: none).";
}

/// The metrics a view records into: a tenant's view ([`Metrics::for_tenant`]) labels what
/// it records `tenant="<id>"` and renders only that. Derefs to its tenant's [`Families`].
#[derive(Debug)]
pub struct Metrics {
    shared: Arc<Registry>,
    /// This view's tenant's families.
    own: Arc<Families>,
    /// The tenant whose view this is; `None`: the default tenant's, which renders every
    /// tenant's series (it is the operator's).
    tenant: Option<Arc<str>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            shared: Arc::default(),
            own: Arc::new(Families::new()),
            tenant: None,
        }
    }
}

impl std::ops::Deref for Metrics {
    type Target = Families;
    fn deref(&self) -> &Families {
        &self.own
    }
}

/// What every tenant's view shares.
#[derive(Debug)]
struct Registry {
    /// The families of each tenant other than the default one.
    tenants: Mutex<BTreeMap<Arc<str>, Arc<Families>>>,
    /// `spanprof_pipeline_write_seconds`: the server's, whichever view records it.
    pipeline_write_seconds: Histogram,
    refusals_logged: Mutex<BTreeMap<(&'static str, &'static str), LastLogged>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            tenants: Mutex::default(),
            pipeline_write_seconds: Histogram::new(
                "spanprof_pipeline_write_seconds",
                "Time to make one batch durable in every sink.",
                DURATION_BUCKETS,
            ),
            refusals_logged: Mutex::default(),
        }
    }
}

/// The label a tenant's series carry.
const TENANT_LABEL: &str = "tenant";

/// Per receiver and reason: when a refused request was last logged, and how many have not
/// been since.
type LastLogged = (Instant, u64);

/// A receiver's refused requests are logged at most once this often per reason (with how
/// many more there were), so that a misbehaving client cannot flood the log.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Upper bounds, in seconds, of the buckets of duration histograms: from a write that only
/// waits for `fdatasync` on a fast disk to one stalled behind a slow disk.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

impl Metrics {
    /// Tenant `tenant`'s view of the same registry.
    pub fn for_tenant(&self, tenant: &str) -> Metrics {
        let mut tenants = self.shared.tenants.lock().expect("metrics lock poisoned");
        let (tenant, own) = match tenants.get_key_value(tenant) {
            Some((t, f)) => (Arc::clone(t), Arc::clone(f)),
            None => {
                let t: Arc<str> = Arc::from(tenant);
                let f = Arc::new(Families::new());
                tenants.insert(Arc::clone(&t), Arc::clone(&f));
                (t, f)
            }
        };
        Metrics {
            shared: Arc::clone(&self.shared),
            own,
            tenant: Some(tenant),
        }
    }

    /// `spanprof_pipeline_write_seconds`: how long batches take to be durable in every sink,
    /// in seconds (the server's histogram, whichever tenant's view records it).
    pub fn pipeline_write_seconds(&self) -> &Histogram {
        &self.shared.pipeline_write_seconds
    }

    /// Counts what a receiver took in: profiles, samples, and samples linked to spans.
    pub fn record_received(&self, receiver: Receiver, report: &spanprof_format::ConversionReport) {
        self.received_profiles.add(receiver, report.profiles as f64);
        self.received_samples.add(receiver, report.samples as f64);
        self.linked_samples
            .add(receiver, report.linked_samples as f64);
        let link = &report.link;
        if link.profile_level_ids > 0 {
            self.profile_level_id_samples
                .add(receiver, link.profile_level_ids as f64);
        }
        for (outcome, n) in [
            (NestedOutcome::Innermost, link.nested_span_ids),
            (NestedOutcome::Ambiguous, link.ambiguous_span_ids),
        ] {
            if n > 0 {
                self.nested_span_id_samples
                    .add((receiver, outcome), n as f64);
            }
        }
    }

    /// Counts a request `receiver` refused under `spanprof_rejected_total{receiver, reason}`
    /// (a full queue is counted by the pipeline itself, as `queue_full`) and logs it, at most
    /// once every [`REFUSAL_LOG_EVERY`] per receiver and reason: client errors (4xx) as
    /// warnings, the server's own failures as errors.
    pub fn record_refused(
        &self,
        receiver: Receiver,
        reason: RejectReason,
        status: u16,
        message: &str,
    ) {
        if reason != RejectReason::QueueFull {
            self.rejected.add((receiver, reason), 1.0);
        }
        let (receiver, reason) = (receiver.as_str(), reason.as_str());
        let Some(suppressed) = self.refusal_to_log(receiver, reason, Instant::now()) else {
            return;
        };
        // Who sent it (the last one, when others were suppressed).
        let client = crate::peer::peer().map(|p| p.to_string());
        let client = client.as_deref().unwrap_or("-");
        if status >= 500 {
            tracing::error!(
                target: "spanprof_server::receivers",
                receiver,
                reason,
                status,
                client,
                suppressed,
                "request failed: {message}"
            );
        } else {
            tracing::warn!(
                target: "spanprof_server::receivers",
                receiver,
                reason,
                status,
                client,
                suppressed,
                "request refused: {message}"
            );
        }
    }

    /// Whether a refusal by `receiver` for `reason` at `now` is logged: with how many were not
    /// since the last line, or `None` within [`REFUSAL_LOG_EVERY`] of it. The pipeline's own
    /// failures (a sink that cannot write) are limited the same way, under the sink's name.
    pub(crate) fn refusal_to_log(
        &self,
        receiver: &'static str,
        reason: &'static str,
        now: Instant,
    ) -> Option<u64> {
        let mut logged = self
            .shared
            .refusals_logged
            .lock()
            .expect("metrics lock poisoned");
        match logged.get_mut(&(receiver, reason)) {
            Some((at, n)) if now.duration_since(*at) < REFUSAL_LOG_EVERY => {
                *n += 1;
                None
            }
            Some((at, n)) => {
                *at = now;
                Some(std::mem::take(n))
            }
            None => {
                logged.insert((receiver, reason), (now, 0));
                Some(0)
            }
        }
    }

    /// Everything in Prometheus text exposition format: a tenant's view, only its own
    /// series (no histogram: they are the server's).
    pub fn render(&self) -> String {
        let mut rows: Vec<Row> = Vec::new();
        self.own.rows(self.tenant.as_deref(), &mut rows);
        if self.tenant.is_none() {
            for (t, f) in self
                .shared
                .tenants
                .lock()
                .expect("metrics lock poisoned")
                .iter()
            {
                f.rows(Some(t), &mut rows);
            }
        }
        // By name, then labels: the order of the map the series were once kept in.
        rows.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        let mut out = String::new();
        let mut last = "";
        for (name, help, labels, v) in &rows {
            if *name != last {
                let kind = if name.ends_with("_total") {
                    "counter"
                } else {
                    "gauge"
                };
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} {kind}");
                last = name;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}=\"{}\"",
                        v.replace('\\', "\\\\")
                            .replace('"', "\\\"")
                            .replace('\n', "\\n")
                    )
                })
                .collect();
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
            }
        }
        if self.tenant.is_some() {
            return out;
        }
        render_histogram(&self.shared.pipeline_write_seconds, &mut out);
        out
    }
}

/// Histogram `h` in text format, once it has an observation.
fn render_histogram(h: &Histogram, out: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Relaxed)).collect();
    if counts.iter().all(|&n| n == 0) {
        return;
    }
    let name = h.name;
    let _ = writeln!(out, "# HELP {name} {}", h.help);
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut below = 0;
    for (bound, n) in h.bounds.iter().zip(&counts) {
        below += n;
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {below}");
    }
    let count = below + counts[h.bounds.len()];
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum {}", f64::from_bits(h.sum.load(Relaxed)));
    let _ = writeln!(out, "{name}_count {count}");
}

#[cfg(test)]
mod render_all;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_all_counted_and_logged_once_per_period_and_reason() {
        let m = Metrics::default();
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", t0), Some(0));
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", t0 + second), None);
        assert_eq!(
            m.refusal_to_log("otlp_grpc", "invalid", t0 + 2 * second),
            None
        );
        // Another reason or receiver has its own period.
        assert_eq!(m.refusal_to_log("otlp_grpc", "busy", t0 + second), Some(0));
        assert_eq!(m.refusal_to_log("pyroscope_push", "invalid", t0), Some(0));
        let later = t0 + REFUSAL_LOG_EVERY;
        assert_eq!(m.refusal_to_log("otlp_grpc", "invalid", later), Some(2));
        assert_eq!(
            m.refusal_to_log("otlp_grpc", "invalid", later + second),
            None
        );

        let ingest = Receiver::PyroscopeIngest;
        for _ in 0..3 {
            m.record_refused(ingest, RejectReason::Invalid, 400, "not folded text");
        }
        m.record_refused(ingest, RejectReason::QueueFull, 429, "the queue is full");
        let text = m.render();
        assert!(
            text.contains(
                r#"spanprof_rejected_total{receiver="pyroscope_ingest",reason="invalid"} 3"#
            ),
            "{text}"
        );
        assert!(
            !text.contains("queue_full"),
            "the pipeline counts a full queue: {text}"
        );
    }

    #[test]
    fn a_tenant_view_labels_its_series_and_renders_only_them() {
        let m = Metrics::default();
        m.stored_spans.add((), 1.0);
        let a = m.for_tenant("a");
        a.stored_spans.add((), 2.0);
        m.for_tenant("b").stored_spans.add((), 3.0);
        a.pipeline_write_seconds().observe(0.5);
        assert_eq!(a.stored_spans.get(()), 2.0);
        assert_eq!(m.for_tenant("a").stored_spans.get(()), 2.0);
        let own = a.render();
        assert!(
            own.contains("spanprof_stored_spans_total{tenant=\"a\"} 2"),
            "{own}"
        );
        assert!(
            !own.contains("tenant=\"b\"") && !own.contains(" 1\n"),
            "{own}"
        );
        assert!(!own.contains("spanprof_pipeline_write_seconds"), "{own}");
        let all = m.render();
        assert!(
            all.contains("spanprof_stored_spans_total 1\n")
                && all.contains("{tenant=\"a\"} 2")
                && all.contains("{tenant=\"b\"} 3")
                && all.contains("spanprof_pipeline_write_seconds_count 1"),
            "{all}"
        );
    }

    /// Names are unique Prometheus names; a counter's ends in `_total` (the type rendered
    /// follows the name), and a series appears with its first event.
    #[test]
    fn families_are_well_named_and_render_from_their_first_event() {
        let names: Vec<&str> = Families::HELP.iter().map(|(n, _)| *n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            names.len(),
            "a name declared twice: {names:?}"
        );
        for (name, help) in Families::HELP {
            assert!(name.starts_with("spanprof_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert!(!help.is_empty() && !help.contains('\n'), "{name}: {help:?}");
        }
        let m = Metrics::default();
        assert_eq!(m.render(), "");
        m.stored_spans.add((), 2.0);
        assert_eq!(
            m.render(),
            "# HELP spanprof_stored_spans_total Spans written to the store.\n\
             # TYPE spanprof_stored_spans_total counter\n\
             spanprof_stored_spans_total 2\n"
        );
    }

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        static BOUNDS: &[f64] = &[0.001, 0.005];
        let h = Histogram::new("spanprof_write_seconds", "Writes.", BOUNDS);
        for v in [0.0005, 0.001, 0.003, 0.003, 20.0] {
            h.observe(v);
        }
        let mut text = String::new();
        render_histogram(&h, &mut text);
        let want = "# HELP spanprof_write_seconds Writes.\n\
            # TYPE spanprof_write_seconds histogram\n\
            spanprof_write_seconds_bucket{le=\"0.001\"} 2\n\
            spanprof_write_seconds_bucket{le=\"0.005\"} 4\n\
            spanprof_write_seconds_bucket{le=\"+Inf\"} 5\n\
            spanprof_write_seconds_sum 20.0075\n\
            spanprof_write_seconds_count 5\n";
        assert_eq!(text, want);
    }

    /// Concurrent adds are all counted (the add is a compare-and-swap loop, not a lock).
    #[test]
    fn concurrent_adds_are_all_counted() {
        let m = Metrics::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        m.rejected
                            .add((Receiver::OtlpGrpc, RejectReason::Busy), 1.0);
                    }
                });
            }
        });
        let busy = (Receiver::OtlpGrpc, RejectReason::Busy);
        assert_eq!(m.rejected.get(busy), 40_000.0);
    }
}
