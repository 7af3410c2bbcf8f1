//! The per-thread "current span" slot: an OpenTelemetry Thread-Local Context Record (OTEP 4947,
//! `oteps/profiles/4947-thread-ctx.md` in opentelemetry-specification) that the layer publishes on
//! span enter and exit and the sampler's signal handler copies at sample time.
//!
//! Each thread owns two records and a pointer to the published one (the OTEP's TLS pointer,
//! `otel_thread_ctx_v1`). A write fills the record that is *not* published, marks it valid, then
//! swaps the pointer: a signal landing at any instruction of a write sees either the old record
//! whole or the new one whole, never a torn id, and never a gap with no record (the OTEP's
//! "swap the pointer" protocol, not the "clear valid while writing" one). Stores are plain, ordered
//! by compiler fences: the reader runs on the same thread (a signal handler), so CPU ordering does
//! not matter, as the OTEP says.

use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{compiler_fence, Ordering};

/// Bytes of `attrs-data` in a record: the record is 128 bytes, under the OTEP's 640-byte advice.
pub const ATTRS_DATA_BYTES: usize = 100;

/// Span names longer than this many bytes are cut (at a UTF-8 boundary) in the record.
pub const MAX_SPAN_NAME_BYTES: usize = ATTRS_DATA_BYTES - 2;

/// Key index of the span name in `attrs-data`; the OTEP's `threadlocal.attribute_key_map` for
/// this writer is `["span_name"]`.
pub const SPAN_NAME_KEY: u8 = 0;

/// Span nesting tracked per thread; deeper spans keep the 64th span published until they exit.
pub const MAX_NESTING: usize = 64;

/// One OTEP 4947 Thread-Local Context Record: byte-packed, native endianness, 2-byte aligned.
///
/// Offsets: `trace_id` 0, `span_id` 16, `valid` 24, `trace_flags` 25, `attrs_data_size` 26,
/// `attrs_data` 28 (entries of key `u8`, length `u8`, value bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct ThreadContextRecord {
    /// W3C trace id (big-endian bytes as on the wire); zero when no span is active.
    pub trace_id: [u8; 16],
    /// W3C span id.
    pub span_id: [u8; 8],
    /// 1 when the record is complete; readers ignore any other value.
    pub valid: u8,
    /// W3C trace flags of the span (bit 0: sampled).
    pub trace_flags: u8,
    /// Bytes of `attrs_data` in use.
    pub attrs_data_size: u16,
    /// Attributes: `[key, len, value...]*`; here at most the span name under [`SPAN_NAME_KEY`].
    pub attrs_data: [u8; ATTRS_DATA_BYTES],
}

const _: () = assert!(std::mem::size_of::<ThreadContextRecord>() == 128);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, valid) == 24);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, attrs_data_size) == 26);
const _: () = assert!(std::mem::offset_of!(ThreadContextRecord, attrs_data) == 28);

impl ThreadContextRecord {
    /// An all-zero, invalid record.
    pub const EMPTY: ThreadContextRecord = ThreadContextRecord {
        trace_id: [0; 16],
        span_id: [0; 8],
        valid: 0,
        trace_flags: 0,
        attrs_data_size: 0,
        attrs_data: [0; ATTRS_DATA_BYTES],
    };

    /// The span name from `attrs_data` (the last entry with [`SPAN_NAME_KEY`], per the OTEP),
    /// if it is there and UTF-8.
    pub fn span_name(&self) -> Option<&str> {
        let data = &self.attrs_data[..usize::from(self.attrs_data_size).min(ATTRS_DATA_BYTES)];
        let mut found = None;
        let mut at = 0;
        while at + 2 <= data.len() {
            let (key, len) = (data[at], usize::from(data[at + 1]));
            let Some(value) = data.get(at + 2..at + 2 + len) else {
                break;
            };
            if key == SPAN_NAME_KEY {
                found = std::str::from_utf8(value).ok();
            }
            at += 2 + len;
        }
        found
    }
}

