//! Serving HTTP/1 and HTTP/2 on a listener, with the deadlines `axum::serve` leaves out
//! ([`HEADER_READ_TIMEOUT`], [`IDLE_TIMEOUT`]): without them, silent or idle connections were
//! held for good and could use up the file descriptors (commit 71e0615). On `stop`,
//! connections finish the requests in flight (HTTP/2 with GOAWAY) before [`serve`] returns.
//! With [`tls`], connections are TLS ones, their handshake held to the header deadline.

pub mod client_identity;
pub mod tls;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Sleep;

use client_identity::ClientIdentity;

/// How long a client may take to send a request head, and the first bytes of a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may be idle (nothing read or written) before it is shut down as on
/// stop, HTTP/2 with GOAWAY (HTTP/1 ones wait under [`HEADER_READ_TIMEOUT`] first). Clients
/// open a new one when they have something to send; 5 minutes keeps the connections of
/// exporters that send every few seconds or minutes.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Bytes that tell HTTP/1 from HTTP/2: the length of the HTTP/2 connection preface.
const PREFACE_BYTES: usize = 24;

/// The deadlines of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// [`HEADER_READ_TIMEOUT`].
    pub header: Duration,
    /// [`IDLE_TIMEOUT`].
    pub idle: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            header: HEADER_READ_TIMEOUT,
            idle: IDLE_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `stop` turns true; then lets the connections finish
/// what they are doing. With `tls`, every connection is a TLS one.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
    tls: Option<tls::ListenerTls>,
) -> io::Result<()> {
    serve_with(listener, router, stop, Deadlines::default(), tls).await
}

/// [`serve`] with other deadlines (tests).
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
    deadlines: Deadlines,
    tls: Option<tls::ListenerTls>,
) -> io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(deadlines.header);
    let service = TowerToHyperService::new(router);
    let mut connections = JoinSet::new();
    let mut stopped = stop.clone();
    let stopped = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
        // Finished connections' tasks, so the set holds only live ones.
        while connections.try_join_next().is_some() {}
        tune(&stream);
        let connection = Connection {
            builder: builder.clone(),
            service: service.clone(),
            peer,
            deadlines,
            stop: stop.clone(),
        };
        match &tls {
            None => connections.spawn(connection.serve(stream, None)),
            // The handshake runs on the connection's task: a slow one holds up no other.
            Some(tls) => {
                let tls = tls.clone();
                let mut stopped = stop.clone();
                connections.spawn(async move {
                    let handshake = tls
                        .tls
                        .handshake(stream, peer, tls.listener, deadlines.header);
                    let secured = tokio::select! {
                        secured = handshake => secured,
                        _ = stopped.wait_for(|s| *s) => None,
                    };
                    if let Some((stream, identity)) = secured {
                        connection.serve(stream, identity).await;
                    }
                })
            }
        };
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// What serving one accepted connection needs.
struct Connection {
    builder: Builder<TokioExecutor>,
    service: TowerToHyperService<Router>,
    peer: std::net::SocketAddr,
    deadlines: Deadlines,
    stop: watch::Receiver<bool>,
}

impl Connection {
    /// Serves HTTP/1 or HTTP/2 on `stream` (a TCP or a TLS one) until it ends; each request
    /// carries the client's `identity` (a verified certificate) in its extensions.
    async fn serve<S>(self, stream: S, identity: Option<ClientIdentity>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched::new(
            stream,
            self.deadlines.header,
            Arc::clone(&activity),
        ));
        // Each request runs with its client's address at hand (`peer()`).
        let (service, peer) = (self.service, self.peer);
        let with_peer = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            if let Some(identity) = &identity {
                req.extensions_mut().insert(identity.clone());
            }
            crate::peer::PEER.scope(peer, hyper::service::Service::call(&service, req))
        });
        let conn = self.builder.serve_connection(io, with_peer);
        run_connection(
            conn,
            |c| c.graceful_shutdown(),
            activity,
            self.deadlines.idle,
            self.stop,
        )
        .await;
    }
}

/// Drives one connection until it ends; shuts it down gracefully on stop, or once it has
/// been idle for `idle`.
async fn run_connection<C, E>(
    conn: C,
    shut_down: fn(Pin<&mut C>),
    activity: Arc<Activity>,
    idle: Duration,
    mut stop: watch::Receiver<bool>,
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        let idle_left = activity.idle_left(idle);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.wait_for(|s| *s), if !closing => {
                shut_down(conn.as_mut());
                closing = true;
            }
            () = tokio::time::sleep(idle_left), if !closing => {
                if activity.idle_left(idle).is_zero() {
                    tracing::debug!(idle_s = idle.as_secs(), "closing an idle connection");
                    shut_down(conn.as_mut());
                    closing = true;
                }
            }
        }
    }
}

/// When a connection last read or wrote.
struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last read or write.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long until the connection has been idle for `idle` (zero: it has).
    fn idle_left(&self, idle: Duration) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        idle.saturating_sub(self.start.elapsed().saturating_sub(last))
    }
}

