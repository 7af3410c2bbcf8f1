//! Finding spans by service, name, duration, time and attributes, and duration percentiles.

use std::cmp::Ordering;

use super::record::SpanRecord;
use super::view::SpanView;
use crate::matchers::{LabelMatcher, MatchOp};

/// Which spans [`search`] returns. Every filter that is set must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanQuery {
    /// Exact service name; `None` = any.
    pub service: Option<String>,
    /// Exact span name; `None` = any.
    pub name: Option<String>,
    /// Shortest duration kept, in ns (inclusive); `None` = no minimum.
    pub min_duration_ns: Option<u64>,
    /// Longest duration kept, in ns (inclusive); `None` = no maximum.
    pub max_duration_ns: Option<u64>,
    /// Start of the time range, ns since the Unix epoch: spans that overlap
    /// `[from_ns, to_ns]` (both inclusive) are kept.
    pub from_ns: u64,
    /// End of the time range, ns since the Unix epoch (inclusive).
    pub to_ns: u64,
    /// Most spans returned; 0 returns none.
    pub limit: usize,
    /// (key, value) pairs the span's attributes must all contain, compared exactly against the
    /// stored (stringified, bounded) values.
    pub attributes: Vec<(String, String)>,
    /// (key, value) pairs the attributes of the span's resource must all contain (the host,
    /// pod or version that ran it), compared as `attributes` are.
    pub resource: Vec<(String, String)>,
    /// (key, value) pairs each held by the span's attributes or by its resource's (TraceQL's
    /// unscoped `.key`).
    pub either: Vec<(String, String)>,
    /// OTLP status code the span must have (0 unset, 1 ok, 2 error); `None` = any.
    pub status_code: Option<i32>,
    /// Comparisons of the span's texts that must all hold, with any of `=`, `!=`, `=~`, `!~`,
    /// `>`, `>=`, `<`, `<=` (TraceQL's `name =~ "GET .*"`, `span.http.route != "/health"`,
    /// `span.http.response.status_code >= 500`, `kind = server`).
    pub conditions: Vec<TextCondition>,
}

/// Which text of a span a [`TextCondition`] compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextField {
    /// The service name.
    Service,
    /// The span name.
    Name,
    /// The status, as `unset`, `ok` or `error`.
    Status,
    /// The status message (none when empty).
    StatusMessage,
    /// The kind, as TraceQL names it: `unspecified`, `internal`, `server`, `client`,
    /// `producer` or `consumer`.
    Kind,
    /// The span attribute of this key.
    Attribute(String),
    /// The attribute of this key of the span's resource.
    Resource(String),
    /// The attribute of this key of the span or of its resource.
    Either(String),
}

/// How a [`TextCondition`] compares: TraceQL's operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `=`: the text equals.
    Eq,
    /// `!=`: the text differs.
    Ne,
    /// `=~`: the whole text matches the regex.
    Re,
    /// `!~`: the whole text does not match the regex.
    Nre,
    /// `>`: the text is a number above the value.
    Gt,
    /// `>=`: a number at or above it.
    Ge,
    /// `<`: a number below it.
    Lt,
    /// `<=`: a number at or below it.
    Le,
}

impl CompareOp {
    /// Every operator with its text, the two-character ones first (so that a scan for the
    /// first operator in `a>=1` finds `>=`, not `>`).
    pub const ALL: [(&'static str, CompareOp); 8] = [
        ("!=", CompareOp::Ne),
        ("!~", CompareOp::Nre),
        ("=~", CompareOp::Re),
        (">=", CompareOp::Ge),
        ("<=", CompareOp::Le),
        ("=", CompareOp::Eq),
        (">", CompareOp::Gt),
        ("<", CompareOp::Lt),
    ];

    /// The operator written `text`.
    pub fn parse(text: &str) -> Option<CompareOp> {
        Self::ALL
            .iter()
            .find(|(t, _)| *t == text)
            .map(|&(_, op)| op)
    }

    /// How it is written.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, op)| *op == self)
            .map(|(t, _)| *t)
            .expect("every operator is listed")
    }

    /// The text operator this is, if it is one (not an order of numbers).
    pub fn text_op(self) -> Option<MatchOp> {
        match self {
            CompareOp::Eq => Some(MatchOp::Eq),
            CompareOp::Ne => Some(MatchOp::Ne),
            CompareOp::Re => Some(MatchOp::Re),
            CompareOp::Nre => Some(MatchOp::Nre),
            _ => None,
        }
    }
}

