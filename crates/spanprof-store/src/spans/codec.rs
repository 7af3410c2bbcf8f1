//! A compact binary form of a batch of [`SpanRecord`]s, for the store's log records.
//!
//! Layout (integers are LEB128 varints; "signed" ones zigzag-encoded first):
//!
//! ```text
//! block     = version:u8 (2) · strings · traces · resources · spans
//! strings   = count · (byte_len · UTF-8 bytes)*      every distinct text, first use first
//! traces    = count · [u8; 16]*                       every distinct trace id
//! resources = count · attributes*                     every distinct resource
//! spans     = count · span*
//! span      = trace_index · span_id:[u8; 8] · has_parent:u8 (0|1) · [parent:[u8; 8]]
//!             · signed start delta (ns, from the previous span's start; wrapping)
//!             · end − start (ns, wrapping) · signed kind · signed status_code
//!             · name · service · status_message (string indices)
//!             · resource index · attributes · event count · event*
//! attributes = count · (key index · value index)*
//! event     = signed time delta (ns, from the span's start; wrapping) · name index
//!             · attributes
//! ```
//!
//! Names, services and attribute keys repeat across a batch, the spans of a batch come from
//! a few resources, and spans of one trace arrive together, so the tables and the start-time
//! deltas carry most of the saving. Version 1 blocks (written before resources were kept)
//! have no `resources`, resource index or events; their spans read with neither.

use std::ops::ControlFlow;

use hashbrown::HashMap;

use super::record::{SpanRecord, SpanResource};
use super::view::{Attributes, Events, IndexedEvent, SpanView};

/// The layout version [`encode_spans`] writes; [`decode_spans`] reads it and version 1.
pub const SPAN_FORMAT_VERSION: u8 = 2;

/// Why bytes could not be decoded as spans. Offsets are in bytes from the block's start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpanDecodeError {
    /// The block was written in a layout this build does not know.
    #[error(
        "span block has layout version {0}; this build reads versions 1 to {SPAN_FORMAT_VERSION}"
    )]
    UnknownVersion(u8),
    /// The bytes end in the middle of the block.
    #[error("span block is truncated: {what} missing at byte {offset}")]
    Truncated {
        /// Where the input ended, in bytes.
        offset: usize,
        /// What was being read.
        what: &'static str,
    },
    /// A value is malformed or out of range.
    #[error("span block is damaged at byte {offset}: {what}")]
    Damaged {
        /// Where the bad value starts, in bytes.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// Appends the encoding of `spans` to `out`; [`decode_spans`] of exactly those bytes gives
/// `spans` back.
pub fn encode_spans<'a>(
    spans: impl IntoIterator<Item = &'a SpanRecord, IntoIter: ExactSizeIterator>,
    out: &mut Vec<u8>,
) {
    let spans = spans.into_iter();
    let count = spans.len();
    let mut strings = Table::default();
    let mut traces = Table::default();
    let mut resources = Table::default();
    // The spans of one resource share its list: most spans ask for the one before's.
    let mut last_resource: Option<(&SpanResource, u64)> = None;
    let mut body = Vec::with_capacity(count * 48);
    let mut previous_start = 0u64;
    for s in spans {
        put_varint(&mut body, traces.index(&s.trace_id[..]));
        body.extend_from_slice(&s.span_id);
        match s.parent_span_id {
            None => body.push(0),
            Some(parent) => {
                body.push(1);
                body.extend_from_slice(&parent);
            }
        }
        put_signed(&mut body, s.start_ns.wrapping_sub(previous_start) as i64);
        previous_start = s.start_ns;
        put_varint(&mut body, s.end_ns.wrapping_sub(s.start_ns));
        put_signed(&mut body, s.kind.into());
        put_signed(&mut body, s.status_code.into());
        for text in [&s.name, &s.service, &s.status_message] {
            put_varint(&mut body, strings.index(text.as_bytes()));
        }
        let resource = match last_resource {
            Some((r, i)) if std::sync::Arc::ptr_eq(r, &s.resource) => i,
            _ => resources.index(&s.resource[..]),
        };
        last_resource = Some((&s.resource, resource));
        put_varint(&mut body, resource);
        put_attributes(&mut body, &s.attributes, &mut strings);
        put_varint(&mut body, s.events.len() as u64);
        for e in &s.events {
            put_signed(&mut body, e.time_ns.wrapping_sub(s.start_ns) as i64);
            put_varint(&mut body, strings.index(e.name.as_bytes()));
            put_attributes(&mut body, &e.attributes, &mut strings);
        }
    }
    // The resources' texts are in the string table too, which is written first: index
    // them before it is.
    let mut resource_bytes = Vec::new();
    put_varint(&mut resource_bytes, resources.items.len() as u64);
    for attributes in &resources.items {
        put_attributes(&mut resource_bytes, attributes, &mut strings);
    }
    out.push(SPAN_FORMAT_VERSION);
    put_varint(out, strings.items.len() as u64);
    for text in &strings.items {
        put_varint(out, text.len() as u64);
        out.extend_from_slice(text);
    }
    put_varint(out, traces.items.len() as u64);
    for id in &traces.items {
        out.extend_from_slice(id);
    }
    out.extend_from_slice(&resource_bytes);
    put_varint(out, count as u64);
    out.extend_from_slice(&body);
}

