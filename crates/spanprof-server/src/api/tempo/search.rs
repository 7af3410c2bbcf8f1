//! Trace search (`/api/search`): Tempo's tag and logfmt parameters parsed into a span query,
//! and the matching traces summarised as Tempo lists them.

use std::ops::ControlFlow;

use axum::extract::{Query, State};
use axum::response::Response;
// foldhash, not std's SipHash: searches key maps by the trace id of every span of a range.
use hashbrown::{HashMap, HashSet};
use serde_json::{json, Value};
use spanprof_format::link::to_hex;
use spanprof_store::spans::{
    kind_name, status_name, CompareOp, SpanQuery, SpanRecord, TextCondition, TextField,
};
use spanprof_store::store::Store;
use spanprof_store::time::parse_duration;

use super::{blocking, json_value, traceql, Params};
use crate::api::query::ApiError;
use crate::api::Queries;

/// Tempo's default number of traces a search returns.
const DEFAULT_LIMIT: usize = 20;
/// Most traces (`limit`) and matched spans per trace (`spss`) a search may ask for: a
/// search of a million-span trace with `spss=1000000` was a 294 MB answer built in 4.4 GB.
const MAX_LIMIT: usize = 10_000;
const MAX_SPSS: usize = 1_000;

/// Tempo's default number of matched spans shown per trace (`spss`).
const DEFAULT_SPSS: usize = 3;
/// Tempo's `rootServiceName` when no root span is stored (`rootTraceName` stays empty).
const NO_ROOT: &str = "<root span not yet received>";

/// What a tag name refers to.
pub(super) enum Tag {
    Service,
    Name,
    Status,
    StatusMessage,
    Kind,
    /// The name of the trace's root span.
    RootName,
    /// The service of the trace's root span.
    RootService,
    /// A span attribute (`span.x`).
    Attribute(String),
    /// An attribute of the span's resource (`resource.x`).
    Resource(String),
    /// Either (`.x`, or `x` with no scope), the span's first.
    Either(String),
}

impl Tag {
    /// The span text the tag names, and whether it is the trace's root span's.
    pub(super) fn field(self) -> (TextField, bool) {
        match self {
            Tag::Service => (TextField::Service, false),
            Tag::Name => (TextField::Name, false),
            Tag::Status => (TextField::Status, false),
            Tag::StatusMessage => (TextField::StatusMessage, false),
            Tag::Kind => (TextField::Kind, false),
            Tag::RootName => (TextField::Name, true),
            Tag::RootService => (TextField::Service, true),
            Tag::Resource(k) => (TextField::Resource(k), false),
            Tag::Attribute(k) => (TextField::Attribute(k), false),
            Tag::Either(k) => (TextField::Either(k), false),
        }
    }
}

pub(super) fn tag_of(name: &str) -> Tag {
    match name {
        "service.name" | "resource.service.name" | ".service.name" => Tag::Service,
        "name" | "span:name" => Tag::Name,
        "status" | "span:status" | "status.code" => Tag::Status,
        "kind" | "span:kind" => Tag::Kind,
        "statusMessage" | "span:statusMessage" => Tag::StatusMessage,
        "rootName" | "trace:rootName" => Tag::RootName,
        "rootServiceName" | "trace:rootService" => Tag::RootService,
        other => match (other.strip_prefix("resource."), other.strip_prefix("span.")) {
            (Some(k), _) => Tag::Resource(k.to_owned()),
            (_, Some(k)) => Tag::Attribute(k.to_owned()),
            _ => Tag::Either(other.strip_prefix('.').unwrap_or(other).to_owned()),
        },
    }
}

/// What one span must match.
#[derive(Debug, Default, Clone)]
pub(super) struct SpanFilter {
    service: Option<String>,
    name: Option<String>,
    status: Option<i32>,
    attributes: Vec<(String, String)>,
    /// Of the span's resource (`resource.host.name`).
    resource: Vec<(String, String)>,
    /// Of the span or its resource (`.host.name`, and a tag without a scope).
    either: Vec<(String, String)>,
    /// TraceQL's other comparisons (`name =~ "GET .*"`, `span.http.route != "/health"`,
    /// `kind = server`, `span.http.response.status_code >= 500`).
    conditions: Vec<TextCondition>,
    /// What the trace's root span must pass (`rootName`, `rootServiceName`): a trace whose
    /// root is not stored passes none.
    pub(super) root: Vec<TextCondition>,
    /// The span's duration bounds in ns (inclusive; TraceQL's `duration`).
    pub(super) min_ns: Option<u64>,
    pub(super) max_ns: Option<u64>,
    /// The tags as given, echoed on matched spans: the value a tag equals, or for another
    /// comparison what it compares (the span's value is shown).
    shown: Vec<(String, Shown)>,
}

