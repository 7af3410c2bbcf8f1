//! Series labels as Pyroscope takes them: the `name=app{k=v,…}` label set of `/ingest`, which
//! labels a client may set, and label-name sanitizing (`service.name` → `service_name`).

use std::collections::BTreeMap;

/// The label Pyroscope keeps the service in.
pub const SERVICE_NAME: &str = "service_name";
/// The label Pyroscope keeps the profile "metric" name in (`process_cpu`, `memory`, …).
pub const METRIC_NAME: &str = "__name__";
/// The one reserved (`__…`) label a client may set.
const SESSION_ID: &str = "__session_id__";

/// The parsed `name` parameter: the app name and its tags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSet {
    /// The app name (what precedes `{`), trimmed.
    pub app: String,
    /// The tags, by key (a repeated key keeps its last value, as Pyroscope does).
    pub tags: BTreeMap<String, String>,
}

/// Why a `name` parameter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelSetError {
    /// The app name is empty.
    #[error("service name is required")]
    MissingApp,
    /// The app name has a character outside `[A-Za-z0-9_.\-/]`.
    #[error("invalid service name: {name}: character is not allowed: {bad:?}")]
    BadApp {
        /// The app name.
        name: String,
        /// The first character refused.
        bad: char,
    },
    /// A tag key is empty.
    #[error("label name is required")]
    MissingKey,
    /// A tag key has a character outside `[A-Za-z0-9_.]`.
    #[error("invalid label name: {key}: character is not allowed: {bad:?}")]
    BadKey {
        /// The key.
        key: String,
        /// The first character refused.
        bad: char,
    },
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

fn is_app_char(c: char) -> bool {
    is_label_char(c) || c == '-' || c == '/'
}

impl LabelSet {
    /// Parses `app{k1=v1,k2=v2}`. The app name ends at the first `{`; pairs are split at `,`
    /// and end at `}`; keys and values are trimmed; there is no escaping (a value cannot hold
    /// `,` or `}`). A pair without `=` is ignored, and so is anything after the closing `}`. A
    /// tag with an empty value is no tag (as in Prometheus, whose selectors match an empty
    /// label as a missing one): `service_name=` stored the service `""`, which no query could
    /// select, where the app name names it.
    pub fn parse(name: &str) -> Result<LabelSet, LabelSetError> {
        let (app, rest) = match name.find('{') {
            Some(i) => (&name[..i], Some(&name[i + 1..])),
            None => (name, None),
        };
        let app = app.trim();
        if app.is_empty() {
            return Err(LabelSetError::MissingApp);
        }
        if let Some(bad) = app.chars().find(|&c| !is_app_char(c)) {
            return Err(LabelSetError::BadApp {
                name: app.to_owned(),
                bad,
            });
        }
        let mut set = LabelSet {
            app: app.to_owned(),
            tags: BTreeMap::new(),
        };
        let Some(rest) = rest else { return Ok(set) };
        let inner = rest.find('}').map_or(rest, |end| &rest[..end]);
        for pair in inner.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            if key == METRIC_NAME {
                // Pyroscope lets a `__name__` tag replace the app name.
                if !value.is_empty() {
                    set.app = value.to_owned();
                }
                continue;
            }
            if key.is_empty() {
                return Err(LabelSetError::MissingKey);
            }
            if let Some(bad) = key.chars().find(|&c| !is_label_char(c)) {
                return Err(LabelSetError::BadKey {
                    key: key.to_owned(),
                    bad,
                });
            }
            if !value.is_empty() {
                set.tags.insert(key.to_owned(), value.to_owned());
            }
        }
        if set.app.is_empty() {
            return Err(LabelSetError::MissingApp);
        }
        Ok(set)
    }
}

/// Whether a client-set label is kept: reserved `__…` labels are Pyroscope's own, except the
/// session id.
pub fn allowed(name: &str) -> bool {
    !name.starts_with("__") || name == SESSION_ID
}

