//! Stopping `spanprof serve`: an upload that stalls is answered 503 at once, one still
//! arriving is waited for; a second SIGTERM or Ctrl-C exits at once, whatever is in flight;
//! two at the same moment (a terminal's Ctrl-C beside a wrapper's SIGTERM) are one request
//! to stop.

use spanprof_testkit as support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::serve::Server;
use support::{poll, process_dir};

/// An upload of `length` bytes that sends its headers and `sent` bytes of its body.
fn upload(server: &Server, length: usize, sent: usize) -> TcpStream {
    let mut upload = TcpStream::connect(&server.addr).unwrap();
    write!(
        upload,
        "POST /ingest?name=stalled&format=pprof HTTP/1.1\r\nHost: {}\r\n\
         Content-Length: {length}\r\n\r\n",
        server.addr
    )
    .unwrap();
    upload.write_all(&vec![0u8; sent]).unwrap();
    server.wait_for("the upload in flight", Duration::from_secs(10), |s| {
        s.metric("spanprof_inflight_bytes") > 0.0
    });
    upload
}

/// An upload that stalls when the server is asked to stop is answered 503 (send it again)
/// within a second or two, and the server stops then: it held the drain for its whole grace,
/// 20 s, and its client got no answer.
#[test]
fn an_upload_stalled_at_the_stop_is_answered_503_and_the_stop_is_prompt() {
    let dir = process_dir("shutdown-stalled");
    let server = Server::start(&dir.join("data"), "127.0.0.1:0", &[]);
    let mut stalled = upload(&server, 100_000, 1_000);
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let asked = Instant::now();
    server.signal("TERM");
    let mut answer = String::new();
    let _ = stalled.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("the server is stopping"),
        "{answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after:"),
        "{answer:?}"
    );
    let (exit, log) = server.wait_exit(Duration::from_secs(10));
    assert!(asked.elapsed() < Duration::from_secs(5), "{log}");
    assert_eq!(exit.code(), Some(0), "{log}");
}

#[test]
fn a_second_signal_exits_at_once_while_an_upload_arrives() {
    let dir = process_dir("shutdown");
    let mut server = Server::start(&dir.join("data"), "127.0.0.1:0", &[]);
    // An upload that sends a byte every 200 ms: still arriving, never stalled.
    let mut trickle = upload(&server, 100_000, 500);
    // Paced by the wait for the end of the test, which ends it at once.
    let (done, end) = mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        while end.recv_timeout(Duration::from_millis(200)) == Err(mpsc::RecvTimeoutError::Timeout)
            && trickle.write_all(&[0]).is_ok()
        {}
    });

    // The first signal waits for the upload (up to its 20 s grace); a second one right
    // after it is the same request, and the server still waits.
    server.signal("TERM");
    let asked = Instant::now();
    server.signal("INT");
    // A second signal later than that exits at once. (Sent until it does: one that comes
    // too soon after the first is taken as the first's twin too.)
    poll("an exit on a later signal", Duration::from_secs(5), || {
        if server.exited() {
            return Ok(());
        }
        server.signal("INT");
        Err("still running".to_owned())
    });
    let (exit, log) = server.wait_exit(Duration::from_secs(5));
    assert!(asked.elapsed() < Duration::from_secs(6));
    assert_eq!(exit.code(), Some(1), "{log}");
    assert!(
        log.contains("stopping (send it again to exit at once)"),
        "{log}"
    );
    assert!(log.contains("taken as the same request to stop"), "{log}");
    assert!(
        log.contains("a second signal while stopping: exiting now"),
        "{log}"
    );
    drop(done);
    sender.join().unwrap();
}

/// A write cut off by a crash (the process killed, the machine down) is dropped at the next
/// start, and the log says so: it was never acknowledged, and what was stays.
#[test]
fn an_unfinished_write_left_by_a_crash_is_dropped_and_said() {
    let data = process_dir("unfinished-write").join("data");
    let server = Server::start(&data, "127.0.0.1:0", &[]);
    let pprof = std::fs::read(support::go_cpu_pprof()).unwrap();
    let r = server.send(
        "/ingest?name=crashed&format=pprof",
        &[("content-type", "application/octet-stream")],
        &pprof,
    );
    assert_eq!(r.status, 200);
    server.stop();
    // What a write cut off half-way leaves: bytes past the last whole record.
    let newest = std::fs::read_dir(data.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max()
        .expect("a segment");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&newest)
        .unwrap()
        .write_all(&[0x5a; 3000])
        .unwrap();
    let server = Server::start(&data, "127.0.0.1:0", &[]);
    let samples = server.metric("spanprof_store_samples");
    let log = server.stop();
    assert!(
        log.contains("dropped an unfinished write at the end of the log")
            && log.contains("bytes=3000"),
        "{log}"
    );
    assert!(samples > 0.0, "the acknowledged profile stays:\n{log}");
}
