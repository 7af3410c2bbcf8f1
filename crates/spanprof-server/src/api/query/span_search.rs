//! Finding spans: `/api/v1/spans` (a counted, sorted page of spans, or of their traces),
//! `/api/v1/span-points` (every match as a point of a duration-over-time chart) and
//! `/api/v1/span-names` (names to offer as a search box is typed in).

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use spanprof_store::spans::{CompareOp, SpanQuery, TextCondition, TextField};
use spanprof_store::store::{
    contains_regex, search_regex, sort_trace_groups, SpanMatches, SpanOrder, MAX_MATCHES,
};

use super::error::{blocking, ApiError};
use super::params::{self, BadValue, QueryParams};
use super::selection::{durations_in_order, span_range, time_range};
use super::spans::{
    comparison, point_to_sampled_ancestors_found, profiles_without_spans, type_param,
    unknown_service, CoverageOf,
};
use crate::answer::{put_trace_page, span_points_json};
use crate::api::Queries;

/// Spans (or traces) a page holds when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;
/// Most spans one page holds (each costs a coverage lookup).
const MAX_LIMIT: usize = 10_000;
/// Points a chart gets when `limit` is not given, and the most it may ask for.
const DEFAULT_POINTS: usize = 100_000;
const MAX_POINTS: usize = 200_000;
/// Names offered when `limit` is not given, and the most.
const DEFAULT_NAMES: usize = 20;
const MAX_NAMES: usize = 1_000;

/// The filters every search endpoint takes.
const FILTERS: &[&str] = &[
    "service",
    "name",
    "span_name",
    "name_match",
    "min_duration",
    "max_duration",
    "status",
    "from",
    "to",
    "type",
    "attribute",
    "resource",
    "kind",
];

/// The spans the filters select (`limit` left open); `name_match`: `exact` (default),
/// `contains` (ASCII case ignored) or `regex` (a match anywhere in the name).
fn span_query(p: &QueryParams) -> Result<SpanQuery, ApiError> {
    let (from_ns, to_ns) = span_range(time_range(p, params::now_ns())?);
    // `attribute=http.route=/cart`, `resource=host.name=web-1`: repeatable, all must hold.
    // Also `!=`, `=~`, `!~` (fully anchored regexes) and `>`, `>=`, `<`, `<=` to a number,
    // held as TraceQL holds them (see `TextCondition`).
    let mut conditions = Vec::new();
    let mut pairs = |name: &str| -> Result<Vec<(String, String)>, ApiError> {
        let mut equal = Vec::new();
        for x in p.many(name) {
            let Some((key, op, value)) = comparison(x.value) else {
                return Err(x.bad(
                    "expected key=value (or key!=value, key=~regex, key!~regex, or key>=number \
                     and the other orders), e.g. host.name=web-1",
                ));
            };
            if op == CompareOp::Eq {
                equal.push((key.to_owned(), value.to_owned()));
                continue;
            }
            let field = match name {
                "resource" => TextField::Resource(key.to_owned()),
                _ => TextField::Attribute(key.to_owned()),
            };
            conditions.push(TextCondition::new(field, op, value).map_err(|e| x.bad(e))?);
        }
        Ok(equal)
    };
    let attributes = pairs("attribute")?;
    let resource = pairs("resource")?;
    if let Some(kind) = p.parsed("kind", params::kind)? {
        let name = spanprof_store::spans::kind_name(kind);
        let condition = TextCondition::new(TextField::Kind, CompareOp::Eq, name);
        conditions.push(condition.expect("an equality always builds"));
    }
    let name = match (p.one("name")?, p.one("span_name")?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "name and span_name are the same parameter here: give one",
            ))
        }
        (a, b) => a.or(b),
    };
    let mode = p.one("name_match")?;
    let mut exact_name = None;
    match (mode.map(|m| m.value), name) {
        (None | Some("exact"), n) => exact_name = n.map(|x| x.value.to_owned()),
        (Some("contains"), Some(n)) => conditions.push(
            TextCondition::new(TextField::Name, CompareOp::Re, &contains_regex(n.value))
                .map_err(|e| n.bad(e))?,
        ),
        (Some("regex"), Some(n)) => conditions.push(
            TextCondition::new(TextField::Name, CompareOp::Re, &search_regex(n.value))
                .map_err(|e| n.bad(format!("not a usable regex: {e}")))?,
        ),
        (Some("contains" | "regex"), None) => {}
        (Some(_), _) => {
            return Err(mode
                .expect("matched Some")
                .bad("expected exact, contains or regex"))
        }
    }
    let q = SpanQuery {
        service: p.one("service")?.map(|x| x.value.to_owned()),
        name: exact_name,
        min_duration_ns: p.parsed("min_duration", params::duration)?,
        max_duration_ns: p.parsed("max_duration", params::duration)?,
        from_ns,
        to_ns,
        limit: usize::MAX,
        attributes,
        resource,
        either: Vec::new(),
        status_code: p.parsed("status", params::status)?,
        conditions,
    };
    durations_in_order(p, q.min_duration_ns, q.max_duration_ns)?;
    Ok(q)
}

