//! One chunk of a recording: its header, metadata, constant pools (from every checkpoint
//! event), and where its events are.

use hashbrown::HashMap;

use super::metadata::{Class, Metadata};
use super::pool::{Pools, ValueReader};
use super::reader::{ChunkHeader, Cursor, HEADER_BYTES};
use super::JfrError;

/// Type id of the metadata event.
const METADATA_EVENT: i64 = 0;
/// Type id of checkpoint (constant pool) events.
const CHECKPOINT_EVENT: i64 = 1;

/// A chunk, read but for its events' fields.
pub struct Chunk<'a> {
    /// Its offset in the file, in bytes.
    pub at: usize,
    /// Its header.
    pub header: ChunkHeader,
    /// Its bytes, header included.
    pub bytes: &'a [u8],
    /// Its types.
    pub metadata: Metadata,
    /// Its constants.
    pub pools: Pools<'a>,
    /// Events whose type `wanted` chose: (offset of the event's fields in the chunk, offset
    /// of its end, type id).
    pub events: Vec<(usize, usize, i64)>,
    /// Events of every type, counted by type id (metadata and checkpoints not included).
    pub counts: HashMap<i64, u64>,
}

impl<'a> Chunk<'a> {
    /// Reads the chunk at `at` of `file`; `wanted` chooses the event types whose events are
    /// kept.
    pub fn read(
        file: &'a [u8],
        at: usize,
        wanted: impl Fn(&Class) -> bool,
    ) -> Result<Chunk<'a>, JfrError> {
        let header = ChunkHeader::read(&file[at..], at)?;
        let bytes = &file[at..at + header.size];
        let mut c = Cursor::new(bytes, at, header.compressed_ints);
        c.seek(header.metadata_offset)?;
        let metadata = Metadata::read(&mut c)?;
        // Every value takes at least a byte but for objects without fields and empty
        // arrays: twice the chunk's size is more than any real chunk holds.
        let mut values = ValueReader::new(&metadata, header.size.saturating_mul(2) + 1024);
        let mut pools = Pools::new(&metadata, header.size);
        let mut events = Vec::new();
        let mut counts: HashMap<i64, u64> = HashMap::new();
        let mut wanted_ids: HashMap<i64, bool> = HashMap::new();
        let mut pos = HEADER_BYTES;
        while pos < header.size {
            c.seek(pos)?;
            let size = c.long()?;
            let end = usize::try_from(size)
                .ok()
                .filter(|&s| s > 0)
                .and_then(|s| pos.checked_add(s))
                .filter(|&e| e <= header.size)
                .ok_or_else(|| {
                    JfrError::at(
                        at + pos,
                        format!(
                            "an event's size {size} is not within its chunk ({} bytes left): truncated or corrupt",
                            header.size - pos
                        ),
                    )
                })?;
            let type_id = c.long()?;
            match type_id {
                METADATA_EVENT => {}
                CHECKPOINT_EVENT => {
                    let mut ec = Cursor::new(&bytes[..end], at, header.compressed_ints);
                    ec.seek(c.pos())?;
                    pools.read_checkpoint(&mut ec, &mut values)?;
                }
                _ => {
                    *counts.entry(type_id).or_default() += 1;
                    let keep = *wanted_ids
                        .entry(type_id)
                        .or_insert_with(|| metadata.classes.get(&type_id).is_some_and(&wanted));
                    if keep {
                        events.push((c.pos(), end, type_id));
                    }
                }
            }
            pos = end;
        }
        Ok(Chunk {
            at,
            header,
            bytes,
            metadata,
            pools,
            events,
            counts,
        })
    }

    /// A cursor over the chunk's event from `pos` to `end`.
    pub fn cursor(&self, pos: usize, end: usize) -> Result<Cursor<'a>, JfrError> {
        let mut c = Cursor::new(&self.bytes[..end], self.at, self.header.compressed_ints);
        c.seek(pos)?;
        Ok(c)
    }

    /// Converts a duration in the chunk's ticks to nanoseconds.
    pub fn ticks_to_ns(&self, ticks: i64) -> i64 {
        let tps = self.header.ticks_per_second;
        if tps == 1_000_000_000 || tps <= 0 {
            return ticks;
        }
        (i128::from(ticks) * 1_000_000_000 / i128::from(tps)) as i64
    }
}

/// The offsets of the chunks of `file`, each checked to lie within it.
pub fn chunk_offsets(file: &[u8]) -> Result<Vec<usize>, JfrError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < file.len() {
        let header = ChunkHeader::read(&file[at..], at)?;
        out.push(at);
        at += header.size;
    }
    if out.is_empty() {
        return Err(JfrError::at(0, "the recording is empty: no chunk".into()));
    }
    Ok(out)
}
