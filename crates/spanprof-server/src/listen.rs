//! Serving HTTP/1 and HTTP/2 on a listener, with the deadlines `axum::serve` leaves out: a
//! client must send the head of each HTTP/1 request, and the first bytes of a connection (what
//! tells HTTP/1 from HTTP/2), within [`HEADER_READ_TIMEOUT`]. Without them a connection that
//! sends nothing, or half a request head, was held for good (measured: still open after 70 s),
//! so enough of them would use up the process's file descriptors and keep every other client
//! out. Bodies have their own deadline, in the receivers ([`crate::receivers::inflight`]).
//!
//! On `stop`, the listener stops accepting, and connections finish the requests in flight
//! (HTTP/2 with GOAWAY) before [`serve`] returns.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Sleep;

/// How long a client may take to send a request head, and the first bytes of a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes that tell HTTP/1 from HTTP/2: the length of the HTTP/2 connection preface.
const PREFACE_BYTES: usize = 24;

/// Serves `router` on `listener` until `stop` turns true; then lets the connections finish
/// what they are doing.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    serve_with(listener, router, stop, HEADER_READ_TIMEOUT).await
}

/// [`serve`] with another header deadline (tests).
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    mut stop: watch::Receiver<bool>,
    header_timeout: Duration,
) -> io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let service = TowerToHyperService::new(router);
    let graceful = GracefulShutdown::new();
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A connection reset before it was taken: nothing to do.
                Err(e) if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionRefused
                ) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: the listener itself is fine, and
                    // connections that end give them back. Wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        keep_alive(&stream);
        let io = TokioIo::new(FirstBytes::new(stream, header_timeout));
        let conn = builder.serve_connection(io, service.clone()).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// How long a connection may be silent before the kernel probes its peer, and the time
/// between probes: a peer that is gone without closing (its host crashed, a NAT forgot the
/// connection) is noticed in about 2.5 minutes (Linux sends 9 probes) instead of never, and
/// its connection and file descriptor are freed. Live idle clients answer the probes.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Turns on TCP keepalive probes for `stream` (see [`KEEPALIVE_IDLE`]).
fn keep_alive(stream: &TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(error = %e, "cannot turn on TCP keepalive");
    }
}

/// A TCP stream whose first [`PREFACE_BYTES`] must arrive within a deadline: reading fails
/// with `TimedOut` past it. After them, reads pass through.
struct FirstBytes {
    stream: TcpStream,
    /// Bytes still to arrive before the deadline stops applying.
    pending: usize,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl FirstBytes {
    fn new(stream: TcpStream, within: Duration) -> Self {
        FirstBytes {
            stream,
            pending: PREFACE_BYTES,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl AsyncRead for FirstBytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let Some(deadline) = self.deadline.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                self.pending = self.pending.saturating_sub(read);
                if self.pending == 0 || read == 0 {
                    self.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent no request in time",
                ))),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for FirstBytes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use axum::routing::get;

    use super::*;

    /// A server of `GET /` with a header deadline of `timeout`; its address and stopper.
    async fn start(timeout: Duration) -> (std::net::SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let router = Router::new().route("/", get(|| async { "hello" }));
        tokio::spawn(serve_with(listener, router, stop_rx, timeout));
        (addr, stop_tx)
    }

    /// Seconds until the server closes a connection that sent `sent` and then nothing.
    fn closed_after(addr: std::net::SocketAddr, sent: &[u8]) -> f64 {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(sent).unwrap();
        let start = std::time::Instant::now();
        let mut out = Vec::new();
        s.read_to_end(&mut out)
            .expect("the server closes the connection");
        start.elapsed().as_secs_f64()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_and_slow_clients_are_closed_and_others_served() {
        let (addr, _stop) = start(Duration::from_millis(300)).await;
        tokio::task::spawn_blocking(move || {
            // Nothing at all; a few bytes (protocol not known yet); half a request head.
            for sent in [&b""[..], b"GE", b"GET / HTTP/1.1\r\nHost: x\r\n"] {
                let secs = closed_after(addr, sent);
                assert!(secs < 5.0, "{sent:?}: closed after {secs} s");
            }
            // A whole request is answered, and the connection is kept for the next.
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).unwrap();
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(
                text.starts_with("HTTP/1.1 200") && text.ends_with("hello"),
                "{text}"
            );
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn accepted_connections_probe_their_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let ((accepted, _), _client) =
            tokio::join!(async { listener.accept().await.unwrap() }, async {
                client.await.unwrap()
            });
        let sock = socket2::SockRef::from(&accepted);
        assert!(!sock.keepalive().unwrap());
        keep_alive(&accepted);
        assert!(sock.keepalive().unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_closes_the_listener() {
        let (addr, stop) = start(Duration::from_secs(30)).await;
        let idle = std::net::TcpStream::connect(addr).unwrap();
        stop.send(true).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the listener is still open 10 s after stop"
            );
            tokio::task::yield_now().await;
        }
        drop(idle);
    }
}
