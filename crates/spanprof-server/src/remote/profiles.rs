//! Pyroscope's side: `querier.v1` calls in `application/proto`, and the pprof answer turned
//! into the same flame tree the embedded store builds.

use prost::Message;
use spanprof_format::link::to_hex;
use spanprof_format::pprof::Profile;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::store::Selection;
use spanprof_store::FlameTree;

use super::client::Peer;
use super::{Remote, RemoteError};
use crate::pyroscope_proto::querier::v1 as q;
use crate::pyroscope_proto::types::v1 as t;

/// Most distinct types one `ProfileTypes` answer may list; a remote listing more is not a
/// Pyroscope answering what was asked.
const MAX_TYPES: usize = 10_000;

/// Nodes asked for in a tree answer: Pyroscope's own cap (`max-flamegraph-nodes-max`), so
/// that the tree is whole and cut here as the embedded store cuts it.
const MAX_TREE_NODES: i64 = 1 << 20;

/// How long a `ProfileTypes` answer over a range ending now is reused (each flame graph and
/// view asks it first): a type first pushed within it shows this much later, the types of
/// a service changing over days, not seconds. Empty answers are not kept.
pub const TYPES_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// A `ProfileTypes` answer over `[start_ms, now]`, as asked at `at`.
pub(super) struct RecentTypes {
    start_ms: i64,
    at: std::time::Instant,
    types: Vec<ProfileTypeId>,
}

/// Pyroscope's `[start, end]` in ms of a selection's `[from, to)` in ns (`to` 0 = now).
pub fn range_ms(sel: &Selection) -> (i64, i64) {
    let start = sel.from_ns.max(0) / 1_000_000;
    let end = match sel.to_ns {
        0 => crate::clock::now_ns() / 1_000_000,
        // `end` is inclusive upstream: the last whole ms before `to`.
        to => (to - 1) / 1_000_000,
    };
    (start, end.max(start))
}

/// Whether a selection's range has ended long enough ago that its answer cannot change
/// (late data, out-of-order pushes settle within minutes): then answers are cached.
pub fn immutable(sel: &Selection) -> bool {
    const SETTLED_NS: i64 = 10 * 60 * 1_000_000_000;
    sel.to_ns != 0 && sel.to_ns < crate::clock::now_ns() - SETTLED_NS
}

impl Remote {
    /// `querier.v1` method `path` with `req`, its answer decoded (cached when the selection's
    /// range is settled: [`immutable`]).
    pub(super) async fn querier<A: Message + Default>(
        &self,
        path: &str,
        req: &impl Message,
        sel: &Selection,
    ) -> Result<A, RemoteError> {
        let bytes = self
            .client
            .connect_call(path, req.encode_to_vec(), immutable(sel))
            .await?;
        let began = std::time::Instant::now();
        let answer = A::decode(bytes).map_err(|e| RemoteError::malformed(Peer::Pyroscope, path, e));
        tracing::debug!(
            call = path,
            decode_us = began.elapsed().as_micros() as u64,
            "remote decode"
        );
        answer
    }

    /// `ProfileTypes` over the selection's range: the full type ids Pyroscope has. Over a
    /// range ending now, a non-empty answer is reused for [`TYPES_TTL`] (every query asks).
    pub async fn profile_types(&self, sel: &Selection) -> Result<Vec<ProfileTypeId>, RemoteError> {
        let (start, end) = range_ms(sel);
        let recent = |r: &RecentTypes| r.start_ms == start && r.at.elapsed() < TYPES_TTL;
        if sel.to_ns == 0 {
            let cached = self.recent_types.lock().expect("types lock");
            if let Some(r) = cached.as_ref().filter(|r| recent(r)) {
                return Ok(r.types.clone());
            }
        }
        let ids = self.ask_profile_types(sel, (start, end)).await?;
        if sel.to_ns == 0 && !ids.is_empty() {
            *self.recent_types.lock().expect("types lock") = Some(RecentTypes {
                start_ms: start,
                at: std::time::Instant::now(),
                types: ids.clone(),
            });
        }
        Ok(ids)
    }

