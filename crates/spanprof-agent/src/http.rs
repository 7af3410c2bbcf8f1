//! A blocking HTTP/1.1 POST over `std::net`, enough for an OTLP/HTTP export from the agent's own
//! thread: `http://` only, one request per connection, every step under a deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::AgentError;

/// A parsed `http://host:port/path` endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` (port 80 when absent).
    pub authority: String,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Endpoint {
    /// Parses `url`; only `http://` is supported (TLS belongs to a collector in front).
    pub fn parse(url: &str) -> Result<Endpoint, AgentError> {
        let bad = |why: &str| AgentError::Config(format!("endpoint {url:?}: {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("expected http://host:port/path (https is not supported)"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("expected a host (and no credentials)"));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            path: path.to_owned(),
        })
    }
}

/// POSTs `body` as `content_type` to `endpoint`; the response's status code, or an error when
/// the server cannot be reached or answers garbage within `timeout` (per step).
pub fn post(
    endpoint: &Endpoint,
    content_type: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<u16, std::io::Error> {
    let addr = endpoint
        .authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("the host resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\nUser-Agent: spanprof-agent/{}\r\n\r\n",
        endpoint.path,
        endpoint.authority,
        body.len(),
        env!("CARGO_PKG_VERSION"),
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut reader = BufReader::new(stream.take(64 * 1024));
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|s| s.get(2..5))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {status_line:?}")))?;
    // The rest (headers, body) is read and dropped so the server sees a clean close.
    let _ = std::io::copy(&mut reader, &mut std::io::sink());
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:4318/v1development/profiles").unwrap();
        assert_eq!(e.authority, "127.0.0.1:4318");
        assert_eq!(e.path, "/v1development/profiles");
        assert_eq!(Endpoint::parse("http://h").unwrap().authority, "h:80");
        for bad in ["https://h/x", "h:1/x", "http://", "http://u:p@h/x"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn posts_and_reads_the_status() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0; 4096];
            let mut got = Vec::new();
            while !got.ends_with(b"body") {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            String::from_utf8(got).unwrap()
        });
        let status = post(
            &Endpoint::parse(&url).unwrap(),
            "application/x-protobuf",
            b"body",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(status, 202);
        let request = server.join().unwrap();
        assert!(request.starts_with("POST /v1/x HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("Content-Length: 4\r\n"), "{request}");
    }
}
