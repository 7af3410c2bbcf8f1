//! Profile answers of one selection: `/flamegraph`, `/top` and `/pprof`.

use crate::answer::layout_json;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use spanprof_format::profile_type::is_snapshot_type;
use spanprof_store::store::Selection;
use spanprof_store::{FlameTree, FunctionOrder, SelectionSummary, DEFAULT_MAX_NODES};

use super::error::{blocking, json_text, ApiError};
use super::focus::{self, FOCUS_PARAM};
use super::params::{self, BadValue, QueryParams};
use super::selection::{SelectionQuery, SELECTION_PARAMS};
use crate::api::Queries;

/// Most nodes a client may ask a flame graph layout for (0 = no limit is allowed too).
const MAX_NODES_LIMIT: usize = 1 << 20;

/// `max_nodes`: nodes kept in the layout (default [`DEFAULT_MAX_NODES`], 0 = no limit).
pub fn max_nodes(p: &QueryParams) -> Result<usize, ApiError> {
    Ok(p.parsed("max_nodes", params::count(0, MAX_NODES_LIMIT))?
        .unwrap_or(DEFAULT_MAX_NODES))
}

/// The selection's flame graph. A snapshot type (the heap in use, goroutines) over several
/// profiles is their average, not their sum (eight scrapes of a 10 MB heap read 80 MB); with
/// spans or a trace selected it stays their samples' sum. Returns the tree, the summary and
/// how many profiles were averaged.
pub fn flame_of(
    store: &spanprof_store::store::Store,
    sel: &Selection,
) -> Result<(FlameTree, SelectionSummary, Option<u64>), ApiError> {
    let (tree, summary) = store.flame_graph(sel)?;
    let averaged = summary
        .used_types
        .first()
        .is_some_and(|t| averages(sel, &t.sample_type));
    Ok(match summary.profile_times {
        n if averaged && n > 1 => (tree.divided(n), summary, Some(n)),
        _ => (tree, summary, None),
    })
}

/// Whether a selection of `sample_type` is answered as the average of its profiles: a
/// snapshot type, and no spans or trace selected (their samples are their own).
fn averages(sel: &Selection, sample_type: &str) -> bool {
    is_snapshot_type(sample_type) && !super::selection::selects_spans(sel)
}

/// The selection summary: the profile type used (full id), the types the selection has
/// (its service's, or with spans or a trace selected those of their samples), what was
/// read, and over how many profiles the values are averaged (`averaged_over`, else null: a
/// sum).
pub fn summary_json(summary: &SelectionSummary, averaged_over: Option<u64>) -> Value {
    let used = summary.profile_type_id.as_ref();
    json!({
        "profile_type": used.map(ToString::to_string),
        "unit": used.map(|u| u.sample_unit.as_str()),
        "types_available": summary.type_ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "samples_selected": summary.samples_selected,
        "value_selected": summary.value_selected,
        "averaged_over": averaged_over,
    })
}

/// Applies `focus` to `q`'s selection: what the answer holds, in words (null without one).
fn focus_on(
    focus: Option<focus::Focus>,
    q: &mut SelectionQuery,
    store: &spanprof_store::store::Store,
) -> Result<Value, ApiError> {
    match focus {
        Some(f) => focus::apply(f, &mut q.selection, store),
        None => Ok(Value::Null),
    }
}

/// `GET /api/v1/flamegraph`.
pub async fn flamegraph(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/flamegraph",
        &[SELECTION_PARAMS, &["max_nodes", FOCUS_PARAM]].concat(),
    )?;
    let mut q = SelectionQuery::parse(&p, params::now_ns())?;
    let focus = focus::parse(&p)?;
    let max_nodes = max_nodes(&p)?;
    if let Some(remote) = &queries.remote {
        remote_focus(focus, &mut q.selection)?;
        return crate::remote::answers::flamegraph(remote, &q.selection, max_nodes).await;
    }
    let body = blocking(&queries, move |store| {
        q.check_type(store)?;
        let holds = focus_on(focus, &mut q, store)?;
        let (tree, summary, averaged) = flame_of(store, &q.selection)?;
        // The nested tree is written as text: a deep tree as a `Value` could overflow the
        // stack when dropped.
        Ok(format!(
            "{{\"flamegraph\":{},\"tree\":{},\"summary\":{},\"focus\":{}}}",
            layout_json(&tree, max_nodes),
            tree.to_nested_json_within(max_nodes),
            summary_json(&summary, averaged),
            holds,
        ))
    })
    .await?;
    Ok(json_text(body))
}

