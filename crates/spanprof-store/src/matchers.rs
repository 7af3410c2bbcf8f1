//! Prometheus-style label selectors as Pyroscope takes them: `{service_name="api"}`,
//! `process_cpu:cpu:nanoseconds:cpu:nanoseconds{env=~"prod|staging",pod!~"test-.*"}`, or a
//! bare profile type / app name.
//!
//! Semantics follow Prometheus: a missing label matches as the empty string (so `{a=""}`
//! selects series without `a`), and regexes are fully anchored with `.` matching newlines
//! (`^(?s:…)$`). Regexes use `regex-lite`, which speaks RE2 syntax minus Unicode classes
//! (`\p{…}`); `\d`, `\w`, `\s` are ASCII-only, as in Go's RE2.

use std::fmt;

use regex_lite::Regex;

/// How a [`LabelMatcher`] compares a label value with its own value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`: the value equals.
    Eq,
    /// `!=`: the value differs.
    Ne,
    /// `=~`: the whole value matches the regex.
    Re,
    /// `!~`: the whole value does not match the regex.
    Nre,
}

impl fmt::Display for MatchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchOp::Eq => "=",
            MatchOp::Ne => "!=",
            MatchOp::Re => "=~",
            MatchOp::Nre => "!~",
        })
    }
}

/// One `name op "value"` condition on a label.
///
/// Build it with [`LabelMatcher::new`], which compiles regexes once. The fields are public
/// for reading; a regex matcher whose `value` is changed afterwards recompiles on every
/// [`matches`](Self::matches) call, so build a new one instead.
#[derive(Clone, Debug)]
pub struct LabelMatcher {
    /// Label name (any string; the selector syntax quotes names outside
    /// `[a-zA-Z_][a-zA-Z0-9_.]*`).
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
    /// The literal for `=`/`!=`, the regex source (unanchored, as written) for `=~`/`!~`.
    pub value: String,
    /// `^(?s:value)$` compiled, with the `value` it was compiled from.
    compiled: Option<(String, Regex)>,
}

impl PartialEq for LabelMatcher {
    fn eq(&self, other: &Self) -> bool {
        (&self.name, self.op, &self.value) == (&other.name, other.op, &other.value)
    }
}

impl Eq for LabelMatcher {}

/// Why a selector or matcher was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatcherError {
    /// The selector text does not parse.
    #[error("label selector {input:?}: {reason} at byte {offset_bytes}")]
    Syntax {
        /// The selector as given.
        input: String,
        /// Where parsing stopped, in bytes from the start of `input`.
        offset_bytes: usize,
        /// What was expected or wrong there.
        reason: String,
    },
    /// The value of a `=~` / `!~` matcher is not a valid regular expression.
    #[error("label matcher {name}{op}{pattern:?}: invalid regular expression: {message}")]
    Regex {
        /// Label name of the matcher.
        name: String,
        /// `Re` or `Nre`.
        op: MatchOp,
        /// The regex as given.
        pattern: String,
        /// The regex engine's complaint, on one line.
        message: String,
    },
}

impl LabelMatcher {
    /// A matcher; for [`MatchOp::Re`] / [`MatchOp::Nre`] `value` must compile on its own
    /// (so `a)|(b` is refused rather than slipping through the anchoring group).
    pub fn new(
        name: impl Into<String>,
        op: MatchOp,
        value: impl Into<String>,
    ) -> Result<Self, MatcherError> {
        let (name, value) = (name.into(), value.into());
        let compiled = match op {
            MatchOp::Eq | MatchOp::Ne => None,
            MatchOp::Re | MatchOp::Nre => match compile_anchored(&value) {
                Ok(re) => Some((value.clone(), re)),
                Err(e) => {
                    return Err(MatcherError::Regex {
                        name,
                        op,
                        pattern: value,
                        message: one_line(&e),
                    })
                }
            },
        };
        Ok(Self {
            name,
            op,
            value,
            compiled,
        })
    }

