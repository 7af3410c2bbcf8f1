//! `/api/v1/diff`: two selections as one diff flame graph, given side by side
//! (`left.<param>` / `right.<param>` over shared parameters) or as a selection and a
//! `baseline` derived from it.

use crate::answer::diff_layout_json;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use spanprof_store::diff::diff_tree_json_within;
use spanprof_store::store::{Selection, SpanFilter, Store};

use super::error::{blocking, json_text, ApiError};
use super::flame::{flame_of, max_nodes, summary_json};
use super::params::{self, BadValue, QueryParams};
use super::selection::{SelectionQuery, SELECTION_PARAMS};
use crate::api::Queries;

/// What the left side is when it is derived from the right (`baseline=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Baseline {
    /// Every span of the same name (the right's `span_name`, or the name of its spans).
    SpanName,
    /// The fast half of that name: `below_percentile=50`; the right defaults to
    /// `above_percentile=90` when it selects no span ids and no durations.
    Fast,
    /// The whole selection without any span or trace choice.
    Service,
}

impl Baseline {
    fn parse(s: &str) -> Result<Self, BadValue> {
        match s {
            "span_name" => Ok(Baseline::SpanName),
            "fast" => Ok(Baseline::Fast),
            "service" => Ok(Baseline::Service),
            _ => Err(BadValue::Refused("expected span_name, fast or service")),
        }
    }
}

/// Percentile of a span name's durations under which spans count as fast for `baseline=fast`.
const FAST_BELOW_PERCENTILE: f64 = 50.0;
/// Percentile above which spans count as slow when `baseline=fast` is given alone.
const SLOW_ABOVE_PERCENTILE: f64 = 90.0;

/// `GET /api/v1/diff`.
pub async fn diff(
    State(queries): State<Queries>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow_scoped(
        "/api/v1/diff",
        &[SELECTION_PARAMS, &["max_nodes", "baseline"]].concat(),
        &["left.", "right."],
        SELECTION_PARAMS,
    )?;
    let max_nodes = max_nodes(&p)?;
    let baseline = p.parsed("baseline", Baseline::parse)?;
    let now = params::now_ns();
    let right = SelectionQuery::parse(&p.side("right.", SELECTION_PARAMS), now)?;
    let left = match baseline {
        Some(_) if p.has_prefix("left.") => return Err(ApiError::bad_request(
            "baseline derives the left side: give baseline or left.<param> parameters, not both",
        )),
        Some(_) => None,
        None if !p.has_prefix("left.") && !p.has_prefix("right.") => {
            return Err(ApiError::bad_request(
                "a diff needs two selections: give left.<param> and/or right.<param> \
                 parameters (shared ones apply to both), or baseline=span_name|fast|service",
            ))
        }
        None => Some(SelectionQuery::parse(
            &p.side("left.", SELECTION_PARAMS),
            now,
        )?),
    };
    if let Some(remote) = &queries.remote {
        let (left, right) = match (left, baseline) {
            (Some(left), _) => (left.selection, right.selection),
            (None, Some(b)) => {
                // Tempo finds spans by trace, not id: the name is given, not looked up.
                let name = right
                    .selection
                    .span_filter
                    .as_ref()
                    .and_then(|f| f.name.clone());
                let name =
                    match (b, name) {
                        (Baseline::Service, _) => String::new(),
                        (_, Some(n)) => n,
                        (_, None) => return Err(ApiError::bad_request(
                            "baseline over the remote backend compares against span_name: give it",
                        )),
                    };
                derive_named(right.selection, b, name)
            }
            (None, None) => unreachable!("checked before"),
        };
        return crate::remote::answers::diff(remote, &left, &right, max_nodes).await;
    }
    let body = blocking(&queries, move |store| {
        right.check_type(store)?;
        let (left, right) = match (left, baseline) {
            (Some(left), _) => {
                left.check_type(store)?;
                (left.selection, right.selection)
            }
            (None, Some(b)) => derive(store, right.selection, b)?,
            (None, None) => unreachable!("checked before"),
        };
        // Each side as /flamegraph answers it: a snapshot type (the heap in use) averaged
        // over its profiles, so that ranges holding different numbers of scrapes compare.
        let (lt, ls, la) = flame_of(store, &left)?;
        let (rt, rs, ra) = flame_of(store, &right)?;
        let (lu, ru) = (ls.used_types.first(), rs.used_types.first());
        if ls.samples_selected > 0 && rs.samples_selected > 0 && lu != ru {
            return Err(ApiError::bad_request(format!(
                "left and right select different profile types ({} and {}): give one type",
                lu.map(ToString::to_string).unwrap_or_default(),
                ru.map(ToString::to_string).unwrap_or_default(),
            )));
        }
        Ok(format!(
            "{{\"flamegraph\":{},\"tree\":{},\"left\":{},\"right\":{}}}",
            diff_layout_json(&lt, &rt, max_nodes),
            diff_tree_json_within(&lt, &rt, max_nodes),
            summary_json(&ls, la),
            summary_json(&rs, ra),
        ))
    })
    .await?;
    Ok(json_text(body))
}

