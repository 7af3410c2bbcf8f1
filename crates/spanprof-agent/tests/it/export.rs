//! The agent with its receiver down or hanging: memory stays within the configured bounds,
//! every lost sample is counted, and the application's threads are never held up.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spanprof_agent::slot::{self, SpanContextIds};
use spanprof_agent::{Agent, AgentConfig, AgentStats};

/// Threads burning CPU inside a span until `stop`; each counts its rounds of work.
fn burners(n: usize, stop: &Arc<AtomicBool>) -> Vec<(std::thread::JoinHandle<()>, Arc<AtomicU64>)> {
    (0..n)
        .map(|i| {
            let (stop, rounds) = (stop.clone(), Arc::new(AtomicU64::new(0)));
            let counter = rounds.clone();
            let handle = std::thread::spawn(move || {
                let ids = SpanContextIds {
                    trace_id: [i as u8 + 1; 16],
                    span_id: [i as u8 + 1; 8],
                    trace_flags: 1,
                    name: "burn",
                };
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    slot::enter(1, &ids);
                    for _ in 0..100_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                    }
                    slot::exit(1);
                    std::hint::black_box(x);
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            (handle, rounds)
        })
        .collect()
}

/// Runs burners under an agent until it has taken `samples` samples (90 s at most); returns
/// the final counters and how long `shutdown` took.
/// One test at a time owns SIGPROF (the sampler is one per process, and the sampler module's
/// tests share this process): waits for it with a deadline, as `sampler::sampler` does.
fn start(config: AgentConfig) -> Agent {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match Agent::start(config.clone()) {
            Ok(agent) => return agent,
            Err(spanprof_agent::AgentError::AlreadyRunning) if Instant::now() < deadline => {
                pause(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn run(config: AgentConfig, samples: u64) -> (AgentStats, Duration) {
    let agent = start(config);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = burners(2, &stop);
    let deadline = Instant::now() + Duration::from_secs(90);
    while agent.stats().samples < samples && Instant::now() < deadline {
        pause(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for (t, rounds) in threads {
        t.join().unwrap();
        assert!(rounds.load(Ordering::Relaxed) > 0);
    }
    let started = Instant::now();
    let stats = agent.shutdown();
    (stats, started.elapsed())
}

/// Every sample taken is exported or counted in one drop counter.
fn assert_accounted(s: &AgentStats) {
    assert_eq!(
        s.samples,
        s.samples_exported + s.dropped_export_failed + s.dropped_window_full + s.dropped_queue_full,
        "{s:?}"
    );
}

#[test]
fn receiver_refusing_or_hanging_costs_counted_drops_within_bounds() {
    // Refused: nothing listens on the port.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (s, _) = run(
        AgentConfig {
            endpoint: format!("http://127.0.0.1:{port}/v1development/profiles"),
            frequency_hz: 250,
            export_interval: Duration::from_millis(200),
            drain_interval: Duration::from_millis(20),
            ..Default::default()
        },
        300,
    );
    assert!(s.samples >= 300, "{s:?}");
    assert!(s.export_errors > 0 && s.dropped_export_failed > 0, "{s:?}");
    assert_eq!(s.samples_exported, 0, "{s:?}");
    assert_accounted(&s);

    // Hanging: a listener that reads requests and never answers; each export waits out the
    // timeout, the queue (1 window) stays full and the window in hand stops at its limit.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = stream.read(&mut buf);
            held.push(stream); // open, unanswered
        }
    });
    let max_samples = 100;
    let capacity = 1;
    let timeout = Duration::from_millis(1500);
    let (s, shutdown) = run(
        AgentConfig {
            endpoint: format!("http://{addr}/v1development/profiles"),
            frequency_hz: 250,
            export_interval: Duration::from_millis(100),
            drain_interval: Duration::from_millis(20),
            max_samples_per_export: max_samples,
            queue_capacity: capacity,
            http_timeout: timeout,
            ..Default::default()
        },
        1_000,
    );
    assert!(s.dropped_window_full > 0, "{s:?}");
    assert!(s.export_errors > 0, "{s:?}");
    // Held at most: the queued windows, the one the exporter is encoding, and the one in hand.
    assert!(
        s.max_queued_samples <= ((capacity + 2) * max_samples) as u64,
        "{s:?}"
    );
    assert_accounted(&s);
    // Shutdown waits for the last window's room, each export under its timeout.
    assert!(
        shutdown < timeout * 4 + Duration::from_secs(5),
        "{shutdown:?}"
    );
}

/// Between two checks of a condition waited for under a deadline: gives the other threads the
/// core (a wake-up ends it early).
fn pause(between_checks: Duration) {
    std::thread::park_timeout(between_checks);
}
