//! The selection parameters every profile endpoint shares, turned into a store [`Selection`]
//! once and checked (ids, times, label selector, span filters, profile type).

use crate::answer::type_list;
use spanprof_format::link::to_hex;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::matchers::{parse_selector, MatcherError};
use spanprof_store::store::{Selection, SpanFilter, Store};

use super::error::ApiError;
use super::params::{self, QueryParams};

/// Parameters that choose samples (see the module docs of `api::query`).
pub const SELECTION_PARAMS: &[&str] = &[
    "service",
    "type",
    "from",
    "to",
    "query",
    "span_id",
    "trace_id",
    "include_child_spans",
    "span_name",
    "min_duration",
    "max_duration",
    "above_percentile",
    "below_percentile",
];

/// Parameters that choose series (label endpoints: no span or trace selection).
pub const SERIES_PARAMS: &[&str] = &["service", "type", "from", "to", "query"];

/// A checked selection, with how the client named its `type` parameter.
#[derive(Debug, Clone)]
pub struct SelectionQuery {
    /// What the store is asked for.
    pub selection: Selection,
    /// `(name as sent, value)` of the `type` parameter, checked against the store later.
    type_param: Option<(String, String)>,
    /// The same of the `service` parameter.
    service_param: Option<(String, String)>,
    /// The `span_id` and `trace_id` parameters' names as sent (`left.trace_id` on a diff's
    /// side), for errors about their ids.
    id_names: [String; 2],
}

/// [`time_range`]'s `(from, to)` as a span query takes them: both inclusive, `to` open as
/// `u64::MAX` (`to` is exclusive in the profile endpoints).
pub fn span_range((from, to): (i64, i64)) -> (u64, u64) {
    let to = if to <= 0 { u64::MAX } else { to as u64 - 1 };
    (from.max(0) as u64, to)
}

/// `from` and `to` in ns since the Unix epoch (0 = open), checked to be in order.
pub fn time_range(p: &QueryParams, now_ns: i64) -> Result<(i64, i64), ApiError> {
    let from = p.parsed("from", params::time(now_ns))?.unwrap_or(0);
    let to = p.parsed("to", params::time(now_ns))?;
    // 0 stands for no end below: a `to` at the epoch (or before) is refused, not read so.
    if let (Some(to), Some(x)) = (to, p.one("to")?) {
        if to <= 0 {
            return Err(ApiError::bad_param(
                x.shown,
                x.value,
                "is not after 1970-01-01T00:00:00Z (leave it out for no end)",
            ));
        }
    }
    let to = to.unwrap_or(0);
    if to != 0 && from >= to {
        let shown = |n| {
            p.one(n)
                .ok()
                .flatten()
                .map_or((n, ""), |x| (x.shown, x.value))
        };
        let ((from_name, from_value), (to_name, to_value)) = (shown("from"), shown("to"));
        return Err(ApiError::bad_request(format!(
            "{from_name} {from_value:?} is not before {to_name} {to_value:?}"
        )));
    }
    Ok((from, to))
}

