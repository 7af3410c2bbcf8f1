//! Query-string parameters: `application/x-www-form-urlencoded` decoding (WHATWG rules:
//! `+` is a space, a `%` not followed by two hex digits stays as it is), repeated
//! parameters, unknown-parameter checks, and the parsers of every parameter kind.

use std::borrow::Cow;

use spanprof_format::link::parse_id;
use spanprof_store::spans::kind_name;
use spanprof_store::time::{parse_duration, parse_time};

use super::error::ApiError;

/// Why a parameter's value was refused: what the parameter takes. Shown after the
/// parameter's name and value ([`ApiError::bad_param`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadValue {
    /// Not UTF-8 once its `%XX` escapes are decoded.
    #[error("not UTF-8 once percent-decoded")]
    NotUtf8,
    /// Not a span id.
    #[error("expected 16 hex characters (not all zero)")]
    SpanId,
    /// Not a trace id.
    #[error("expected 32 hex characters (not all zero)")]
    TraceId,
    /// Not `true` or `false`.
    #[error("expected true or false")]
    Boolean,
    /// Not a whole number in `min..=max`.
    #[error("expected a whole number from {min} to {max}")]
    Count {
        /// The least accepted.
        min: usize,
        /// The most accepted.
        max: usize,
    },
    /// Not a span status.
    #[error("expected error, ok or unset")]
    Status,
    /// Not a span kind.
    #[error("expected server, client, internal, producer, consumer or unspecified")]
    Kind,
    /// Not a duration.
    #[error("expected a duration such as 250ms, 15s or 1h30m")]
    Duration,
    /// Not a time; `plus_read_as_space` when an unencoded `+01:00` offset arrived as ` 01:00`.
    #[error(
        "expected RFC 3339 (2026-11-29T09:00:00Z), unix seconds (a fraction too) or \
         milliseconds, or now-1h{}",
        if *plus_read_as_space { "; a + in a query string reads as a space: write it %2B, or use Z" } else { "" }
    )]
    Time {
        /// The value looks like RFC 3339 whose `+` became a space.
        plus_read_as_space: bool,
    },
    /// Not a percentile.
    #[error("expected a percentile from 0 to 100")]
    Percentile,
    /// Parses, but is not a value this parameter takes (the reason).
    #[error("{0}")]
    Refused(&'static str),
}

/// One `name=value` pair, as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pair {
    /// The name the API reads it under (`span_id` for `left.span_id` in a diff side).
    name: String,
    /// The name as the client sent it, for error messages.
    shown: String,
    value: String,
}

/// A parameter's value and the name to report it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param<'a> {
    /// The name as the client spelled it.
    pub shown: &'a str,
    /// The decoded value (never empty: empty values count as absent).
    pub value: &'a str,
}

impl Param<'_> {
    /// 400 naming this parameter and its value.
    pub fn bad(&self, reason: impl std::fmt::Display) -> ApiError {
        ApiError::bad_param(self.shown, self.value, reason)
    }
}

/// The decoded query string of one request.
#[derive(Debug, Clone, Default)]
pub struct QueryParams {
    pairs: Vec<Pair>,
}

