//! Tenants: each one's data kept apart by giving it a server of its own — its own store
//! (the default tenant's is the data directory, another's `tenants/<id>/` in it), pipeline,
//! forwarders (which send `X-Scope-OrgID: <id>` downstream), settings, retention and limits
//! — behind listeners they share. One tenant's data is never in another's answer because no
//! code path reaches it: the gate ([`Tenants::dispatch`]) authenticates a request, finds its
//! tenant, and hands it to that tenant's routers.
//!
//! Tenants that credentials or scrape targets name are opened at start; others (named by a
//! trusted `X-Scope-OrgID`) on their first request, at most `auth.max_tenants` of them.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::auth::{self, Auth, TenantId};
use crate::config::{ForwarderConfig, ServerConfig};
use crate::forward::Forwarders;
use crate::metrics::Metrics;
use crate::pipeline::{Batcher, Pipeline, Sinks};
use crate::receivers::inflight::Inflight;
use crate::{api, receivers, settings, AppState, Bound, ServerError};

/// The directory, under the data directory, holding the other tenants' data directories.
pub const TENANTS_DIR: &str = "tenants";

/// Which listener a request came in on: each has its own routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `server.http_addr`: UI, API, ingest.
    Main = 0,
    /// `server.otlp_http_addr`.
    OtlpHttp = 1,
    /// `server.otlp_grpc_addr`.
    OtlpGrpc = 2,
}

/// What every tenant shares.
pub(crate) struct Shared {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) bound: Bound,
    pub(crate) auth: Arc<Auth>,
    /// Turns true when the server stops: the tenants' scrapes and maintenance end.
    pub(crate) stop: watch::Receiver<bool>,
    /// The remote pair every tenant's queries go to (`storage.backend: remote`).
    pub(crate) remote: Option<Arc<crate::remote::Remote>>,
}

/// One open tenant.
pub(crate) struct Tenant {
    pub(crate) state: AppState,
    routers: [Router; 3],
    tasks: Tasks,
}

/// What a tenant runs in the background, awaited at shutdown.
struct Tasks {
    forward_stop: watch::Sender<bool>,
    senders: Vec<JoinHandle<()>>,
    maintenance: JoinHandle<()>,
    scrapes: Vec<JoinHandle<()>>,
}

/// The open tenants.
pub struct Tenants {
    shared: Shared,
    /// The pipeline batcher the tenants share (one group commit for all), and its task;
    /// taken at [`Tenants::close`].
    batcher: std::sync::Mutex<Option<(Batcher, JoinHandle<()>)>>,
    open: RwLock<HashMap<TenantId, Arc<Tenant>>>,
    /// Serialises opening (a tenant is opened once even when its first requests race).
    opening: tokio::sync::Mutex<()>,
}

/// The routes of each listener, as a test lists them ([`crate::routes::Routes::listed`]).
pub fn routes_of(listener: Listener, config: &ServerConfig) -> crate::routes::Routes {
    match listener {
        Listener::Main => crate::main_routes(config.server.max_body_size),
        Listener::OtlpHttp => crate::otlp_http_routes(),
        Listener::OtlpGrpc => crate::otlp_grpc_routes(),
    }
}

