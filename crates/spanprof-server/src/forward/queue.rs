//! A forwarder's on-disk queue: the store's checksummed record log under
//! `DATA/forward/{name}/log/`, plus a `cursor` file naming the end of what the downstream
//! acknowledged. What the pipeline acknowledged survives restarts and outages; delivery is
//! at least once (a crash between an export's answer and the cursor write repeats it).
//!
//! Records are taken for export by signal, past records of the other signal (a mixed queue
//! of profiles and traces still fills whole exports), and several exports may be in flight:
//! they are acknowledged in any order. The cursor stays before the oldest record not yet
//! delivered, so a restart sends again what was delivered after it (downstream sees it
//! twice; profiles carry ids a receiver such as spanprof's store keeps once).

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

pub use crate::signal::Signal;

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

/// A pending record and where it is in its export's life.
#[derive(Debug, Clone, Copy)]
struct Slot {
    p: Pending,
    /// Part of an export in flight.
    taken: bool,
    /// Delivered (or dropped for good); it leaves once every older record did.
    done: bool,
}

struct State {
    /// In log order; delivered ones leave from the front.
    pending: VecDeque<Slot>,
    /// Records neither taken nor done.
    untaken: usize,
    /// Records not done.
    undone: usize,
    /// Payload bytes of the records not done.
    undone_bytes: u64,
    cursor: Cursor,
}

impl State {
    fn new(pending: VecDeque<Slot>, cursor: Cursor) -> State {
        let mut s = State {
            pending,
            untaken: 0,
            undone: 0,
            undone_bytes: 0,
            cursor,
        };
        s.recount();
        s
    }

    fn recount(&mut self) {
        self.undone = self.pending.iter().filter(|s| !s.done).count();
        self.untaken = self.pending.iter().filter(|s| !s.done && !s.taken).count();
        self.undone_bytes = self
            .pending
            .iter()
            .filter(|s| !s.done)
            .map(|s| u64::from(s.p.pos.len))
            .sum();
    }

