//! The profiles stored lately, by identity, so that a request sent again is not stored twice.
//!
//! An exporter that did not get its answer (a timeout, a connection cut after the store wrote
//! the request) sends the request again, and its profiles would count twice in every flame
//! graph of their time. A profile that names itself (a non-zero OTLP `profile_id`, which
//! spanprof's own forwarders always set) is a repeat when a profile of the same service, id,
//! time, sample type and number of samples was stored lately. The id alone is not enough: a
//! producer that gives every profile the same id would lose all but its first.
//!
//! Only the last [`RECENT_PROFILES`] are remembered, in memory: a repeat comes within seconds
//! or minutes of the first, and one across a restart of the server is stored again.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::HashSet;
use spanprof_format::otlp::{Profile, ProfilesDictionary};

/// How many stored profiles are remembered: minutes of profiles at hundreds a second, in
/// about 3 MB (a 64-bit hash of each identity, in a set and in arrival order).
pub(crate) const RECENT_PROFILES: usize = 1 << 17;

#[derive(Debug, Default)]
pub(crate) struct RecentProfiles {
    hasher: hashbrown::DefaultHashBuilder,
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl RecentProfiles {
    /// The identity of profile `p` of service `service`, or `None` when it names none.
    pub fn key(&self, service: u32, d: &ProfilesDictionary, p: &Profile) -> Option<u64> {
        if p.profile_id.iter().all(|&b| b == 0) {
            return None;
        }
        let text = |i: i32| {
            usize::try_from(i)
                .ok()
                .and_then(|i| d.string_table.get(i))
                .map_or("", String::as_str)
        };
        let sample_type = p
            .sample_type
            .map(|t| (text(t.type_strindex), text(t.unit_strindex)));
        Some(self.hasher.hash_one((
            service,
            &p.profile_id,
            p.time_unix_nano,
            sample_type,
            p.samples.len(),
        )))
    }

    /// Whether a profile of identity `key` was stored lately.
    pub fn contains(&self, key: u64) -> bool {
        self.set.contains(&key)
    }

    /// Remembers stored profiles, forgetting the oldest past [`RECENT_PROFILES`].
    pub fn insert(&mut self, keys: impl IntoIterator<Item = u64>) {
        for key in keys {
            if self.set.insert(key) {
                self.order.push_back(key);
            }
            while self.order.len() > RECENT_PROFILES {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_profiles_only() {
        let mut r = RecentProfiles::default();
        r.insert(0..RECENT_PROFILES as u64 + 10);
        assert!(!r.contains(9) && r.contains(10));
        assert!(r.contains(RECENT_PROFILES as u64 + 9));
        // Again: not twice in the order, so not forgotten early.
        r.insert([RECENT_PROFILES as u64 + 9]);
        assert_eq!(r.order.len(), RECENT_PROFILES);
    }

    #[test]
    fn a_profile_without_an_id_has_no_identity_and_one_with_differs_by_time() {
        let r = RecentProfiles::default();
        let d = ProfilesDictionary::default();
        let mut p = Profile {
            profile_id: vec![0; 16],
            time_unix_nano: 1,
            ..Default::default()
        };
        assert_eq!(r.key(0, &d, &p), None);
        p.profile_id = vec![7; 16];
        let first = r.key(0, &d, &p);
        assert!(first.is_some());
        assert_eq!(r.key(0, &d, &p), first);
        assert_ne!(r.key(1, &d, &p), first, "another service");
        p.time_unix_nano = 2;
        assert_ne!(r.key(0, &d, &p), first, "another time");
    }
}
