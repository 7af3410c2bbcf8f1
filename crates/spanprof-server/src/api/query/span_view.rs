//! `GET /api/v1/spans/{span_id}`: one span with its coverage and how many of the profile
//! windows that watched it are stored, so a span view can say "partial: 2 of 3 windows in"
//! and ask again until the rest arrive or can no longer arrive.

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_store::store::SpanWindows;

use super::error::{blocking, ApiError};
use super::params::{self, QueryParams};
use super::spans::{type_param, CoverageOf, NOT_PROFILED, PENDING, PENDING_FOR_NS};
use crate::api::Queries;

/// How late after its window ends a profile still counts as coming, ns: a scrape is stored
/// when its window ends, a push SDK's upload some seconds after.
const ARRIVAL_GRACE_NS: i64 = 30_000_000_000;

/// Where a span's windows stand, for [`window_state`].
#[derive(Debug, Clone, PartialEq)]
pub struct WindowState {
    /// `complete`, `partial`, `pending`, `closed` or `none` (see `docs/api/spanprof.md`).
    pub state: &'static str,
    /// Windows stored that overlap the span.
    pub stored: usize,
    /// Windows that watched (or will watch) the span, when known.
    pub expected: Option<usize>,
    /// Whether asking again may find more.
    pub more_may_come: bool,
    /// When the last window the span needs ends, ns since the epoch, when one is missing.
    pub expected_by_ns: Option<i64>,
}

/// The state of `w`'s windows for a span of `[start_ns, end_ns)` at `now_ns`; `recorded`:
/// the span is of a recording (the demo), to which nothing more arrives; `profiled`: its
/// service has profiles of any time.
pub fn window_state(
    (start_ns, end_ns): (i64, i64),
    w: &SpanWindows,
    now_ns: i64,
    recorded: bool,
    profiled: bool,
) -> WindowState {
    let stored = w.windows.len();
    let Some(newest_end) = w.newest_end_ns else {
        // No window from the span's start on: pending while a profiled service may still
        // send the one of its time, else no profile watched it.
        let more = !recorded && profiled && now_ns < end_ns.saturating_add(PENDING_FOR_NS as i64);
        return WindowState {
            state: if more { "pending" } else { "none" },
            stored: 0,
            expected: None,
            more_may_come: more,
            expected_by_ns: None,
        };
    };
    if newest_end >= end_ns {
        return WindowState {
            state: "complete",
            stored,
            expected: Some(stored),
            more_may_come: false,
            expected_by_ns: None,
        };
    }
    // Windows of the span's time not stored yet: one a window length from the newest end.
    let from = newest_end.max(start_ns);
    let step = w.window_ns.max(1);
    let missing =
        (end_ns - from).div_euclid(step) as usize + usize::from((end_ns - from) % step != 0);
    let missing = missing.max(1);
    let expected_by = from.saturating_add(step.saturating_mul(missing as i64));
    // The process still sends while its next window is not overdue.
    let still_sends = now_ns
        < newest_end
            .saturating_add(step)
            .saturating_add(ARRIVAL_GRACE_NS);
    let more =
        !recorded && still_sends && now_ns < expected_by.saturating_add(PENDING_FOR_NS as i64);
    let state = match (more, stored) {
        (false, _) => "closed",
        (true, 0) => "pending",
        (true, _) => "partial",
    };
    WindowState {
        state,
        stored,
        expected: Some(stored + missing),
        more_may_come: more,
        expected_by_ns: Some(expected_by),
    }
}

