//! Recovery: torn tails, damaged records, foreign files, and random damage.

use std::collections::HashSet;
use std::fs;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use proptest::prelude::*;

use super::super::segment::{self, RECORD_HEADER_LEN};
use super::super::*;
use super::{all_records, first, flip, open, seg_path, three_segments};

#[test]
fn torn_last_record_is_truncated_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 4);
    let (last_pos, _) = written.last().unwrap().clone();
    let path = seg_path(dir.path(), 3);
    let pristine = fs::read(&path).unwrap();
    assert_eq!(
        pristine.len() as u64,
        last_pos.offset + RECORD_HEADER_LEN + u64::from(last_pos.len)
    );
    for cut in last_pos.offset..pristine.len() as u64 {
        fs::write(&path, &pristine[..cut as usize]).unwrap();
        let (log, report) = open(dir.path());
        assert_eq!(
            report.truncated_bytes,
            cut - last_pos.offset,
            "cut at {cut}"
        );
        assert!(
            report.problems.is_empty(),
            "cut at {cut}: {:?}",
            report.problems
        );
        assert_eq!(report.records, 12 + 3 - 1);
        for (pos, p) in &written[..written.len() - 1] {
            assert_eq!(&log.read(*pos).unwrap(), p);
        }
        assert!(matches!(
            log.read(last_pos),
            Err(LogError::OutOfRange { .. })
        ));
        let pos = log.append(&[b"after recovery"]).unwrap()[0];
        assert_eq!(pos.offset, last_pos.offset);
        assert_eq!(log.read(pos).unwrap(), b"after recovery");
    }
}

#[test]
fn unfinished_rotation_is_undone_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    log.append(&[b"kept"]).unwrap();
    assert_eq!(log.rotate().unwrap(), 2);
    drop(log);
    let sealed = fs::read(seg_path(dir.path(), 1)).unwrap();
    let unfinished = fs::read(seg_path(dir.path(), 2)).unwrap();
    for cut in 0..unfinished.len() as u64 {
        for entry in fs::read_dir(dir.path()).unwrap() {
            fs::remove_file(entry.unwrap().path()).unwrap();
        }
        fs::write(seg_path(dir.path(), 1), &sealed).unwrap();
        fs::write(seg_path(dir.path(), 2), &unfinished[..cut as usize]).unwrap();
        let (log, report) = open(dir.path());
        let expected = RecoveryReport {
            segments: 1,
            records: 2,
            truncated_bytes: cut,
            ..Default::default()
        };
        assert_eq!(report, expected, "cut at {cut}");
        assert!(!seg_path(dir.path(), 2).exists());
        let records: Vec<Vec<u8>> = all_records(&log).into_iter().map(|r| r.1).collect();
        assert_eq!(records, vec![first(1), b"kept".to_vec()]);
        let pos = log.append(&[b"after"]).unwrap()[0];
        assert_eq!((pos.segment, pos.offset), (1, sealed.len() as u64));
        assert_eq!(log.rotate().unwrap(), 3, "ids are never reused");
    }
}

#[test]
fn damage_in_a_sealed_segment_is_reported_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 8);
    let (victim, _) = written[3].clone();
    let path = seg_path(dir.path(), 1);
    let pristine = fs::read(&path).unwrap();
    let active = seg_path(dir.path(), 3);
    let active_pristine = fs::read(&active).unwrap();
    // Every field of the record header, and the payload.
    let payload_end = RECORD_HEADER_LEN + u64::from(victim.len) - 1;
    for at in [0, 3, 4, 5, 7, 8, 11, 12, 13, payload_end] {
        fs::write(&path, &pristine).unwrap();
        fs::write(&active, &active_pristine).unwrap();
        flip(&path, victim.offset + at);
        let (log, report) = open(dir.path());
        assert_eq!(report.problems.len(), 1, "byte {at}: {:?}", report.problems);
        let problem = &report.problems[0];
        assert!(problem.contains("0000000000000001.seg"), "{problem}");
        assert!(
            problem.contains(&format!("offset {}", victim.offset)),
            "{problem}"
        );
        assert_eq!(
            report.damaged_bytes,
            RECORD_HEADER_LEN + u64::from(victim.len)
        );
        assert_eq!(report.truncated_bytes, 0);
        assert!(matches!(log.read(victim), Err(LogError::Corrupt { .. })));
        for (pos, p) in written.iter().filter(|w| w.0 != victim) {
            assert_eq!(&log.read(*pos).unwrap(), p);
        }
        let scanned: Vec<RecordPos> = all_records(&log).into_iter().map(|r| r.0).collect();
        assert_eq!(scanned.len(), 3 + written.len() - 1, "byte {at}");
        assert!(!scanned.contains(&victim));
        log.append(&[b"still appends"]).unwrap();
    }
}

