//! Routes that say who may call them. Every route is added with its method and its
//! [`Access`]: the route is guarded by [`auth::require`] and listed ([`Routes::listed`]), so a
//! test can call every route of every listener from the same table the router is built from.

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;

use crate::auth::{self, Access};

/// One route as added: what a test needs to call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its method.
    pub method: Method,
    /// Its path pattern (`{name}` and `{*rest}` captures as axum writes them).
    pub path: String,
    /// Who may call it.
    pub access: Access,
}

/// A router under construction, with the list of its routes.
pub struct Routes<S = crate::AppState> {
    router: Router<S>,
    listed: Vec<Listed>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Routes {
            router: Router::new(),
            listed: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    /// No routes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `GET` (and `HEAD`) `path`, for callers with `access`.
    pub fn get<H: Handler<T, S>, T: 'static>(self, path: &str, access: Access, handler: H) -> Self {
        self.add(Method::GET, MethodFilter::GET, path, access, handler)
    }

    /// `POST path`, for callers with `access`.
    pub fn post<H: Handler<T, S>, T: 'static>(
        self,
        path: &str,
        access: Access,
        handler: H,
    ) -> Self {
        self.add(Method::POST, MethodFilter::POST, path, access, handler)
    }

    fn add<H: Handler<T, S>, T: 'static>(
        mut self,
        method: Method,
        filter: MethodFilter,
        path: &str,
        access: Access,
        handler: H,
    ) -> Self {
        self.listed.push(Listed {
            method,
            path: path.to_owned(),
            access,
        });
        let route: MethodRouter<S> =
            on(filter, handler).route_layer(axum::middleware::from_fn(move |request, next| {
                auth::require(access, request, next)
            }));
        self.router = self.router.route(path, route);
        self
    }

    /// These routes and `other`'s.
    pub fn merge(mut self, other: Routes<S>) -> Self {
        self.router = self.router.merge(other.router);
        self.listed.extend(other.listed);
        self
    }

    /// The router changed by `f` (layers, fallbacks): the list stays.
    pub fn map(mut self, f: impl FnOnce(Router<S>) -> Router<S>) -> Self {
        self.router = f(self.router);
        self
    }

    /// The routes added, in order.
    pub fn listed(&self) -> &[Listed] {
        &self.listed
    }

    /// The router.
    pub fn into_router(self) -> Router<S> {
        self.router
    }
}
