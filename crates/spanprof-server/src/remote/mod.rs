//! The remote query backend (`storage.backend: remote`): spanprof's answers over a Grafana
//! Pyroscope (profiles, `querier.v1`) and a Grafana Tempo (traces), for query frontends in
//! front of many stateless collectors.
//!
//! Design. The API layer keeps one kind of answer — a [`spanprof_store::FlameTree`] and the
//! JSON, SVG and pprof written from it — and asks a data source for the tree of a
//! [`Selection`]. The embedded store builds it from its blocks; [`Remote`] builds it from
//! Pyroscope's pprof of the same selection, so both are rendered by the same code and the
//! answers are equal. The interface is the few query operations the API needs (a selection's
//! pprof and tree, a trace's spans, profile types, label names and values, series), not every
//! store method; handlers branch once on `AppState::remote` to pick the source.
//!
//! Mapping (Pyroscope 2.2 / Tempo 3.0 APIs):
//! - a span: `SelectMergeStacktraces` with `span_selector`, in the tree format for flame
//!   graphs (`tree.rs`), pprof for export;
//! - a span with its children: the trace from Tempo (`/api/v2/traces/{id}`, protobuf), the
//!   span's descendants as the `span_selector` list;
//! - a trace: `trace_id_selector`;
//! - spans by name, duration and percentile (slow vs fast `/api/v1/diff`): one TraceQL
//!   search on Tempo (`span_filter.rs`), the ids as `span_selector`;
//! - the span and trace views: Tempo's spans, each span's own total from Pyroscope
//!   (`views.rs`, values by `span_values.rs`: `SelectHeatmap` span exemplars, checked
//!   against the spans' total; else a pprof by `span_id` label; else totals of halved
//!   groups);
//! - span lists, chart points and names (`/api/v1/spans`, `span-points`, `span-names`):
//!   one TraceQL search (`span_list.rs`), the CPU column as the views' totals, the page's
//!   spans read whole from their traces; names from Tempo's `name` tag values;
//! - traces grouped (`/api/v1/spans?group=trace`): the same search, each matched trace read
//!   whole from Tempo, its CPU the sum of its spans' totals (`trace_groups.rs`);
//! - `/api/v1/timeseries`: `SelectSeries` (`series.rs`), span exemplars when asked; of
//!   spans or a trace, each step's `span_selector` total (`span_series.rs`, by halving);
//! - profile types, label names and values, series: `ProfileTypes`, `LabelNames`,
//!   `LabelValues`, `Series`;
//! - the Grafana-facing APIs (`/querier.v1.QuerierService/*`, Tempo's `/api/traces`,
//!   `/api/v2/traces`, `/api/search*`) are passed through to their backend as they came.
//!
//! What Pyroscope does not keep (per-sample timestamps, thread ids, a count of the samples
//! merged) is answered as unknown and said so (`remote.not_available`), never made up.
//! What is not answered remotely (`focus=during`/`window`, a series of spans or a trace
//! averaged or grouped, `/pyroscope/render`) says so with 501, naming the backend; it never
//! reads the frontend's empty local store. Remote failures are 502, timeouts 504, both
//! naming the backend and the call; answers past `max_answer_size` are refused (502), and
//! answers over ranges that ended over 10 minutes ago are cached; `ProfileTypes` over a
//! range ending now is reused for 5 s (`profiles.rs`). Calls that do not depend on each
//! other are made at once (a query's time is its rounds of calls, not their count).

pub mod answers;
pub mod client;
pub mod passthrough;
pub mod profiles;
pub mod series;
pub mod span_filter;
pub mod span_list;
pub mod span_series;
pub mod span_values;
pub mod trace_groups;
pub mod traces;
pub mod tree;
mod view_json;
pub mod views;

use axum::http::StatusCode;
use spanprof_store::store::Selection;

use crate::answer::ApiError;
pub use crate::config::remote::RemoteConfig;
use client::{Peer, RemoteClient};

/// The remote pair, as the query API calls it.
pub struct Remote {
    client: RemoteClient,
    /// The last `ProfileTypes` answer over a range ending now (`profiles.rs`).
    recent_types: std::sync::Mutex<Option<profiles::RecentTypes>>,
}