impl Tenants {
    pub(crate) fn new(shared: Shared) -> Tenants {
        let batcher = Batcher::start(shared.config.processors.clone(), shared.auth.max_tenants);
        Tenants {
            shared,
            batcher: std::sync::Mutex::new(Some(batcher)),
            open: RwLock::default(),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// The tenant `id`, opened if it is not yet.
    pub(crate) async fn get(&self, id: &TenantId) -> Result<Arc<Tenant>, ServerError> {
        if let Some(t) = self.open.read().expect("tenants lock").get(id) {
            return Ok(Arc::clone(t));
        }
        let _one = self.opening.lock().await;
        if let Some(t) = self.open.read().expect("tenants lock").get(id) {
            return Ok(Arc::clone(t));
        }
        let count = self.open.read().expect("tenants lock").len();
        let max = self.shared.auth.max_tenants;
        if count >= max {
            return Err(ServerError::TooManyTenants(max));
        }
        let batcher = (self.batcher.lock().expect("batcher lock").as_ref())
            .map(|(b, _)| b.clone())
            .ok_or(ServerError::Closing)?;
        let tenant = Arc::new(open(&self.shared, &batcher, id).await?);
        self.open
            .write()
            .expect("tenants lock")
            .insert(id.clone(), Arc::clone(&tenant));
        Ok(tenant)
    }

    /// Serves one request that came in on `listener`: authenticates it, and hands it to its
    /// tenant's routes with its [`auth::Principal`].
    pub async fn dispatch(self: Arc<Self>, listener: Listener, mut request: Request) -> Response {
        // A client certificate the TLS listener verified (mutual TLS), by its fingerprint.
        let cert = request
            .extensions()
            .get::<crate::listen::client_identity::ClientIdentity>()
            .and_then(|c| auth::config::hex_digest(&c.sha256_fingerprint));
        let principal = match self
            .shared
            .auth
            .authenticate(request.headers(), cert.as_ref())
        {
            Ok(p) => p,
            Err(denied) => {
                return auth::denied_response(&denied, request.headers(), request.uri().path())
            }
        };
        let tenant = match self.get(&principal.tenant).await {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(tenant = %principal.tenant, error = %e, "a tenant could not be opened");
                let status = match e {
                    ServerError::TooManyTenants(_) => axum::http::StatusCode::FORBIDDEN,
                    _ => axum::http::StatusCode::SERVICE_UNAVAILABLE,
                };
                return (status, format!("{e}\n")).into_response();
            }
        };
        // Labelled with the tenant by its view (none for the default tenant).
        tenant.state.metrics.tenant_requests.add((), 1.0);
        request.extensions_mut().insert(principal);
        let router = tenant.routers[listener as usize].clone();
        match router.oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// A router for `listener` that sends every request through [`Tenants::dispatch`].
    pub fn gate(self: &Arc<Self>, listener: Listener) -> Router {
        let tenants = Arc::clone(self);
        Router::new().fallback(move |request: Request| {
            let tenants = Arc::clone(&tenants);
            async move { tenants.dispatch(listener, request).await }
        })
    }

    /// The default tenant's state (the demo loads into it).
    pub(crate) async fn default_state(&self) -> Result<AppState, ServerError> {
        Ok(self.get(&TenantId::default_tenant()).await?.state.clone())
    }

    /// Once the listeners have stopped: each tenant's queued data written and its
    /// background work ended.
    pub(crate) async fn close(self: Arc<Self>) {
        let open: Vec<(TenantId, Arc<Tenant>)> =
            self.open.write().expect("tenants lock").drain().collect();
        let batcher = self.batcher.lock().expect("batcher lock").take();
        drop(self);
        let mut forwarders = Vec::new();
        for (id, tenant) in open {
            let Ok(tenant) = Arc::try_unwrap(tenant) else {
                tracing::error!(tenant = %id, "a tenant is still in use at shutdown");
                continue;
            };
            let Tenant {
                state,
                routers,
                tasks,
            } = tenant;
            drop(routers);
            drop(state);
            for s in tasks.scrapes {
                let _ = s.await;
            }
            let _ = tasks.maintenance.await;
            forwarders.push((tasks.forward_stop, tasks.senders));
        }
        // Every sender is gone once the tenants' routers and scrapers are: the batcher
        // drains.
        if let Some((batcher, task)) = batcher {
            drop(batcher);
            let _ = task.await;
        }
        // Queued exports stay on disk; each sender finishes the export in flight.
        for (stop, senders) in forwarders {
            let _ = stop.send(true);
            for s in senders {
                let _ = s.await;
            }
        }
    }
}

/// The data directory of tenant `id`.
pub fn data_dir(config: &ServerConfig, id: &TenantId) -> std::path::PathBuf {
    if id.is_default() {
        config.storage.dir.clone()
    } else {
        config.storage.dir.join(TENANTS_DIR).join(id.as_str())
    }
}

/// The forwarders of tenant `id`: a tenant's exports carry its id as `X-Scope-OrgID`.
fn tenant_forwarders(config: &ServerConfig, id: &TenantId) -> Vec<ForwarderConfig> {
    config
        .exporters
        .iter()
        .cloned()
        .map(|mut f| {
            if !id.is_default() {
                f.headers
                    .retain(|(k, _)| !k.eq_ignore_ascii_case(auth::TENANT_HEADER));
                f.headers
                    .push(("X-Scope-OrgID".to_owned(), id.as_str().to_owned()));
            }
            f
        })
        .collect()
}

/// Opens tenant `id`: its store, forwarders and pipeline, its retention, and its scrapes.
async fn open(shared: &Shared, batcher: &Batcher, id: &TenantId) -> Result<Tenant, ServerError> {
    let config = &shared.config;
    let dir = data_dir(config, id);
    let metrics = if id.is_default() {
        Arc::clone(&shared.metrics)
    } else {
        Arc::new(shared.metrics.for_tenant(id.as_str()))
    };
    let mut store_cfg = config.store_config();
    store_cfg.dir = dir.clone();
    let store = Arc::new(crate::open_store(store_cfg, config, id).await?);
    let forward = tenant_forwarders(config, id);
    let forwarders = {
        let (dir, metrics, label) = (
            dir.clone(),
            Arc::clone(&metrics),
            (!id.is_default()).then(|| id.to_string()),
        );
        tokio::task::spawn_blocking(move || Forwarders::open(&forward, &dir, metrics, label))
            .await
            .expect("opening the forward queues panicked")?
    };
    let forwarders = Arc::new(forwarders);
    let (forward_stop, forward_stop_rx) = watch::channel(false);
    let senders = forwarders.start(forward_stop_rx);
    let write_failed = Arc::new(tokio::sync::Notify::new());
    let over_limit = Arc::new(tokio::sync::Notify::new());
    let sinks = Sinks {
        store: config.storage.store_enabled().then(|| Arc::clone(&store)),
        forward: forwarders,
        write_failed: Arc::clone(&write_failed),
        over_limit: Arc::clone(&over_limit),
    };
    let pipeline = Pipeline::on(
        batcher,
        sinks,
        config.processors.batch.queue_bytes(),
        Arc::clone(&metrics),
    );
    let state = AppState {
        store: Arc::clone(&store),
        pipeline,
        metrics: Arc::clone(&metrics),
        inflight: Arc::clone(&shared.inflight),
        settings: Arc::new(settings::Settings::open(&dir)),
        span_keys: Arc::default(),
        nesting: Arc::default(),
        config: Arc::clone(config),
        bound: shared.bound.clone(),
        tenant: id.clone(),
        ingest_rate: Arc::new(receivers::rate::IngestRate::new(
            config.server.max_ingest_rate,
            config.server.max_ingest_burst,
        )),
        query_slots: api::tenant_query_slots(shared.auth.several_tenants()),
        remote: shared.remote.clone(),
    };
    let maintenance = tokio::spawn(crate::maintain(
        store,
        Arc::clone(config),
        Arc::clone(&metrics),
        [write_failed, over_limit],
        shared.stop.clone(),
    ));
    let scrapes = receivers::scrape::start(state.clone(), shared.stop.clone())
        .map_err(ServerError::Scrape)?;
    let routers = [Listener::Main, Listener::OtlpHttp, Listener::OtlpGrpc].map(|l| {
        let router = routes_of(l, config).into_router();
        // The remote backend sees every query request first (remote::passthrough).
        let router = match state.remote.is_some() && l == Listener::Main {
            true => router.layer(axum::middleware::from_fn_with_state(
                state.clone(),
                crate::remote::passthrough::guard,
            )),
            false => router,
        };
        router.with_state(state.clone())
    });
    if !id.is_default() {
        tracing::info!(tenant = %id, dir = %dir.display(), "tenant opened");
    }
    Ok(Tenant {
        state,
        routers,
        tasks: Tasks {
            forward_stop,
            senders,
            maintenance,
            scrapes,
        },
    })
}
