//! Whether a forwarder's queue keeps up: its undelivered bytes sampled every [`TICK`], their
//! growth over the last [`WINDOW`], and at that pace when the queue would be full (and drop
//! its oldest records). Published as gauges, and read by `/health`, which warns long before
//! anything is dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::queue::DiskQueue;
use crate::metrics::Metrics;

/// How often the queue's size is sampled.
pub const TICK: Duration = Duration::from_secs(5);
/// The span the growth is measured over.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The least span measured before a growth is believed (a start's first burst is not a
/// trend).
const MIN_SPAN: Duration = Duration::from_secs(30);
/// `/health` warns when the queue would be full within this.
pub const WARN_WITHIN: Duration = Duration::from_secs(6 * 3600);

/// Undelivered bytes over the last [`WINDOW`].
#[derive(Debug)]
pub struct Growth {
    samples: VecDeque<(Instant, u64)>,
}

impl Growth {
    /// Starts with `bytes` undelivered now.
    pub fn new(bytes: u64) -> Growth {
        let mut g = Growth {
            samples: VecDeque::new(),
        };
        g.sample_at(Instant::now(), bytes);
        g
    }

    /// Records `bytes` undelivered now.
    pub fn sample(&mut self, bytes: u64) {
        self.sample_at(Instant::now(), bytes);
    }

    fn sample_at(&mut self, at: Instant, bytes: u64) {
        self.samples.push_back((at, bytes));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| at.duration_since(*t) > WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// Net growth in bytes/s over the window, once it spans `MIN_SPAN` (30 s; else 0).
    pub fn bytes_per_second(&self) -> f64 {
        let (Some(&(t0, b0)), Some(&(t1, b1))) = (self.samples.front(), self.samples.back()) else {
            return 0.0;
        };
        let span = t1.duration_since(t0);
        if span < MIN_SPAN {
            return 0.0;
        }
        (b1 as f64 - b0 as f64) / span.as_secs_f64()
    }

    /// How long until `free` more bytes are queued at the current growth; `None` while the
    /// queue does not grow.
    pub fn full_in(&self, free: u64) -> Option<Duration> {
        let rate = self.bytes_per_second();
        (rate > 0.0).then(|| Duration::from_secs_f64(free as f64 / rate))
    }
}

/// Sets forwarder `label`'s growth gauges.
pub fn publish(metrics: &Metrics, label: &str, growth: &Growth, queue: &DiskQueue) {
    let labels = [label];
    // Net growth of the undelivered bytes, bytes/s (negative while draining).
    let bytes_per_second = growth.bytes_per_second();
    metrics
        .forward_queue_growth
        .set(&labels, (), bytes_per_second);
    let free = queue.max_bytes().saturating_sub(queue.disk_bytes());
    let full_in = growth
        .full_in(free)
        .map_or(-1.0, |d| d.as_secs_f64().round());
    // Seconds until the queue is full at the current growth; -1 while it does not grow.
    metrics.forward_queue_full_in.set(&labels, (), full_in);
}

/// The `/health` warnings of the forwarders in `metrics` (this tenant's): one line for each
/// queue that would be full within [`WARN_WITHIN`] at its growth of the last minute.
pub fn warnings(metrics: &Metrics) -> Vec<String> {
    let first = |(values, v): (Vec<String>, f64)| (values.concat(), v);
    let growth: Vec<(String, f64)> = metrics
        .forward_queue_growth
        .recorded(())
        .into_iter()
        .map(first)
        .collect();
    metrics
        .forward_queue_full_in
        .recorded(())
        .into_iter()
        .map(first)
        .filter(|(_, s)| *s >= 0.0 && *s < WARN_WITHIN.as_secs_f64())
        .map(|(name, seconds)| {
            let rate = growth
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0.0, |(_, r)| *r);
            warning(&name, rate, seconds)
        })
        .collect()
}

fn warning(name: &str, bytes_per_second: f64, full_in_seconds: f64) -> String {
    format!(
        "forwarder {name}'s queue grows faster than it drains ({:.1} KiB/s more over the last \
         minute): full in about {} at this pace, then its oldest records are dropped (is the \
         endpoint down or slow? see spanprof_forward_failing)",
        bytes_per_second / 1024.0,
        human(full_in_seconds)
    )
}

fn human(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_measured_over_the_window_and_projected() {
        let t = Instant::now();
        let mut g = Growth {
            samples: VecDeque::new(),
        };
        g.sample_at(t, 1000);
        g.sample_at(t + Duration::from_secs(10), 200_000);
        assert_eq!(
            g.bytes_per_second(),
            0.0,
            "10 s is too short a span to believe"
        );
        // 1 MB/s for a minute.
        for i in 2..=12 {
            g.sample_at(t + Duration::from_secs(5 * i), 1000 + 1_000_000 * 5 * i);
        }
        let rate = g.bytes_per_second();
        assert!((rate - 1_000_000.0).abs() < 50_000.0, "{rate}");
        let full = g.full_in(600_000_000).unwrap().as_secs_f64();
        assert!((full - 600.0).abs() < 40.0, "{full}");
        // Draining: it shrinks; no projection.
        for i in 13..=30 {
            g.sample_at(t + Duration::from_secs(5 * i), 1000);
        }
        assert!(g.bytes_per_second() <= 0.0);
        assert!(g.full_in(1 << 30).is_none());
        assert!(g.samples.len() <= 13, "older samples leave the window");
    }

    #[test]
    fn warnings_name_the_forwarder_and_when_it_is_full() {
        let m = Metrics::default();
        let (growth, full_in) = (&m.forward_queue_growth, &m.forward_queue_full_in);
        growth.set(&["pyro"], (), 2048.0);
        full_in.set(&["pyro"], (), 1500.0);
        growth.set(&["tempo"], (), -10.0);
        full_in.set(&["tempo"], (), -1.0);
        full_in.set(&["far"], (), 90_000.0);
        let w = warnings(&m);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("forwarder pyro's queue grows"), "{}", w[0]);
        assert!(
            w[0].contains("2.0 KiB/s") && w[0].contains("25 min"),
            "{}",
            w[0]
        );
    }
}
