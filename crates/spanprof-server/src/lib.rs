//! `spanprof serve`: receivers, the linking pipeline, the embedded store and the query API.
//!
//! Data flows one way: receivers decode and link what arrives, hand it to the [`pipeline`]
//! (a bounded queue and a batcher), which writes it durably to the store and to every
//! [`forward`]er's on-disk queue before the receiver answers; the API reads from the store.
// Library and binary code only: a function past clippy.toml's limit (100 lines) is split
// at its steps or carries #[allow(clippy::too_many_lines)] with its reason. Tests (unit and
// integration), examples and benches are not held to it, so it is not in [workspace.lints].
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod answer;
pub mod api;
pub mod auth;
pub mod browser_guard;
pub mod clock;
pub mod config;
pub mod config_file;
pub mod demo;
mod durable;
pub mod forward;
pub mod grpc;
pub mod health;
pub mod listen;
pub mod metrics;
pub mod peer;
pub mod pipeline;
pub mod pyroscope_proto;
pub mod receivers;
pub mod remote;
pub mod routes;
pub mod settings;
pub mod signal;
pub mod span_keys;
mod spare;
pub mod tenants;
mod tls;
pub mod transform;
pub mod ui;
pub mod work;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use spanprof_store::store::Store;
use tokio::sync::watch;

use auth::Access;
use axum::extract::DefaultBodyLimit;
pub use config::replicas;
pub use config::ServerConfig;
/// The gRPC messages under their earlier path.
pub use grpc::proto as grpc_proto;
use metrics::Metrics;
use pipeline::Pipeline;
use routes::Routes;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The embedded store (queries read it directly).
    pub store: Arc<Store>,
    /// Where receivers hand their data.
    pub pipeline: Pipeline,
    /// Counters and gauges for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The configuration the server runs with.
    pub config: Arc<ServerConfig>,
    /// Bytes of request bodies being received and decoded, across every receiver.
    pub inflight: Arc<receivers::inflight::Inflight>,
    /// Where the listeners are bound (what the UI tells users to send to).
    pub bound: Bound,
    /// Settings clients keep here (Pyroscope's `settings.v1`, Grafana's Drilldown app).
    pub settings: Arc<settings::Settings>,
    /// Sample labels seen holding span ids under keys that are no link keys.
    pub span_keys: Arc<span_keys::SpanKeys>,
    /// Spans earlier profiles showed nested in others, for linking samples with several.
    pub nesting: Arc<receivers::known_spans::LearnedNesting>,
    /// The tenant whose data this is ([`tenants`]).
    pub tenant: auth::TenantId,
    /// The tenant's ingest rate limit.
    pub ingest_rate: Arc<receivers::rate::IngestRate>,
    /// The query slots the tenant may hold at once ([`api::tenant_query_slots`]).
    pub query_slots: Arc<tokio::sync::Semaphore>,
    /// The remote pair queries are answered from (`storage.backend: remote`); `None`: the
    /// embedded store.
    pub remote: Option<Arc<remote::Remote>>,
}

// The parts handlers take instead of the whole state (axum's `FromRef`): a handler sees
// only what it uses.
impl axum::extract::FromRef<AppState> for api::Queries {
    fn from_ref(app: &AppState) -> Self {
        api::Queries {
            store: Arc::clone(&app.store),
            slots: Arc::clone(&app.query_slots),
            config: Arc::clone(&app.config),
            remote: app.remote.clone(),
            span_keys: Arc::clone(&app.span_keys),
        }
    }
}

impl axum::extract::FromRef<AppState> for health::Readiness {
    fn from_ref(app: &AppState) -> Self {
        health::Readiness {
            pipeline: app.pipeline.clone(),
            metrics: Arc::clone(&app.metrics),
            query_timeout: app.config.server.query_timeout,
        }
    }
}

impl axum::extract::FromRef<AppState> for Arc<Metrics> {
    fn from_ref(app: &AppState) -> Self {
        Arc::clone(&app.metrics)
    }
}

impl axum::extract::FromRef<AppState> for Arc<ServerConfig> {
    fn from_ref(app: &AppState) -> Self {
        Arc::clone(&app.config)
    }
}

impl axum::extract::FromRef<AppState> for Arc<settings::Settings> {
    fn from_ref(app: &AppState) -> Self {
        Arc::clone(&app.settings)
    }
}

