//! The per-thread "current span" slot: an OpenTelemetry Thread-Local Context Record (OTEP 4947,
//! `oteps/profiles/4947-thread-ctx.md` in opentelemetry-specification) that the layer publishes on
//! span enter and exit and the sampler's signal handler copies at sample time.
//!
//! Each thread owns a pointer to the published record (the OTEP's TLS pointer: on Linux the
//! exported ELF thread-local `otel_thread_ctx_v1` of `otel_thread_ctx.c`, where out-of-process
//! readers find it; see [`crate::process_ctx`]) and the records it may point at: a small cache of built records of the
//! spans it entered lately, and one record per stack level for spans not cached. A record is
//! built (and marked valid) only while no pointer or stack entry refers to it; entering or
//! exiting a span then only swaps the pointer. A signal landing at any instruction of a write
//! sees either the old record whole or the new one whole, never a torn id, and never a gap with
//! no record (the OTEP's "swap the pointer" protocol, not the "clear valid while writing" one).
//! Stores are plain, ordered by compiler fences: the reader runs on the same thread (a signal
//! handler), so CPU ordering does not matter, as the OTEP says.

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

/// What the layer knows of a span, computed once, at its first enter.
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

/// Entries of each thread's record cache (direct-mapped by a hash of the span id).
pub const CACHE_ENTRIES: usize = 64;

/// A stack entry: the `tracing` span id (`Id::into_u64`), to match exits to enters, and the
/// record published while it is the innermost span.
#[derive(Clone, Copy)]
struct StackEntry {
    span: u64,
    record: *const ThreadContextRecord,
}

const EMPTY_ENTRY: StackEntry = StackEntry {
    span: 0,
    record: ptr::null(),
};

/// A cache entry's key: the span id and the caller's tag for it (0 span: empty, ids are nonzero).
type CacheTag = (u64, u32);

/// One thread's slot. Records are never written while a reader may be pointed at them: the
/// published record is always the innermost stack entry's, and a record is rewritten only when
/// no stack entry refers to it (the OTEP's "swap the pointer" protocol).
struct ThreadSlot {
    /// Where the OTEP's TLS pointer is (the published record, or null when no span is entered):
    /// this thread's `otel_thread_ctx_v1` on Linux, else `fallback`; null until first written.
    tls: Cell<*mut *const ThreadContextRecord>,
    #[cfg(not(target_os = "linux"))]
    fallback: Cell<*const ThreadContextRecord>,
    /// Built records of recently entered spans, so a re-enter (a poll) only swaps the pointer.
    cache: [UnsafeCell<ThreadContextRecord>; CACHE_ENTRIES],
    cache_tags: [Cell<CacheTag>; CACHE_ENTRIES],
    stack: [Cell<StackEntry>; MAX_NESTING],
    /// Records of stack entries that have no cache entry of their own; entry `k` uses `owned[k]`.
    owned: [UnsafeCell<ThreadContextRecord>; MAX_NESTING],
    depth: Cell<usize>,
    /// Enters beyond [`MAX_NESTING`] not yet exited.
    overflow: Cell<usize>,
}

thread_local! {
    // Const-initialised and without Drop: no lazy registration and no init check on access, so
    // the signal handler may read it and the hot path is a plain TLS offset. About 17 KiB per
    // thread, zero-initialised (.tbss): pages are touched only as entries are used.
    static SLOT: ThreadSlot = const {
        ThreadSlot {
            tls: Cell::new(ptr::null_mut()),
            #[cfg(not(target_os = "linux"))]
            fallback: Cell::new(ptr::null()),
            cache: [const { UnsafeCell::new(ThreadContextRecord::EMPTY) }; CACHE_ENTRIES],
            cache_tags: [const { Cell::new((0, 0)) }; CACHE_ENTRIES],
            stack: [const { Cell::new(EMPTY_ENTRY) }; MAX_NESTING],
            owned: [const { UnsafeCell::new(ThreadContextRecord::EMPTY) }; MAX_NESTING],
            depth: Cell::new(0),
            overflow: Cell::new(0),
        }
    };
}

/// The cache entry of `span`: a multiplicative hash, as registry ids of spans made on different
/// threads share their low (slab index) bits.
#[inline(always)]
fn cache_index(span: u64) -> usize {
    (span.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - CACHE_ENTRIES.trailing_zeros())) as usize
}

