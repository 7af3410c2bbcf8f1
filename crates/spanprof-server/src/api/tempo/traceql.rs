//! The part of TraceQL that Grafana's trace search writes: one spanset of conditions joined
//! by `&&`, such as `{resource.service.name="api" && name="GET /x" && duration>100ms}`;
//! anything else is refused naming the part. The whole subset: `docs/api/traceql.md`.

use spanprof_store::spans::CompareOp;
use spanprof_store::time::parse_duration;

/// A parsed query: tags as the `tags` parameter names them, each with its comparison and
/// value, and duration bounds in ns (inclusive).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Query {
    pub tags: Vec<(String, CompareOp, String)>,
    pub span_min_ns: Option<u64>,
    pub span_max_ns: Option<u64>,
    pub trace_min_ns: Option<u64>,
    pub trace_max_ns: Option<u64>,
}

const SHAPE: &str = "only one spanset of conditions joined by && is supported, such as \
                     {resource.service.name=\"api\" && name=\"GET /x\" && duration>100ms}";

/// Parses `q`; the error says which part is not supported.
pub(super) fn parse(q: &str) -> Result<Query, String> {
    let inner = q
        .trim()
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| SHAPE.to_owned())?;
    let mut query = Query::default();
    for condition in split_and(inner)? {
        let condition = condition.trim();
        if condition.is_empty() {
            if inner.trim().is_empty() {
                break;
            }
            return Err(format!("an empty condition between &&: {SHAPE}"));
        }
        add_condition(&mut query, condition)?;
    }
    Ok(query)
}

/// The complete conditions of `q`, a query perhaps still being typed (`{resource.service.name
/// = "api" && name = }`, the closing brace perhaps missing), as Tempo's tag endpoints read
/// theirs: a condition that does not parse is left out, and a query that is not one spanset
/// (`||`, several spansets, a pipeline) selects everything.
pub(super) fn parse_lenient(q: &str) -> Query {
    let mut query = Query::default();
    let Some(inner) = q.trim().strip_prefix('{') else {
        return query;
    };
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    let Ok(conditions) = split_and(inner) else {
        return query;
    };
    for condition in conditions {
        // A condition that fails adds nothing.
        let _ = add_condition(&mut query, condition.trim());
    }
    query
}

/// Adds `condition` (trimmed, not empty) to `query`; one that fails adds nothing.
fn add_condition(query: &mut Query, condition: &str) -> Result<(), String> {
    let (field, op, value) = split_condition(condition)?;
    match field {
        "duration" | "span:duration" | "traceDuration" | "trace:duration" => {
            let ns = parse_duration(&value).map_err(|e| format!("{condition}: {e}"))?;
            let trace = field.starts_with("trace");
            match op {
                ">" | ">=" => {
                    let at = if op == ">" { ns.saturating_add(1) } else { ns };
                    let min = if trace {
                        &mut query.trace_min_ns
                    } else {
                        &mut query.span_min_ns
                    };
                    // Two bounds on one side: the tighter.
                    *min = Some(min.map_or(at, |b| b.max(at)));
                }
                "<" | "<=" => {
                    let at = match (op, ns) {
                        ("<=", _) => ns,
                        (_, 0) => return Err(format!("{condition}: no duration is below 0")),
                        _ => ns - 1,
                    };
                    let max = if trace {
                        &mut query.trace_max_ns
                    } else {
                        &mut query.span_max_ns
                    };
                    *max = Some(max.map_or(at, |b| b.min(at)));
                }
                _ => {
                    return Err(format!(
                        "{condition}: durations are compared with >, >=, < or <="
                    ))
                }
            }
        }
        _ => {
            let op = CompareOp::parse(op).expect("split_condition gives known operators");
            let key = match field {
                "span:name" => "name",
                "span:status" => "status",
                "span:kind" => "kind",
                "span:statusMessage" => "statusMessage",
                "trace:rootName" => "rootName",
                "trace:rootService" => "rootServiceName",
                "trace:id"
                | "span:id"
                | "span:parentID"
                | "event:name"
                | "event:timeSinceStart"
                | "link:traceID"
                | "link:spanID"
                | "instrumentation:name"
                | "instrumentation:version"
                | "nestedSetLeft"
                | "nestedSetRight"
                | "nestedSetParent" => {
                    return Err(format!("{condition}: {field} is not supported"))
                }
                f => f,
            };
            // Two values one field equals: no span, or one said twice.
            if op == CompareOp::Eq
                && query
                    .tags
                    .iter()
                    .any(|(k, o, _)| k == key && *o == CompareOp::Eq)
            {
                return Err(format!("{field} is compared twice with ="));
            }
            query.tags.push((key.to_owned(), op, value));
        }
    }
    Ok(())
}

