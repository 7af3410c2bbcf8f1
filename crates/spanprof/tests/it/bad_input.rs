//! Bad input on the command line: every command that reads profiles refuses it with a
//! non-zero exit and a message that names the file and the problem, and never panics.

use spanprof_testkit as support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{capture, process_dir, run_python, scratch_dir, spanprof, ProfileKind, Run};

/// Runs every command that reads a profile on `file` and checks each refusal: exit code
/// (`check` answers 2 for unreadable input), no panic, the file named, and one of `problem`
/// (lowercase) in the message.
fn assert_refused(file: &Path, problem: &[&str]) {
    let out = BadFiles::get().path(&format!(
        "{}.out.otlp",
        file.file_name().unwrap().to_string_lossy()
    ));
    let f = file.as_os_str();
    let runs: Vec<(&str, Run)> = vec![
        (
            "convert",
            spanprof(["convert".as_ref(), f, "-o".as_ref(), out.as_os_str()]),
        ),
        (
            "check",
            spanprof([
                "check".as_ref(),
                f,
                "--dupes".as_ref(),
                "--orphans".as_ref(),
            ]),
        ),
        ("inspect", spanprof(["inspect".as_ref(), f])),
        (
            "flame",
            spanprof([
                "flame".as_ref(),
                f,
                "--format".as_ref(),
                "collapsed".as_ref(),
            ]),
        ),
    ];
    let _ = std::fs::remove_file(&out);
    let name = file.file_name().unwrap().to_string_lossy();
    for (command, run) in runs {
        run.assert_no_panic();
        match command {
            "check" => assert_eq!(run.code(), Some(2), "check of unreadable input: {run}"),
            _ => assert!(!run.status.success(), "{command} accepted {name}: {run}"),
        }
        let message = format!("{}{}", run.stdout, run.stderr);
        assert!(
            message.contains(name.as_ref()),
            "{command}: the message does not name {name}: {run}"
        );
        let lower = message.to_lowercase();
        assert!(
            problem.iter().any(|p| lower.contains(p)),
            "{command}: the message does not say what is wrong (one of {problem:?}): {run}"
        );
    }
}

/// Files made once per test process.
struct BadFiles {
    dir: PathBuf,
}