impl std::fmt::Display for CompareOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One comparison of a span's text, as TraceQL makes it: `=` and `=~` hold when the text
/// equals or matches (an attribute: any value the span holds under its key), `!=` and `!~`
/// when the text is there and differs or does not match (an attribute: the span holds the key,
/// and none of its values under it equals or matches). A span without the attribute passes
/// neither, as in Tempo. Regexes are fully anchored (`=~ "GET .*"`).
///
/// `>`, `>=`, `<` and `<=` compare numbers (`span.http.response.status_code >= 500`): they
/// hold when the text (an attribute: any value under the key) reads as a number (a decimal or
/// floating-point number, as OTLP's int and double values are stored) in that order to the
/// value; a text that is not a number passes none of them. Values are stored as text, so a
/// string attribute `"500"` compares as the number 500 does, and integers beyond 2^53
/// compare as the nearest double.
#[derive(Clone, Debug, PartialEq)]
pub struct TextCondition {
    /// What is compared.
    pub field: TextField,
    test: Test,
}

#[derive(Clone, Debug, PartialEq)]
enum Test {
    /// `=`, `!=`, `=~`, `!~`; the matcher's `name` is not read.
    Text(LabelMatcher),
    /// `>`, `>=`, `<`, `<=` against a finite number.
    Number(CompareOp, f64),
}

/// `text` as a number, if it is a finite one.
fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

impl TextField {
    /// The span's text of this field; of an attribute, the first value it holds under the key
    /// (the span's before its resource's), if any.
    pub fn value<'a>(&self, span: &SpanView<'a>) -> Option<&'a str> {
        match self {
            TextField::Service => Some(span.service),
            TextField::Name => Some(span.name),
            TextField::Status => Some(status_name(span.status_code)),
            // None when empty: a span without a message has none to compare or list.
            TextField::StatusMessage => Some(span.status_message).filter(|m| !m.is_empty()),
            TextField::Kind => Some(kind_name(span.kind)),
            TextField::Attribute(k) => span.attribute(k),
            TextField::Resource(k) => span.resource_attribute(k),
            TextField::Either(k) => span.attribute(k).or_else(|| span.resource_attribute(k)),
        }
    }
}

/// Why a span condition cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    /// A regex that does not compile (or is too long).
    #[error("{0}")]
    Matcher(#[from] crate::matchers::MatcherError),
    /// An order (`>`, `<=`, …) against a value that is not a number.
    #[error("{op} compares numbers, and {value:?} is not a number")]
    NotANumber {
        /// The comparison.
        op: CompareOp,
        /// The value given.
        value: String,
    },
}

impl TextCondition {
    /// `field op value`; an error, to show as it is, for a regex that does not compile or an
    /// order against a value that is not a number.
    pub fn new(field: TextField, op: CompareOp, value: &str) -> Result<Self, ConditionError> {
        let test = match op.text_op() {
            Some(m) => Test::Text(LabelMatcher::new("", m, value)?),
            None => Test::Number(
                op,
                number(value).ok_or_else(|| ConditionError::NotANumber {
                    op,
                    value: value.to_owned(),
                })?,
            ),
        };
        Ok(Self { field, test })
    }

    /// The comparison as a query language writes it (for a backend that evaluates it
    /// itself, as Tempo's TraceQL): the operator and the value, a regex's source as given, a
    /// number in its shortest form.
    pub fn comparison(&self) -> (CompareOp, String) {
        match &self.test {
            Test::Text(m) => {
                let op = match m.op {
                    MatchOp::Eq => CompareOp::Eq,
                    MatchOp::Ne => CompareOp::Ne,
                    MatchOp::Re => CompareOp::Re,
                    MatchOp::Nre => CompareOp::Nre,
                };
                (op, m.value.clone())
            }
            Test::Number(op, v) => (*op, v.to_string()),
        }
    }

    /// Whether the span `span` shows passes.
    pub fn holds(&self, span: &SpanView<'_>) -> bool {
        match &self.field {
            TextField::Attribute(k) => self.held(k, span.attributes()),
            TextField::Resource(k) => self.held(k, span.resource()),
            TextField::Either(k) => self.held(k, span.attributes().chain(span.resource())),
            single => self.passes(single.value(span)),
        }
    }

    /// Whether the text `text` (`None`: not there) passes.
    fn passes(&self, text: Option<&str>) -> bool {
        match &self.test {
            Test::Text(m) => m.matches(text),
            Test::Number(op, value) => text.and_then(number).is_some_and(|n| match op {
                CompareOp::Gt => n > *value,
                CompareOp::Ge => n >= *value,
                CompareOp::Lt => n < *value,
                _ => n <= *value,
            }),
        }
    }

    /// Whether the comparison is one a single value satisfies (`=`, `=~`, the orders), not
    /// one every value must (`!=`, `!~`).
    fn positive(&self) -> bool {
        match &self.test {
            Test::Text(m) => matches!(m.op, MatchOp::Eq | MatchOp::Re),
            Test::Number(..) => true,
        }
    }

    /// Whether the values `pairs` hold under `key` pass.
    fn held<'a>(&self, key: &str, pairs: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
        let positive = self.positive();
        let mut any = false;
        for (_, v) in pairs.filter(|(k, _)| *k == key) {
            any = true;
            // The positive form taking one value decides: `=` holds, `!=` fails (`!=` passes
            // a value that differs, so fails where `=` holds).
            if self.passes(Some(v)) == positive {
                return positive;
            }
        }
        any && !positive
    }
}