/// Splits at each `&&` outside quotes; refuses `||`, `|`, and spanset operators.
fn split_and(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if quoted {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => quoted = false,
                _ => {}
            }
        } else {
            match c {
                b'"' => quoted = true,
                b'&' if bytes.get(i + 1) == Some(&b'&') => {
                    parts.push(&s[start..i]);
                    i += 2;
                    start = i;
                    continue;
                }
                b'|' | b'{' | b'}' | b'(' | b')' | b'&' => {
                    return Err(format!("{:?} is not supported: {SHAPE}", c as char))
                }
                _ => {}
            }
        }
        i += 1;
    }
    if quoted {
        return Err("a quoted value is not closed".to_owned());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// `field op value`, the value unquoted.
fn split_condition(c: &str) -> Result<(&str, &str, String), String> {
    let at = c
        .find(['=', '!', '>', '<', '~'])
        .ok_or_else(|| format!("{c}: expected field, operator and value, such as name=\"x\""))?;
    let field = c[..at].trim();
    let rest = &c[at..];
    let op_len = rest.bytes().take_while(|b| b"=!<>~".contains(b)).count();
    let op = &rest[..op_len];
    if CompareOp::parse(op).is_none() {
        return Err(format!("{c}: unknown operator {op}"));
    }
    if field.is_empty() || field.contains(char::is_whitespace) {
        return Err(format!("{c}: expected a field before {op}"));
    }
    let raw = rest[op_len..].trim();
    let value = match raw.strip_prefix('"') {
        Some(quoted) => {
            let body = quoted
                .strip_suffix('"')
                .ok_or_else(|| format!("{c}: text after the quoted value"))?;
            let mut out = String::new();
            let mut chars = body.chars();
            while let Some(ch) = chars.next() {
                match ch {
                    '\\' => match chars.next() {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some(other) => out.push(other),
                        None => return Err(format!("{c}: a lone \\ ends the value")),
                    },
                    '"' => return Err(format!("{c}: text after the quoted value")),
                    ch => out.push(ch),
                }
            }
            out
        }
        None if raw.is_empty() || raw.contains(char::is_whitespace) => {
            return Err(format!("{c}: expected one value after {op}"))
        }
        None => raw.to_owned(),
    };
    Ok((field, op, value))
}

#[cfg(test)]
mod tests {
    use super::{parse, CompareOp, Query};

    fn tags(q: &Query) -> Vec<(&str, &str)> {
        q.tags
            .iter()
            .map(|(k, op, v)| {
                assert_eq!(*op, CompareOp::Eq, "{k}");
                (k.as_str(), v.as_str())
            })
            .collect()
    }

    /// Each tag of `q` with its comparison.
    fn comparisons(q: &Query) -> Vec<(&str, CompareOp, &str)> {
        q.tags
            .iter()
            .map(|(k, op, v)| (k.as_str(), *op, v.as_str()))
            .collect()
    }

    #[test]
    fn text_fields_take_each_comparison() {
        let q = parse(
            r#"{name=~"GET /.*" && resource.service.name != "db" && span.http.route !~ "/health|/ready" && status != error && name != "GET /x"}"#,
        )
        .unwrap();
        assert_eq!(
            comparisons(&q),
            [
                ("name", CompareOp::Re, "GET /.*"),
                ("resource.service.name", CompareOp::Ne, "db"),
                ("span.http.route", CompareOp::Nre, "/health|/ready"),
                ("status", CompareOp::Ne, "error"),
                ("name", CompareOp::Ne, "GET /x"),
            ]
        );
    }

    #[test]
    fn grafanas_search_queries_parse() {
        assert_eq!(parse("{}").unwrap(), Query::default());
        assert_eq!(parse(" { } ").unwrap(), Query::default());
        let q = parse(
            r#"{resource.service.name="goapp" && name="GET /cpu-heavy" && span.http.route = "/x \"y\"" && status=error && duration>100ms && duration<=2s}"#,
        )
        .unwrap();
        assert_eq!(
            tags(&q),
            [
                ("resource.service.name", "goapp"),
                ("name", "GET /cpu-heavy"),
                ("span.http.route", "/x \"y\""),
                ("status", "error"),
            ]
        );
        assert_eq!(q.span_min_ns, Some(100_000_001));
        assert_eq!(q.span_max_ns, Some(2_000_000_000));
        assert_eq!((q.trace_min_ns, q.trace_max_ns), (None, None));

        let q = parse(r#"{span:name="a&&b" && traceDuration >= 1s && .pid = 42}"#).unwrap();
        assert_eq!(tags(&q), [("name", "a&&b"), (".pid", "42")]);
        assert_eq!(q.trace_min_ns, Some(1_000_000_000));
        // The tighter of two bounds.
        let q =
            parse("{duration > 1s && duration >= 2s && duration < 5s && duration <= 9s}").unwrap();
        assert_eq!(q.span_min_ns, Some(2_000_000_000));
        assert_eq!(q.span_max_ns, Some(4_999_999_999));
    }

    #[test]
    fn intrinsics_take_their_short_names_and_attributes_take_orders() {
        let q = parse(
            "{span:kind=server && kind!=client && span:statusMessage=~\"reset.*\" && \
             trace:rootName=\"GET /\" && rootServiceName=web && \
             span.http.response.status_code >= 500 && .retries<3}",
        )
        .unwrap();
        assert_eq!(
            comparisons(&q),
            [
                ("kind", CompareOp::Eq, "server"),
                ("kind", CompareOp::Ne, "client"),
                ("statusMessage", CompareOp::Re, "reset.*"),
                ("rootName", CompareOp::Eq, "GET /"),
                ("rootServiceName", CompareOp::Eq, "web"),
                ("span.http.response.status_code", CompareOp::Ge, "500"),
                (".retries", CompareOp::Lt, "3"),
            ]
        );
    }

    #[test]
    fn a_query_being_typed_keeps_its_complete_conditions() {
        let kept = |q: &str| -> Vec<(String, String)> {
            super::parse_lenient(q)
                .tags
                .into_iter()
                .map(|(k, op, v)| (k, format!("{op}{v}")))
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            kept(r#"{resource.service.name="api" && name = }"#),
            [pair("resource.service.name", "=api")]
        );
        assert_eq!(
            kept(r#"{ span.http.method != "GET" && .retries >= 2 && kind = "#),
            [pair("span.http.method", "!=GET"), pair(".retries", ">=2")]
        );
        // What does not parse is left out; what has no place here, too.
        assert_eq!(
            kept(r#"{name="a" && span:id = ab && nonsense && name =~ "b.*"}"#),
            [pair("name", "=a"), pair("name", "=~b.*")]
        );
        let q = super::parse_lenient("{duration > 1s && traceDuration < 5s && name=");
        assert_eq!(
            (q.span_min_ns, q.trace_max_ns),
            (Some(1_000_000_001), Some(4_999_999_999))
        );
        for everything in ["", "{}", "{", r#"{name="a"} || {name="b"}"#, r#"name="a""#] {
            assert_eq!(
                super::parse_lenient(everything),
                Query::default(),
                "{everything}"
            );
        }
    }

    /// A condition as Grafana's builder or a user writes one, or a piece of one.
    fn condition() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let field = prop::sample::select(vec![
            "name",
            "span:name",
            "status",
            "kind",
            "statusMessage",
            "rootName",
            "rootServiceName",
            "duration",
            "traceDuration",
            "span.http.route",
            "resource.host.name",
            ".retries",
            "span:id",
            "é.ü",
        ]);
        let op = prop::sample::select(vec!["=", "!=", "=~", "!~", ">", ">=", "<", "<=", "==", ""]);
        let value = prop::sample::select(vec![
            "\"GET /x\"",
            "\"a && b\"",
            "\"q\\\"uote\"",
            "error",
            "server",
            "500",
            "1.5s",
            "\"open",
            "",
            "ü",
        ]);
        (field, op, value).prop_map(|(f, o, v)| format!("{f} {o} {v}"))
    }

    proptest::proptest! {
        /// Whatever is typed, neither parser panics; where the strict one takes a query, the
        /// lenient one (for a query still being typed) reads the same from it.
        #[test]
        fn any_query_parses_or_is_refused_and_lenient_agrees_with_strict(
            parts in proptest::collection::vec(condition(), 0..5),
            join in proptest::sample::select(vec![" && ", " || ", "&&", " "]),
            close in proptest::bool::ANY,
            noise in "\\PC{0,12}",
        ) {
            let q = format!("{{{}{}", parts.join(join), if close { "}" } else { "" });
            if let Ok(strict) = parse(&q) {
                proptest::prop_assert_eq!(super::parse_lenient(&q), strict);
            }
            for text in [q.clone(), format!("{q}{noise}"), format!("{noise}{q}"), noise.clone()] {
                let _ = parse(&text);
                let _ = super::parse_lenient(&text);
            }
        }
    }

    #[test]
    fn the_rest_of_traceql_is_refused_naming_the_part() {
        for (q, says) in [
            (r#"{name="a"} || {name="b"}"#, "only one spanset"),
            (r#"{name="a" || name="b"}"#, "'|' is not supported"),
            (r#"{name="a"} | count() > 1"#, "only one spanset"),
            ("{duration=1s}", "durations are compared with"),
            ("{duration>fast}", "duration>fast"),
            ("{span:id=ab}", "span:id is not supported"),
            ("{name==a}", "unknown operator =="),
            (r#"{name="a" && name="b"}"#, "name is compared twice with ="),
            (r#"{name="a" && }"#, "an empty condition"),
            (r#"{name="open}"#, "not closed"),
            ("{name}", "expected field, operator and value"),
            ("{name=a b}", "expected one value"),
            (r#"name="a""#, "only one spanset"),
        ] {
            let e = parse(q).unwrap_err();
            assert!(e.contains(says), "{q}: {e}");
        }
    }
}
