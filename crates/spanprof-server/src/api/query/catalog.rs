//! What exists: `/services`, `/profile-types`, `/label-names`, `/label-values`, `/series`.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use spanprof_format::profile_type::ProfileTypeId;

use super::error::{blocking, ApiError};
use super::params::{self, QueryParams};
use super::selection::{span_range, time_range, SelectionQuery, SERIES_PARAMS};
use crate::api::Queries;
use crate::api::MAX_ANSWER_LABEL_BYTES;
use crate::Bound;

/// `GET /api/v1/status`: the version and where the listeners are bound.
pub async fn status(
    State(bound): State<Bound>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw.as_deref())?.allow("/api/v1/status", &[])?;
    let b = &bound;
    Ok(axum::Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "listeners": {
            "http": b.http.to_string(),
            "otlp_http": b.otlp_http.map(|a| a.to_string()),
            "otlp_grpc": b.otlp_grpc.map(|a| a.to_string()),
        },
    }))
    .into_response())
}

/// `GET /api/v1/services?from&to&spans`: services with profiles in the range; with
/// `spans=true`, and those with spans.
pub async fn services(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/services", &["from", "to", "spans"])?;
    let (from, to) = time_range(&p, params::now_ns())?;
    let with_spans = p.parsed("spans", params::boolean)?.unwrap_or(false);
    if let Some(remote) = &queries.remote {
        return crate::remote::answers::services(remote, (from, to), with_spans).await;
    }
    let services = blocking(&queries, move |store| {
        let mut services = store.services(from, to);
        if with_spans {
            // A tracer may name the service otherwise than its profiles (or send no profiles).
            let (from_ns, to_ns) = span_range((from, to));
            services.extend(store.span_services(from_ns, to_ns)?);
            services.sort();
            services.dedup();
        }
        Ok(services)
    })
    .await?;
    Ok(axum::Json(json!({ "services": services })).into_response())
}

/// `GET /api/v1/profile-types?service&span_id&trace_id&include_child_spans`: a service's
/// types, or with spans or a trace those of their samples (what a span's type picker
/// offers), and the one a selection takes without `type`.
pub async fn profile_types(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/profile-types",
        &["service", "span_id", "trace_id", "include_child_spans"],
    )?;
    let q = SelectionQuery::parse(&p, params::now_ns())?;
    if let Some(remote) = &queries.remote {
        return crate::remote::answers::profile_types(remote, &q.selection).await;
    }
    let (default, types) = blocking(&queries, move |store| {
        // An unknown id is a 404, as on the endpoints the types are for.
        q.check_ids_known(store)?;
        if super::selection::selects_spans(&q.selection) {
            return Ok(store.selection_types(&q.selection)?);
        }
        let types = store.profile_types(q.selection.service.as_deref());
        let default = ProfileTypeId::preferred(&types).cloned();
        Ok((default, types))
    })
    .await?;
    let types: Vec<Value> = types
        .iter()
        .map(|t| {
            json!({
                "id": t.to_string(),
                "name": t.name,
                "sample_type": t.sample_type,
                "sample_unit": t.sample_unit,
                "period_type": t.period_type,
                "period_unit": t.period_unit,
                "is_cpu": t.is_cpu(),
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "profile_types": types,
        "default": default.as_ref().map(ToString::to_string),
    }))
    .into_response())
}

/// `GET /api/v1/label-names?service&type&from&to&query`.
pub async fn label_names(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/label-names", SERIES_PARAMS)?;
    let q = SelectionQuery::parse(&p, params::now_ns())?;
    if let Some(remote) = &queries.remote {
        return crate::remote::answers::labels(remote, &q.selection, None).await;
    }
    let names = blocking(&queries, move |store| {
        q.check_type(store)?;
        Ok(store.label_names(&q.selection)?)
    })
    .await?;
    Ok(axum::Json(json!({ "names": names })).into_response())
}

/// `GET /api/v1/label-values?name&service&type&from&to&query`.
pub async fn label_values(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/label-values", &[SERIES_PARAMS, &["name"]].concat())?;
    let q = SelectionQuery::parse(&p, params::now_ns())?;
    let name = p
        .one("name")?
        .ok_or_else(|| {
            ApiError::bad_request("name: missing; give the label name, e.g. name=region")
        })?
        .value
        .to_owned();
    let answer_name = name.clone();
    if let Some(remote) = &queries.remote {
        return crate::remote::answers::labels(remote, &q.selection, Some(name)).await;
    }
    let (values, truncated) = blocking(&queries, move |store| {
        q.check_type(store)?;
        Ok(store.label_values_limited(&q.selection, &name, MAX_ANSWER_LABEL_BYTES)?)
    })
    .await?;
    Ok(
        axum::Json(json!({ "name": answer_name, "values": values, "truncated": truncated }))
            .into_response(),
    )
}

/// `GET /api/v1/series?service&type&from&to&query`.
pub async fn series(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/series", SERIES_PARAMS)?;
    let q = SelectionQuery::parse(&p, params::now_ns())?;
    if let Some(remote) = &queries.remote {
        return crate::remote::answers::series(remote, &q.selection).await;
    }
    let (series, truncated) = blocking(&queries, move |store| {
        q.check_type(store)?;
        Ok(store.series_limited(&q.selection, MAX_ANSWER_LABEL_BYTES)?)
    })
    .await?;
    let series: Vec<Value> = series
        .into_iter()
        .map(|labels| {
            let labels: Map<String, Value> = labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            json!({ "labels": labels })
        })
        .collect();
    Ok(axum::Json(json!({ "series": series, "truncated": truncated })).into_response())
}
