//! Server settings. Every setting has a default; `spanprof serve` with no flags runs the
//! whole thing on one machine.

pub mod exporters;
mod fields;
pub mod processors;
pub mod receivers;
pub mod remote;
pub mod replicas;
pub mod server;
pub mod storage;
pub mod units;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spanprof_store::store::{SeriesLimits, StoreConfig};

pub use exporters::{ForwardProtocol, ForwarderConfig, PUSH_PATH};
pub use processors::{BatchConfig, ProcessorsConfig};
pub use receivers::ReceiversConfig;
pub use server::{LogFormat, ServerSection};
pub use storage::{StorageConfig, MIN_SEGMENT_BYTES};

pub use crate::tls::TlsSettings;

/// Everything `spanprof serve` runs with; each section's `Default` is its defaults.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// The `server` section: listeners, TLS, request and profile limits, the query
    /// timeout, the log format.
    pub server: ServerSection,
    /// Credentials, tenants (`auth` in the config file): none by default.
    pub auth: std::sync::Arc<crate::auth::Auth>,
    /// The `storage` section: the store's directory, retention and sizes, the backend.
    pub storage: StorageConfig,
    /// The `processors` section: linking, the pipeline's queue and batching, transforms.
    pub processors: ProcessorsConfig,
    /// The `receivers` section: targets to pull profiles from, and this process's share of
    /// them.
    pub receivers: ReceiversConfig,
    /// The `exporters` section: downstream endpoints that get a copy of everything stored
    /// (the `--forward-*` flags add some).
    pub exporters: Vec<ForwarderConfig>,
    /// Load the recorded demo data ([`crate::demo`]) at start-up, re-stamped to the present.
    pub demo: bool,
    /// `storage.backend: remote`: the Pyroscope and Tempo queries are answered from
    /// (`None`: the embedded store).
    pub remote: Option<remote::RemoteConfig>,
}

/// A configuration that cannot work: the message names the key (and its flag).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A setting that cannot work, and why, naming its key.
    #[error("{0}")]
    Invalid(String),
    /// An error in one item of a list (`exporters "name"`, `receivers.scrape "service"`).
    #[error("{item}: {source}")]
    Within {
        /// The item, as the user finds it in the file (`exporters "backup"`).
        item: String,
        /// What is wrong in it.
        #[source]
        source: Box<ConfigError>,
    },
    /// TLS settings of an endpoint the server connects to.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The server's own TLS settings (`server.tls`).
    #[error(transparent)]
    ListenTls(#[from] crate::listen::tls::TlsError),
}

impl ConfigError {
    /// `source` inside `item` of a list.
    pub fn within(item: String, source: ConfigError) -> Self {
        ConfigError::Within {
            item,
            source: Box::new(source),
        }
    }
}

impl From<String> for ConfigError {
    fn from(message: String) -> Self {
        ConfigError::Invalid(message)
    }
}

impl From<&str> for ConfigError {
    fn from(message: &str) -> Self {
        ConfigError::Invalid(message.to_owned())
    }
}

/// Each forwarder's name is letters, digits, `_` and `-` (it names its queue's directory,
/// `forward/NAME` in the data directory, and its metrics), and used once.
pub fn check_forwarder_names(forwarders: &[ForwarderConfig]) -> Result<(), ConfigError> {
    for (i, f) in forwarders.iter().enumerate() {
        let valid = !f.name.is_empty()
            && f.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!(
                "forwarder {:?}: a name is letters, digits, '_' and '-' (it names the \
                 forwarder's queue directory and metrics)",
                f.name
            )
            .into());
        }
        if forwarders[..i].iter().any(|g| g.name == f.name) {
            return Err(format!(
                "forwarder {}: the name is used twice (exporters in the config file and \
                 --forward-otlp-grpc/--forward-otlp-http NAME=URL share names); give each its own",
                f.name
            )
            .into());
        }
    }
    Ok(())
}