impl QueryParams {
    /// Decodes a raw query string (`None` = no `?`).
    pub fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        let mut pairs = Vec::new();
        for piece in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
            let name = decode_component(name).map_err(|reason| {
                ApiError::bad_request(format!("query string: parameter name {name:?}: {reason}"))
            })?;
            let value = decode_component(value)
                .map_err(|reason| ApiError::bad_param(&name, value, reason))?;
            pairs.push(Pair {
                shown: name.clone(),
                name,
                value,
            });
        }
        Ok(QueryParams { pairs })
    }

    /// Rejects every parameter not in `names`: a misspelt parameter would otherwise widen
    /// the selection silently.
    pub fn allow(&self, endpoint: &str, names: &[&str]) -> Result<(), ApiError> {
        self.allow_scoped(endpoint, names, &[], &[])
    }

    /// Like [`allow`](Self::allow), also accepting `prefix + name` for every `prefix` in
    /// `prefixes` and `name` in `scoped` (a diff's `left.span_id`).
    pub fn allow_scoped(
        &self,
        endpoint: &str,
        names: &[&str],
        prefixes: &[&str],
        scoped: &[&str],
    ) -> Result<(), ApiError> {
        let known = |n: &str| {
            names.contains(&n)
                || prefixes
                    .iter()
                    .any(|p| n.strip_prefix(p).is_some_and(|rest| scoped.contains(&rest)))
        };
        match self.pairs.iter().find(|p| !known(&p.name)) {
            None => Ok(()),
            Some(p) => {
                let mut takes = match names {
                    [] => "no parameters".to_owned(),
                    _ => names.join(", "),
                };
                for prefix in prefixes {
                    takes.push_str(&format!(", {prefix}<{}>", scoped.join("|")));
                }
                Err(ApiError::bad_request(format!(
                    "unknown parameter {:?}; {endpoint} takes: {takes}",
                    p.shown
                )))
            }
        }
    }

    /// The value of a parameter given at most once; empty values count as absent.
    pub fn one(&self, name: &str) -> Result<Option<Param<'_>>, ApiError> {
        let mut found = self.many(name).into_iter();
        match (found.next(), found.next()) {
            (Some(_), Some(second)) => Err(ApiError::bad_request(format!(
                "parameter {:?} is given more than once; it takes one value",
                second.shown
            ))),
            (first, _) => Ok(first),
        }
    }

    /// 400 when `name` is given with an empty value: for the parameters that narrow a
    /// selection to spans, where an empty value read as absent would widen it to the whole
    /// service (a script's unset `$SPAN` in `span_id=$SPAN`).
    pub fn refuse_empty(&self, name: &str, expected: &str) -> Result<(), ApiError> {
        match self
            .pairs
            .iter()
            .find(|p| p.name == name && p.value.is_empty())
        {
            None => Ok(()),
            Some(p) => Err(ApiError::bad_request(format!(
                "{} is empty: give {expected}, or leave the parameter out",
                p.shown
            ))),
        }
    }

    /// Every value of a repeatable parameter, in order; empty values are skipped.
    pub fn many(&self, name: &str) -> Vec<Param<'_>> {
        self.pairs
            .iter()
            .filter(|p| p.name == name && !p.value.is_empty())
            .map(|p| Param {
                shown: &p.shown,
                value: &p.value,
            })
            .collect()
    }

    /// A parameter given at most once, parsed by `parse` (whose error is the reason shown).
    pub fn parsed<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, BadValue>,
    ) -> Result<Option<T>, ApiError> {
        match self.one(name)? {
            None => Ok(None),
            Some(p) => parse(p.value).map(Some).map_err(|reason| p.bad(reason)),
        }
    }

    /// Whether any parameter starts with `prefix`.
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.pairs.iter().any(|p| p.name.starts_with(prefix))
    }

    /// One side of a diff: for each of `names`, the values of `prefix + name` when the client
    /// gave any, else the unprefixed (shared) ones. Other parameters are left out.
    pub fn side(&self, prefix: &str, names: &[&str]) -> QueryParams {
        let mut pairs = Vec::new();
        for name in names {
            let prefixed = format!("{prefix}{name}");
            let own: Vec<&Pair> = self.pairs.iter().filter(|p| p.name == prefixed).collect();
            if own.is_empty() {
                pairs.extend(self.pairs.iter().filter(|p| p.name == *name).cloned());
            } else {
                pairs.extend(own.into_iter().map(|p| Pair {
                    name: (*name).to_owned(),
                    shown: p.shown.clone(),
                    value: p.value.clone(),
                }));
            }
        }
        QueryParams { pairs }
    }
}

/// Percent-decodes one name or value of a query string; `+` is a space.
pub fn decode_component(s: &str) -> Result<String, BadValue> {
    percent_decode(s, true)
}

/// Percent-decodes `s`: `%XX` escapes (a `%` without two hex digits after it stays as it is),
/// and `+` as a space when `plus_is_space` (query strings; in a URL's user info it is itself).
/// The one decoder of the server: the query API, Pyroscope's `/render` and config URLs.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, BadValue> {
    // `+` first: an escaped `%2B` must stay a plus.
    let spaced: Cow<'_, str> = if plus_is_space && s.contains('+') {
        Cow::Owned(s.replace('+', " "))
    } else {
        Cow::Borrowed(s)
    };
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| BadValue::NotUtf8)
}

/// A span id: 16 hex characters.
pub fn span_id(s: &str) -> Result<[u8; 8], BadValue> {
    parse_id::<8>(s).ok_or(BadValue::SpanId)
}

/// A trace id: 32 hex characters.
pub fn trace_id(s: &str) -> Result<[u8; 16], BadValue> {
    parse_id::<16>(s).ok_or(BadValue::TraceId)
}

/// `true` or `false`.
pub fn boolean(s: &str) -> Result<bool, BadValue> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(BadValue::Boolean),
    }
}

/// A whole number in `min..=max`.
pub fn count(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, BadValue> {
    move |s| match s.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(BadValue::Count { min, max }),
    }
}

/// A span status (`error`, `ok`, `unset`; OTLP's numbers and `STATUS_CODE_*` names too), as
/// its OTLP code.
pub fn status(s: &str) -> Result<i32, BadValue> {
    match s.to_ascii_lowercase().as_str() {
        "unset" | "0" | "status_code_unset" => Ok(0),
        "ok" | "1" | "status_code_ok" => Ok(1),
        "error" | "2" | "status_code_error" => Ok(2),
        _ => Err(BadValue::Status),
    }
}

/// A span kind, as TraceQL names it (`server`), as OTLP does (`SPAN_KIND_SERVER`) or as
/// its number (2), as the OTLP `SpanKind` number.
pub fn kind(s: &str) -> Result<i32, BadValue> {
    let lower = s.to_ascii_lowercase();
    let name = lower.strip_prefix("span_kind_").unwrap_or(&lower);
    (0..=5)
        .find(|&k| kind_name(k) == name || k.to_string() == name)
        .ok_or(BadValue::Kind)
}

