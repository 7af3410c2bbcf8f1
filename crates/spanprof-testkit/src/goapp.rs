//! The Go test program (`testprograms/goapp`): built once per test process, run with its
//! listening address, and one set of its real profiles captured once per test process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::tools::{go_command, run_go};
use crate::{http, process_dir, scratch_dir, workspace_root};

/// How long the Go app may take to print its listening line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Per read/write on a connection to the Go app (a CPU profile takes [`CPU_SECONDS`]).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Length of the captured CPU profile, in seconds.
pub const CPU_SECONDS: u32 = 3;

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
