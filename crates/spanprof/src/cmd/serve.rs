//! `spanprof serve`: the long-running server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use spanprof_server::config::exporters::Signal;
use spanprof_server::config::units::{ReadableDuration, ReadableSize};
use spanprof_server::config::{ForwardProtocol, ForwarderConfig, ScrapeTarget, ServerConfig};

/// Run spanprof: receive profiles and spans, link and store them, serve the query API.
///
/// With no flags: the UI, API, Pyroscope ingest and OTLP/HTTP on 127.0.0.1:4040, OTLP/HTTP on
/// 127.0.0.1:4318, OTLP gRPC on 127.0.0.1:4317 (this machine only: listeners do not
/// authenticate, so an address beyond loopback needs --allow-unauthenticated), data in
/// ./spanprof-data. Profiles come in pushed (OTLP/HTTP `POST /v1development/profiles`)
/// or pulled from Go `/debug/pprof` endpoints (`--scrape`); spans come in as OTLP traces
/// (`POST /v1/traces`). Samples are linked to their spans from pprof labels such as
/// `otel.profile.span_id` or `span_id`. Logs go to stderr, as text or as JSON lines
/// (`--log-format json`); set the level with RUST_LOG (e.g. RUST_LOG=debug). SIGTERM or
/// Ctrl-C finishes requests in flight, flushes and exits (within 20 s; a second one exits at
/// once: acknowledged data is on disk either way).
///
/// Forwarding (`--forward-otlp-grpc`, `--forward-otlp-http`) sends a copy of everything
/// accepted to other OTLP receivers (Pyroscope, Tempo, Jaeger, a collector, another
/// spanprof). Each forwarder queues on disk under DIR/forward/NAME/ before the sender is
/// answered, and retries with backoff, so restarts and downstream outages lose nothing. An
/// https:// URL is reached over TLS, checked against the system's trusted certificates (or
/// the PEM file SSL_CERT_FILE names, for a private CA).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// YAML configuration file (sections server, storage, receivers, processors, exporters;
    /// --config-example prints every key). Flags given here override what it sets.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print a configuration file with every key and what it does, and exit: the defaults
    /// set, and examples to take up (scrape targets, an exporter, a retention) commented
    /// out. spanprof serve --config-example > spanprof.yaml
    #[arg(long)]
    config_example: bool,
    /// Delete data older than this (e.g. 7d); whole segments go, oldest first.
    #[arg(long, value_name = "DURATION")]
    retention: Option<ReadableDuration>,
    /// Delete the oldest data while the store is larger than this (e.g. 20GiB).
    #[arg(long, value_name = "SIZE")]
    max_size: Option<ReadableSize>,
    /// Data directory of the embedded store [default: ./spanprof-data].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Start with a recording of a real Go service (CPU profiles and the spans they sampled,
    /// re-stamped to end now) in a throwaway store that is deleted at exit, to try the UI
    /// at once. Receivers work as usual, so live data can be added.
    #[arg(long, conflicts_with = "data")]
    demo: bool,
    /// Address of the main listener (UI, API, Pyroscope ingest, OTLP/HTTP): IP:PORT, :PORT
    /// (every interface) or localhost:PORT [default: 127.0.0.1:4040].
    #[arg(long, value_name = "ADDR", value_parser = spanprof_server::config::parse_listen_addr)]
    http_addr: Option<SocketAddr>,
    /// Address of the OTLP/HTTP listener, or "off" [default: 127.0.0.1:4318].
    #[arg(long, value_name = "ADDR")]
    otlp_http_addr: Option<String>,
    /// Address of the OTLP gRPC listener, or "off" [default: 127.0.0.1:4317].
    #[arg(long, value_name = "ADDR")]
    otlp_grpc_addr: Option<String>,
    /// Let listeners bind addresses beyond loopback (0.0.0.0:4040, :4040) though no
    /// credentials are configured (the config file's auth section; docs/security.md):
    /// anyone who reaches them reads every profile and span and can write data. For a
    /// machine behind a firewall or an authenticating proxy; each such listener is warned of
    /// at start.
    #[arg(long)]
    allow_unauthenticated: bool,
    /// Serve TLS (https://, and gRPC over TLS) on every listener with this PEM certificate
    /// (the certificate, then its intermediates); with --tls-key. The files are read again
    /// when they change, so a renewed certificate is used without a restart.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Ask clients for a certificate signed by a CA of this PEM file (mutual TLS); a client
    /// that shows one must show a valid one. With --tls-client-auth required, every client
    /// must.
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Whether a client certificate is needed: optional (the default) or required (needs
    /// --tls-client-ca).
    #[arg(long, value_name = "WHEN")]
    tls_client_auth: Option<spanprof_server::listen::tls::ClientAuth>,
    /// Pull profiles from a Go service: NAME=URL (the base URL, /debug/pprof/... is
    /// appended; https:// is checked as forwarders' are; user:password@ in it is sent as
    /// basic authorization, and not logged; headers and bearer tokens go in the config
    /// file). Repeat for several services.
    #[arg(long = "scrape", value_name = "NAME=URL")]
    scrape: Vec<String>,
    /// Profiles to pull from every --scrape target (cpu, heap, allocs, goroutine, mutex, block;
    /// heap or allocs, not both: Go answers them with the same profile). Default: a scrape
    /// target's in the config file.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "KINDS",
        value_parser = clap::builder::PossibleValuesParser::new(spanprof_server::config::SCRAPE_PROFILES)
    )]
    scrape_profiles: Vec<String>,
    /// Time between scrapes, and the length of each CPU window (e.g. 15s, 10s). Default: a
    /// scrape target's in the config file.
    #[arg(long, value_name = "DURATION")]
    scrape_interval: Option<ReadableDuration>,
    /// How long one scrape may take, connecting and reading included (a CPU profile's request
    /// may take its window more); a target that does not answer in time is retried later.
    /// Default: a scrape target's in the config file.
    #[arg(long, value_name = "DURATION")]
    scrape_timeout: Option<ReadableDuration>,
    /// How many collectors share the --scrape targets (and the config file's): each takes
    /// the targets that hash to it (rendezvous hashing of service and URL, the same on every
    /// replica: no coordinator). With --replica.
    #[arg(long, value_name = "N", requires = "replica")]
    replicas: Option<u32>,
    /// This collector's index among --replicas, 0 to N-1 (a StatefulSet pod's ordinal).
    #[arg(long, value_name = "I", requires = "replicas")]
    replica: Option<u32>,
    /// Do not write to the embedded store: only forward (the API answers from an empty store).
    #[arg(long)]
    no_store: bool,
    /// Grafana's span profiles include child spans: SelectMergeSpanProfile adds the samples
    /// of descendant spans, and the Tempo API marks a span with pyroscope.profile.id when its
    /// subtree has samples. Without it, both use the span's own samples only (exact match,
    /// as Pyroscope).
    #[arg(long)]
    span_profiles_include_children: bool,
    /// A sample label (or OTLP attribute) key holding span ids (16 hex chars), e.g.
    /// custom.span_id; repeat for several. Added to processors.link.span_id_keys of the
    /// config file, or to the defaults otel.profile.span_id, span_id, profile_id.
    #[arg(long = "span-id-key", value_name = "KEY")]
    span_id_keys: Vec<String>,
    /// A key holding trace ids (32 hex chars); repeat for several. Added to the configured
    /// keys, or to the defaults otel.profile.trace_id, trace_id.
    #[arg(long = "trace-id-key", value_name = "KEY")]
    trace_id_keys: Vec<String>,
    /// A key holding span names; repeat for several. Added to the configured keys, or to the
    /// defaults otel.profile.span_name, span_name.
    #[arg(long = "span-name-key", value_name = "KEY")]
    span_name_keys: Vec<String>,
    /// Forward profiles and traces over OTLP gRPC: NAME=URL, e.g.
    /// tempo=http://tempo:4317. Repeat for several downstreams.
    #[arg(long = "forward-otlp-grpc", value_name = "NAME=URL")]
    forward_otlp_grpc: Vec<String>,
    /// Forward profiles and traces over OTLP/HTTP (protobuf): NAME=URL, e.g.
    /// pyroscope=http://pyroscope:4040 (/v1development/profiles and /v1/traces are appended).
    #[arg(long = "forward-otlp-http", value_name = "NAME=URL")]
    forward_otlp_http: Vec<String>,
    /// A header sent with every export: K=V for all forwarders, or NAME:K=V for one
    /// (e.g. "tempo:authorization=Bearer xyz"). Repeat for several.
    #[arg(long = "forward-header", value_name = "[NAME:]K=V")]
    forward_header: Vec<String>,
    /// Send only one signal to a forwarder: NAME=profiles or NAME=traces (default: both).
    #[arg(long = "forward-only", value_name = "NAME=SIGNAL")]
    forward_only: Vec<String>,
    /// Gzip forwarded exports.
    #[arg(long)]
    forward_gzip: bool,
    /// Queued records combined into one export at most. Defaults of the --forward flags: an
    /// exporter's in the config file (--config-example).
    #[arg(long, value_name = "N")]
    forward_batch_size: Option<usize>,
    /// How long a record may wait for others before an export is sent.
    #[arg(long, value_name = "DURATION")]
    forward_batch_age: Option<ReadableDuration>,
    /// Longest delay between retries of a failed export (the first is 0.5 s, doubling).
    #[arg(long, value_name = "DURATION")]
    forward_retry_max: Option<ReadableDuration>,
    /// Disk each forwarder's queue may use; beyond, the oldest records are dropped (counted).
    #[arg(long, value_name = "SIZE")]
    forward_queue_size: Option<ReadableSize>,
}

