//! The `querier.v1.QuerierService` methods over the store.

use std::collections::BTreeSet;

use spanprof_format::link::{parse_id, to_hex};
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::diff::diff_layout;
use spanprof_store::series::Aggregation;
use spanprof_store::store::{Selection, Store, StoreError};
use spanprof_store::{FlameTree, NodeId, DEFAULT_MAX_NODES};

use super::messages::*;
use super::{Codec, ConnectError};
use crate::api::Queries;

/// Largest `max_nodes` accepted (Pyroscope's limit).
const MAX_NODES_LIMIT: i64 = 1 << 20;
/// Exemplars per point for `EXEMPLAR_TYPE_SPAN`.
const EXEMPLARS_PER_POINT: usize = 3;

impl From<StoreError> for ConnectError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Matcher(m) => ConnectError::invalid(format!("label selector: {m}")),
            StoreError::Select(s) => ConnectError::invalid(s.to_string()),
            StoreError::Stopped(s) => ConnectError {
                code: "deadline_exceeded",
                message: crate::api::stopped_message(s),
            },
            other => {
                tracing::warn!(error = %other, "querier call failed in the store");
                ConnectError::internal(format!("store: {other}"))
            }
        }
    }
}

/// Runs `query` on a blocking thread (every store call may read from disk).
pub(super) async fn blocking<T: Send + 'static>(
    queries: &Queries,
    query: impl FnOnce(&Store) -> Result<T, ConnectError> + Send + 'static,
) -> Result<T, ConnectError> {
    crate::api::run_app_query(queries, query)
        .await
        .map_err(|e| ConnectError::internal(format!("the query failed: {e}")))?
}

fn ms_to_ns(ms: i64) -> i64 {
    ms.saturating_mul(1_000_000)
}

/// A time range of ms (0 = unbounded) as the store's ns range.
fn range(start: i64, end: i64) -> Result<(i64, i64), ConnectError> {
    if start < 0 || end < 0 {
        return Err(ConnectError::invalid("start and end must not be negative"));
    }
    if end != 0 && end < start {
        return Err(ConnectError::invalid(format!(
            "end ({end}) is before start ({start})"
        )));
    }
    // `end` is inclusive in Pyroscope: keep its whole millisecond.
    let to_ns = if end == 0 {
        0
    } else {
        ms_to_ns(end.saturating_add(1))
    };
    Ok((ms_to_ns(start), to_ns))
}

/// A label selector checked here (so a bad one is `invalid_argument` naming it).
fn label_selector(s: &str) -> Result<Option<String>, ConnectError> {
    if s.trim().is_empty() {
        return Ok(None);
    }
    spanprof_store::matchers::parse_selector(s)
        .map_err(|e| ConnectError::invalid(e.to_string()))?;
    Ok(Some(s.to_owned()))
}

fn profile_type(id: &str) -> Result<String, ConnectError> {
    let n = id.split(':').count();
    if ProfileTypeId::parse(id).is_none() {
        return Err(ConnectError::invalid(format!(
            "profile-type selection must be of the form \
             <name>:<sample-type>:<sample-unit>:<period-type>:<period-unit>(:delta), got({n}): {id:?}"
        )));
    }
    Ok(id.to_owned())
}

/// The selection of a `Select*` request (no span or trace choice yet).
pub(super) fn selection(
    type_id: &str,
    selector: &str,
    start: i64,
    end: i64,
) -> Result<Selection, ConnectError> {
    let (from_ns, to_ns) = range(start, end)?;
    Ok(Selection {
        profile_type: Some(profile_type(type_id)?),
        label_selector: label_selector(selector)?,
        from_ns,
        to_ns,
        ..Default::default()
    })
}

/// `max_nodes` as Pyroscope validates it: absent or 0 = the default.
fn max_nodes(n: Option<i64>) -> Result<usize, ConnectError> {
    match n.unwrap_or(0) {
        0 => Ok(DEFAULT_MAX_NODES),
        n if n < 0 => Err(ConnectError::invalid(format!(
            "max_nodes must not be negative, got {n}"
        ))),
        n if n > MAX_NODES_LIMIT => Err(ConnectError::invalid(format!(
            "max_nodes {n} is above the limit of {MAX_NODES_LIMIT}"
        ))),
        n => Ok(n as usize),
    }
}

