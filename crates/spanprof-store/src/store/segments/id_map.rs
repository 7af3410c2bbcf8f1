//! Open-addressed maps from span and trace ids to the blocks that name them: [`IdBlocks`]
//! while a segment fills, [`FrozenIds`] once it is read back from its index file.

use std::hash::BuildHasher;

use super::out::Out;
use super::prefetch::prefetch;
use crate::codec::{CodecError, Get, Put};

/// Ids with their block lists, read-only: ids sorted and unique, the lists one after the
/// other in `blocks` (`ends[i]` is where the list of `ids[i]` ends).
#[derive(Debug, Clone, Default)]
pub(super) struct FrozenIds<const N: usize> {
    pub(super) ids: Vec<[u8; N]>,
    ends: Vec<u32>,
    blocks: Vec<u32>,
}

impl<const N: usize> FrozenIds<N> {
    /// Reads `count · (id · n · block…)…` as `encode` writes it (ids ascending); block ids
    /// must be below `blocks`.
    pub(super) fn decode(g: &mut Get, blocks: usize) -> Result<Self, CodecError> {
        let m = g.count()?;
        let mut x = FrozenIds {
            ids: Vec::with_capacity(m),
            ends: Vec::with_capacity(m),
            // Block ids take a byte or more each: room for all of them that the rest of the
            // section could hold, so the list never moves while it grows (only the pages
            // written to are ever touched).
            blocks: Vec::with_capacity(g.remaining().saturating_sub(m * (N + 1))),
        };
        for _ in 0..m {
            let id = g.fixed::<N>()?;
            if x.ids.last().is_some_and(|last| *last >= id) {
                return Err(CodecError("index ids out of order".into()));
            }
            x.ids.push(id);
            let k = g.count()?;
            for _ in 0..k {
                let v = g.u32()?;
                if v as usize >= blocks {
                    return Err(CodecError(format!("block {v} out of range")));
                }
                x.blocks.push(v);
            }
            let end = u32::try_from(x.blocks.len())
                .map_err(|_| CodecError("too many block ids".into()))?;
            x.ends.push(end);
        }
        Ok(x)
    }

    /// Writes `entries` (sorted by id) in fixed-width fields, so that reading them back is
    /// a few linear copies and checks rather than a varint decode per field (a cold span
    /// query waits for it): `count:uv · total:uv · (id · end:u32le)×count · block:u32le×total`.
    pub(super) fn encode_fixed(
        entries: &[([u8; N], &[u32])],
        out: &mut Out,
    ) -> std::io::Result<()> {
        let total: usize = entries.iter().map(|e| e.1.len()).sum();
        out.buf.uvarint(entries.len() as u64);
        out.buf.uvarint(total as u64);
        let mut end = 0u32;
        for (id, blocks) in entries {
            end += blocks.len() as u32;
            out.buf.extend_from_slice(&id[..]);
            out.buf.extend_from_slice(&end.to_le_bytes());
            out.spill()?;
        }
        for (_, blocks) in entries {
            for b in *blocks {
                out.buf.extend_from_slice(&b.to_le_bytes());
            }
            out.spill()?;
        }
        Ok(())
    }

    /// Reads what [`FrozenIds::encode_fixed`] wrote, checking that ids ascend, that the
    /// lists are in bounds and that every block id is below `blocks`.
    pub(super) fn decode_fixed(g: &mut Get, blocks: usize) -> Result<Self, CodecError> {
        let m = g.count()?;
        let total = g.uvarint()?;
        let table = g.slice(
            m.checked_mul(N + 4)
                .ok_or_else(|| CodecError("span map too large".into()))?,
        )?;
        let total = usize::try_from(total)
            .ok()
            .filter(|&t| t <= g.remaining() / 4)
            .ok_or_else(|| CodecError(format!("{total} block ids exceed the index")))?;
        let ids_raw = g.slice(total * 4)?;
        let mut x = FrozenIds {
            ids: Vec::with_capacity(m),
            ends: Vec::with_capacity(m),
            blocks: Vec::with_capacity(total),
        };
        let mut previous_end = 0u32;
        for entry in table.chunks_exact(N + 4) {
            let id: [u8; N] = entry[..N].try_into().expect("N bytes");
            if x.ids.last().is_some_and(|last| *last >= id) {
                return Err(CodecError("index ids out of order".into()));
            }
            let end = u32::from_le_bytes(entry[N..].try_into().expect("4 bytes"));
            if end < previous_end || end as usize > total {
                return Err(CodecError(format!("block list end {end} out of range")));
            }
            previous_end = end;
            x.ids.push(id);
            x.ends.push(end);
        }
        if previous_end as usize != total {
            return Err(CodecError("block lists do not cover the block ids".into()));
        }
        for v in ids_raw.chunks_exact(4) {
            let v = u32::from_le_bytes(v.try_into().expect("4 bytes"));
            if v as usize >= blocks {
                return Err(CodecError(format!("block {v} out of range")));
            }
            x.blocks.push(v);
        }
        Ok(x)
    }

