//! `storage.backend: remote`: where the Pyroscope and the Tempo are, and how to call them.
//! Checked once at start (urls, credential files), so a typo stops the start with its key.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Which source answers queries.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded store (the default).
    #[default]
    Embedded,
    /// A Pyroscope and a Tempo ([`RemoteConfig`]).
    Remote,
}

/// The `storage.remote` section as written in the file.
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct RemoteSection {
    pyroscope: Option<EndpointSection>,
    tempo: Option<EndpointSection>,
    timeout: Option<String>,
    max_answer_size: Option<String>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct EndpointSection {
    url: String,
    tenant: Option<String>,
    bearer_token_file: Option<PathBuf>,
    basic_auth: Option<BasicAuthSection>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct BasicAuthSection {
    username: String,
    password_file: PathBuf,
}

/// The remote pair the query API answers from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// Pyroscope's base URL and credentials (its `querier.v1` API).
    pub pyroscope: Endpoint,
    /// Tempo's base URL and credentials (`/api/v2/traces/{id}`, `/api/search`).
    pub tempo: Endpoint,
    /// Longest wait for one remote call, headers and body (default 30 s).
    pub timeout: Duration,
    /// Most bytes one remote answer may have, decoded (default 64 MiB); past it the query is
    /// answered 502 naming the backend.
    pub max_answer_bytes: usize,
}

/// One remote API: its base URL, tenant and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://` or `https://` base URL, without a trailing slash.
    pub url: String,
    /// Sent as `X-Scope-OrgID` when set.
    pub tenant: Option<String>,
    /// How requests authenticate.
    pub auth: EndpointAuth,
}

/// Credentials of one remote API; secrets stay in their files, read at each call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EndpointAuth {
    /// No credential.
    #[default]
    None,
    /// `Authorization: Bearer <the file's content, trimmed>`.
    BearerFile(PathBuf),
    /// `Authorization: Basic` with this user and the password in the file.
    Basic {
        /// The user name.
        username: String,
        /// The file with the password (trimmed).
        password_file: PathBuf,
    },
}

/// Default of [`RemoteConfig::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`RemoteConfig::max_answer_bytes`] (64 MiB).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 64 << 20;

impl RemoteSection {
    /// The checked configuration; errors name the key.
    pub fn load(self) -> Result<RemoteConfig, ConfigError> {
        let endpoint = |name: &str, e: Option<EndpointSection>| {
            e.ok_or_else(|| {
                format!(
                    "storage.backend remote needs storage.remote.{name}.url (the base URL of \
                     the {name} to answer queries from)"
                )
            })
            .and_then(|e| e.load(name))
        };
        let timeout = match self.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => spanprof_store::time::parse_duration(&t)
                .map(Duration::from_nanos)
                .map_err(|e| format!("storage.remote.timeout {t:?}: {e}"))?,
        };
        if timeout.is_zero() {
            return Err("storage.remote.timeout 0s would fail every query: give e.g. 30s".into());
        }
        let max_answer_bytes = match self.max_answer_size {
            None => DEFAULT_MAX_ANSWER_BYTES,
            Some(s) => crate::config::parse_size(&s)
                .map_err(|e| format!("storage.remote.max_answer_size {s:?}: {e}"))?
                as usize,
        };
        if max_answer_bytes < 1024 {
            return Err("storage.remote.max_answer_size: at least 1KiB".into());
        }
        Ok(RemoteConfig {
            pyroscope: endpoint("pyroscope", self.pyroscope)?,
            tempo: endpoint("tempo", self.tempo)?,
            timeout,
            max_answer_bytes,
        })
    }
}

impl EndpointSection {
    fn load(self, name: &str) -> Result<Endpoint, String> {
        let key = format!("storage.remote.{name}");
        let url = self.url.trim_end_matches('/').to_owned();
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| format!("{key}.url {url:?}: must start with http:// or https://"))?;
        if rest.is_empty() || rest.contains('@') || rest.contains('?') || rest.contains('#') {
            return Err(format!(
                "{key}.url: give scheme, host, port and path only (credentials go in \
                 bearer_token_file or basic_auth, never in the url)"
            ));
        }
        let readable = |what: &str, f: &PathBuf| {
            std::fs::read_to_string(f)
                .map(|_| ())
                .map_err(|e| format!("{key}.{what} {}: {e}", f.display()))
        };
        let auth = match (self.bearer_token_file, self.basic_auth) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{key}: give bearer_token_file or basic_auth, not both"
                ))
            }
            (Some(f), None) => {
                readable("bearer_token_file", &f)?;
                EndpointAuth::BearerFile(f)
            }
            (None, Some(b)) => {
                readable("basic_auth.password_file", &b.password_file)?;
                EndpointAuth::Basic {
                    username: b.username,
                    password_file: b.password_file,
                }
            }
            (None, None) => EndpointAuth::None,
        };
        if let Some(t) = &self.tenant {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("{key}.tenant {t:?}: printable ASCII, no spaces"));
            }
        }
        Ok(Endpoint {
            url,
            tenant: self.tenant,
            auth,
        })
    }
}