/// What the layer knows of a span, computed once when the span is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanContextIds {
    /// W3C trace id bytes.
    pub trace_id: [u8; 16],
    /// W3C span id bytes.
    pub span_id: [u8; 8],
    /// W3C trace flags.
    pub trace_flags: u8,
    /// The span's name (`tracing` metadata names are static).
    pub name: &'static str,
}

#[derive(Clone, Copy)]
struct StackEntry {
    /// The `tracing` span id (`Id::into_u64`), to match exits to enters.
    span: u64,
    ids: SpanContextIds,
}

const EMPTY_ENTRY: StackEntry = StackEntry {
    span: 0,
    ids: SpanContextIds {
        trace_id: [0; 16],
        span_id: [0; 8],
        trace_flags: 0,
        name: "",
    },
};

struct ThreadSlot {
    records: [UnsafeCell<ThreadContextRecord>; 2],
    /// The OTEP's TLS pointer: the published record, or null when no span is entered.
    current: Cell<*const ThreadContextRecord>,
    stack: UnsafeCell<[StackEntry; MAX_NESTING]>,
    depth: Cell<usize>,
    /// Enters beyond [`MAX_NESTING`] not yet exited.
    overflow: Cell<usize>,
}

thread_local! {
    // Const-initialised and without Drop: no lazy registration, so the signal handler may read it.
    static SLOT: ThreadSlot = const {
        ThreadSlot {
            records: [
                UnsafeCell::new(ThreadContextRecord::EMPTY),
                UnsafeCell::new(ThreadContextRecord::EMPTY),
            ],
            current: Cell::new(ptr::null()),
            stack: UnsafeCell::new([EMPTY_ENTRY; MAX_NESTING]),
            depth: Cell::new(0),
            overflow: Cell::new(0),
        }
    };
}