impl axum::extract::FromRef<AppState> for Bound {
    fn from_ref(app: &AppState) -> Self {
        app.bound.clone()
    }
}

/// Every route of the main listener; request bodies up to `max_body_bytes`.
fn main_routes(max_body_bytes: usize) -> Routes {
    Routes::new()
        .merge(receivers::otlp::routes())
        .merge(receivers::pyroscope::routes())
        .merge(api::query::routes())
        .merge(api::pyroscope_query::routes())
        .merge(api::tempo::routes())
        .merge(ui::routes())
        .merge(health::probes())
        .get("/metrics", Access::Metrics, api::ops::metrics)
        .map(|r| {
            r.method_not_allowed_fallback(api::ops::method_not_allowed)
                .fallback(api::ops::not_found_main)
                .layer(DefaultBodyLimit::max(max_body_bytes))
        })
}

/// The OTLP/HTTP listener's routes (`:4318`): the OTLP routes and the probes (a load balancer in
/// front of this port alone checks it here); other paths are 404s that say where profiles and
/// traces go.
fn otlp_http_routes() -> Routes {
    receivers::otlp::routes().merge(health::probes()).map(|r| {
        r.method_not_allowed_fallback(api::ops::method_not_allowed)
            .fallback(api::ops::not_found_otlp)
    })
}

