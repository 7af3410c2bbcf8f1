//! Tag names and values (`/api/search/tags`, `/api/v2/search/tag/{name}/values`) over the
//! spans of a time range, for Grafana's pickers.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use hashbrown::HashSet;
use serde_json::json;
use spanprof_store::spans::{SpanQuery, SpanView, TextCondition};
use spanprof_store::store::Store;

use super::search::{tag_of, SpanFilter, Tag};
use super::{blocking, json_text, json_value, traceql, Params, PROFILE_ID_ATTRIBUTE};
use crate::api::query::ApiError;
use crate::api::Queries;

/// Intrinsic tag names offered for autocompletion.
const INTRINSICS: &[&str] = &[
    "duration",
    "kind",
    "name",
    "rootName",
    "rootServiceName",
    "status",
    "statusMessage",
    "traceDuration",
];

/// The spans that tag names and values are of: those of a time range that pass a query's
/// conditions, and whose trace's root passes its root conditions.
struct RangeFilter {
    query: SpanQuery,
    /// `q`'s conditions on the trace's root (`rootName`, `rootServiceName`).
    root: Vec<TextCondition>,
}

impl RangeFilter {
    /// Calls `f` with each span that passes, until it breaks.
    fn for_each_span(
        &self,
        store: &Store,
        mut f: impl FnMut(&SpanView<'_>) -> ControlFlow<()>,
    ) -> Result<(), ApiError> {
        // With root conditions, first the traces whose root passes them: one more pass over
        // the range's spans, rather than reading each candidate trace whole (a root outside
        // the range is not seen, so its trace passes none, as a root not stored).
        let mut rooted: Option<HashSet<[u8; 16]>> = None;
        if !self.root.is_empty() {
            let time_only = SpanQuery {
                from_ns: self.query.from_ns,
                to_ns: self.query.to_ns,
                ..Default::default()
            };
            let traces = rooted.insert(HashSet::new());
            store.for_each_segment_span(&time_only, |s| {
                if s.parent_span_id.is_none()
                    && time_only.matches_view(s)
                    && self.root.iter().all(|c| c.holds(s))
                {
                    traces.insert(s.trace_id);
                }
                ControlFlow::Continue(())
            })?;
            if traces.is_empty() {
                return Ok(());
            }
        }
        store.for_each_segment_span(&self.query, |s| {
            let in_rooted = rooted.as_ref().is_none_or(|t| t.contains(&s.trace_id));
            if in_rooted && self.query.matches_view(s) {
                f(s)
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(())
    }
}

/// The spans of the time range given by `start`/`end` (unix seconds) that pass the complete
/// conditions of `q` (TraceQL perhaps still being typed, as Grafana sends it to list the
/// values that go with the rest of the query; see [`traceql::parse_lenient`]: a condition
/// that does not parse or build is left out, as in Tempo), those on the trace's root
/// included.
fn range_query(params: &[(String, String)]) -> Result<RangeFilter, ApiError> {
    let seconds = |name: &str| -> Result<Option<u64>, ApiError> {
        params
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_param(name, v, "expected unix seconds"))
            })
            .transpose()
    };
    let from_ns = seconds("start")?.map_or(0, |s| s.saturating_mul(1_000_000_000));
    let to_ns = seconds("end")?.map_or(u64::MAX, |e| {
        e.saturating_add(1).saturating_mul(1_000_000_000) - 1
    });
    let mut filter = SpanFilter::default();
    if let Some((_, q)) = params.iter().rev().find(|(k, _)| k == "q") {
        let q = traceql::parse_lenient(q);
        for (key, op, value) in q.tags {
            // Left out when it does not build (a regex still being typed).
            let _ = filter.add(key, op, value);
        }
        (filter.min_ns, filter.max_ns) = (q.span_min_ns, q.span_max_ns);
    }
    Ok(RangeFilter {
        query: filter.span_query(from_ns, to_ns),
        root: filter.root,
    })
}

/// The distinct attribute keys of the spans of the time range in `params`, and of their
/// resources (with `service.name`), each sorted.
async fn tag_names(
    queries: &Queries,
    params: &[(String, String)],
) -> Result<(Vec<String>, Vec<String>), ApiError> {
    let filter = range_query(params)?;
    blocking(queries, move |store| {
        let mut span: BTreeSet<String> = BTreeSet::new();
        let mut resource: BTreeSet<String> = BTreeSet::from(["service.name".to_owned()]);
        let add = |names: &mut BTreeSet<String>, k: &str| {
            if !names.contains(k) {
                names.insert(k.to_owned());
            }
        };
        filter.for_each_span(store, |s| {
            for (k, _) in s.attributes().filter(|(k, _)| *k != PROFILE_ID_ATTRIBUTE) {
                add(&mut span, k);
            }
            for (k, _) in s.resource() {
                add(&mut resource, k);
            }
            ControlFlow::Continue(())
        })?;
        Ok((span.into_iter().collect(), resource.into_iter().collect()))
    })
    .await
}

pub(super) async fn tags_v1(
    State(queries): State<Queries>,
    Query(params): Params,
) -> Result<Response, ApiError> {
    let scope = params
        .iter()
        .find(|(k, _)| k == "scope")
        .map_or("", |(_, v)| v.as_str())
        .to_owned();
    let names: Vec<String> = match scope.as_str() {
        "resource" => tag_names(&queries, &params).await?.1,
        "span" => tag_names(&queries, &params).await?.0,
        "intrinsic" => INTRINSICS.iter().map(|s| (*s).to_owned()).collect(),
        "" | "all" => {
            let (span, resource) = tag_names(&queries, &params).await?;
            let all: BTreeSet<String> = span.into_iter().chain(resource).collect();
            all.into_iter().collect()
        }
        other => {
            return Err(ApiError::bad_param(
                "scope",
                other,
                "expected resource, span, intrinsic or all",
            ))
        }
    };
    Ok(json_value(json!({ "tagNames": names, "metrics": {} })))
}

pub(super) async fn tags_v2(
    State(queries): State<Queries>,
    Query(params): Params,
) -> Result<Response, ApiError> {
    let (span_tags, resource_tags) = tag_names(&queries, &params).await?;
    Ok(json_value(json!({
        "scopes": [
            {"name": "resource", "tags": resource_tags},
            {"name": "span", "tags": span_tags},
            {"name": "intrinsic", "tags": INTRINSICS},
        ],
        "metrics": {},
    })))
}

/// Most bytes of distinct values a tag values answer collects; past them the rest is left
/// out (Tempo's `max_bytes_per_tag_values_query` and its default). A tag with a value per
/// span (ids, URLs) otherwise answered every value of the store: 39 MB and 1.7 GB of memory
/// for 800,000 spans.
const MAX_TAG_VALUES_BYTES: usize = 5_000_000;

/// The distinct values of `tag` in the spans of the time range in `params`, sorted; at most
/// [`MAX_TAG_VALUES_BYTES`] of them.
async fn tag_values(
    queries: &Queries,
    params: &[(String, String)],
    tag_name: &str,
) -> Result<Vec<String>, ApiError> {
    let filter = range_query(params)?;
    let (field, of_root) = tag_of(tag_name).field();
    let tag_name = tag_name.to_owned();
    blocking(queries, move |store| {
        let mut values: BTreeSet<String> = BTreeSet::new();
        let (mut bytes, mut cut) = (0, false);
        filter.for_each_span(store, |s| {
            // A root's value is a root span's own.
            let value = (!of_root || s.parent_span_id.is_none())
                .then(|| field.value(s))
                .flatten();
            if let Some(v) = value.filter(|v| !values.contains(*v)) {
                if bytes + v.len() > MAX_TAG_VALUES_BYTES {
                    cut = true;
                    return ControlFlow::Break(());
                }
                bytes += v.len();
                values.insert(v.to_owned());
            }
            ControlFlow::Continue(())
        })?;
        if cut {
            tracing::info!(
                tag = %tag_name,
                values = values.len(),
                "tag values answer cut at {MAX_TAG_VALUES_BYTES} bytes of values"
            );
        }
        Ok(values.into_iter().collect())
    })
    .await
}

pub(super) async fn tag_values_v1(
    State(queries): State<Queries>,
    Path(name): Path<String>,
    Query(params): Params,
) -> Result<Response, ApiError> {
    tag_values_json(&tag_values(&queries, &params, &name).await?)
}

/// A tag values answer, `{"tagValues": [...], "metrics": {}}`, written straight from the
/// values: a [`Value`] per value took hundreds of bytes each (5 MB of values are a quarter
/// million).
fn tag_values_json<T: serde::Serialize>(values: &[T]) -> Result<Response, ApiError> {
    #[derive(serde::Serialize)]
    struct Empty {}
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Answer<'a, T> {
        tag_values: &'a [T],
        metrics: Empty,
    }
    let answer = Answer {
        tag_values: values,
        metrics: Empty {},
    };
    let body = serde_json::to_string(&answer).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_text(body))
}

pub(super) async fn tag_values_v2(
    State(queries): State<Queries>,
    Path(name): Path<String>,
    Query(params): Params,
) -> Result<Response, ApiError> {
    let kind = match tag_of(&name) {
        Tag::Status | Tag::Kind => "keyword",
        _ => "string",
    };
    let values = tag_values(&queries, &params, &name).await?;
    #[derive(serde::Serialize)]
    struct TagValue<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        value: &'a str,
    }
    let typed: Vec<TagValue> = values
        .iter()
        .map(|value| TagValue { kind, value })
        .collect();
    tag_values_json(&typed)
}