impl ThreadSlot {
    /// Fills the unpublished record with `ids` and publishes it.
    fn publish(&self, ids: &SpanContextIds) {
        let current = self.current.get();
        let spare = if ptr::eq(current, self.records[0].get()) {
            self.records[1].get()
        } else {
            self.records[0].get()
        };
        let name = truncate_utf8(ids.name, MAX_SPAN_NAME_BYTES);
        // SAFETY: `spare` is this thread's record that no reader is pointed at; only this thread
        // writes it, and a signal handler interrupting us reads only the published one.
        unsafe {
            let r = &mut *spare;
            r.valid = 0;
            r.trace_id = ids.trace_id;
            r.span_id = ids.span_id;
            r.trace_flags = ids.trace_flags;
            r.attrs_data[0] = SPAN_NAME_KEY;
            r.attrs_data[1] = name.len() as u8;
            r.attrs_data[2..2 + name.len()].copy_from_slice(name.as_bytes());
            r.attrs_data_size = (2 + name.len()) as u16;
            compiler_fence(Ordering::SeqCst);
            ptr::write_volatile(&mut r.valid, 1);
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: a plain store of this thread's own pointer; volatile so it is never elided.
        unsafe { ptr::write_volatile(self.current.as_ptr(), spare.cast_const()) };
        compiler_fence(Ordering::SeqCst);
    }

    fn clear(&self) {
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as in `publish`.
        unsafe { ptr::write_volatile(self.current.as_ptr(), ptr::null()) };
        compiler_fence(Ordering::SeqCst);
    }

    fn enter(&self, span: u64, ids: &SpanContextIds) {
        let depth = self.depth.get();
        if depth == MAX_NESTING {
            self.overflow.set(self.overflow.get() + 1);
            return;
        }
        // SAFETY: the stack is only touched by this thread, outside signal handlers.
        unsafe { (*self.stack.get())[depth] = StackEntry { span, ids: *ids } };
        self.depth.set(depth + 1);
        self.publish(ids);
    }

    fn exit(&self, span: u64) {
        if self.overflow.get() > 0 {
            self.overflow.set(self.overflow.get() - 1);
            return;
        }
        let depth = self.depth.get();
        // SAFETY: as in `enter`.
        let stack = unsafe { &mut *self.stack.get() };
        // Exits are LIFO in practice; a span exited out of order is removed where it is.
        let Some(at) = stack[..depth].iter().rposition(|e| e.span == span) else {
            return;
        };
        stack.copy_within(at + 1..depth, at);
        let depth = depth - 1;
        self.depth.set(depth);
        if depth == 0 {
            self.clear();
        } else if at == depth {
            self.publish(&stack[depth - 1].ids);
        }
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Records that the current thread entered `span` (a `tracing` span id) with `ids`, and publishes
/// it as the thread's current span. No allocation, no lock.
pub fn enter(span: u64, ids: &SpanContextIds) {
    let _ = SLOT.try_with(|s| s.enter(span, ids));
}

/// Records that the current thread exited `span`; publishes the span below it, or no record.
pub fn exit(span: u64) {
    let _ = SLOT.try_with(|s| s.exit(span));
}

/// A copy of the current thread's published record, or `None` when no span is entered.
///
/// Async-signal-safe: two volatile reads of this thread's own memory. Called by the sampler's
/// signal handler, and by tests.
pub fn current() -> Option<ThreadContextRecord> {
    SLOT.try_with(|s| {
        // SAFETY: the pointer is null or points at one of this thread's two records, which live
        // as long as the thread; the writer never modifies the published one.
        let published = unsafe { ptr::read_volatile(s.current.as_ptr()) };
        if published.is_null() {
            return None;
        }
        let record = unsafe { ptr::read_volatile(published) };
        (record.valid == 1).then_some(record)
    })
    .ok()
    .flatten()
}

/// The address of the current thread's OTEP TLS pointer (`*const ThreadContextRecord`), for an
/// out-of-process reader that is told where to look.
pub fn tls_pointer_address() -> usize {
    SLOT.with(|s| s.current.as_ptr() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(b: u8, name: &'static str) -> SpanContextIds {
        SpanContextIds {
            trace_id: [b; 16],
            span_id: [b; 8],
            trace_flags: 1,
            name,
        }
    }

    #[test]
    fn nesting_publishes_the_innermost_span() {
        assert_eq!(current(), None);
        enter(1, &ids(1, "outer"));
        enter(2, &ids(2, "inner"));
        let r = current().unwrap();
        assert_eq!((r.span_id, r.span_name()), ([2; 8], Some("inner")));
        exit(2);
        let r = current().unwrap();
        assert_eq!((r.trace_id, r.span_name()), ([1; 16], Some("outer")));
        exit(1);
        assert_eq!(current(), None);
    }

    #[test]
    fn out_of_order_exit_keeps_the_innermost_published() {
        enter(1, &ids(1, "a"));
        enter(2, &ids(2, "b"));
        exit(1);
        assert_eq!(current().unwrap().span_id, [2; 8]);
        exit(2);
        assert_eq!(current(), None);
    }

    #[test]
    fn long_names_are_cut_at_a_char_boundary() {
        let name: &'static str = "é".repeat(80).leak();
        enter(1, &ids(1, name));
        let got = current().unwrap();
        let got = got.span_name().unwrap();
        assert!(got.len() <= MAX_SPAN_NAME_BYTES && got.chars().all(|c| c == 'é'));
        exit(1);
    }

    #[test]
    fn nesting_deeper_than_the_stack_stays_balanced() {
        for i in 0..(MAX_NESTING as u64 + 10) {
            enter(i + 1, &ids((i % 200) as u8 + 1, "deep"));
        }
        for i in (0..(MAX_NESTING as u64 + 10)).rev() {
            exit(i + 1);
        }
        assert_eq!(current(), None);
    }
}
