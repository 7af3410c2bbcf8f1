//! The per-thread sample ring: one producer (the signal handler on the sampled thread), one
//! consumer (the agent's background thread). Preallocated; a full ring drops and counts.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::slot::ThreadContextRecord;

/// Frames kept per sample (leaf first); deeper stacks are cut at the root side.
pub const MAX_FRAMES: usize = 128;

/// Samples a ring holds between drains (a power of two). At 100 Hz and a 100 ms drain period a
/// thread fills about 10.
pub const RING_CAPACITY: usize = 64;

/// One sample as the signal handler wrote it.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct RawSample {
    /// Wall-clock time of the sample, ns since the Unix epoch.
    pub time_unix_ns: u64,
    /// Kernel thread id of the sampled thread.
    pub tid: i32,
    /// Frames in `pcs`.
    pub depth: u32,
    /// Sampling periods this sample stands for: 1 plus the timer's overruns (CPU timers fire at
    /// most once per scheduler tick, so a period shorter than a tick is made up here).
    pub weight: u32,
    /// The thread's published span record (`valid == 0`: no span entered).
    pub context: ThreadContextRecord,
    /// Program counters, leaf first; entries after the first are return addresses.
    pub pcs: [u64; MAX_FRAMES],
}

impl RawSample {
    /// The sampled frames, leaf first.
    pub fn frames(&self) -> &[u64] {
        &self.pcs[..(self.depth as usize).min(MAX_FRAMES)]
    }

    /// The span context the sample was taken in, if any.
    pub fn span(&self) -> Option<&ThreadContextRecord> {
        (self.context.valid == 1).then_some(&self.context)
    }
}

/// A single-producer single-consumer ring of [`RawSample`]s.
pub struct Ring {
    /// The thread this ring is for (0: unassigned).
    pub(crate) tid: AtomicI32,
    head: AtomicU64,
    tail: AtomicU64,
    dropped: AtomicU64,
    slots: Box<[UnsafeCell<MaybeUninit<RawSample>>]>,
}

// SAFETY: a slot is written only by the producer before `head` is published (Release) and read
// only by the consumer after it saw `head` (Acquire) and before it moves `tail` past it.
unsafe impl Sync for Ring {}

impl Ring {
    pub(crate) fn new() -> Ring {
        Ring {
            tid: AtomicI32::new(0),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            slots: (0..RING_CAPACITY)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
        }
    }

    /// Producer: lets `fill` write the next free slot, then publishes it; counts a drop when the
    /// ring is full. Async-signal-safe (atomics and a write into preallocated memory).
    pub(crate) fn push_with(&self, fill: impl FnOnce(&mut RawSample)) {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if head - tail >= RING_CAPACITY as u64 {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let slot = self.slots[head as usize % RING_CAPACITY].get();
        // SAFETY: the consumer does not read this slot until `head` moves past it, and a
        // zeroed RawSample is a valid value (integers and byte arrays).
        unsafe {
            let sample = (*slot).as_mut_ptr();
            sample.write_bytes(0, 1);
            fill(&mut *sample);
        }
        self.head.store(head + 1, Ordering::Release);
    }

    /// Consumer: hands every published sample to `f`, oldest first; returns how many.
    pub(crate) fn drain(&self, f: &mut impl FnMut(&RawSample)) -> usize {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        for i in tail..head {
            // SAFETY: published by the producer (see the Sync impl).
            let sample =
                unsafe { (*self.slots[i as usize % RING_CAPACITY].get()).assume_init_ref() };
            f(sample);
        }
        self.tail.store(head, Ordering::Release);
        (head - tail) as usize
    }

    /// Samples dropped because the ring was full.
    pub(crate) fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }
}
