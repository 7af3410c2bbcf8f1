//! The `/api/v1` answers over the remote pair, in the embedded answers' shapes, built from
//! the same tree with the same writers; what Pyroscope does not keep is null and listed in
//! `remote.not_available`.

use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::store::Selection;
use spanprof_store::FunctionOrder;

use super::Remote;
use crate::answer::ApiError;

/// What a remote answer cannot hold, said in it.
fn remote_note() -> Value {
    json!({
        "backend": "remote (Pyroscope + Tempo)",
        "not_available": [
            "samples_selected: Pyroscope answers merged stacks, not the samples it merged",
            "averaged_over: Pyroscope answers sums, not the number of profiles",
            "per-sample timestamps and thread ids: Pyroscope does not keep them",
        ],
    })
}

fn summary(f: &super::RemoteFlame) -> Value {
    let used = f.profile_type.as_ref();
    json!({
        "profile_type": used.map(ToString::to_string),
        "unit": used.map(|u| u.sample_unit.as_str()),
        "types_available": f.types.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "samples_selected": null,
        "value_selected": f.tree.total(),
        "averaged_over": null,
        "remote": remote_note(),
    })
}

/// `/api/v1/flamegraph`.
pub async fn flamegraph(
    remote: &Remote,
    sel: &Selection,
    max_nodes: usize,
) -> Result<Response, ApiError> {
    let f = remote.flame(sel, false).await?;
    let body = format!(
        "{{\"flamegraph\":{},\"tree\":{},\"summary\":{},\"focus\":null}}",
        crate::answer::layout_json(&f.tree, max_nodes),
        f.tree.to_nested_json_within(max_nodes),
        summary(&f),
    );
    Ok(([("content-type", "application/json")], body).into_response())
}

/// `/api/v1/top`.
pub async fn top(
    remote: &Remote,
    sel: &Selection,
    order: FunctionOrder,
    limit: usize,
) -> Result<Response, ApiError> {
    let f = remote.flame(sel, false).await?;
    let functions: Vec<Value> = f
        .tree
        .top_functions(order)
        .into_iter()
        .take(limit)
        .map(|x| json!({"name": x.name, "self": x.self_value, "total": x.total}))
        .collect();
    Ok(axum::Json(json!({
        "functions": functions,
        "total": f.tree.total(),
        "summary": summary(&f),
        "focus": null,
    }))
    .into_response())
}

/// `/api/v1/svg`: the image of [`crate::api::query`]'s, from the remote tree.
pub async fn svg(remote: &Remote, sel: &Selection) -> Result<String, ApiError> {
    let f = remote.flame(sel, false).await?;
    let used = f.profile_type.clone().unwrap_or_default();
    Ok(spanprof_store::render_svg(
        &f.tree,
        &spanprof_store::SvgOptions {
            unit: used.sample_unit.clone(),
            profile_type: sel.describe(&used.to_string()),
            ..Default::default()
        },
    ))
}

/// `/api/v1/pprof`: Pyroscope's pprof of the selection, gzipped.
pub async fn pprof(remote: &Remote, sel: &Selection) -> Result<Vec<u8>, ApiError> {
    let f = remote.flame(sel, true).await?;
    Ok(spanprof_format::pprof::encode_gzip(&f.pprof))
}

fn type_json(t: &ProfileTypeId) -> Value {
    json!({
        "id": t.to_string(),
        "name": t.name,
        "sample_type": t.sample_type,
        "sample_unit": t.sample_unit,
        "period_type": t.period_type,
        "period_unit": t.period_unit,
        "is_cpu": t.is_cpu(),
    })
}

/// `/api/v1/profile-types`: Pyroscope's types in the range (of the service's series when
/// `service` is given), and the one a selection takes without `type`.
pub async fn profile_types(remote: &Remote, sel: &Selection) -> Result<Response, ApiError> {
    let mut types = remote.profile_types(sel).await?;
    if let Some(service) = &sel.service {
        if sel.span_ids.is_empty() && sel.trace_id.is_none() {
            let mut of_service = Selection {
                service: Some(service.clone()),
                ..sel.clone()
            };
            of_service.label_selector = None;
            let matcher = super::profiles::label_selector(&of_service, false);
            let ids = remote
                .labels(sel, vec![matcher], Some("__profile_type__"))
                .await?;
            types.retain(|t| ids.contains(&t.to_string()));
        }
    }
    let default = ProfileTypeId::preferred(&types).cloned();
    Ok(axum::Json(json!({
        "profile_types": types.iter().map(type_json).collect::<Vec<_>>(),
        "default": default.as_ref().map(ToString::to_string),
        "remote": remote_note(),
    }))
    .into_response())
}

