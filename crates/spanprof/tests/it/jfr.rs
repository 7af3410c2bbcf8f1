//! JFR on the command line: `convert`, `inspect`, `flame` and `import` read recordings
//! (gzipped or not) with `--labels FILE`, as Pyroscope's own conversion reads them
//! (testdata/jfr: async-profiler recordings with its expected output), and refuse bad ones
//! with exit 2 and a message that names the problem.

use spanprof_testkit as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use spanprof_format::{gzip, pprof};
use support::{scratch_dir, spanprof};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/jfr")
        .join(name)
}

fn gunzip_file(name: &str) -> Vec<u8> {
    gzip::gunzip(&std::fs::read(testdata(name)).unwrap(), 64 << 20).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = scratch_dir().join("jfr-cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `frame:line;…` root first → values, from a pprof.
fn stacks(p: &pprof::Profile) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for s in &p.sample {
        let frames: Vec<String> = s
            .location_id
            .iter()
            .rev()
            .map(|&id| {
                let l = p.location.iter().find(|l| l.id == id).unwrap();
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == l.line[0].function_id)
                    .unwrap();
                format!("{}:{}", p.string_table[f.name as usize], l.line[0].line)
            })
            .collect();
        *out.entry(frames.join(";")).or_insert(0) += s.value[0];
    }
    out
}

/// Pyroscope's expected collapsed output (first value of each line).
fn expected(name: &str) -> BTreeMap<String, i64> {
    let text = String::from_utf8(gunzip_file(name)).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (stack, values) = line.rsplit_once(" [").unwrap();
        let v: i64 = values
            .trim_end_matches(']')
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        *out.entry(stack.to_owned()).or_insert(0) += v;
    }
    out
}

#[test]
fn convert_reads_jfr_gzipped_or_not_as_pyroscope_does() {
    let raw = scratch("dump1.jfr");
    std::fs::write(&raw, gunzip_file("dump1.jfr.gz")).unwrap();
    for input in [testdata("dump1.jfr.gz"), raw] {
        let out = scratch("dump1.pb.gz");
        spanprof([
            "convert".as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
        .assert_success();
        let p = pprof::decode(&std::fs::read(&out).unwrap(), 64 << 20).unwrap();
        assert_eq!(
            stacks(&p),
            expected("dump1.cpu.collapsed.gz"),
            "{}",
            input.display()
        );
    }
}

#[test]
fn inspect_shows_the_event_types_found() {
    let r = spanprof(["inspect".as_ref(), testdata("example.jfr.gz").as_os_str()]);
    r.assert_success();
    for needle in [
        "JFR, 1 chunk(s)",
        "jdk.ExecutionSample",
        "jdk.ObjectAllocationInNewTLAB",
        "jdk.JavaMonitorEnter",
        "profiles: process_cpu, memory, memory, mutex",
    ] {
        assert!(r.stdout.contains(needle), "{needle:?} not in\n{}", r.stdout);
    }
}

/// What Pyroscope's conversion gives samples labelled with `label` (its printed profile).
fn expected_labelled(name: &str, label: &str) -> i64 {
    let text = String::from_utf8(gunzip_file(name)).unwrap();
    let samples = text
        .split("Samples:")
        .nth(1)
        .unwrap()
        .split("Locations")
        .next()
        .unwrap();
    let mut total = 0;
    let mut last = 0;
    for line in samples.lines().skip(2) {
        let t = line.trim();
        match t.split_once(':') {
            Some((v, _)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                last = v.parse().unwrap()
            }
            _ if t.contains(label) => total += last,
            _ => {}
        }
    }
    total
}

fn collapsed_total(stdout: &str) -> i64 {
    stdout
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum()
}

#[test]
fn flame_and_import_find_a_spans_samples_with_the_labels_snapshot() {
    let span = "00000000000000ef";
    let want = expected_labelled(
        "new_spancontext.cpu.pprof.txt.gz",
        &format!("profile_id:[{span}]"),
    );
    assert!(want > 0);
    let jfr = testdata("new_spancontext.jfr.gz");
    let labels = testdata("new_spancontext.labels.gz");
    let r = spanprof([
        "flame".as_ref(),
        jfr.as_os_str(),
        "--labels".as_ref(),
        labels.as_os_str(),
        "--span-id".as_ref(),
        span.as_ref(),
        "--format".as_ref(),
        "collapsed".as_ref(),
    ]);
    r.assert_success();
    assert_eq!(collapsed_total(&r.stdout), want);
    assert!(r.stdout.contains("TracingContextKt.fib"), "{}", r.stdout);

    let data = scratch("store");
    let _ = std::fs::remove_dir_all(&data);
    let r = spanprof([
        "import".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        jfr.as_os_str(),
        "--labels".as_ref(),
        labels.as_os_str(),
    ]);
    r.assert_success();
    let r = spanprof([
        "flame".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--span-id".as_ref(),
        span.as_ref(),
        "--from".as_ref(),
        "0".as_ref(),
        "--format".as_ref(),
        "collapsed".as_ref(),
    ]);
    r.assert_success();
    assert_eq!(collapsed_total(&r.stdout), want);
}

#[test]
fn bad_recordings_and_labels_exit_2_naming_the_problem() {
    let whole = gunzip_file("dump1.jfr.gz");
    let cut = scratch("cut.jfr");
    std::fs::write(&cut, &whole[..whole.len() / 3]).unwrap();
    let dump1 = testdata("dump1.jfr.gz");
    // A recording given as its labels snapshot.
    let not_labels = dump1.clone();
    let out = scratch("bad.otlp");
    for (what, args, needle) in [
        (
            "a cut recording",
            vec![cut.as_os_str(), "-o".as_ref(), out.as_os_str()],
            "past the end of the file",
        ),
        (
            "labels that are not a snapshot",
            vec![
                dump1.as_os_str(),
                "--labels".as_ref(),
                not_labels.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
            "not a valid JFR labels snapshot",
        ),
    ] {
        let mut all = vec!["convert".as_ref()];
        all.extend(args);
        let r = spanprof(all);
        assert_eq!(r.code(), Some(2), "{what}: {r:?}");
        assert!(r.stderr.contains(needle), "{what}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    }
}
