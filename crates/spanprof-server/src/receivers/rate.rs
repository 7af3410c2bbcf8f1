//! Each tenant's ingest rate: request body bytes per second, with a burst, as a token bucket
//! (`server.max_ingest_rate`, `server.max_ingest_burst`). A body past it is refused with 429
//! and `Retry-After` (OTLP gRPC: `RESOURCE_EXHAUSTED` with its retry hint), as Pyroscope and
//! Tempo refuse a tenant past its ingestion rate.

use std::sync::Mutex;
use std::time::Instant;

/// A token bucket of bytes.
#[derive(Debug)]
pub struct IngestRate {
    /// Bytes per second (0: no limit).
    rate: f64,
    /// Most bytes taken at once after a quiet spell.
    burst: f64,
    /// Bytes that may be taken now, and when that was computed.
    bucket: Mutex<(f64, Instant)>,
}

impl IngestRate {
    /// `rate` bytes/s (0 = no limit) with bursts of `burst` bytes (at least one second's rate).
    pub fn new(rate: u64, burst: u64) -> IngestRate {
        let rate = rate as f64;
        let burst = (burst as f64).max(rate);
        IngestRate {
            rate,
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes `bytes` if the bucket holds them; else takes nothing and says so. A body larger
    /// than the burst is let through when the bucket is full (it could never be otherwise),
    /// leaving it in debt.
    pub fn take(&self, bytes: usize) -> bool {
        if self.rate == 0.0 {
            return true;
        }
        let bytes = bytes as f64;
        let mut b = self.bucket.lock().expect("ingest rate lock");
        let now = Instant::now();
        let refilled = (b.0 + now.duration_since(b.1).as_secs_f64() * self.rate).min(self.burst);
        *b = (refilled, now);
        if bytes <= refilled || refilled >= self.burst {
            b.0 -= bytes;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_pass_then_the_rate_holds() {
        let unlimited = IngestRate::new(0, 0);
        assert!((0..1000).all(|_| unlimited.take(1 << 30)));
        let r = IngestRate::new(1000, 5000);
        assert!(r.take(3000));
        assert!(r.take(2000));
        assert!(!r.take(500), "the burst is spent");
        // A body larger than the burst passes only on a full bucket.
        let big = IngestRate::new(10, 10);
        assert!(big.take(1_000_000));
        assert!(!big.take(1));
    }
}
