//! The real server in-process (`spanprof_server::serve` on loopback port 0) and a small
//! HTTP client for it (hyper-util's legacy client), every call bounded by a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spanprof_server::config::{ServerSection, StorageConfig};
use spanprof_server::{ServerConfig, ServerError};
use tokio::sync::oneshot;

/// Longest any one request, start-up or shutdown may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A running server with its own runtime.
pub struct TestServer {
    /// The main listener (API, OTLP/HTTP profiles and traces).
    pub addr: SocketAddr,
    /// The OTLP/HTTP listener, when the configuration has one.
    pub otlp_http: Option<SocketAddr>,
    /// The OTLP gRPC listener, when the configuration has one.
    pub otlp_grpc: Option<SocketAddr>,
    rt: tokio::runtime::Runtime,
    client: Client<HttpConnector, Full<Bytes>>,
    /// HTTP/2 with prior knowledge (gRPC).
    client_h2: Client<HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), ServerError>>>,
}

/// A whole answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON; panics showing the body when it is not.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Panics unless the status is 200, showing the body.
    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.status,
            200,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }
}

/// A server's settings for a test: the HTTP listener on a free loopback port, no OTLP
/// listeners (tests run many servers at once: none claims :4317 or :4318), the store in
/// `data_dir`; the rest as default.
pub fn loopback_config(data_dir: &Path) -> ServerConfig {
    ServerConfig {
        server: ServerSection {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            otlp_http_addr: None,
            otlp_grpc_addr: None,
            ..Default::default()
        },
        storage: StorageConfig {
            dir: data_dir.to_owned(),
            ..Default::default()
        },
        ..Default::default()
    }
}

impl TestServer {
    /// Starts a server storing in `data_dir` and waits until it answers `/health`.
    pub fn start(data_dir: &Path) -> TestServer {
        Self::start_with(data_dir, |_| {})
    }

    /// A server on a store in `<target>/tmp/<name>` ([`crate::scratch_dir`]), emptied first: fixtures held in
    /// statics are never dropped, so a temporary directory would be left behind.
    pub fn in_fresh_dir(name: &str, configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = crate::scratch_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        Self::start_with(&dir, configure)
    }

    /// [`TestServer::start`] with settings changed by `configure`.
    pub fn start_with(data_dir: &Path, configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut config = loopback_config(data_dir);
        configure(&mut config);
        let (stop, stopped) = oneshot::channel::<()>();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let served = rt.spawn(spanprof_server::serve(
            config,
            async move {
                let _ = stopped.await;
            },
            move |bound| {
                let _ = bound_tx.send(bound);
            },
        ));
        let (addr, otlp_http, otlp_grpc) = match bound_rx.recv_timeout(DEADLINE) {
            Ok(bound) => (bound.http, bound.otlp_http, bound.otlp_grpc),
            Err(e) => {
                let why = if served.is_finished() {
                    format!("{:?}", rt.block_on(served))
                } else {
                    e.to_string()
                };
                panic!("the server did not bind: {why}");
            }
        };
        let (client, client_h2) = {
            let _enter = rt.enter();
            (
                Client::builder(TokioExecutor::new()).build_http(),
                Client::builder(TokioExecutor::new())
                    .http2_only(true)
                    .build_http(),
            )
        };
        let server = TestServer {
            addr,
            otlp_http,
            otlp_grpc,
            rt,
            client,
            client_h2,
            stop: Some(stop),
            served: Some(served),
        };
        wait_for("the server to answer /health", || {
            server
                .try_request("GET", "/health", None)
                .is_ok_and(|r| r.status == 200)
        });
        server
    }

    /// `GET path`.
    #[track_caller]
    pub fn get(&self, path: &str) -> Reply {
        self.try_request("GET", path, None)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// `POST path` with a body of `content_type`.
    #[track_caller]
    pub fn post(&self, path: &str, content_type: &str, body: Vec<u8>) -> Reply {
        self.try_request("POST", path, Some((content_type, body)))
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// `method path` with an optional body of a content type, to listener `addr`.
    #[track_caller]
    pub fn request_at(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Reply {
        self.try_request_at(addr, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Reply, String> {
        self.try_request_at(self.addr, method, path, body)
    }

    fn try_request_at(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Reply, String> {
        self.send(addr, method, path, &[], body, false)
    }

    /// `method path` to listener `addr` with `headers` and an optional body of a content
    /// type, over HTTP/2 (prior knowledge, as gRPC) when `http2`.
    pub fn send(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, Vec<u8>)>,
        http2: bool,
    ) -> Result<Reply, String> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let body = match body {
            Some((content_type, bytes)) => {
                request = request.header("content-type", content_type);
                bytes
            }
            None => Vec::new(),
        };
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        self.rt.block_on(async {
            let exchange = async {
                let client = if http2 { &self.client_h2 } else { &self.client };
                let response = client.request(request).await.map_err(|e| e.to_string())?;
                let status = response.status().as_u16();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let headers = response.headers().clone();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes()
                    .to_vec();
                Ok(Reply {
                    status,
                    content_type,
                    headers,
                    body,
                })
            };
            tokio::time::timeout(DEADLINE, exchange)
                .await
                .map_err(|_| format!("no answer within {DEADLINE:?}"))?
        })
    }

    /// Stops the server through its shutdown future and returns what `serve` returned.
    pub fn stop(mut self) -> Result<(), ServerError> {
        let _ = self.stop.take().expect("stopped once").send(());
        let served = self.served.take().expect("stopped once");
        self.rt.block_on(async {
            tokio::time::timeout(DEADLINE, served)
                .await
                .expect("the server did not stop in time")
                .expect("the server task panicked")
        })
    }
}

/// Polls `done` until it holds; panics naming `what` past [`DEADLINE`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::park_timeout(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