/// How long a connection may be silent before the kernel probes its peer, and the time
/// between probes: a peer that is gone without closing (its host crashed, a NAT forgot the
/// connection) is noticed in about 2.5 minutes (Linux sends 9 probes) instead of never, and
/// its connection and file descriptor are freed. Live idle clients answer the probes.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Turns on TCP keepalive probes for `stream` (see [`KEEPALIVE_IDLE`]), and sends small
/// writes at once: with Nagle's algorithm, an answer written in several pieces (a streamed
/// body, an HTTP/2 frame after its headers) waited up to 40 ms for a delayed ACK.
fn tune(stream: &TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(error = %e, "cannot turn on TCP keepalive");
    }
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot turn on TCP_NODELAY");
    }
}

/// A stream whose first [`PREFACE_BYTES`] must arrive within a deadline (reading fails
/// with `TimedOut` past it; after them, reads pass through), and whose reads and writes are
/// noted in its connection's [`Activity`]. Over TLS, the bytes counted are the decrypted
/// ones: a client that finishes its handshake and then sends nothing is closed too.
struct Watched<S> {
    stream: S,
    /// Bytes still to arrive before the deadline stops applying.
    pending: usize,
    deadline: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    fn new(stream: S, within: Duration, activity: Arc<Activity>) -> Self {
        Watched {
            stream,
            pending: PREFACE_BYTES,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            activity,
        }
    }

    /// Notes a write that went through.
    fn wrote(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.activity.touch();
            }
        }
        polled
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.activity.touch();
        }
        let Some(deadline) = self.deadline.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) => {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(polled)
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

    /// A server of `GET /` (and of `GET /slow`, answered once `release` is notified) with
    /// `deadlines`; its address and stopper.
    async fn start(
        deadlines: Deadlines,
        release: Arc<tokio::sync::Notify>,
    ) -> (std::net::SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let router = Router::new().route("/", get(|| async { "hello" })).route(
            "/slow",
            get(move || async move {
                release.notified().await;
                "done"
            }),
        );
        tokio::spawn(serve_with(listener, router, stop_rx, deadlines, None));
        (addr, stop_tx)
    }

    fn header_deadline(header: Duration) -> Deadlines {
        Deadlines {
            header,
            ..Deadlines::default()
        }
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
        let (addr, _stop) = start(
            header_deadline(Duration::from_millis(300)),
            Default::default(),
        )
        .await;
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
    async fn accepted_connections_probe_their_peer_and_send_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let ((accepted, _), _client) =
            tokio::join!(async { listener.accept().await.unwrap() }, async {
                client.await.unwrap()
            });
        let sock = socket2::SockRef::from(&accepted);
        assert!(!sock.keepalive().unwrap());
        assert!(!accepted.nodelay().unwrap());
        tune(&accepted);
        assert!(sock.keepalive().unwrap());
        assert!(accepted.nodelay().unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_closes_the_listener() {
        let (addr, stop) = start(Deadlines::default(), Default::default()).await;
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

    /// An idle connection is closed after the idle deadline, HTTP/1 after its request and
    /// HTTP/2 with GOAWAY; a request that takes longer than it is not cut, and is answered on
    /// its connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_connections_are_closed_and_busy_ones_kept() {
        let idle = Duration::from_millis(300);
        let deadlines = Deadlines {
            idle,
            ..Deadlines::default()
        };
        let release = Arc::new(tokio::sync::Notify::new());
        let (addr, _stop) = start(deadlines, Arc::clone(&release)).await;
        tokio::task::spawn_blocking(move || {
            // HTTP/1: answered, then closed once idle.
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let start = std::time::Instant::now();
            let mut out = Vec::new();
            s.read_to_end(&mut out).expect("closed once idle");
            let secs = start.elapsed().as_secs_f64();
            assert!((0.25..5.0).contains(&secs), "closed after {secs} s");
            assert!(String::from_utf8_lossy(&out).ends_with("hello"));
            // A request in progress for four times the idle deadline: it is not cut (reading
            // times out instead of ending), and the answer comes on its connection.
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(idle * 4)).unwrap();
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut buf = [0u8; 64];
            let waited = s.read(&mut buf).expect_err("no answer, and not closed");
            assert!(
                matches!(
                    waited.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ),
                "{waited}"
            );
            release.notify_one();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out)
                .expect("answered, then closed once idle");
            let text = String::from_utf8_lossy(&out);
            assert!(
                text.starts_with("HTTP/1.1 200") && text.ends_with("done"),
                "{text}"
            );
        })
        .await
        .unwrap();
        // HTTP/2: answered, then GOAWAY once idle, which ends the client's connection.
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let request = axum::http::Request::get("http://x/")
            .body(String::new())
            .unwrap();
        let response = send.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let start = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .expect("the server ends an idle HTTP/2 connection")
            .unwrap()
            .expect("with GOAWAY, not an error");
        let secs = start.elapsed().as_secs_f64();
        assert!(secs >= 0.25, "closed after {secs} s");
    }
}
