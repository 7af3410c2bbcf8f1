//! The `focus` parameter of a span's flame graph: this span only, with its child spans,
//! everything its process ran during its time, or the whole profile windows around it.

use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_store::spans::SpanQuery;
use spanprof_store::store::{Selection, Store};

use super::error::ApiError;
use super::params::QueryParams;

/// Most spans the `during` focus selects: far above the requests one process runs at once.
pub const MAX_DURING_SPANS: usize = 10_000;

/// What a span's flame graph holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The span's own samples.
    Span,
    /// The span's and its descendants'.
    Children,
    /// The samples of every span of its service that ran while it ran.
    During,
    /// Everything the profile windows that overlap the span recorded of its process.
    Window,
}

/// The profile endpoints' parameter name.
pub const FOCUS_PARAM: &str = "focus";

/// Reads `focus`: it needs exactly one `span_id`, and neither a trace, span filters nor
/// `include_child_spans` (the focus says it).
pub fn parse(p: &QueryParams) -> Result<Option<Focus>, ApiError> {
    let Some(x) = p.one(FOCUS_PARAM)? else {
        return Ok(None);
    };
    let focus = match x.value {
        "span" => Focus::Span,
        "children" => Focus::Children,
        "during" => Focus::During,
        "window" => Focus::Window,
        _ => return Err(x.bad("expected span, children, during or window")),
    };
    if p.many("span_id").len() != 1 {
        return Err(x.bad("needs exactly one span_id"));
    }
    for other in [
        "trace_id",
        "include_child_spans",
        "span_name",
        "min_duration",
        "max_duration",
        "above_percentile",
        "below_percentile",
        "from",
        "to",
    ] {
        if p.one(other)?.is_some() {
            return Err(x.bad(format!("chooses the samples itself: leave out {other}")));
        }
    }
    Ok(Some(focus))
}

/// Turns `sel` (one span id) into the selection `focus` names, and says what it holds:
/// `{"mode", "holds", "spans"?, "truncated"?, "from_ns"?, "to_ns"?}`.
pub fn apply(focus: Focus, sel: &mut Selection, store: &Store) -> Result<Value, ApiError> {
    let id = sel.span_ids[0];
    let hex = to_hex(&id);
    match focus {
        Focus::Span => Ok(json!({"mode": "span",
            "holds": format!("the samples of span {hex} only (its child spans' are theirs)")})),
        Focus::Children => {
            sel.include_child_spans = true;
            Ok(json!({"mode": "children",
                "holds": format!("the samples of span {hex} and of its descendants")}))
        }
        Focus::During | Focus::Window => {
            let span = store.span(&id)?.ok_or_else(|| {
                ApiError::not_found(format!(
                    "span {hex} is not stored: its time, which this focus needs, is unknown"
                ))
            })?;
            if focus == Focus::During {
                during(sel, store, &span)
            } else {
                window(sel, store, &span)
            }
        }
    }
}

fn during(
    sel: &mut Selection,
    store: &Store,
    span: &spanprof_store::spans::SpanRecord,
) -> Result<Value, ApiError> {
    let found = store.search_spans(&SpanQuery {
        service: Some(span.service.clone()),
        from_ns: span.start_ns,
        to_ns: span.end_ns,
        limit: MAX_DURING_SPANS,
        ..SpanQuery::default()
    })?;
    let truncated = found.len() >= MAX_DURING_SPANS;
    let mut ids: Vec<[u8; 8]> = found.iter().map(|s| s.span_id).collect();
    if !ids.contains(&span.span_id) {
        ids.push(span.span_id);
    }
    let n = ids.len();
    sel.span_ids = ids;
    Ok(json!({
        "mode": "during",
        "holds": format!(
            "the samples of the {n} spans of {} that ran while span {} ran (it, its \
             children, its siblings and other requests), each span's whole samples even where \
             it ran longer; samples linked to no span are in focus=window",
            span.service, to_hex(&span.span_id)),
        "spans": n,
        "truncated": truncated,
    }))
}

fn window(
    sel: &mut Selection,
    store: &Store,
    span: &spanprof_store::spans::SpanRecord,
) -> Result<Value, ApiError> {
    let w = store.span_windows(span, sel.profile_type.as_deref())?;
    let service = w
        .services
        .first()
        .cloned()
        .unwrap_or_else(|| span.service.clone());
    sel.span_ids.clear();
    sel.include_child_spans = false;
    sel.service = Some(service.clone());
    // Profiles counted at their start: exactly the windows that begin in this range.
    let (from, to) = match (w.windows.first(), w.windows.last()) {
        (Some(first), Some(last)) => (first.0, last.0.saturating_add(1)),
        // No window: an empty range at the span's start.
        _ => {
            let at = i64::try_from(span.start_ns).unwrap_or(i64::MAX - 1);
            (at, at.saturating_add(1))
        }
    };
    sel.from_ns = from;
    sel.to_ns = to;
    Ok(json!({
        "mode": "window",
        "holds": format!(
            "everything {service}'s {} profile window{} around span {} recorded: every \
             request, and work linked to no span",
            w.windows.len(), if w.windows.len() == 1 { "" } else { "s" }, to_hex(&span.span_id)),
        "windows": w.windows.len(),
        "from_ns": from.to_string(),
        "to_ns": to.to_string(),
    }))
}
