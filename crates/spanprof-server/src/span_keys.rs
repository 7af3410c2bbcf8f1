//! Sample labels that hold span ids under a key spanprof does not link (`custom.span_id`):
//! found at ingest, told once in the log with the setting that links them, counted in
//! `/metrics` by key, and named by the span API (the UI says why such a span shows no
//! samples instead of "no CPU used").
//!
//! Such a label is an ordinary attribute: each span makes a series, and its samples are
//! found only by a label query. A key is *found* when one of its values is a stored span's
//! id, or when it has taken many distinct span-id-shaped values (per-request ids).

use std::sync::Mutex;

use hashbrown::{HashMap, HashSet};
use spanprof_format::link::{parse_id, LinkConfig};
use spanprof_format::otlp::{any_value, ProfilesData};
use spanprof_store::store::Store;

use crate::metrics::Metrics;

/// Keys followed at most: past it, new keys are not looked at (bounds memory and the
/// metric's label values).
const MAX_KEYS: usize = 32;
/// Distinct values per key after which it counts as per-request ids whatever the store says.
const DISTINCT_IDS: usize = 64;
/// Values of a key looked up in the store per request until one matches.
const LOOKUPS_PER_REQUEST: usize = 4;

/// What is known of one key.
#[derive(Debug, Default)]
struct KeyState {
    /// Distinct id-shaped values seen, up to [`DISTINCT_IDS`].
    distinct: HashSet<[u8; 8]>,
    /// Whether the key was found (and told).
    found: bool,
}

/// The keys seen holding span ids.
#[derive(Debug, Default)]
pub struct SpanKeys {
    keys: Mutex<HashMap<String, KeyState>>,
}

impl SpanKeys {
    /// The keys found so far, in name order.
    pub fn found(&self) -> Vec<String> {
        let keys = self.keys.lock().expect("span keys lock poisoned");
        let mut found: Vec<String> = keys
            .iter()
            .filter(|(_, s)| s.found)
            .map(|(k, _)| k.clone())
            .collect();
        found.sort();
        found
    }

