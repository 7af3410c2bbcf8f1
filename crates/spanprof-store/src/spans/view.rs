//! A span read in place: what [`super::scan_spans`] hands out for each span of an encoded
//! block, its texts borrowed from the block, and what a [`SpanRecord`] lends
//! ([`SpanRecord::view`]). Searches filter views and copy out only the spans they keep: a
//! search of a sealed segment no longer decodes its hundreds of thousands of spans into
//! records (an allocation per text, hash maps by id, trace and parent) to look at each once.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::record::{SpanEvent, SpanRecord, SpanResource};

/// One span, borrowed: the fields of a [`SpanRecord`], which says what each holds.
#[derive(Clone, Copy, Debug)]
pub struct SpanView<'a> {
    /// [`SpanRecord::trace_id`].
    pub trace_id: [u8; 16],
    /// [`SpanRecord::span_id`].
    pub span_id: [u8; 8],
    /// [`SpanRecord::parent_span_id`].
    pub parent_span_id: Option<[u8; 8]>,
    /// [`SpanRecord::name`].
    pub name: &'a str,
    /// [`SpanRecord::service`].
    pub service: &'a str,
    /// [`SpanRecord::start_ns`].
    pub start_ns: u64,
    /// [`SpanRecord::end_ns`].
    pub end_ns: u64,
    /// [`SpanRecord::kind`].
    pub kind: i32,
    /// [`SpanRecord::status_code`].
    pub status_code: i32,
    /// [`SpanRecord::status_message`].
    pub status_message: &'a str,
    /// [`SpanRecord::attributes`]: [`SpanView::attributes`] reads them.
    pub(super) attributes: Attributes<'a>,
    /// [`SpanRecord::resource`]: [`SpanView::resource`] reads them.
    pub(super) resource: Attributes<'a>,
    /// Which of its block's resources `resource` is (0 for a record's).
    pub(super) resource_index: usize,
    /// [`SpanRecord::events`]: [`SpanView::events`] copies them out.
    pub(super) events: Events<'a>,
}

/// A view's events: as an encoded block has them, or a record's.
#[derive(Clone, Copy, Debug)]
pub(super) enum Events<'a> {
    Indexed {
        strings: &'a [&'a str],
        events: &'a [IndexedEvent],
        /// The events' attributes, each event's a range of them.
        pairs: &'a [(usize, usize)],
    },
    Owned(&'a [SpanEvent]),
}

/// An event of an encoded block: its time, its name's string index, and the range of its
/// attributes in the block's event attribute pairs.
#[derive(Clone, Copy, Debug)]
pub(super) struct IndexedEvent {
    pub(super) time_ns: u64,
    pub(super) name: usize,
    pub(super) attributes: (usize, usize),
}

