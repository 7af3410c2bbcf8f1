//! A minimal HTTP/1.1 client over `std::net::TcpStream`, enough to talk to the Go test
//! program and to `spanprof serve`: one request per connection, `Content-Length` or chunked
//! bodies.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A complete response: status code, headers in arrival order, decoded body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// GET `path` from `addr` (30 s at most) as JSON; panics naming the path unless the answer
/// is a 200 with a JSON body.
pub fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let r = get(addr, path, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"));
    assert_eq!(
        r.status,
        200,
        "GET {addr}{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!(
            "GET {addr}{path}: {e}: {}",
            String::from_utf8_lossy(&r.body)
        )
    })
}

/// `GET path` from `addr` (`host:port`); `timeout` bounds each read and write.
pub fn get(addr: &str, path: &str, timeout: Duration) -> io::Result<Response> {
    request(addr, "GET", path, &[], &[], timeout)
}

/// `POST path` of `body` to `addr` with `headers`; `timeout` bounds each read and write.
pub fn post(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    request(addr, "POST", path, headers, body, timeout)
}

/// `method path` to `addr` with `headers` and `body`; `timeout` bounds each read and write.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: identity\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> io::Result<Response> {
    let head_end = find(raw, b"\r\n\r\n").ok_or_else(|| invalid("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| invalid("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(&format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[head_end + 4..];
    response.body = if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(len) = response.header("content-length") {
        let len: usize = len.parse().map_err(|_| invalid("bad content-length"))?;
        rest.get(..len)
            .ok_or_else(|| invalid("body shorter than content-length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(response)
}

fn dechunk(mut rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n").ok_or_else(|| invalid("truncated chunk size"))?;
        let size_line =
            std::str::from_utf8(&rest[..line_end]).map_err(|_| invalid("chunk size"))?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| invalid(&format!("bad chunk size {size_line:?}")))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or_else(|| invalid("truncated chunk"))?);
        rest = rest
            .get(size + 2..)
            .ok_or_else(|| invalid("truncated chunk"))?;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// One request a [`Recorder`] received.
#[derive(Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// An HTTP server on a loopback port that answers every request `200 OK` and hands it over
/// on a channel (a stand-in for a collector that tests can inspect).
pub struct Recorder {
    addr: String,
    requests: std::sync::mpsc::Receiver<Recorded>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr").to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    if let Ok(request) = serve_one(stream) {
                        let _ = tx.send(request);
                    }
                });
            }
        });
        Recorder { addr, requests: rx }
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request, or `None` once `timeout` has passed without one.
    pub fn next(&self, timeout: Duration) -> Option<Recorded> {
        self.requests.recv_timeout(timeout).ok()
    }
}

/// Reads one request (`Content-Length` body) and answers `200 OK`.
fn serve_one(mut stream: TcpStream) -> io::Result<Recorded> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = find(&raw, b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(invalid("connection closed before end of headers"));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| invalid("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split_whitespace();
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(invalid("body shorter than content-length"));
        }
        body.extend_from_slice(&buf[..n]);
    }
    body.truncate(len);
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    Ok(Recorded {
        method,
        path,
        headers,
        body,
    })
}