/// The gRPC listener's routes (`:4317`): OTLP export and the standard health check.
fn otlp_grpc_routes() -> Routes {
    receivers::grpc::routes()
        .post(grpc::HEALTH_CHECK, Access::Public, health::grpc_check)
        .map(|r| r.fallback(|| async { grpc::status(grpc::Code::Unimplemented, "unknown method: this server implements OTLP ProfilesService/Export and TraceService/Export, and grpc.health.v1.Health/Check") }))
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened.
    #[error("opening the store in {dir}: {source}")]
    Store {
        /// Data directory.
        dir: String,
        /// What failed.
        #[source]
        source: spanprof_store::store::StoreError,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr} for {what}: {source}{hint}", hint = bind_hint(.source, .key, .addr.port()))]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// The listener's purpose, for the message.
        what: &'static str,
        /// Its setting in [`ServerConfig`] (and the config file's `server` section).
        key: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A forwarder could not start.
    #[error("{0}")]
    Forward(#[from] forward::ForwardError),
    /// Scraping could not start.
    #[error("scraping: {0}")]
    Scrape(#[from] receivers::scrape::ScrapeError),
    /// The demo recording could not be loaded.
    #[error("loading the demo data: {0}")]
    Demo(String),
    /// A new tenant would be past `auth.max_tenants`.
    #[error("no more tenants can be opened: {0} are (auth.max_tenants)")]
    TooManyTenants(usize),
    /// The server is stopping: no tenant is opened any more.
    #[error("the server is shutting down")]
    Closing,
    /// The listeners' TLS could not be set up.
    #[error("{0}")]
    Tls(#[from] listen::tls::TlsError),
    /// The remote query backend could not be set up.
    #[error("storage.remote: {0}")]
    Remote(String),
    /// Serving failed.
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

/// Puts the demo recording into the sinks through the pipeline, as receivers would.
async fn load_demo(state: &AppState) -> Result<(), ServerError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let link = state.config.processors.link.clone();
    let demo = tokio::task::spawn_blocking(move || demo::load(now, &link))
        .await
        .expect("decoding the demo recording panicked")
        .map_err(|e| ServerError::Demo(e.to_string()))?;
    let (profiles, spans, samples) = (demo.profiles.len(), demo.spans.len(), demo.samples);
    let submit = |work| state.pipeline.submit(work, crate::metrics::Receiver::Demo);
    submit(pipeline::Work::Spans(demo.spans, None))
        .await
        .map_err(|e| ServerError::Demo(e.to_string()))?;
    for data in demo.profiles {
        submit(pipeline::Work::Profiles(
            data,
            spanprof_store::store::Storing::EachAlone,
        ))
        .await
        .map_err(|e| ServerError::Demo(e.to_string()))?;
    }
    tracing::info!(
        service = demo::SERVICE,
        profiles,
        samples,
        spans,
        shifted_s = demo.shift_ns / 1_000_000_000,
        "demo data loaded, re-stamped to end now"
    );
    Ok(())
}

/// Addresses actually bound (ports resolved when 0 was asked for).
#[derive(Debug, Clone)]
pub struct Bound {
    /// The main HTTP listener (UI, API, Pyroscope ingest, OTLP/HTTP profiles).
    pub http: SocketAddr,
    /// The OTLP/HTTP listener, when enabled.
    pub otlp_http: Option<SocketAddr>,
    /// The OTLP gRPC listener, when enabled.
    pub otlp_grpc: Option<SocketAddr>,
}

/// Runs the server until `shutdown` completes, then drains in-flight work and flushes the
/// store. `on_bound` learns the listening addresses once they are bound.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound) + Send,
) -> Result<(), ServerError> {
    let mut config = config;
    if let Some(r) = config
        .receivers
        .replica_set()
        .map_err(receivers::scrape::ScrapeError::Replicas)?
    {
        r.split(&mut config.receivers.scrape);
    }
    let config = Arc::new(config);
    // The certificate before anything else: a wrong file stops the start at once, naming it.
    let metrics = Arc::new(Metrics::default());
    let tls = match &config.server.tls {
        Some(c) => Some(Arc::new(listen::tls::ServerTls::load(
            c,
            Arc::clone(&metrics),
        )?)),
        None => None,
    };
    // The ports first: one that is taken stops the start before the store's directory is
    // made. Connections wait in the backlog until the store is open and serving starts.
    let listeners = Listeners::bind(&config).await?;
    let bound = listeners.bound()?;
    let version = env!("CARGO_PKG_VERSION");
    metrics.build_info.set(&[version], (), 1.0);
    if !config.storage.store_enabled() {
        tracing::info!("the store is off: data is only forwarded");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let tenants = Arc::new(tenants::Tenants::new(tenants::Shared {
        config: Arc::clone(&config),
        metrics,
        inflight: receivers::inflight::Inflight::new(config.server.max_inflight_size),
        bound: bound.clone(),
        auth: Arc::clone(&config.auth),
        stop: stop_rx.clone(),
        remote: match &config.remote {
            Some(r) => Some(Arc::new(
                remote::Remote::new(r.clone()).map_err(ServerError::Remote)?,
            )),
            None => None,
        },
    }));
    open_named_tenants(&tenants, &config).await?;
    let state = tenants.default_state().await?;
    if config.demo {
        load_demo(&state).await?;
    }
    log_listening(&config, &bound, tls.is_some());
    on_bound(bound);
    log_auth(&config);
    let servers = listeners.serve(&config, &tenants, tls.as_ref(), &stop_rx)?;
    let inflight = Arc::clone(&state.inflight);
    drop(state);
    shutdown.await;
    tracing::info!("shutting down: finishing requests in flight and flushing the store");
    inflight.stop();
    let _ = stop_tx.send(true);
    for s in servers {
        s.await.expect("listener task panicked")?;
    }
    // The listeners are done with the tenants: each one's queued data is written.
    tenants.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Opens the tenants that credentials and scrape targets name (the default one too): their
/// scrapes start, and a store that cannot open stops the start.
async fn open_named_tenants(
    tenants: &tenants::Tenants,
    config: &ServerConfig,
) -> Result<(), ServerError> {
    let mut named = vec![auth::TenantId::default_tenant()];
    named.extend(config.auth.tenants().cloned());
    named.extend(config.receivers.scrape.iter().map(|t| t.tenant.clone()));
    named.sort();
    named.dedup();
    for id in &named {
        tenants.get(id).await?;
    }
    Ok(())
}

/// Says in the log where the server listens, with the scheme clients must use, and warns of
/// each listener open beyond this machine without authentication.
fn log_listening(config: &ServerConfig, bound: &Bound, tls: bool) {
    let scheme = if tls { "https" } else { "http" };
    tracing::info!(addr = %bound.http, scheme, "listening: UI, API, Pyroscope ingest, OTLP/HTTP profiles and traces");
    for (key, addr) in config.open_listeners() {
        tracing::warn!(%addr, setting = %format_args!("server.{key}"), "listening beyond this machine without authentication (server.allow_unauthenticated): whoever reaches it can read every profile and span and write data");
    }
    if config.open_listeners().next().is_none() {
        tracing::info!("listening on loopback only (this machine); --http-addr 0.0.0.0:4040 with --allow-unauthenticated opens it to the network");
    }
    if let Some(a) = bound.otlp_http {
        tracing::info!(addr = %a, scheme, "listening: OTLP/HTTP (/v1/traces, /v1development/profiles)");
    }
    if let Some(a) = bound.otlp_grpc {
        tracing::info!(addr = %a, scheme, "listening: OTLP gRPC (TraceService/Export, ProfilesService/Export)");
    }
}

/// Names the credentials in the log when authentication is on (never their secrets).
fn log_auth(config: &ServerConfig) {
    if config.auth.enabled() {
        for (name, scopes) in config.auth.credential_names() {
            tracing::info!(credential = name, scopes = ?scopes, "credential");
        }
        tracing::info!(
            "authentication on: requests need a credential (probes and the UI's files excepted)"
        );
    }
}

/// The bound listeners: the main one, and the OTLP ones when enabled.
struct Listeners {
    main: tokio::net::TcpListener,
    otlp: Option<tokio::net::TcpListener>,
    grpc: Option<tokio::net::TcpListener>,
}

impl Listeners {
    /// Binds every configured listener, failing on the first address that cannot be bound.
    async fn bind(config: &ServerConfig) -> Result<Listeners, ServerError> {
        let main = bind(
            config.server.http_addr,
            "the UI, API and ingest",
            "http_addr",
        )
        .await?;
        let otlp = match config.server.otlp_http_addr {
            Some(a) => Some(bind(a, "OTLP/HTTP", "otlp_http_addr").await?),
            None => None,
        };
        let grpc = match config.server.otlp_grpc_addr {
            Some(a) => Some(bind(a, "OTLP gRPC", "otlp_grpc_addr").await?),
            None => None,
        };
        Ok(Listeners { main, otlp, grpc })
    }

    /// Their addresses (a port of 0 resolved to the one bound).
    fn bound(&self) -> Result<Bound, ServerError> {
        Ok(Bound {
            http: self.main.local_addr()?,
            otlp_http: self.otlp.as_ref().map(|l| l.local_addr()).transpose()?,
            otlp_grpc: self.grpc.as_ref().map(|l| l.local_addr()).transpose()?,
        })
    }

    /// Starts serving each listener through its tenant gate (HTTP ones behind the browser
    /// guard), until `stop` turns true.
    fn serve(
        self,
        config: &ServerConfig,
        tenants: &Arc<tenants::Tenants>,
        tls: Option<&Arc<listen::tls::ServerTls>>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<tokio::task::JoinHandle<std::io::Result<()>>>, ServerError> {
        let mut servers = Vec::new();
        let guarded = |router, listener: &tokio::net::TcpListener| {
            let local = listener.local_addr()?;
            let names = browser_guard::HostNames::new(local, &config.server.allowed_hosts);
            Ok::<_, ServerError>(browser_guard::guard(router, names))
        };
        let secured = |listener| {
            tls.map(|tls| listen::tls::ListenerTls {
                tls: Arc::clone(tls),
                listener,
            })
        };
        let router = guarded(tenants.gate(tenants::Listener::Main), &self.main)?;
        servers.push(tokio::spawn(listen::serve(
            self.main,
            router,
            stop.clone(),
            secured("http_addr"),
        )));
        if let Some(l) = self.otlp {
            let router = guarded(tenants.gate(tenants::Listener::OtlpHttp), &l)?;
            servers.push(tokio::spawn(listen::serve(
                l,
                router,
                stop.clone(),
                secured("otlp_http_addr"),
            )));
        }
        if let Some(l) = self.grpc {
            servers.push(tokio::spawn(listen::serve(
                l,
                tenants.gate(tenants::Listener::OtlpGrpc),
                stop.clone(),
                secured("otlp_grpc_addr"),
            )));
        }
        Ok(servers)
    }
}

/// Opens the store of `tenant` with `store_cfg`, saying in the log what it holds and which
/// limits it is near.
pub(crate) async fn open_store(
    store_cfg: spanprof_store::store::StoreConfig,
    config: &ServerConfig,
    tenant: &auth::TenantId,
) -> Result<Store, ServerError> {
    // Absolute in the log, whatever the working directory was.
    let dir = std::path::absolute(&store_cfg.dir)
        .unwrap_or_else(|_| store_cfg.dir.clone())
        .display()
        .to_string();
    // Opening replays the newest segment (seconds for a store with millions of symbols).
    tracing::info!(dir = %dir, %tenant, version = env!("CARGO_PKG_VERSION"), "opening the store");
    let opening = std::time::Instant::now();
    let (store, report) = tokio::task::spawn_blocking(move || Store::open(store_cfg))
        .await
        .expect("opening the store panicked")
        .map_err(|source| ServerError::Store {
            dir: dir.clone(),
            source,
        })?;
    for p in &report.problems {
        tracing::warn!(problem = %p, "store damage skipped");
    }
    if report.truncated_bytes > 0 {
        tracing::warn!(
            bytes = report.truncated_bytes,
            "dropped an unfinished write at the end of the log: the last run stopped while \
             writing it (killed, or the machine went down), so it was never acknowledged"
        );
    }
    let stats = store.stats();
    tracing::info!(dir = %dir, services = stats.services, series = stats.series, samples = stats.samples, spans = stats.spans, disk_bytes = stats.disk_bytes, seconds = format!("{:.2}", opening.elapsed().as_secs_f64()), "store opened");
    let (retention, max_size) = retention_settings(config);
    tracing::info!(
        retention = %retention,
        max_size = %max_size,
        segment_size = %config.storage.segment_size,
        min_free_disk = %config.storage.min_free_disk,
        "retention: whole segments past the age or the size are deleted, oldest first, and \
         while the disk has less than min_free_disk and 5 % free"
    );
    // Retention deletes whole segments (a segment passes segment_size by its last record,
    // and its index counts too): a limit of a few segments keeps little, or nothing once
    // the newest sealed one alone is past it.
    if let Some(max) = config.storage.max_size.map(|m| m.0) {
        if max < 4 * config.storage.segment_size.0 {
            tracing::warn!(
                max_size = max,
                segment_size = config.storage.segment_size.0,
                "storage.max_size holds fewer than 4 segments of storage.segment_size: retention \
                 deletes whole segments, oldest first, so the store may keep little or nothing; \
                 raise max_size or lower segment_size"
            );
        }
    }
    if config.series_limits().near_max_series(stats.series) {
        tracing::warn!(
            series = stats.series,
            limit = config.storage.max_series,
            "the store holds 90 % or more of its series limit (storage.max_series): profiles \
             that would make a new series are refused past it"
        );
    }
    if spanprof_store::store::near_max_symbol_bytes(
        stats.symbol_bytes,
        config.storage.max_symbols_size.0,
    ) {
        tracing::warn!(
            bytes = stats.symbol_bytes,
            limit = config.storage.max_symbols_size.0,
            "the store's symbols take 90 % or more of their limit (storage.max_symbols_size): \
             profiles that add symbols (a new build or service) are refused past it"
        );
    }
    Ok(store)
}

/// The retention age and size limit, for the log.
fn retention_settings(config: &ServerConfig) -> (String, String) {
    (
        config
            .storage
            .retention
            .map_or("none".to_owned(), |r| r.to_string()),
        config
            .storage
            .max_size
            .map_or("none".to_owned(), |m| m.to_string()),
    )
}

/// How soon after the last retention run a failed store write brings the next one.
const EARLY_RETENTION_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Retention and compaction, once a minute: whole segments older than the retention age,
/// past the size limit, or while the disk is nearly full (`storage.min_free_disk`) are
/// deleted, oldest first; small sealed segments are merged.
///
/// A failed store write (a full disk), or a store grown past its size limit, brings the
/// next retention run forward, to at most [`EARLY_RETENTION_EVERY`] after the last one,
/// without compaction (which writes).
///
/// `spanprof_retention_runs_total{trigger}` counts the runs: `schedule`, `write_failed`,
/// `over_limit`.
pub(crate) async fn maintain(
    store: Arc<Store>,
    config: Arc<ServerConfig>,
    metrics: Arc<Metrics>,
    [write_failed, over_limit]: [Arc<tokio::sync::Notify>; 2],
    mut stop: watch::Receiver<bool>,
) {
    use crate::metrics::{Label as _, RetentionTrigger as Trigger};
    for trigger in Trigger::ALL {
        metrics.retention_runs.add(*trigger, 0.0);
    }
    const EVERY: std::time::Duration = std::time::Duration::from_secs(60);
    let small = config.storage.segment_size.0 / 4;
    let mut last = tokio::time::Instant::now();
    // The minute's runs keep their schedule whatever early runs come between them, so that
    // compaction is not put off by a store that stays past its limit.
    let mut schedule = tokio::time::interval_at(last + EVERY, EVERY);
    schedule.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let trigger = tokio::select! {
            _ = schedule.tick() => Trigger::Schedule,
            _ = write_failed.notified() => Trigger::WriteFailed,
            _ = over_limit.notified() => Trigger::OverLimit,
            _ = stop.wait_for(|s| *s) => return,
        };
        let early = trigger != Trigger::Schedule;
        if early {
            tokio::select! {
                _ = tokio::time::sleep_until(last + EARLY_RETENTION_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        last = tokio::time::Instant::now();
        metrics.retention_runs.add(trigger, 1.0);
        let store_stats = Arc::clone(&store);
        let store = Arc::clone(&store);
        let done = tokio::task::spawn_blocking(move || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let retention = store.enforce_retention(now);
            let compaction = (!early).then(|| store.compact(small));
            (retention, compaction)
        })
        .await;
        match done {
            Ok((retention, compaction)) => {
                match retention {
                    Ok(0) => {}
                    Ok(n) => {
                        let stats = store_stats.stats();
                        let (retention, max_size) = retention_settings(&config);
                        tracing::info!(
                            segments = n,
                            disk_bytes = stats.disk_bytes,
                            samples = stats.samples,
                            max_size = %max_size,
                            retention = %retention,
                            "retention deleted old data (the oldest segments past the age, the \
                             size or the free disk)"
                        )
                    }
                    Err(e) => tracing::error!(error = %e, "retention failed"),
                }
                match compaction {
                    Some(Ok(r)) if r.merged_segments > 0 => tracing::info!(
                        merged = r.merged_segments,
                        bytes_before = r.bytes_before,
                        bytes_after = r.bytes_after,
                        "compacted small segments"
                    ),
                    Some(Err(e)) => tracing::error!(error = %e, "compaction failed"),
                    // Nothing merged, or not run (an early run).
                    _ => {}
                }
            }
            Err(e) => tracing::error!(error = %e, "maintenance panicked"),
        }
    }
}

async fn bind(
    addr: SocketAddr,
    what: &'static str,
    key: &'static str,
) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr,
            what,
            key,
            source,
        })
}

/// Why a client request failed: the causes of `e`, outermost first, each said once, or `e`'s
/// own text when it has none. hyper's client errors say only which step failed ("client
/// error (Connect)"); their causes say why ("tcp connect error: Connection refused").
pub(crate) fn error_causes(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// What to do about a port another process holds: the setting that moves the listener (or,
/// but for the main one, turns it off). The OTLP ports are those of an OpenTelemetry
/// Collector's receivers, often running on the same machine.
fn bind_hint(source: &std::io::Error, key: &str, port: u16) -> String {
    if source.kind() != std::io::ErrorKind::AddrInUse {
        return String::new();
    }
    let off = if key == "http_addr" { "" } else { ", or off," };
    let who = if matches!(port, 4317 | 4318) {
        " (on 4317 and 4318 often an OpenTelemetry Collector)"
    } else {
        ""
    };
    format!(
        "; another process listens there{who}: choose another address{off} with --{} \
         (server.{key} in the config file)",
        key.replace('_', "-")
    )
}

#[cfg(test)]
mod tests {
    /// hyper's shape: a step ("client error (Connect)") over causes that repeat each other.
    #[derive(Debug)]
    struct Step(&'static str, Option<Box<dyn std::error::Error + 'static>>);

    impl std::fmt::Display for Step {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Step {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref()
        }
    }

    #[test]
    fn error_causes_say_why_once() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let text = refused.to_string();
        let connect = Step("tcp connect error", Some(Box::new(refused)));
        let e = Step("client error (Connect)", Some(Box::new(connect)));
        assert_eq!(
            super::error_causes(&e),
            format!("tcp connect error: {text}")
        );
        let repeated = Step(
            "reading: connection reset",
            Some(Box::new(Step("connection reset", None))),
        );
        let e = Step("body error", Some(Box::new(repeated)));
        assert_eq!(super::error_causes(&e), "reading: connection reset");
        assert_eq!(super::error_causes(&Step("alone", None)), "alone");
    }
}