/// The name TraceQL gives OTLP span kind `kind`.
pub fn kind_name(kind: i32) -> &'static str {
    match kind {
        1 => "internal",
        2 => "server",
        3 => "client",
        4 => "producer",
        5 => "consumer",
        _ => "unspecified",
    }
}

/// The name TraceQL gives OTLP status code `code`.
pub fn status_name(code: i32) -> &'static str {
    match code {
        1 => "ok",
        2 => "error",
        _ => "unset",
    }
}

impl Default for SpanQuery {
    /// Every span: no filters, all of time, no limit.
    fn default() -> Self {
        Self {
            service: None,
            name: None,
            min_duration_ns: None,
            max_duration_ns: None,
            from_ns: 0,
            to_ns: u64::MAX,
            limit: usize::MAX,
            attributes: Vec::new(),
            resource: Vec::new(),
            either: Vec::new(),
            status_code: None,
            conditions: Vec::new(),
        }
    }
}

impl SpanQuery {
    /// Whether `span` passes every filter.
    pub fn matches(&self, span: &SpanRecord) -> bool {
        self.matches_view(&span.view())
    }

    /// Whether the span `span` shows passes every filter.
    pub fn matches_view(&self, span: &SpanView<'_>) -> bool {
        let duration = span.duration_ns();
        self.service.as_ref().is_none_or(|s| *s == span.service)
            && self.name.as_ref().is_none_or(|n| *n == span.name)
            && self.min_duration_ns.is_none_or(|min| duration >= min)
            && self.max_duration_ns.is_none_or(|max| duration <= max)
            && span.start_ns <= self.to_ns
            && span.end_ns >= self.from_ns
            && self.status_code.is_none_or(|c| c == span.status_code)
            && all_held(&self.attributes, || span.attributes())
            && all_held(&self.resource, || span.resource())
            && all_held(&self.either, || span.attributes().chain(span.resource()))
            && self.conditions.iter().all(|c| c.holds(span))
    }
}

/// Whether every (key, value) of `pairs` is among those `held` gives.
fn all_held<'a, I: Iterator<Item = (&'a str, &'a str)>>(
    pairs: &[(String, String)],
    held: impl Fn() -> I,
) -> bool {
    pairs
        .iter()
        .all(|(k, v)| held().any(|(hk, hv)| hk == k && hv == v))
}

/// Longest first, then earliest start, then span id, so results are deterministic.
fn longest_first(a: &&SpanRecord, b: &&SpanRecord) -> Ordering {
    b.duration_ns()
        .cmp(&a.duration_ns())
        .then(a.start_ns.cmp(&b.start_ns))
        .then(a.span_id.cmp(&b.span_id))
}

/// The spans that match `query`, longest first (then by start time, then span id), at most
/// `query.limit` of them.
pub fn search<'a>(
    spans: impl Iterator<Item = &'a SpanRecord>,
    query: &SpanQuery,
) -> Vec<&'a SpanRecord> {
    if query.limit == 0 {
        return Vec::new();
    }
    let mut found: Vec<&SpanRecord> = spans.filter(|s| query.matches(s)).collect();
    if found.len() > query.limit {
        // Only the kept spans need sorting.
        found.select_nth_unstable_by(query.limit - 1, longest_first);
        found.truncate(query.limit);
    }
    found.sort_unstable_by(longest_first);
    found
}

/// The `p`th percentile (0 to 100) of the durations, in ns, of the spans named `name` (and of
/// `service`, when given), by the nearest-rank method: the smallest duration that at least
/// `p`% of the spans do not exceed. `p = 0` gives the shortest, `p = 100` the longest.
/// `None` when no span matches or `p` is outside 0..=100 (or NaN).
pub fn duration_percentile<'a>(
    spans: impl Iterator<Item = &'a SpanRecord>,
    name: &str,
    service: Option<&str>,
    p: f64,
) -> Option<u64> {
    let mut durations: Vec<u64> = spans
        .filter(|s| s.name == name && service.is_none_or(|svc| s.service == svc))
        .map(SpanRecord::duration_ns)
        .collect();
    percentile(&mut durations, p)
}

/// The `p`th percentile (0 to 100) of `durations` by the nearest-rank method (see
/// [`duration_percentile`]); reorders them. `None` when there are none or `p` is outside
/// 0..=100 (or NaN).
pub fn percentile(durations: &mut [u64], p: f64) -> Option<u64> {
    if !(0.0..=100.0).contains(&p) || durations.is_empty() {
        return None;
    }
    let n = durations.len();
    // p * n first: exact for whole percentages, so p = 90 of 10 spans is rank 9, not 10.
    let rank = (p * n as f64 / 100.0).ceil() as usize;
    let index = rank.clamp(1, n) - 1;
    Some(*durations.select_nth_unstable(index).1)
}