/// What a search result shows for one tag of the search.
#[derive(Debug, Clone)]
enum Shown {
    /// The value every matched span has (the tag's `=`).
    Value(String),
    /// The span's own value of this field.
    Field(TextField),
}

#[derive(Debug, Clone)]
struct SearchRequest {
    filter: SpanFilter,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
    from_ns: u64,
    to_ns: u64,
    limit: usize,
    spss: usize,
}

const SEARCH_PARAMS: &[&str] = &[
    "tags",
    "minDuration",
    "maxDuration",
    "limit",
    "start",
    "end",
    "spss",
    "q",
];

// Long: Tempo's search parameters one after another, each refused with its own message.
#[allow(clippy::too_many_lines)]
fn parse_search(params: &[(String, String)]) -> Result<SearchRequest, ApiError> {
    let get = |name: &str| {
        params
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    };
    let mut tags: Vec<(String, CompareOp, String)> = Vec::new();
    match get("tags") {
        Some(text) => {
            for (k, v) in parse_logfmt(text).map_err(|e| ApiError::bad_param("tags", text, e))? {
                if tags.iter().any(|(seen, _, _)| *seen == k) {
                    return Err(ApiError::bad_param(
                        "tags",
                        text,
                        format!("tag {k} has been set twice"),
                    ));
                }
                tags.push((k, CompareOp::Eq, v));
            }
        }
        // Tempo's legacy form: every other parameter is a tag.
        None => {
            for (k, v) in params {
                if !SEARCH_PARAMS.contains(&k.as_str())
                    && !v.is_empty()
                    && !tags.iter().any(|(seen, _, _)| seen == k)
                {
                    tags.push((k.clone(), CompareOp::Eq, v.clone()));
                }
            }
        }
    }
    let traceql = match get("q") {
        Some(q) => traceql::parse(q).map_err(|e| ApiError::bad_param("q", q, e))?,
        None => traceql::Query::default(),
    };
    let given = tags.len();
    for (k, op, v) in traceql.tags {
        if tags[..given].iter().any(|(seen, _, _)| *seen == k) {
            return Err(ApiError::bad_request(format!(
                "{k} is given both in tags and in q"
            )));
        }
        tags.push((k, op, v));
    }
    let mut filter = span_filter(tags)?;
    (filter.min_ns, filter.max_ns) = (traceql.span_min_ns, traceql.span_max_ns);
    let duration = |name: &str| -> Result<Option<u64>, ApiError> {
        get(name)
            .map(|v| parse_duration(v).map_err(|e| ApiError::bad_param(name, v, e)))
            .transpose()
    };
    // minDuration and maxDuration bound the trace, as q's traceDuration does: the tighter.
    let tighter = |a: Option<u64>, b: Option<u64>, pick: fn(u64, u64) -> u64| match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    };
    let min_ns = tighter(duration("minDuration")?, traceql.trace_min_ns, u64::max);
    let max_ns = tighter(duration("maxDuration")?, traceql.trace_max_ns, u64::min);
    if let (Some(min), Some(max)) = (min_ns, max_ns) {
        if min > max {
            return Err(ApiError::bad_request(
                "the trace's longest duration (maxDuration, or traceDuration in q) must not be \
                 below its shortest (minDuration, or traceDuration)",
            ));
        }
    }
    let count = |name: &str, default: usize, max: usize| -> Result<usize, ApiError> {
        match get(name) {
            None => Ok(default),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::bad_param(
                    name,
                    v,
                    format!("must be a whole number from 1 to {max}"),
                )),
            },
        }
    };
    let seconds = |name: &str| -> Result<Option<u64>, ApiError> {
        get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_param(name, v, "expected unix seconds"))
            })
            .transpose()
    };
    let (start, end) = (seconds("start")?, seconds("end")?);
    if let (Some(s), Some(e)) = (start, end) {
        if e < s {
            return Err(ApiError::bad_request(format!(
                "start {s} must not be after end {e}"
            )));
        }
    }
    Ok(SearchRequest {
        filter,
        min_ns,
        max_ns,
        from_ns: start.map_or(0, |s| s.saturating_mul(1_000_000_000)),
        to_ns: end.map_or(u64::MAX, |e| {
            e.saturating_add(1).saturating_mul(1_000_000_000) - 1
        }),
        limit: count("limit", DEFAULT_LIMIT, MAX_LIMIT)?,
        spss: count("spss", DEFAULT_SPSS, MAX_SPSS)?,
    })
}