impl Remote {
    /// The backend of `config`; no connection is made until the first query.
    pub fn new(config: RemoteConfig) -> Result<Self, String> {
        Ok(Remote {
            client: RemoteClient::new(config)?,
            recent_types: std::sync::Mutex::default(),
        })
    }

    /// The HTTP client (pass-through calls).
    pub fn client(&self) -> &RemoteClient {
        &self.client
    }
}

/// A remote call that failed: which backend, which call, and why.
#[derive(Debug, thiserror::Error)]
#[error("{} {}: {}", .peer.name(), .call, .message)]
pub struct RemoteError {
    /// The backend.
    pub peer: Peer,
    /// The call's path.
    pub call: String,
    /// What went wrong.
    pub message: String,
    /// The remote's status, when it answered one.
    pub status: Option<u16>,
    /// Whether the deadline passed (504, not 502).
    pub timed_out: bool,
}

impl RemoteError {
    /// A failure of `call` on `peer`.
    pub fn new(peer: Peer, call: &str, message: String) -> Self {
        RemoteError {
            peer,
            call: call.to_owned(),
            message,
            status: None,
            timed_out: false,
        }
    }

    /// The remote answered a non-success `status` with `body` (its first 300 bytes shown).
    pub fn status(peer: Peer, call: &str, status: StatusCode, body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
        let text: String = text.chars().filter(|c| !c.is_control()).collect();
        RemoteError {
            status: Some(status.as_u16()),
            ..Self::new(peer, call, format!("answered {status}: {text}"))
        }
    }

    /// The deadline passed.
    pub fn timeout(peer: Peer, call: &str, after: std::time::Duration) -> Self {
        RemoteError {
            timed_out: true,
            ..Self::new(
                peer,
                call,
                format!(
                    "no answer within {} s (storage.remote.timeout)",
                    after.as_secs_f64()
                ),
            )
        }
    }

    /// The answer is over the size cap.
    pub fn too_large(peer: Peer, call: &str, max: usize) -> Self {
        Self::new(
            peer,
            call,
            format!("the answer is larger than {max} bytes (storage.remote.max_answer_size)"),
        )
    }

    /// The answer lists more than `max` `what`.
    pub fn too_many(peer: Peer, call: &str, max: usize, what: &str) -> Self {
        Self::new(
            peer,
            call,
            format!("the answer lists more than {max} {what}"),
        )
    }

    /// The answer is not what the protocol says.
    pub fn malformed(peer: Peer, call: &str, e: impl std::fmt::Display) -> Self {
        Self::new(
            peer,
            call,
            format!("the answer is not a valid {} message: {e}", peer.name()),
        )
    }
}

impl From<RemoteError> for ApiError {
    fn from(e: RemoteError) -> Self {
        tracing::warn!(error = %e, "remote query failed");
        ApiError {
            status: if e.timed_out {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            },
            message: format!("remote backend {e}"),
        }
    }
}

/// Answers of the remote: what the selection resolved to.
pub struct RemoteFlame {
    /// The tree.
    pub tree: spanprof_store::FlameTree,
    /// The profile type used (`None`: Pyroscope has none in the range).
    pub profile_type: Option<spanprof_format::profile_type::ProfileTypeId>,
    /// Every type Pyroscope has in the range.
    pub types: Vec<spanprof_format::profile_type::ProfileTypeId>,
    /// The pprof it was built from (empty unless asked for: a flame graph is read from
    /// Pyroscope's tree format, smaller to send and to read).
    pub pprof: spanprof_format::pprof::Profile,
}

impl RemoteFlame {
    /// No samples: the spans `sel`'s filter picks are none (the type still resolved, as the
    /// embedded store's empty answer names it).
    async fn empty(
        wanted: Option<&str>,
        remote: &Remote,
        sel: &Selection,
    ) -> Result<Self, ApiError> {
        let types = remote.profile_types(sel).await?;
        let profile_type = Remote::resolve_type(&types, wanted).map_err(ApiError::bad_request)?;
        Ok(RemoteFlame {
            tree: spanprof_store::FlameTree::new(),
            profile_type,
            types,
            pprof: Default::default(),
        })
    }
}