impl SelectionQuery {
    /// Reads every selection parameter present in `p`.
    pub fn parse(p: &QueryParams, now_ns: i64) -> Result<Self, ApiError> {
        let (from_ns, to_ns) = time_range(p, now_ns)?;
        let label_selector = match p.one("query")? {
            Some(q) => {
                // A name before `{` (a profile type, or an app name as Pyroscope's legacy
                // queries have it) would be ignored: the answer would not be what was asked.
                // The parameter is named with its value already: a syntax error says where.
                let selector = parse_selector(q.value).map_err(|e| match e {
                    MatcherError::Syntax {
                        offset_bytes,
                        reason,
                        ..
                    } => q.bad(format!("{reason} at byte {offset_bytes}")),
                    e => q.bad(e),
                })?;
                if let Some(name) = selector.profile_type {
                    return Err(q.bad(format!(
                        "give only label matchers ({{key=\"value\", …}}); the {name:?} before \
                         the braces belongs in type (a profile type) or service (a service name)"
                    )));
                }
                Some(q.value.to_owned())
            }
            None => None,
        };
        p.refuse_empty("span_id", "16 hex characters")?;
        p.refuse_empty("trace_id", "32 hex characters")?;
        p.refuse_empty("span_name", "a span name")?;
        let span_ids = p
            .many("span_id")
            .into_iter()
            .map(|x| params::span_id(x.value).map_err(|reason| x.bad(reason)))
            .collect::<Result<Vec<_>, _>>()?;
        let selection = Selection {
            service: p.one("service")?.map(|x| x.value.to_owned()),
            profile_type: p.one("type")?.map(|x| x.value.to_owned()),
            from_ns,
            to_ns,
            label_selector,
            span_ids,
            trace_id: p.parsed("trace_id", params::trace_id)?,
            include_child_spans: p
                .parsed("include_child_spans", params::boolean)?
                .unwrap_or(false),
            span_filter: span_filter(p)?,
            overlapping: false,
        };
        let shown = |name: &str| {
            p.many(name)
                .first()
                .map_or_else(|| name.to_owned(), |x| x.shown.to_owned())
        };
        Ok(SelectionQuery {
            id_names: [shown("span_id"), shown("trace_id")],
            selection,
            type_param: p
                .one("type")?
                .map(|x| (x.shown.to_owned(), x.value.to_owned())),
            service_param: p
                .one("service")?
                .map(|x| (x.shown.to_owned(), x.value.to_owned())),
        })
    }

    /// 400 when `service` names no service with profiles (unless spans or a trace are
    /// selected: then it is the spans' service), or `type` no profile type the service has
    /// (any service has, with spans or a trace selected): a typo would otherwise answer an
    /// empty graph. A store without any data answers empty instead.
    pub fn check_type(&self, store: &Store) -> Result<(), ApiError> {
        self.check_ids_known(store)?;
        let by_spans = selects_spans(&self.selection);
        if let (Some((shown, service)), false) = (&self.service_param, by_spans) {
            if store.profile_types(Some(service)).is_empty() {
                let known = store.services(0, 0);
                if !known.is_empty() {
                    return Err(ApiError::bad_param(
                        shown,
                        service,
                        format!(
                            "no profiles of this service; services with profiles: {}{}",
                            known[..known.len().min(20)].join(", "),
                            match known.len() {
                                n if n > 20 => format!(" and {} more", n - 20),
                                _ => String::new(),
                            }
                        ),
                    ));
                }
            }
        }
        // With spans or a trace selected, their samples may be stored under other services
        // (a scrape target named otherwise): their type is checked against every service's.
        let service = match by_spans {
            true => None,
            false => self.selection.service.as_deref(),
        };
        match &self.type_param {
            None => Ok(()),
            Some((shown, wanted)) => check_profile_type(store, service, shown, wanted),
        }
    }
}

impl SelectionQuery {
    /// 404 when spans or a trace are selected by ids no stored span and no sample has
    /// ([`SelectionQuery::check_type`] checks it, and more).
    pub fn check_ids_known(&self, store: &Store) -> Result<(), ApiError> {
        self.check_spans_known(store)?;
        self.check_trace_known(store)
    }

    /// 404 when spans are selected by id and none of them is known: no stored span and no
    /// sample has any of the ids (a typo, or an id copied short). Answered empty, it read as
    /// "this span used no CPU". A span that is stored, or has samples in another time range,
    /// answers empty as it should.
    fn check_spans_known(&self, store: &Store) -> Result<(), ApiError> {
        let sel = &self.selection;
        if sel.span_ids.is_empty() || sel.trace_id.is_some() || sel.span_filter.is_some() {
            return Ok(());
        }
        for &id in &sel.span_ids {
            let of_id = Selection {
                span_ids: vec![id],
                ..Default::default()
            };
            // Samples first: an index lookup, where a span record may decode a whole
            // segment's spans.
            if store.profile_times(&of_id)? > 0 || store.span(&id)?.is_some() {
                return Ok(());
            }
        }
        let ids: Vec<String> = sel.span_ids.iter().map(|id| to_hex(id)).collect();
        Err(ApiError::not_found(format!(
            "{} {}: no stored span and no sample has this id (span ids are the 16 hex \
             characters of the span's own id, as /api/v1/spans lists them)",
            self.id_names[0],
            ids.join(", ")
        )))
    }
}