impl BadFiles {
    fn get() -> &'static BadFiles {
        static FILES: OnceLock<BadFiles> = OnceLock::new();
        FILES.get_or_init(|| BadFiles {
            dir: process_dir("bad-input"),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Deterministic bytes that are neither gzip nor protobuf of any use (xorshift64).
fn garbage(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    // Not the gzip magic, whatever the generator says.
    bytes[0] = b'G';
    bytes
}

/// Runs a Python snippet that writes `path` (via `sys.argv[1]`).
fn python_writes(path: &Path, script: &str) {
    run_python(["-c".as_ref(), script.as_ref(), path.as_os_str()]).assert_success();
    assert!(path.exists(), "python did not write {}", path.display());
}

#[test]
fn truncated_gzip_is_refused() {
    let real = std::fs::read(capture().profile(ProfileKind::Cpu)).unwrap();
    let path = BadFiles::get().path("truncated.pb.gz");
    std::fs::write(&path, &real[..real.len() / 2]).unwrap();
    assert_refused(&path, &["gzip", "truncat", "unexpected end", "eof"]);
}

/// 1 GiB of zeros in 1 MiB of gzip: refused at the decompression limit, not inflated.
#[test]
fn gzip_bomb_is_refused() {
    // Cached across runs: compressing 1 GiB takes a few seconds.
    let path = scratch_dir().join("bomb-1GiB-zeros.pb.gz");
    if !path.exists() {
        let tmp = scratch_dir().join(format!("bomb.{}.tmp", std::process::id()));
        python_writes(
            &tmp,
            "import sys, zlib\n\
             c = zlib.compressobj(9, zlib.DEFLATED, 31)\n\
             chunk = bytes(1 << 20)\n\
             with open(sys.argv[1], 'wb') as f:\n\
             \x20   for _ in range(1024):\n\
             \x20       f.write(c.compress(chunk))\n\
             \x20   f.write(c.flush())\n",
        );
        std::fs::rename(&tmp, &path).unwrap();
    }
    assert!(
        std::fs::metadata(&path).unwrap().len() < 2 << 20,
        "bomb too big"
    );
    // Naming the flag that raises the limit, for a real profile that large.
    assert_refused(&path, &["(--max-decompressed raises the limit)"]);
}

/// An endless input (`/dev/zero`, given by mistake) is refused once it is larger than a
/// profile may be, not read until memory runs out.
#[test]
fn an_endless_input_is_refused_at_the_size_limit() {
    assert_refused(Path::new("/dev/zero"), &["larger than a profile may be"]);
}

#[test]
fn garbage_bytes_are_refused() {
    let path = BadFiles::get().path("garbage.bin");
    std::fs::write(&path, garbage(4096)).unwrap();
    assert_refused(
        &path,
        &["not a", "invalid", "unrecogni", "decode", "unknown"],
    );
}

#[test]
fn gzipped_garbage_is_refused() {
    let files = BadFiles::get();
    let plain = files.path("garbage-inner.bin");
    std::fs::write(&plain, garbage(4096)).unwrap();
    let path = files.path("garbage.pb.gz");
    python_writes(
        &path,
        &format!(
            "import gzip, sys\n\
             data = open({plain:?}, 'rb').read()\n\
             open(sys.argv[1], 'wb').write(gzip.compress(data))\n",
            plain = plain.to_str().unwrap()
        ),
    );
    assert_refused(
        &path,
        &["not a", "invalid", "unrecogni", "decode", "unknown"],
    );
}

#[test]
fn missing_file_is_refused() {
    let path = BadFiles::get().path("does-not-exist.pb.gz");
    assert_refused(&path, &["no such file", "not found"]);
}

/// A request written with the v1.9 Sample numbering (2 values, 3 attribute_indices,
/// 4 link_index) is refused with an error that says so, never misread (DESIGN.md).
#[test]
fn otlp_with_v1_9_sample_numbering_is_refused() {
    let path = BadFiles::get().path("v1_9.otlp");
    // Written with the v1.10 classes: v1.9's `values = [10]` is field 2, which v1.10 calls
    // attribute_indices; the sample has no field 4 (v1.10 values).
    python_writes(
        &path,
        "import sys\n\
         from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as s\n\
         r = s.ExportProfilesServiceRequest()\n\
         d = r.dictionary\n\
         d.string_table.extend(['', 'cpu', 'nanoseconds', 'main'])\n\
         d.mapping_table.add(); d.link_table.add(); d.attribute_table.add()\n\
         d.function_table.add(); d.function_table.add(name_strindex=3)\n\
         d.location_table.add(); d.location_table.add().lines.add(function_index=1)\n\
         d.stack_table.add(); d.stack_table.add(location_indices=[1])\n\
         p = r.resource_profiles.add().scope_profiles.add().profiles.add()\n\
         p.sample_type.type_strindex = 1; p.sample_type.unit_strindex = 2\n\
         p.samples.add(stack_index=1, attribute_indices=[10])\n\
         p.samples.add(stack_index=1, attribute_indices=[20])\n\
         open(sys.argv[1], 'wb').write(r.SerializeToString())\n",
    );
    let out = BadFiles::get().path("v1_9.pb.gz");
    for args in [
        vec!["check".as_ref(), path.as_os_str()],
        vec!["inspect".as_ref(), path.as_os_str()],
        vec![
            "convert".as_ref(),
            path.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
    ] {
        let run = spanprof(&args);
        run.assert_no_panic();
        assert!(!run.status.success(), "accepted a v1.9 payload: {run}");
        assert!(
            format!("{}{}", run.stdout, run.stderr).contains("v1.9"),
            "the refusal does not say v1.9: {run}"
        );
    }
}

/// `flame`'s store selections given with input files are refused, naming them (they were
/// ignored: the whole file's graph came out as if they had matched).
#[test]
fn store_only_flame_flags_with_input_files_are_refused() {
    let file = support::go_cpu_pprof();
    let run = spanprof([
        "flame".as_ref(),
        file.as_os_str(),
        "--service".as_ref(),
        "nope".as_ref(),
        "--query".as_ref(),
        "{x=\"y\"}".as_ref(),
    ]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(run.stdout.is_empty(), "{run}");
    assert!(
        run.stderr
            .contains("--service, --query select from a store: give --data DIR"),
        "{run}"
    );
}

/// Standard input is read once, by every command: `inspect -` describes it (it was read
/// twice, and the second read found nothing), and `-` twice is refused.
#[test]
fn standard_input_is_read_once() {
    let cpu = support::go_cpu_pprof();
    let run = support::spanprof_with_stdin(["inspect", "-"], &cpu);
    run.assert_no_panic().assert_success();
    assert!(run.stdout.contains("-: pprof, 598 samples"), "{run}");
    assert!(run.stdout.contains("main."), "no function listed: {run}");
    let out = scratch_dir().join("stdin-twice.otlp");
    let run =
        support::spanprof_with_stdin(["convert", "-", "-", "-o", out.to_str().unwrap()], &cpu);
    run.assert_no_panic();
    assert!(!run.status.success(), "{run}");
    assert!(
        run.stderr.contains("standard input (-) can be given once"),
        "{run}"
    );
}

/// `--max-decompressed 0` would refuse every input: refused itself, saying so; the largest
/// size there is does not overflow into a limit of nothing.
#[test]
fn max_decompressed_of_0_is_refused_and_of_the_most_is_no_limit() {
    let cpu = support::go_cpu_pprof();
    let run = spanprof([
        "inspect".as_ref(),
        cpu.as_os_str(),
        "--max-decompressed".as_ref(),
        "0".as_ref(),
    ]);
    run.assert_no_panic();
    assert!(!run.status.success(), "{run}");
    assert!(run.stderr.contains("would refuse every input"), "{run}");
    let most = usize::MAX.to_string();
    let run = spanprof([
        "inspect".as_ref(),
        cpu.as_os_str(),
        "--max-decompressed".as_ref(),
        most.as_ref(),
    ]);
    run.assert_no_panic().assert_success();
}

/// A flame graph of a span no sample has draws nothing: exit 1, and the output file given
/// keeps what it held (it was emptied).
#[test]
fn flame_of_nothing_leaves_the_output_file_as_it_was() {
    let cpu = support::go_cpu_pprof();
    let out = scratch_dir().join(format!("flame-nothing.{}.txt", std::process::id()));
    std::fs::write(&out, "keep me\n").unwrap();
    let run = spanprof([
        "flame".as_ref(),
        cpu.as_os_str(),
        "--span-id".as_ref(),
        "0000000000000001".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    run.assert_no_panic();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(run.stderr.contains("left as it was"), "{run}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
    let _ = std::fs::remove_file(&out);
}

/// Profiles of different sample types cannot be summed into one pprof: the error says that
/// `--split` writes one each.
#[test]
fn merging_different_sample_types_suggests_split() {
    let cpu = support::go_cpu_pprof();
    let json = scratch_dir().join(format!("cpu.{}.json", std::process::id()));
    spanprof([
        "convert".as_ref(),
        cpu.as_os_str(),
        "-o".as_ref(),
        json.as_os_str(),
    ])
    .assert_no_panic()
    .assert_success();
    // The same profile as a wall-clock one.
    let wall = scratch_dir().join(format!("wall.{}.json", std::process::id()));
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(
        text.contains("\"cpu\""),
        "no cpu sample type in {}",
        json.display()
    );
    std::fs::write(&wall, text.replacen("\"cpu\"", "\"wall\"", 1)).unwrap();
    let out = scratch_dir().join(format!("merged.{}.pb.gz", std::process::id()));
    let run = spanprof([
        "convert".as_ref(),
        cpu.as_os_str(),
        wall.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    run.assert_no_panic();
    assert!(!run.status.success(), "{run}");
    assert!(
        run.stderr.contains("cannot merge profiles") && run.stderr.contains("--split"),
        "{run}"
    );
    assert!(!out.exists(), "a file was written: {run}");
    for f in [json, wall] {
        let _ = std::fs::remove_file(f);
    }
}

/// Binary output to a terminal (`-o -` typed at a shell) is refused, as gzip does, rather
/// than written as noise; a pipe gets it. `script` (util-linux) gives the command a terminal.
#[test]
fn binary_output_to_a_terminal_is_refused() {
    let cpu = support::go_cpu_pprof();
    let command = format!(
        "{} convert {} -o -",
        support::spanprof_bin().display(),
        cpu.display()
    );
    let mut script = std::process::Command::new("script");
    script.args(["-qec", &command, "/dev/null"]);
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("`script` is missing: install util-linux's bsdutils (apt-get install bsdutils)");
    }
    let run = support::run(script, std::time::Duration::from_secs(60));
    assert!(!run.status.success(), "{run}");
    assert!(
        run.stdout
            .contains("not writing binary OTLP protobuf to a terminal"),
        "{run}"
    );
    let piped = spanprof([
        "convert".as_ref(),
        cpu.as_os_str(),
        "-o".as_ref(),
        "-".as_ref(),
    ]);
    piped.assert_no_panic().assert_success();
}
