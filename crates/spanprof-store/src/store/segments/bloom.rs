//! A Bloom filter of a sealed segment's span and trace ids, so a look-up skips segments
//! without loading their index.

use super::prefetch::prefetch;

/// Bits an id sets in a [`Bloom`] filter.
const PROBES: usize = 4;
/// 64-bit words per Bloom block: an id's probes all fall in one 512-bit block, one cache line.
pub(super) const BLOCK_WORDS: usize = 8;

/// A blocked Bloom filter over ids: about 10 bits and 4 probes per id (≈1.3 % false
/// positives). Each id picks one 512-bit block and sets 4 bits in it: one cache miss per id
/// instead of one per probe, and no division (sealing inserts every id of a segment: with 4
/// probes over the whole filter, inserting took 29 % of a seal).
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    /// Whole blocks of [`BLOCK_WORDS`] words.
    pub(super) bits: Vec<u64>,
}

impl Bloom {
    pub(super) fn with_capacity(n: usize) -> Self {
        let blocks = (n * 10).div_ceil(64 * BLOCK_WORDS).max(1);
        Bloom {
            bits: vec![0; blocks * BLOCK_WORDS],
        }
    }

    /// The block's first word, and the bit (0..512) of each probe in it.
    fn probes(&self, id: &[u8]) -> (usize, [usize; PROBES]) {
        let mut h = [0u8; 8];
        let mut h2 = [0u8; 8];
        for (i, b) in id.iter().enumerate() {
            if i < 8 {
                h[i] ^= b
            } else {
                h2[i - 8] ^= b
            }
        }
        let a = splitmix(u64::from_le_bytes(h) ^ splitmix(u64::from_le_bytes(h2)));
        let b = splitmix(a ^ 0x2545_f491_4f6c_dd1d);
        let blocks = (self.bits.len() / BLOCK_WORDS) as u64;
        // `a` scaled to 0..blocks: a multiply instead of a division.
        let block = ((u128::from(a) * u128::from(blocks)) >> 64) as usize;
        let bit = |i: usize| ((b >> (9 * i)) & 511) as usize;
        (block * BLOCK_WORDS, [bit(0), bit(1), bit(2), bit(3)])
    }

    #[cfg(test)]
    pub(super) fn insert(&mut self, id: &[u8]) {
        self.insert_all([id]);
    }

    /// Inserts every id, a few at a time: the blocks of the next ones are prefetched before
    /// the bits of the first are set (each block is a cache miss: a third of a seal).
    pub(super) fn insert_all<'a>(&mut self, ids: impl IntoIterator<Item = &'a [u8]>) {
        const AT_ONCE: usize = 16;
        let mut ids = ids.into_iter();
        loop {
            let mut probes = [(0, [0; PROBES]); AT_ONCE];
            let mut n = 0;
            for id in ids.by_ref().take(AT_ONCE) {
                probes[n] = self.probes(id);
                prefetch(&self.bits[probes[n].0]);
                n += 1;
            }
            if n == 0 {
                return;
            }
            for &(first, bits) in &probes[..n] {
                let block = &mut self.bits[first..first + BLOCK_WORDS];
                for p in bits {
                    block[p / 64] |= 1 << (p % 64);
                }
            }
        }
    }

    /// False when the id is certainly absent.
    pub fn may_contain(&self, id: &[u8]) -> bool {
        let (first, bits) = self.probes(id);
        let block = &self.bits[first..first + BLOCK_WORDS];
        bits.iter().all(|&p| block[p / 64] & (1 << (p % 64)) != 0)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::with_capacity(10_000);
        for i in 0u64..10_000 {
            b.insert(&i.to_be_bytes());
        }
        assert!((0u64..10_000).all(|i| b.may_contain(&i.to_be_bytes())));
        let fp = (10_000u64..110_000)
            .filter(|i| b.may_contain(&i.to_be_bytes()))
            .count();
        assert!(fp < 2_000, "{fp} false positives in 100000");
    }
}
