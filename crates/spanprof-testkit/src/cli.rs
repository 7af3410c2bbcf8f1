//! Our CLI, run as the tests' child process.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{run, run_with_stdin, workspace_root, Run, COMMAND_TIMEOUT};

/// The `spanprof` binary cargo built beside the running test executable
/// (`<target>/debug/spanprof` for `<target>/debug/deps/it-*`); cargo builds it before the CLI
/// crate's integration tests, which check this path against `CARGO_BIN_EXE_spanprof`.
pub fn spanprof_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join("spanprof"))
        .unwrap_or_else(|| panic!("{} has no profile directory", exe.display()));
    assert!(
        bin.exists(),
        "{} is missing: the CLI is built by `cargo test -p spanprof`",
        bin.display()
    );
    bin
}

/// Runs the spanprof CLI with `args`.
pub fn spanprof<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(spanprof_bin());
    cmd.args(args);
    run(cmd, COMMAND_TIMEOUT)
}

/// Runs the spanprof CLI with `args`, reading the file `input` on its standard input.
pub fn spanprof_with_stdin<I, S>(args: I, input: &Path) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(spanprof_bin());
    cmd.args(args);
    let file = std::fs::File::open(input)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", input.display()));
    run_with_stdin(cmd, COMMAND_TIMEOUT, file.into())
}

/// `testdata/go/cpu-10s.pb.gz`: a real Go CPU profile with span labels, 8.53 s of CPU.
pub fn go_cpu_pprof() -> PathBuf {
    workspace_root().join("testdata/go/cpu-10s.pb.gz")
}

/// [`go_cpu_pprof`] as OTLP of service `goapp`, written by `spanprof convert` to `dir/cpu.otlp`; its path.
pub fn go_cpu_otlp(dir: &Path) -> PathBuf {
    let out = dir.join("cpu.otlp");
    let cpu = go_cpu_pprof();
    spanprof([
        "convert".as_ref(),
        cpu.as_os_str(),
        "--service-name".as_ref(),
        "goapp".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .assert_success();
    out
}
