//! Renders every metric family once, default tenant and a tenant's view: the text `/metrics`
//! serves, byte for byte, so that a change of how metrics are kept cannot change it.

use super::*;

/// One event of every family, in no particular order (the text is sorted by name and labels).
fn record_every_family(m: &Metrics) {
    m.record_received(
        "otlp_grpc",
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
    m.add(
        "spanprof_unlinked_span_id_samples_total",
        &[("key", "custom.span_id")],
        90.0,
    );
    m.add(
        "spanprof_received_spans_total",
        &[("receiver", "otlp_traces")],
        7.0,
    );
    m.add(
        "spanprof_rejected_spans_total",
        &[("receiver", "otlp_traces")],
        1.0,
    );
    m.record_refused("pyroscope_ingest", "invalid", 400, "not folded text");
    m.record_refused("otlp_profiles", "too_large", 413, "too large");
    m.add(
        "spanprof_rejected_total",
        &[("receiver", "otlp_grpc"), ("reason", "queue_full")],
        1.0,
    );
    m.add(
        "spanprof_rejected_total",
        &[("receiver", "store"), ("reason", "limit")],
        2.0,
    );
    for (name, v) in [
        ("spanprof_stored_profiles_total", 2.0),
        ("spanprof_repeated_profiles_total", 1.0),
        ("spanprof_stored_samples_total", 30.0),
        ("spanprof_stored_spans_total", 7.0),
        ("spanprof_store_errors_total", 1.0),
        ("spanprof_pipeline_batches_total", 3.0),
        ("spanprof_pipeline_batch_items_total", 5.0),
        ("spanprof_forward_queue_errors_total", 1.0),
    ] {
        m.add(name, &[], v);
    }
    for (name, v) in [
        ("spanprof_queue_depth", 1.0),
        ("spanprof_queue_bytes", 1024.0),
        ("spanprof_inflight_bytes", 2048.0),
        ("spanprof_max_inflight_bytes", 1e9),
        ("spanprof_pipeline_write_failing", 0.0),
        ("spanprof_store_disk_bytes", 123_456.0),
        ("spanprof_store_segments", 3.0),
        ("spanprof_store_series", 12.0),
        ("spanprof_store_max_series", 0.0),
        ("spanprof_store_samples", 99.0),
        ("spanprof_store_spans", 8.0),
        ("spanprof_store_services", 2.0),
        ("spanprof_store_symbol_generations", 1.0),
        ("spanprof_store_symbols_bytes", 4096.0),
        ("spanprof_store_max_symbols_bytes", 0.0),
    ] {
        m.set(name, &[], v);
    }
    m.set("spanprof_store_symbols", &[("table", "strings")], 10.0);
    m.set("spanprof_store_symbols", &[("table", "stack_nodes")], 11.0);
    let scrape = [
        ("target", "api"),
        ("instance", "127.0.0.1:6060"),
        ("profile", "cpu"),
    ];
    m.add("spanprof_scrapes_total", &scrape, 4.0);
    m.add("spanprof_scrape_errors_total", &scrape, 0.0);
    m.set("spanprof_scrape_up", &scrape, 1.0);
    m.set("spanprof_scrape_duration_seconds", &scrape, 10.25);
    m.add(
        "spanprof_scrape_unprofiled_seconds_total",
        &scrape[..2],
        0.125,
    );
    let fwd = [("forwarder", "collector"), ("signal", "profiles")];
    m.add("spanprof_forwarded_records_total", &fwd, 6.0);
    m.add("spanprof_forward_failed_total", &fwd, 1.0);
    m.set(
        "spanprof_forward_failing",
        &[("forwarder", "collector")],
        1.0,
    );
    m.add(
        "spanprof_forward_dropped_records_total",
        &[("forwarder", "collector"), ("reason", "rejected")],
        2.0,
    );
    m.set(
        "spanprof_forward_queued_records",
        &[("forwarder", "collector")],
        3.0,
    );
    m.set(
        "spanprof_forward_queue_bytes",
        &[("forwarder", "collector")],
        4096.0,
    );
    m.set(
        "spanprof_forward_queue_growth_bytes_per_second",
        &[("forwarder", "collector")],
        -12.5,
    );
    m.set(
        "spanprof_forward_queue_full_in_seconds",
        &[("forwarder", "collector")],
        -1.0,
    );
    m.add(
        "spanprof_tls_handshake_failures_total",
        &[("listener", "http"), ("reason", "plaintext_http")],
        1.0,
    );
    m.set("spanprof_build_info", &[("version", "1.2.3")], 1.0);
    m.add(
        "spanprof_retention_runs_total",
        &[("trigger", "schedule")],
        2.0,
    );
    m.add(
        "spanprof_retention_runs_total",
        &[("trigger", "over_limit")],
        0.0,
    );
    m.add("spanprof_tenant_requests_total", &[], 1.0);
    for v in [0.0005, 0.003, 20.0] {
        m.observe("spanprof_pipeline_write_seconds", DURATION_BUCKETS, v);
    }
}

#[test]
fn every_family_renders_as_before() {
    let m = Metrics::default();
    record_every_family(&m);
    let a = m.for_tenant("a\"b");
    a.add("spanprof_tenant_requests_total", &[], 2.0);
    a.add(
        "spanprof_received_spans_total",
        &[("receiver", "otlp_traces")],
        3.0,
    );
    a.record_refused("otlp_traces", "busy", 429, "busy");
    a.set(
        "spanprof_forward_failing",
        &[("forwarder", "collector")],
        0.0,
    );
    let want_tenant = include_str!("render_all_tenant.txt");
    assert_eq!(a.render(), want_tenant);
    let want = include_str!("render_all.txt");
    let got = m.render();
    if got != want {
        std::fs::write("/tmp/render_all.got", &got).unwrap();
    }
    assert_eq!(got, want);
}