/// (left, right) for a baseline of `right`.
fn derive(
    store: &Store,
    right: Selection,
    baseline: Baseline,
) -> Result<(Selection, Selection), ApiError> {
    let name = match baseline {
        Baseline::Service => String::new(),
        Baseline::SpanName | Baseline::Fast => span_name_of(store, &right)?,
    };
    Ok(derive_named(right, baseline, name))
}

/// (left, right) for a baseline of `right` whose spans are named `name`.
fn derive_named(mut right: Selection, baseline: Baseline, name: String) -> (Selection, Selection) {
    let base = Selection {
        service: right.service.clone(),
        profile_type: right.profile_type.clone(),
        from_ns: right.from_ns,
        to_ns: right.to_ns,
        label_selector: right.label_selector.clone(),
        ..Default::default()
    };
    let left = match baseline {
        Baseline::Service => base,
        Baseline::SpanName => Selection {
            span_filter: Some(SpanFilter {
                name: Some(name),
                ..Default::default()
            }),
            ..base
        },
        Baseline::Fast => {
            let picks_spans = !right.span_ids.is_empty()
                || right.span_filter.as_ref().is_some_and(|f| {
                    f.min_duration_ns.is_some()
                        || f.max_duration_ns.is_some()
                        || f.above_percentile.is_some()
                        || f.below_percentile.is_some()
                });
            if !picks_spans {
                right.span_filter = Some(SpanFilter {
                    name: Some(name.clone()),
                    above_percentile: Some(SLOW_ABOVE_PERCENTILE),
                    ..Default::default()
                });
            }
            Selection {
                span_filter: Some(SpanFilter {
                    name: Some(name),
                    below_percentile: Some(FAST_BELOW_PERCENTILE),
                    ..Default::default()
                }),
                ..base
            }
        }
    };
    (left, right)
}

/// The span name a baseline compares against: `span_name`, else the one name of the
/// selected stored spans.
fn span_name_of(store: &Store, sel: &Selection) -> Result<String, ApiError> {
    if let Some(name) = sel.span_filter.as_ref().and_then(|f| f.name.clone()) {
        return Ok(name);
    }
    let mut names = std::collections::BTreeSet::new();
    for id in &sel.span_ids {
        if let Some(span) = store.span(id)? {
            names.insert(span.name);
        }
    }
    let mut names = names.into_iter();
    match (names.next(), names.next()) {
        (Some(name), None) => Ok(name),
        (None, _) => Err(ApiError::bad_request(
            "baseline compares against a span name: give span_name, or span_id of a stored span",
        )),
        (Some(a), Some(b)) => Err(ApiError::bad_request(format!(
            "the selected spans have several names ({a:?}, {b:?}, …): give span_name"
        ))),
    }
}
