//! The stored spans, for linking: a sample tagged with a span and its ancestors (SDKs that
//! keep thread tags as a set) is given the innermost span, told by the spans' parents, or by
//! what earlier profiles' samples showed ([`LearnedNesting`]).

use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use spanprof_format::link::SpanParents;
use spanprof_store::store::Store;

/// Most nestings kept; past it the oldest half is forgotten (a nesting matters only while
/// its spans still run: seconds).
const MAX_LEARNED: usize = 65_536;

/// Spans seen nested in another by a profile's own samples, kept across requests: a later
/// upload window that lies wholly inside the nested span has both ids on every sample, and
/// only this tells which is innermost when the spans themselves were not (yet) received.
#[derive(Default)]
pub struct LearnedNesting {
    learned: Mutex<Learned>,
}

#[derive(Default)]
struct Learned {
    /// Nested span → its nearest ancestor, and when it was learnt (for forgetting).
    parents: HashMap<[u8; 8], ([u8; 8], u64)>,
    /// How many nestings were learnt.
    count: u64,
}

impl LearnedNesting {
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]> {
        let learned = self.learned.lock().expect("learned nesting lock poisoned");
        learned.parents.get(span).map(|&(ancestor, _)| ancestor)
    }

    fn learn(&self, span: [u8; 8], ancestor: [u8; 8]) {
        let mut learned = self.learned.lock().expect("learned nesting lock poisoned");
        learned.count += 1;
        let count = learned.count;
        learned.parents.insert(span, (ancestor, count));
        if learned.parents.len() > MAX_LEARNED {
            let oldest_kept = count - (MAX_LEARNED / 2) as u64;
            learned.parents.retain(|_, &mut (_, n)| n > oldest_kept);
        }
    }
}

/// The parents of stored spans, each looked up once per request (only samples with several
/// span ids ask), then the nestings learnt from earlier profiles.
pub struct StoredSpans {
    store: Arc<Store>,
    learned: Arc<LearnedNesting>,
    parents: Mutex<HashMap<[u8; 8], Option<[u8; 8]>>>,
}

impl StoredSpans {
    /// The spans of `store` and the nestings `learned` so far, for one request.
    pub fn of(store: &Arc<Store>, learned: &Arc<LearnedNesting>) -> Arc<dyn SpanParents> {
        Arc::new(StoredSpans {
            store: store.clone(),
            learned: learned.clone(),
            parents: Mutex::new(HashMap::new()),
        })
    }
}

impl SpanParents for StoredSpans {
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]> {
        let mut parents = self.parents.lock().expect("span parents lock poisoned");
        *parents.entry(*span).or_insert_with(|| {
            // A span the store cannot read now is taken as unknown: the sample falls back to
            // what earlier profiles showed, then to its profile's own evidence.
            self.store
                .span(span)
                .ok()
                .flatten()
                .and_then(|s| s.parent_span_id)
                .or_else(|| self.learned.parent(span))
        })
    }

    fn learn(&self, span: [u8; 8], ancestor: [u8; 8]) {
        self.learned.learn(span, ancestor);
    }
}

#[cfg(test)]
mod tests {
    use super::LearnedNesting;

    #[test]
    fn learnt_nestings_are_bounded_and_the_newest_kept() {
        let learned = LearnedNesting::default();
        let id = |n: usize| (n as u64).to_be_bytes();
        for n in 0..super::MAX_LEARNED + 10 {
            learned.learn(id(n), id(n + 1_000_000));
        }
        let kept = learned.learned.lock().unwrap().parents.len();
        assert!(kept <= super::MAX_LEARNED, "{kept}");
        assert_eq!(
            learned.parent(&id(super::MAX_LEARNED + 9)),
            Some(id(super::MAX_LEARNED + 1_000_009))
        );
        assert_eq!(learned.parent(&id(0)), None);
    }
}