/// Fills `r` with `ids`. The caller guarantees no reader is pointed at `r`.
///
/// # Safety
/// `r` must be valid for writes and not published.
unsafe fn build(r: *mut ThreadContextRecord, ids: &SpanContextIds) {
    let name = truncate_utf8(ids.name, MAX_SPAN_NAME_BYTES);
    // SAFETY: per the contract; only this thread writes its records.
    let r = unsafe { &mut *r };
    r.valid = 0;
    r.trace_id = ids.trace_id;
    r.span_id = ids.span_id;
    r.trace_flags = ids.trace_flags;
    r.attrs_data[0] = SPAN_NAME_KEY;
    r.attrs_data[1] = name.len() as u8;
    r.attrs_data[2..2 + name.len()].copy_from_slice(name.as_bytes());
    r.attrs_data_size = (2 + name.len()) as u16;
    compiler_fence(Ordering::SeqCst);
    // SAFETY: a field of the record borrowed above.
    unsafe { ptr::write_volatile(&mut r.valid, 1) };
}

#[cfg(target_os = "linux")]
extern "C" {
    /// This thread's `otel_thread_ctx_v1` (`src/otel_thread_ctx.c`).
    fn spanprof_otel_thread_ctx_v1_address() -> *mut *const ThreadContextRecord;
}

impl ThreadSlot {
    /// The TLS pointer's address, asked for once per thread (outside signal handlers).
    #[inline(always)]
    fn tls(&self) -> *mut *const ThreadContextRecord {
        let tls = self.tls.get();
        if tls.is_null() {
            self.tls_init()
        } else {
            tls
        }
    }

    #[cold]
    #[inline(never)]
    fn tls_init(&self) -> *mut *const ThreadContextRecord {
        // SAFETY: returns the address of this thread's C thread-local; no preconditions.
        #[cfg(target_os = "linux")]
        let tls = unsafe { spanprof_otel_thread_ctx_v1_address() };
        #[cfg(not(target_os = "linux"))]
        let tls = self.fallback.as_ptr();
        self.tls.set(tls);
        tls
    }

    /// Points the TLS pointer at `record` (or null): the one store a reader can observe.
    #[inline(always)]
    fn publish(&self, record: *const ThreadContextRecord) {
        let tls = self.tls();
        compiler_fence(Ordering::SeqCst);
        // SAFETY: a plain store to this thread's own pointer; volatile so it is never elided.
        unsafe { ptr::write_volatile(tls, record) };
        compiler_fence(Ordering::SeqCst);
    }

    #[inline(always)]
    fn push(&self, depth: usize, span: u64, record: *const ThreadContextRecord) {
        self.stack[depth].set(StackEntry { span, record });
        self.depth.set(depth + 1);
        self.publish(record);
    }

    #[inline(always)]
    fn enter_cached(&self, span: u64, tag: u32) -> bool {
        let depth = self.depth.get();
        let i = cache_index(span);
        if depth >= MAX_NESTING || self.cache_tags[i].get() != (span, tag) {
            return false;
        }
        self.push(depth, span, self.cache[i].get());
        true
    }

    /// Whether a stack entry refers to `record` (then it may be published and must not change).
    fn pinned(&self, record: *const ThreadContextRecord) -> bool {
        self.stack[..self.depth.get()]
            .iter()
            .any(|e| ptr::eq(e.get().record, record))
    }

    fn enter(&self, span: u64, ids: &SpanContextIds, tag: Option<u32>) {
        let depth = self.depth.get();
        if depth == MAX_NESTING {
            self.overflow.set(self.overflow.get() + 1);
            return;
        }
        let record = match tag {
            Some(tag) if !self.pinned(self.cache[cache_index(span)].get()) => {
                let i = cache_index(span);
                // Untagged first: the entry is valid again only once rebuilt.
                self.cache_tags[i].set((0, 0));
                // SAFETY: no stack entry refers to it, so it is not published.
                unsafe { build(self.cache[i].get(), ids) };
                self.cache_tags[i].set((span, tag));
                self.cache[i].get()
            }
            _ => {
                // SAFETY: `owned[depth]` belongs to the stack entry being pushed; entries below
                // use lower indexes or cache entries.
                unsafe { build(self.owned[depth].get(), ids) };
                self.owned[depth].get()
            }
        };
        self.push(depth, span, record);
    }

    #[inline(always)]
    fn exit(&self, span: u64) {
        if self.overflow.get() > 0 {
            self.overflow.set(self.overflow.get() - 1);
            return;
        }
        let depth = self.depth.get();
        if depth > 0 && self.stack[depth - 1].get().span == span {
            let depth = depth - 1;
            self.depth.set(depth);
            let below = if depth == 0 {
                ptr::null()
            } else {
                self.stack[depth - 1].get().record
            };
            self.publish(below);
        } else {
            self.exit_out_of_order(span, depth);
        }
    }

