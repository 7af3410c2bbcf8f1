//! A forwarder's on-disk queue: the store's checksummed record log under
//! `DATA/forward/{name}/log/`, plus a `cursor` file naming the end of what the downstream
//! acknowledged. What the pipeline acknowledged survives restarts and outages; delivery is
//! at least once (a crash between an export's answer and the cursor write repeats it).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use spanprof_store::log::{Log, LogConfig, LogError, RecordPos};

/// Bytes of a record header in the log (magic, length, crc).
const RECORD_HEADER_LEN: u64 = 12;
/// The payload of each segment's first record; it carries nothing to send.
const SEGMENT_MARKER: u8 = 0;

/// What a queued record holds; its first payload byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// An OTLP `ProfilesData` (same wire layout as `ExportProfilesServiceRequest`).
    Profiles = 1,
    /// An OTLP `ExportTraceServiceRequest`.
    Traces = 2,
}

impl Signal {
    fn from_byte(b: u8) -> Option<Signal> {
        match b {
            1 => Some(Signal::Profiles),
            2 => Some(Signal::Traces),
            _ => None,
        }
    }

    /// `profiles` or `traces`, for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Profiles => "profiles",
            Signal::Traces => "traces",
        }
    }
}

/// A record waiting to be delivered.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    /// Where it is in the log.
    pub pos: RecordPos,
    /// What it holds.
    pub signal: Signal,
    /// When it was queued (or the queue opened, for records found on disk).
    pub since: Instant,
}

/// Everything after `offset` in segment `segment`, and every later segment, is undelivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Cursor {
    segment: u64,
    offset: u64,
}

struct State {
    pending: VecDeque<Pending>,
    cursor: Cursor,
}

/// The durable queue of one forwarder. `Send + Sync`.
pub struct DiskQueue {
    log: Log,
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    state: Mutex<State>,
}

impl DiskQueue {
    /// Opens (or creates) the queue in `dir`, holding at most `max_bytes` bytes on disk.
    /// Returns it with the log's recovery problems (damage skipped), one line each.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<(DiskQueue, Vec<String>), LogError> {
        let (log, report) = Log::open(LogConfig::new(dir.join("log")), |_| vec![SEGMENT_MARKER])?;
        let cursor = read_cursor(&dir.join("cursor"));
        let now = Instant::now();
        let mut pending = VecDeque::new();
        for seg in log.segments() {
            if seg.id < cursor.segment {
                if !seg.active {
                    log.delete_segment(seg.id)?;
                }
                continue;
            }
            log.scan(seg.id, |pos, payload| {
                let after_cursor = (pos.segment, pos.offset) >= (cursor.segment, cursor.offset);
                let signal = payload.first().copied().and_then(Signal::from_byte);
                if let (true, Some(signal)) = (after_cursor, signal) {
                    pending.push_back(Pending {
                        pos,
                        signal,
                        since: now,
                    });
                }
                ControlFlow::Continue(())
            })?;
        }
        let queue = DiskQueue {
            log,
            dir: dir.to_owned(),
            max_bytes,
            segment_bytes: (max_bytes / 8).clamp(1 << 20, 64 << 20),
            state: Mutex::new(State { pending, cursor }),
        };
        Ok((queue, report.problems))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `records` durably (one `fdatasync`), then drops the oldest segments while the
    /// queue is over its size. Returns how many undelivered records were dropped.
    pub fn append(&self, records: &[(Signal, &[u8])]) -> Result<u64, LogError> {
        let payloads: Vec<Vec<u8>> = records
            .iter()
            .map(|(signal, bytes)| {
                let mut p = Vec::with_capacity(1 + bytes.len());
                p.push(*signal as u8);
                p.extend_from_slice(bytes);
                p
            })
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let mut state = self.lock();
        let positions = self.log.append(&refs)?;
        let now = Instant::now();
        for (pos, (signal, _)) in positions.into_iter().zip(records) {
            state.pending.push_back(Pending {
                pos,
                signal: *signal,
                since: now,
            });
        }
        // The records are durable and pending from here: what follows failing does not fail
        // the append (its requests would be sent again, and queued twice). The active segment
        // grows on, and the next append tries again.
        let rotate = || {
            let rotated = self.log.rotate();
            if let Err(e) = &rotated {
                tracing::warn!(dir = %self.dir.display(), error = %e, "forward queue: starting a new segment failed; the current one takes more");
            }
            rotated.is_ok()
        };
        if self.log.active_bytes() > self.segment_bytes {
            rotate();
        }
        let (mut dropped, mut sealed) = (0, false);
        while self.log.total_bytes() > self.max_bytes {
            let Some(oldest) = self.log.segments().first().cloned() else {
                break;
            };
            if oldest.active {
                // Everything is in one segment: seal it so it can go (once: a new, empty
                // segment over the size is as small as the queue gets).
                if sealed || !rotate() {
                    break;
                }
                sealed = true;
                continue;
            }
            if let Err(e) = self.log.delete_segment(oldest.id) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "forward queue: deleting its oldest segment failed; it stays over its size");
                break;
            }
            let before = state.pending.len();
            state.pending.retain(|p| p.pos.segment != oldest.id);
            dropped += (before - state.pending.len()) as u64;
        }
        Ok(dropped)
    }

    /// The oldest pending record, if any.
    pub fn front(&self) -> Option<Pending> {
        self.lock().pending.front().copied()
    }

    /// Records waiting to be delivered.
    pub fn pending_records(&self) -> usize {
        self.lock().pending.len()
    }

    /// Bytes of the queue's segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.log.total_bytes()
    }

    /// The oldest pending records of one signal: at most `max` records and, beyond the first,
    /// `max_bytes` payload bytes.
    pub fn peek(&self, max: usize, max_bytes: usize) -> Vec<Pending> {
        let state = self.lock();
        let mut out: Vec<Pending> = Vec::new();
        let mut bytes = 0usize;
        for p in &state.pending {
            if out.len() >= max.max(1) || out.first().is_some_and(|f| f.signal != p.signal) {
                break;
            }
            bytes += p.pos.len as usize;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(*p);
        }
        out
    }

    /// The protobuf bytes of a pending record; an error when its segment was dropped since.
    pub fn read(&self, p: &Pending) -> Result<Vec<u8>, LogError> {
        let mut bytes = self.log.read(p.pos)?;
        bytes.drain(..1);
        Ok(bytes)
    }

    /// Marks everything up to and including `last` delivered: persists the cursor, then
    /// deletes segments nothing pending needs.
    pub fn ack(&self, last: RecordPos) -> std::io::Result<()> {
        let mut state = self.lock();
        while state.pending.front().is_some_and(|p| p.pos <= last) {
            state.pending.pop_front();
        }
        let cursor = Cursor {
            segment: last.segment,
            offset: last.offset + RECORD_HEADER_LEN + u64::from(last.len),
        };
        if cursor > state.cursor {
            write_cursor(&self.dir, cursor)?;
            state.cursor = cursor;
        }
        let needed = state
            .pending
            .front()
            .map_or(self.log.active_segment(), |p| p.pos.segment);
        for seg in self.log.segments() {
            if seg.id < needed && !seg.active {
                if let Err(e) = self.log.delete_segment(seg.id) {
                    tracing::warn!(error = %e, "deleting a delivered forward queue segment");
                }
            }
        }
        Ok(())
    }
}