    /// Whether a series whose label `name` has `value` passes; a missing label (`None`)
    /// is treated as the empty string, as in Prometheus.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let value = value.unwrap_or("");
        match self.op {
            MatchOp::Eq => value == self.value,
            MatchOp::Ne => value != self.value,
            MatchOp::Re => self.regex_matches(value),
            MatchOp::Nre => !self.regex_matches(value),
        }
    }

    fn regex_matches(&self, value: &str) -> bool {
        match &self.compiled {
            Some((source, re)) if *source == self.value => re.is_match(value),
            // Fields were edited after `new`: correct but slow. An invalid regex matches
            // nothing, as the matcher could never have been built with it.
            _ => compile_anchored(&self.value).is_ok_and(|re| re.is_match(value)),
        }
    }
}

/// Longest regex a matcher takes, in bytes: each is run over every selected series' value (and
/// every span's, for span filters), and an alternation of 1,000 branches cost 6–7 s of CPU a
/// query. Longer than any selector Grafana builds from a variable's choices.
pub const MAX_REGEX_BYTES: usize = 4096;

/// Most memory a compiled regex may take (bytes), and its deepest nesting of groups.
const MAX_REGEX_PROGRAM_BYTES: usize = 1 << 20;
const MAX_REGEX_NESTING: u32 = 64;

fn compile_anchored(pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(format!(
            "it is {} bytes, longer than the {MAX_REGEX_BYTES} a matcher takes",
            pattern.len()
        ));
    }
    let build = |p: &str| {
        regex_lite::RegexBuilder::new(p)
            .size_limit(MAX_REGEX_PROGRAM_BYTES)
            .nest_limit(MAX_REGEX_NESTING)
            .build()
            .map_err(|e| e.to_string())
    };
    build(pattern)?;
    build(&format!("^(?s:{pattern})$"))
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl fmt::Display for LabelMatcher {
    /// Selector syntax that [`parse_selector`] reads back: `name="value"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_label_name(&self.name) {
            f.write_str(&self.name)?;
        } else {
            write_quoted(f, &self.name)?;
        }
        write!(f, "{}", self.op)?;
        write_quoted(f, &self.value)
    }
}

fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_control() => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

/// A parsed selector: the optional name before `{` and the matchers inside.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// The part before `{` (a profile type ID such as
    /// `process_cpu:cpu:nanoseconds:cpu:nanoseconds`, or an app name), if any.
    pub profile_type: Option<String>,
    /// The matchers between the braces, in the order written; all must hold.
    pub matchers: Vec<LabelMatcher>,
}

impl Selector {
    /// Whether a series with these `(name, value)` labels passes every matcher (the
    /// `profile_type` is not consulted: it is the caller's to map to labels).
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        matches_all(&self.matchers, labels)
    }
}

impl fmt::Display for Selector {
    /// Selector syntax that [`parse_selector`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.profile_type {
            f.write_str(name)?;
            if self.matchers.is_empty() {
                return Ok(());
            }
        }
        f.write_str("{")?;
        for (i, m) in self.matchers.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{m}")?;
        }
        f.write_str("}")
    }
}

/// Whether a series with these `(name, value)` labels passes every matcher (no matchers:
/// true). A label listed twice counts with its first value.
pub fn matches_all(matchers: &[LabelMatcher], labels: &[(String, String)]) -> bool {
    matchers.iter().all(|m| {
        let value = labels
            .iter()
            .find(|(k, _)| *k == m.name)
            .map(|(_, v)| v.as_str());
        m.matches(value)
    })
}

/// Parses `{}`, `{k="v",k2!~"re.*"}`, `name{…}` or a bare `name`.
///
/// - `name`: characters `[A-Za-z0-9_:./-]` (profile type IDs, app names);
/// - label names: `[a-zA-Z_][a-zA-Z0-9_.]*` (dots for OTel-style names such as
///   `service.name`), or any quoted string (Prometheus 3 style `{"my-label"="v"}`);
/// - values: `"…"` or `'…'` with Go escapes (`\"`, `\'`, `\\`, `\n`, `\t`, `\r`, `\a`,
///   `\b`, `\f`, `\v`, `\xHH`, `\NNN` octal, `\uHHHH`, `\UHHHHHHHH`), or raw `` `…` ``;
/// - whitespace anywhere between tokens, and a trailing comma before `}`.
///
/// The empty string is refused; pass `{}` to select everything.
pub fn parse_selector(s: &str) -> Result<Selector, MatcherError> {
    let mut p = Parser { input: s, pos: 0 };
    let selector = p.selector()?;
    p.skip_ws();
    if p.pos < s.len() {
        return Err(p.error("unexpected text after the selector"));
    }
    Ok(selector)
}