fn hex_error(s: &str) -> String {
    match s.chars().find(|c| !c.is_ascii_hexdigit()) {
        Some(c) => format!("encoding/hex: invalid byte: U+{:04X} {c:?}", c as u32),
        None => "encoding/hex: invalid hex".to_owned(),
    }
}

/// Span ids of a `span_selector`, checked as Pyroscope's `NewSpanSelector` does. All-zero
/// ids (no span) are dropped: they can match nothing.
fn span_ids(selector: &[String]) -> Result<Vec<[u8; 8]>, ConnectError> {
    let mut out = Vec::new();
    for s in selector {
        if s.len() != 16 {
            return Err(ConnectError::invalid(format!(
                "invalid span id length: {s:?}"
            )));
        }
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConnectError::invalid(hex_error(s)));
        }
        out.extend(parse_id::<8>(s));
    }
    Ok(out)
}

/// Trace ids of a `trace_id_selector` (32 hex characters each).
fn trace_ids(selector: &[String]) -> Result<Vec<[u8; 16]>, ConnectError> {
    let mut out = Vec::new();
    for s in selector {
        if s.len() != 32 {
            return Err(ConnectError::invalid(format!(
                "invalid trace id length: {s:?}"
            )));
        }
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConnectError::invalid(hex_error(s)));
        }
        out.extend(parse_id::<16>(s));
    }
    Ok(out)
}

fn flame_graph(tree: &FlameTree, max_nodes: usize) -> FlameGraph {
    let layout = tree.to_pyroscope_layout(max_nodes);
    FlameGraph {
        names: layout.names,
        levels: layout
            .levels
            .into_iter()
            .map(|values| Level { values })
            .collect(),
        total: layout.total,
        max_self: layout.max_self,
    }
}

/// Adds every stack of `src` to `dst`.
fn merge_into(dst: &mut FlameTree, src: &FlameTree) {
    let mut stack: Vec<(NodeId, Vec<String>)> = vec![(src.root(), Vec::new())];
    while let Some((node, frames)) = stack.pop() {
        let own = src.node_self(node);
        if own > 0 && !frames.is_empty() {
            dst.add(&frames, own);
        }
        for &child in src.children(node) {
            let mut f = frames.clone();
            f.push(src.node_name(child).to_owned());
            stack.push((child, f));
        }
    }
}

/// One flame tree for a selection per trace id (or the selection itself without any).
fn merged_tree(
    store: &Store,
    sel: &Selection,
    traces: &[[u8; 16]],
) -> Result<FlameTree, ConnectError> {
    if traces.len() <= 1 {
        let mut sel = sel.clone();
        sel.trace_id = traces.first().copied();
        return Ok(store.flame_graph(&sel)?.0);
    }
    let mut out = FlameTree::new();
    for t in traces {
        let mut sel = sel.clone();
        sel.trace_id = Some(*t);
        merge_into(&mut out, &store.flame_graph(&sel)?.0);
    }
    Ok(out)
}

fn unions(matchers: &[String]) -> Result<Vec<Option<String>>, ConnectError> {
    if matchers.iter().all(|m| m.trim().is_empty()) {
        return Ok(vec![None]);
    }
    matchers
        .iter()
        .filter(|m| !m.trim().is_empty())
        .map(|m| label_selector(m))
        .collect()
}

/// Series labels of the union of `matchers` over a range.
fn series_of(
    store: &Store,
    matchers: &[Option<String>],
    from_ns: i64,
    to_ns: i64,
) -> Result<BTreeSet<Vec<(String, String)>>, ConnectError> {
    // Bounded as the own API's answers are; Pyroscope's messages have no truncated mark.
    let mut out = BTreeSet::new();
    for m in matchers {
        let sel = Selection {
            label_selector: m.clone(),
            from_ns,
            to_ns,
            ..Default::default()
        };
        let (series, _) = store.series_limited(&sel, crate::api::MAX_ANSWER_LABEL_BYTES)?;
        out.extend(series);
    }
    Ok(out)
}

/// `ProfileTypes`: every type stored, whatever the range (see the module docs).
pub async fn profile_types(
    queries: Queries,
    _req: ProfileTypesRequest,
    _codec: Codec,
) -> Result<ProfileTypesResponse, ConnectError> {
    blocking(&queries, |store| {
        Ok(ProfileTypesResponse {
            profile_types: store
                .profile_types(None)
                .into_iter()
                .map(|t| ProfileType {
                    id: t.to_string(),
                    name: t.name,
                    sample_type: t.sample_type,
                    sample_unit: t.sample_unit,
                    period_type: t.period_type,
                    period_unit: t.period_unit,
                })
                .collect(),
        })
    })
    .await
}

