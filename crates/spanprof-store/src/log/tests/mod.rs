//! Unit tests of the record log; recovery from damage is in `recovery.rs`.

use std::fs;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::segment;
use super::*;

mod recovery;

pub(super) fn first(id: u64) -> Vec<u8> {
    format!("first record of segment {id}").into_bytes()
}

/// Record `i`: its index then bytes derived from it, 0 to ~3 KB long.
pub(super) fn payload(i: u64) -> Vec<u8> {
    let len = (i * 7919 % 3000) as usize;
    let mut p = i.to_le_bytes().to_vec();
    p.extend((0..len).map(|k| (i as usize * 31 + k * 7) as u8));
    p
}

pub(super) fn open(dir: &Path) -> (Log, RecoveryReport) {
    let cfg = LogConfig {
        dir: dir.to_path_buf(),
        sync: false,
    };
    Log::open(cfg, first).unwrap()
}

pub(super) fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(segment::file_name(id))
}

/// Every record of every segment, in log order.
pub(super) fn all_records(log: &Log) -> Vec<(RecordPos, Vec<u8>)> {
    let mut out = Vec::new();
    for seg in log.segments() {
        log.scan(seg.id, |pos, p| {
            out.push((pos, p.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
    }
    out
}

pub(super) fn flip(path: &Path, offset: u64) {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    file.read_exact_at(&mut b, offset).unwrap();
    file.write_all_at(&[b[0] ^ 0x40], offset).unwrap();
}

/// A log with segments 1, 2 (sealed) and 3 (active), `per_segment` records each.
pub(super) fn three_segments(dir: &Path, per_segment: u64) -> Vec<(RecordPos, Vec<u8>)> {
    let (log, _) = open(dir);
    let mut written = Vec::new();
    for i in 0..3 * per_segment {
        if i > 0 && i % per_segment == 0 {
            log.rotate().unwrap();
        }
        let p = payload(i);
        let pos = log.append(&[&p]).unwrap()[0];
        written.push((pos, p));
    }
    written
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Log>();
}

#[test]
fn round_trip_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let (log, report) = Log::open(LogConfig::new(dir.path()), first).unwrap();
    let expected = RecoveryReport {
        segments: 1,
        records: 1,
        ..Default::default()
    };
    assert_eq!(report, expected);
    assert_eq!(log.append(&[]).unwrap(), vec![]);
    let mut written = Vec::new();
    for batch in 0..60u64 {
        let payloads: Vec<Vec<u8>> = (0..batch % 5 + 1)
            .map(|k| payload(batch * 10 + k))
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let positions = log.append(&refs).unwrap();
        written.extend(positions.into_iter().zip(payloads));
        if batch % 10 == 9 {
            log.rotate().unwrap();
        }
    }
    let check = |log: &Log| {
        for (pos, p) in &written {
            assert_eq!(&log.read(*pos).unwrap(), p, "{pos:?}");
        }
        let mut expected = Vec::new();
        for seg in log.segments() {
            expected.push(first(seg.id));
            expected.extend(
                written
                    .iter()
                    .filter(|(pos, _)| pos.segment == seg.id)
                    .map(|w| w.1.clone()),
            );
            assert_eq!(fs::metadata(&seg.path).unwrap().len(), seg.bytes);
        }
        let scanned: Vec<Vec<u8>> = all_records(log).into_iter().map(|r| r.1).collect();
        assert_eq!(scanned, expected);
        let segments = log.segments();
        assert_eq!(
            segments.iter().map(|s| s.id).collect::<Vec<_>>(),
            (1..=7).collect::<Vec<_>>()
        );
        assert_eq!(
            segments.iter().map(|s| s.active).collect::<Vec<_>>(),
            [vec![false; 6], vec![true]].concat()
        );
        assert_eq!(
            log.total_bytes(),
            segments.iter().map(|s| s.bytes).sum::<u64>()
        );
        assert_eq!(log.active_bytes(), segments[6].bytes);
    };
    check(&log);
    drop(log);
    let (log, report) = open(dir.path());
    let records = written.len() as u64 + 7;
    assert_eq!(
        report,
        RecoveryReport {
            segments: 7,
            records,
            ..Default::default()
        }
    );
    check(&log);
}

#[test]
fn scan_stops_on_break() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    log.append(&[b"a", b"b", b"c"]).unwrap();
    let mut seen = Vec::new();
    log.scan(1, |_, p| {
        seen.push(p.to_vec());
        if p == b"a" {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(seen, vec![first(1), b"a".to_vec()]);
}

#[test]
fn delete_segment_refuses_the_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 2);
    let (log, _) = open(dir.path());
    let before = log.total_bytes();
    let size = fs::metadata(seg_path(dir.path(), 1)).unwrap().len();
    assert!(matches!(
        log.delete_segment(3),
        Err(LogError::ActiveSegment { id: 3 })
    ));
    assert!(matches!(
        log.delete_segment(9),
        Err(LogError::UnknownSegment { id: 9 })
    ));
    log.delete_segment(1).unwrap();
    assert!(!seg_path(dir.path(), 1).exists());
    assert_eq!(log.total_bytes(), before - size);
    assert!(matches!(
        log.read(written[0].0),
        Err(LogError::UnknownSegment { id: 1 })
    ));
    assert!(matches!(
        log.delete_segment(1),
        Err(LogError::UnknownSegment { id: 1 })
    ));
    drop(log);
    let (log, report) = open(dir.path());
    assert!(report.problems.is_empty());
    assert_eq!(
        log.segments().iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![2, 3]
    );
}

#[test]
fn oversized_records_and_bad_positions_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    let huge = vec![0u8; MAX_RECORD_LEN as usize + 1];
    let err = log.append(&[b"ok", &huge]).unwrap_err();
    assert!(
        matches!(err, LogError::RecordTooLarge { len, .. } if len == huge.len()),
        "{err}"
    );
    drop(huge);
    let pos = log.append(&[b"0123456789"]).unwrap()[0];
    let end = log.active_bytes();
    let bad = |offset, len| RecordPos {
        segment: 1,
        offset,
        len,
    };
    for p in [
        bad(0, 10),
        bad(end, 0),
        bad(u64::MAX, 10),
        bad(pos.offset, MAX_RECORD_LEN + 1),
    ] {
        assert!(
            matches!(log.read(p), Err(LogError::OutOfRange { .. })),
            "{p:?}"
        );
    }
    for p in [
        bad(pos.offset, 9),
        bad(pos.offset + 1, 4),
        bad(pos.offset + 2, 0),
    ] {
        assert!(
            matches!(log.read(p), Err(LogError::Corrupt { .. })),
            "{p:?}"
        );
    }
    let unknown = RecordPos { segment: 7, ..pos };
    assert!(matches!(
        log.read(unknown),
        Err(LogError::UnknownSegment { id: 7 })
    ));
}

#[test]
fn readers_run_alongside_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path()).0);
    let published: Arc<Mutex<Vec<(u64, RecordPos)>>> = Arc::default();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..600u64 {
                let p = payload(i);
                let pos = log.append(&[&p]).unwrap()[0];
                published.lock().unwrap().push((i, pos));
                if i % 97 == 96 {
                    log.rotate().unwrap();
                }
            }
            done.store(true, Ordering::Release);
        });
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let snapshot = published.lock().unwrap().clone();
                    for &(i, pos) in snapshot.iter().rev().take(50) {
                        assert_eq!(log.read(pos).unwrap(), payload(i));
                    }
                    let active = log.active_segment();
                    log.scan(active, |_, p| {
                        let i = u64::from_le_bytes(p[..8].try_into().unwrap_or_default());
                        assert!(p == first(active) || p == payload(i));
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(all_records(&log).len(), 600 + log.segments().len());
}
