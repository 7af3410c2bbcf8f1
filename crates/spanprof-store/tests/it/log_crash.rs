//! The crash test of the record log: a child process (this test binary, re-executed) appends
//! records and rotates segments without pause and prints the sequence number of each record
//! only after `append` returned; the parent kills it with SIGKILL at moments it picks at
//! random among the child's own events (as it starts opening the log, or after its n-th
//! acknowledgement, while the next append runs), reopens
//! the log and checks that every acknowledged record is there, intact, in order, that nothing
//! but a torn tail was found wrong, and that appends continue.
//!
//! Reproduce a run with `SPANPROF_LOG_CRASH_SEED=<seed printed by the failing run>`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::ControlFlow;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use spanprof_store::log::{Log, LogConfig};

const TEST_NAME: &str = "log_keeps_acknowledged_records_through_sigkill";
/// Set in the child: the log directory. Its presence turns the test into the writer loop.
const CHILD_ENV: &str = "SPANPROF_LOG_CRASH_CHILD";
const ROUND_ENV: &str = "SPANPROF_LOG_CRASH_ROUND";
const SEED_ENV: &str = "SPANPROF_LOG_CRASH_SEED";
const ROUNDS: u64 = 45;
/// The child rotates after this many appends.
const ROTATE_EVERY: u64 = 7;
/// The parent deletes older segments after checking them (retention), keeping this many, so
/// every reopen verifies about the same number of bytes.
const KEEP_SEGMENTS: usize = 4;
/// Sequence numbers are `round << 32 | n`; the parent's own appends set this bit in `n`.
const PARENT_BIT: u64 = 1 << 31;
const RECORD_TAG: &[u8; 4] = b"REC:";

/// xorshift64*: reproducible from the printed seed, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn first_record(id: u64) -> Vec<u8> {
    format!("segment {id}").into_bytes()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `REC: ‖ seq u64 ‖ body (len bytes derived from seq) ‖ fnv1a of all before u64`.
fn record(seq: u64, len: usize) -> Vec<u8> {
    let mut p = RECORD_TAG.to_vec();
    p.extend_from_slice(&seq.to_le_bytes());
    let mut body = Rng::new(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    p.extend((0..len).map(|_| body.next() as u8));
    let hash = fnv1a(&p);
    p.extend_from_slice(&hash.to_le_bytes());
    p
}

/// The sequence number of an intact record made by [`record`].
fn check_record(p: &[u8]) -> Option<u64> {
    if p.len() < 20 || !p.starts_with(RECORD_TAG) {
        return None;
    }
    let (data, hash) = p.split_at(p.len() - 8);
    let seq = u64::from_le_bytes(data[4..12].try_into().unwrap());
    (fnv1a(data).to_le_bytes() == hash).then_some(seq)
}

#[test]
fn log_keeps_acknowledged_records_through_sigkill() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let round: u64 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
        let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
        return write_until_killed(Path::new(&dir), round, seed);
    }
    let seed = match std::env::var(SEED_ENV) {
        Ok(seed) => seed.parse().unwrap(),
        Err(_) => SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64,
    };
    eprintln!("{SEED_ENV}={seed}");
    let mut rng = Rng::new(seed);
    let dir = tempfile::Builder::new()
        .prefix("log-crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let started = Instant::now();
    let mut acked = BTreeSet::new();
    let mut total_acked = 0;
    let (mut truncated_rounds, mut truncated_bytes, mut early_kills, mut deleted) = (0, 0, 0, 0);
    for round in 1..=ROUNDS {
        let mut child = spawn_child(dir.path(), round, seed);
        let (acks, stderr) = collect_output(&mut child);
        let mut round_acks = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let next = || acks.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        if rng.below(5) == 0 {
            // Kill it as it starts to open and recover the log.
            early_kills += 1;
            loop {
                match next() {
                    Ok(Event::Opening) => break,
                    Ok(Event::Ack(seq)) => round_acks.push(seq),
                    Err(_) => {
                        child.kill().unwrap();
                        child.wait().unwrap();
                        panic!(
                            "round {round}: the child did not start opening the log within 10 s; its stderr:\n{}",
                            stderr.join().unwrap()
                        );
                    }
                }
            }
        } else {
            // Kill it after its `want`-th acknowledgement: it appends without pause, so the
            // kill lands in the next append or rotation.
            let want = 1 + rng.below(30) as usize;
            while round_acks.len() < want {
                match next() {
                    Ok(Event::Opening) => {}
                    Ok(Event::Ack(seq)) => round_acks.push(seq),
                    Err(_) => break,
                }
            }
            if round_acks.len() < want {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!(
                    "round {round}: the child acknowledged {} of {want} records within 10 s; \
                     its stderr:\n{}",
                    round_acks.len(),
                    stderr.join().unwrap()
                );
            }
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        // The pipe closes when the child is gone: whatever it printed before dying arrives.
        round_acks.extend(acks.iter().filter_map(|e| match e {
            Event::Ack(seq) => Some(seq),
            Event::Opening => None,
        }));
        let stderr = stderr.join().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "round {round}: the child ended on its own ({status}); its stderr:\n{stderr}"
        );
        total_acked += round_acks.len();
        acked.extend(round_acks);

        let (log, report) = Log::open(LogConfig::new(dir.path()), first_record).unwrap();
        assert!(
            report.problems.is_empty(),
            "round {round}: {:?}",
            report.problems
        );
        if report.truncated_bytes > 0 {
            truncated_rounds += 1;
            truncated_bytes += report.truncated_bytes;
        }
        let found = verify_log(&log, round);
        assert_eq!(found.len() as u64 + report.segments as u64, report.records);
        let missing: Vec<_> = acked.difference(&found).collect();
        assert!(
            missing.is_empty(),
            "round {round}: acknowledged but lost: {missing:x?}"
        );

        let seq = round << 32 | PARENT_BIT;
        let payload = record(seq, rng.below(2000) as usize);
        let pos = log.append(&[&payload]).unwrap()[0];
        assert_eq!(log.read(pos).unwrap(), payload);
        acked.insert(seq);
        deleted += retain_newest(&log, &mut acked);
    }
    let (log, report) = Log::open(LogConfig::new(dir.path()), first_record).unwrap();
    let found = verify_log(&log, ROUNDS);
    assert!(acked.is_subset(&found));
    eprintln!(
        "{ROUNDS} kills ({early_kills} during startup) in {:.1} s: {total_acked} records \
         acknowledged, {} of them still retained, {} in the log, {} segments ({deleted} \
         deleted); torn tails cut in {truncated_rounds} rounds ({truncated_bytes} bytes)",
        started.elapsed().as_secs_f64(),
        acked.len(),
        found.len(),
        report.segments,
    );
}

