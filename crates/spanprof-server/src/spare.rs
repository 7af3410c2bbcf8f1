//! Memory reused from one request to the next on a thread: pprof profiles done with are
//! kept, and the next uploads are decoded into them ([`pprof::decode_into`]). A pprof
//! profile comes with three small vectors per sample; freed and allocated again for every
//! upload, each was a cache miss (perf: the allocator's free-list pop was 9.4 % of the
//! server's CPU, a quarter of it in the pprof decoder). Reused, in the order they were
//! filled before, they are still in the cache: 6 % less CPU per profile in the load bench.
//!
//! Measured and not done, for OTLP requests (3 alternated 15 s pairs each): decoding into
//! the parts of stored profiles (samples, stacks, links, strings). From a bag of up to 8 Ki
//! parts of any stored profile, taken last first, it cost more CPU per profile than freeing
//! them (0.82–0.90 ms against 0.70–0.79 ms); from the last stored profile alone, in its
//! order, the same as freeing them (0.81–0.89 ms against 0.78–0.92 ms). An OTLP request's
//! vectors are still freshly allocated.

use std::cell::RefCell;

use spanprof_format::pprof;

/// pprof profiles kept per thread.
const PPROF_PROFILES: usize = 2;
/// Samples of the largest pprof profile kept: a huge upload's memory is given back.
const PPROF_MAX_SAMPLES: usize = 1 << 14;

thread_local! {
    /// pprof profiles converted already, to decode the next uploads into.
    static PPROF: RefCell<Vec<pprof::Profile>> = const { RefCell::new(Vec::new()) };
}

/// A pprof profile to decode into: one kept on this thread, or a new one.
pub fn pprof_profile() -> pprof::Profile {
    PPROF
        .with(|spare| spare.borrow_mut().pop())
        .unwrap_or_default()
}

/// Keeps `profile`, converted already, for the next upload decoded on this thread.
pub fn keep_pprof(profile: pprof::Profile) {
    if profile.sample.capacity() <= PPROF_MAX_SAMPLES {
        PPROF.with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < PPROF_PROFILES {
                spare.push(profile);
            }
        });
    }
}