impl SelectionQuery {
    /// 404 when a trace is selected by id that no stored span and no sample has, as for span
    /// ids: answered empty (and `go tool pprof` printed an empty profile), a mistyped id read
    /// as a trace that used no CPU.
    fn check_trace_known(&self, store: &Store) -> Result<(), ApiError> {
        let Some(id) = self.selection.trace_id else {
            return Ok(());
        };
        let of_id = Selection {
            trace_id: Some(id),
            ..Default::default()
        };
        if !store.trace(&id)?.is_empty() || store.profile_times(&of_id)? > 0 {
            return Ok(());
        }
        Err(ApiError::not_found(format!(
            "{} {}: no stored span and no sample has this id (trace ids are 32 hex \
             characters, as /api/v1/spans lists them)",
            self.id_names[1],
            to_hex(&id)
        )))
    }
}

/// Whether `sel` picks spans or a trace (ids, or a span filter): their samples, not a
/// service's.
pub fn selects_spans(sel: &Selection) -> bool {
    !sel.span_ids.is_empty() || sel.span_filter.is_some() || sel.trace_id.is_some()
}

/// 400 when `wanted` (parameter `shown`) names no profile type of `service` (`None` = of any
/// service); a store without any data answers empty instead.
pub fn check_profile_type(
    store: &Store,
    service: Option<&str>,
    shown: &str,
    wanted: &str,
) -> Result<(), ApiError> {
    let types = store.profile_types(service);
    let of = service.map_or_else(String::new, |s| format!(" of service {s:?}"));
    let matching: Vec<ProfileTypeId> = types
        .iter()
        .filter(|t| t.matches(wanted))
        .cloned()
        .collect();
    // Several types match: a name covering CPU (or wall-clock) time and its sample count
    // means the time (`process_cpu`, `wall`); any other choice (`memory`, `delay:nanoseconds`
    // of mutex and block) would be a guess the answer does not show.
    let best = ProfileTypeId::preferred(&matching).map(ProfileTypeId::default_rank);
    let at_best = |rank: u8| matching.iter().filter(|t| t.default_rank() == rank).count();
    if matching.len() > 1 && !best.is_some_and(|rank| rank < 3 && at_best(rank) == 1) {
        return Err(ApiError::bad_param(
            shown,
            wanted,
            format!(
                "names {} profile types{of}: {}; give one of them",
                matching.len(),
                type_list(&matching)
            ),
        ));
    }
    if types.is_empty() || !matching.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_param(
        shown,
        wanted,
        format!("no such profile type{of}; available: {}", type_list(&types)),
    ))
}

/// 400 when `min_duration` is longer than `max_duration` (both read from `p`).
pub fn durations_in_order(
    p: &QueryParams,
    min: Option<u64>,
    max: Option<u64>,
) -> Result<(), ApiError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => {
            let x = p.one("min_duration")?.expect("parsed above");
            Err(x.bad("is longer than max_duration"))
        }
        _ => Ok(()),
    }
}

fn span_filter(p: &QueryParams) -> Result<Option<SpanFilter>, ApiError> {
    let f = SpanFilter {
        name: p.one("span_name")?.map(|x| x.value.to_owned()),
        min_duration_ns: p.parsed("min_duration", params::duration)?,
        max_duration_ns: p.parsed("max_duration", params::duration)?,
        above_percentile: p.parsed("above_percentile", params::percentile)?,
        below_percentile: p.parsed("below_percentile", params::percentile)?,
    };
    if f.name.is_none() {
        // Percentiles are of the durations of one span name.
        for name in ["above_percentile", "below_percentile"] {
            if let Some(x) = p.one(name)? {
                return Err(x.bad("needs span_name: percentiles are of one span name's durations"));
            }
        }
    }
    durations_in_order(p, f.min_duration_ns, f.max_duration_ns)?;
    let any = f.name.is_some()
        || f.min_duration_ns.is_some()
        || f.max_duration_ns.is_some()
        || f.above_percentile.is_some()
        || f.below_percentile.is_some();
    Ok(any.then_some(f))
}