/// A duration (`250ms`, `15s`, `1h30m`), in nanoseconds.
pub fn duration(s: &str) -> Result<u64, BadValue> {
    parse_duration(s).map_err(|_| BadValue::Duration)
}

/// A time (RFC 3339, unix s/ms/ns, `now`, `now-1h`), in nanoseconds since the Unix epoch.
pub fn time(now_ns: i64) -> impl Fn(&str) -> Result<i64, BadValue> {
    move |s| {
        parse_time(s, now_ns).map_err(|_| BadValue::Time {
            // `+01:00` unencoded in a query string arrives as ` 01:00`.
            plus_read_as_space: s.get(19..).is_some_and(|rest| rest.starts_with(' ')),
        })
    }
}

/// A percentile from 0 to 100.
pub fn percentile(s: &str) -> Result<f64, BadValue> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(BadValue::Percentile),
    }
}

pub use crate::clock::now_ns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes_and_plus() {
        assert_eq!(decode_component("a%20b+c").unwrap(), "a b c");
        assert_eq!(
            decode_component("GET%20%2Fcpu-heavy").unwrap(),
            "GET /cpu-heavy"
        );
        assert_eq!(decode_component("%7Bk%3D%22v%22%7D").unwrap(), "{k=\"v\"}");
        assert_eq!(decode_component("%e2%82%AC").unwrap(), "€");
        assert_eq!(decode_component("100%").unwrap(), "100%");
        assert_eq!(decode_component("%zz%4").unwrap(), "%zz%4");
        assert_eq!(decode_component("%2B").unwrap(), "+");
        assert_eq!(decode_component("").unwrap(), "");
        assert!(decode_component("%ff").is_err());
    }

    #[test]
    fn keeps_repeated_parameters_in_order() {
        let p = QueryParams::parse(Some("span_id=a&x=1&span_id=b&&span_id=&flag")).unwrap();
        let ids: Vec<&str> = p.many("span_id").iter().map(|p| p.value).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(p.one("x").unwrap().unwrap().value, "1");
        assert_eq!(p.one("flag").unwrap(), None);
        let twice = p.one("span_id").unwrap_err();
        assert!(twice
            .message
            .contains("\"span_id\" is given more than once"));
    }

    #[test]
    fn rejects_unknown_parameters_by_name() {
        let p = QueryParams::parse(Some("service=a&left.span_id=x&spanid=1")).unwrap();
        let names = ["service", "span_id"];
        let e = p
            .allow_scoped("/api/v1/diff", &names, &["left."], &names)
            .unwrap_err();
        assert!(
            e.message.starts_with("unknown parameter \"spanid\""),
            "{}",
            e.message
        );
        let ok = QueryParams::parse(Some("service=a&left.span_id=x")).unwrap();
        ok.allow_scoped("/api/v1/diff", &names, &["left."], &names)
            .unwrap();
        assert!(ok.allow("/x", &["service"]).is_err());
        assert!(ok
            .allow_scoped("/x", &names, &["left."], &["service"])
            .is_err());
    }

    #[test]
    fn a_side_overrides_shared_values_and_keeps_the_shown_name() {
        let p =
            QueryParams::parse(Some("service=a&span_id=s1&span_id=s2&left.span_id=l1")).unwrap();
        let left = p.side("left.", &["service", "span_id"]);
        let ids = left.many("span_id");
        assert_eq!(
            ids,
            [Param {
                shown: "left.span_id",
                value: "l1"
            }]
        );
        assert_eq!(left.one("service").unwrap().unwrap().value, "a");
        let right = p.side("right.", &["service", "span_id"]);
        assert_eq!(right.many("span_id").len(), 2);
    }

    #[test]
    fn value_parsers_explain_what_they_expect() {
        assert_eq!(span_id("00000000000000ff").unwrap()[7], 0xff);
        assert!(span_id("xyz").unwrap_err().to_string().contains("16 hex"));
        assert!(span_id("0000000000000000").is_err());
        assert!(trace_id("00").unwrap_err().to_string().contains("32 hex"));
        assert_eq!(boolean("true"), Ok(true));
        assert!(boolean("yes").is_err());
        assert_eq!(count(1, 10)("10"), Ok(10));
        assert!(count(1, 10)("0").is_err());
        assert_eq!(duration("1.5s"), Ok(1_500_000_000));
        assert!(duration("fast").is_err());
        assert_eq!(time(5_000_000_000)("now-2s"), Ok(3_000_000_000));
        assert_eq!(time(0)("1700000000"), Ok(1_700_000_000_000_000_000));
        assert!(time(0)("yesterday").is_err());
        assert_eq!(percentile("99.9"), Ok(99.9));
        assert!(percentile("101").is_err());
        assert!(percentile("NaN").is_err());
    }
}
