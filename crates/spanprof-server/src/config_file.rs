//! The YAML configuration file of `spanprof serve --config FILE`: sections `server`,
//! `storage`, `receivers`, `processors`, `exporters`; every key optional (defaults as
//! without a file), unknown keys an error naming the key and its line, durations and sizes
//! in human units (`15s`, `512MiB`).
//!
//! Every key, with what it does, is in [`EXAMPLE`] (`config_example.yaml`, printed by
//! `spanprof serve --config-example`), which a test loads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::config::units::{ReadableDuration, ReadableSize};
use crate::config::{parse_listen_addr, ForwarderConfig, ServerConfig};

/// A configuration file with every key, commented: defaults or example values.
pub const EXAMPLE: &str = include_str!("config_example.yaml");

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed or has an unknown key or a bad value (the message has the line).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    server: Server,
    #[serde(default)]
    storage: crate::config::StorageConfig,
    #[serde(default)]
    receivers: crate::config::ReceiversConfig,
    #[serde(default)]
    processors: crate::config::ProcessorsConfig,
    #[serde(
        default,
        deserialize_with = "crate::config::exporters::deserialize_list"
    )]
    exporters: Vec<ForwarderConfig>,
    #[serde(default)]
    auth: crate::auth::config::AuthConfig,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Server {
    #[serde(default, deserialize_with = "listen_addr")]
    http_addr: Option<SocketAddr>,
    #[serde(default, deserialize_with = "optional_addr")]
    otlp_http_addr: Option<Option<SocketAddr>>,
    #[serde(default, deserialize_with = "optional_addr")]
    otlp_grpc_addr: Option<Option<SocketAddr>>,
    allowed_hosts: Option<Vec<String>>,
    allow_unauthenticated: Option<bool>,
    tls: Option<ListenTls>,
    max_body_size: Option<ReadableSize>,
    max_decompressed_size: Option<ReadableSize>,
    max_inflight_size: Option<ReadableSize>,
    max_ingest_rate: Option<ReadableSize>,
    max_ingest_burst: Option<ReadableSize>,
    max_profile_samples: Option<usize>,
    max_profile_locations: Option<usize>,
    max_profile_frames: Option<usize>,
    max_profile_series: Option<usize>,
    max_profile_string_length: Option<usize>,
    max_label_names_per_series: Option<usize>,
    max_label_name_length: Option<usize>,
    max_label_value_length: Option<usize>,
    span_profiles_include_children: Option<bool>,
    query_timeout: Option<ReadableDuration>,
    log_format: Option<LogFormat>,
}

/// `server.tls`: TLS on every listener.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    client_auth: ClientAuthKey,
}

/// `server.tls.client_auth`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum ClientAuthKey {
    #[default]
    Optional,
    Required,
}

/// `server.log_format`.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum LogFormat {
    Text,
    Json,
}

/// A listen address; parsed inside the visit, as [`ReadableSize`], so that an error names its
/// key (`server.otlp_http_addr: …`).
fn listen_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    Ok(optional_listen_addr(d, false)?.flatten())
}

/// A listen address, or `off` (`none`, empty) for none.
fn optional_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<SocketAddr>>, D::Error> {
    optional_listen_addr(d, true)
}

fn optional_listen_addr<'de, D: Deserializer<'de>>(
    d: D,
    may_be_off: bool,
) -> Result<Option<Option<SocketAddr>>, D::Error> {
    struct V(bool);
    impl serde::de::Visitor<'_> for V {
        type Value = Option<Option<SocketAddr>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(if self.0 {
                "a listen address such as 0.0.0.0:4318 or :4318, or off"
            } else {
                "a listen address such as 0.0.0.0:4040 or :4040"
            })
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            match s {
                "off" | "none" | "" if self.0 => Ok(Some(None)),
                a => parse_listen_addr(a)
                    .map(|a| Some(Some(a)))
                    .map_err(|e| E::custom(if self.0 { format!("{e} (or off)") } else { e })),
            }
        }
    }
    d.deserialize_str(V(may_be_off))
}