#[test]
fn damage_at_the_end_of_a_sealed_segment_is_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 5);
    let (victim, _) = written[4].clone();
    let path = seg_path(dir.path(), 1);
    let len = fs::metadata(&path).unwrap().len();
    flip(&path, victim.offset + 20);
    let (log, report) = open(dir.path());
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].contains(&format!("offset {}", victim.offset)));
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(fs::metadata(&path).unwrap().len(), len);
    assert_eq!(all_records(&log).len(), 3 + written.len() - 1);
}

#[test]
fn damage_inside_the_active_segment_keeps_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 6);
    let (victim, _) = written[13].clone();
    assert_eq!(victim.segment, 3);
    flip(&seg_path(dir.path(), 3), victim.offset + 6);
    let (log, report) = open(dir.path());
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    for (pos, p) in written.iter().filter(|w| w.0 != victim) {
        assert_eq!(&log.read(*pos).unwrap(), p);
    }
    let pos = log.append(&[b"after"]).unwrap()[0];
    drop(log);
    let (log, again) = open(dir.path());
    assert_eq!(again.problems, report.problems);
    assert_eq!(log.read(pos).unwrap(), b"after");
}

#[test]
fn foreign_and_misnamed_files_are_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 3);
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(seg_path(dir.path(), 0xff), &garbage).unwrap();
    fs::write(seg_path(dir.path(), 2), &garbage).unwrap();
    fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
    fs::write(dir.path().join("ABC.seg"), b"").unwrap();
    fs::write(dir.path().join("00000000000000AB.seg"), b"").unwrap();
    fs::create_dir(seg_path(dir.path(), 0x77)).unwrap();
    let (log, report) = open(dir.path());
    let mut problems = report.problems.clone();
    problems.sort();
    assert_eq!(problems.len(), 5, "{problems:?}");
    for (problem, name) in problems.iter().zip([
        "0000000000000002.seg",
        "0000000000000077.seg",
        "00000000000000AB.seg",
        "00000000000000ff.seg",
        "ABC.seg",
    ]) {
        assert!(problem.contains(name), "{problem} should name {name}");
    }
    assert_eq!(log.active_segment(), 3);
    let ids: Vec<u64> = log.segments().iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1, 3]);
    for (pos, p) in &written {
        match log.read(*pos) {
            Ok(read) => assert_eq!(&read, p),
            Err(e) => assert!(pos.segment == 2 && matches!(e, LogError::UnknownSegment { id: 2 })),
        }
    }
    assert_eq!(fs::read(seg_path(dir.path(), 0xff)).unwrap(), garbage);
    assert_eq!(log.rotate().unwrap(), 0x100);
}

#[test]
fn missing_segments_are_a_normal_gap() {
    let dir = tempfile::tempdir().unwrap();
    let written = three_segments(dir.path(), 3);
    fs::remove_file(seg_path(dir.path(), 2)).unwrap();
    let (log, report) = open(dir.path());
    assert!(report.problems.is_empty());
    assert_eq!(report.segments, 2);
    for (pos, p) in &written {
        match pos.segment {
            2 => assert!(matches!(
                log.read(*pos),
                Err(LogError::UnknownSegment { id: 2 })
            )),
            _ => assert_eq!(&log.read(*pos).unwrap(), p),
        }
    }
}

