//! A cache-line prefetch hint, shared by the hash tables of the index and the Bloom filters.

/// Asks the CPU to bring the cache line of `x` in, without waiting for it: tables indexed
/// by hash miss the cache on nearly every access, and a loop that prefetches a few entries
/// ahead overlaps those misses.
// The prefetch intrinsic is unsafe to call, though it touches no memory.
#[allow(unsafe_code)]
pub(super) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint with no effect on memory; the pointer is to a live
        // value, and SSE is in every x86-64 target.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}