/// `GET /api/v1/spans/{span_id}?type`.
pub async fn span(
    State(queries): State<Queries>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let p = QueryParams::parse(raw.as_deref())?;
    p.allow("/api/v1/spans/{span_id}", &["type", "trace_id"])?;
    let span_id = params::span_id(&id).map_err(|r| ApiError::bad_param("span_id", &id, r))?;
    let profile_type = type_param(&p)?;
    if let Some(remote) = &queries.remote {
        // Tempo finds a span by its trace: the UI names it (`trace_id`).
        let trace = p.parsed("trace_id", params::trace_id)?;
        let wanted = profile_type.as_ref().map(|(_, w)| w.as_str());
        let body = crate::remote::views::span(remote, span_id, trace, wanted).await?;
        return Ok(axum::Json(body).into_response());
    }
    let unlinked_keys = queries.span_keys.found();
    let demo = queries.config.demo;
    let body = blocking(&queries, move |store| {
        let Some(record) = store.span(&span_id)? else {
            return Err(ApiError::not_found(format!(
                "span {}: it is not stored (its samples, if any, are at \
                 /api/v1/flamegraph?span_id={})",
                to_hex(&span_id),
                to_hex(&span_id)
            )));
        };
        let wanted = profile_type.as_ref().map(|(_, w)| w.clone());
        let coverage = CoverageOf::new(store, profile_type, unlinked_keys)?;
        let mut span = coverage
            .spans_json(store, std::slice::from_ref(&record))?
            .pop()
            .unwrap_or_default();
        let windows = store.span_windows(&record, wanted.as_deref())?;
        let recorded = demo && record.service == crate::demo::SERVICE;
        let profiled = windows
            .services
            .iter()
            .any(|s| !store.profile_types(Some(s)).is_empty());
        let range = (
            i64::try_from(record.start_ns).unwrap_or(i64::MAX),
            i64::try_from(record.end_ns).unwrap_or(i64::MAX),
        );
        let now = crate::clock::now_ns();
        let st = window_state(range, &windows, now, recorded, profiled);
        // "Not received yet" only while one may come (not for a recording's last spans).
        if !st.more_may_come && span.get("coverage").is_some_and(|c| c == PENDING) {
            span.insert("coverage".into(), NOT_PROFILED.into());
        }
        // Ask again about when the next window is due, between 1 and 5 s.
        let retry_after_ms = st.more_may_come.then(|| {
            let due = st
                .expected_by_ns
                .map_or(0, |by| by.saturating_sub(now) / 1_000_000);
            due.clamp(1_000, 5_000)
        });
        Ok(json!({
            "span": Value::Object(span),
            "windows": {
                "state": st.state,
                "in": st.stored,
                "expected": st.expected,
                "more_may_come": st.more_may_come,
                "expected_by_ns": st.expected_by_ns.map(|n| n.to_string()),
                "recorded": recorded,
                "services": windows.services,
                "profile_type": windows.profile_type.as_ref().map(ToString::to_string),
                "window_ns": windows.window_ns,
                "windows": windows.windows.iter().map(|(t, d)| json!({
                    "start_ns": t.to_string(),
                    "duration_ns": d,
                })).collect::<Vec<_>>(),
            },
            "retry_after_ms": retry_after_ms,
        }))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn windows(list: &[(i64, i64)], newest_end: Option<i64>) -> SpanWindows {
        SpanWindows {
            windows: list.to_vec(),
            newest_end_ns: newest_end,
            window_ns: list.iter().map(|w| w.1).max().unwrap_or(0),
            ..Default::default()
        }
    }

    #[test]
    fn a_long_span_in_an_open_window_is_partial_until_its_last_window_comes() {
        // A span of 100–140 s; 15 s windows stored up to 120 s; now 125 s.
        let w = windows(&[(90 * S, 15 * S), (105 * S, 15 * S)], Some(120 * S));
        let st = window_state((100 * S, 140 * S), &w, 125 * S, false, true);
        assert_eq!(st.state, "partial");
        assert_eq!((st.stored, st.expected), (2, Some(4)));
        assert!(st.more_may_come);
        assert_eq!(st.expected_by_ns, Some(150 * S));
        // Once every window is in, it is complete.
        let w = windows(
            &[
                (90 * S, 15 * S),
                (105 * S, 15 * S),
                (120 * S, 15 * S),
                (135 * S, 15 * S),
            ],
            Some(150 * S),
        );
        let st = window_state((100 * S, 140 * S), &w, 151 * S, false, true);
        assert_eq!(
            (st.state, st.stored, st.expected, st.more_may_come),
            ("complete", 4, Some(4), false)
        );
    }

    #[test]
    fn windows_that_never_came_close_and_a_recording_promises_nothing() {
        let w = windows(&[(90 * S, 15 * S)], Some(105 * S));
        // The process stopped: its next window is long overdue.
        let st = window_state((100 * S, 110 * S), &w, 300 * S, false, true);
        assert_eq!((st.state, st.more_may_come), ("closed", false));
        // A recording's missing window is not awaited, however recent.
        let st = window_state((100 * S, 110 * S), &w, 106 * S, true, true);
        assert_eq!((st.state, st.more_may_come), ("closed", false));
        // Nothing yet of a profiled service: pending, then none after the wait.
        let none = windows(&[], None);
        assert_eq!(
            window_state((100 * S, 110 * S), &none, 111 * S, false, true).state,
            "pending"
        );
        assert_eq!(
            window_state((100 * S, 110 * S), &none, 400 * S, false, true).state,
            "none"
        );
        assert_eq!(
            window_state((100 * S, 110 * S), &none, 111 * S, false, false).state,
            "none"
        );
    }
}