    /// Looks at a linked request: counts under `spanprof_unlinked_span_id_samples_total`
    /// the samples with a span-id-shaped label under a key that is no link key, and tells a
    /// key once it is found. Costs one pass over the dictionary's attributes when there is
    /// no such label.
    pub fn inspect(
        &self,
        data: &ProfilesData,
        link: &LinkConfig,
        store: &Store,
        metrics: &Metrics,
    ) {
        let Some(d) = data.dictionary.as_ref() else {
            return;
        };
        // Attribute index → (key, id) for span-id-shaped values under other keys.
        let mut candidates: HashMap<i32, (&str, [u8; 8])> = HashMap::new();
        for (i, kv) in d.attribute_table.iter().enumerate() {
            let Some(any_value::Value::StringValue(v)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
            else {
                continue;
            };
            if v.len() != 16 {
                continue;
            }
            let Some(id) = parse_id::<8>(v) else { continue };
            let Some(key) = d
                .string_table
                .get(usize::try_from(kv.key_strindex).unwrap_or(usize::MAX))
            else {
                continue;
            };
            let linked = link
                .span_id_keys
                .iter()
                .chain(&link.trace_id_keys)
                .chain(&link.span_name_keys)
                .any(|k| k == key);
            if !linked && key != spanprof_format::link::UNLINKED_SPAN_ID_KEY {
                candidates.insert(i as i32, (key.as_str(), id));
            }
        }
        if candidates.is_empty() {
            return;
        }
        let mut samples: HashMap<&str, u64> = HashMap::new();
        let mut values: HashMap<&str, HashSet<[u8; 8]>> = HashMap::new();
        let profiles = data
            .resource_profiles
            .iter()
            .flat_map(|r| &r.scope_profiles)
            .flat_map(|s| &s.profiles);
        for s in profiles.flat_map(|p| &p.samples) {
            for a in &s.attribute_indices {
                if let Some(&(key, id)) = candidates.get(a) {
                    *samples.entry(key).or_default() += 1;
                    values.entry(key).or_default().insert(id);
                }
            }
        }
        for (key, n) in &samples {
            if self.track(key) {
                metrics.unlinked_span_id_samples.add(&[key], (), *n as f64);
            }
        }
        for (key, ids) in values {
            self.learn(key, &ids, store);
        }
    }

    /// Whether `key` is followed (a place is made for it while there is room).
    fn track(&self, key: &str) -> bool {
        let mut keys = self.keys.lock().expect("span keys lock poisoned");
        if keys.contains_key(key) {
            return true;
        }
        if keys.len() >= MAX_KEYS {
            return false;
        }
        keys.insert(key.to_owned(), KeyState::default());
        true
    }

    /// Adds `ids` to what is known of `key`, and tells the key when it is found.
    fn learn(&self, key: &str, ids: &HashSet<[u8; 8]>, store: &Store) {
        let to_look_up: Vec<[u8; 8]> = {
            let mut keys = self.keys.lock().expect("span keys lock poisoned");
            let Some(state) = keys.get_mut(key) else {
                return;
            };
            if state.found {
                return;
            }
            let fresh: Vec<[u8; 8]> = ids
                .iter()
                .filter(|id| !state.distinct.contains(*id))
                .copied()
                .collect();
            for id in &fresh {
                if state.distinct.len() < DISTINCT_IDS {
                    state.distinct.insert(*id);
                }
            }
            if state.distinct.len() >= DISTINCT_IDS {
                state.found = true;
                drop(keys);
                tell(
                    key,
                    &format!("it took {DISTINCT_IDS} distinct span-id-shaped values"),
                );
                return;
            }
            fresh.into_iter().take(LOOKUPS_PER_REQUEST).collect()
        };
        // Looked up without the lock held: a store read may wait for a segment file.
        let hit = to_look_up
            .iter()
            .find(|id| matches!(store.span(id), Ok(Some(_))));
        if let Some(id) = hit {
            let mut keys = self.keys.lock().expect("span keys lock poisoned");
            if let Some(state) = keys.get_mut(key).filter(|s| !s.found) {
                state.found = true;
                drop(keys);
                let hex = spanprof_format::link::to_hex(id);
                tell(key, &format!("its value {hex} is the id of a stored span"));
            }
        }
    }
}

/// Logs, once per key, that `key` holds span ids and how to link it.
fn tell(key: &str, why: &str) {
    tracing::warn!(
        key,
        "sample label {key:?} holds span ids ({why}) but is not a link key: its samples are \
         stored under a series per span and linked to no span; link them with \
         `spanprof serve --span-id-key {key}` or processors.link.span_id_keys in the config file"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::otlp::{AnyValue, KeyValueAndUnit, Profile, ProfilesDictionary};
    use spanprof_format::otlp::{ResourceProfiles, Sample, ScopeProfiles};

    /// A request whose `n` samples each carry `key` with a distinct id-shaped value.
    fn request(key: &str, n: u64) -> ProfilesData {
        let mut d = ProfilesDictionary {
            string_table: vec!["".into(), key.into()],
            attribute_table: vec![KeyValueAndUnit::default()],
            ..Default::default()
        };
        let mut samples = Vec::new();
        for i in 0..n {
            d.attribute_table.push(KeyValueAndUnit {
                key_strindex: 1,
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!("{:016x}", i + 1))),
                }),
                unit_strindex: 0,
            });
            samples.push(Sample {
                attribute_indices: vec![i as i32 + 1],
                values: vec![1],
                ..Default::default()
            });
        }
        ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: Some(d),
        }
    }

    #[test]
    fn a_key_with_many_ids_is_found_and_counted_and_link_keys_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(spanprof_store::store::StoreConfig::new(dir.path())).unwrap();
        let metrics = Metrics::default();
        let keys = SpanKeys::default();
        let link = LinkConfig::default();
        keys.inspect(&request("custom.span_id", 10), &link, &store, &metrics);
        assert!(keys.found().is_empty(), "10 ids, none stored: not yet");
        keys.inspect(&request("custom.span_id", 80), &link, &store, &metrics);
        assert_eq!(keys.found(), ["custom.span_id"]);
        keys.inspect(&request("span_id", 80), &link, &store, &metrics);
        assert_eq!(keys.found(), ["custom.span_id"], "a link key is no finding");
        let text = metrics.render();
        assert!(
            text.contains("spanprof_unlinked_span_id_samples_total{key=\"custom.span_id\"} 90"),
            "{text}"
        );
    }
}
