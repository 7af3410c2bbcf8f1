//! Sending one export to the downstream: OTLP/HTTP (`POST {endpoint}/v1development/profiles`
//! or `/v1/traces`, protobuf), OTLP gRPC (a unary call over HTTP/2 with prior knowledge:
//! one length-prefixed message, the status in `grpc-status`) or Pyroscope's push.v1 (a
//! Connect unary call, `POST {endpoint}/push.v1.PusherService/Push`), and what the answer
//! means for retrying, per the OTLP specification (push.v1's Connect errors map to the same
//! HTTP statuses).

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::queue::Signal;
use crate::config::{ConfigError, ForwardProtocol, ForwarderConfig};
use crate::grpc::proto::google::rpc::Status as RpcStatus;
use crate::grpc::{
    frame, retry_delay, PROFILES_EXPORT as GRPC_PROFILES, TRACES_EXPORT as GRPC_TRACES,
};

/// What an export attempt came to.
#[derive(Debug)]
pub enum Outcome {
    /// The downstream acknowledged it.
    Delivered,
    /// Try again later: unreachable, overloaded or timed out; `after` is the server's
    /// `Retry-After` when it gave one.
    Retry {
        /// The server's requested delay.
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// The downstream refused it for good (a bad request, too large): sending it again would
    /// fail the same way.
    Rejected(String),
}

/// A client for one downstream endpoint.
pub struct Exporter {
    client: Client<crate::tls::Connector, Full<Bytes>>,
    protocol: ForwardProtocol,
    endpoint: String,
    headers: HeaderMap,
    gzip: bool,
    timeout: Duration,
}

impl Exporter {
    /// A client for `cfg`; an error names what is wrong with the endpoint or headers.
    pub fn new(cfg: &ForwarderConfig) -> Result<Exporter, ConfigError> {
        // Its scheme and TLS settings are checked with the configuration
        // (`ForwarderConfig::check`).
        let https = cfg.endpoint.starts_with("https://");
        cfg.endpoint
            .parse::<hyper::Uri>()
            .map_err(|e| format!("endpoint {:?}: {e}", cfg.endpoint))?;
        let mut headers = HeaderMap::new();
        for (k, v) in &cfg.headers {
            let name =
                HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
            let value =
                HeaderValue::try_from(v.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
            headers.append(name, value);
        }
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_idle_timeout(Duration::from_secs(60));
        let grpc = cfg.protocol == ForwardProtocol::Grpc;
        if grpc {
            builder.http2_only(true);
        }
        Ok(Exporter {
            client: builder.build(crate::tls::connector(https, grpc, &cfg.tls)?),
            protocol: cfg.protocol,
            endpoint: cfg.endpoint.clone(),
            headers,
            gzip: cfg.gzip,
            timeout: cfg.timeout,
        })
    }

    /// Sends one OTLP export request (protobuf `message`) of `signal`.
    pub async fn export(&self, signal: Signal, message: Bytes) -> Outcome {
        let attempt = async {
            match self.protocol {
                ForwardProtocol::Http => self.http(signal, message).await,
                ForwardProtocol::Grpc => self.grpc(signal, message).await,
                ForwardProtocol::Push => self.push(message).await,
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Retry {
                after: None,
                reason: format!("no answer within {:?}", self.timeout),
            },
        }
    }

    fn request(&self, path: &str, content_type: &'static str, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::post(format!("{}{path}", self.endpoint))
            .header("content-type", content_type)
            .body(Full::new(body))
            .expect("the endpoint was checked to be a valid URI");
        req.headers_mut().extend(self.headers.clone());
        req
    }

    async fn http(&self, signal: Signal, message: Bytes) -> Outcome {
        let path = match signal {
            Signal::Profiles => "/v1development/profiles",
            Signal::Traces => "/v1/traces",
        };
        let body = if self.gzip {
            spanprof_format::gzip::gzip(&message).into()
        } else {
            message
        };
        let mut req = self.request(path, "application/x-protobuf", body);
        if self.gzip {
            req.headers_mut()
                .insert("content-encoding", HeaderValue::from_static("gzip"));
        }
        let answer = match self.send_whole(req).await {
            Ok(answer) => answer,
            Err(outcome) => return outcome,
        };
        answer.outcome(|a| {
            let protobuf = a
                .content_type
                .as_deref()
                .is_some_and(|v| v.starts_with("application/x-protobuf"));
            failure_text(protobuf, &a.body)
        })
    }

    /// Sends a plain HTTP request and reads its answer whole; a send that failed is its
    /// outcome already.
    async fn send_whole(&self, req: Request<Full<Bytes>>) -> Result<WholeAnswer, Outcome> {
        let response = match self.client.request(req).await {
            Ok(r) => r,
            Err(e) => return Err(unreachable(&e)),
        };
        let status = response.status();
        let after = retry_after(response.headers());
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Ok(WholeAnswer {
            status,
            after,
            content_type,
            body,
        })
    }

    /// One `push.v1` call; `message` is the `PushRequest` (see [`super::push`]), its
    /// profiles already gzipped when `gzip` is set (Pyroscope reads them either way).
    async fn push(&self, message: Bytes) -> Outcome {
        let req = self.request(super::push::PUSH_PATH, "application/proto", message);
        let answer = match self.send_whole(req).await {
            Ok(answer) => answer,
            Err(outcome) => return outcome,
        };
        // A Connect error is JSON `{"code": …, "message": …}`.
        answer.outcome(|a| {
            serde_json::from_slice::<serde_json::Value>(&a.body)
                .ok()
                .and_then(|v| v["message"].as_str().map(|m| snippet(m.as_bytes())))
                .unwrap_or_else(|| snippet(&a.body))
        })
    }

    async fn grpc(&self, signal: Signal, message: Bytes) -> Outcome {
        let path = match signal {
            Signal::Profiles => GRPC_PROFILES,
            Signal::Traces => GRPC_TRACES,
        };
        let (flag, payload) = if self.gzip {
            (1u8, Bytes::from(spanprof_format::gzip::gzip(&message)))
        } else {
            (0u8, message)
        };
        let framed = frame(flag == 1, &payload);
        let mut req = self.request(path, "application/grpc", framed.into());
        req.headers_mut()
            .insert("te", HeaderValue::from_static("trailers"));
        if self.gzip {
            req.headers_mut()
                .insert("grpc-encoding", HeaderValue::from_static("gzip"));
        }
        let response = match self.client.request(req).await {
            Ok(r) => r,
            Err(e) => return unreachable(&e),
        };
        let status = response.status();
        let after = retry_after(response.headers());
        let head = response.headers().clone();
        if status != StatusCode::OK {
            let reason = format!("HTTP {status} to a gRPC call");
            return http_outcome(status, reason, after);
        }
        let trailers = match response.into_body().collect().await {
            Ok(c) => c.trailers().cloned(),
            Err(e) => return unreachable(&e),
        };
        // A Trailers-Only answer carries the status in the headers.
        let field = |name: &str| {
            trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| head.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let Some(code) = field("grpc-status").and_then(|c| c.parse::<u32>().ok()) else {
            return Outcome::Retry {
                after,
                reason: "the gRPC answer has no grpc-status".into(),
            };
        };
        let reason = format!(
            "gRPC status {code}: {}",
            field("grpc-message").unwrap_or_default()
        );
        grpc_outcome(code, reason, field("grpc-status-details-bin"), after)
    }
}

/// Added to the reason of an answer that refuses the endpoint, not the export.
const ENDPOINT_REFUSED: &str = "the endpoint refuses every export (check its address, path, \
     protocol and credentials); exports stay queued until it takes them";

/// What an HTTP status other than success means for retrying: per OTLP, 429, 502, 503 and
/// 504 are retried and other failures are final, except the answers that refuse the
/// endpoint rather than the export (a wrong path or port, missing credentials: 401, 403,
/// 404, 405, 407, 421), which are retried too: dropped, every export would be lost until
/// someone reads the log, where queued, they go once the configuration is fixed.
/// A plain HTTP export's answer, read whole.
struct WholeAnswer {
    status: StatusCode,
    /// Its `Retry-After`.
    after: Option<Duration>,
    content_type: Option<String>,
    body: Bytes,
}

impl WholeAnswer {
    /// Delivered on a 2xx; else what its status means, `text` reading what the peer said.
    fn outcome(&self, text: impl FnOnce(&Self) -> String) -> Outcome {
        let status = self.status;
        if status.is_success() {
            return Outcome::Delivered;
        }
        http_outcome(status, format!("HTTP {status}: {}", text(self)), self.after)
    }
}

fn http_outcome(status: StatusCode, reason: String, after: Option<Duration>) -> Outcome {
    match status.as_u16() {
        429 | 502 | 503 | 504 => Outcome::Retry { after, reason },
        401 | 403 | 404 | 405 | 407 | 421 => Outcome::Retry {
            after,
            reason: format!("{reason}: {ENDPOINT_REFUSED}"),
        },
        _ => Outcome::Rejected(reason),
    }
}

/// What gRPC status `code` means for retrying, per OTLP; `details_bin` is the answer's
/// `grpc-status-details-bin`, `after` its `Retry-After`.
fn grpc_outcome(
    code: u32,
    reason: String,
    details_bin: Option<String>,
    after: Option<Duration>,
) -> Outcome {
    // The server's RetryInfo, if it sent one: when to try again.
    let retry_info = details_bin.and_then(|v| retry_delay(&v));
    match code {
        0 => Outcome::Delivered,
        // CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS:
        // retryable per OTLP.
        1 | 4 | 10 | 11 | 14 | 15 => Outcome::Retry {
            after: retry_info.or(after),
            reason,
        },
        // RESOURCE_EXHAUSTED only with a RetryInfo: without one the server will not take
        // this export (it is too large, say), and retrying it would hold up the queue
        // behind it for good.
        8 => match retry_info {
            Some(after) => Outcome::Retry {
                after: Some(after),
                reason,
            },
            None => Outcome::Rejected(reason),
        },
        // PERMISSION_DENIED, UNIMPLEMENTED (no such service there: a collector without
        // profiles, a wrong port), UNAUTHENTICATED: the endpoint, not the export, as in
        // [`http_outcome`].
        7 | 12 | 16 => Outcome::Retry {
            after: retry_info.or(after),
            reason: format!("{reason}: {ENDPOINT_REFUSED}"),
        },
        _ => Outcome::Rejected(reason),
    }
}

fn unreachable(e: &dyn std::error::Error) -> Outcome {
    let causes = crate::error_causes(e);
    // rustls reading a plain-HTTP answer as TLS: say what that means.
    let hint = if causes.contains("InvalidContentType") {
        " (the endpoint does not speak TLS: is it http://, not https://?)"
    } else {
        ""
    };
    Outcome::Retry {
        after: None,
        reason: format!("unreachable: {causes}{hint}"),
    }
}

/// `Retry-After` in seconds (the HTTP-date form is ignored: backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("retry-after")?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// What a failed OTLP/HTTP answer says: its `Status.message` when the body is a protobuf
/// `Status`, else the start of the body as text.
fn failure_text(protobuf: bool, body: &[u8]) -> String {
    use prost::Message;
    match protobuf.then(|| RpcStatus::decode(body)) {
        Some(Ok(s)) if !s.message.is_empty() => snippet(s.message.as_bytes()),
        _ => snippet(body),
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn failures_read_the_status_message() {
        let status = RpcStatus {
            code: 3,
            message: "invalid OTLP profiles payload: truncated varint".into(),
            details: Vec::new(),
        };
        assert_eq!(
            failure_text(true, &status.encode_to_vec()),
            "invalid OTLP profiles payload: truncated varint"
        );
        // A server that answers text (against the spec), or bytes that are not a Status.
        assert_eq!(failure_text(false, b" queue full \n"), "queue full");
        assert_eq!(failure_text(true, b"\xff\xff"), "\u{fffd}\u{fffd}");
    }

    /// gRPC answers: RESOURCE_EXHAUSTED is retried only with a RetryInfo (as a busy spanprof
    /// sends it), after its delay; without one (a message too large) it is dropped, not
    /// retried for good. Other retryable codes take the RetryInfo's delay when there is one.
    #[test]
    fn grpc_answers_are_retried_as_otlp_says() {
        use crate::grpc::{retry_details, Code};
        let outcome = |code, details: Option<String>| {
            grpc_outcome(code, "r".into(), details, Some(Duration::from_secs(7)))
        };
        let busy = retry_details(
            Code::ResourceExhausted,
            "the ingest queue is full".into(),
            1,
        );
        assert!(matches!(
            outcome(8, Some(busy)),
            Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(1)
        ));
        assert!(matches!(outcome(8, None), Outcome::Rejected(_)));
        // Not a Status, or a Status without a RetryInfo: no hint.
        assert!(matches!(
            outcome(8, Some("!!".into())),
            Outcome::Rejected(_)
        ));
        let plain = RpcStatus {
            code: 8,
            message: "too large".into(),
            details: Vec::new(),
        };
        let mut bin = String::new();
        spanprof_format::json::base64::encode_into(&plain.encode_to_vec(), &mut bin);
        assert!(matches!(outcome(8, Some(bin)), Outcome::Rejected(_)));
        let unavailable = retry_details(Code::Unavailable, "cannot write".into(), 5);
        assert!(matches!(
            outcome(14, Some(unavailable)),
            Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(5)
        ));
        assert!(matches!(
            outcome(14, None),
            Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        assert!(matches!(outcome(0, None), Outcome::Delivered));
        assert!(matches!(outcome(3, None), Outcome::Rejected(_)));
        // The endpoint refused, not the export: kept and retried, saying so.
        for code in [7, 12, 16] {
            assert!(
                matches!(outcome(code, None), Outcome::Retry { reason, .. } if reason.contains("exports stay queued")),
                "{code}"
            );
        }
    }

    /// An https:// endpoint that answers plain HTTP: retried, saying it is not TLS (rustls
    /// said only "received corrupt message of type InvalidContentType").
    #[tokio::test]
    async fn an_https_endpoint_answering_plain_http_is_said_to_be_not_tls() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let cfg = ForwarderConfig::new("b", ForwardProtocol::Http, &format!("https://{addr}"));
        let exporter = Exporter::new(&cfg).unwrap();
        match exporter.export(Signal::Traces, Bytes::new()).await {
            Outcome::Retry { reason, .. } => {
                assert!(reason.contains("does not speak TLS"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// HTTP answers: overload and gateway trouble are retried, and so are the answers that
    /// refuse the endpoint (wrong path or port, credentials); a refused export is dropped.
    #[test]
    fn http_answers_are_retried_as_otlp_says_and_endpoint_refusals_kept() {
        let outcome = |code: u16| {
            http_outcome(
                StatusCode::from_u16(code).unwrap(),
                format!("HTTP {code}"),
                None,
            )
        };
        for code in [429, 502, 503, 504] {
            assert!(
                matches!(outcome(code), Outcome::Retry { reason, .. } if reason == format!("HTTP {code}"))
            );
        }
        for code in [401, 403, 404, 405, 407, 421] {
            assert!(
                matches!(outcome(code), Outcome::Retry { reason, .. } if reason.contains("check its address, path")),
                "{code}"
            );
        }
        for code in [400, 413, 415, 500] {
            assert!(matches!(outcome(code), Outcome::Rejected(_)), "{code}");
        }
    }
}
