//! The durable record log of the embedded store: a directory of append-only segment files of
//! checksummed records that survives `kill -9` and power loss without losing an acknowledged
//! record, and never hands back a damaged one.
//!
//! # On-disk format
//!
//! The log owns one directory. Segment `id` is the file `{id:016x}.seg` (16 lower-case hex
//! digits); ids grow by one per rotation, are never reused, and gaps (deleted segments) are
//! normal. The newest segment is the *active* one; all others are sealed and never written
//! again. Other file names are ignored; a `*.seg` entry that is not a segment is reported.
//!
//! All integers are little-endian.
//!
//! ```text
//! file header (24 bytes): magic "SPANSEG1" [8] | version u32 (= 1) | segment id u64 | crc32 u32
//! record (12 + len bytes): magic D7 1E C0 5A [4] | len u32 | crc32 u32 | payload [len]
//! ```
//!
//! The header crc covers the 20 bytes before it. Every future version keeps this header, so a
//! verified header with another version refuses the open, while a header that fails its crc is
//! damage (reported, file ignored). A record's crc (CRC-32/IEEE) covers
//! `segment id u64 ‖ record offset u64 ‖ len u32 ‖ payload`, so a record verifies only at the
//! place it was written: zero-filled blocks (whose length and crc would be 0), stale blocks of
//! another segment or a copy at another offset never pass as data. The record magic lets
//! recovery find the next intact record after damage; that is how a torn tail (nothing intact
//! after the damage: truncated) is told apart from a damaged record in the middle (intact
//! records follow: reported and skipped, the rest kept). Payloads are at most
//! [`MAX_RECORD_LEN`] bytes.
//!
//! Every segment starts with a record made by the `first_record` function given to
//! [`Log::open`], written in the same write as the file header, so a segment can be understood
//! on its own and one without an intact record is a creation that never completed.
//!
//! # Durability
//!
//! [`Log::append`] writes a batch with positioned writes at the active segment's end and, with
//! [`LogConfig::sync`], calls `fdatasync` once before returning. Rotation syncs the old
//! segment, then creates and syncs the new file and the directory. Deleting a segment syncs the
//! directory. Readers use their own file handles and never look past the end of the last
//! completed append. One process at a time may open a directory.

mod recovery;
mod segment;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::{ControlFlow, Range};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

pub use segment::MAX_RECORD_LEN;
use segment::{io_error, SegmentReader, FILE_HEADER_LEN, RECORD_HEADER_LEN};

/// Where the log lives and how hard it syncs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The directory of segment files; created if missing.
    pub dir: PathBuf,
    /// `fdatasync` before [`Log::append`] returns (default `true`). Without it an append is
    /// durable only after [`Log::sync`], a rotation, or when the OS writes it back.
    pub sync: bool,
}

impl LogConfig {
    /// A config for `dir` that syncs every append.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LogConfig {
            dir: dir.into(),
            sync: true,
        }
    }
}

/// Where a record is: its segment, the offset of its record header in the segment file (bytes)
/// and its payload length (bytes). The record occupies `offset .. offset + 12 + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordPos {
    /// Segment id.
    pub segment: u64,
    /// Offset of the record header in the segment file, in bytes.
    pub offset: u64,
    /// Payload length, in bytes.
    pub len: u32,
}

/// One segment of the log, as listed by [`Log::segments`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Segment id.
    pub id: u64,
    /// Path of the segment file.
    pub path: PathBuf,
    /// Size of the file, in bytes (including headers and any damaged ranges).
    pub bytes: u64,
    /// True for the segment appends go to.
    pub active: bool,
}

/// What [`Log::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments in the log after opening.
    pub segments: usize,
    /// Intact records in the log after opening.
    pub records: u64,
    /// Bytes cut from the end of the active segment: a write that was never acknowledged.
    pub truncated_bytes: u64,
    /// Bytes inside segments that hold no intact record and are skipped, in bytes.
    pub damaged_bytes: u64,
    /// Damage that is not a torn tail, one line each naming the file and the offset in bytes;
    /// empty after a crash.
    pub problems: Vec<String>,
}

