//! The `exporters` section: downstream endpoints that get a copy of everything stored. Each
//! entry is read from the file as is and run with; [`ForwarderConfig`]'s `Default` is the one
//! set of defaults, and the `--forward-*` flags set the same fields.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{fields, split_credentials, ConfigError, TlsSettings};

/// The Connect route of `push.v1.PusherService/Push`, after a push forwarder's base URL.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// The wire protocol of a forwarder (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardProtocol {
    /// OTLP gRPC (unary calls over HTTP/2; TLS for an `https://` endpoint).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`/v1development/profiles`, `/v1/traces`).
    Http,
    /// Pyroscope's `push.v1.PusherService/Push` (Connect unary, protobuf): profiles only,
    /// as pprof per series with its labels.
    Push,
}

impl std::fmt::Display for ForwardProtocol {
    /// As the config file spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ForwardProtocol::Grpc => "grpc",
            ForwardProtocol::Http => "http",
            ForwardProtocol::Push => "push",
        })
    }
}

/// What a forwarder sends (`signals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    /// Profiles.
    Profiles,
    /// Traces.
    Traces,
}

/// One downstream endpoint (`exporters[i]`, keys as the fields): what is sent, how it is
/// batched and retried, and how much may wait on disk while it is unreachable. `name`,
/// `protocol` and `endpoint` are required in the file; every other key defaults to
/// [`ForwarderConfig::default`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForwarderConfig {
    /// Name in logs, metrics and the queue directory `DATA/forward/{name}/`.
    pub name: String,
    /// gRPC, HTTP or push.
    pub protocol: ForwardProtocol,
    /// Base URL, e.g. `http://collector:4317`, or `https://…` for TLS (checked against the
    /// system's trusted certificates, or those of the PEM file `SSL_CERT_FILE` names).
    /// Credentials in it (`https://user:password@host`) become a basic `authorization`
    /// header (and stay out of the logs).
    pub endpoint: String,
    /// Extra request headers (e.g. authorization), sent with every export.
    #[serde(default = "default::headers", with = "fields::string_map")]
    pub headers: Vec<(String, String)>,
    /// TLS settings of an `https://` endpoint (a private CA, a client certificate).
    #[serde(default = "default::tls")]
    pub tls: TlsSettings,
    /// Gzip request bodies (`content-encoding` / `grpc-encoding: gzip`).
    #[serde(default = "default::gzip")]
    pub gzip: bool,
    /// What is sent; `None` (the default): profiles and traces, profiles only for `push`.
    #[serde(default = "default::signals", skip_serializing_if = "Option::is_none")]
    pub signals: Option<Vec<Signal>>,
    /// Queued records combined into one export at most (256).
    #[serde(default = "default::batch_size")]
    pub batch_size: usize,
    /// Bytes of queued records combined into one export at most, 8 MiB (a single larger
    /// record is still sent alone). Not a file key.
    #[serde(skip, default = "default::batch_max_bytes")]
    pub batch_max_bytes: usize,
    /// How long a queued record may wait for more before an export is sent (1 s).
    #[serde(default = "default::batch_age", with = "fields::duration")]
    pub batch_age: Duration,
    /// Exports sent at once at most, 4 (their records are delivered in any order); while
    /// exports fail, one at a time.
    #[serde(default = "default::max_in_flight")]
    pub max_in_flight: usize,
    /// First retry delay, 0.5 s; doubled per failed attempt up to `retry_max` (with
    /// jitter). Not a file key.
    #[serde(skip, default = "default::retry_initial")]
    pub retry_initial: Duration,
    /// Longest delay between retries (30 s).
    #[serde(default = "default::retry_max", with = "fields::duration")]
    pub retry_max: Duration,
    /// One export's deadline (connect, send, answer), 30 s. Not a file key.
    #[serde(skip, default = "default::timeout")]
    pub timeout: Duration,
    /// Bytes the on-disk queue may hold, 1 GiB; beyond, the oldest records are dropped
    /// (counted in `spanprof_forward_dropped_records_total{reason="queue_full"}`).
    #[serde(default = "default::queue_size", with = "fields::size")]
    pub queue_size: u64,
}

impl Default for ForwarderConfig {
    /// No name or endpoint (the file and flags always give them), gRPC, profiles and
    /// traces, batches of 256 records or 1 s, retries from 0.5 s doubling to 30 s, 4 exports
    /// at once, a 30 s timeout and a 1 GiB queue.
    fn default() -> Self {
        ForwarderConfig {
            name: String::new(),
            protocol: ForwardProtocol::Grpc,
            endpoint: String::new(),
            headers: Vec::new(),
            tls: TlsSettings::default(),
            gzip: false,
            signals: None,
            batch_size: 256,
            batch_max_bytes: 8 << 20,
            batch_age: Duration::from_secs(1),
            max_in_flight: 4,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
            queue_size: 1 << 30,
        }
    }
}

/// Serde's per-field defaults, each [`ForwarderConfig::default`]'s value (a section whose
/// entries require some keys cannot take the struct's `Default` whole).
mod default {
    use super::{Duration, ForwarderConfig, Signal, TlsSettings};