/// `GET /api/v1/top`.
pub async fn top(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/top",
        &[SELECTION_PARAMS, &["order", "limit", FOCUS_PARAM]].concat(),
    )?;
    let mut q = SelectionQuery::parse(&p, params::now_ns())?;
    let focus = focus::parse(&p)?;
    let order = p
        .parsed("order", |s| match s {
            "self" => Ok(FunctionOrder::SelfValue),
            "total" => Ok(FunctionOrder::Total),
            _ => Err(BadValue::Refused("expected self or total")),
        })?
        .unwrap_or(FunctionOrder::SelfValue);
    let limit = p.parsed("limit", params::count(1, 100_000))?.unwrap_or(100);
    if let Some(remote) = &queries.remote {
        remote_focus(focus, &mut q.selection)?;
        return crate::remote::answers::top(remote, &q.selection, order, limit).await;
    }
    let body = blocking(&queries, move |store| {
        q.check_type(store)?;
        let holds = focus_on(focus, &mut q, store)?;
        let (tree, summary, averaged) = flame_of(store, &q.selection)?;
        let functions: Vec<Value> = tree
            .top_functions(order)
            .into_iter()
            .take(limit)
            .map(|f| json!({"name": f.name, "self": f.self_value, "total": f.total}))
            .collect();
        Ok(json!({
            "functions": functions,
            "total": tree.total(),
            "summary": summary_json(&summary, averaged),
            "focus": holds,
        }))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// `GET /api/v1/svg`: the selection's flame graph as a standalone SVG image (the same
/// drawing as `spanprof flame --format svg`), to save or to put in a document. Names are
/// escaped as XML text and the image has no script.
pub async fn svg(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/svg", &[SELECTION_PARAMS, &[FOCUS_PARAM]].concat())?;
    let mut q = SelectionQuery::parse(&p, params::now_ns())?;
    let focus = focus::parse(&p)?;
    let image = match &queries.remote {
        Some(remote) => {
            remote_focus(focus, &mut q.selection)?;
            crate::remote::answers::svg(remote, &q.selection).await?
        }
        None => svg_image(&queries, q, focus).await?,
    };
    svg_response(image)
}

async fn svg_image(
    queries: &Queries,
    mut q: SelectionQuery,
    focus: Option<focus::Focus>,
) -> Result<String, ApiError> {
    blocking(queries, move |store| {
        q.check_type(store)?;
        focus_on(focus, &mut q, store)?;
        let (tree, summary, averaged) = flame_of(store, &q.selection)?;
        let used = summary.used_types.first().cloned().unwrap_or_default();
        let mut title = q.selection.describe(&used.to_string());
        if let Some(n) = averaged {
            title.push_str(&format!(" · average of {n} profiles"));
        }
        Ok(spanprof_store::render_svg(
            &tree,
            &spanprof_store::SvgOptions {
                unit: used.sample_unit.clone(),
                profile_type: title,
                ..Default::default()
            },
        ))
    })
    .await
}

fn svg_response(image: String) -> Result<Response, ApiError> {
    Ok((
        [
            ("content-type", "image/svg+xml; charset=utf-8"),
            (
                "content-disposition",
                "attachment; filename=\"spanprof-flamegraph.svg\"",
            ),
            // Opened directly, the image must not run anything (it has no script anyway).
            (
                "content-security-policy",
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        image,
    )
        .into_response())
}

/// `GET /api/v1/pprof`: gzip pprof, for `go tool pprof <url>`.
pub async fn pprof(State(queries): State<Queries>, RawQuery(raw): RawQuery) -> Response {
    pprof_answer(queries, raw)
        .await
        .unwrap_or_else(ApiError::for_go_pprof)
}

async fn pprof_answer(queries: Queries, raw: Option<String>) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/pprof",
        &[SELECTION_PARAMS, &[FOCUS_PARAM]].concat(),
    )?;
    let mut q = SelectionQuery::parse(&p, params::now_ns())?;
    let focus = focus::parse(&p)?;
    let bytes = match &queries.remote {
        Some(remote) => {
            remote_focus(focus, &mut q.selection)?;
            crate::remote::answers::pprof(remote, &q.selection).await?
        }
        None => pprof_bytes(&queries, q, focus).await?,
    };
    pprof_response(bytes)
}

async fn pprof_bytes(
    queries: &Queries,
    mut q: SelectionQuery,
    focus: Option<focus::Focus>,
) -> Result<Vec<u8>, ApiError> {
    blocking(queries, move |store| {
        q.check_type(store)?;
        focus_on(focus, &mut q, store)?;
        let mut profile = store.pprof(&q.selection)?;
        // A snapshot type over several profiles: their average, as the flame graph shows it.
        let averaged = profile
            .sample_type
            .first()
            .and_then(|t| profile.str(t.r#type))
            .is_some_and(|t| averages(&q.selection, t));
        if averaged {
            let n = store.profile_times(&q.selection)?;
            if n > 1 {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                for s in &mut profile.sample {
                    s.value.iter_mut().for_each(|v| *v /= n);
                }
                profile.sample.retain(|s| s.value.iter().any(|&v| v != 0));
                profile
                    .string_table
                    .push(format!("average of {n} profiles"));
                profile.comment.push(profile.string_table.len() as i64 - 1);
            }
        }
        Ok(spanprof_format::pprof::encode_gzip(&profile))
    })
    .await
}

fn pprof_response(bytes: Vec<u8>) -> Result<Response, ApiError> {
    Ok((
        [
            ("content-type", "application/octet-stream"),
            (
                "content-disposition",
                "attachment; filename=\"spanprof.pb.gz\"",
            ),
        ],
        bytes,
    )
        .into_response())
}

/// `focus` over the remote backend: the span alone, or with its children (from Tempo); the
/// others need the profile windows and spans of the embedded store (501).
fn remote_focus(focus: Option<focus::Focus>, sel: &mut Selection) -> Result<(), ApiError> {
    match focus {
        None | Some(focus::Focus::Span) => Ok(()),
        Some(focus::Focus::Children) => {
            sel.include_child_spans = true;
            Ok(())
        }
        Some(_) => Err(crate::remote::not_remote("focus=during and focus=window")),
    }
}
