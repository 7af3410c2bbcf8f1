//! The `server` section: listeners, TLS, request and profile limits, the query timeout, the
//! log format. Read from the file as is and run with; [`ServerSection`]'s `Default` is the
//! one set of defaults, and the flags set the same fields.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use spanprof_format::limits::ProfileLimits;
use spanprof_store::store::SeriesLimits;

use super::{fields, parse_listen_addr};
use crate::listen::tls::ListenTlsConfig;

/// `server` (keys as the fields; sizes in bytes, written `32MiB`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// UI, API, Pyroscope ingest and OTLP/HTTP profiles (`127.0.0.1:4040`).
    #[serde(with = "listen_addr")]
    pub http_addr: SocketAddr,
    /// OTLP/HTTP traces and profiles (`127.0.0.1:4318`); `None` (`off`) disables it.
    #[serde(with = "optional_listen_addr")]
    pub otlp_http_addr: Option<SocketAddr>,
    /// OTLP gRPC traces and profiles (`127.0.0.1:4317`); `None` (`off`) disables it.
    /// Embedders and tests that run several servers set it off.
    #[serde(with = "optional_listen_addr")]
    pub otlp_grpc_addr: Option<SocketAddr>,
    /// Whether listeners may bind addresses beyond loopback though they do not
    /// authenticate (`--allow-unauthenticated`): without it such a configuration is refused
    /// at start, with it each such listener is warned of.
    pub allow_unauthenticated: bool,
    /// Host names the HTTP listeners answer to besides loopback names (lower case, no port):
    /// a listener bound to loopback answers only `localhost` and loopback addresses unless
    /// named here (DNS rebinding); one on other addresses answers only these when any are
    /// set (and IP addresses). See [`crate::browser_guard`].
    #[serde(deserialize_with = "lower_case")]
    pub allowed_hosts: Vec<String>,
    /// TLS on every listener; `None` serves plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenTlsConfig>,
    /// Largest request body as sent (compressed), bytes.
    #[serde(with = "fields::size_usize")]
    pub max_body_size: usize,
    /// Largest request body after decompression (OTLP recommends 64 MiB), bytes.
    #[serde(with = "fields::size_usize")]
    pub max_decompressed_size: usize,
    /// Request bodies, their decompressed copies and what their decoders allocate, that
    /// receivers may hold at once, bytes (0 = no limit); past it, they answer 429 /
    /// RESOURCE_EXHAUSTED (413 for a request that alone needs more). At least
    /// `max_body_size + max_decompressed_size`.
    #[serde(with = "fields::size_usize")]
    pub max_inflight_size: usize,
    /// Request body bytes per second each tenant may send (0 = no limit); past it, 429 with
    /// `Retry-After` ([`crate::receivers::rate`]).
    #[serde(with = "fields::size")]
    pub max_ingest_rate: u64,
    /// Bytes a tenant may send at once after a quiet spell (at least one second's rate).
    #[serde(with = "fields::size")]
    pub max_ingest_burst: u64,
    /// Samples one profile may hold (0 = no limit).
    pub max_profile_samples: usize,
    /// Locations one profile may hold (0 = no limit).
    pub max_profile_locations: usize,
    /// Stack depths summed over one profile's samples (0 = no limit).
    pub max_profile_frames: usize,
    /// Distinct sample label sets of one profile (0 = no limit).
    pub max_profile_series: usize,
    /// Bytes of one function, file or label name in a profile (0 = no limit).
    pub max_profile_string_length: usize,
    /// Labels of one series, `service_name` and resource attributes included (0 = no limit).
    pub max_label_names_per_series: usize,
    /// Bytes of one label name (0 = no limit).
    pub max_label_name_length: usize,
    /// Bytes of one label value, the profile type too (0 = no limit).
    pub max_label_value_length: usize,
    /// What a span's profile is for Grafana. `false` (the default): exactly the samples linked
    /// to the span, as Pyroscope matches span ids — `SelectMergeSpanProfile` selects only the
    /// listed spans, and the Tempo API gives `pyroscope.profile.id` only to spans with samples
    /// of their own. `true`: the span's subtree — `SelectMergeSpanProfile` adds the samples of
    /// every descendant span, and a span gets the attribute when its subtree has samples. One
    /// setting for both, so a span is linked exactly when its span profile has something.
    pub span_profiles_include_children: bool,
    /// How long one query may compute; past it, or once its client has gone, it stops at
    /// its next block or series and frees its query slot.
    #[serde(with = "fields::duration")]
    pub query_timeout: Duration,
    /// How logs are written. The binary sets up logging before it starts the server; this
    /// carries the file's choice to it (`--log-format` wins).
    pub log_format: LogFormat,
}

/// `server.log_format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines for a person.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

impl Default for ServerSection {
    fn default() -> Self {
        let profile = ProfileLimits::default();
        let series = SeriesLimits::default();
        ServerSection {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 4040)),
            otlp_http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 4318))),
            otlp_grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 4317))),
            allow_unauthenticated: false,
            allowed_hosts: Vec::new(),
            tls: None,
            max_body_size: 32 << 20,
            max_decompressed_size: 64 << 20,
            max_inflight_size: 512 << 20,
            max_ingest_rate: 0,
            max_ingest_burst: 0,
            max_profile_samples: profile.max_samples,
            max_profile_locations: profile.max_locations,
            max_profile_frames: profile.max_frames,
            max_profile_series: profile.max_series,
            max_profile_string_length: profile.max_string_bytes,
            max_label_names_per_series: series.max_labels,
            max_label_name_length: series.max_name_bytes,
            max_label_value_length: series.max_value_bytes,
            span_profiles_include_children: false,
            query_timeout: Duration::from_secs(10),
            log_format: LogFormat::Text,
        }
    }
}

impl ServerSection {
    /// What one profile may hold, as the format crate checks it.
    pub fn profile_limits(&self) -> ProfileLimits {
        ProfileLimits {
            max_samples: self.max_profile_samples,
            max_locations: self.max_profile_locations,
            max_frames: self.max_profile_frames,
            max_series: self.max_profile_series,
            max_string_bytes: self.max_profile_string_length,
        }
    }
}

/// Host names as compared: lower case.
fn lower_case<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Vec::<String>::deserialize(d)?
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect())
}

/// A listen address (`0.0.0.0:4040`, `:4040`, `localhost:4040`), parsed inside the visit so
/// that an error names its key.
mod listen_addr {
    use super::{Deserializer, Serializer, SocketAddr};

    pub fn serialize<S: Serializer>(a: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        d.deserialize_str(super::AddrVisitor(false))?
            .ok_or_else(|| serde::de::Error::custom("a listen address is needed here"))
    }
}

/// A listen address, or `off` (`none`, empty) for none.
mod optional_listen_addr {
    use super::{Deserializer, Serializer, SocketAddr};

    pub fn serialize<S: Serializer>(a: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.collect_str(a),
            None => s.serialize_str("off"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        d.deserialize_str(super::AddrVisitor(true))
    }
}

/// Reads a listen address; `.0`: `off` is allowed.
struct AddrVisitor(bool);

impl serde::de::Visitor<'_> for AddrVisitor {
    type Value = Option<SocketAddr>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(if self.0 {
            "a listen address such as 0.0.0.0:4318 or :4318, or off"
        } else {
            "a listen address such as 0.0.0.0:4040 or :4040"
        })
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        match s {
            "off" | "none" | "" if self.0 => Ok(None),
            a => parse_listen_addr(a)
                .map(Some)
                .map_err(|e| E::custom(if self.0 { format!("{e} (or off)") } else { e })),
        }
    }
}