#[test]
fn zero_length_and_zero_filled_segments() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path(), 2);
    // Newest: a rotation that crashed before writing anything.
    fs::write(seg_path(dir.path(), 5), b"").unwrap();
    let (log, report) = open(dir.path());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.truncated_bytes, log.active_segment()), (0, 3));
    assert!(!seg_path(dir.path(), 5).exists());
    drop(log);
    fs::write(seg_path(dir.path(), 6), vec![0; 4096]).unwrap();
    let (log, report) = open(dir.path());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.truncated_bytes, log.active_segment()), (4096, 3));
    assert_eq!(log.rotate().unwrap(), 7);
    drop(log);
    // Sealed and empty cannot come from a crash: reported, left alone.
    fs::write(seg_path(dir.path(), 2), b"").unwrap();
    let (log, report) = open(dir.path());
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].contains("0000000000000002.seg"));
    assert!(seg_path(dir.path(), 2).exists());
    let ids: Vec<u64> = log.segments().iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1, 3, 7]);
}

#[test]
fn a_copied_segment_does_not_pass_for_another() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path(), 2);
    fs::copy(seg_path(dir.path(), 1), seg_path(dir.path(), 2)).unwrap();
    let (_log, report) = open(dir.path());
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].contains("header names segment 0000000000000001"));
}

#[test]
fn a_newer_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path(), 2);
    let path = seg_path(dir.path(), 1);
    let mut header = segment::file_header(1);
    header[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = segment::crc32(&[&header[..20]]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&header, 0)
        .unwrap();
    let err = Log::open(LogConfig::new(dir.path()), first).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::UnsupportedVersion {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fs::read(&path).unwrap()[..24], header);
}

#[test]
fn a_damaged_version_field_is_damage_not_a_newer_format() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path(), 2);
    flip(&seg_path(dir.path(), 3), 9);
    let (log, report) = open(dir.path());
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].contains("file header checksum mismatch"));
    assert_eq!(log.active_segment(), 2);
}

/// Three segment files (name, bytes) and every payload in them, written once per test run.
struct Template {
    files: Vec<(String, Vec<u8>)>,
    payloads: HashSet<Vec<u8>>,
}

fn template() -> &'static Template {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let written = three_segments(dir.path(), 12);
        let files = (1..=3)
            .map(|id| {
                (
                    segment::file_name(id),
                    fs::read(seg_path(dir.path(), id)).unwrap(),
                )
            })
            .collect();
        let payloads = written
            .into_iter()
            .map(|w| w.1)
            .chain((1..=3).map(first))
            .collect();
        Template { files, payloads }
    })
}

fn bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), len)
}

proptest! {
    // Failures print their minimal input; no regression file is written into the crate.
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random bytes written anywhere (and files cut short) never panic the log, never
    /// produce a record that was not written, and leave it appendable.
    #[test]
    fn random_damage_never_panics_or_misreads(
        edits in prop::collection::vec((0usize..3, any::<u64>(), bytes(1..40)), 1..6),
        cut in prop::option::of((0usize..3, any::<u64>())),
    ) {
        let Template { files, payloads: known } = template();
        let dir = tempfile::tempdir().unwrap();
        let mut bytes: Vec<Vec<u8>> = files.iter().map(|f| f.1.clone()).collect();
        for (file, at, data) in &edits {
            let b = &mut bytes[*file];
            let at = (*at % (b.len() as u64 + 8)) as usize;
            let end = at + data.len();
            if end > b.len() {
                b.resize(end, 0);
            }
            b[at..end].copy_from_slice(data);
        }
        if let Some((file, at)) = cut {
            let b = &mut bytes[file];
            b.truncate((at % (b.len() as u64 + 1)) as usize);
        }
        for ((name, _), b) in files.iter().zip(&bytes) {
            fs::write(dir.path().join(name), b).unwrap();
        }
        let (log, report) = open(dir.path());
        let mut found = 0;
        for seg in log.segments() {
            log.scan(seg.id, |pos, p| {
                assert!(known.contains(p) || p == first(seg.id), "misread at {pos:?}");
                assert_eq!(log.read(pos).unwrap(), p);
                found += 1;
                ControlFlow::Continue(())
            }).unwrap();
        }
        prop_assert_eq!(found, report.records);
        let pos = log.append(&[b"appended"]).unwrap()[0];
        prop_assert_eq!(log.read(pos).unwrap(), b"appended".to_vec());
        drop(log);
        let (_, again) = open(dir.path());
        prop_assert_eq!(again.truncated_bytes, 0);
    }
}