    fn d() -> ForwarderConfig {
        ForwarderConfig::default()
    }
    pub fn headers() -> Vec<(String, String)> {
        d().headers
    }
    pub fn tls() -> TlsSettings {
        d().tls
    }
    pub fn gzip() -> bool {
        d().gzip
    }
    pub fn signals() -> Option<Vec<Signal>> {
        d().signals
    }
    pub fn batch_size() -> usize {
        d().batch_size
    }
    pub fn batch_max_bytes() -> usize {
        d().batch_max_bytes
    }
    pub fn batch_age() -> Duration {
        d().batch_age
    }
    pub fn max_in_flight() -> usize {
        d().max_in_flight
    }
    pub fn retry_initial() -> Duration {
        d().retry_initial
    }
    pub fn retry_max() -> Duration {
        d().retry_max
    }
    pub fn timeout() -> Duration {
        d().timeout
    }
    pub fn queue_size() -> u64 {
        d().queue_size
    }
}

impl ForwarderConfig {
    /// A forwarder with the defaults ([`ForwarderConfig::default`]); credentials in
    /// `endpoint` (`https://user:password@host`) become a basic `authorization` header.
    pub fn new(name: impl Into<String>, protocol: ForwardProtocol, endpoint: &str) -> Self {
        ForwarderConfig {
            name: name.into(),
            protocol,
            endpoint: endpoint.to_owned(),
            ..Default::default()
        }
        .normalized()
    }

    /// The forwarder as run: its endpoint without a trailing `/` and without credentials
    /// (moved to a basic `authorization` before the headers given), the first retry no
    /// longer than `retry_max`. Applied to a file's entries and to the flags' alike.
    pub fn normalized(mut self) -> Self {
        let (endpoint, basic) = split_credentials(self.endpoint.trim_end_matches('/'));
        self.endpoint = endpoint;
        if let Some(b) = basic {
            self.headers.insert(0, ("authorization".to_owned(), b));
        }
        self.retry_initial = self.retry_initial.min(self.retry_max);
        self
    }

    /// Whether profiles are sent: `signals` has them, or is not set.
    pub fn sends_profiles(&self) -> bool {
        self.signals
            .as_ref()
            .is_none_or(|s| s.contains(&Signal::Profiles))
    }

    /// Whether traces are sent: `signals` has them, or is not set and the protocol carries
    /// traces (push.v1 carries profiles only).
    pub fn sends_traces(&self) -> bool {
        match &self.signals {
            Some(s) => s.contains(&Signal::Traces),
            None => self.protocol != ForwardProtocol::Push,
        }
    }

    /// Whether the forwarder can work as given: a queue that holds a batch, retries that
    /// wait, a timeout, valid headers with one authorization at most.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.queue_size < super::MIN_FORWARD_QUEUE_BYTES {
            return Err(format!(
                "queue size (queue_size, --forward-queue-size) {} bytes: must be at least \
                 256MiB (the queue on disk holds the requests waiting for the endpoint, each \
                 up to server.max_decompressed_size)",
                self.queue_size
            )
            .into());
        }
        if self.retry_max < super::MIN_RETRY_DELAY {
            return Err(format!(
                "longest retry delay (retry_max, --forward-retry-max) {:?}: must be at least \
                 100ms (retrying faster floods the endpoint and the log while it is down)",
                self.retry_max
            )
            .into());
        }
        if self.timeout.is_zero() {
            return Err("timeout 0s: an export needs some time to answer".into());
        }
        if self.batch_size == 0 {
            return Err("batch size 0: a batch holds one record at least".into());
        }
        if !(1..=64).contains(&self.max_in_flight) {
            return Err(format!(
                "max_in_flight {}: between 1 and 64 exports at once",
                self.max_in_flight
            )
            .into());
        }
        let https = self.endpoint.starts_with("https://");
        if !https && !self.endpoint.starts_with("http://") {
            return Err(format!(
                "endpoint {:?} must start with http:// or https://",
                self.endpoint
            )
            .into());
        }
        crate::tls::check_scheme(https, &self.tls)?;
        if !self.sends_profiles() && !self.sends_traces() {
            return Err(
                "signals: none; a forwarder sends profiles, traces or both (leave signals out \
                 for both)"
                    .into(),
            );
        }
        if self.protocol == ForwardProtocol::Push && self.sends_traces() {
            return Err(
                "protocol push carries profiles only: leave traces out of its signals \
                 (signals: [profiles]) and send them with an exporter of protocol http or grpc"
                    .into(),
            );
        }
        if self.protocol == ForwardProtocol::Push && self.endpoint.ends_with(PUSH_PATH) {
            return Err(format!(
                "endpoint {}: give the base URL; spanprof adds {} itself",
                self.endpoint, PUSH_PATH
            )
            .into());
        }
        // A signal's full path (as OTel SDKs' OTEL_EXPORTER_OTLP_TRACES_ENDPOINT takes it):
        // the path is added again to each export, which then meets a 404.
        for signal_path in ["/v1development/profiles", "/v1/traces", "/v1/profiles"] {
            if let Some(base) = self.endpoint.strip_suffix(signal_path) {
                return Err(format!(
                    "endpoint {}: give the base URL ({base}); spanprof adds \
                     /v1development/profiles and /v1/traces (or the gRPC method) itself",
                    self.endpoint
                )
                .into());
            }
        }
        super::check_headers(
            &self.headers,
            0,
            "an authorization header, credentials in the endpoint",
        )
    }
}

/// `exporters` as written, each entry [`ForwarderConfig::normalized`].
pub fn deserialize_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ForwarderConfig>, D::Error> {
    Ok(Vec::<ForwarderConfig>::deserialize(d)?
        .into_iter()
        .map(ForwarderConfig::normalized)
        .collect())
}
