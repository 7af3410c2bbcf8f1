//! Harness of the server's integration tests: the server in-process, an HTTP client, and
//! real Go profile data with the answers expected of it.
#![allow(dead_code)] // each test binary uses a different part

pub mod goprofile;
pub mod pushv1;
pub mod server;

use std::process::{Command, Stdio};

use server::DEADLINE;

pub const INSTALL_GO: &str = "install Go: apt-get install golang-go or run .ci/setup";

/// Runs `go tool pprof <args>` with its own scratch directory; returns stdout, panicking
/// with the output when it fails or takes longer than [`DEADLINE`].
pub fn go_tool_pprof(args: &[&str], scratch: &std::path::Path) -> String {
    let child = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        // pprof saves what it fetches under $PPROF_TMPDIR (default ~/pprof).
        .env("PPROF_TMPDIR", scratch)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running go: {e}; {INSTALL_GO}"));
    let pid = child.id();
    // Read the pipes while waiting (a full pipe would stall the child).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("go tool pprof output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("go tool pprof {args:?} took longer than {DEADLINE:?}");
        }
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
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
