//! Renders every metric family once, default tenant and a tenant's view: the text `/metrics`
//! serves, byte for byte, so that a change of how metrics are kept cannot change it.

use super::*;

/// One event of every family, in no particular order (the text is sorted by name and labels).
fn record_every_family(m: &Metrics) {
    m.record_received(
        Receiver::OtlpGrpc,
        &spanprof_format::ConversionReport {
            profiles: 2,
            samples: 30,
            linked_samples: 20,
            link: spanprof_format::link::LinkReport {
                profile_level_ids: 4,
                nested_span_ids: 3,
                ambiguous_span_ids: 1,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    m.received_bytes.add(Receiver::OtlpGrpc, 4096.0);
    m.unlinked_span_id_samples
        .add(&["custom.span_id"], (), 90.0);
    m.received_spans.add(Receiver::OtlpTraces, 7.0);
    m.rejected_spans.add(Receiver::OtlpTraces, 1.0);
    m.record_refused(
        Receiver::PyroscopeIngest,
        RejectReason::Invalid,
        400,
        "not folded text",
    );
    m.record_refused(
        Receiver::OtlpProfiles,
        RejectReason::TooLarge,
        413,
        "too large",
    );
    m.rejected
        .add((Receiver::OtlpGrpc, RejectReason::QueueFull), 1.0);
    m.rejected.add((Receiver::Store, RejectReason::Limit), 2.0);
    for (family, v) in [
        (&m.stored_profiles, 2.0),
        (&m.repeated_profiles, 1.0),
        (&m.stored_samples, 30.0),
        (&m.stored_spans, 7.0),
        (&m.store_errors, 1.0),
        (&m.pipeline_batches, 3.0),
        (&m.pipeline_batch_items, 5.0),
        (&m.forward_queue_errors, 1.0),
    ] {
        family.add((), v);
    }
    for (family, v) in [
        (&m.queue_depth, 1.0),
        (&m.queue_bytes, 1024.0),
        (&m.inflight_bytes, 2048.0),
        (&m.max_inflight_bytes, 1e9),
        (&m.pipeline_write_failing, 0.0),
        (&m.store_disk_bytes, 123_456.0),
        (&m.store_segments, 3.0),
        (&m.store_series, 12.0),
        (&m.store_max_series, 0.0),
        (&m.store_samples, 99.0),
        (&m.store_spans, 8.0),
        (&m.store_services, 2.0),
        (&m.store_symbol_generations, 1.0),
        (&m.store_symbols_bytes, 4096.0),
        (&m.store_max_symbols_bytes, 0.0),
    ] {
        family.set((), v);
    }
    m.store_symbols.set(SymbolTable::Strings, 10.0);
    m.store_symbols.set(SymbolTable::StackNodes, 11.0);
    let scrape = ["api", "127.0.0.1:6060", "cpu"];
    m.scrapes.add(&scrape, (), 4.0);
    m.scrape_errors.add(&scrape, (), 0.0);
    m.scrape_up.set(&scrape, (), 1.0);
    m.scrape_duration_seconds.set(&scrape, (), 10.25);
    m.scrape_unprofiled_seconds.add(&scrape[..2], (), 0.125);
    let fwd = ["collector"];
    m.forwarded_records.add(&fwd, Signal::Profiles, 6.0);
    m.forward_failed.add(&fwd, Signal::Profiles, 1.0);
    m.forward_failing.set(&fwd, (), 1.0);
    m.forward_dropped_records
        .add(&fwd, DropReason::Rejected, 2.0);
    m.forward_queued_records.set(&fwd, (), 3.0);
    m.forward_queue_bytes.set(&fwd, (), 4096.0);
    m.forward_queue_growth.set(&fwd, (), -12.5);
    m.forward_queue_full_in.set(&fwd, (), -1.0);
    m.tls_handshake_failures
        .add(&["http", "plaintext_http"], (), 1.0);
    m.build_info.set(&["1.2.3"], (), 1.0);
    m.retention_runs.add(RetentionTrigger::Schedule, 2.0);
    m.retention_runs.add(RetentionTrigger::OverLimit, 0.0);
    m.tenant_requests.add((), 1.0);
    for v in [0.0005, 0.003, 20.0] {
        m.pipeline_write_seconds().observe(v);
    }
}

#[test]
fn every_family_renders_as_before() {
    let m = Metrics::default();
    record_every_family(&m);
    let a = m.for_tenant("a\"b");
    a.tenant_requests.add((), 2.0);
    a.received_spans.add(Receiver::OtlpTraces, 3.0);
    a.record_refused(Receiver::OtlpTraces, RejectReason::Busy, 429, "busy");
    a.forward_failing.set(&["collector"], (), 0.0);
    // The same tenant's view again: the same series.
    m.for_tenant("a\"b").tenant_requests.add((), 0.0);
    let want_tenant = include_str!("render_all_tenant.txt");
    assert_eq!(a.render(), want_tenant);
    let want = include_str!("render_all.txt");
    let got = m.render();
    assert_eq!(got, want);
}