/// The matchers of a series selection: its labels and service, and its type when given.
async fn matchers(remote: &Remote, sel: &Selection) -> Result<Vec<String>, ApiError> {
    let mut m = super::profiles::label_selector(sel, false);
    if sel.profile_type.is_some() {
        let types = remote.profile_types(sel).await?;
        if let Some(t) = Remote::resolve_type(&types, sel.profile_type.as_deref())
            .map_err(ApiError::bad_request)?
        {
            let inner = m.trim_start_matches('{').trim_end_matches('}').to_owned();
            let sep = if inner.is_empty() { "" } else { "," };
            m = format!("{{{inner}{sep}__profile_type__=\"{t}\"}}");
        }
    }
    Ok(vec![m])
}

/// `/api/v1/label-names` (`name` None) or `/api/v1/label-values` of `name`.
pub async fn labels(
    remote: &Remote,
    sel: &Selection,
    name: Option<String>,
) -> Result<Response, ApiError> {
    let m = matchers(remote, sel).await?;
    let mut names = remote.labels(sel, m, name.as_deref()).await?;
    names.sort();
    names.dedup();
    let (names, truncated) = bounded(names);
    Ok(axum::Json(match name {
        None => json!({ "names": names }),
        Some(n) => json!({ "name": n, "values": names, "truncated": truncated }),
    })
    .into_response())
}

/// At most [`crate::answer::MAX_ANSWER_LABEL_BYTES`] of label text.
fn bounded(mut names: Vec<String>) -> (Vec<String>, bool) {
    let mut bytes = 0;
    let keep = names
        .iter()
        .position(|n| {
            bytes += n.len();
            bytes > crate::answer::MAX_ANSWER_LABEL_BYTES
        })
        .unwrap_or(names.len());
    let truncated = keep < names.len();
    names.truncate(keep);
    (names, truncated)
}

/// `/api/v1/series`.
pub async fn series(remote: &Remote, sel: &Selection) -> Result<Response, ApiError> {
    let m = matchers(remote, sel).await?;
    let mut all = remote.series(sel, m).await?;
    for labels in &mut all {
        // As the embedded store lists them: sorted by name.
        labels.sort();
    }
    all.sort();
    all.dedup();
    let mut bytes = 0;
    let mut truncated = false;
    let mut series = Vec::new();
    for labels in all {
        bytes += labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if bytes > crate::answer::MAX_ANSWER_LABEL_BYTES {
            truncated = true;
            break;
        }
        let labels: Map<String, Value> = labels
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        series.push(json!({ "labels": labels }));
    }
    Ok(axum::Json(json!({ "series": series, "truncated": truncated })).into_response())
}

/// `/api/v1/diff`: both sides' trees from the remote, in the embedded answer's shape.
pub async fn diff(
    remote: &Remote,
    left: &Selection,
    right: &Selection,
    max_nodes: usize,
) -> Result<Response, ApiError> {
    let l = remote.flame(left, false).await?;
    let r = remote.flame(right, false).await?;
    if l.tree.total() > 0 && r.tree.total() > 0 && l.profile_type != r.profile_type {
        let name = |f: &super::RemoteFlame| {
            f.profile_type
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        return Err(ApiError::bad_request(format!(
            "left and right select different profile types ({} and {}): give one type",
            name(&l),
            name(&r)
        )));
    }
    let body = format!(
        "{{\"flamegraph\":{},\"tree\":{},\"left\":{},\"right\":{}}}",
        crate::answer::diff_layout_json(&l.tree, &r.tree, max_nodes),
        spanprof_store::diff::diff_tree_json_within(&l.tree, &r.tree, max_nodes),
        summary(&l),
        summary(&r),
    );
    Ok(([("content-type", "application/json")], body).into_response())
}

/// `/api/v1/services`: Pyroscope's `service_name` values in `[from, to)` (ns, `to` 0 = now);
/// with `spans`, and Tempo's `service.name` values (Tempo's tag values are of its recent
/// data, not of the range: Tempo's API takes no range there).
pub async fn services(
    remote: &Remote,
    (from, to): (i64, i64),
    spans: bool,
) -> Result<Response, ApiError> {
    let sel = Selection {
        from_ns: from,
        to_ns: to,
        ..Default::default()
    };
    let mut services = remote
        .labels(&sel, vec!["{}".to_owned()], Some("service_name"))
        .await?;
    if spans {
        let path = "/api/search/tag/service.name/values";
        let bytes = remote
            .client()
            .get(super::client::Peer::Tempo, path, "application/json", false)
            .await?;
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|e| super::RemoteError::malformed(super::client::Peer::Tempo, path, e))?;
        let values = answer["tagValues"].as_array().ok_or_else(|| {
            super::RemoteError::malformed(super::client::Peer::Tempo, path, "no tagValues list")
        })?;
        // v1 answers strings; v2 objects with a value.
        services.extend(values.iter().filter_map(|v| {
            v.as_str()
                .or_else(|| v["value"].as_str())
                .map(str::to_owned)
        }));
    }
    services.sort();
    services.dedup();
    let (services, _) = bounded(services);
    Ok(axum::Json(json!({ "services": services })).into_response())
}