fn read_cursor(path: &Path) -> Cursor {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Cursor::default();
    };
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(segment)), Some(Ok(offset))) => Cursor { segment, offset },
        _ => {
            tracing::warn!(path = %path.display(), "unreadable forward cursor; resending the queue");
            Cursor::default()
        }
    }
}

/// Replaces the cursor file atomically and durably.
fn write_cursor(dir: &Path, c: Cursor) -> std::io::Result<()> {
    crate::durable::replace(
        dir,
        "cursor",
        format!("{} {}\n", c.segment, c.offset).as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_and_acks_advance() {
        let dir = tempfile::tempdir().unwrap();
        let (q, problems) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        assert!(problems.is_empty());
        q.append(&[(Signal::Traces, b"a"), (Signal::Profiles, b"bb")])
            .unwrap();
        q.append(&[(Signal::Profiles, b"ccc")]).unwrap();
        let first = q.peek(10, 1 << 20);
        assert_eq!(first.len(), 1, "one signal per batch");
        assert_eq!(q.read(&first[0]).unwrap(), b"a");
        q.ack(first[0].pos).unwrap();
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        let rest = q.peek(10, 1 << 20);
        let bodies: Vec<Vec<u8>> = rest.iter().map(|p| q.read(p).unwrap()).collect();
        assert_eq!(bodies, vec![b"bb".to_vec(), b"ccc".to_vec()]);
        q.ack(rest[1].pos).unwrap();
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(q.pending_records(), 0);
    }

    #[test]
    fn a_full_queue_drops_the_oldest() {
        let dir = tempfile::tempdir().unwrap();
        // Segments are at least 1 MiB: a 3 MiB bound holds about two of them.
        let (q, _) = DiskQueue::open(dir.path(), 3 << 20).unwrap();
        let record = vec![7u8; 600 << 10];
        let mut dropped = 0;
        for _ in 0..12 {
            dropped += q.append(&[(Signal::Profiles, &record)]).unwrap();
        }
        assert!(dropped > 0);
        assert!(q.disk_bytes() <= 3 << 20);
        assert_eq!(q.pending_records() as u64 + dropped, 12);
    }

    /// A queue smaller than an empty segment (forwarders refuse such a size; the queue
    /// must not hang on one anyway) drops what it cannot hold and returns: it spun forever,
    /// sealing and deleting empty segments.
    #[test]
    fn a_queue_smaller_than_a_segment_drops_and_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (q, _) = DiskQueue::open(dir.path(), 0).unwrap();
        let dropped = q.append(&[(Signal::Traces, b"span".as_slice())]).unwrap();
        assert_eq!((dropped, q.pending_records()), (1, 0));
        let dropped = q.append(&[(Signal::Traces, b"span".as_slice())]).unwrap();
        assert_eq!((dropped, q.pending_records()), (1, 0));
    }

    /// Starting a new segment after an append (here its file name is taken; on a full disk
    /// its first record cannot be written) does not fail the append, whose records are
    /// durable: its requests would be sent again, and queued twice. A later append starts it.
    #[test]
    fn a_failed_new_segment_does_not_fail_the_append() {
        let dir = tempfile::tempdir().unwrap();
        // Segments of 1 MiB.
        let (q, _) = DiskQueue::open(dir.path(), 8 << 20).unwrap();
        std::fs::create_dir(dir.path().join("log/0000000000000002.seg")).unwrap();
        let record = vec![7u8; 600 << 10];
        for _ in 0..4 {
            assert_eq!(q.append(&[(Signal::Profiles, &record)]).unwrap(), 0);
        }
        assert_eq!(q.pending_records(), 4);
        assert!(dir.path().join("log/0000000000000003.seg").is_file());
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 8 << 20).unwrap();
        assert_eq!(q.pending_records(), 4);
        assert_eq!(q.read(&q.peek(1, 1 << 20)[0]).unwrap(), record);
    }
}