fn optional_addr(s: &str, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    match s {
        "off" | "none" | "" => Ok(None),
        a => spanprof_server::config::parse_listen_addr(a)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{flag} {e} (or off)")),
    }
}

/// The configuration before the flags: built-in defaults, then `--config`'s file. Read once,
/// before logging starts (the file may ask for JSON logs, `server.log_format: json`), and
/// handed to [`run`]: a second read of a pipe (`--config <(…)`) found it empty and ran on the
/// defaults.
pub fn file_config(args: &Args) -> Result<ServerConfig, spanprof_server::config_file::ConfigError> {
    // gRPC on 127.0.0.1:4317 is the server section's default: a file without the section
    // keeps it.
    let base = ServerConfig::default();
    match &args.config {
        Some(path) => spanprof_server::config_file::load(path, base),
        None => Ok(base),
    }
}

/// `json_logs`: logs are JSON lines (`--log-format json`), so the line saying where the
/// server listens is one too; `file_config`: [`file_config`]'s answer.
// Long: the start-up order (config, logging, store, listeners) read top to bottom.
#[allow(clippy::too_many_lines)]
pub fn run(
    args: Args,
    json_logs: bool,
    file_config: Result<ServerConfig, spanprof_server::config_file::ConfigError>,
) -> anyhow::Result<ExitCode> {
    if args.config_example {
        print!("{}", spanprof_server::config_file::EXAMPLE);
        return Ok(ExitCode::SUCCESS);
    }
    // Built-in defaults, then the file, then the flags given.
    let mut config = file_config?;
    if let Some(d) = &args.data {
        config.storage.dir = d.clone();
    }
    if let Some(a) = args.http_addr {
        config.server.http_addr = a;
    }
    if let Some(a) = &args.otlp_http_addr {
        config.server.otlp_http_addr = optional_addr(a, "--otlp-http-addr")?;
    }
    if let Some(a) = &args.otlp_grpc_addr {
        config.server.otlp_grpc_addr = optional_addr(a, "--otlp-grpc-addr")?;
    }
    config.server.allow_unauthenticated |= args.allow_unauthenticated;
    tls_flags(&args, &mut config)?;
    config.storage.retention = args.retention.or(config.storage.retention);
    config.storage.max_size = args.max_size.or(config.storage.max_size);
    for spec in &args.scrape {
        let (name, url) = spec.split_once('=').with_context(|| {
            format!("--scrape {spec:?}: expected NAME=URL, e.g. checkout=http://127.0.0.1:6060")
        })?;
        let mut target = ScrapeTarget::new(name, url);
        if !args.scrape_profiles.is_empty() {
            target.profiles = args.scrape_profiles.clone();
        }
        if let Some(d) = args.scrape_interval {
            target.interval = d.0;
        }
        if let Some(d) = args.scrape_timeout {
            target.timeout = d.0;
        }
        config.receivers.scrape.push(target);
    }
    if let (Some(count), Some(index)) = (args.replicas, args.replica) {
        config.receivers.replicas = Some(count);
        config.receivers.replica = Some(index);
    }
    if args.no_store {
        config.storage.enabled = Some(false);
    }
    if args.span_profiles_include_children {
        config.server.span_profiles_include_children = true;
    }
    let link = &mut config.processors.link;
    for (keys, added) in [
        (&mut link.span_id_keys, &args.span_id_keys),
        (&mut link.trace_id_keys, &args.trace_id_keys),
        (&mut link.span_name_keys, &args.span_name_keys),
    ] {
        for key in added {
            if key.is_empty() {
                anyhow::bail!(
                    "--span-id-key, --trace-id-key and --span-name-key take a non-empty key"
                );
            }
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    config.exporters.extend(forwarders(&args)?);
    // Once, on the file with the flags over it.
    config.validate().map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.config {
        warn_if_others_read_secrets(path, &config);
    }
    if !args.demo {
        owner_only_dir(&config.storage.dir);
    }
    let _demo_dir = if args.demo {
        let dir = TempDir::new()?;
        config.storage.dir = dir.0.clone();
        config.demo = true;
        Some(dir)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // Dropped once the server has stopped: the watchdog ends then.
    let (stopped, stopped_rx) = std::sync::mpsc::channel::<()>();
    // Installed before the server listens: a SIGTERM sent as soon as it says it serves (by a
    // supervisor, a test) stops it cleanly instead of killing it.
    let signal = {
        let _runtime = runtime.enter();
        Signals::install().context("installing the SIGTERM and SIGINT handlers")?
    };
    let scheme = if config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    runtime.block_on(async {
        spanprof_server::serve(config, stop_on_signal(signal, stopped_rx), |bound| {
            // One line a script can wait for, with a URL a browser opens: on every interface
            // (0.0.0.0, the default) that is this machine's loopback, as browsers now refuse
            // http://0.0.0.0.
            let mut url = bound.http;
            if url.ip().is_unspecified() {
                url.set_ip(if url.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            if json_logs {
                tracing::info!(url = %format_args!("{scheme}://{url}"), "spanprof serving");
            } else {
                // Not eprintln!: an unwritable stderr must not stop the server.
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!("spanprof serving on {scheme}://{url}\n"),
                );
            }
        })
        .await
    })?;
    drop(stopped);
    // Queries whose clients left may still be computing on blocking threads; what was
    // acknowledged is on disk by now, so they are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(200));
    Ok(ExitCode::SUCCESS)
}

/// `--tls-cert`, `--tls-key`, `--tls-client-ca` and `--tls-client-auth` over the file's
/// `server.tls`: the certificate flags replace its files, the client ones its client
/// settings.
fn tls_flags(args: &Args, config: &mut ServerConfig) -> anyhow::Result<()> {
    use spanprof_server::listen::tls::{ClientAuth, ListenTlsConfig};
    let mut tls = match (&args.tls_cert, &args.tls_key, config.server.tls.take()) {
        (Some(cert), Some(key), from_file) => ListenTlsConfig {
            cert_file: cert.clone(),
            key_file: key.clone(),
            client_ca_file: from_file.as_ref().and_then(|t| t.client_ca_file.clone()),
            client_auth: from_file.map_or(ClientAuth::Optional, |t| t.client_auth),
        },
        (_, _, Some(from_file)) => from_file,
        _ => {
            if args.tls_client_ca.is_some() || args.tls_client_auth.is_some() {
                anyhow::bail!(
                    "--tls-client-ca and --tls-client-auth need TLS: give --tls-cert and \
                     --tls-key (or server.tls in the config file)"
                );
            }
            return Ok(());
        }
    };
    if let Some(ca) = &args.tls_client_ca {
        tls.client_ca_file = Some(ca.clone());
    }
    if let Some(auth) = args.tls_client_auth {
        tls.client_auth = auth;
    }
    config.server.tls = Some(tls);
    Ok(())
}

/// A config file holding credentials (headers of scrape targets or exporters) that other users
/// can read is told once at start: they could take the credentials from it.
fn warn_if_others_read_secrets(path: &std::path::Path, config: &ServerConfig) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let secrets = config
            .receivers
            .scrape
            .iter()
            .any(|t| !t.headers.is_empty())
            || config.exporters.iter().any(|f| !f.headers.is_empty());
        let mode = std::fs::metadata(path).map_or(0, |m| m.permissions().mode());
        if secrets && mode & 0o044 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = %format_args!("{:o}", mode & 0o777),
                "the config file holds credentials (headers) and other users can read it: chmod 600 it"
            );
        }
    }
}

