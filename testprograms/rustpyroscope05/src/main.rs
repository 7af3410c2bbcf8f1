//! Burns CPU in known functions under Pyroscope thread tags, as a Rust service using the
//! `pyroscope` 0.5 crate tags a request: `span_id`/`trace_id` through `tag_wrapper`, with a
//! nested child span's tags added inside its parent's. Uploads folded text at its stop.
//!
//! Usage: rustpyroscope05 SERVER_URL TRACE_ID PARENT_SPAN_ID CHILD_SPAN_ID

use std::hint::black_box;
use std::time::Duration;

use pyroscope::pyroscope::ReportEncoding;
use pyroscope::PyroscopeAgent;
use pyroscope_pprofrs::{pprof_backend, PprofConfig};

/// CPU time this thread has used: the work below is measured in it, so each span burns the
/// same CPU however busy the machine is.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[inline(never)]
fn spin(for_how_long: Duration) -> u64 {
    let start = thread_cpu();
    let mut x = 1u64;
    while thread_cpu() - start < for_how_long {
        for i in 0..10_000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[inline(never)]
fn parent_work(d: Duration) -> u64 {
    spin(d)
}

#[inline(never)]
fn child_work(d: Duration) -> u64 {
    spin(d)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, trace, parent, child] = args.as_slice() else {
        eprintln!("usage: rustpyroscope05 SERVER_URL TRACE_ID PARENT_SPAN_ID CHILD_SPAN_ID");
        std::process::exit(2);
    };
    let agent = PyroscopeAgent::builder(url.as_str(), "rustpyroscope05")
        .backend(pprof_backend(PprofConfig::new().sample_rate(100)))
        .tags(vec![("env", "eval")])
        .report_encoding(ReportEncoding::FOLDED)
        .build()
        .expect("building the agent");
    let agent = agent.start().expect("starting the agent");
    let (add_tag, remove_tag) = agent.tag_wrapper();
    let tag = |k: &str, v: &str| add_tag(k.to_owned(), v.to_owned()).expect("adding a tag");
    let untag = |k: &str, v: &str| remove_tag(k.to_owned(), v.to_owned()).expect("removing a tag");

    let ms = Duration::from_millis;
    tag("trace_id", trace);
    tag("span_id", parent);
    let mut sum = parent_work(ms(1200));
    tag("span_id", child);
    sum ^= child_work(ms(1200));
    untag("span_id", child);
    sum ^= parent_work(ms(300));
    untag("span_id", parent);
    untag("trace_id", trace);
    black_box(sum);

    let agent = agent.stop().expect("stopping the agent");
    agent.shutdown();
    println!("done");
}
