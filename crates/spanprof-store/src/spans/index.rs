//! The in-memory span index: spans by id, the spans of each trace, and each span's children.

use std::collections::VecDeque;

use hashbrown::{HashMap, HashSet};

use super::record::{SpanRecord, SpanResource};

/// Spans held in memory and looked up by span id, trace id or parent.
///
/// Children are indexed by their parent's id whether or not the parent itself is present, so
/// the descendants of a span that has not arrived yet are still found.
#[derive(Clone, Debug, Default)]
pub struct SpanIndex {
    /// Boxed: growing the table moves 16-byte entries, not whole records (a segment's table
    /// of half a million spans took 0.47 s to grow in place, stalling an ingest call).
    by_id: HashMap<[u8; 8], Box<SpanRecord>>,
    by_trace: HashMap<[u8; 16], Vec<[u8; 8]>>,
    children: HashMap<[u8; 8], Vec<[u8; 8]>>,
    /// Every distinct resource of the spans here, once: a service that sends one span a
    /// request sends its resource with each, and each span kept its own copy.
    resources: HashSet<SpanResource>,
    /// The resource the last span came with, and the one of `resources` it is: the spans of
    /// one request share one, and hashing its texts per span doubled the cost of inserting.
    last_resource: Option<(SpanResource, SpanResource)>,
}

impl SpanIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `span`; a span with the same span id is replaced (a re-sent span wins).
    pub fn insert(&mut self, mut span: SpanRecord) {
        span.resource = self.shared(&span.resource);
        if let Some(old) = self.by_id.remove(&span.span_id) {
            self.unlink(&old);
        }
        self.by_trace
            .entry(span.trace_id)
            .or_default()
            .push(span.span_id);
        if let Some(parent) = span.parent_span_id {
            self.children.entry(parent).or_default().push(span.span_id);
        }
        self.by_id.insert(span.span_id, Box::new(span));
    }

    /// The list of `resources` equal to `resource`, which becomes one of them if none is.
    fn shared(&mut self, resource: &SpanResource) -> SpanResource {
        if let Some((came, kept)) = &self.last_resource {
            if std::sync::Arc::ptr_eq(came, resource) {
                return kept.clone();
            }
        }
        let kept = match self.resources.get(resource) {
            Some(kept) => kept.clone(),
            None => {
                self.resources.insert(resource.clone());
                resource.clone()
            }
        };
        self.last_resource = Some((resource.clone(), kept.clone()));
        kept
    }

    /// Makes room for `spans` more spans of `traces` more traces.
    pub fn reserve(&mut self, spans: usize, traces: usize) {
        self.by_id.reserve(spans);
        self.by_trace.reserve(traces);
        self.children.reserve(spans.saturating_sub(traces));
    }

    /// Traces with a span here.
    pub fn trace_count(&self) -> usize {
        self.by_trace.len()
    }

    /// The span with span id `id`.
    pub fn get(&self, id: &[u8; 8]) -> Option<&SpanRecord> {
        self.by_id.get(id).map(|s| &**s)
    }

    /// The spans of trace `trace_id`, by start time (ns), then span id.
    pub fn trace(&self, trace_id: &[u8; 16]) -> Vec<&SpanRecord> {
        let mut spans: Vec<&SpanRecord> = self
            .by_trace
            .get(trace_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.get(id))
            .collect();
        spans.sort_by_key(|s| (s.start_ns, s.span_id));
        spans
    }

    /// The ids of every span below `id` (children, their children, …), not `id` itself,
    /// breadth first and each level's siblings by start time. Each span appears once even when
    /// the parent links form a cycle.
    pub fn descendants(&self, id: &[u8; 8]) -> Vec<[u8; 8]> {
        let mut seen: HashSet<[u8; 8]> = HashSet::new();
        seen.insert(*id);
        let mut out = Vec::new();
        let mut queue = VecDeque::from([*id]);
        while let Some(parent) = queue.pop_front() {
            let Some(children) = self.children.get(&parent) else {
                continue;
            };
            let mut children: Vec<&[u8; 8]> = children.iter().collect();
            children.sort_by_key(|c| (self.by_id.get(*c).map(|s| s.start_ns), **c));
            for &child in children {
                if seen.insert(child) {
                    out.push(child);
                    queue.push_back(child);
                }
            }
        }
        out
    }

    /// The ids of every span below any of `roots` (in no order): one walk for them all, so
    /// that many roots of one deep trace cost one pass over it.
    pub fn below_any(&self, roots: &[[u8; 8]]) -> HashSet<[u8; 8]> {
        let mut below: HashSet<[u8; 8]> = HashSet::new();
        let mut stack: Vec<[u8; 8]> = roots.to_vec();
        while let Some(parent) = stack.pop() {
            for &child in self.children.get(&parent).into_iter().flatten() {
                if below.insert(child) {
                    stack.push(child);
                }
            }
        }
        below
    }

    /// Number of spans held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no span is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Every span, in no particular order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &SpanRecord> {
        self.by_id.values().map(|s| &**s)
    }

    /// Drops every span that ended before `end_ns` (ns since the Unix epoch): retention.
    /// Takes time linear in the number of spans held, however many go.
    pub fn remove_older_than(&mut self, end_ns: u64) {
        let before = self.by_id.len();
        self.by_id.retain(|_, s| s.end_ns >= end_ns);
        if self.by_id.len() == before {
            return;
        }
        let kept = &self.by_id;
        retain_members(&mut self.by_trace, |id| kept.contains_key(id));
        retain_members(&mut self.children, |id| kept.contains_key(id));
    }

    /// Removes `span`'s entries from the trace and children maps (not from `by_id`).
    fn unlink(&mut self, span: &SpanRecord) {
        remove_member(&mut self.by_trace, &span.trace_id, &span.span_id);
        if let Some(parent) = span.parent_span_id {
            remove_member(&mut self.children, &parent, &span.span_id);
        }
    }
}

/// Removes `id` from the list under `key`, and the list once empty.
fn remove_member<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, Vec<[u8; 8]>>,
    key: &K,
    id: &[u8; 8],
) {
    if let Some(ids) = map.get_mut(key) {
        ids.retain(|i| i != id);
        if ids.is_empty() {
            map.remove(key);
        }
    }
}

/// Keeps the ids for which `keep` holds, and the lists that still have one.
fn retain_members<K>(map: &mut HashMap<K, Vec<[u8; 8]>>, keep: impl Fn(&[u8; 8]) -> bool) {
    map.retain(|_, ids| {
        ids.retain(|id| keep(id));
        !ids.is_empty()
    });
}
