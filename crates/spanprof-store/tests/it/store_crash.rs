//! Crash safety of the store: a child process ingests continuously and is killed with SIGKILL
//! at random moments, many times; after every reopen each acknowledged profile is present
//! with its exact samples, and the store keeps accepting data.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use spanprof_format::otlp::Resource;
use spanprof_format::pprof::{self, Function, Label, Line, Location, Sample, ValueType};
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::LinkConfig;
use spanprof_store::store::{Selection, Store, StoreConfig};

const CHILD_ENV: &str = "SPANPROF_STORE_CRASH_CHILD";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn span_of(seq: u64) -> [u8; 8] {
    (seq | 1 << 62).to_be_bytes()
}

/// Profile `seq`: three samples linked to span `seq`, values derived from `seq`.
fn profile(seq: u64) -> spanprof_format::otlp::ProfilesData {
    let strings: Vec<String> = [
        "",
        "cpu",
        "nanoseconds",
        "main.work",
        "main.go",
        "span_id",
        "trace_id",
        TRACE,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([spanprof_format::link::to_hex(&span_of(seq))])
    .collect();
    let p = pprof::Profile {
        sample_type: vec![ValueType { r#type: 1, unit: 2 }],
        period_type: Some(ValueType { r#type: 1, unit: 2 }),
        period: 10_000_000,
        time_nanos: 1_700_000_000_000_000_000 + (seq % 1_000_000) as i64 * 1_000_000_000,
        duration_nanos: 1_000_000_000,
        function: vec![Function {
            id: 1,
            name: 3,
            system_name: 3,
            filename: 4,
            start_line: 1,
        }],
        location: (1..=3)
            .map(|i| Location {
                id: i,
                line: vec![Line {
                    function_id: 1,
                    line: i as i64,
                    column: 0,
                }],
                ..Default::default()
            })
            .collect(),
        sample: (1..=3)
            .map(|i| Sample {
                location_id: vec![i],
                value: vec![(seq as i64 + 1) * i as i64],
                label: vec![
                    Label {
                        key: 5,
                        str: 8,
                        ..Default::default()
                    },
                    Label {
                        key: 6,
                        str: 7,
                        ..Default::default()
                    },
                ],
            })
            .collect(),
        string_table: strings,
        ..Default::default()
    };
    pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default()))
        .unwrap()
        .0
}

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut cfg = StoreConfig::new(dir);
    cfg.segment_max_bytes = 16 << 10; // rotate often: kills land during rotations too
    cfg
}

/// [`config`] with 2 KiB segments: a few profiles each, so ingest rotates and seals often.
fn small_segments(dir: &std::path::Path) -> StoreConfig {
    let mut cfg = config(dir);
    cfg.segment_max_bytes = 2048;
    cfg
}

/// The writer: ingest forever, announcing each profile only after ingest returned.
fn child(dir: &str, start: u64) -> ! {
    let (store, _) = Store::open(config(dir.as_ref())).expect("child opens the store");
    let mut out = std::io::stdout().lock();
    for seq in start.. {
        store
            .ingest(&[&profile(seq)], Vec::new())
            .expect("child ingest");
        use std::io::Write;
        writeln!(out, "acked {seq}")
            .and_then(|()| out.flush())
            .expect("child stdout");
    }
    unreachable!()
}

#[test]
fn acknowledged_profiles_survive_kill_9() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (dir, start) = spec.split_once(',').expect("DIR,START");
        child(dir, start.parse().expect("start"));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let mut rng = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    for round in 0..15 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &crate::libtest_name(module_path!(), "acknowledged_profiles_survive_kill_9"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{},{next}", dir.path().display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(seq) = line.strip_prefix("acked ") {
                    let _ = tx.send(seq.parse::<u64>().unwrap());
                }
            }
        });
        // Let it ingest a random while (after its first acknowledgement), then SIGKILL.
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child acknowledged nothing within 30 s");
        acked.push(first);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let deadline = Instant::now() + Duration::from_millis(20 + rng % 300);
        while let Ok(seq) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            acked.push(seq);
            if Instant::now() >= deadline {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        acked.extend(rx.try_iter());

        let (store, report) = Store::open(config(dir.path()))
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        assert!(
            report.problems.is_empty(),
            "round {round}: {:?}",
            report.problems
        );
        for &seq in &acked {
            let sel = Selection {
                span_ids: vec![span_of(seq)],
                ..Default::default()
            };
            let (tree, _) = store.flame_graph(&sel).unwrap();
            assert_eq!(
                tree.total(),
                6 * (seq + 1),
                "round {round}: acknowledged profile {seq} lost or damaged"
            );
        }
        // The reopened store takes new data at once.
        let probe = 1u64 << 40;
        store
            .ingest(&[&profile(probe - round)], Vec::new())
            .unwrap();
        // Skip past anything the killed child may have stored without announcing it.
        next = acked.iter().max().map_or(0, |m| m + 1_000);
    }
    assert!(
        acked.len() >= 15,
        "only {} acknowledged profiles over all rounds",
        acked.len()
    );
}

