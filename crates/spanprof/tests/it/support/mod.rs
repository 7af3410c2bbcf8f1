//! Harness shared by the CLI's integration tests (`mod support;` in each test file).
//!
//! - [`go_binary`] builds `testprograms/goapp` once per test process; [`GoApp`] runs it.
//! - [`capture`] takes one set of real Go profiles per test process (CPU for a few seconds
//!   under load, then heap, allocs, goroutine, mutex, block) that every test shares.
//! - [`spanprof`], [`go_tool_pprof`] and [`otlp_dump`] run our CLI and the two independent
//!   tools (`go tool pprof`, Python `opentelemetry-proto`), each with a deadline.
//!
//! Missing tools fail the test with how to install them; nothing is skipped.
// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub mod http;
pub mod pki;
pub mod raw;
pub mod serve;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

const INSTALL_GO: &str = "install Go: apt-get install golang-go, or run .ci/setup";
const INSTALL_PYTHON: &str = "run `bash .ci/setup` (creates target/venv with \
     python/requirements.txt), or set SPANPROF_PYTHON to a python that has the pinned \
     opentelemetry-proto";

/// How long the Go app may take to print its listening line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Per read/write on a connection to the Go app (a CPU profile takes [`CPU_SECONDS`]).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Any one external command (our CLI, go, python).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);
/// Length of the captured CPU profile, in seconds.
pub const CPU_SECONDS: u32 = 3;

/// The workspace root (holds `testprograms/`, `python/`, `target/`).
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
        thread::sleep(Duration::from_millis(100));
    }
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Cargo's scratch directory for integration tests (`target/tmp`).
pub fn scratch_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The `spanprof` binary cargo built for these tests.
pub fn spanprof_bin() -> &'static str {
    env!("CARGO_BIN_EXE_spanprof")
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
pub fn run_with_stdin(mut cmd: Command, timeout: Duration, stdin: Stdio) -> Run {
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
            panic!("{cmdline} did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    Run {
        cmdline,
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
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

/// A `go` command that works offline and without a home directory.
fn go_command() -> Command {
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

fn run_go(mut cmd: Command, what: &str) -> Run {
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

/// Builds `testprograms/goapp` once per test process and returns the executable.
pub fn go_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let dir = scratch_dir().join("testprograms");
        std::fs::create_dir_all(&dir).expect("create target/tmp/testprograms");
        // Build under a private name and rename, so concurrent test processes never run a
        // half-written binary.
        let tmp = dir.join(format!("goapp.{}.tmp", std::process::id()));
        let mut cmd = go_command();
        cmd.current_dir(workspace_root().join("testprograms/goapp"))
            .args(["build", "-o"])
            .arg(&tmp)
            .arg(".");
        run_go(cmd, "building testprograms/goapp").assert_success();
        let binary = dir.join("goapp");
        std::fs::rename(&tmp, &binary).expect("move goapp into place");
        binary
    })
}

/// `go tool pprof -symbolize=none ARGS` (never symbolize: the profiles carry their symbols,
/// and re-symbolizing from the binary would hide what a converter wrote); returns stdout.
pub fn go_tool_pprof<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = go_command();
    cmd.args(["tool", "pprof", "-symbolize=none"]).args(args);
    let run = run_go(cmd, "go tool pprof");
    run.assert_success();
    run.stdout
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

/// A running `testprograms/goapp`, killed when dropped.
pub struct GoApp {
    child: Child,
    addr: String,
}

impl GoApp {
    /// Starts the Go app with `args` and waits (with a deadline) for its listening line.
    pub fn start(args: &[&str]) -> GoApp {
        let mut child = Command::new(go_binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", go_binary().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines_tx, lines_rx) = mpsc::channel();
        // Keeps reading after the first line so the app never blocks on a full pipe.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines_tx.send(line);
            }
        });
        // Owned from here on, so a failed start still kills the process.
        let mut app = GoApp {
            child,
            addr: String::new(),
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => {
                    let addr = line
                        .strip_prefix("listening on http://")
                        .or_else(|| line.strip_prefix("listening on https://"));
                    if let Some(addr) = addr {
                        app.addr = addr.trim().to_string();
                        return app;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("goapp printed no `listening on` line within {STARTUP_TIMEOUT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("goapp exited before listening: {:?}", app.child.try_wait())
                }
            }
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The app's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET path`, which must answer 200.
    pub fn get(&self, path: &str) -> http::Response {
        let response = http::get(&self.addr, path, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("GET http://{}{path}: {e}", self.addr));
        assert_eq!(
            response.status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&response.body)
        );
        response
    }

    /// `GET path` `n` times in a row.
    pub fn hit(&self, path: &str, n: usize) -> Vec<http::Response> {
        (0..n).map(|_| self.get(path)).collect()
    }

    /// Fetches `kind`'s profile endpoint into `dest`.
    pub fn fetch_profile(&self, kind: ProfileKind, dest: &Path) {
        let response = self.get(&kind.url_path());
        std::fs::write(dest, &response.body)
            .unwrap_or_else(|e| panic!("write {}: {e}", dest.display()));
    }
}

impl Drop for GoApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The profiles `net/http/pprof` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileKind {
    Cpu,
    Heap,
    Allocs,
    Goroutine,
    Mutex,
    Block,
}

impl ProfileKind {
    pub const ALL: [ProfileKind; 6] = [
        ProfileKind::Cpu,
        ProfileKind::Heap,
        ProfileKind::Allocs,
        ProfileKind::Goroutine,
        ProfileKind::Mutex,
        ProfileKind::Block,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProfileKind::Cpu => "cpu",
            ProfileKind::Heap => "heap",
            ProfileKind::Allocs => "allocs",
            ProfileKind::Goroutine => "goroutine",
            ProfileKind::Mutex => "mutex",
            ProfileKind::Block => "block",
        }
    }

    pub fn url_path(self) -> String {
        match self {
            ProfileKind::Cpu => format!("/debug/pprof/profile?seconds={CPU_SECONDS}"),
            other => format!("/debug/pprof/{}", other.name()),
        }
    }

    /// The `type/unit` columns Go 1.19 writes for this profile.
    pub fn sample_types(self) -> &'static [&'static str] {
        match self {
            ProfileKind::Cpu => &["samples/count", "cpu/nanoseconds"],
            ProfileKind::Heap | ProfileKind::Allocs => &[
                "alloc_objects/count",
                "alloc_space/bytes",
                "inuse_objects/count",
                "inuse_space/bytes",
            ],
            ProfileKind::Goroutine => &["goroutine/count"],
            ProfileKind::Mutex | ProfileKind::Block => &["contentions/count", "delay/nanoseconds"],
        }
    }

    /// Whether Go writes pprof labels into this profile (1.19: CPU and goroutine only).
    pub fn has_labels(self) -> bool {
        matches!(self, ProfileKind::Cpu | ProfileKind::Goroutine)
    }
}