/// An existing data directory that others can enter (made by an older spanprof, or by hand)
/// is made owner-only, and said so; a new one is created so by the process's umask.
fn owner_only_dir(dir: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::metadata(dir) else {
            return;
        };
        let mode = meta.permissions().mode();
        if meta.is_dir() && mode & 0o077 != 0 {
            match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)) {
                Ok(()) => tracing::info!(
                    dir = %dir.display(),
                    was = %format_args!("{:o}", mode & 0o777),
                    "the data directory was open to other users: made owner-only (700)"
                ),
                Err(e) => tracing::warn!(
                    dir = %dir.display(),
                    error = %e,
                    "the data directory is open to other users and could not be made owner-only"
                ),
            }
        }
    }
}

/// How long the server may take to stop after SIGTERM or Ctrl-C before the process exits
/// anyway: in-flight requests finish and the store flushes well within it, but a slow query
/// (a huge flame graph) would otherwise hold the process for as long as it computes. Exiting
/// then is safe: acknowledged data is on disk, and the store recovers as after a crash.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Signals this soon after the first are the same request to stop, delivered twice: Ctrl-C in
/// a terminal signals the whole process group, so a wrapper that forwards it (a shell script,
/// a process supervisor) sends a second one within milliseconds. A person pressing Ctrl-C
/// again is slower than this.
const SAME_REQUEST: Duration = Duration::from_millis(250);

