//! What the offline commands print, as a new user reads it (issue 45, part 8): help said once,
//! one sample count, span names beside ids, errors that name the problem.

use spanprof_testkit as support;

use std::path::PathBuf;

use support::{go_cpu_pprof, scratch_dir, spanprof, spanprof_bin, ProfileKind};

const SUBCOMMANDS: [&str; 6] = ["serve", "convert", "check", "inspect", "flame", "import"];

/// `--log-format`'s explanation is in `spanprof --help` once, not in every command's help
/// (where the global flag shows a line).
#[test]
fn log_format_is_explained_once() {
    let top = spanprof(["--help"]);
    top.assert_success();
    assert_eq!(top.stdout.matches("Loki").count(), 1, "{top}");
    for cmd in SUBCOMMANDS {
        let run = spanprof([cmd, "--help"]);
        run.assert_success();
        assert!(!run.stdout.contains("Loki"), "{cmd}: {run}");
        let lines = run
            .stdout
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("--log-format"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with('-'))
            .count();
        assert!(lines <= 2, "{cmd}: --log-format takes {lines} lines: {run}");
    }
}

/// `inspect` counts samples one way (per sample type, as the pprof holds them), and names each
/// span beside its id.
#[test]
fn inspect_says_one_sample_count_and_span_names() {
    let run = spanprof(["inspect".as_ref(), go_cpu_pprof().as_os_str()]);
    run.assert_success();
    // The recording: 598 samples, each with a cpu and a samples value (counted twice over
    // the two OTLP profiles, one per type, the read line said 1196). Linked ones are another
    // count.
    let words: Vec<&str> = run.stdout.split_whitespace().chain([""]).collect();
    let counts: Vec<&str> = words
        .windows(3)
        .filter(|w| w[1].trim_end_matches(',') == "samples" && w[2] != "linked")
        .map(|w| w[0])
        .collect();
    assert!(!counts.is_empty(), "{run}");
    assert!(counts.iter().all(|c| *c == "598"), "{counts:?}\n{run}");
    let spans: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("spans by total"))
        .skip(2)
        .collect();
    assert!(!spans.is_empty(), "{run}");
    for line in spans {
        let name = line
            .split_whitespace()
            .skip(4)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            name == "GET /cpu-heavy" || name == "GET /cpu-light" || name == "sortWork",
            "a span without its name: {line:?}\n{run}"
        );
    }
}

/// `convert -o -` writes the converted bytes on stdout (here through a pipe), which read back.
#[test]
fn convert_to_dash_writes_stdout() {
    let dir = scratch_dir().join("cli-output-stdout");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("from-stdout.pb.gz");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} convert --to pprof {} -o - > {}",
            spanprof_bin().display(),
            go_cpu_pprof().display(),
            out.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..2], b"\x1f\x8b", "not gzip pprof");
    let back = spanprof(["inspect".as_ref(), out.as_os_str()]);
    back.assert_success();
    assert!(back.stdout.contains("598 samples"), "{back}");
}

/// An OTLP file cut short is called truncated, not "not protobuf".
#[test]
fn check_calls_a_truncated_file_truncated() {
    let dir = scratch_dir().join("cli-output-truncated");
    std::fs::create_dir_all(&dir).unwrap();
    let whole = dir.join("whole.otlp");
    spanprof([
        "convert".as_ref(),
        go_cpu_pprof().as_os_str(),
        "-o".as_ref(),
        whole.as_os_str(),
    ])
    .assert_success();
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.otlp");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let run = spanprof(["check".as_ref(), cut.as_os_str()]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(
        run.stderr.contains("truncated") || run.stdout.contains("truncated"),
        "{run}"
    );
}

/// `--type heap` is the heap profile's default type (inuse_space), as `go tool pprof` shows.
#[test]
fn type_heap_is_the_heap_profiles_default_type() {
    let heap = support::capture().profile(ProfileKind::Heap);
    let by_name = spanprof([
        "flame".as_ref(),
        heap.as_os_str(),
        "--type".as_ref(),
        "heap".as_ref(),
    ]);
    by_name.assert_success();
    let explicit = spanprof([
        "flame".as_ref(),
        heap.as_os_str(),
        "--type".as_ref(),
        "inuse_space".as_ref(),
    ]);
    explicit.assert_success();
    assert!(!by_name.stdout.is_empty(), "{by_name}");
    assert_eq!(by_name.stdout, explicit.stdout);
    // A CPU profile has no heap type: an error naming what it has.
    let cpu = spanprof([
        "flame".as_ref(),
        go_cpu_pprof().as_os_str(),
        "--type".as_ref(),
        "heap".as_ref(),
    ]);
    assert_eq!(cpu.code(), Some(2), "{cpu}");
    assert!(cpu.stderr.contains("available: cpu"), "{cpu}");
    // From a store too.
    let data = scratch_dir().join("cli-output-heap").join("data");
    let _ = std::fs::remove_dir_all(&data);
    spanprof([
        "import".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        heap.as_os_str(),
        "--service-name".as_ref(),
        "goapp".as_ref(),
    ])
    .assert_success();
    let flame = |t: &str| {
        let run = spanprof([
            "flame".as_ref(),
            "--data".as_ref(),
            data.as_os_str(),
            "--type".as_ref(),
            t.as_ref(),
        ]);
        run.assert_success();
        run.stdout
    };
    let stored = flame("heap");
    assert!(!stored.is_empty());
    assert_eq!(stored, flame("inuse_space"));
    assert_ne!(stored, flame("alloc_space"));
}

/// `flame --data --query` that matches nothing names the label keys the profiles have.
#[test]
fn a_query_matching_nothing_names_the_label_keys() {
    let dir = scratch_dir().join("cli-output-query");
    let _ = std::fs::remove_dir_all(&dir);
    let data: PathBuf = dir.join("data");
    spanprof([
        "import".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        go_cpu_pprof().as_os_str(),
        "--service-name".as_ref(),
        "goapp".as_ref(),
    ])
    .assert_success();
    let run = spanprof([
        "flame".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--query".as_ref(),
        r#"{span_nam="GET /cpu-heavy"}"#.as_ref(),
    ]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(
        run.stderr.contains("the label keys of the profiles"),
        "{run}"
    );
    assert!(run.stderr.contains("service_name"), "{run}");
    assert!(run.stderr.contains("span_name"), "{run}");
    // A query that matches still draws.
    let run = spanprof([
        "flame".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--query".as_ref(),
        r#"{span_name="GET /cpu-light"}"#.as_ref(),
    ]);
    run.assert_success();
    assert!(!run.stderr.contains("label keys"), "{run}");
}