fn span_filter(tags: Vec<(String, CompareOp, String)>) -> Result<SpanFilter, ApiError> {
    let mut f = SpanFilter::default();
    for (key, op, value) in tags {
        f.add(key, op, value)?;
    }
    Ok(f)
}

impl SpanFilter {
    /// The spans of `[from_ns, to_ns]` that pass the filter (all but its `root` conditions,
    /// which a trace's root decides).
    pub(super) fn span_query(&self, from_ns: u64, to_ns: u64) -> SpanQuery {
        SpanQuery {
            service: self.service.clone(),
            name: self.name.clone(),
            from_ns,
            to_ns,
            attributes: self.attributes.clone(),
            resource: self.resource.clone(),
            either: self.either.clone(),
            min_duration_ns: self.min_ns,
            max_duration_ns: self.max_ns,
            status_code: self.status,
            conditions: self.conditions.clone(),
            ..Default::default()
        }
    }

    /// Adds the tag `key op value`; one that fails adds nothing.
    pub(super) fn add(
        &mut self,
        key: String,
        op: CompareOp,
        value: String,
    ) -> Result<(), ApiError> {
        // `span.name` is the span's name here too, as Tempo's legacy tags have it.
        let tag = if key == "span.name" {
            Tag::Name
        } else {
            tag_of(&key)
        };
        let (field, of_root) = tag.field();
        let attribute = matches!(
            field,
            TextField::Attribute(_) | TextField::Resource(_) | TextField::Either(_)
        );
        if op.text_op().is_none() && !attribute {
            return Err(ApiError::bad_request(format!(
                "{key} {op} {value:?}: {key} is compared with =, !=, =~ or !~ (not {op}); >, >=, < \
                 and <= compare numbers, of attributes"
            )));
        }
        // A status or kind is compared by its name, whichever way it was given (2,
        // STATUS_CODE_ERROR, SPAN_KIND_SERVER).
        let code = match (&field, op) {
            (TextField::Status, CompareOp::Eq | CompareOp::Ne) => Some(
                crate::api::query::params::status(&value)
                    .map_err(|why| ApiError::bad_param(&key, &value, &why))?,
            ),
            (TextField::Kind, CompareOp::Eq | CompareOp::Ne) => Some(
                crate::api::query::params::kind(&value)
                    .map_err(|why| ApiError::bad_param(&key, &value, &why))?,
            ),
            _ => None,
        };
        let value = match (&field, code) {
            (TextField::Status, Some(c)) => status_name(c).to_owned(),
            (TextField::Kind, Some(c)) => kind_name(c).to_owned(),
            _ => value,
        };
        let condition = || {
            TextCondition::new(field.clone(), op, &value)
                .map_err(|e| ApiError::bad_param(&key, &value, e))
        };
        if of_root {
            self.root.push(condition()?);
            return Ok(());
        }
        if op != CompareOp::Eq || matches!(field, TextField::Kind | TextField::StatusMessage) {
            self.conditions.push(condition()?);
            let shown = match op {
                CompareOp::Eq => Shown::Value(value.clone()),
                _ => Shown::Field(field.clone()),
            };
            self.shown.push((key, shown));
            return Ok(());
        }
        self.shown.push((key, Shown::Value(value.clone())));
        match field {
            TextField::Service => self.service = Some(value),
            TextField::Name => self.name = Some(value),
            TextField::Status => self.status = code,
            TextField::Resource(k) => self.resource.push((k, value)),
            TextField::Attribute(k) => self.attributes.push((k, value)),
            TextField::Either(k) => self.either.push((k, value)),
            TextField::Kind | TextField::StatusMessage => unreachable!("taken as conditions above"),
        }
        Ok(())
    }
}