/// Errors of the record log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file system call failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A record does not verify where it was expected.
    #[error("{}: damaged record at offset {offset}: {reason}", .path.display())]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Offset of the record, in bytes.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A segment file has a format version this build does not read; the log refuses to open.
    #[error(
        "{}: segment format version {found} is not supported (this build reads {supported})",
        .path.display()
    )]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// The version in its header.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A payload is larger than [`MAX_RECORD_LEN`].
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Payload length, in bytes.
        len: usize,
        /// The limit, in bytes.
        max: u32,
    },
    /// No segment with this id is in the log.
    #[error("no segment {id:016x} in the log")]
    UnknownSegment {
        /// Segment id.
        id: u64,
    },
    /// The active segment cannot be deleted.
    #[error("segment {id:016x} is active and cannot be deleted")]
    ActiveSegment {
        /// Segment id.
        id: u64,
    },
    /// A position that does not lie within the written bytes of its segment.
    #[error("record {pos:?} lies outside the {end} written bytes of its segment")]
    OutOfRange {
        /// The position asked for.
        pos: RecordPos,
        /// The segment's written length, in bytes.
        end: u64,
    },
    /// An earlier `fdatasync` (or the cleanup of a failed write) failed, so what is on disk is
    /// unknown; the log refuses writes until it is reopened and recovered.
    #[error("the log refuses writes until it is reopened (restart spanprof) after an earlier failure: {reason}")]
    Failed {
        /// The earlier failure.
        reason: String,
    },
}

/// Makes the first record of a new segment from its id.
type FirstRecord = Box<dyn Fn(u64) -> Vec<u8> + Send + Sync>;

/// A segment in the log; shared by the writer and readers.
#[derive(Debug)]
struct Segment {
    id: u64,
    path: PathBuf,
    /// End of the written bytes: readers never look past it. Grows only for the active segment.
    end: AtomicU64,
    /// Sorted byte ranges found damaged at open; walks jump over them.
    damaged: Vec<Range<u64>>,
    reader: Mutex<Option<Arc<File>>>,
}

impl Segment {
    fn new(id: u64, path: PathBuf, end: u64, damaged: Vec<Range<u64>>) -> Arc<Self> {
        let end = AtomicU64::new(end);
        Arc::new(Segment {
            id,
            path,
            end,
            damaged,
            reader: Mutex::new(None),
        })
    }

    /// The cached read-only handle, opened on first use.
    fn reader(&self) -> Result<Arc<File>, LogError> {
        let mut cached = lock(&self.reader);
        if let Some(file) = &*cached {
            return Ok(file.clone());
        }
        let file = Arc::new(File::open(&self.path).map_err(io_error(&self.path))?);
        *cached = Some(file.clone());
        Ok(file)
    }
}

/// The active segment's write side; one writer at a time.
struct Writer {
    segment: Arc<Segment>,
    file: File,
    /// Where the next record goes, in bytes.
    end: u64,
    next_id: u64,
    /// Set when the file's state is unknown; appends and rotations are refused.
    failed: Option<String>,
}