/// One store per directory: a second open is refused with a message naming the directory and
/// its lock file, and succeeds once the first store is gone. (A SIGKILLed holder releases the
/// lock with its process: the test above reopens after every kill.)
#[test]
fn a_directory_in_use_is_refused_until_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = Store::open(config(dir.path())).unwrap();
    let one = first.ingest(&[&profile(1)], Vec::new()).unwrap().samples;
    let err = match Store::open(config(dir.path())) {
        Ok(_) => panic!("a second store opened a directory in use"),
        Err(e) => e,
    };
    assert!(
        matches!(err, spanprof_store::store::StoreError::Locked { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&dir.path().display().to_string())
            && message.contains("in use by another spanprof process")
            && message.contains(spanprof_store::store::LOCK_FILE),
        "{message}"
    );
    // The refused open touched nothing: the first store still works.
    first.ingest(&[&profile(2)], Vec::new()).unwrap();
    drop(first);
    let (again, report) = Store::open(config(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(again.stats().samples, 2 * one);
}

/// Segments filled by ingest are sealed in the background: every answer stays complete while
/// their index files are written (each span's flame graph right after its ingest, across many
/// rotations), and once the store is closed every sealed segment has its index file, so a
/// reopen replays only the active segment.
#[test]
fn segments_sealed_in_the_background_answer_throughout_and_leave_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(small_segments(dir.path())).unwrap();
    let mut samples = 0;
    for seq in 0..300u64 {
        samples += store.ingest(&[&profile(seq)], Vec::new()).unwrap().samples;
        // The newest profile (maybe in a segment being sealed right now) and an old one.
        for s in [seq, seq / 2] {
            let sel = Selection {
                span_ids: vec![span_of(s)],
                ..Default::default()
            };
            assert_eq!(store.flame_graph(&sel).unwrap().0.total(), 6 * (s + 1));
        }
        assert_eq!(store.stats().samples, samples, "after profile {seq}");
    }
    let segments = store.stats().segments;
    assert!(
        segments > 10,
        "only {segments} segments: no rotation to test"
    );
    drop(store);
    let indexes = std::fs::read_dir(dir.path().join("index"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "idx"))
        })
        .count();
    assert_eq!(indexes, segments - 1, "one index file per sealed segment");
    let (store, report) = Store::open(small_segments(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(store.stats().samples, samples);
    let per_segment = 300 / segments as u64 + 2;
    assert!(
        report.records <= per_segment + 1,
        "{} records replayed: sealed segments were replayed, not read from their index",
        report.records
    );
}

/// Index files of an older format version (a store written by an older build) are not read
/// as if they were current: each such segment is replayed from the log, every answer stays
/// complete, they are counted as rebuilt (an upgrade, not damage), and the index is written
/// again, so the next open reads it. A file of no version of ours is damage, named.
#[test]
fn index_files_of_an_older_version_are_rebuilt_from_their_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(small_segments(dir.path())).unwrap();
    let mut samples = 0;
    for seq in 0..200u64 {
        samples += store.ingest(&[&profile(seq)], Vec::new()).unwrap().samples;
    }
    drop(store);
    let indexes: Vec<_> = std::fs::read_dir(dir.path().join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    assert!(indexes.len() > 3, "only {} sealed segments", indexes.len());
    for (i, path) in indexes.iter().enumerate() {
        let mut bytes = std::fs::read(path).unwrap();
        let magic = if i == 0 { b"NOTANIDX" } else { b"SPANIDX4" };
        bytes[..8].copy_from_slice(magic);
        std::fs::write(path, bytes).unwrap();
    }
    let (store, report) = Store::open(small_segments(dir.path())).unwrap();
    assert_eq!(report.rebuilt_indexes, indexes.len() - 1);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let name = indexes[0].file_name().unwrap().to_str().unwrap();
    assert!(
        report.problems[0].contains(name) && report.problems[0].contains("not a segment index"),
        "{:?}",
        report.problems
    );
    assert_eq!(store.stats().samples, samples);
    for s in 0..200u64 {
        let sel = Selection {
            span_ids: vec![span_of(s)],
            ..Default::default()
        };
        assert_eq!(store.flame_graph(&sel).unwrap().0.total(), 6 * (s + 1));
    }
    drop(store);
    let (_, report) = Store::open(small_segments(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.rebuilt_indexes, 0);
}

/// A file where the store's directory should be: refused saying so (not "File exists"), and
/// the file is left as it was.
#[test]
fn a_file_given_as_the_directory_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "keep me").unwrap();
    let err = match Store::open(config(&file)) {
        Ok(_) => panic!("a store opened on a file"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("not-a-dir") && err.contains("a file, not a directory"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}