/// Checks request headers (valid names and values) and that there is one authorization at
/// most, counting `others` given another way (`ways` names the ways, for the message).
fn check_headers(
    headers: &[(String, String)],
    others: usize,
    ways: &str,
) -> Result<(), ConfigError> {
    let mut authorizations = others;
    for (k, v) in headers {
        hyper::header::HeaderName::try_from(k.as_str())
            .map_err(|e| format!("header {k:?}: {e}"))?;
        hyper::header::HeaderValue::try_from(v.as_str())
            .map_err(|e| format!("header {k:?}: {e}"))?;
        authorizations += usize::from(k.eq_ignore_ascii_case("authorization"));
    }
    if authorizations > 1 {
        return Err(format!("more than one authorization ({ways}): give one").into());
    }
    Ok(())
}

/// Smallest on-disk queue a forwarder may have: a few of the largest requests (a record is
/// one request, up to `server.max_decompressed_size`, 64 MiB by default); a smaller one drops
/// a large push as soon as it is queued, with the endpoint up.
pub const MIN_FORWARD_QUEUE_BYTES: u64 = 256 << 20;
/// Shortest longest delay between a forwarder's retries.
pub const MIN_RETRY_DELAY: Duration = Duration::from_millis(100);

/// One service to pull `/debug/pprof/*` from (`receivers.scrape[i]`, keys as the fields).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeTarget {
    /// Service name given to its profiles.
    pub service: String,
    /// Base URL, e.g. `http://127.0.0.1:6060` (the `/debug/pprof/...` paths are appended).
    pub url: String,
    /// Profiles to take: `cpu`, `heap`, `allocs`, `goroutine`, `mutex`, `block` (`heap` or
    /// `allocs`: Go answers both with the same profile).
    #[serde(default = "ScrapeTarget::default_profiles")]
    pub profiles: Vec<String>,
    /// Time between non-CPU scrapes; also the CPU window length (windows are back to back).
    #[serde(default = "ScrapeTarget::default_interval", with = "fields::duration")]
    pub interval: Duration,
    /// How long a scrape may take, connecting and reading included; a CPU profile's request
    /// may take its window more (default 10 s, as Prometheus' scrape_timeout).
    #[serde(default = "ScrapeTarget::default_timeout", with = "fields::duration")]
    pub timeout: Duration,
    /// Extra resource labels for its profiles.
    #[serde(default, with = "fields::string_map")]
    pub labels: Vec<(String, String)>,
    /// Request headers sent with every scrape (an `authorization` for a pprof endpoint behind
    /// authentication). Credentials in the URL (`http://user:password@host:6060`) become a
    /// basic `authorization` here and leave the URL, which is logged.
    #[serde(default, with = "fields::string_map")]
    pub headers: Vec<(String, String)>,
    /// A file whose content (white space trimmed) is sent as `authorization: Bearer …`,
    /// read at each scrape, so a rotated token (a Kubernetes service account's) is used at
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<PathBuf>,
    /// TLS settings of an `https://` target (a private CA, a client certificate).
    #[serde(default)]
    pub tls: TlsSettings,
    /// The tenant whose store gets what is scraped (the default tenant unless set).
    #[serde(default = "crate::auth::TenantId::default_tenant")]
    pub tenant: crate::auth::TenantId,
}

/// A listen address: `IP:PORT` (`[::1]:4040` for IPv6), `:PORT` for every interface (as Go
/// writes it) or `localhost:PORT` for this machine only.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let parsed = if let Some(port) = s.strip_prefix(':') {
        port.parse::<u16>()
            .ok()
            .map(|p| SocketAddr::from(([0, 0, 0, 0], p)))
    } else if let Some(port) = s.strip_prefix("localhost:") {
        port.parse::<u16>()
            .ok()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    } else {
        s.parse().ok()
    };
    parsed.ok_or_else(|| {
        format!(
            "{s:?} is not a listen address: give IP:PORT, e.g. 0.0.0.0:4040 (every interface), \
             127.0.0.1:4040 or localhost:4040 (this machine only), or :4040"
        )
    })
}

/// The profile kinds a scrape target can be asked for (its `/debug/pprof/...` endpoints).
pub const SCRAPE_PROFILES: &[&str] = &["cpu", "heap", "allocs", "goroutine", "mutex", "block"];