/// Resolves on SIGTERM or Ctrl-C, and starts the [`STOP_GRACE`] watchdog: it exits the
/// process unless `stopped` is closed (the server stopped) within the grace. A second signal
/// exits at once (an operator who presses Ctrl-C again does not want to wait for a stalled
/// upload), unless it came within [`SAME_REQUEST`] of the first.
async fn stop_on_signal(mut signals: Signals, stopped: std::sync::mpsc::Receiver<()>) {
    let first = signals.next().await;
    let first_at = std::time::Instant::now();
    tracing::info!(signal = first, "stopping (send it again to exit at once)");
    std::thread::spawn(move || {
        if stopped.recv_timeout(STOP_GRACE) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            return;
        }
        tracing::warn!(
            grace_s = STOP_GRACE.as_secs(),
            "still stopping (a slow request in flight): exiting now; acknowledged data is on disk"
        );
        std::process::exit(1);
    });
    tokio::spawn(async move {
        let again = loop {
            let again = signals.next().await;
            let after = first_at.elapsed();
            if after >= SAME_REQUEST {
                break again;
            }
            tracing::info!(
                signal = again,
                after_ms = after.as_millis() as u64,
                "a second signal right after the first: taken as the same request to stop \
                 (send it again to exit at once)"
            );
        };
        tracing::warn!(
            signal = again,
            "a second signal while stopping: exiting now; acknowledged data is on disk"
        );
        std::process::exit(1);
    });
}

