//! push.v1 as a forwarder protocol, with real processes: spanprof A takes the real Go CPU
//! profile over OTLP/HTTP and forwards it with `protocol: push` to spanprof B's
//! `/push.v1.PusherService/Push` (B trusts the tenant header, so what arrives with A's
//! `X-Scope-OrgID` lands in B's tenant store). B ends up with the same samples: the whole
//! service's flame graph and each span's (its samples' `span_id` labels) are equal on both.

use spanprof_testkit as support;

use std::time::Duration;

use support::serve::Server;
use support::{go_cpu_otlp, process_dir};

use crate::forward::flame;

const FORWARDED: &str = "spanprof_forwarded_records_total{forwarder=\"pyro\",signal=\"profiles\"}";
const QUEUED: &str = "spanprof_forward_queued_records{forwarder=\"pyro\"}";
const DROPPED: &str =
    "spanprof_forward_dropped_records_total{forwarder=\"pyro\",reason=\"rejected\"}";

#[test]
fn profiles_forwarded_over_push_v1_arrive_whole_with_their_span_links() {
    let dir = process_dir("forward-push");
    let (a_data, b_data) = (dir.join("a"), dir.join("b"));
    let profile = std::fs::read(go_cpu_otlp(&dir)).unwrap();

    let b_config = dir.join("b.yaml");
    std::fs::write(&b_config, "auth:\n  trust_tenant_header: true\n").unwrap();
    let b = Server::start(
        &b_data,
        "127.0.0.1:0",
        &[
            "--config",
            b_config.to_str().unwrap(),
            "--otlp-grpc-addr",
            "off",
        ],
    );
    let a_config = dir.join("a.yaml");
    std::fs::write(
        &a_config,
        format!(
            "exporters:\n  - name: pyro\n    protocol: push\n    endpoint: http://{}\n    \
             headers: {{X-Scope-OrgID: team-a}}\n    gzip: true\n    batch_age: 50ms\n",
            b.addr
        ),
    )
    .unwrap();
    let a = Server::start(
        &a_data,
        "127.0.0.1:0",
        &[
            "--config",
            a_config.to_str().unwrap(),
            "--otlp-grpc-addr",
            "off",
        ],
    );
    for _ in 0..2 {
        a.post(
            "/v1development/profiles",
            "application/x-protobuf",
            &profile,
        );
    }
    a.wait_for("A's profiles forwarded", Duration::from_secs(60), |a| {
        a.metric(FORWARDED) >= 2.0 && a.metric(QUEUED) == 0.0
    });
    assert_eq!(a.metric(DROPPED), 0.0, "nothing refused downstream");
    // A push is acknowledged once B has stored it: nothing to wait for on B.
    let a_log = a.stop();
    let b_log = b.stop();

    // In B's tenant store, not its default one: the header went along.
    let tenant = b_data.join("tenants").join("team-a");
    assert!(tenant.is_dir(), "B's tenant store\n{b_log}");
    let whole_a = flame(&a_data, &["--service", "goapp"]);
    assert_eq!(
        whole_a.values().sum::<i64>(),
        2 * 8_530_000_000,
        "A stored the two pushes"
    );
    assert_eq!(
        whole_a,
        flame(&tenant, &["--service", "goapp"]),
        "whole service\nA:\n{a_log}\nB:\n{b_log}"
    );
    // Spans whose ids label samples of the real profile (see `spanprof inspect`): linked on
    // B from the `span_id` labels alone (B has no spans).
    for span in ["1991fb31dff3b9ba", "613d07d76201bee5", "6f76fbc364543787"] {
        let on_a = flame(&a_data, &["--span-id", span]);
        assert!(!on_a.is_empty(), "span {span} has samples");
        assert_eq!(on_a, flame(&tenant, &["--span-id", span]), "span {span}");
    }
}
