//! Label selectors as Grafana, the Pyroscope UI and `/pyroscope/render` send them.

use proptest::prelude::*;
use spanprof_store::matchers::{
    matches_all, parse_selector, LabelMatcher, MatchOp, MatcherError, Selector,
};

fn parsed(s: &str) -> Selector {
    parse_selector(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn triples(sel: &Selector) -> Vec<(&str, MatchOp, &str)> {
    sel.matchers
        .iter()
        .map(|m| (m.name.as_str(), m.op, m.value.as_str()))
        .collect()
}

fn error_at(s: &str) -> (usize, String) {
    match parse_selector(s) {
        Err(MatcherError::Syntax {
            offset_bytes,
            reason,
            ..
        }) => (offset_bytes, reason),
        other => panic!("{s:?}: expected a syntax error, got {other:?}"),
    }
}

#[test]
fn empty_braces_select_everything() {
    let sel = parsed("{}");
    assert_eq!(sel, Selector::default());
    assert!(sel.matches(&[("a".into(), "b".into())]));
    assert_eq!(parsed("  { }  "), Selector::default());
}

#[test]
fn what_grafana_sends() {
    // Traces to profiles: `{${__tags}}` with the default tags.
    let sel = parsed(r#"{service_name="checkout", service_namespace="shop"}"#);
    assert_eq!(sel.profile_type, None);
    assert_eq!(
        triples(&sel),
        [
            ("service_name", MatchOp::Eq, "checkout"),
            ("service_namespace", MatchOp::Eq, "shop")
        ]
    );
    // `/pyroscope/render?query=`: the profile type ID sits in the metric-name position.
    let sel = parsed(r#"process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="x"}"#);
    assert_eq!(
        sel.profile_type.as_deref(),
        Some("process_cpu:cpu:nanoseconds:cpu:nanoseconds")
    );
    assert_eq!(triples(&sel), [("service_name", MatchOp::Eq, "x")]);
    let sel = parsed("memory:alloc_in_new_tlab_bytes:bytes::");
    assert_eq!(
        sel.profile_type.as_deref(),
        Some("memory:alloc_in_new_tlab_bytes:bytes::")
    );
    assert!(sel.matchers.is_empty());
}

#[test]
fn every_operator_and_otel_dotted_names() {
    let sel = parsed(r#"my-app.cpu { a = "1" , b!="2",c=~"x.*",  service.name !~ "t|u", }"#);
    assert_eq!(sel.profile_type.as_deref(), Some("my-app.cpu"));
    assert_eq!(
        triples(&sel),
        [
            ("a", MatchOp::Eq, "1"),
            ("b", MatchOp::Ne, "2"),
            ("c", MatchOp::Re, "x.*"),
            ("service.name", MatchOp::Nre, "t|u"),
        ]
    );
}

#[test]
fn quotes_and_escapes() {
    let sel = parsed(r#"{a="say \"hi\" \\ there", b='it\'s', c=`raw \d+ "ok"`}"#);
    assert_eq!(
        triples(&sel),
        [
            ("a", MatchOp::Eq, r#"say "hi" \ there"#),
            ("b", MatchOp::Eq, "it's"),
            ("c", MatchOp::Eq, r#"raw \d+ "ok""#),
        ]
    );
    let sel = parsed(r#"{a="\n\t\x41\101\u00e9\U0001F600", "weird-name"="v"}"#);
    assert_eq!(
        triples(&sel),
        [
            ("a", MatchOp::Eq, "\n\tAAé\u{1F600}"),
            ("weird-name", MatchOp::Eq, "v")
        ]
    );
    // A regex value written with Go escapes: `\\.` is a literal dot for the regex.
    let sel = parsed(r#"{host=~"api\\.example\\.com"}"#);
    assert!(sel.matches(&[("host".into(), "api.example.com".into())]));
    assert!(!sel.matches(&[("host".into(), "apiXexample.com".into())]));
}

#[test]
fn errors_say_what_and_where() {
    let err = parse_selector("{a=}").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"label selector "{a=}": expected a quoted value at byte 3"#
    );
    assert_eq!(error_at("").0, 0);
    assert_eq!(error_at("   ").0, 3);
    assert_eq!(error_at("{a}"), (2, "expected one of =, !=, =~, !~".into()));
    assert_eq!(error_at("{=\"x\"}"), (1, "expected a label name".into()));
    assert_eq!(error_at("{1a=\"x\"}"), (1, "expected a label name".into()));
    assert_eq!(
        error_at("{a=\"x\" b=\"y\"}"),
        (7, "expected `,` or `}`".into())
    );
    assert_eq!(error_at("{a=\"x\""), (6, "expected `,` or `}`".into()));
    assert_eq!(error_at("{a=\"x}").1, "unterminated quoted string");
    assert_eq!(error_at("{a=\"x}").0, 3);
    assert_eq!(
        error_at("{a=\"\\q\"}"),
        (4, "invalid escape sequence".into())
    );
    assert_eq!(error_at("{a=\"\\x4\"}").0, 4);
    assert_eq!(error_at("{a=\"\\400\"}").0, 4);
    assert_eq!(error_at("{a=\"\\xff\"}").1, "quoted string is not UTF-8");
    assert_eq!(error_at("{a=\"x\"} extra").0, 8);
    assert_eq!(error_at("app name{}").0, 4);
    assert_eq!(
        error_at("{a==\"x\"}"),
        (3, "expected a quoted value".into())
    );
    let (at, reason) = error_at(r#"{a=~"(unclosed"}"#);
    assert_eq!(at, 4);
    assert!(
        reason.starts_with("invalid regular expression \"(unclosed\""),
        "{reason}"
    );
}

/// Strings over an alphabet with every character class the quoting has to handle.
fn word(len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let alphabet: Vec<char> = "ab_.-\"\\'`\n\t\r\u{1}\u{7f}é{},= ".chars().collect();
    prop::collection::vec(prop::sample::select(alphabet), len).prop_map(String::from_iter)
}

fn selector() -> impl Strategy<Value = Selector> {
    let matcher = (word(1..7), prop::bool::ANY, word(0..8)).prop_map(|(name, ne, value)| {
        let op = if ne { MatchOp::Ne } else { MatchOp::Eq };
        LabelMatcher::new(name, op, value).unwrap()
    });
    let profile_type = prop::option::of(Just("process_cpu:cpu:nanoseconds::".to_string()));
    (profile_type, prop::collection::vec(matcher, 0..4)).prop_map(|(profile_type, matchers)| {
        Selector {
            profile_type,
            matchers,
        }
    })
}

proptest! {
    #[test]
    fn display_round_trips(sel in selector()) {
        let text = sel.to_string();
        prop_assert_eq!(parse_selector(&text), Ok(sel), "{}", text);
    }

    #[test]
    fn regex_display_round_trips(pattern in r"[a-z.*+?|()\\\[\]^$]{0,8}") {
        if let Ok(m) = LabelMatcher::new("l", MatchOp::Re, pattern) {
            let back = parse_selector(&format!("{{{m}}}")).unwrap();
            prop_assert_eq!(&back.matchers[0], &m);
        }
    }
}

#[test]
fn selector_matching_follows_prometheus() {
    let labels = vec![
        ("service_name".to_string(), "checkout".to_string()),
        ("span_name".to_string(), "POST /cart".to_string()),
    ];
    let yes = [
        r#"{}"#,
        r#"{service_name="checkout"}"#,
        r#"{service_name=~"check.*", span_name!~"GET .*"}"#,
        r#"{missing=""}"#,
        r#"{missing!="x"}"#,
        r#"{missing=~"|x"}"#,
    ];
    let no = [
        r#"{service_name="check"}"#,
        r#"{service_name=~"check"}"#,
        r#"{missing!=""}"#,
        r#"{missing=~".+"}"#,
        r#"{service_name="checkout", span_name="GET /"}"#,
    ];
    for s in yes {
        assert!(matches_all(&parsed(s).matchers, &labels), "{s}");
    }
    for s in no {
        assert!(!matches_all(&parsed(s).matchers, &labels), "{s}");
    }
}

/// Regexes whose cost has no bound are refused, naming why: past the length a matcher takes,
/// too deeply nested, or compiling past the program size. What Grafana builds from a
/// variable's many choices still passes.
#[test]
fn regexes_past_their_bounds_are_refused_by_name() {
    let many: Vec<String> = (0..200).map(|i| format!("svc-{i}")).collect();
    let grafana = format!("{{service_name=~\"{}\"}}", many.join("|"));
    assert!(grafana.len() < spanprof_store::matchers::MAX_REGEX_BYTES);
    parsed(&grafana);
    let branches: Vec<String> = (0..1000).map(|i| format!("value-{i}")).collect();
    let long = format!("{{a=~\"{}\"}}", branches.join("|"));
    let deep = format!("{{a=~\"{}x{}\"}}", "(".repeat(200), ")".repeat(200));
    let big = r"{a=~`(\w{1000}){1000}`}".to_owned();
    for (selector, says) in [
        (&long, "longer than the 4096 a matcher takes"),
        (&deep, "invalid regular expression"),
        (&big, "invalid regular expression"),
    ] {
        let e = parse_selector(selector).expect_err(&selector[..60.min(selector.len())]);
        let text = e.to_string();
        assert!(
            text.contains("invalid regular expression") && text.contains(says),
            "{:.300}",
            &text[text.len().saturating_sub(300)..]
        );
    }
}