/// A view's attributes: as an encoded block has them (string indices, checked against
/// `strings` when the block was read), or a record's.
#[derive(Clone, Copy, Debug)]
pub(super) enum Attributes<'a> {
    Indexed {
        strings: &'a [&'a str],
        pairs: &'a [(usize, usize)],
    },
    Owned(&'a [(String, String)]),
    /// A record's resource, which a record copied out of the view shares.
    Shared(&'a SpanResource),
}

impl<'a> SpanView<'a> {
    /// How long the span ran, in ns (0 when `end_ns` is before `start_ns`).
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The attributes as (key, value), in the producer's order.
    pub fn attributes(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.attributes.iter()
    }

    /// The resource's attributes (other than `service.name`) as (key, value), in the
    /// producer's order.
    pub fn resource(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.resource.iter()
    }

    /// The events, copied out.
    pub fn events(&self) -> Vec<SpanEvent> {
        match self.events {
            Events::Owned(events) => events.to_vec(),
            Events::Indexed {
                strings,
                events,
                pairs,
            } => events
                .iter()
                .map(|e| SpanEvent {
                    time_ns: e.time_ns,
                    name: strings[e.name].to_owned(),
                    attributes: owned(
                        Attributes::Indexed {
                            strings,
                            pairs: &pairs[e.attributes.0..e.attributes.1],
                        }
                        .iter(),
                    ),
                })
                .collect(),
        }
    }

    /// The value of attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&'a str> {
        self.attributes().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of its resource's attribute `key`, if it has it.
    pub fn resource_attribute(&self, key: &str) -> Option<&'a str> {
        self.resource().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The span as a record of its own.
    pub fn to_record(&self) -> SpanRecord {
        self.record_with(self.resource_record())
    }

    /// The resource's attributes as a record holds them.
    pub(super) fn resource_record(&self) -> SpanResource {
        match self.resource {
            Attributes::Shared(r) => r.clone(),
            _ => owned(self.resource()).into(),
        }
    }

    /// The span as a record, with `resource` as its resource's attributes.
    pub(super) fn record_with(&self, resource: SpanResource) -> SpanRecord {
        SpanRecord {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            name: self.name.to_owned(),
            service: self.service.to_owned(),
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            kind: self.kind,
            status_code: self.status_code,
            status_message: self.status_message.to_owned(),
            attributes: owned(self.attributes()),
            resource,
            events: self.events(),
        }
    }

    /// How searches rank spans: longest first, then earliest start, then span id (smaller
    /// ranks first).
    fn rank(&self) -> (Reverse<u64>, u64, [u8; 8]) {
        (Reverse(self.duration_ns()), self.start_ns, self.span_id)
    }
}

fn owned<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

impl<'a> Attributes<'a> {
    fn iter(self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let (indexed, owned) = match self {
            Attributes::Indexed { strings, pairs } => (Some((strings, pairs)), None),
            Attributes::Owned(pairs) => (None, Some(pairs)),
            Attributes::Shared(pairs) => (None, Some(&pairs[..])),
        };
        let indexed = indexed
            .into_iter()
            .flat_map(|(strings, pairs)| pairs.iter().map(move |&(k, v)| (strings[k], strings[v])));
        let owned = owned
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        indexed.chain(owned)
    }
}

impl SpanRecord {
    /// The record as a view.
    pub fn view(&self) -> SpanView<'_> {
        SpanView {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            name: &self.name,
            service: &self.service,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            kind: self.kind,
            status_code: self.status_code,
            status_message: &self.status_message,
            attributes: Attributes::Owned(&self.attributes),
            resource: Attributes::Shared(&self.resource),
            resource_index: 0,
            events: Events::Owned(&self.events),
        }
    }
}

/// The `limit` highest ranked of the spans offered (longest first, then earliest start,
/// then span id, as [`super::search`] orders them), copied out of their views as they come;
/// a span id offered again is kept once, as first offered.
pub struct Longest {
    limit: usize,
    /// The worst kept on top.
    kept: BinaryHeap<Ranked>,
}

struct Ranked(SpanRecord);

impl Ranked {
    fn rank(&self) -> (Reverse<u64>, u64, [u8; 8]) {
        self.0.view().rank()
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl Longest {
    /// Keeps at most `limit` spans.
    pub fn new(limit: usize) -> Self {
        Longest {
            limit,
            kept: BinaryHeap::new(),
        }
    }

    /// Keeps `span` if it ranks among the `limit` highest so far.
    pub fn offer(&mut self, span: &SpanView<'_>) {
        if self.limit == 0 {
            return;
        }
        let full = self.kept.len() >= self.limit;
        if full
            && self
                .kept
                .peek()
                .is_some_and(|worst| span.rank() >= worst.rank())
        {
            return;
        }
        if self.kept.iter().any(|k| k.0.span_id == span.span_id) {
            return;
        }
        if full {
            self.kept.pop();
        }
        self.kept.push(Ranked(span.to_record()));
    }

    /// The spans kept, highest ranked first.
    pub fn into_sorted(self) -> Vec<SpanRecord> {
        self.kept
            .into_sorted_vec()
            .into_iter()
            .map(|r| r.0)
            .collect()
    }
}