    fn find(&mut self, pos: RecordPos) -> Option<&mut Slot> {
        let i = self.pending.binary_search_by(|s| s.p.pos.cmp(&pos)).ok()?;
        self.pending.get_mut(i)
    }
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
                    pending.push_back(Slot {
                        p: Pending {
                            pos,
                            signal,
                            since: now,
                        },
                        taken: false,
                        done: false,
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
            state: Mutex::new(State::new(pending, cursor)),
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
            state.untaken += 1;
            state.undone += 1;
            state.undone_bytes += u64::from(pos.len);
            state.pending.push_back(Slot {
                p: Pending {
                    pos,
                    signal: *signal,
                    since: now,
                },
                taken: false,
                done: false,
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
            let before = state.undone;
            state.pending.retain(|s| s.p.pos.segment != oldest.id);
            state.recount();
            dropped += (before - state.undone) as u64;
        }
        Ok(dropped)
    }

    /// The oldest record not delivered nor in an export in flight, if any.
    pub fn front(&self) -> Option<Pending> {
        let state = self.lock();
        if state.untaken == 0 {
            return None;
        }
        state
            .pending
            .iter()
            .find(|s| !s.taken && !s.done)
            .map(|s| s.p)
    }

    /// Records waiting to be delivered (in flight included).
    pub fn pending_records(&self) -> usize {
        self.lock().undone
    }

    /// Records waiting to be delivered and not in an export in flight.
    pub fn untaken_records(&self) -> usize {
        self.lock().untaken
    }

    /// Payload bytes of the records waiting to be delivered (in flight included).
    pub fn pending_bytes(&self) -> u64 {
        self.lock().undone_bytes
    }

    /// Bytes the queue may hold on disk.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of the queue's segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.log.total_bytes()
    }

    /// The oldest pending records of one signal, in a row: at most `max` records and,
    /// beyond the first, `max_bytes` payload bytes. They stay pending and untaken.
    pub fn peek(&self, max: usize, max_bytes: usize) -> Vec<Pending> {
        let state = self.lock();
        let mut out: Vec<Pending> = Vec::new();
        let mut bytes = 0usize;
        for p in state.pending.iter().filter(|s| !s.done).map(|s| &s.p) {
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

    /// Takes records for one export: the oldest untaken record's signal, and the untaken
    /// records of that signal after it (records of the other signal are passed over, and
    /// left for an export of their own), at most `max` records and, beyond the first,
    /// `max_bytes` payload bytes. They stay pending until [`DiskQueue::ack`], or
    /// [`DiskQueue::release`] gives them back.
    pub fn take(&self, max: usize, max_bytes: usize) -> Vec<Pending> {
        let mut state = self.lock();
        let max = max.max(1);
        // A bound on the records looked at, so that one signal far behind the other does
        // not make each take read the whole queue.
        let mut budget = max.saturating_mul(8).max(4096);
        let mut out: Vec<Pending> = Vec::new();
        let mut bytes = 0usize;
        let mut signal = None;
        for slot in state.pending.iter_mut() {
            if budget == 0 || out.len() >= max {
                break;
            }
            budget -= 1;
            if slot.taken || slot.done {
                continue;
            }
            let s = *signal.get_or_insert(slot.p.signal);
            if slot.p.signal != s {
                continue;
            }
            bytes += slot.p.pos.len as usize;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            slot.taken = true;
            out.push(slot.p);
        }
        state.untaken -= out.len();
        out
    }

    /// Gives taken records back, to be taken again (an export that was not sent).
    pub fn release(&self, records: &[Pending]) {
        let mut state = self.lock();
        for p in records {
            let untaken = match state.find(p.pos) {
                Some(slot) if slot.taken && !slot.done => {
                    slot.taken = false;
                    true
                }
                _ => false,
            };
            state.untaken += usize::from(untaken);
        }
    }

    /// The protobuf bytes of a pending record; an error when its segment was dropped since.
    pub fn read(&self, p: &Pending) -> Result<Vec<u8>, LogError> {
        let mut bytes = self.log.read(p.pos)?;
        bytes.drain(..1);
        Ok(bytes)
    }

    /// Marks `records` delivered (records dropped from a full queue meanwhile are passed
    /// over): persists the cursor, before the oldest record still pending, then deletes
    /// segments nothing pending needs.
    pub fn ack(&self, records: &[Pending]) -> std::io::Result<()> {
        let mut state = self.lock();
        for p in records {
            let Some(slot) = state.find(p.pos) else {
                continue;
            };
            if slot.done {
                continue;
            }
            let was_taken = slot.taken;
            slot.done = true;
            state.undone -= 1;
            state.undone_bytes -= u64::from(p.pos.len);
            if !was_taken {
                state.untaken -= 1;
            }
        }
        let mut last_done = None;
        while state.pending.front().is_some_and(|s| s.done) {
            last_done = state.pending.pop_front().map(|s| s.p.pos);
        }
        let cursor = match (state.pending.front(), last_done) {
            (Some(front), _) => Cursor {
                segment: front.p.pos.segment,
                offset: front.p.pos.offset,
            },
            (None, Some(last)) => Cursor {
                segment: last.segment,
                offset: last.offset + RECORD_HEADER_LEN + u64::from(last.len),
            },
            (None, None) => state.cursor,
        };
        if cursor > state.cursor {
            write_cursor(&self.dir, cursor)?;
            state.cursor = cursor;
        }
        let needed = state
            .pending
            .front()
            .map_or(self.log.active_segment(), |s| s.p.pos.segment);
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
        q.ack(&first).unwrap();
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        let rest = q.peek(10, 1 << 20);
        let bodies: Vec<Vec<u8>> = rest.iter().map(|p| q.read(p).unwrap()).collect();
        assert_eq!(bodies, vec![b"bb".to_vec(), b"ccc".to_vec()]);
        q.ack(&rest).unwrap();
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(q.pending_records(), 0);
    }

    /// A mixed queue fills exports per signal, past the other signal's records; exports are
    /// acknowledged in any order; the cursor stays before the oldest record not delivered,
    /// so a reopen sends again what is after it, and only that.
    #[test]
    fn takes_by_signal_and_acks_out_of_order() {
        let dir = tempfile::tempdir().unwrap();
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        for i in 0..4u8 {
            q.append(&[(Signal::Profiles, &[b'p', i]), (Signal::Traces, &[b't', i])])
                .unwrap();
        }
        let profiles = q.take(3, 1 << 20);
        let bodies: Vec<Vec<u8>> = profiles.iter().map(|p| q.read(p).unwrap()).collect();
        assert_eq!(
            bodies,
            [b"p\0".to_vec(), b"p\x01".to_vec(), b"p\x02".to_vec()]
        );
        // The oldest untaken is now a trace: the next export takes traces only.
        let traces = q.take(10, 1 << 20);
        assert_eq!(traces.len(), 4);
        assert!(traces.iter().all(|p| p.signal == Signal::Traces));
        let last = q.take(10, 1 << 20);
        assert_eq!(q.read(&last[0]).unwrap(), b"p\x03");
        assert!(q.take(10, 1 << 20).is_empty(), "everything is in flight");
        assert_eq!((q.pending_records(), q.untaken_records()), (8, 0));
        // The traces and the last profile are delivered first; the first profiles fail and
        // go back.
        q.ack(&traces).unwrap();
        q.ack(&last).unwrap();
        q.release(&profiles);
        assert_eq!((q.pending_records(), q.untaken_records()), (3, 3));
        drop(q);
        let (q, _) = DiskQueue::open(dir.path(), 1 << 30).unwrap();
        // From the oldest undelivered record on, the queue's first: the three profiles, and
        // what was delivered after them (sent again: at least once).
        assert_eq!(q.pending_records(), 8);
        let again = q.take(10, 1 << 20);
        q.ack(&again).unwrap();
        let rest = q.take(10, 1 << 20);
        q.ack(&rest).unwrap();
        assert_eq!(again.len() + rest.len(), 8);
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