/// `sort` (`duration`, `start`, `cpu`, `name`; default `duration`) and `order` (`asc`,
/// `desc`; default `desc`, but `asc` for `name`).
fn sort_params(p: &QueryParams) -> Result<(SpanOrder, bool), ApiError> {
    let order = p
        .parsed("sort", |s| {
            SpanOrder::parse(s).ok_or(BadValue::Refused("expected duration, start, cpu or name"))
        })?
        .unwrap_or(SpanOrder::Duration);
    let descending = p
        .parsed("order", |s| match s {
            "asc" => Ok(false),
            "desc" => Ok(true),
            _ => Err(BadValue::Refused("expected asc or desc")),
        })?
        .unwrap_or(order != SpanOrder::Name);
    Ok((order, descending))
}

fn order_name(o: SpanOrder) -> &'static str {
    match o {
        SpanOrder::Duration => "duration",
        SpanOrder::Start => "start",
        SpanOrder::Cpu => "cpu",
        SpanOrder::Name => "name",
    }
}

/// `GET /api/v1/spans?<filters>&sort&order&offset&limit&group`: the matching spans (or, with
/// `group=trace`, their traces), counted, sorted and paged. Every parameter:
/// `docs/api/spanprof.md`.
pub async fn search(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    let mut allowed = FILTERS.to_vec();
    allowed.extend(["sort", "order", "offset", "limit", "group"]);
    p.allow("/api/v1/spans", &allowed)?;
    let q = span_query(&p)?;
    let (order, descending) = sort_params(&p)?;
    let (offset, limit, by_trace) = page_params(&p)?;
    let profile_type = type_param(&p)?;
    if let Some(r) = &queries.remote {
        let (wanted, sort) = (profile_type.map(|(_, w)| w), (order, descending));
        return remote_search(r, &q, sort, (offset, limit), by_trace, wanted.as_deref()).await;
    }
    let service_param = p.one("service")?.map(|x| x.shown.to_owned());
    let unlinked_keys = queries.span_keys.found();
    let mut body = blocking(&queries, move |store| {
        let mut found = store.span_matches(&q)?;
        let mut hint = None;
        if found.matches.is_empty() {
            if let (Some(shown), Some(service)) = (&service_param, &q.service) {
                unknown_service(store, shown, service)?;
                hint = profiles_without_spans(store, service)?;
            }
        }
        let wanted_type = profile_type.as_ref().map(|(_, w)| w.as_str());
        let mut body = json!({
            "count": found.matches.len(),
            "more": found.more,
            "offset": offset,
            "limit": limit,
            "sort": order_name(order),
            "order": if descending { "desc" } else { "asc" },
        });
        if by_trace {
            let (mut groups, t) = store.trace_groups(&q, &found, wanted_type)?;
            sort_trace_groups(&mut groups, order, descending);
            put_trace_page(&mut body, &groups, t.as_ref(), (offset, limit));
        } else {
            if order == SpanOrder::Cpu {
                store.add_span_cpu(&mut found, wanted_type)?;
            }
            found.sort(order, descending);
            let ids: Vec<[u8; 8]> = found
                .matches
                .iter()
                .skip(offset)
                .take(limit)
                .map(|m| m.span_id)
                .collect();
            let records = store.span_records(&q, &ids)?;
            let coverage = CoverageOf::new(store, profile_type, unlinked_keys)?;
            let mut spans = coverage.spans_json(store, &records)?;
            point_to_sampled_ancestors_found(store, &records, &mut spans)?;
            body["spans"] = spans
                .into_iter()
                .map(Value::Object)
                .collect::<Vec<_>>()
                .into();
        }
        if let Some(hint) = hint {
            body["hint"] = hint.into();
        }
        Ok(body)
    })
    .await?;
    if body.get("hint").is_some_and(Value::is_null) {
        body.as_object_mut().map(|o| o.remove("hint"));
    }
    Ok(axum::Json(body).into_response())
}