/// The ids one request to the Go app answered with.
#[derive(Clone, Debug)]
pub struct RequestIds {
    pub path: String,
    pub trace_id: String,
    pub span_id: String,
    /// `/cpu-heavy`'s nested span.
    pub child_span_id: Option<String>,
}

/// One set of real Go profiles, shared by all tests of a process.
#[derive(Debug)]
pub struct Capture {
    dir: PathBuf,
    /// Every request made while the CPU and goroutine profiles were taken.
    pub requests: Vec<RequestIds>,
}

impl Capture {
    /// The gzipped pprof file of `kind`.
    pub fn profile(&self, kind: ProfileKind) -> PathBuf {
        self.dir.join(format!("{}.pb.gz", kind.name()))
    }
}

/// The shared capture, taken on first use: a CPU profile of [`CPU_SECONDS`] while two clients
/// hit `/cpu-heavy` and `/cpu-light` (both label conventions, plus custom keys), the
/// goroutine profile while they still run, then heap, allocs, mutex and block.
pub fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(take_capture)
}

fn take_capture() -> Capture {
    let dir = process_dir("captures");
    let app = GoApp::start(&[]);
    app.hit("/alloc", 20);

    let stop = AtomicBool::new(false);
    let requests = Mutex::new(Vec::new());
    let clients: [&[&str]; 2] = [
        &["/cpu-heavy"],
        &["/cpu-light", "/cpu-light?keys=custom", "/alloc"],
    ];
    thread::scope(|s| {
        for paths in clients {
            let (app, stop, requests) = (&app, &stop, &requests);
            s.spawn(move || {
                for path in paths.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let response = app.get(path);
                    let header = |name: &str| {
                        response
                            .header(name)
                            .unwrap_or_else(|| panic!("{path} answered without {name}"))
                            .to_string()
                    };
                    let ids = RequestIds {
                        path: path.to_string(),
                        trace_id: header("X-Trace-Id"),
                        span_id: header("X-Span-Id"),
                        child_span_id: response.header("X-Child-Span-Id").map(str::to_string),
                    };
                    requests.lock().unwrap().push(ids);
                }
            });
        }
        // Stops the clients however this closure ends, so a failed fetch cannot hang the scope.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        let started = Instant::now();
        app.fetch_profile(ProfileKind::Cpu, &dir.join("cpu.pb.gz"));
        assert!(
            started.elapsed() >= Duration::from_secs(CPU_SECONDS.into()),
            "CPU profile returned early"
        );
        // While handlers are in flight, so some goroutines carry span labels. Two clients
        // leave moments with no handler running (a CI run once caught one), so the profile is
        // taken again, one request after the other, until a goroutine in it carries a span id.
        let goroutine = dir.join("goroutine.pb.gz");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            app.fetch_profile(ProfileKind::Goroutine, &goroutine);
            if has_span_labels(&goroutine) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no goroutine carried a span id in 30 s of goroutine profiles"
            );
        }
    });
    for kind in [
        ProfileKind::Heap,
        ProfileKind::Allocs,
        ProfileKind::Mutex,
        ProfileKind::Block,
    ] {
        app.fetch_profile(kind, &dir.join(format!("{}.pb.gz", kind.name())));
    }
    Capture {
        dir,
        requests: requests.into_inner().unwrap(),
    }
}

/// Whether a sample of the pprof at `path` has a label whose key names a span id as
/// spanprof links them by default (not `custom.span_id` of `/cpu-light?keys=custom`: a
/// profile whose only labelled goroutine was one of those has no link, and a test of the
/// links failed on it).
fn has_span_labels(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let p = spanprof_format::pprof::decode(&bytes, 64 << 20)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let key = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
    let span_keys = spanprof_format::LinkConfig::default().span_id_keys;
    p.sample.iter().any(|s| {
        s.label
            .iter()
            .any(|l| span_keys.iter().any(|k| k == key(l.key)))
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