impl ScrapeTarget {
    /// Profiles taken unless set (`profiles`, `--scrape-profiles`).
    pub const DEFAULT_PROFILES: &[&str] = &["cpu", "heap", "goroutine"];
    /// Time between scrapes unless set (`interval`, `--scrape-interval`).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
    /// How long a scrape may take unless set (`timeout`, `--scrape-timeout`).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// A target with the default profiles (cpu, heap, goroutine) every 15 s, 10 s timeout;
    /// credentials in `url` become a basic `authorization` header. A URL of the pprof index
    /// itself (`…/debug/pprof`, what a browser shows) is taken for its base: the paths were
    /// appended to it, and every scrape was a 404.
    pub fn new(service: impl Into<String>, url: impl Into<String>) -> Self {
        ScrapeTarget {
            service: service.into(),
            url: url.into(),
            profiles: Self::default_profiles(),
            interval: Self::DEFAULT_INTERVAL,
            timeout: Self::DEFAULT_TIMEOUT,
            labels: Vec::new(),
            headers: Vec::new(),
            bearer_token_file: None,
            tls: TlsSettings::default(),
            tenant: crate::auth::TenantId::default_tenant(),
        }
        .normalized()
    }

    /// The target with its URL made the base URL (no trailing `/`, no `/debug/pprof`) and
    /// the URL's credentials moved to a basic `authorization`, before the headers given.
    pub fn normalized(mut self) -> Self {
        let url = self.url.trim_end_matches('/');
        let url = url.strip_suffix("/debug/pprof").unwrap_or(url);
        let (url, basic) = split_credentials(url);
        self.url = url;
        if let Some(b) = basic {
            self.headers.insert(0, ("authorization".to_owned(), b));
        }
        self
    }

    fn default_profiles() -> Vec<String> {
        Self::DEFAULT_PROFILES
            .iter()
            .map(|&p| p.to_owned())
            .collect()
    }

    fn default_interval() -> Duration {
        Self::DEFAULT_INTERVAL
    }

    fn default_timeout() -> Duration {
        Self::DEFAULT_TIMEOUT
    }

    /// Whether the target can be scraped as given: known profile kinds ([`SCRAPE_PROFILES`]),
    /// headers with valid names and values, one authorization at most.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.service.trim().is_empty() {
            return Err(
                "the service name is empty: name the target as its tracer names \
                 the service"
                    .into(),
            );
        }
        if self.interval < Duration::from_secs(1) || self.interval.subsec_nanos() != 0 {
            return Err(format!(
                "interval {}: must be whole seconds, at least 1s (a CPU window lasts \
                 whole seconds)",
                format_duration(self.interval)
            )
            .into());
        }
        if self.timeout.is_zero() {
            return Err("timeout 0s: a scrape needs some time to answer".into());
        }
        if self.profiles.is_empty() {
            return Err(format!(
                "no profiles to take: give some of {}",
                SCRAPE_PROFILES.join(", ")
            )
            .into());
        }
        if let Some(kind) = self
            .profiles
            .iter()
            .find(|k| !SCRAPE_PROFILES.contains(&k.as_str()))
        {
            return Err(format!(
                "unknown profile kind {kind:?}: use {}",
                SCRAPE_PROFILES.join(", ")
            )
            .into());
        }
        if let Some((_, kind)) = self
            .profiles
            .iter()
            .enumerate()
            .find(|(i, k)| self.profiles[..*i].contains(k))
        {
            return Err(format!(
                "profile kind {kind:?} is given twice: each would be stored, and counted, twice"
            )
            .into());
        }
        if ["heap", "allocs"]
            .iter()
            .all(|k| self.profiles.iter().any(|p| p == k))
        {
            return Err(
                "heap and allocs are both given: Go answers both with the same \
                 profile (alloc_objects, alloc_space, inuse_objects, inuse_space; only the \
                 view `go tool pprof` opens differs), so allocations would be counted twice; \
                 take one"
                    .into(),
            );
        }
        crate::tls::check_scheme(self.url.starts_with("https://"), &self.tls)?;
        check_headers(
            &self.headers,
            usize::from(self.bearer_token_file.is_some()),
            "an authorization header, credentials in the url, bearer_token_file",
        )
    }
}

