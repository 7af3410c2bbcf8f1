//! The real sampler (per-thread CPU timers, the SIGPROF handler, the rings) against threads that
//! write their slot as fast as they can: no sample ever carries a torn id, and samples land in
//! the function that burns the CPU.
#![cfg(target_os = "linux")]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use spanprof_agent::sampler::Sampler;
use spanprof_agent::slot::{self, SpanContextIds};
use spanprof_agent::symbols::Symbolizer;

fn ids(byte: u8, name: &'static str) -> SpanContextIds {
    SpanContextIds {
        trace_id: [byte; 16],
        span_id: [byte; 8],
        trace_flags: byte & 1,
        name,
    }
}

// gettid has no safe wrapper in std.
#[allow(unsafe_code)]
fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// One test at a time owns SIGPROF (the sampler is one per process).
fn sampler(hz: u32) -> Sampler {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match Sampler::start(hz) {
            Ok(s) => return s,
            Err(spanprof_agent::AgentError::AlreadyRunning) if Instant::now() < deadline => {
                pause(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_signal_during_a_slot_write_never_tears_an_id() {
    let mut sampler = sampler(10_000);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            let (a, b) = (ids(0xAA, "alpha"), ids(0x55, "beta-with-a-longer-name"));
            let c = ids(0x33, "gamma");
            let mut writes = 0u64;
            // Every iteration rewrites the slot six times: most signals land inside a write. The
            // layer's path too: a record built once, then re-entered from the thread's cache.
            while !stop.load(Ordering::Relaxed) {
                slot::enter(1, &a);
                slot::enter(2, &b);
                if !slot::enter_cached(3, 0) {
                    slot::enter_caching(3, 0, &c);
                }
                slot::exit(3);
                slot::exit(2);
                slot::exit(1);
                writes += 6;
            }
            writes
        })
    };
    let writer_tid = rx.recv().unwrap();
    let (alpha, beta, none) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let mut check = |s: &spanprof_agent::sampler::ring::RawSample| {
        if s.tid != writer_tid {
            return;
        }
        let Some(r) = s.span() else {
            none.set(none.get() + 1);
            return;
        };
        let byte = r.trace_id[0];
        let expected = match byte {
            0xAA => ids(0xAA, "alpha"),
            0x55 => ids(0x55, "beta-with-a-longer-name"),
            0x33 => ids(0x33, "gamma"),
            _ => panic!("torn or foreign record: {r:?}"),
        };
        assert_eq!(r.trace_id, expected.trace_id, "torn trace id: {r:?}");
        assert_eq!(r.span_id, expected.span_id, "torn span id: {r:?}");
        assert_eq!(r.trace_flags, expected.trace_flags, "torn flags: {r:?}");
        assert_eq!(r.span_name(), Some(expected.name), "torn name: {r:?}");
        let count = if byte == 0xAA { &alpha } else { &beta }; // gamma, inside beta, counts with it
        count.set(count.get() + 1);
    };
    // CPU-time timers fire at the scheduler tick at most, so the rate is far below 10 kHz:
    // wait for enough samples, whatever the machine's load, under a deadline.
    let deadline = Instant::now() + Duration::from_secs(90);
    while alpha.get() + beta.get() < 400 && Instant::now() < deadline {
        sampler.refresh_threads(&mut check);
        sampler.drain(&mut check);
        pause(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    sampler.drain(&mut check);
    let (alpha, beta, none) = (alpha.get(), beta.get(), none.get());
    eprintln!("{writes} slot writes; samples: alpha {alpha}, beta {beta}, between spans {none}");
    assert!(
        alpha + beta >= 400,
        "only {alpha}+{beta} samples in spans within 90 s"
    );
    assert!(alpha > 0 && beta > 0, "alpha {alpha}, beta {beta}");
}

#[inline(never)]
fn burn_known_function(stop: &AtomicBool) -> u64 {
    // Plain shifts and xors, no calls even unoptimised: the samples' leaf is this function.
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let mut i = 0;
        while i < 1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            i += 1;
        }
    }
    x
}

#[test]
fn samples_land_in_the_burning_function_and_threads_come_and_go() {
    let mut sampler = sampler(1000);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let burner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            burn_known_function(&stop)
        })
    };
    let tid = rx.recv().unwrap();
    let mut symbols = Symbolizer::default();
    let (total, in_burn) = (Cell::new(0u32), Cell::new(0u32));
    let mut check = |s: &spanprof_agent::sampler::ring::RawSample| {
        if s.tid != tid {
            return;
        }
        total.set(total.get() + 1);
        // The leaf program counter, read from the interrupted context (this test binary has no
        // frame pointers; the walk is proven by the attribution test's program, which has).
        let found = symbols
            .resolve(s.frames()[0], false)
            .iter()
            .any(|f| f.name.ends_with("burn_known_function"));
        if found {
            in_burn.set(in_burn.get() + 1);
        }
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while total.get() < 100 && Instant::now() < deadline {
        sampler.refresh_threads(&mut check);
        sampler.drain(&mut check);
        pause(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    burner.join().unwrap();
    let (total, in_burn) = (total.get(), in_burn.get());
    assert!(
        total >= 100,
        "{total} samples of the burning thread in 90 s"
    );
    // The loop body is all the thread does: a sample elsewhere would be a wrong pc.
    assert!(
        in_burn * 100 >= total * 95,
        "{in_burn} of {total} samples in burn_known_function"
    );
    // The exited thread's timer is gone and its ring free again.
    // A joined thread leaves /proc/self/task a moment after join returns: wait for it.
    let gone = |sampler: &mut Sampler, tid: i32| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            sampler.refresh_threads(&mut |_| {});
            if !sampler.is_sampled(tid) {
                return true;
            }
            pause(Duration::from_millis(5));
        }
        false
    };
    assert!(
        gone(&mut sampler, tid),
        "thread {tid} exited but keeps its timer"
    );
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let extra = std::thread::spawn(move || {
        tx.send(gettid()).unwrap();
        done_rx.recv().unwrap();
    });
    let extra_tid = rx.recv().unwrap();
    sampler.refresh_threads(&mut |_| {});
    assert!(sampler.is_sampled(extra_tid));
    done_tx.send(()).unwrap();
    extra.join().unwrap();
    assert!(gone(&mut sampler, extra_tid));
}

/// Between two checks of a condition waited for under a deadline: gives the other threads the
/// core (a wake-up ends it early).
fn pause(between_checks: Duration) {
    std::thread::park_timeout(between_checks);
}