fn is_label_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(is_label_name_byte)
}

fn is_label_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.'
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-' | b'/')
}

struct Parser<'a> {
    input: &'a str,
    /// Byte offset of the next unread character.
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, reason: impl Into<String>) -> MatcherError {
        self.error_at(self.pos, reason)
    }

    fn error_at(&self, offset_bytes: usize, reason: impl Into<String>) -> MatcherError {
        MatcherError::Syntax {
            input: self.input.to_owned(),
            offset_bytes,
            reason: reason.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &str {
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
        &self.input[start..self.pos]
    }

    fn selector(&mut self) -> Result<Selector, MatcherError> {
        self.skip_ws();
        let name = self.take_while(is_name_byte);
        let profile_type = (!name.is_empty()).then(|| name.to_owned());
        self.skip_ws();
        if self.peek() != Some(b'{') {
            return match (&profile_type, self.peek()) {
                (Some(_), None) => Ok(Selector {
                    profile_type,
                    matchers: Vec::new(),
                }),
                // `span_name="x"`: a matcher without its braces.
                (Some(name), Some(b'=' | b'!')) => Err(self.error(format!(
                    "label matchers go in braces: `{{{name}{}}}`",
                    &self.input[self.pos..]
                ))),
                (Some(_), Some(_)) => Err(self.error("expected `{` or the end after the name")),
                (None, _) => Err(self.error("expected a profile type, an app name or `{`")),
            };
        }
        self.pos += 1;
        let mut matchers = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            matchers.push(self.matcher()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
        Ok(Selector {
            profile_type,
            matchers,
        })
    }

    fn matcher(&mut self) -> Result<LabelMatcher, MatcherError> {
        let name = match self.peek() {
            Some(b'"' | b'\'' | b'`') => self.quoted("a quoted label name")?,
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                self.take_while(is_label_name_byte).to_owned()
            }
            _ => return Err(self.error("expected a label name")),
        };
        self.skip_ws();
        let rest = &self.input.as_bytes()[self.pos..];
        let (op, len) = match rest {
            [b'=', b'~', ..] => (MatchOp::Re, 2),
            [b'!', b'=', ..] => (MatchOp::Ne, 2),
            [b'!', b'~', ..] => (MatchOp::Nre, 2),
            [b'=', ..] => (MatchOp::Eq, 1),
            _ => return Err(self.error("expected one of =, !=, =~, !~")),
        };
        self.pos += len;
        self.skip_ws();
        let value_at = self.pos;
        let value = self.quoted("a quoted value")?;
        LabelMatcher::new(name, op, value).map_err(|e| match e {
            MatcherError::Regex {
                pattern, message, ..
            } => self.error_at(
                value_at,
                format!("invalid regular expression {pattern:?}: {message}"),
            ),
            other => other,
        })
    }

    /// Reads a `"…"`, `'…'` or `` `…` `` string starting at `pos`.
    fn quoted(&mut self, what: &str) -> Result<String, MatcherError> {
        let open_at = self.pos;
        let quote = match self.peek() {
            Some(q @ (b'"' | b'\'' | b'`')) => q,
            _ => return Err(self.error(format!("expected {what}"))),
        };
        self.pos += 1;
        // Escapes such as \xff produce raw bytes; UTF-8 is checked once at the end.
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error_at(open_at, "unterminated quoted string"));
            };
            if b == quote {
                self.pos += 1;
                break;
            }
            if b == b'\\' && quote != b'`' {
                self.escape(&mut out)?;
            } else {
                out.push(b);
                self.pos += 1;
            }
        }
        String::from_utf8(out).map_err(|_| self.error_at(open_at, "quoted string is not UTF-8"))
    }

    /// Decodes the escape sequence at `pos` (a backslash) into `out`.
    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), MatcherError> {
        let at = self.pos;
        let bad = |p: &Self| p.error_at(at, "invalid escape sequence");
        let Some(c) = self.input.as_bytes().get(at + 1).copied() else {
            return Err(bad(self));
        };
        let simple = match c {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0b),
            b'\\' | b'"' | b'\'' => Some(c),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            self.pos += 2;
            return Ok(());
        }
        let (digits, radix) = match c {
            b'x' => (2, 16),
            b'u' => (4, 16),
            b'U' => (8, 16),
            b'0'..=b'7' => (3, 8),
            _ => return Err(bad(self)),
        };
        let first = if radix == 8 { at + 1 } else { at + 2 };
        let text = self
            .input
            .get(first..first + digits)
            .ok_or_else(|| bad(self))?;
        let code = u32::from_str_radix(text, radix)
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| bad(self))?;
        match c {
            b'x' | b'0'..=b'7' => out.push(u8::try_from(code).map_err(|_| bad(self))?),
            _ => {
                let ch = char::from_u32(code).ok_or_else(|| bad(self))?;
                out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
            }
        }
        self.pos = first + digits;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn m(name: &str, op: MatchOp, value: &str) -> LabelMatcher {
        LabelMatcher::new(name, op, value).unwrap()
    }

    #[test]
    fn ops_and_missing_labels() {
        assert!(m("a", MatchOp::Eq, "x").matches(Some("x")));
        assert!(!m("a", MatchOp::Eq, "x").matches(None));
        assert!(m("a", MatchOp::Eq, "").matches(None), "missing = empty");
        assert!(!m("a", MatchOp::Ne, "").matches(None));
        assert!(m("a", MatchOp::Ne, "x").matches(None));
        assert!(m("a", MatchOp::Re, "x|").matches(None));
        assert!(m("a", MatchOp::Nre, "x+").matches(None));
    }

    #[test]
    fn regexes_are_fully_anchored_and_dot_matches_newline() {
        let re = m("a", MatchOp::Re, "ab|cd");
        assert!(re.matches(Some("ab")) && re.matches(Some("cd")));
        assert!(!re.matches(Some("abd")) && !re.matches(Some("xcd")));
        assert!(m("a", MatchOp::Re, "a.c").matches(Some("a\nc")));
        assert!(!m("a", MatchOp::Nre, "prod-.*").matches(Some("prod-1")));
    }

    #[test]
    fn a_matcher_without_braces_is_shown_with_them() {
        let err = parse_selector(r#"span_name="GET /x""#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#"label matchers go in braces: `{span_name="GET /x"}` at byte 9"#),
            "{err}"
        );
        let err = parse_selector("region != eu").unwrap_err().to_string();
        assert!(err.contains("`{region!= eu}`"), "{err}");
    }

    #[test]
    fn invalid_regexes_are_refused() {
        let err = LabelMatcher::new("a", MatchOp::Re, "a)|(b").unwrap_err();
        assert!(matches!(err, MatcherError::Regex { .. }), "{err}");
        assert!(LabelMatcher::new("a", MatchOp::Nre, "(").is_err());
        // Equality values are literals, never compiled.
        assert!(LabelMatcher::new("a", MatchOp::Eq, "(").is_ok());
    }

    #[test]
    fn edited_fields_still_match_correctly() {
        let mut re = m("a", MatchOp::Re, "x");
        re.value = "y".into();
        assert!(re.matches(Some("y")) && !re.matches(Some("x")));
        let mut eq = m("a", MatchOp::Eq, "a+");
        eq.op = MatchOp::Re;
        assert!(eq.matches(Some("aaa")));
    }

    #[test]
    fn matches_all_uses_the_first_value_of_a_label() {
        let ls = labels(&[("service_name", "api"), ("env", "prod"), ("env", "dev")]);
        let ok = [
            m("service_name", MatchOp::Eq, "api"),
            m("env", MatchOp::Re, "prod"),
        ];
        assert!(matches_all(&ok, &ls));
        assert!(!matches_all(&[m("env", MatchOp::Eq, "dev")], &ls));
        assert!(matches_all(&[], &ls));
        assert!(matches_all(&[m("pod", MatchOp::Eq, "")], &ls));
    }

    #[test]
    fn display_uses_selector_syntax() {
        assert_eq!(m("a", MatchOp::Nre, "x\"y").to_string(), r#"a!~"x\"y""#);
        assert_eq!(
            m("my-label", MatchOp::Eq, "v").to_string(),
            r#""my-label"="v""#
        );
    }
}