    fn range(&self, i: usize) -> &[u32] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.blocks[start as usize..self.ends[i] as usize]
    }

    pub(super) fn get(&self, id: &[u8; N]) -> &[u32] {
        match self.ids.binary_search(id) {
            Ok(i) => self.range(i),
            Err(_) => &[],
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8; N], &[u32])> {
        self.ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id, self.range(i)))
    }
}

/// Id → the blocks with samples of it, for a live index. Entries are appended in order; an
/// open-addressed table of 8-byte slots (a 32-bit hash tag and the entry's position, linear
/// probing, at most [`MAX_LOAD`] full) finds them. A segment's ids are hundreds of thousands
/// of random ones, so nearly every slot read is a cache miss: one line a lookup here, where a
/// `hashbrown` table read its control bytes and its slots apart (two misses, 8 % of the
/// server's CPU under the load bench), and [`IdBlocks::push_all`] prefetches the slots of a
/// block's ids ahead of inserting them, so that those misses overlap.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdBlocks<const N: usize> {
    hasher: hashbrown::DefaultHashBuilder,
    /// `0` for an empty slot, else `tag << 32 | (position + 1)`; a power of two long.
    pub(super) slots: Vec<u64>,
    pub(super) entries: Vec<([u8; N], BlockIds)>,
    /// The hashes of the ids being added, kept for their allocation.
    hashes: Vec<u64>,
}

/// The most of a table's slots in use, as a fraction: linear probing stays within a cache
/// line or two below it.
const MAX_LOAD: (usize, usize) = (7, 10);

/// How many ids ahead of the one being added [`IdBlocks::push_all`] prefetches the slot of.
const PREFETCH_AHEAD: usize = 12;

impl<const N: usize> IdBlocks<N> {
    /// Adds block `block` to `id`'s blocks unless it is the last one already.
    #[cfg(test)]
    pub(super) fn push_once(&mut self, id: [u8; N], block: u32) {
        self.push_all(std::iter::once(id), block);
    }

