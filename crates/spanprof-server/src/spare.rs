//! Memory reused from one request to the next on a thread: pprof profiles done with are
//! kept, and the next uploads are decoded into them ([`pprof::decode_into`]), so a profile's
//! many small per-sample vectors are still in the cache (6 % less CPU per profile in the load
//! bench; OTLP requests measured no gain: commit c7582ea).

use std::cell::RefCell;

use spanprof_format::pprof;

/// pprof profiles kept per thread.
const PPROF_PROFILES: usize = 2;
/// Bytes of the largest pprof profile kept (its vectors' capacities): a huge upload's memory
/// is given back. (Counting samples only, a 61 KB upload of 30 million empty strings kept
/// 750 MB on a thread for good.)
const PPROF_MAX_BYTES: usize = 8 << 20;

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
    if held_bytes(&profile) <= PPROF_MAX_BYTES {
        PPROF.with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < PPROF_PROFILES {
                spare.push(profile);
            }
        });
    }
}

/// About the heap memory `p`'s vectors and strings hold (their capacities), stopping once
/// past [`PPROF_MAX_BYTES`].
fn held_bytes(p: &pprof::Profile) -> usize {
    use std::mem::size_of;
    fn bytes<T>(v: &Vec<T>) -> usize {
        v.capacity().saturating_mul(size_of::<T>())
    }
    let mut total = bytes(&p.sample)
        .saturating_add(bytes(&p.location))
        .saturating_add(bytes(&p.string_table))
        .saturating_add(bytes(&p.function))
        .saturating_add(bytes(&p.mapping))
        .saturating_add(bytes(&p.sample_type))
        .saturating_add(bytes(&p.comment));
    let parts = p
        .sample
        .iter()
        .map(|s| bytes(&s.location_id) + bytes(&s.value) + bytes(&s.label))
        .chain(p.location.iter().map(|l| bytes(&l.line)))
        .chain(p.string_table.iter().map(String::capacity));
    for n in parts {
        if total > PPROF_MAX_BYTES {
            break;
        }
        total = total.saturating_add(n);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_holding_much_memory_is_not_kept() {
        let real = pprof::decode(
            &std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../testdata/go/cpu-10s.pb.gz"),
            )
            .unwrap(),
            64 << 20,
        )
        .unwrap();
        assert!(
            held_bytes(&real) < PPROF_MAX_BYTES / 8,
            "{}",
            held_bytes(&real)
        );
        let empty_strings = pprof::Profile {
            string_table: vec![String::new(); 1 << 20],
            ..Default::default()
        };
        let long_string = pprof::Profile {
            string_table: vec![String::new(), "x".repeat(PPROF_MAX_BYTES)],
            ..Default::default()
        };
        let deep_sample = pprof::Profile {
            sample: vec![pprof::Sample {
                location_id: vec![1; PPROF_MAX_BYTES / 8 + 1],
                ..Default::default()
            }],
            ..Default::default()
        };
        for p in [empty_strings, long_string, deep_sample] {
            assert!(held_bytes(&p) > PPROF_MAX_BYTES);
        }
        PPROF.with(|spare| spare.borrow_mut().clear());
        keep_pprof(pprof::Profile {
            string_table: vec![String::new(); 1 << 20],
            ..Default::default()
        });
        keep_pprof(real);
        assert_eq!(PPROF.with(|spare| spare.borrow().len()), 1);
    }
}
