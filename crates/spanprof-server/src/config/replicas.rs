//! Several collectors sharing one list of scrape targets without a coordinator: each of
//! `count` replicas, given its `index`, scrapes the targets that hash to it. Rendezvous
//! hashing (each target goes to the replica whose hash with it is highest): every replica
//! computes the same split from the same list, each target is scraped by exactly one, and a
//! change of `count` moves only the targets of the replicas added or removed.

use crate::config::{ConfigError, ScrapeTarget};

/// This process's place among `count` replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// How many replicas share the targets (1 or more).
    pub count: u32,
    /// This one's index, in `0..count`.
    pub index: u32,
}

impl Replicas {
    /// `index` of `count`; an error says what is wrong (in terms of the flags and keys).
    pub fn new(count: u32, index: u32) -> Result<Replicas, ConfigError> {
        if count == 0 {
            return Err("replicas 0: there is at least this one (replicas: 1 or more)".into());
        }
        if index >= count {
            return Err(format!(
                "replica {index} of {count}: the replica index counts from 0, so it is 0 to {}",
                count - 1
            )
            .into());
        }
        Ok(Replicas { count, index })
    }

    /// The replica that scrapes `target`.
    pub fn owner(count: u32, target: &ScrapeTarget) -> u32 {
        (0..count.max(1))
            .max_by_key(|&r| score(target, r))
            .unwrap_or(0)
    }

    /// Whether this replica scrapes `target`.
    pub fn owns(&self, target: &ScrapeTarget) -> bool {
        Replicas::owner(self.count, target) == self.index
    }

    /// Keeps the targets of `targets` this replica scrapes, saying in the log which it
    /// leaves to the others.
    pub fn split(&self, targets: &mut Vec<ScrapeTarget>) {
        let before = targets.len();
        targets.retain(|t| self.owns(t));
        tracing::info!(
            replica = self.index,
            replicas = self.count,
            targets = targets.len(),
            of = before,
            "scrape targets split between replicas: this one takes its share"
        );
    }
}

/// A target's (service and URL: what makes it unique) hash with replica `r`: FNV-1a,
/// then a 64-bit finaliser so that near inputs spread over the whole range.
fn score(target: &ScrapeTarget, r: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let replica = r.to_le_bytes();
    let bytes = target
        .service
        .as_bytes()
        .iter()
        .chain(&[0u8])
        .chain(target.url.as_bytes())
        .chain(&[0u8])
        .chain(&replica);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(n: usize) -> Vec<ScrapeTarget> {
        (0..n)
            .map(|i| ScrapeTarget::new(format!("svc{}", i % 7), format!("http://10.0.0.{i}:6060")))
            .collect()
    }

    #[test]
    fn every_target_goes_to_exactly_one_replica_and_evenly() {
        let all = targets(300);
        for count in [1u32, 2, 3, 5] {
            let mut seen = vec![0usize; all.len()];
            let mut sizes = Vec::new();
            for index in 0..count {
                let r = Replicas::new(count, index).unwrap();
                let mut mine = all.clone();
                r.split(&mut mine);
                sizes.push(mine.len());
                for t in &mine {
                    let i = all.iter().position(|a| a.url == t.url).unwrap();
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{count} replicas: {seen:?}");
            let fair = all.len() / count as usize;
            assert!(
                sizes
                    .iter()
                    .all(|&s| s * 10 >= fair * 7 && s * 10 <= fair * 13),
                "{count} replicas: {sizes:?}"
            );
        }
    }

    #[test]
    fn a_third_replica_moves_only_the_targets_it_takes() {
        let all = targets(300);
        let moved = all
            .iter()
            .filter(|t| {
                let (two, three) = (Replicas::owner(2, t), Replicas::owner(3, t));
                two != three && three != 2
            })
            .count();
        assert_eq!(moved, 0, "targets moved between the replicas that stayed");
    }

    #[test]
    fn bad_counts_are_refused_saying_why() {
        assert!(Replicas::new(0, 0)
            .unwrap_err()
            .to_string()
            .contains("replicas 0"));
        assert!(Replicas::new(2, 2)
            .unwrap_err()
            .to_string()
            .contains("0 to 1"));
        assert_eq!(
            Replicas::new(3, 2).unwrap(),
            Replicas { count: 3, index: 2 }
        );
    }
}