impl Remote {
    /// The flame graph of `sel`: its type resolved against Pyroscope's, the spans (with
    /// their descendants from Tempo when asked) or the trace as selectors. `pprof`: the
    /// samples are asked as pprof (kept in the answer, for export), else as Pyroscope's tree.
    pub async fn flame(&self, sel: &Selection, pprof: bool) -> Result<RemoteFlame, ApiError> {
        let mut sel = sel.clone();
        if let Some(f) = sel.span_filter.take() {
            if sel.include_child_spans {
                return Err(not_remote(
                    "include_child_spans with span_name or durations (each trace of the \
                     spans would be read from Tempo)",
                ));
            }
            let ids = self.filtered_spans(&sel, &f).await?;
            if ids.is_empty() {
                return RemoteFlame::empty(sel.profile_type.as_deref(), self, &sel).await;
            }
            sel.span_ids.extend(ids);
        }
        let sel = &sel;
        // A named trace's spans (for the roll-up) do not depend on the type: asked with it.
        let roll_up = sel.include_child_spans && !sel.span_ids.is_empty();
        let (types, mut trace_spans) = match (roll_up, sel.trace_id) {
            (true, Some(id)) => {
                let (types, spans) = tokio::join!(self.profile_types(sel), self.trace_tree(&id));
                (types?, Some(spans))
            }
            _ => (self.profile_types(sel).await?, None),
        };
        let profile_type = Self::resolve_type(&types, sel.profile_type.as_deref())
            .map_err(ApiError::bad_request)?;
        let Some(t) = profile_type.clone() else {
            return Ok(RemoteFlame {
                tree: spanprof_store::FlameTree::new(),
                profile_type,
                types,
                pprof: Default::default(),
            });
        };
        let mut span_ids = sel.span_ids.clone();
        if roll_up {
            let spans = match trace_spans.take() {
                Some(spans) => spans?,
                None => {
                    let trace = self.trace_of_spans(sel, &t).await?;
                    self.trace_tree(&trace).await?
                }
            };
            span_ids = traces::with_descendants(&spans, &span_ids);
        }
        let mut sel = sel.clone();
        if !span_ids.is_empty() {
            // Spans are chosen by id (Pyroscope takes spans or a trace, not both).
            sel.trace_id = None;
        }
        let (tree, pprof) = if pprof {
            let pprof = self.pprof(&sel, &t, &span_ids).await?;
            (profiles::tree_of(&pprof), pprof)
        } else {
            (self.tree(&sel, &t, &span_ids).await?, Default::default())
        };
        Ok(RemoteFlame {
            tree,
            profile_type,
            types,
            pprof,
        })
    }

    /// The trace of the selected spans, read from their samples' `trace_id` labels (Tempo
    /// finds spans by trace only); 400 asking for `trace_id` when no sample names one.
    pub(crate) async fn trace_of_spans(
        &self,
        sel: &Selection,
        t: &spanprof_format::profile_type::ProfileTypeId,
    ) -> Result<[u8; 16], ApiError> {
        let own = self.pprof(sel, t, &sel.span_ids).await?;
        let key = own.string_table.iter().position(|s| s == "trace_id");
        let found = own
            .sample
            .iter()
            .flat_map(|s| &s.label)
            .filter(|l| key.is_some_and(|k| l.key == k as i64))
            .find_map(|l| {
                own.str(l.str)
                    .and_then(spanprof_format::link::parse_id::<16>)
            });
        found.ok_or_else(|| {
            ApiError::bad_request(
                "include_child_spans over the remote backend needs trace_id (the span's \
                 trace): Tempo finds spans by their trace, and no sample of the span names it",
            )
        })
    }
}

/// 501 for what the remote backend does not answer (yet), naming it.
pub fn not_remote(what: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message: format!(
            "{what}: not answered with storage.backend remote (Pyroscope + Tempo) by this \
             version; use a spanprof with its embedded store"
        ),
    }
}