/// Refuses two targets of the same service and URL: the target would be scraped twice and
/// its data counted twice.
pub fn check_scrape_targets(targets: &[ScrapeTarget]) -> Result<(), ConfigError> {
    for (i, t) in targets.iter().enumerate() {
        if targets[..i]
            .iter()
            .any(|o| o.service == t.service && o.url == t.url)
        {
            return Err(format!(
                "scrape target {:?} at {} is given twice: it would be scraped twice and its \
                 data counted twice",
                t.service, t.url
            )
            .into());
        }
    }
    Ok(())
}

/// `url` without the `user:password@` of its authority, and that as a basic authorization
/// value (percent-decoded, base64-encoded).
fn split_credentials(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return (url.to_owned(), None);
    };
    let (user, password) = rest[..at].split_once(':').unwrap_or((&rest[..at], ""));
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map_or_else(|_| s.to_owned(), std::borrow::Cow::into_owned)
    };
    let credentials = format!("{}:{}", decode(user), decode(password));
    let mut value = "Basic ".to_owned();
    spanprof_format::json::base64::encode_into(credentials.as_bytes(), &mut value);
    (format!("{scheme}://{}", &rest[at + 1..]), Some(value))
}

impl ServerConfig {
    /// The listeners bound beyond loopback that do not authenticate (no `auth.credentials`),
    /// by setting name (`http_addr`, …).
    pub fn open_listeners(&self) -> impl Iterator<Item = (&'static str, SocketAddr)> + '_ {
        let unauthenticated = !self.auth.enabled();
        [
            ("http_addr", Some(self.server.http_addr)),
            ("otlp_http_addr", self.server.otlp_http_addr),
            ("otlp_grpc_addr", self.server.otlp_grpc_addr),
        ]
        .into_iter()
        .filter_map(|(key, a)| Some((key, a?)))
        .filter(move |(_, a)| unauthenticated && !a.ip().is_loopback())
    }

    /// The store settings for the data directory.
    pub fn store_config(&self) -> StoreConfig {
        let s = &self.storage;
        let mut c = StoreConfig::new(&s.dir);
        c.retention_age_ns = s.retention.map(|d| d.0.as_nanos() as u64);
        c.retention_bytes = s.max_size.map(|m| m.0);
        c.min_free_disk_bytes = s.min_free_disk.0;
        c.segment_max_bytes = s.segment_size.0;
        c.max_profile_series = self.server.max_profile_series;
        c.series = self.series_limits();
        c.max_symbol_bytes = s.max_symbols_size.0;
        c
    }

    /// The store's series limits: the count from `storage.max_series`, a series' labels
    /// from the `server` section.
    pub fn series_limits(&self) -> SeriesLimits {
        SeriesLimits {
            max_series: self.storage.max_series,
            max_labels: self.server.max_label_names_per_series,
            max_name_bytes: self.server.max_label_name_length,
            max_value_bytes: self.server.max_label_value_length,
        }
    }
}

/// `bytes` as the config file writes it: `20GiB`, `512MiB`, `64KiB` when whole, else bytes.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// `d` as the config file writes it: `7d`, `12h`, `30m` when whole, else seconds.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() != 0 {
        return format!("{d:?}");
    }
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s >= size && s.is_multiple_of(size) {
            return format!("{}{unit}", s / size);
        }
    }
    format!("{s}s")
}

/// Parses a byte size such as `64MiB`, `512k`, `1G` or `1048576`. Units are binary, as
/// Pyroscope's and Kubernetes' `Mi` are: `MB` and `M` mean MiB too.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if unit.starts_with(['.', ',']) && unit[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "{s:?}: a size is a whole number of its unit (1.5GiB is 1536MiB)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (try 64MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (use B, KiB, MiB, GiB, TiB; KB, MB, GB and \
                 TB mean the same)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests;