    /// Adds block `block` to the blocks of each of `ids` (a block's ids, in one go), unless
    /// it is the last one already.
    pub(super) fn push_all(&mut self, ids: impl Iterator<Item = [u8; N]> + Clone, block: u32) {
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.clear();
        hashes.extend(ids.clone().map(|id| self.hasher.hash_one(id)));
        self.reserve(hashes.len());
        for &hash in hashes.iter().take(PREFETCH_AHEAD) {
            self.prefetch(hash);
        }
        for (i, id) in ids.enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.prefetch(ahead);
            }
            let at = self.find_or_insert(hashes[i], id);
            self.entries[at].1.push_once(block);
        }
        self.hashes = hashes;
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    pub(super) fn prefetch(&self, hash: u64) {
        prefetch(&self.slots[hash as usize & self.mask()]);
    }

    /// Where `id` (of hash `hash`) is: `Ok` its entry's position, or `Err` the empty slot
    /// it would go in. The table is not empty.
    fn probe(&self, hash: u64, id: &[u8; N]) -> Result<usize, usize> {
        let tag = hash >> 32 << 32;
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Err(i);
            }
            if slot >> 32 << 32 == tag {
                let at = (slot as u32 - 1) as usize;
                if self.entries[at].0 == *id {
                    return Ok(at);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The position of `id`'s entry, added if it has none. The table has room.
    fn find_or_insert(&mut self, hash: u64, id: [u8; N]) -> usize {
        self.probe(hash, &id).unwrap_or_else(|empty| {
            let at = self.entries.len();
            self.entries.push((id, BlockIds::default()));
            self.slots[empty] = hash >> 32 << 32 | (at as u64 + 1);
            at
        })
    }

    pub(super) fn get(&self, id: &[u8; N]) -> Option<&[u32]> {
        if self.slots.is_empty() {
            return None;
        }
        let at = self.probe(self.hasher.hash_one(id), id).ok()?;
        Some(&self.entries[at].1)
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// No ids, with the table's and the entries' memory kept.
    pub(super) fn clear(&mut self) {
        self.slots.fill(0);
        self.entries.clear();
    }

    /// Slots for the entries there are and `n` more, within [`MAX_LOAD`].
    fn slots_for(n: usize) -> usize {
        (n.saturating_mul(MAX_LOAD.1) / MAX_LOAD.0 + 1)
            .next_power_of_two()
            .max(16)
    }

    /// Room for `n` more ids without the table or the entries growing. Growing rebuilds the
    /// table from the entries.
    pub(super) fn reserve(&mut self, n: usize) {
        let need = Self::slots_for(self.entries.len() + n);
        if need > self.slots.len() {
            // Zeroed memory straight from the allocator: its pages are mapped as slots are
            // first written, so room reserved for a segment that never fills costs little.
            self.slots = vec![0; need];
            let mask = self.mask();
            for (at, (id, _)) in self.entries.iter().enumerate() {
                let hash = self.hasher.hash_one(id);
                let mut i = hash as usize & mask;
                while self.slots[i] != 0 {
                    i = (i + 1) & mask;
                }
                self.slots[i] = hash >> 32 << 32 | (at as u64 + 1);
            }
        }
        self.entries.reserve(n);
    }

    /// How many slots the table has (for the tests of its sizing).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The ids, in first-insert order.
    pub(super) fn ids(&self) -> impl Iterator<Item = &[u8; N]> {
        self.entries.iter().map(|(id, _)| id)
    }

    /// (id, blocks), in first-insert order.
    pub(super) fn iter(&self) -> impl Iterator<Item = ([u8; N], &[u32])> {
        self.entries.iter().map(|(id, blocks)| (*id, &blocks[..]))
    }
}

/// Block ids a [`BlockIds`] holds without an allocation.
const INLINE_BLOCK_IDS: usize = 5;

/// The blocks of one span or trace in a live index, in the order they were added. Most ids
/// are in a few blocks (one per sample type and label set of the profile that carried them;
/// 3.4 on average in the serve load bench's real Go profiles), kept inline: an allocation per
/// span id was the largest cost of indexing a block, and freeing them a large part of sealing.
#[derive(Debug, Clone)]
pub(crate) enum BlockIds {
    /// Up to [`INLINE_BLOCK_IDS`] ids (`len` of them).
    Inline {
        len: u8,
        ids: [u32; INLINE_BLOCK_IDS],
    },
    /// More.
    Heap(Vec<u32>),
}

impl Default for BlockIds {
    fn default() -> Self {
        BlockIds::Inline {
            len: 0,
            ids: [0; INLINE_BLOCK_IDS],
        }
    }
}

impl BlockIds {
    /// Adds `id` unless it is the last one already (a block adds each of its ids once, and
    /// blocks are added in order).
    pub(super) fn push_once(&mut self, id: u32) {
        if self.last() == Some(&id) {
            return;
        }
        match self {
            BlockIds::Inline { len, ids } if (*len as usize) < ids.len() => {
                ids[*len as usize] = id;
                *len += 1;
            }
            BlockIds::Inline { ids, .. } => {
                let mut v = Vec::with_capacity(8);
                v.extend_from_slice(ids);
                v.push(id);
                *self = BlockIds::Heap(v);
            }
            BlockIds::Heap(v) => v.push(id),
        }
    }
}

impl std::ops::Deref for BlockIds {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            BlockIds::Inline { len, ids } => &ids[..*len as usize],
            BlockIds::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::segments::out::in_memory;
    use crate::store::segments::tests::id;

    #[test]
    fn id_blocks_find_every_id_through_growth_and_keep_insert_order() {
        let mut m = IdBlocks::<8>::default();
        // No reserve: the table grows (rehashing from the entries) many times.
        for block in 0..3u32 {
            for k in 0..20_000u64 {
                if k % 3 != 2 || block == 0 {
                    m.push_once(id(k), block);
                    m.push_once(id(k), block);
                }
            }
        }
        assert_eq!(m.len(), 20_000);
        for k in 0..20_000u64 {
            let want: &[u32] = if k % 3 == 2 { &[0] } else { &[0, 1, 2] };
            assert_eq!(m.get(&id(k)), Some(want), "id {k}");
        }
        assert_eq!(m.get(&id(20_000)), None);
        let order: Vec<[u8; 8]> = m.ids().copied().collect();
        assert_eq!(order, (0..20_000u64).map(id).collect::<Vec<_>>());
        assert!(m.iter().all(|(k, blocks)| m.get(&k) == Some(blocks)));
        // Reserving keeps what is there findable.
        m.reserve(100_000);
        assert_eq!(m.get(&id(19_997)), Some(&[0][..]));
        assert_eq!(m.get(&id(19_998)), Some(&[0, 1, 2][..]));
    }

    /// Ids that are not random (a producer counting them up, or ids alike but for their
    /// high bytes) are found as well, in a table as full as it gets, and an absent one is not.
    #[test]
    fn id_blocks_find_ids_that_are_not_random() {
        let mut m = IdBlocks::<8>::default();
        let counted = (0..5_000u64).map(u64::to_le_bytes);
        let high = (0..5_000u64).map(|k| (k << 48).to_le_bytes());
        m.push_all(counted.clone().chain(high.clone()), 7);
        assert_eq!(m.len(), 9_999, "0 is in both runs");
        let full = m.len() as f64 / m.capacity() as f64;
        assert!(full > 0.5 && full <= 0.7, "{full}");
        assert!(counted.chain(high).all(|k| m.get(&k) == Some(&[7][..])));
        assert_eq!(m.get(&u64::MAX.to_le_bytes()), None);
    }

    #[test]
    fn block_ids_keep_order_skip_repeats_and_spill_when_full() {
        let mut ids = BlockIds::default();
        assert!(ids.is_empty());
        let mut want = Vec::new();
        for id in 1..=INLINE_BLOCK_IDS as u32 {
            ids.push_once(id);
            ids.push_once(id);
            want.push(id);
        }
        assert_eq!(&ids[..], &want[..]);
        assert!(matches!(ids, BlockIds::Inline { .. }));
        for id in [90, 90, 91] {
            ids.push_once(id);
        }
        want.extend([90, 91]);
        assert_eq!(&ids[..], &want[..]);
        assert!(matches!(ids, BlockIds::Heap(_)));
    }

    #[test]
    fn fixed_width_span_maps_round_trip_and_refuse_nonsense() {
        let (a, b, c) = ([1u8; 8], [2u8; 8], [3u8; 8]);
        let entries: Vec<([u8; 8], &[u32])> = vec![(a, &[0, 2]), (b, &[]), (c, &[1])];
        let out = in_memory(|out| FrozenIds::encode_fixed(&entries, out));
        let x = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 3).unwrap();
        assert_eq!(x.iter().map(|(k, v)| (*k, v)).collect::<Vec<_>>(), entries);
        assert_eq!(
            (x.get(&a), x.get(&c), x.get(&[9; 8])),
            (&[0, 2][..], &[1][..], &[][..])
        );
        // A block id past the segment's blocks.
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 2).unwrap_err();
        assert!(err.to_string().contains("block 2 out of range"), "{err}");
        // Ids out of order.
        let out = in_memory(|out| FrozenIds::encode_fixed(&[(b, &[0][..]), (a, &[0][..])], out));
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out), 1).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
        // Cut short.
        let err = FrozenIds::<8>::decode_fixed(&mut Get::new(&out[..out.len() - 1]), 1);
        assert!(err.is_err());
    }
}