fn put_attributes<'a>(
    out: &mut Vec<u8>,
    attributes: &'a [(String, String)],
    strings: &mut Table<'a, [u8]>,
) {
    put_varint(out, attributes.len() as u64);
    for (key, value) in attributes {
        put_varint(out, strings.index(key.as_bytes()));
        put_varint(out, strings.index(value.as_bytes()));
    }
}

/// Decodes a block written by [`encode_spans`]. Damaged or truncated input, including bytes
/// left over after the block, is an error; it never panics and allocates no more than the
/// input's size suggests.
pub fn decode_spans(bytes: &[u8]) -> Result<Vec<SpanRecord>, SpanDecodeError> {
    let mut spans = Vec::new();
    // The spans of one resource share its list, as they did before encoding.
    let mut resources: Vec<Option<SpanResource>> = Vec::new();
    let _always_to_the_end = scan_spans(bytes, |view| {
        let i = view.resource_index;
        if resources.len() <= i {
            resources.resize(i + 1, None);
        }
        let resource = resources[i].get_or_insert_with(|| view.resource_record());
        spans.push(view.record_with(resource.clone()));
        ControlFlow::Continue(())
    })?;
    Ok(spans)
}

/// Hands each span of a block written by [`encode_spans`] to `f` as a view borrowing the
/// block's texts, until `f` breaks (what this returns then; the rest is not read). Damaged
/// or truncated input is an error, as for [`decode_spans`]; spans before the damage have
/// been handed out. Allocates nothing per span.
// Long: one pass over a block's columns without allocating; the column cursors are its locals.
#[allow(clippy::too_many_lines)]
pub fn scan_spans(
    bytes: &[u8],
    mut f: impl FnMut(&SpanView<'_>) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, SpanDecodeError> {
    let mut r = Cursor { bytes, pos: 0 };
    let version = r.byte("version")?;
    if !(1..=SPAN_FORMAT_VERSION).contains(&version) {
        return Err(SpanDecodeError::UnknownVersion(version));
    }
    let count = r.count("string count", 1)?;
    let mut strings = Vec::with_capacity(count);
    for _ in 0..count {
        // An absurd length runs past the end of the input: truncation, not an allocation.
        let len = usize::try_from(r.varint("string length")?).unwrap_or(usize::MAX);
        let at = r.pos;
        let text =
            std::str::from_utf8(r.take(len, "string")?).map_err(|_| SpanDecodeError::Damaged {
                offset: at,
                what: "string is not UTF-8",
            })?;
        strings.push(text);
    }
    let count = r.count("trace id count", 16)?;
    let mut traces = Vec::with_capacity(count);
    for _ in 0..count {
        traces.push(r.array::<16>("trace id")?);
    }
    // Each resource's attributes: a range of `resource_pairs`.
    let mut resource_pairs: Vec<(usize, usize)> = Vec::new();
    let mut resources: Vec<(usize, usize)> = Vec::new();
    if version >= 2 {
        let count = r.count("resource count", 1)?;
        resources.reserve(count);
        for _ in 0..count {
            let start = resource_pairs.len();
            r.attributes(strings.len(), &mut resource_pairs)?;
            resources.push((start, resource_pairs.len()));
        }
    }
    // A span takes at least 16 bytes: 8 of span id, one each for everything else.
    let count = r.count("span count", 16)?;
    let mut previous_start = 0u64;
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut events: Vec<IndexedEvent> = Vec::new();
    let mut event_pairs: Vec<(usize, usize)> = Vec::new();
    for _ in 0..count {
        let trace_id = *r.index(&traces, "trace index")?;
        let span_id = r.array::<8>("span id")?;
        let at = r.pos;
        let parent_span_id = match r.byte("parent flag")? {
            0 => None,
            1 => Some(r.array::<8>("parent span id")?),
            _ => {
                return Err(SpanDecodeError::Damaged {
                    offset: at,
                    what: "parent flag is neither 0 nor 1",
                })
            }
        };
        let start_ns = previous_start.wrapping_add(r.signed("start time")? as u64);
        previous_start = start_ns;
        let end_ns = start_ns.wrapping_add(r.varint("duration")?);
        let kind = r.signed_i32("kind")?;
        let status_code = r.signed_i32("status code")?;
        let name = *r.index(&strings, "name")?;
        let service = *r.index(&strings, "service")?;
        let status_message = *r.index(&strings, "status message")?;
        let (resource, resource_index) = if version >= 2 {
            let i = r.position(resources.len(), "resource index")?;
            let (start, end) = resources[i];
            (&resource_pairs[start..end], i)
        } else {
            (&[][..], 0)
        };
        pairs.clear();
        r.attributes(strings.len(), &mut pairs)?;
        events.clear();
        event_pairs.clear();
        if version >= 2 {
            // An event takes at least 3 bytes: its time, name and attribute count.
            for _ in 0..r.count("event count", 3)? {
                let time_ns = start_ns.wrapping_add(r.signed("event time")? as u64);
                let name = r.position(strings.len(), "event name")?;
                let start = event_pairs.len();
                r.attributes(strings.len(), &mut event_pairs)?;
                events.push(IndexedEvent {
                    time_ns,
                    name,
                    attributes: (start, event_pairs.len()),
                });
            }
        }
        let view = SpanView {
            trace_id,
            span_id,
            parent_span_id,
            name,
            service,
            start_ns,
            end_ns,
            kind,
            status_code,
            status_message,
            attributes: Attributes::Indexed {
                strings: &strings,
                pairs: &pairs,
            },
            resource: Attributes::Indexed {
                strings: &strings,
                pairs: resource,
            },
            resource_index,
            events: Events::Indexed {
                strings: &strings,
                events: &events,
                pairs: &event_pairs,
            },
        };
        if f(&view).is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    if r.pos != bytes.len() {
        return Err(SpanDecodeError::Damaged {
            offset: r.pos,
            what: "bytes left after the last span",
        });
    }
    Ok(ControlFlow::Continue(()))
}

/// Distinct items (byte strings, trace ids, resources) in order of first use, and each one's
/// index.
struct Table<'a, T: ?Sized> {
    items: Vec<&'a T>,
    index: HashMap<&'a T, u64>,
}

impl<T: ?Sized> Default for Table<'_, T> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<'a, T: ?Sized + Eq + std::hash::Hash> Table<'a, T> {
    fn index(&mut self, item: &'a T) -> u64 {
        let next = self.items.len() as u64;
        *self.index.entry(item).or_insert_with(|| {
            self.items.push(item);
            next
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_signed(out: &mut Vec<u8>, v: i64) {
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn truncated(&self, what: &'static str) -> SpanDecodeError {
        SpanDecodeError::Truncated {
            offset: self.bytes.len(),
            what,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SpanDecodeError> {
        let bytes: &'a [u8] = self.bytes;
        let end = self.pos.checked_add(n).filter(|&end| end <= bytes.len());
        let taken = end.and_then(|end| bytes.get(self.pos..end));
        let taken = taken.ok_or_else(|| self.truncated(what))?;
        self.pos += n;
        Ok(taken)
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, SpanDecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], SpanDecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, SpanDecodeError> {
        let start = self.pos;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte(what)?;
            // The tenth byte holds only the top bit of a u64.
            if shift == 63 && b > 1 {
                break;
            }
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(SpanDecodeError::Damaged {
            offset: start,
            what: "varint longer than 64 bits",
        })
    }

    fn signed(&mut self, what: &'static str) -> Result<i64, SpanDecodeError> {
        let v = self.varint(what)?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn signed_i32(&mut self, what: &'static str) -> Result<i32, SpanDecodeError> {
        let at = self.pos;
        i32::try_from(self.signed(what)?).map_err(|_| SpanDecodeError::Damaged {
            offset: at,
            what: "value out of range for a 32-bit integer",
        })
    }

    /// A count of items that each take at least `min_bytes`; more than the rest of the input
    /// could hold is damage, which keeps a corrupt count from reserving huge buffers.
    fn count(&mut self, what: &'static str, min_bytes: usize) -> Result<usize, SpanDecodeError> {
        let at = self.pos;
        let n = self.varint(what)?;
        let room = (self.bytes.len() - self.pos) / min_bytes;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= room)
            .ok_or(SpanDecodeError::Damaged {
                offset: at,
                what: "count larger than the rest of the input can hold",
            })
    }

    fn index<'t, T>(
        &mut self,
        table: &'t [T],
        what: &'static str,
    ) -> Result<&'t T, SpanDecodeError> {
        let i = self.position(table.len(), what)?;
        Ok(&table[i])
    }

    /// A list of attributes (a count, then key and value indices into a string table of
    /// `strings` texts), appended to `pairs`.
    fn attributes(
        &mut self,
        strings: usize,
        pairs: &mut Vec<(usize, usize)>,
    ) -> Result<(), SpanDecodeError> {
        let n = self.count("attribute count", 2)?;
        pairs.reserve(n);
        for _ in 0..n {
            let key = self.position(strings, "attribute key")?;
            let value = self.position(strings, "attribute value")?;
            pairs.push((key, value));
        }
        Ok(())
    }

    /// An index into a table of `len` items.
    fn position(&mut self, len: usize, what: &'static str) -> Result<usize, SpanDecodeError> {
        let at = self.pos;
        let i = self.varint(what)?;
        usize::try_from(i)
            .ok()
            .filter(|&i| i < len)
            .ok_or(SpanDecodeError::Damaged {
                offset: at,
                what: "index outside its table",
            })
    }
}