/// `LabelNames`.
pub async fn label_names(
    queries: Queries,
    req: LabelNamesRequest,
    _codec: Codec,
) -> Result<LabelNamesResponse, ConnectError> {
    let (from_ns, to_ns) = range(req.start, req.end)?;
    let matchers = unions(&req.matchers)?;
    blocking(&queries, move |store| {
        let names: BTreeSet<String> = series_of(store, &matchers, from_ns, to_ns)?
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        Ok(LabelNamesResponse {
            names: names.into_iter().collect(),
        })
    })
    .await
}

/// `LabelValues`.
pub async fn label_values(
    queries: Queries,
    req: LabelValuesRequest,
    _codec: Codec,
) -> Result<LabelValuesResponse, ConnectError> {
    if req.name.is_empty() {
        return Err(ConnectError::invalid("name is required"));
    }
    let (from_ns, to_ns) = range(req.start, req.end)?;
    let matchers = unions(&req.matchers)?;
    blocking(&queries, move |store| {
        let values: BTreeSet<String> = series_of(store, &matchers, from_ns, to_ns)?
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k == req.name)
            .map(|(_, v)| v)
            .collect();
        Ok(LabelValuesResponse {
            names: values.into_iter().collect(),
        })
    })
    .await
}

/// `Series`: the label sets, cut to `label_names` when given.
pub async fn series(
    queries: Queries,
    req: SeriesRequest,
    _codec: Codec,
) -> Result<SeriesResponse, ConnectError> {
    let (from_ns, to_ns) = range(req.start, req.end)?;
    let matchers = unions(&req.matchers)?;
    blocking(&queries, move |store| {
        let sets: BTreeSet<Vec<(String, String)>> = series_of(store, &matchers, from_ns, to_ns)?
            .into_iter()
            .map(|labels| {
                labels
                    .into_iter()
                    .filter(|(k, _)| req.label_names.is_empty() || req.label_names.contains(k))
                    .collect()
            })
            .collect();
        Ok(SeriesResponse {
            labels_set: sets
                .into_iter()
                .map(|labels| Labels {
                    labels: labels
                        .into_iter()
                        .map(|(name, value)| LabelPair { name, value })
                        .collect(),
                })
                .collect(),
        })
    })
    .await
}

/// What a flame-graph call answers with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TreeFormat {
    /// `FlameGraph` (unspecified or FLAMEGRAPH).
    FlameGraph,
    /// Pyroscope's tree bytes (TREE).
    Tree,
}

fn tree_format(format: i32) -> Result<TreeFormat, ConnectError> {
    match ProfileFormat::try_from(format) {
        Ok(ProfileFormat::Unspecified | ProfileFormat::Flamegraph) => Ok(TreeFormat::FlameGraph),
        Ok(ProfileFormat::Tree) => Ok(TreeFormat::Tree),
        Ok(other) => Err(ConnectError::unimplemented(format!(
            "format {} is not supported here (use PROFILE_FORMAT_FLAMEGRAPH or PROFILE_FORMAT_TREE)",
            other.as_str_name()
        ))),
        Err(_) => Err(ConnectError::invalid(format!("unknown format {format}"))),
    }
}

/// The flame graph or the tree bytes of `tree`, as `format` asks.
fn answer(tree: &FlameTree, max_nodes: usize, format: TreeFormat) -> (Option<FlameGraph>, Vec<u8>) {
    match format {
        TreeFormat::FlameGraph => (Some(flame_graph(tree, max_nodes)), Vec::new()),
        TreeFormat::Tree => (None, super::tree_bytes::tree_bytes(tree, max_nodes)),
    }
}

/// `SelectMergeSpanProfile`: the spans' samples, with their descendants' when the server is
/// configured so (module docs).
pub async fn select_merge_span_profile(
    queries: Queries,
    req: SelectMergeSpanProfileRequest,
    _codec: Codec,
) -> Result<SelectMergeSpanProfileResponse, ConnectError> {
    let format = tree_format(req.format)?;
    let mut sel = selection(
        &req.profile_type_id,
        &req.label_selector,
        req.start,
        req.end,
    )?;
    let max_nodes = max_nodes(req.max_nodes)?;
    sel.span_ids = span_ids(&req.span_selector)?;
    sel.include_child_spans = queries.config.server.span_profiles_include_children;
    if sel.span_ids.is_empty() {
        // No span (or only all-zero ids): nothing, not the whole service.
        let (flamegraph, tree) = answer(&FlameTree::new(), max_nodes, format);
        return Ok(SelectMergeSpanProfileResponse { flamegraph, tree });
    }
    blocking(&queries, move |store| {
        let (tree, _) = store.flame_graph(&sel)?;
        let (flamegraph, tree) = answer(&tree, max_nodes, format);
        Ok(SelectMergeSpanProfileResponse { flamegraph, tree })
    })
    .await
}

