//! What the workspace's integration tests share (a dev-dependency only, never published):
//!
//! - [`goapp`]: builds `testprograms/goapp` once per test process ([`go_binary`]), runs it
//!   ([`GoApp`]) and takes one set of real Go profiles per test process ([`capture`]).
//! - [`server`]: the server in-process ([`server::TestServer`]) with an HTTP client;
//!   [`serve`]: a `spanprof serve` child ([`serve::Server`]); [`http`]: raw HTTP/1.1 requests.
//! - [`tools`]: the independent tools (`go tool pprof`, the Python venv's
//!   `opentelemetry-proto` and grpcio) and [`cli`]: our CLI, each with a deadline.
//! - [`pki`]: a private CA's certificates (openssl); [`raw`]: `go tool pprof -raw` parsed.
//!
//! Missing tools fail the test with how to install them; nothing is skipped.

pub mod cli;
pub mod goapp;
pub mod http;
pub mod pki;
pub mod raw;
pub mod serve;
pub mod server;
pub mod tools;

pub use cli::*;
pub use goapp::*;
pub use tools::*;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// Any one external command (our CLI, go, python).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Retries `attempt` until it gives a value; past `deadline`, fails naming `what` and what the
/// last attempt said. Tests wait on conditions with this, never with a fixed sleep.
pub fn poll<T>(
    what: &str,
    deadline: Duration,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> T {
    let end = Instant::now() + deadline;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) => assert!(
                Instant::now() < end,
                "timed out after {deadline:?} waiting for {what}: {last}"
            ),
        }
        thread::park_timeout(Duration::from_millis(100));
    }
}

/// The workspace root (holds `testprograms/`, `python/`, `target/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Cargo's scratch directory for integration tests (`CARGO_TARGET_TMPDIR`, `<target>/tmp`),
/// found from the running test executable (`<target>/debug/deps/it-*`): cargo sets that
/// variable for test crates only, not for this library.
pub fn scratch_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let target = exe
        .ancestors()
        .nth(3)
        .unwrap_or_else(|| panic!("{} is not under <target>/<profile>/deps", exe.display()));
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// A finished command: exit status and output as text.
#[derive(Debug)]
pub struct Run {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics, showing the command and its output, unless it exited 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.status.success(), "command failed: {self}");
        self
    }

    /// Panics if the process panicked (Rust's panic message, or exit code 101) or was killed.
    #[track_caller]
    pub fn assert_no_panic(&self) -> &Self {
        assert!(
            !self.stderr.contains("panicked"),
            "command panicked: {self}"
        );
        assert!(
            self.code().is_some() && self.code() != Some(101),
            "command crashed: {self}"
        );
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline,
            self.status,
            truncate(&self.stdout, 4000),
            truncate(&self.stderr, 4000)
        )
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Runs `cmd` to completion, killing it after `timeout`; output is read concurrently so a
/// chatty child cannot block on a full pipe.
pub fn run(cmd: Command, timeout: Duration) -> Run {
    run_with_stdin(cmd, timeout, Stdio::null())
}

/// [`run`], with `stdin` as the child's standard input.
pub fn run_with_stdin(cmd: Command, timeout: Duration, stdin: Stdio) -> Run {
    let cmdline = format!("{cmd:?}");
    run_within(cmd, timeout, stdin)
        .unwrap_or_else(|| panic!("{cmdline} did not finish within {timeout:?}"))
}

/// [`run_with_stdin`], returning `None` when `cmd` was killed at `timeout`: for a third-party
/// program the test gives a second chance (and says so).
pub fn run_within(mut cmd: Command, timeout: Duration, stdin: Stdio) -> Option<Run> {
    let cmdline = format!("{cmd:?}");
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::park_timeout(Duration::from_millis(5));
    };
    Some(Run {
        cmdline,
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    })
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// A fresh directory `target/tmp/{purpose}/{test binary}-{pid}` for this test process;
/// removes the same purpose's directories older than a day (left by earlier runs).
pub fn process_dir(purpose: &str) -> PathBuf {
    let root = scratch_dir().join(purpose);
    if let Ok(entries) = std::fs::read_dir(&root) {
        let day_ago = SystemTime::now() - Duration::from_secs(24 * 3600);
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < day_ago);
            if old {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let exe = std::env::current_exe().expect("test executable");
    let name = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
    let dir = root.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Fails naming any `tests/*.rs` of the crate at `manifest_dir` (its `CARGO_MANIFEST_DIR`):
/// each would be one more test executable linking the whole crate graph, where the crate's
/// integration tests are modules of the one binary `tests/it/main.rs`.
pub fn assert_one_test_binary(manifest_dir: &str) {
    let tests = Path::new(manifest_dir).join("tests");
    let entries =
        std::fs::read_dir(&tests).unwrap_or_else(|e| panic!("read {}: {e}", tests.display()));
    let mut extra: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs"))
        .collect();
    extra.sort();
    assert!(
        extra.is_empty(),
        "{} holds {extra:?}: make each a module of tests/it instead \
         (`git mv tests/NAME.rs tests/it/NAME.rs`, `mod NAME;` in tests/it/main.rs, \
         relative include paths one `../` deeper; see crates/spanprof-testkit/README.md)",
        tests.display()
    );
}