/// `offset`, `limit` and whether `group=trace`.
fn page_params(p: &QueryParams) -> Result<(usize, usize, bool), ApiError> {
    let offset = p
        .parsed("offset", params::count(0, MAX_MATCHES))?
        .unwrap_or(0);
    let limit = p
        .parsed("limit", params::count(1, MAX_LIMIT))?
        .unwrap_or(DEFAULT_LIMIT);
    let by_trace = match p.one("group")? {
        None => false,
        Some(g) if ["span", "trace"].contains(&g.value) => g.value == "trace",
        Some(g) => return Err(g.bad("expected span or trace")),
    };
    Ok((offset, limit, by_trace))
}

/// `/api/v1/spans` over the remote backend (spans, or with `group=trace` their traces).
async fn remote_search(
    remote: &std::sync::Arc<crate::remote::Remote>,
    q: &SpanQuery,
    (order, descending): (SpanOrder, bool),
    (offset, limit): (usize, usize),
    by_trace: bool,
    wanted: Option<&str>,
) -> Result<Response, ApiError> {
    let body = json!({
        "offset": offset,
        "limit": limit,
        "sort": order_name(order),
        "order": if descending { "desc" } else { "asc" },
    });
    let page = (offset, limit);
    let body = if by_trace {
        crate::remote::trace_groups::search(remote, q, (order, descending), page, wanted, body)
            .await?
    } else {
        crate::remote::span_list::search(remote, q, (order, descending), page, wanted, body).await?
    };
    Ok(axum::Json(body).into_response())
}

/// `GET /api/v1/span-points?<filters>&limit`: the matching spans as columns for a
/// duration-over-time chart, the `limit` longest (default 100,000), in start order: start
/// (ms since the epoch), duration (ns), own sampled value (CPU ns by default), name index.
pub async fn points(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    let mut allowed = FILTERS.to_vec();
    allowed.push("limit");
    p.allow("/api/v1/span-points", &allowed)?;
    let q = span_query(&p)?;
    let limit = p
        .parsed("limit", params::count(1, MAX_POINTS))?
        .unwrap_or(DEFAULT_POINTS);
    let profile_type = type_param(&p)?;
    if let Some(remote) = &queries.remote {
        let wanted = profile_type.as_ref().map(|(_, w)| w.as_str());
        let body = crate::remote::span_list::points(remote, &q, limit, wanted).await?;
        return Ok(axum::Json(body).into_response());
    }
    let body = blocking(&queries, move |store| {
        let mut found: SpanMatches = store.span_matches(&q)?;
        let count = found.matches.len();
        // The longest when there are more: a chart's outliers are what it is for.
        found.sort(SpanOrder::Duration, true);
        found.matches.truncate(limit);
        store.add_span_cpu(&mut found, profile_type.as_ref().map(|(_, w)| w.as_str()))?;
        found.sort(SpanOrder::Start, false);
        Ok(span_points_json(count, &found, found.profile_type.as_ref()))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// `GET /api/v1/span-names?q&service&from&to&limit`: distinct names of the spans of the
/// range containing `q` (ASCII case ignored), those starting with it first.
pub async fn names(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow(
        "/api/v1/span-names",
        &["q", "service", "from", "to", "limit"],
    )?;
    let (from_ns, to_ns) = span_range(time_range(&p, params::now_ns())?);
    let text = p.one("q")?.map(|x| x.value.to_owned()).unwrap_or_default();
    let limit = p
        .parsed("limit", params::count(1, MAX_NAMES))?
        .unwrap_or(DEFAULT_NAMES);
    let q = SpanQuery {
        service: p.one("service")?.map(|x| x.value.to_owned()),
        from_ns,
        to_ns,
        ..SpanQuery::default()
    };
    if let Some(remote) = &queries.remote {
        let range = (from_ns, to_ns);
        let service = q.service.as_deref();
        let body = crate::remote::span_list::names(remote, service, range, &text, limit).await?;
        return Ok(axum::Json(body).into_response());
    }
    let found = blocking(&queries, move |store| {
        Ok(store.span_names(&q, &text, limit)?)
    })
    .await?;
    Ok(axum::Json(json!({ "names": found.names, "more": found.more })).into_response())
}