fn refuse_unsupported(
    stack_trace_selector: &Option<StackTraceSelector>,
    profile_id_selector: &[String],
) -> Result<(), ConnectError> {
    if stack_trace_selector.is_some() {
        return Err(ConnectError::unimplemented(
            "stack_trace_selector is not supported",
        ));
    }
    // Upstream (v2.2.1 pkg/querybackend/query_profile_entry.go) parses each as a UUID: the id
    // its distributor gives each stored profile, not a span's (those go in span_selector).
    if let Some(bad) = profile_id_selector.iter().find(|id| !is_uuid(id)) {
        return Err(ConnectError::invalid(format!(
            "profile_id_selector: {bad:?} is not a profile UUID (a span's id, 16 hex \
             characters, goes in span_selector)"
        )));
    }
    if !profile_id_selector.is_empty() {
        return Err(ConnectError::unimplemented(
            "profile_id_selector is not supported: spanprof keeps no profile UUIDs (Pyroscope \
             gives one to each profile it stores); select spans with span_selector",
        ));
    }
    Ok(())
}

/// Whether `s` is a UUID in a form Go's `uuid.Parse` reads: 32 hex digits, or 36 with
/// dashes, optionally in braces or after `urn:uuid:`.
fn is_uuid(s: &str) -> bool {
    let s = s
        .strip_prefix("urn:uuid:")
        .or_else(|| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .unwrap_or(s);
    let b = s.as_bytes();
    match b.len() {
        32 => b.iter().all(u8::is_ascii_hexdigit),
        36 => b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

/// What a `SelectMergeStacktracesRequest` selects, checked: its selection with the spans
/// chosen, its trace ids, and its node limit.
struct Stacktraces {
    sel: Selection,
    traces: Vec<[u8; 16]>,
    /// A selector of spans or traces that holds only all-zero ids: it matches nothing.
    nothing: bool,
    max_nodes: usize,
}

impl Stacktraces {
    /// Checks `req` (all but its format).
    fn of(req: &SelectMergeStacktracesRequest) -> Result<Self, ConnectError> {
        refuse_unsupported(&req.stack_trace_selector, &req.profile_id_selector)?;
        if req.r#async.is_some() {
            return Err(ConnectError::unimplemented(
                "async queries are not supported",
            ));
        }
        if !req.span_selector.is_empty() && !req.trace_id_selector.is_empty() {
            return Err(ConnectError::invalid(
                "span_selector and trace_id_selector are mutually exclusive",
            ));
        }
        let mut sel = selection(
            &req.profile_type_id,
            &req.label_selector,
            req.start,
            req.end,
        )?;
        let max_nodes = max_nodes(req.max_nodes)?;
        sel.span_ids = span_ids(&req.span_selector)?;
        let traces = trace_ids(&req.trace_id_selector)?;
        let nothing = (!req.span_selector.is_empty() && sel.span_ids.is_empty())
            || (!req.trace_id_selector.is_empty() && traces.is_empty());
        Ok(Stacktraces {
            sel,
            traces,
            nothing,
            max_nodes,
        })
    }

    /// The flame tree of what it selects.
    fn tree(&self, store: &Store) -> Result<FlameTree, ConnectError> {
        if self.nothing {
            return Ok(FlameTree::new());
        }
        merged_tree(store, &self.sel, &self.traces)
    }
}

/// `SelectMergeStacktraces`: a flame graph or a pprof profile, optionally of spans or traces.
pub async fn select_merge_stacktraces(
    queries: Queries,
    req: SelectMergeStacktracesRequest,
    codec: Codec,
) -> Result<SelectMergeStacktracesResponse, ConnectError> {
    let q = Stacktraces::of(&req)?;
    // None: pprof.
    let format = match ProfileFormat::try_from(req.format) {
        Ok(ProfileFormat::Pprof) if codec == Codec::Json => {
            return Err(ConnectError::unimplemented(
                "PROFILE_FORMAT_PPROF is answered in application/proto only",
            ))
        }
        Ok(ProfileFormat::Pprof) => None,
        _ => Some(tree_format(req.format)?),
    };
    if format.is_none() && q.traces.len() > 1 {
        return Err(ConnectError::unimplemented(
            "PROFILE_FORMAT_PPROF takes at most one trace id",
        ));
    }
    blocking(&queries, move |store| match format {
        Some(format) => {
            let (flamegraph, tree) = answer(&q.tree(store)?, q.max_nodes, format);
            Ok(SelectMergeStacktracesResponse {
                flamegraph,
                tree,
                ..Default::default()
            })
        }
        None => {
            let mut sel = q.sel.clone();
            sel.trace_id = q.traces.first().copied();
            let profile = if q.nothing {
                spanprof_format::pprof::Profile::default()
            } else {
                store.pprof(&sel)?
            };
            Ok(SelectMergeStacktracesResponse {
                pprof: Some(PprofProfile {
                    profile: Some(profile),
                }),
                ..Default::default()
            })
        }
    })
    .await
}

/// `Diff`: the diff flame graph of two selections, `left` the baseline and `right` the
/// comparison, of one profile type; the nodes kept are `left`'s `max_nodes` (as Pyroscope
/// does). Their `format` is not read: the answer is a diff flame graph.
pub async fn diff(
    queries: Queries,
    req: DiffRequest,
    _codec: Codec,
) -> Result<DiffResponse, ConnectError> {
    let side = |r: Option<SelectMergeStacktracesRequest>, name: &str| {
        let r = r.ok_or_else(|| ConnectError::invalid(format!("{name} is required")))?;
        Stacktraces::of(&r).map_err(|e| ConnectError {
            message: format!("{name}: {}", e.message),
            ..e
        })
    };
    let (left, right) = (side(req.left, "left")?, side(req.right, "right")?);
    if left.sel.profile_type != right.sel.profile_type {
        return Err(ConnectError::invalid(format!(
            "left and right must be of one profile type, not {} and {}",
            left.sel.profile_type.as_deref().unwrap_or(""),
            right.sel.profile_type.as_deref().unwrap_or("")
        )));
    }
    blocking(&queries, move |store| {
        let d = diff_layout(&left.tree(store)?, &right.tree(store)?, left.max_nodes);
        Ok(DiffResponse {
            flamegraph: Some(FlameGraphDiff {
                names: d.names,
                levels: d
                    .levels
                    .into_iter()
                    .map(|values| Level { values })
                    .collect(),
                total: d.total,
                max_self: d.max_self,
                left_ticks: d.left_ticks,
                right_ticks: d.right_ticks,
            }),
        })
    })
    .await
}

/// `GetProfileStats`: whether a profile is stored, and when the oldest and the newest were
/// taken (ms); with none, the largest and the smallest int64, as Pyroscope answers.
pub async fn get_profile_stats(
    queries: Queries,
    _req: GetProfileStatsRequest,
    _codec: Codec,
) -> Result<GetProfileStatsResponse, ConnectError> {
    blocking(&queries, |store| {
        Ok(match store.profile_time_range() {
            Some((oldest, newest)) => GetProfileStatsResponse {
                data_ingested: true,
                oldest_profile_time: oldest.div_euclid(1_000_000),
                newest_profile_time: newest.div_euclid(1_000_000),
            },
            None => GetProfileStatsResponse {
                data_ingested: false,
                oldest_profile_time: i64::MAX,
                newest_profile_time: i64::MIN,
            },
        })
    })
    .await
}

/// `SelectMergeProfile`: the selection as `google.v1.Profile` (binary protobuf only).
pub async fn select_merge_profile(
    queries: Queries,
    req: SelectMergeProfileRequest,
    codec: Codec,
) -> Result<spanprof_format::pprof::Profile, ConnectError> {
    if codec == Codec::Json {
        return Err(ConnectError::unimplemented(
            "SelectMergeProfile is answered in application/proto only",
        ));
    }
    refuse_unsupported(&req.stack_trace_selector, &req.profile_id_selector)?;
    let mut sel = selection(
        &req.profile_type_id,
        &req.label_selector,
        req.start,
        req.end,
    )?;
    max_nodes(req.max_nodes)?; // checked; not enforced on this RPC (as Pyroscope)
    let traces = trace_ids(&req.trace_id_selector)?;
    if traces.len() > 1 {
        return Err(ConnectError::unimplemented(
            "SelectMergeProfile takes at most one trace id",
        ));
    }
    let nothing = !req.trace_id_selector.is_empty() && traces.is_empty();
    sel.trace_id = traces.first().copied();
    blocking(&queries, move |store| {
        if nothing {
            return Ok(spanprof_format::pprof::Profile::default());
        }
        Ok(store.pprof(&sel)?)
    })
    .await
}

/// `SelectSeries`.
// Long: SelectSeries in order: refusals, the selection, then each group's series and points.
#[allow(clippy::too_many_lines)]
pub async fn select_series(
    queries: Queries,
    req: SelectSeriesRequest,
    _codec: Codec,
) -> Result<SelectSeriesResponse, ConnectError> {
    if req.stack_trace_selector.is_some() {
        return Err(ConnectError::unimplemented(
            "stack_trace_selector is not supported",
        ));
    }
    if req.group_by.len() > 1 {
        return Err(ConnectError::unimplemented(
            "group_by takes at most one label",
        ));
    }
    // At least a nanosecond: a smaller step rounded to 0 and failed as an internal error.
    if !(req.step.is_finite() && req.step >= 1e-9) {
        return Err(ConnectError::invalid(format!(
            "step must be a positive number of seconds, at least 1e-9 (a nanosecond), got {}",
            req.step
        )));
    }
    let step_ns = (req.step * 1e9).min(i64::MAX as f64).max(1.0) as i64;
    let aggregation = req.aggregation.unwrap_or(0);
    let aggregation = match TimeSeriesAggregationType::try_from(aggregation) {
        Ok(TimeSeriesAggregationType::Sum) => Aggregation::Sum,
        Ok(TimeSeriesAggregationType::Average) => Aggregation::Average,
        Err(_) => {
            return Err(ConnectError::invalid(format!(
                "unknown aggregation {aggregation}"
            )))
        }
    };
    let exemplars = match ExemplarType::try_from(req.exemplar_type) {
        Ok(ExemplarType::Span) => EXEMPLARS_PER_POINT,
        Ok(_) => 0,
        Err(_) => {
            return Err(ConnectError::invalid(format!(
                "unknown exemplar type {}",
                req.exemplar_type
            )))
        }
    };
    let limit = match req.limit {
        Some(n) if n < 0 => {
            return Err(ConnectError::invalid(format!(
                "limit must not be negative, got {n}"
            )))
        }
        Some(n) if n > 0 => Some(n as usize),
        _ => None,
    };
    let sel = selection(
        &req.profile_type_id,
        &req.label_selector,
        req.start,
        req.end,
    )?;
    let group_by = req.group_by.first().cloned();
    blocking(&queries, move |store| {
        let groups =
            store.time_series(&sel, step_ns, group_by.as_deref(), aggregation, exemplars)?;
        let mut series: Vec<(f64, Series)> = groups
            .into_iter()
            .map(|(key, points)| {
                let total: f64 = points.iter().map(|p| p.value).sum();
                let labels = match &group_by {
                    Some(name) if !key.is_empty() => vec![LabelPair {
                        name: name.clone(),
                        value: key,
                    }],
                    _ => Vec::new(),
                };
                let points = points
                    .into_iter()
                    .map(|p| Point {
                        value: p.value,
                        timestamp: p.timestamp_ms,
                        annotations: Vec::new(),
                        exemplars: p
                            .exemplars
                            .into_iter()
                            .map(|e| Exemplar {
                                timestamp: e.timestamp_ms,
                                profile_id: String::new(),
                                span_id: to_hex(&e.span_id),
                                value: e.value,
                                labels: Vec::new(),
                                trace_id: if e.trace_id == [0; 16] {
                                    String::new()
                                } else {
                                    to_hex(&e.trace_id)
                                },
                            })
                            .collect(),
                    })
                    .collect();
                (total, Series { labels, points })
            })
            .collect();
        if let Some(limit) = limit {
            series.sort_by(|a, b| b.0.total_cmp(&a.0));
            series.truncate(limit);
            series.sort_by(|a, b| {
                a.1.labels
                    .iter()
                    .map(|l| &l.value)
                    .cmp(b.1.labels.iter().map(|l| &l.value))
            });
        }
        Ok(SelectSeriesResponse {
            series: series.into_iter().map(|(_, s)| s).collect(),
        })
    })
    .await
}
