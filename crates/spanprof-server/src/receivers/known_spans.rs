//! The stored spans, for linking: a sample tagged with a span and its ancestors (SDKs that
//! keep thread tags as a set) is given the innermost span, told by the spans' parents.

use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use spanprof_format::link::SpanParents;
use spanprof_store::store::Store;

/// The parents of stored spans, each looked up once per request (only samples with several
/// span ids ask).
pub struct StoredSpans {
    store: Arc<Store>,
    parents: Mutex<HashMap<[u8; 8], Option<[u8; 8]>>>,
}

impl StoredSpans {
    /// The spans of `store`, for one request.
    pub fn of(store: &Arc<Store>) -> Arc<dyn SpanParents> {
        Arc::new(StoredSpans {
            store: store.clone(),
            parents: Mutex::new(HashMap::new()),
        })
    }
}

impl SpanParents for StoredSpans {
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]> {
        let mut parents = self.parents.lock().expect("span parents lock poisoned");
        *parents.entry(*span).or_insert_with(|| {
            // A span the store cannot read now is taken as unknown: the sample falls back to
            // the profile's own evidence (see `SampleLinker`).
            self.store
                .span(span)
                .ok()
                .flatten()
                .and_then(|s| s.parent_span_id)
        })
    }
}