/// Pyroscope's legacy label-name sanitizing: `.` becomes `_` (`service.name` →
/// `service_name`). `None` for names that stay invalid (empty, or characters other than
/// `[A-Za-z0-9_.]`, or a leading digit).
pub fn sanitize(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() || !name.chars().all(is_label_char) {
        return None;
    }
    Some(name.replace('.', "_"))
}

/// Why series labels cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// A name Pyroscope does not take (see [`sanitize`]).
    #[error("invalid label name {0:?}")]
    InvalidName(String),
    /// Two labels that are one once sanitized (`a.b`, `a_b`), with different values.
    #[error("labels {name:?} and {clean:?} have different values ({value:?} and {other:?})")]
    Conflict {
        /// The name as sent.
        name: String,
        /// The name it becomes, which another label has.
        clean: String,
        /// Its value.
        value: String,
        /// The other label's value.
        other: String,
    },
}

/// Series labels after sanitizing: names with `.` become `_`; two labels that end up with one
/// name must agree on the value.
pub fn sanitize_all(
    labels: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, LabelError> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in labels {
        let Some(clean) = sanitize(&name) else {
            return Err(LabelError::InvalidName(name));
        };
        match out.get(&clean) {
            Some(v) if *v != value => {
                return Err(LabelError::Conflict {
                    name,
                    clean,
                    value,
                    other: v.clone(),
                })
            }
            _ => {
                out.insert(clean, value);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_app_and_tags() {
        let s = LabelSet::parse(
            "my-app.cpu{__session_id__=abc, env = prod ,otel.scope.name=com.grafana.pyroscope/go}",
        )
        .unwrap();
        assert_eq!(s.app, "my-app.cpu");
        assert_eq!(s.tags["env"], "prod");
        assert_eq!(s.tags["__session_id__"], "abc");
        assert_eq!(s.tags["otel.scope.name"], "com.grafana.pyroscope/go");
        assert_eq!(LabelSet::parse("app").unwrap().tags.len(), 0);
        assert_eq!(LabelSet::parse("app{}").unwrap().app, "app");
        // No `=`: ignored; after `}`: ignored.
        let s = LabelSet::parse("app{x,a=1}{b=2}").unwrap();
        assert_eq!(s.tags.len(), 1);
        assert_eq!(
            LabelSet::parse("a{__name__=b}").unwrap().app,
            "b",
            "a __name__ tag names the app"
        );
        // An empty value is no tag: the app name stays the service.
        let s = LabelSet::parse("a{service_name=,env= ,__name__=}").unwrap();
        assert_eq!((s.app.as_str(), s.tags.len()), ("a", 0));
        assert!(matches!(
            LabelSet::parse("app{a-b=}"),
            Err(LabelSetError::BadKey { bad: '-', .. })
        ));
    }

    #[test]
    fn refuses_what_pyroscope_refuses() {
        assert_eq!(LabelSet::parse(""), Err(LabelSetError::MissingApp));
        assert_eq!(LabelSet::parse(" {a=b}"), Err(LabelSetError::MissingApp));
        assert!(matches!(
            LabelSet::parse("my app"),
            Err(LabelSetError::BadApp { bad: ' ', .. })
        ));
        assert!(matches!(
            LabelSet::parse("app{a-b=1}"),
            Err(LabelSetError::BadKey { bad: '-', .. })
        ));
        assert_eq!(LabelSet::parse("app{=1}"), Err(LabelSetError::MissingKey));
    }

    #[test]
    fn sanitizes_like_pyroscope() {
        assert_eq!(sanitize("service.name").as_deref(), Some("service_name"));
        assert_eq!(sanitize("1abc"), None);
        assert_eq!(sanitize("a-b"), None);
        assert!(allowed("__session_id__") && allowed("env") && !allowed("__delta__"));
        let ok = sanitize_all([("a.b".into(), "1".into()), ("a_b".into(), "1".into())]).unwrap();
        assert_eq!(ok.len(), 1);
        assert!(sanitize_all([("a.b".into(), "1".into()), ("a_b".into(), "2".into())]).is_err());
    }
}