impl Writer {
    fn check(&self) -> Result<(), LogError> {
        match &self.failed {
            Some(reason) => Err(LogError::Failed {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// `fdatasync`; a failure poisons the writer, as the kernel may have dropped the pages.
    fn sync(&mut self) -> Result<(), LogError> {
        self.file.sync_data().map_err(|e| {
            self.failed = Some(format!("fdatasync of {}: {e}", self.segment.path.display()));
            io_error(&self.segment.path)(e)
        })
    }
}

struct SegmentSet {
    map: BTreeMap<u64, Arc<Segment>>,
    active: u64,
}

/// The record log: appends go to the active segment, reads and scans to any segment.
/// `Send + Sync`; share it behind an `Arc`.
pub struct Log {
    dir: PathBuf,
    sync: bool,
    first_record: FirstRecord,
    writer: Mutex<Writer>,
    segments: RwLock<SegmentSet>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.segments.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("sync", &self.sync)
            .field("segments", &set.map.len())
            .field("active", &set.active)
            .finish()
    }
}

/// Batches are copied into one buffer up to this size (bytes) so a batch is usually one write.
const COALESCE_BYTES: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent before anything can panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn check_len(len: usize) -> Result<(), LogError> {
    if len > MAX_RECORD_LEN as usize {
        return Err(LogError::RecordTooLarge {
            len,
            max: MAX_RECORD_LEN,
        });
    }
    Ok(())
}

impl Log {
    /// Opens or creates the log in `cfg.dir`, verifying every record of every segment.
    ///
    /// A torn tail of the active segment (no intact record after the damage) was never
    /// acknowledged: it is cut off and counted in [`RecoveryReport::truncated_bytes`]. Damage
    /// with intact records after it, in any segment, is skipped and named in
    /// [`RecoveryReport::problems`]; a `*.seg` file that is not a segment is left alone and
    /// named there too. A segment file left unfinished by a crashed creation (no intact first
    /// record) holds nothing acknowledged and is removed: the segment before it stays active.
    /// Never panics and never returns a damaged record. A segment written by a newer format
    /// version makes the open fail.
    ///
    /// Every segment starts with `first_record(id)`. `open` calls it only when the directory
    /// holds no segment (a new log); otherwise only [`Log::rotate`] does, with appends blocked,
    /// so it may describe the state after every record appended so far.
    pub fn open(
        cfg: LogConfig,
        first_record: impl Fn(u64) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<(Log, RecoveryReport), LogError> {
        let first_record: FirstRecord = Box::new(first_record);
        let recovered = recovery::recover(&cfg.dir, &first_record)?;
        let mut report = recovered.report;
        let active = recovered.writer.segment.id;
        let map = recovered.segments.into_iter().map(|s| (s.id, s)).collect();
        let log = Log {
            dir: cfg.dir,
            sync: cfg.sync,
            first_record,
            writer: Mutex::new(recovered.writer),
            segments: RwLock::new(SegmentSet { map, active }),
        };
        report.segments = log.read_set().map.len();
        Ok((log, report))
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends `payloads` to the active segment, in order, with one positioned write per MiB;
    /// when this returns `Ok` they are durable (with [`LogConfig::sync`], after one
    /// `fdatasync`) and readable. Returns their positions. Appends are serialized internally;
    /// readers are not blocked. On error none of the batch is acknowledged, and a failed
    /// `fdatasync` makes the log refuse writes ([`LogError::Failed`]) until reopened.
    pub fn append(&self, payloads: &[&[u8]]) -> Result<Vec<RecordPos>, LogError> {
        for p in payloads {
            check_len(p.len())?;
        }
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        let mut w = lock(&self.writer);
        w.check()?;
        let id = w.segment.id;
        let start = w.end;
        let mut positions = Vec::with_capacity(payloads.len());
        let total: usize = payloads
            .iter()
            .map(|p| RECORD_HEADER_LEN as usize + p.len())
            .sum();
        let mut buf = Vec::with_capacity(total.min(COALESCE_BYTES));
        let (mut offset, mut buf_at) = (start, start);
        let mut written = Ok(());
        for p in payloads {
            buf.extend_from_slice(&segment::record_header(id, offset, p));
            let direct = p.len() >= COALESCE_BYTES;
            if !direct {
                buf.extend_from_slice(p);
            }
            if direct || buf.len() >= COALESCE_BYTES {
                written = w.file.write_all_at(&buf, buf_at);
                buf_at += buf.len() as u64;
                buf.clear();
                if direct && written.is_ok() {
                    written = w.file.write_all_at(p, buf_at);
                    buf_at += p.len() as u64;
                }
                if written.is_err() {
                    break;
                }
            }
            positions.push(RecordPos {
                segment: id,
                offset,
                len: p.len() as u32,
            });
            offset += RECORD_HEADER_LEN + p.len() as u64;
        }
        if written.is_ok() && !buf.is_empty() {
            written = w.file.write_all_at(&buf, buf_at);
        }
        if let Err(e) = written {
            // Cut the partial batch so the next append starts clean; if that fails too the tail
            // is unknown and only a reopen (recovery) can tell what it holds.
            if let Err(cut) = w.file.set_len(start) {
                w.failed = Some(format!("cutting a failed write: {cut}"));
            }
            return Err(io_error(&w.segment.path)(e));
        }
        if self.sync {
            w.sync()?;
        }
        w.end = offset;
        w.segment.end.store(offset, Ordering::Release);
        Ok(positions)
    }

    /// `fdatasync`s the active segment: makes appends made without [`LogConfig::sync`] durable.
    pub fn sync(&self) -> Result<(), LogError> {
        let mut writer = lock(&self.writer);
        writer.check()?;
        writer.sync()
    }

    /// Seals the active segment and starts a new one whose first record is
    /// `first_record(new_id)`; the old segment, the new file and the directory are synced
    /// before this returns. Returns the new segment's id.
    pub fn rotate(&self) -> Result<u64, LogError> {
        let mut w = lock(&self.writer);
        w.check()?;
        w.sync()?;
        // Never reuse an id, even of a file that failed to be created.
        let id = w.next_id;
        w.next_id = recovery::next_id(&self.dir, id)?;
        let first = (self.first_record)(id);
        check_len(first.len())?;
        let (file, path, end) = segment::create(&self.dir, id, &first)?;
        let seg = Segment::new(id, path, end, Vec::new());
        {
            let mut set = self
                .segments
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            set.map.insert(id, seg.clone());
            set.active = id;
        }
        *w = Writer {
            segment: seg,
            file,
            end,
            next_id: w.next_id,
            failed: None,
        };
        Ok(id)
    }

    fn read_set(&self) -> std::sync::RwLockReadGuard<'_, SegmentSet> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn segment(&self, id: u64) -> Result<Arc<Segment>, LogError> {
        let set = self.read_set();
        set.map
            .get(&id)
            .cloned()
            .ok_or(LogError::UnknownSegment { id })
    }

    /// Written bytes of the active segment.
    pub fn active_bytes(&self) -> u64 {
        let set = self.read_set();
        set.map[&set.active].end.load(Ordering::Acquire)
    }

    /// Bytes of all segment files of the log.
    pub fn total_bytes(&self) -> u64 {
        let set = self.read_set();
        set.map
            .values()
            .map(|s| s.end.load(Ordering::Acquire))
            .sum()
    }

    /// The id of the active segment.
    pub fn active_segment(&self) -> u64 {
        self.read_set().active
    }

    /// The segments of the log, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let set = self.read_set();
        let info = |s: &Arc<Segment>| SegmentInfo {
            id: s.id,
            path: s.path.clone(),
            bytes: s.end.load(Ordering::Acquire),
            active: s.id == set.active,
        };
        set.map.values().map(info).collect()
    }

    /// Reads the payload of the record at `pos`, verifying its checksum. Runs concurrently
    /// with appends; a position past the last completed append is [`LogError::OutOfRange`],
    /// one that is not the start of an intact record is [`LogError::Corrupt`].
    pub fn read(&self, pos: RecordPos) -> Result<Vec<u8>, LogError> {
        let seg = self.segment(pos.segment)?;
        let end = seg.end.load(Ordering::Acquire);
        let record_end = pos
            .offset
            .checked_add(RECORD_HEADER_LEN + u64::from(pos.len));
        let past_end = record_end.is_none_or(|e| e > end);
        if pos.offset < FILE_HEADER_LEN || pos.len > MAX_RECORD_LEN || past_end {
            return Err(LogError::OutOfRange { pos, end });
        }
        let file = seg.reader()?;
        let mut bytes = vec![0; RECORD_HEADER_LEN as usize + pos.len as usize];
        file.read_exact_at(&mut bytes, pos.offset)
            .map_err(io_error(&seg.path))?;
        let corrupt = |reason: String| LogError::Corrupt {
            path: seg.path.clone(),
            offset: pos.offset,
            reason,
        };
        segment::verify_record(seg.id, pos.offset, &bytes).map_err(|e| corrupt(e.to_string()))?;
        let stored = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        if stored != pos.len {
            let mismatch = segment::BadRecord::LengthMismatch {
                stored,
                expected: pos.len,
            };
            return Err(corrupt(mismatch.to_string()));
        }
        bytes.drain(..RECORD_HEADER_LEN as usize);
        Ok(bytes)
    }

    /// Calls `f` with every record of segment `id` in order, checksums verified, until it
    /// returns `Break`. Records appended after the scan started are not visited; ranges found
    /// damaged at open are skipped.
    pub fn scan(
        &self,
        id: u64,
        mut f: impl FnMut(RecordPos, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), LogError> {
        let seg = self.segment(id)?;
        let end = seg.end.load(Ordering::Acquire);
        let file = seg.reader()?;
        let mut reader = SegmentReader::new(&file, end);
        let mut damaged = seg.damaged.iter().peekable();
        let mut offset = FILE_HEADER_LEN;
        while offset < end {
            if let Some(range) = damaged.next_if(|r| r.start <= offset) {
                offset = offset.max(range.end);
                continue;
            }
            let record = reader.record(id, offset).map_err(io_error(&seg.path))?;
            let payload = record.map_err(|bad| LogError::Corrupt {
                path: seg.path.clone(),
                offset,
                reason: bad.to_string(),
            })?;
            let pos = RecordPos {
                segment: id,
                offset,
                len: payload.len() as u32,
            };
            if f(pos, payload).is_break() {
                break;
            }
            offset += RECORD_HEADER_LEN + u64::from(pos.len);
        }
        Ok(())
    }

    /// Deletes sealed segment `id` and syncs the directory (retention). Refuses the active
    /// segment. Readers holding the file open may finish; later reads fail as unknown.
    pub fn delete_segment(&self, id: u64) -> Result<(), LogError> {
        let seg = {
            let mut set = self
                .segments
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if id == set.active {
                return Err(LogError::ActiveSegment { id });
            }
            set.map.remove(&id).ok_or(LogError::UnknownSegment { id })?
        };
        if let Err(e) = std::fs::remove_file(&seg.path) {
            let mut set = self
                .segments
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            set.map.insert(id, seg.clone());
            return Err(io_error(&seg.path)(e));
        }
        segment::sync_dir(&self.dir)
    }
}