/// Decodes logfmt `key=value key2="quoted value"` pairs (a bare key has an empty value).
fn parse_logfmt(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            if c == '"' {
                return Err(format!("unexpected '\"' in key {key:?}"));
            }
            key.push(c);
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'=') {
            chars.next();
            if chars.peek() == Some(&'"') {
                chars.next();
                let mut closed = false;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next() {
                            Some('n') => value.push('\n'),
                            Some('t') => value.push('\t'),
                            Some(other) => value.push(other),
                            None => break,
                        },
                        c => value.push(c),
                    }
                }
                if !closed {
                    return Err(format!("unterminated quoted value of {key}"));
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    if c == '"' {
                        return Err(format!("unexpected '\"' in value of {key}"));
                    }
                    value.push(c);
                    chars.next();
                }
            }
        }
        if key.is_empty() {
            return Err("a value without a key".to_owned());
        }
        out.push((key, value));
    }
}

/// One trace found.
struct Found {
    trace_id: [u8; 16],
    root_service: String,
    root_name: String,
    start_ns: u64,
    duration_ns: u64,
    matched: Vec<SpanRecord>,
}

pub(super) async fn search(
    State(queries): State<Queries>,
    Query(params): Params,
) -> Result<Response, ApiError> {
    let req = parse_search(&params)?;
    let r = req.clone();
    let (found, inspected) = blocking(&queries, move |store| run_search(store, &r)).await?;
    let traces: Vec<Value> = found.iter().map(|t| search_result(t, &req)).collect();
    Ok(json_value(json!({
        "traces": traces,
        "metrics": {
            "inspectedTraces": inspected,
            "inspectedBytes": "0",
            "completedJobs": 1,
            "totalJobs": 1,
        },
    })))
}

