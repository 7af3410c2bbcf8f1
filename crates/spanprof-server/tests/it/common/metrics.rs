//! What one request to a receiver added to `/metrics`: its received, rejected and bytes counts.

use std::collections::BTreeMap;

/// Every series of a `/metrics` text (`name{labels}` as written) and its value.
pub fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A receiver's series as `/metrics` showed them before a request.
pub struct ReceiverMetrics {
    receiver: String,
    before: BTreeMap<String, f64>,
}

impl ReceiverMetrics {
    /// `receiver`'s series in `metrics` (the `/metrics` text before the request).
    pub fn before(metrics: &str, receiver: &str) -> Self {
        ReceiverMetrics {
            receiver: receiver.to_owned(),
            before: series(metrics),
        }
    }

    /// How much each of the receiver's series of `family` grew by `after`, by series.
    fn grown(&self, after: &BTreeMap<String, f64>, family: &str) -> BTreeMap<String, f64> {
        let label = format!("receiver=\"{}\"", self.receiver);
        after
            .iter()
            .filter(|(s, _)| s.starts_with(&format!("{family}{{")) && s.contains(&label))
            .map(|(s, v)| (s.clone(), v - self.before.get(s).copied().unwrap_or(0.0)))
            .filter(|(_, d)| *d != 0.0)
            .collect()
    }

    /// Asserts the request's body was counted as `bytes` bytes received (0: never read whole,
    /// e.g. past the body size limit).
    #[track_caller]
    fn assert_bytes(&self, now: &BTreeMap<String, f64>, after: &str, bytes: usize) {
        let got = self.grown(now, "spanprof_received_bytes_total");
        assert_eq!(
            got.values().sum::<f64>(),
            bytes as f64,
            "{}: received bytes {got:?}\n{after}",
            self.receiver
        );
    }

    /// Asserts the request was taken: its `bytes`-byte body counted as received, `profiles`
    /// profiles (and some samples) counted as received, and no refusal.
    #[track_caller]
    pub fn assert_received(&self, after: &str, bytes: usize, profiles: u64) {
        let now = series(after);
        self.assert_bytes(&now, after, bytes);
        let received = self.grown(&now, "spanprof_received_profiles_total");
        let samples = self.grown(&now, "spanprof_received_samples_total");
        let rejected = self.grown(&now, "spanprof_rejected_total");
        assert_eq!(
            received.values().sum::<f64>(),
            profiles as f64,
            "{}: received profiles {received:?}\n{after}",
            self.receiver
        );
        assert!(
            samples.values().sum::<f64>() > 0.0,
            "{}: no received samples counted\n{after}",
            self.receiver
        );
        assert!(
            rejected.is_empty(),
            "{}: refused {rejected:?}",
            self.receiver
        );
    }

    /// Asserts the request's `bytes`-byte body was counted as received, and no refusal (for
    /// a request whose profile count the caller does not know).
    #[track_caller]
    pub fn assert_read(&self, after: &str, bytes: usize) {
        let now = series(after);
        self.assert_bytes(&now, after, bytes);
        let rejected = self.grown(&now, "spanprof_rejected_total");
        assert!(
            rejected.is_empty(),
            "{}: refused {rejected:?}",
            self.receiver
        );
    }

    /// Asserts the request was refused for `reason`, counted once, `bytes` bytes of its body
    /// counted as received, and none of its profiles.
    #[track_caller]
    pub fn assert_rejected(&self, after: &str, bytes: usize, reason: &str) {
        let now = series(after);
        self.assert_bytes(&now, after, bytes);
        let rejected = self.grown(&now, "spanprof_rejected_total");
        let want = format!(
            "spanprof_rejected_total{{receiver=\"{}\",reason=\"{reason}\"}}",
            self.receiver
        );
        assert_eq!(
            rejected,
            BTreeMap::from([(want, 1.0)]),
            "{}: refusals counted\n{after}",
            self.receiver
        );
        let received = self.grown(&now, "spanprof_received_profiles_total");
        assert!(
            received.is_empty(),
            "{}: received {received:?}",
            self.receiver
        );
    }
}
