//! The remote pair's HTTP client: one connection pool, a deadline on every call (headers and
//! body), a cap on every answer's size, credentials read from their files at each call, and
//! a cache of answers over time ranges that can no longer change.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::RemoteError;
use crate::config::remote::{Endpoint, EndpointAuth, RemoteConfig};

/// Which of the pair a call goes to (named in every error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The profiles' store.
    Pyroscope,
    /// The traces' store.
    Tempo,
}

impl Peer {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Pyroscope => "Pyroscope",
            Peer::Tempo => "Tempo",
        }
    }
}

/// Most bytes of answers the cache holds (16 MiB): answers over past ranges repeat as a page
/// is reloaded; more would be memory a query frontend should not grow into.
const CACHE_BYTES: usize = 16 << 20;

/// Calls the pair with the settings of [`RemoteConfig`].
pub struct RemoteClient {
    config: RemoteConfig,
    http: Client<crate::tls::Connector, Full<Bytes>>,
    cache: Mutex<Cache>,
}

/// Answers by request (peer, path, body), oldest dropped first past [`CACHE_BYTES`].
#[derive(Default)]
struct Cache {
    answers: HashMap<(Peer, String, Vec<u8>), Bytes>,
    order: VecDeque<(Peer, String, Vec<u8>)>,
    bytes: usize,
}