fn run_search(store: &Store, req: &SearchRequest) -> Result<(Vec<Found>, usize), ApiError> {
    let query = req.filter.span_query(req.from_ns, req.to_ns);
    // Per trace, the start of its first matching span; the spans themselves are read again
    // from the traces shown (keeping every matching span took 1.35 GB for 800,000 traces).
    let mut first_match: HashMap<[u8; 16], u64> = HashMap::new();
    // With root conditions, the traces with a root span (no parent) in the range's segments
    // that passes them, from the same pass: a candidate whose spans all lie there and that
    // is not one of them fails without being read whole (each candidate was read:
    // `{rootName="nope"}` over 100,000 traces took 217 ms).
    let root = &req.filter.root;
    let mut passing_root: HashSet<[u8; 16]> = HashSet::new();
    // Every span of the range's segments (a span sent twice counts once all the same).
    store.for_each_segment_span(&query, |s| {
        if query.matches_view(s) {
            let start = first_match.entry(s.trace_id).or_insert(s.start_ns);
            *start = (*start).min(s.start_ns);
        }
        if !root.is_empty() && s.parent_span_id.is_none() && root.iter().all(|c| c.holds(s)) {
            passing_root.insert(s.trace_id);
        }
        ControlFlow::Continue(())
    })?;
    // With a duration bound, each matching trace's extent from one more pass over the spans
    // of the time range's segments: reading every candidate trace whole to check it took
    // seconds (800,000 traces none of which passed: 4.9 s).
    let bounded = req.min_ns.is_some() || req.max_ns.is_some();
    let mut extents: HashMap<[u8; 16], (u64, u64)> = HashMap::new();
    if bounded {
        store.for_each_segment_span(&query, |s| {
            if first_match.contains_key(&s.trace_id) {
                let e = extents.entry(s.trace_id).or_insert((s.start_ns, s.end_ns));
                *e = (e.0.min(s.start_ns), e.1.max(s.end_ns));
            }
            ControlFlow::Continue(())
        })?;
    }
    let outside_bounds = |(start, end): (u64, u64)| {
        let duration = end.saturating_sub(start);
        req.min_ns.is_some_and(|min| duration < min) || req.max_ns.is_some_and(|max| duration > max)
    };
    // Newest first by their first matching span (a trace's start when its root matches; a
    // trace never starts after its spans), and only until `limit` pass.
    let mut candidates: Vec<([u8; 16], u64)> = first_match.into_iter().collect();
    candidates.sort_unstable_by(|(ta, a), (tb, b)| b.cmp(a).then(ta.cmp(tb)));
    let mut found = Vec::new();
    let mut inspected = 0;
    for (trace_id, _) in candidates {
        if found.len() >= req.limit {
            break;
        }
        inspected += 1;
        // The extent as the time range's segments have it is the trace's unless a segment
        // outside the range may hold more of it: then the whole trace decides, below.
        if let Some(&extent) = extents.get(&trace_id) {
            if outside_bounds(extent) && !store.trace_may_be_outside(&trace_id, &query) {
                continue;
            }
        }
        // Its root, whichever span of it that is, cannot pass (read whole, below, it would
        // fail the same).
        if !root.is_empty()
            && !passing_root.contains(&trace_id)
            && !store.trace_may_be_outside(&trace_id, &query)
        {
            continue;
        }
        let whole = store.trace(&trace_id)?;
        let start_ns = whole.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let end_ns = whole.iter().map(|s| s.end_ns).max().unwrap_or(0);
        if outside_bounds((start_ns, end_ns)) {
            continue;
        }
        // Like Tempo: the root is the span without a parent.
        let root = whole.iter().find(|s| s.parent_span_id.is_none());
        let root_passes = |c: &TextCondition| root.is_some_and(|r| c.holds(&r.view()));
        if !req.filter.root.iter().all(root_passes) {
            continue;
        }
        let mut matched: Vec<SpanRecord> = whole
            .iter()
            .filter(|s| query.matches_view(&s.view()))
            .cloned()
            .collect();
        matched.sort_by_key(|s| (s.start_ns, s.span_id));
        found.push(Found {
            trace_id,
            root_service: root.map_or(NO_ROOT.to_owned(), |r| r.service.clone()),
            root_name: root.map_or(String::new(), |r| r.name.clone()),
            start_ns,
            duration_ns: end_ns.saturating_sub(start_ns),
            matched,
        });
    }
    // Tempo keeps the most recent traces.
    found.sort_by(|a, b| {
        b.start_ns
            .cmp(&a.start_ns)
            .then(a.trace_id.cmp(&b.trace_id))
    });
    found.truncate(req.limit);
    Ok((found, inspected))
}

fn search_result(t: &Found, req: &SearchRequest) -> Value {
    let spans: Vec<Value> = t
        .matched
        .iter()
        .take(req.spss)
        .map(|s| {
            let attributes: Vec<Value> = req
                .filter
                .shown
                .iter()
                .filter_map(|(k, shown)| {
                    let value = match shown {
                        Shown::Value(v) => v.as_str(),
                        Shown::Field(field) => field.value(&s.view())?,
                    };
                    Some(json!({"key": k, "value": {"stringValue": value}}))
                })
                .collect();
            json!({
                "spanID": to_hex(&s.span_id),
                "name": s.name,
                "startTimeUnixNano": s.start_ns.to_string(),
                "durationNanos": s.duration_ns().to_string(),
                "attributes": attributes,
            })
        })
        .collect();
    let span_set = json!({ "spans": spans, "matched": t.matched.len() });
    json!({
        "traceID": to_hex(&t.trace_id),
        "rootServiceName": t.root_service,
        "rootTraceName": t.root_name,
        "startTimeUnixNano": t.start_ns.to_string(),
        "durationMs": t.duration_ns / 1_000_000,
        "spanSet": span_set,
        "spanSets": [span_set],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tempo_logfmt_tags_decode_like_go_logfmt() {
        assert_eq!(
            parse_logfmt(r#"service.name=goapp name="GET /x \"y\"" empty="#).unwrap(),
            vec![
                ("service.name".into(), "goapp".into()),
                ("name".into(), "GET /x \"y\"".into()),
                ("empty".into(), String::new()),
            ]
        );
        assert!(parse_logfmt(r#"a="open"#).is_err());
        assert!(parse_logfmt("=v").is_err());
    }
}