/// Deletes all but the newest [`KEEP_SEGMENTS`] segments; their records leave `acked`.
/// Returns how many segments were deleted.
fn retain_newest(log: &Log, acked: &mut BTreeSet<u64>) -> usize {
    let segments = log.segments();
    let old = &segments[..segments.len().saturating_sub(KEEP_SEGMENTS)];
    for seg in old {
        log.scan(seg.id, |_, p| {
            if let Some(seq) = check_record(p) {
                acked.remove(&seq);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        log.delete_segment(seg.id).unwrap();
    }
    old.len()
}

fn spawn_child(dir: &Path, round: u64, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            crate::libtest_name(module_path!(), TEST_NAME).as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(ROUND_ENV, round.to_string())
        .env(SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the child prints on stdout, in order.
enum Event {
    /// It is about to open (and recover) the log.
    Opening,
    /// The record with this sequence number was appended.
    Ack(u64),
}

/// The child's events as it prints them, and its whole stderr once it ends.
fn collect_output(child: &mut Child) -> (mpsc::Receiver<Event>, thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    thread::spawn(move || {
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap_or(0) > 0 {
            // A line cut short by the kill was not acknowledged.
            let event = match line.strip_suffix('\n') {
                Some("opening") => Some(Event::Opening),
                Some(l) => l
                    .strip_prefix("ack ")
                    .map(|s| Event::Ack(s.parse().unwrap())),
                None => None,
            };
            if let Some(event) = event {
                tx.send(event).unwrap();
            }
            line.clear();
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let stderr = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    (rx, stderr)
}

/// Checks every record of the log (first records, intact test records, sequence numbers
/// strictly increasing in log order and none from a round after `round`); returns their
/// sequence numbers.
fn verify_log(log: &Log, round: u64) -> BTreeSet<u64> {
    let mut seqs = Vec::new();
    for seg in log.segments() {
        let mut index = 0;
        log.scan(seg.id, |pos, p| {
            if index == 0 {
                assert_eq!(p, first_record(seg.id), "{pos:?}");
            } else {
                let seq = check_record(p).unwrap_or_else(|| panic!("misread record {pos:?}"));
                assert!(
                    seq >> 32 <= round,
                    "{pos:?}: sequence {seq:x} from the future"
                );
                if let Some(&last) = seqs.last() {
                    assert!(seq > last, "{pos:?}: {seq:x} after {last:x}");
                }
                seqs.push(seq);
            }
            index += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    }
    seqs.into_iter().collect()
}

/// The child: appends batches of varied sizes forever, rotating every few appends, printing
/// `ack <seq>` after each append returned. Ends only when killed (or after a minute, or when
/// the parent is gone).
fn write_until_killed(dir: &Path, round: u64, seed: u64) {
    let mut stdout = std::io::stdout().lock();
    // On a line of its own: libtest has printed "test <name> ... " without a newline.
    if writeln!(stdout, "\nopening")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return;
    }
    let (log, _) = Log::open(LogConfig::new(dir), first_record).expect("child: open");
    let mut rng = Rng::new(seed ^ round.wrapping_mul(0x9e37_79b9));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seq = round << 32;
    for n in 1.. {
        let batch = if rng.below(4) == 0 {
            1 + rng.below(8)
        } else {
            1
        };
        let payloads: Vec<(u64, Vec<u8>)> = (0..batch)
            .map(|_| {
                seq += 1;
                // Mostly small, now and then large enough for a write the kill can cut.
                let len = match rng.below(32) {
                    0 => rng.below(300_000),
                    _ => rng.below(2_000),
                };
                (seq, record(seq, len as usize))
            })
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.1.as_slice()).collect();
        log.append(&refs).expect("child: append");
        for (seq, _) in &payloads {
            if writeln!(stdout, "ack {seq}")
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return;
            }
        }
        if n % ROTATE_EVERY == 0 {
            log.rotate().expect("child: rotate");
        }
        if Instant::now() > deadline {
            return;
        }
    }
}