/// A YAML error as a user reads it: serde's Rust type names in words, and a line for an
/// unknown top-level section (the parser gives none at the root).
fn worded(message: String, text: &str) -> String {
    let mut m = message
        .replace("expected usize", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("expected a boolean", "expected true or false")
        .replace(
            "expected struct File",
            "expected sections (server, storage, receivers, processors, exporters, auth) with their keys",
        );
    // A transform rule's error names the rule (`processors.transform[2] "pod" …`) after the
    // section's key.
    m = m.replace("processors: processors.transform[", "processors.transform[");
    // A section given a value: "expected struct Server" names our type.
    if let Some(at) = m.find("expected struct ") {
        let name_end = m[at + "expected struct ".len()..]
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .map_or(m.len(), |i| at + "expected struct ".len() + i);
        m.replace_range(at..name_end, "expected a mapping of keys");
    }
    if !m.contains(" at line ") {
        if let Some(name) = m
            .strip_prefix("unknown field `")
            .and_then(|r| r.split_once('`'))
            .map(|(name, _)| name.to_owned())
        {
            let line = text
                .lines()
                .position(|l| l.starts_with(&format!("{name}:")))
                .map(|i| i + 1);
            if let Some(line) = line {
                m.push_str(&format!(" at line {line} column 1"));
            }
        }
    }
    m
}

/// Reads `path` onto `base`: the sections read as the runtime config (`storage`,
/// `receivers`, `processors`, `exporters`) replace the base's whole, defaults where the file is silent;
/// the `server` keys the file sets replace the base's values. Values
/// are checked once flags are over them, by [`ServerConfig::validate`].
// Long: copies each file key onto ServerConfig; it goes with the single config model (issue #45 item 3).
#[allow(clippy::too_many_lines)]
pub fn load(path: &Path, mut base: ServerConfig) -> Result<ServerConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let file: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_norway::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: worded(e.to_string(), &text),
        })?
    };
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    base.auth = std::sync::Arc::new(file.auth.load().map_err(invalid)?);
    let s = file.server;
    if let Some(a) = s.http_addr {
        base.http_addr = a;
    }
    if let Some(a) = s.otlp_http_addr {
        base.otlp_http_addr = a;
    }
    if let Some(a) = s.otlp_grpc_addr {
        base.otlp_grpc_addr = a;
    }
    if let Some(b) = s.allow_unauthenticated {
        base.allow_unauthenticated = b;
    }
    if let Some(t) = s.tls {
        use crate::listen::tls::{ClientAuth, ListenTlsConfig};
        let tls = ListenTlsConfig {
            cert_file: t.cert_file,
            key_file: t.key_file,
            client_ca_file: t.client_ca_file,
            client_auth: match t.client_auth {
                ClientAuthKey::Optional => ClientAuth::Optional,
                ClientAuthKey::Required => ClientAuth::Required,
            },
        };
        base.tls = Some(tls);
    }
    if let Some(hosts) = s.allowed_hosts {
        base.allowed_hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
    }
    if let Some(n) = s.max_body_size.map(|v| v.0) {
        base.limits.max_body_bytes = n as usize;
    }
    if let Some(n) = s.max_decompressed_size.map(|v| v.0) {
        base.limits.max_decompressed_bytes = n as usize;
    }
    if let Some(n) = s.max_ingest_rate.map(|v| v.0) {
        base.limits.max_ingest_rate = n;
    }
    if let Some(n) = s.max_ingest_burst.map(|v| v.0) {
        base.limits.max_ingest_burst = n;
    }
    if let Some(n) = s.max_inflight_size.map(|v| v.0) {
        base.limits.max_inflight_bytes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let profile = &mut base.limits.profile;
    profile.max_samples = s.max_profile_samples.unwrap_or(profile.max_samples);
    profile.max_locations = s.max_profile_locations.unwrap_or(profile.max_locations);
    profile.max_frames = s.max_profile_frames.unwrap_or(profile.max_frames);
    profile.max_series = s.max_profile_series.unwrap_or(profile.max_series);
    profile.max_string_bytes = s
        .max_profile_string_length
        .unwrap_or(profile.max_string_bytes);
    let limits = &mut base.limits;
    limits.max_label_names_per_series = s
        .max_label_names_per_series
        .unwrap_or(limits.max_label_names_per_series);
    limits.max_label_name_length = s
        .max_label_name_length
        .unwrap_or(limits.max_label_name_length);
    limits.max_label_value_length = s
        .max_label_value_length
        .unwrap_or(limits.max_label_value_length);
    if let Some(b) = s.span_profiles_include_children {
        base.span_profiles_include_children = b;
    }
    if let Some(t) = s.query_timeout.map(|v| v.0) {
        base.query_timeout = t;
    }
    if let Some(f) = s.log_format {
        base.json_logs = f == LogFormat::Json;
    }
    if file.storage.backend == crate::config::remote::BackendKind::Remote {
        let section = file.storage.remote.clone().unwrap_or_default();
        base.remote = Some(section.load().map_err(invalid)?);
    }
    base.storage = file.storage;
    base.receivers = file.receivers;
    base.processors = file.processors;
    base.exporters = file.exporters;
    Ok(base)
}

#[cfg(test)]
mod tests;