    /// Removes a span exited while not innermost; the published record does not change.
    #[cold]
    fn exit_out_of_order(&self, span: u64, depth: usize) {
        let Some(at) = self.stack[..depth]
            .iter()
            .rposition(|e| e.get().span == span)
        else {
            return;
        };
        for k in at..depth - 1 {
            let mut moved = self.stack[k + 1].get();
            if ptr::eq(moved.record, self.owned[k + 1].get()) {
                // Entries keep `owned[own index]`: copy the record down. `owned[k]` is free (its
                // entry was removed or moved down already), so no reader is pointed at it.
                // SAFETY: both are this thread's records; the source is not being written.
                unsafe { *self.owned[k].get() = *self.owned[k + 1].get() };
                moved.record = self.owned[k].get();
            }
            self.stack[k].set(moved);
        }
        self.depth.set(depth - 1);
        // The top entry may have moved to a new (identical) record.
        self.publish(self.stack[depth - 2].get().record);
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
/// it as the thread's current span. No allocation, no lock; the record is built at every call
/// (see [`enter_cached`] for the path that reuses it).
pub fn enter(span: u64, ids: &SpanContextIds) {
    let _ = SLOT.try_with(|s| s.enter(span, ids, None));
}

/// Enters `span` if this thread's cache holds its record under `tag` (a value the caller changes
/// when the id may name another span, e.g. after the span closed): then only the pointer is
/// swapped. Returns false, having done nothing, on a miss; then call [`enter_caching`].
#[inline]
pub fn enter_cached(span: u64, tag: u32) -> bool {
    SLOT.try_with(|s| s.enter_cached(span, tag)).unwrap_or(true)
}

/// Enters `span` with `ids` like [`enter`], and keeps its record in this thread's cache under
/// `tag` for [`enter_cached`].
pub fn enter_caching(span: u64, tag: u32, ids: &SpanContextIds) {
    let _ = SLOT.try_with(|s| s.enter(span, ids, Some(tag)));
}

/// Records that the current thread exited `span`; publishes the span below it, or no record.
#[inline]
pub fn exit(span: u64) {
    let _ = SLOT.try_with(|s| s.exit(span));
}

/// A copy of the current thread's published record, or `None` when no span is entered.
///
/// Async-signal-safe: two volatile reads of this thread's own memory. Called by the sampler's
/// signal handler, and by tests.
pub fn current() -> Option<ThreadContextRecord> {
    SLOT.try_with(|s| {
        let tls = s.tls.get();
        if tls.is_null() {
            return None; // never written on this thread
        }
        // SAFETY: `tls` is this thread's TLS pointer; it is null or points at one of this
        // thread's records, which live as long as the thread; the writer never modifies the
        // published one.
        let published = unsafe { ptr::read_volatile(tls) };
        if published.is_null() {
            return None;
        }
        let record = unsafe { ptr::read_volatile(published) };
        (record.valid == 1).then_some(record)
    })
    .ok()
    .flatten()
}

/// The address of the current thread's OTEP TLS pointer (`*const ThreadContextRecord`): on Linux
/// its `otel_thread_ctx_v1`, which out-of-process readers find by that name in the dynamic
/// symbol table (when the executable exports it; see the crate's README).
pub fn tls_pointer_address() -> usize {
    SLOT.with(|s| s.tls() as usize)
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
    fn a_cached_record_is_reused_only_under_its_tag() {
        assert!(!enter_cached(10, 0));
        enter_caching(10, 0, &ids(10, "cached"));
        exit(10);
        assert!(enter_cached(10, 0));
        assert_eq!(current().unwrap().span_name(), Some("cached"));
        exit(10);
        assert_eq!(current(), None);
        // Another tag: the id may name another span now.
        assert!(!enter_cached(10, 1));
        assert_eq!(current(), None);
    }

    /// Two spans on one cache entry, nested: the inner one must not rewrite the record the outer
    /// one still publishes after the inner exits.
    #[test]
    fn a_colliding_span_does_not_overwrite_a_record_in_use() {
        let outer = 1u64;
        let inner = (2..)
            .find(|s| cache_index(*s) == cache_index(outer))
            .unwrap();
        enter_caching(outer, 0, &ids(1, "outer"));
        enter_caching(inner, 0, &ids(2, "inner"));
        assert_eq!(current().unwrap().span_name(), Some("inner"));
        exit(inner);
        assert_eq!(current().unwrap().span_name(), Some("outer"));
        assert!(!enter_cached(inner, 0));
        exit(outer);
        assert_eq!(current(), None);
    }

    #[test]
    fn out_of_order_exits_keep_every_record_of_the_stack() {
        enter(1, &ids(1, "a"));
        enter(2, &ids(2, "b"));
        enter(3, &ids(3, "c"));
        exit(1);
        assert_eq!(current().unwrap().span_name(), Some("c"));
        // A fourth enter reuses the freed level's record; "b" and "c" keep theirs.
        enter(4, &ids(4, "d"));
        exit(4);
        assert_eq!(current().unwrap().span_name(), Some("c"));
        exit(3);
        assert_eq!(current().unwrap().span_name(), Some("b"));
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