    async fn ask_profile_types(
        &self,
        sel: &Selection,
        (start, end): (i64, i64),
    ) -> Result<Vec<ProfileTypeId>, RemoteError> {
        let req = q::ProfileTypesRequest { start, end };
        let path = "ProfileTypes";
        let answer: q::ProfileTypesResponse = self.querier(path, &req, sel).await?;
        if answer.profile_types.len() > MAX_TYPES {
            return Err(RemoteError::too_many(
                Peer::Pyroscope,
                path,
                MAX_TYPES,
                "profile types",
            ));
        }
        let mut ids: Vec<ProfileTypeId> = answer
            .profile_types
            .iter()
            .filter_map(|p| ProfileTypeId::parse(&p.id))
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// The one type a selection's `type` names among `types` (the preferred one, CPU first,
    /// when it names none), as the embedded store resolves it. `Err` with the message of a
    /// 400 when it names none or several.
    pub fn resolve_type(
        types: &[ProfileTypeId],
        wanted: Option<&str>,
    ) -> Result<Option<ProfileTypeId>, String> {
        let matching: Vec<ProfileTypeId> = match wanted {
            Some(w) => types.iter().filter(|t| t.matches(w)).cloned().collect(),
            None => types.to_vec(),
        };
        if let (Some(w), true) = (wanted, matching.is_empty()) {
            if !types.is_empty() {
                return Err(format!(
                    "type {w:?}: no such profile type in Pyroscope; available: {}",
                    crate::answer::type_list(types)
                ));
            }
        }
        Ok(ProfileTypeId::preferred(&matching).cloned())
    }

    /// The selection's samples as pprof, from `SelectMergeStacktraces` (format pprof) with
    /// the spans as `span_selector` or the trace as `trace_id_selector`.
    pub async fn pprof(
        &self,
        sel: &Selection,
        profile_type: &ProfileTypeId,
        span_ids: &[[u8; 8]],
    ) -> Result<Profile, RemoteError> {
        let (start, end) = range_ms(sel);
        let req = stacktraces_request(sel, profile_type, span_ids, (start, end));
        let path = "SelectMergeStacktraces";
        let answer: q::SelectMergeStacktracesResponse = self.querier(path, &req, sel).await?;
        Ok(answer.pprof.and_then(|p| p.profile).unwrap_or_default())
    }

    /// The selection's flame tree from `SelectMergeStacktraces` in the tree format (as
    /// [`Remote::pprof`] selects), every node kept (the frontend cuts to `max_nodes` as the
    /// embedded answer does).
    pub async fn tree(
        &self,
        sel: &Selection,
        profile_type: &ProfileTypeId,
        span_ids: &[[u8; 8]],
    ) -> Result<FlameTree, RemoteError> {
        let (start, end) = range_ms(sel);
        let mut req = stacktraces_request(sel, profile_type, span_ids, (start, end));
        req.format = q::ProfileFormat::Tree as i32;
        req.max_nodes = Some(MAX_TREE_NODES);
        let path = "SelectMergeStacktraces";
        let answer: q::SelectMergeStacktracesResponse = self.querier(path, &req, sel).await?;
        super::tree::decode(&answer.tree)
            .map_err(|e| RemoteError::malformed(Peer::Pyroscope, path, e))
    }

    /// `LabelNames` or `LabelValues` (of `name`) over the matchers.
    pub async fn labels(
        &self,
        sel: &Selection,
        matchers: Vec<String>,
        name: Option<&str>,
    ) -> Result<Vec<String>, RemoteError> {
        let (start, end) = range_ms(sel);
        let (path, body) = match name {
            None => (
                "LabelNames",
                t::LabelNamesRequest {
                    matchers,
                    start,
                    end,
                }
                .encode_to_vec(),
            ),
            Some(n) => (
                "LabelValues",
                t::LabelValuesRequest {
                    name: n.to_owned(),
                    matchers,
                    start,
                    end,
                }
                .encode_to_vec(),
            ),
        };
        let bytes = self.client.connect_call(path, body, immutable(sel)).await?;
        let names = match name {
            None => t::LabelNamesResponse::decode(bytes).map(|r| r.names),
            Some(_) => t::LabelValuesResponse::decode(bytes).map(|r| r.names),
        }
        .map_err(|e| RemoteError::malformed(Peer::Pyroscope, path, e))?;
        Ok(names)
    }

    /// `Series` over the matchers: each series' labels.
    pub async fn series(
        &self,
        sel: &Selection,
        matchers: Vec<String>,
    ) -> Result<Vec<Vec<(String, String)>>, RemoteError> {
        let (start, end) = range_ms(sel);
        let req = q::SeriesRequest {
            matchers,
            label_names: Vec::new(),
            start,
            end,
        };
        let path = "Series";
        let answer: q::SeriesResponse = self.querier(path, &req, sel).await?;
        Ok(answer
            .labels_set
            .into_iter()
            .map(|l| l.labels.into_iter().map(|p| (p.name, p.value)).collect())
            .collect())
    }
}

/// The `SelectMergeStacktraces` request of a selection: its type, labels (the service as
/// `service_name` when no spans or trace are selected: theirs may be another's), range, and
/// spans or trace.
pub fn stacktraces_request(
    sel: &Selection,
    profile_type: &ProfileTypeId,
    span_ids: &[[u8; 8]],
    (start, end): (i64, i64),
) -> q::SelectMergeStacktracesRequest {
    let by_spans = !span_ids.is_empty() || sel.trace_id.is_some();
    q::SelectMergeStacktracesRequest {
        profile_type_id: profile_type.to_string(),
        label_selector: label_selector(sel, by_spans),
        start,
        end,
        max_nodes: None,
        format: q::ProfileFormat::Pprof as i32,
        span_selector: span_ids.iter().map(|id| to_hex(id)).collect(),
        trace_id_selector: sel.trace_id.iter().map(|id| to_hex(id)).collect(),
        ..Default::default()
    }
}

/// The selection's label matchers with its service, as one `{…}` selector.
pub fn label_selector(sel: &Selection, by_spans: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let (Some(s), false) = (&sel.service, by_spans) {
        parts.push(format!("service_name=\"{}\"", escape(s)));
    }
    if let Some(l) = &sel.label_selector {
        let inner = l
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}')
            .trim();
        if !inner.is_empty() {
            parts.push(inner.to_owned());
        }
    }
    format!("{{{}}}", parts.join(","))
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The flame tree of a pprof profile's samples (first value), frames named as the embedded
/// store names them: a location's inlined lines outermost first, a function's name (else its
/// system name), `0x…` for a location without lines.
pub fn tree_of(p: &Profile) -> FlameTree {
    use std::collections::HashMap;
    let functions: HashMap<u64, &str> = p
        .function
        .iter()
        .map(|f| {
            let name = if f.name != 0 { f.name } else { f.system_name };
            (f.id, p.str(name).unwrap_or(""))
        })
        .collect();
    let locations: HashMap<u64, Vec<String>> = p
        .location
        .iter()
        .map(|l| {
            let names = if l.line.is_empty() {
                vec![format!("0x{:x}", l.address)]
            } else {
                l.line
                    .iter()
                    .rev()
                    .map(|line| {
                        functions
                            .get(&line.function_id)
                            .copied()
                            .unwrap_or("")
                            .to_owned()
                    })
                    .collect()
            };
            (l.id, names)
        })
        .collect();
    let mut tree = FlameTree::new();
    let mut frames: Vec<&str> = Vec::new();
    for s in &p.sample {
        let Some(&v) = s.value.first() else { continue };
        let Ok(v) = u64::try_from(v) else { continue };
        if v == 0 {
            continue;
        }
        frames.clear();
        for id in s.location_id.iter().rev() {
            if let Some(names) = locations.get(id) {
                frames.extend(names.iter().map(String::as_str));
            }
        }
        tree.add(&frames, v);
    }
    tree
}

impl Remote {
    /// The total of the selection's samples of `profile_type` (the spans as `span_selector`,
    /// else the trace as `trace_id_selector`): `SelectMergeStacktraces` as a flame graph of
    /// one node, whose `total` is the whole selection's.
    pub async fn total(
        &self,
        sel: &Selection,
        profile_type: &ProfileTypeId,
        span_ids: &[[u8; 8]],
    ) -> Result<u64, RemoteError> {
        let (start, end) = range_ms(sel);
        let mut req = stacktraces_request(sel, profile_type, span_ids, (start, end));
        if !span_ids.is_empty() {
            req.trace_id_selector.clear();
        }
        req.format = q::ProfileFormat::Flamegraph as i32;
        req.max_nodes = Some(1);
        let path = "SelectMergeStacktraces";
        let answer: q::SelectMergeStacktracesResponse = self.querier(path, &req, sel).await?;
        let total = answer.flamegraph.map_or(0, |f| f.total);
        u64::try_from(total).map_err(|_| {
            RemoteError::malformed(Peer::Pyroscope, path, format!("a negative total {total}"))
        })
    }
}
