//! `spanprof serve` as a child process for end-to-end tests: started on the addresses a test
//! asks for, ready once it printed its listening line (text or JSON logs), stopped with SIGTERM (or killed if the
//! test fails first).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::spanprof_bin;

/// A free TCP port on loopback (for services that must know each other's address up front).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `spanprof serve`; killed on drop unless [`Server::stop`] ran.
pub struct Server {
    child: Child,
    /// The main listener, `host:port` (API, UI, /metrics, OTLP/HTTP, Pyroscope).
    pub addr: String,
    log: String,
    drain: Option<JoinHandle<String>>,
}

impl Server {
    /// `spanprof serve --data DATA --http-addr HTTP_ADDR EXTRA...`; the OTLP listeners are
    /// off unless `extra` sets them. Returns once the server listens (60 s at most).
    pub fn start(data: &Path, http_addr: &str, extra: &[&str]) -> Server {
        Server::spawn(&["--data", data.to_str().unwrap()], http_addr, extra, &[])
    }

    /// [`Server::start`] with environment variables `env` set.
    pub fn start_with_env(
        data: &Path,
        http_addr: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Server::spawn(&["--data", data.to_str().unwrap()], http_addr, extra, env)
    }

    /// `spanprof serve --demo --http-addr HTTP_ADDR EXTRA...` (its own throwaway store).
    pub fn demo(http_addr: &str, extra: &[&str]) -> Server {
        Server::spawn(&["--demo"], http_addr, extra, &[])
    }

    fn spawn(store: &[&str], http_addr: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(spanprof_bin());
        cmd.envs(env.iter().copied());
        cmd.arg("serve")
            .args(store)
            .args(["--http-addr", http_addr]);
        for flag in ["--otlp-http-addr", "--otlp-grpc-addr"] {
            if !extra.contains(&flag) {
                cmd.args([flag, "off"]);
            }
        }
        let mut child = cmd.args(extra).stderr(Stdio::piped()).spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut log = String::new();
        let addr = loop {
            assert!(
                Instant::now() < deadline,
                "spanprof serve did not start within 60 s:\n{log}"
            );
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let _ = child.kill();
                panic!("spanprof serve exited:\n{log}");
            }
            log.push_str(&line);
            if let Some(addr) = serving_addr(&line) {
                break addr;
            }
        };
        // Keeps the pipe drained so the server never blocks on logging.
        let drain = std::thread::spawn(move || drain(stderr));
        Server {
            child,
            addr,
            log,
            drain: Some(drain),
        }
    }

    /// SIGTERM, then waits for a clean exit after "stopped"; returns the whole log.
    pub fn stop(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        let rest = self.drain.take().unwrap().join().unwrap();
        let log = format!("{}{rest}", self.log);
        assert!(exit.success(), "exit {exit:?}:\n{log}");
        assert!(log.contains("stopped"), "{log}");
        log
    }

    /// Sends `signal` (`TERM`, `INT`) to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Whether the server has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits for the server to exit, `within` at most (failed past it, and killed on drop);
    /// returns its exit status and whole log.
    pub fn wait_exit(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let exit = crate::poll("the server's exit", within, || {
            self.child
                .try_wait()
                .unwrap()
                .ok_or_else(|| "still running".to_owned())
        });
        let rest = self.drain.take().unwrap().join().unwrap();
        (exit, format!("{}{rest}", self.log))
    }

    /// The value of `metric` (a name with labels, as in /metrics: the first series of the
    /// name with these labels among its own), 0 when absent.
    pub fn metric(&self, metric: &str) -> f64 {
        let r = crate::http::get(&self.addr, "/metrics", Duration::from_secs(10)).unwrap();
        let (name, labels) = series_parts(metric);
        String::from_utf8_lossy(&r.body)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (n, has) = series_parts(series);
                (n == name && labels.iter().all(|l| has.contains(l)))
                    .then(|| value.parse().ok())
                    .flatten()
            })
            .unwrap_or(0.0)
    }

    /// Scrape metric `name` of target `target`'s heap profile (`name{target,profile="heap"}`).
    pub fn heap_scrape_metric(&self, name: &str, target: &str) -> f64 {
        self.metric(&format!("{name}{{target=\"{target}\",profile=\"heap\"}}"))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `POST path` with `body` and `headers`, whatever the answer.
    pub fn send(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> crate::http::Response {
        crate::http::post(&self.addr, path, headers, body, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// `POST path` with `body`, which must be answered 200.
    pub fn post(&self, path: &str, content_type: &str, body: &[u8]) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(s, "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", self.addr, body.len()).unwrap();
        s.write_all(body).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let status: u16 = answer
            .split_whitespace()
            .nth(1)
            .unwrap_or("0")
            .parse()
            .unwrap();
        assert_eq!(status, 200, "POST {path}: {answer}");
    }

    /// Polls `ok` until it holds, failing after `deadline`.
    pub fn wait_for(&self, what: &str, deadline: Duration, ok: impl Fn(&Server) -> bool) {
        crate::poll(what, deadline, || {
            ok(self).then_some(()).ok_or_else(|| "not yet".to_owned())
        });
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A series' name and its `k="v"` labels (values without commas, as the tests' are).
fn series_parts(series: &str) -> (&str, Vec<&str>) {
    match series.split_once('{') {
        Some((name, labels)) => (
            name,
            labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .collect(),
        ),
        None => (series, Vec::new()),
    }
}

/// The address in the line saying where the server listens: `spanprof serving on http://…`,
/// or with `--log-format json` the event `spanprof serving` and its `url`.
fn serving_addr(line: &str) -> Option<String> {
    // https:// when the listeners serve TLS.
    let no_scheme = |url: &str| {
        url.strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .map(str::to_string)
    };
    if let Some(rest) = line.trim().strip_prefix("spanprof serving on ") {
        return no_scheme(rest);
    }
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    if event["message"] != "spanprof serving" {
        return None;
    }
    no_scheme(event["url"].as_str()?)
}

fn drain(mut r: BufReader<ChildStderr>) -> String {
    let mut rest = String::new();
    let _ = r.read_to_string(&mut rest);
    rest
}