impl RemoteClient {
    /// A client for `config` (no connection is made yet).
    pub fn new(config: RemoteConfig) -> Result<Self, String> {
        let https = [&config.pyroscope, &config.tempo]
            .iter()
            .any(|e| e.url.starts_with("https://"));
        let connector = crate::tls::connector(https, false, &crate::tls::TlsSettings::default())?;
        Ok(RemoteClient {
            http: Client::builder(TokioExecutor::new()).build(connector),
            config,
            cache: Mutex::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    fn endpoint(&self, peer: Peer) -> &Endpoint {
        match peer {
            Peer::Pyroscope => &self.config.pyroscope,
            Peer::Tempo => &self.config.tempo,
        }
    }

    /// `POST` of a Connect unary call in `application/proto` to Pyroscope: the answer's bytes.
    /// `immutable`: the request is over a range that has ended, so its answer is cached.
    pub async fn connect_call(
        &self,
        method: &str,
        body: Vec<u8>,
        immutable: bool,
    ) -> Result<Bytes, RemoteError> {
        let path = format!("/querier.v1.QuerierService/{method}");
        self.call(
            Peer::Pyroscope,
            Method::POST,
            &path,
            Some(("application/proto", body)),
            None,
            immutable,
        )
        .await
    }

    /// `GET path` (with its query) of `peer`, accepting `accept`.
    pub async fn get(
        &self,
        peer: Peer,
        path_and_query: &str,
        accept: &str,
        immutable: bool,
    ) -> Result<Bytes, RemoteError> {
        self.call(
            peer,
            Method::GET,
            path_and_query,
            None,
            Some(accept),
            immutable,
        )
        .await
    }

    /// Sends a request as it came (method, path, content type, body), for the Grafana-facing
    /// APIs passed through: the status, content type and body of the answer.
    pub async fn pass_through(
        &self,
        peer: Peer,
        method: Method,
        path_and_query: &str,
        content_type: Option<HeaderValue>,
        accept: Option<HeaderValue>,
        body: Bytes,
    ) -> Result<(StatusCode, Option<HeaderValue>, Bytes), RemoteError> {
        let mut req = self.request(peer, method, path_and_query)?;
        if let Some(c) = content_type {
            req = req.header(header::CONTENT_TYPE, c);
        }
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| RemoteError::new(peer, path_and_query, e.to_string()))?;
        let (status, ctype, bytes) = self.send(peer, path_and_query, req).await?;
        Ok((status, ctype, bytes))
    }

    fn request(
        &self,
        peer: Peer,
        method: Method,
        path_and_query: &str,
    ) -> Result<axum::http::request::Builder, RemoteError> {
        let e = self.endpoint(peer);
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", e.url));
        if let Some(t) = &e.tenant {
            req = req.header("x-scope-orgid", t.as_str());
        }
        if let Some(a) =
            authorization(&e.auth).map_err(|m| RemoteError::new(peer, path_and_query, m))?
        {
            req = req.header(header::AUTHORIZATION, a);
        }
        Ok(req)
    }

    async fn call(
        &self,
        peer: Peer,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
        immutable: bool,
    ) -> Result<Bytes, RemoteError> {
        let key = (
            peer,
            path.to_owned(),
            body.as_ref().map(|b| b.1.clone()).unwrap_or_default(),
        );
        if immutable {
            if let Some(hit) = self.cache.lock().expect("cache lock").answers.get(&key) {
                return Ok(hit.clone());
            }
        }
        let mut req = self.request(peer, method, path)?;
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let req = match body {
            Some((ctype, b)) => req
                .header(header::CONTENT_TYPE, ctype)
                .body(Full::new(Bytes::from(b))),
            None => req.body(Full::new(Bytes::new())),
        }
        .map_err(|e| RemoteError::new(peer, path, e.to_string()))?;
        let (status, _, bytes) = self.send(peer, path, req).await?;
        if !status.is_success() {
            return Err(RemoteError::status(peer, path, status, &bytes));
        }
        if immutable {
            self.cache
                .lock()
                .expect("cache lock")
                .insert(key, bytes.clone());
        }
        Ok(bytes)
    }

    /// Sends `req` and reads the answer within the deadline and the size cap.
    async fn send(
        &self,
        peer: Peer,
        path: &str,
        req: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Option<HeaderValue>, Bytes), RemoteError> {
        let max = self.config.max_answer_bytes;
        let exchange = async {
            let began = std::time::Instant::now();
            let response = self
                .http
                .request(req)
                .await
                .map_err(|e| RemoteError::new(peer, path, unreachable_message(&e)))?;
            let headers_at = began.elapsed();
            let status = response.status();
            let ctype = response.headers().get(header::CONTENT_TYPE).cloned();
            let body = Limited::new(response.into_body(), max)
                .collect()
                .await
                .map_err(|e| match e.downcast::<http_body_util::LengthLimitError>() {
                    Ok(_) => RemoteError::too_large(peer, path, max),
                    Err(e) => RemoteError::new(peer, path, format!("reading the answer: {e}")),
                })?;
            let body = body.to_bytes();
            // Stage times of each call, to find where a slow call's time goes.
            tracing::debug!(
                peer = peer.name(),
                call = path,
                headers_us = headers_at.as_micros() as u64,
                whole_us = began.elapsed().as_micros() as u64,
                answer_bytes = body.len(),
                "remote call"
            );
            Ok((status, ctype, body))
        };
        match tokio::time::timeout(self.config.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(RemoteError::timeout(peer, path, self.config.timeout)),
        }
    }
}

impl Cache {
    fn insert(&mut self, key: (Peer, String, Vec<u8>), value: Bytes) {
        let size = value.len() + key.1.len() + key.2.len();
        if size > CACHE_BYTES / 4 || self.answers.contains_key(&key) {
            return;
        }
        while self.bytes + size > CACHE_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(v) = self.answers.remove(&old) {
                self.bytes -= v.len() + old.1.len() + old.2.len();
            }
        }
        self.bytes += size;
        self.order.push_back(key.clone());
        self.answers.insert(key, value);
    }
}

/// The `Authorization` value of `auth`, read from its file now (a rotated token is used at
/// once). The message names the file, never its content.
fn authorization(auth: &EndpointAuth) -> Result<Option<HeaderValue>, String> {
    let read = |f: &std::path::Path| {
        std::fs::read_to_string(f)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("reading the credential file {}: {e}", f.display()))
    };
    let value = match auth {
        EndpointAuth::None => return Ok(None),
        EndpointAuth::BearerFile(f) => format!("Bearer {}", read(f)?),
        EndpointAuth::Basic {
            username,
            password_file,
        } => {
            let mut encoded = String::new();
            let plain = format!("{username}:{}", read(password_file)?);
            spanprof_format::json::base64::encode_into(plain.as_bytes(), &mut encoded);
            format!("Basic {encoded}")
        }
    };
    let mut v = HeaderValue::from_str(&value)
        .map_err(|_| "the credential file holds characters a header cannot carry".to_owned())?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// Why a connection failed, with its cause (refused, DNS), not only hyper's outer words.
fn unreachable_message(e: &hyper_util::client::legacy::Error) -> String {
    let mut message = "cannot reach it".to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message = format!("cannot reach it: {s}");
        source = s.source();
    }
    message
}
