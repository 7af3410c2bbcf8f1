//! The independent tools tests read our output with: `go tool pprof` and the Python venv
//! (`opentelemetry-proto`, grpcio), each run with a deadline.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{raw, run, scratch_dir, workspace_root, Run, COMMAND_TIMEOUT};

/// How to install Go, in the failure of a test that needs it.
pub const INSTALL_GO: &str = "install Go: apt-get install golang-go, or run .ci/setup";
const INSTALL_PYTHON: &str = "run `bash .ci/setup` (creates target/venv with \
     python/requirements.txt), or set SPANPROF_PYTHON to a python that has the pinned \
     opentelemetry-proto";

/// A `go` command that works offline and without a home directory.
pub(crate) fn go_command() -> Command {
    let mut cmd = Command::new("go");
    let has_cache_home = ["GOCACHE", "XDG_CACHE_HOME", "HOME"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !has_cache_home {
        cmd.env("GOCACHE", scratch_dir().join("go-build"));
    }
    // Stdlib only: never reach for the module proxy. The tree may not be a readable git repo.
    cmd.env("GOPROXY", "off").env("GOFLAGS", "-buildvcs=false");
    // `go tool pprof` writes fetched profiles here; keep it out of $HOME.
    cmd.env("PPROF_TMPDIR", scratch_dir().join("pprof"));
    cmd
}

pub(crate) fn run_go(mut cmd: Command, what: &str) -> Run {
    match Command::new("go").arg("version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`go version` failed ({}): {}; {INSTALL_GO}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("cannot run `go` ({e}) for {what}; {INSTALL_GO}"),
    }
    cmd.stdin(Stdio::null());
    run(cmd, COMMAND_TIMEOUT)
}

/// `go tool pprof -symbolize=none ARGS` (never symbolize: the profiles carry their symbols,
/// and re-symbolizing from the binary would hide what a converter wrote); returns stdout,
/// failing the test unless pprof succeeded.
pub fn go_tool_pprof<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let run = go_tool_pprof_run(args);
    run.assert_success();
    run.stdout
}

/// [`go_tool_pprof`] however it ends, for tests of what pprof says about a refusal.
pub fn go_tool_pprof_run<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = go_command();
    cmd.args(["tool", "pprof", "-symbolize=none"]).args(args);
    run_go(cmd, "go tool pprof")
}

/// `flat` and `cum` of `function` and the total, in ns, from `go tool pprof -top -unit=ns`.
pub fn pprof_top(out: &str, function: &str) -> (i64, i64, i64) {
    let ns = |s: &str| -> i64 {
        s.trim_end_matches("ns")
            .parse()
            .unwrap_or_else(|_| panic!("{s:?} in:\n{out}"))
    };
    let total = out
        .lines()
        .find_map(|l| l.split(" of ").nth(1)?.strip_suffix(" total"))
        .unwrap_or_else(|| panic!("no total in:\n{out}"));
    let line = out
        .lines()
        .find(|l| l.split_whitespace().last() == Some(function))
        .unwrap_or_else(|| panic!("{function} is not listed:\n{out}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    (ns(f[0]), ns(f[3]), ns(total))
}

/// `go tool pprof -raw [EXTRA...] FILE`, parsed.
pub fn pprof_raw(file: &Path, extra: &[&str]) -> raw::RawProfile {
    let mut args: Vec<&OsStr> = vec![OsStr::new("-raw")];
    args.extend(extra.iter().map(OsStr::new));
    args.push(file.as_os_str());
    raw::parse(&go_tool_pprof(args))
}

/// The Python with the pinned `opentelemetry-proto` (`$SPANPROF_PYTHON` or `target/venv`).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SPANPROF_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace_root().join("target/venv/bin/python");
    assert!(
        venv.exists(),
        "no Python venv at {}: {INSTALL_PYTHON}",
        venv.display()
    );
    venv
}

/// Runs `python ARGS` with the venv's interpreter.
pub fn run_python<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(python());
    cmd.args(args);
    let run = run(cmd, COMMAND_TIMEOUT);
    if run.stderr.contains("ModuleNotFoundError") {
        panic!("Python lacks a module: {INSTALL_PYTHON}\n{run}");
    }
    run
}

/// The JSON summary `python/otlp_dump.py` prints for an OTLP file (see that script).
pub fn otlp_dump(file: &Path) -> serde_json::Value {
    let script = workspace_root().join("python/otlp_dump.py");
    let run = run_python([script.as_os_str(), file.as_os_str()]);
    run.assert_success();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("otlp_dump output: {e}\n{run}"))
}

/// What a real gRPC client (Python grpcio) got from an OTLP Export call: the JSON line
/// `python/otlp_grpc_send.py ARGS` prints (see that script).
pub fn otlp_grpc_send(args: &[&str]) -> serde_json::Value {
    let script = workspace_root().join("python/otlp_grpc_send.py");
    let mut all = vec![script.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    let run = run_python(all);
    run.assert_success();
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("otlp_grpc_send output: {e}\n{run}"))
}

/// Builds `testprograms/{name}` (a Rust program with its own workspace and lock file) with
/// `features` and returns its debug executable. Every such program builds into one target
/// directory, `target/testprograms`, with the same flags (frame pointers, which
/// spanprof-agent walks), so the dependencies they share are compiled once: building
/// `rustpyroscope05` after `rustapp` took 62 CPU-s instead of 79.
pub fn build_rust_test_program(name: &str, features: &[&str]) -> PathBuf {
    let target = workspace_root().join("target/testprograms");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root().join("testprograms").join(name))
        .args(["build", "--locked", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", "-C force-frame-pointers=yes")
        // cargo's encoded flags (set for the test process) would override RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    let out = run(cmd, RUST_BUILD_TIMEOUT);
    assert!(
        out.status.success(),
        "building testprograms/{name} failed (it needs crates.io, or the crates in cargo's \
         cache):\n{out}"
    );
    target.join("debug").join(name)
}

/// A clean build of a Rust test program and its dependencies takes 0.5–1.5 min on 2 cores.
const RUST_BUILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(900);