/// A fresh directory under the system's temporary directory, deleted when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        remove_stale_demo_dirs();
        let dir = std::env::temp_dir().join(format!("spanprof-demo-{}", std::process::id()));
        // A directory left by an earlier process with the same id holds nothing of ours.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the demo data directory {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

/// Removes the demo stores of `serve --demo` processes that ended without cleaning up (killed
/// with SIGKILL): those whose store lock nobody holds. A running demo holds its lock, so its
/// directory stays; so does one younger than a minute (its process may be between creating
/// the lock file and taking the lock).
fn remove_stale_demo_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_demo = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("spanprof-demo-"));
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() >= 60));
        if !is_demo || !old {
            continue;
        }
        let lock = path.join(spanprof_store::store::LOCK_FILE);
        let free = std::fs::OpenOptions::new()
            .write(true)
            .open(&lock)
            .is_ok_and(|f| f.try_lock().is_ok());
        if free {
            tracing::info!(dir = %path.display(), "removing the store of a demo that did not clean up");
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The forwarders the flags describe (checked with the rest, by `ServerConfig::validate`).
fn forwarders(args: &Args) -> anyhow::Result<Vec<ForwarderConfig>> {
    let mut out: Vec<ForwarderConfig> = Vec::new();
    let specs = args
        .forward_otlp_grpc
        .iter()
        .map(|s| (ForwardProtocol::Grpc, "--forward-otlp-grpc", s))
        .chain(
            args.forward_otlp_http
                .iter()
                .map(|s| (ForwardProtocol::Http, "--forward-otlp-http", s)),
        );
    for (protocol, flag, spec) in specs {
        let (name, url) = spec.split_once('=').with_context(|| {
            format!("{flag} {spec:?}: expected NAME=URL, e.g. downstream=http://127.0.0.1:4317")
        })?;
        if out.iter().any(|f| f.name == name) {
            anyhow::bail!("{flag} {spec:?}: the name {name:?} is used twice");
        }
        let mut f = ForwarderConfig::new(name, protocol, url);
        f.gzip = args.forward_gzip;
        f.batch_size = args.forward_batch_size.unwrap_or(f.batch_size);
        f.batch_age = args.forward_batch_age.map_or(f.batch_age, |d| d.0);
        f.retry_max = args.forward_retry_max.map_or(f.retry_max, |d| d.0);
        f.queue_size = args.forward_queue_size.map_or(f.queue_size, |s| s.0);
        out.push(f.normalized());
    }
    for spec in &args.forward_header {
        let (key, value) = spec
            .split_once('=')
            .with_context(|| format!("--forward-header {spec:?}: expected [NAME:]K=V"))?;
        let (only, key) = match key.split_once(':') {
            Some((name, key)) => (Some(name), key),
            None => (None, key),
        };
        if let Some(name) = only {
            if !out.iter().any(|f| f.name == name) {
                anyhow::bail!("--forward-header {spec:?}: no forwarder is named {name:?}");
            }
        }
        for f in out.iter_mut().filter(|f| only.is_none_or(|n| n == f.name)) {
            f.headers
                .push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    for spec in &args.forward_only {
        let (name, signal) = spec.split_once('=').with_context(|| {
            format!("--forward-only {spec:?}: expected NAME=profiles or NAME=traces")
        })?;
        let f = out
            .iter_mut()
            .find(|f| f.name == name)
            .with_context(|| format!("--forward-only {spec:?}: no forwarder is named {name:?}"))?;
        match signal {
            "profiles" => f.signals = Some(vec![Signal::Profiles]),
            "traces" => f.signals = Some(vec![Signal::Traces]),
            _ => anyhow::bail!("--forward-only {spec:?}: the signal is profiles or traces"),
        }
    }
    Ok(out)
}

/// SIGTERM and Ctrl-C (SIGINT), their handlers installed when this is made (not when first
/// awaited).
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal, named.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{file_config, Args};

    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: Args,
    }

    /// The file's `server` section replaces the defaults whole: a file without it (or with
    /// other keys of it) must keep gRPC on 127.0.0.1:4317, as without a file.
    #[test]
    fn a_file_without_the_grpc_key_keeps_grpc_on_4317() {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spanprof.yaml");
        let grpc = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 4317)));
        for text in [
            "",
            "storage:\n  max_series: 5\n",
            "server:\n  max_body_size: 1MiB\n",
        ] {
            std::fs::write(&path, text).unwrap();
            let args = Serve::parse_from(["serve", "--config", path.to_str().unwrap()]).args;
            let c = file_config(&args).unwrap();
            assert_eq!(c.server.otlp_grpc_addr, grpc, "{text:?}");
        }
        let args = Serve::parse_from(["serve"]).args;
        assert_eq!(file_config(&args).unwrap().server.otlp_grpc_addr, grpc);
        std::fs::write(&path, "server:\n  otlp_grpc_addr: off\n").unwrap();
        let args = Serve::parse_from(["serve", "--config", path.to_str().unwrap()]).args;
        assert_eq!(file_config(&args).unwrap().server.otlp_grpc_addr, None);
    }
}
