//! The transform stage (`processors.transform`): rules applied, in order, to what receivers
//! accepted, before the sinks (the store, the forwarders) see it. Each rule does one thing:
//!
//! - `set_resource`: add or overwrite a resource attribute of profiles and spans, with a
//!   static `value` or one from the environment (`value_from_env`, as Kubernetes' downward
//!   API gives a pod its name); `overwrite: false` only adds it where it is missing;
//! - `rename_label`, `drop_label`, `hash_label`: a sample label (`label`, or `from` → `to`);
//!   a hashed value is 16 hex digits of a 64-bit hash (it hides a value and keeps equal ones
//!   equal; low-entropy values can be guessed back);
//! - `drop_profiles`, `drop_spans`: drop what matches a label `selector` (`{k="v", …}`, as
//!   in queries): a profile's labels are its resource attributes (each also with `.` written
//!   `_`, so `service_name`) and its own attributes; a span's are its resource and span
//!   attributes, `service_name` and `span_name`.
//!
//! Rules are checked at start; an error names the rule (`processors.transform[2] "pod"
//! (set_resource): …`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spanprof_format::otlp::{any_value, AnyValue, KeyValue};
use spanprof_store::matchers::{parse_selector, Selector};

use crate::work::Work;

/// One rule as the configuration file writes it (`processors.transform[i]`).
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in errors and logs (else its index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it does: set_resource, rename_label, drop_label, hash_label, drop_profiles,
    /// drop_spans.
    pub action: String,
    /// set_resource: the attribute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// set_resource: a static value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// set_resource: the environment variable holding the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from_env: Option<String>,
    /// set_resource: replace a value already there (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// drop_label, hash_label: the sample label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// rename_label: the label's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// rename_label: its new name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// drop_profiles, drop_spans: the label selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

/// What one rule does.
#[derive(Debug, Clone)]
pub enum Action {
    /// Sets resource attribute `key` to `value` (where missing only, unless `overwrite`).
    SetResource {
        /// The attribute.
        key: String,
        /// Its value.
        value: String,
        /// Replace a value already there.
        overwrite: bool,
    },
    /// Renames sample label `from` to `to`.
    RenameLabel {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
    },
    /// Drops sample label `0`.
    DropLabel(String),
    /// Replaces the values of sample label `0` by their hashes.
    HashLabel(String),
    /// Drops the profiles that match.
    DropProfiles(Selector),
    /// Drops the spans that match.
    DropSpans(Selector),
}

/// A checked rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `processors.transform[i] "name" (action)`, for logs and errors.
    pub id: String,
    /// What it does.
    pub action: Action,
    /// The rule as the file wrote it, so the section serialises back as read.
    pub config: RuleConfig,
}

/// A rule of `processors.transform` that cannot work: which rule, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {problem}")]
pub struct RuleError {
    /// The rule: `processors.transform[2] "name" (drop_label)`.
    pub rule: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Rule {
    /// Checks rule `index` of the file; `env` reads an environment variable. The error
    /// names the rule and what is wrong.
    pub fn from_config(
        index: usize,
        c: RuleConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Rule, RuleError> {
        let id = match &c.name {
            Some(n) => format!("processors.transform[{index}] {n:?} ({})", c.action),
            None => format!("processors.transform[{index}] ({})", c.action),
        };
        let config = c.clone();
        let fail = |problem: String| RuleError {
            rule: id.clone(),
            problem,
        };
        let need = |field: &Option<String>, what: &str| -> Result<String, RuleError> {
            match field.as_deref().map(str::trim) {
                Some(v) if !v.is_empty() => Ok(v.to_owned()),
                _ => Err(fail(format!("needs {what}"))),
            }
        };
        let action = match c.action.as_str() {
            "set_resource" => {
                let key = need(&c.key, "key (the resource attribute)")?;
                let value = match (&c.value, &c.value_from_env) {
                    (Some(v), None) => v.clone(),
                    (None, Some(var)) => env(var).ok_or_else(|| {
                        fail(format!(
                            "value_from_env: the environment variable {var} is not set"
                        ))
                    })?,
                    _ => {
                        return Err(fail(
                            "needs one of value (static) or value_from_env (an environment \
                             variable's name)"
                                .into(),
                        ))
                    }
                };
                Action::SetResource {
                    key,
                    value,
                    overwrite: c.overwrite.unwrap_or(true),
                }
            }
            "rename_label" => {
                let (from, to) = (need(&c.from, "from")?, need(&c.to, "to")?);
                if from == to {
                    return Err(fail(format!("from and to are both {from:?}")));
                }
                Action::RenameLabel { from, to }
            }
            "drop_label" => Action::DropLabel(need(&c.label, "label")?),
            "hash_label" => Action::HashLabel(need(&c.label, "label")?),
            "drop_profiles" | "drop_spans" => {
                let text = need(&c.selector, "selector, e.g. '{service_name=\"x\"}'")?;
                let selector =
                    parse_selector(&text).map_err(|e| fail(format!("selector {text:?}: {e}")))?;
                if c.action == "drop_profiles" {
                    Action::DropProfiles(selector)
                } else {
                    Action::DropSpans(selector)
                }
            }
            other => {
                return Err(fail(format!(
                    "unknown action {other:?}; one of set_resource, rename_label, drop_label, \
                     hash_label, drop_profiles, drop_spans"
                )))
            }
        };
        let given = [
            ("key", c.key.is_some()),
            ("value", c.value.is_some()),
            ("value_from_env", c.value_from_env.is_some()),
            ("overwrite", c.overwrite.is_some()),
            ("label", c.label.is_some()),
            ("from", c.from.is_some()),
            ("to", c.to.is_some()),
            ("selector", c.selector.is_some()),
        ];
        let takes: &[&str] = match &action {
            Action::SetResource { .. } => &["key", "value", "value_from_env", "overwrite"],
            Action::RenameLabel { .. } => &["from", "to"],
            Action::DropLabel(_) | Action::HashLabel(_) => &["label"],
            Action::DropProfiles(_) | Action::DropSpans(_) => &["selector"],
        };
        if let Some((field, _)) = given.iter().find(|(f, on)| *on && !takes.contains(f)) {
            return Err(fail(format!(
                "{field} is not a setting of {} (it takes {})",
                c.action,
                takes.join(", ")
            )));
        }
        Ok(Rule { id, action, config })
    }
}

/// The rules, in order; cheap to clone. Empty: nothing is changed. Read from the file's
/// `processors.transform` list, each rule checked as it is read (an error names the rule and
/// its line), and written back as that list.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "Vec<RuleConfig>")]
pub struct Transform {
    rules: Arc<[Rule]>,
}

impl Transform {
    /// Checks every rule of the file, reading `value_from_env` from the process's
    /// environment.
    pub fn from_config(rules: Vec<RuleConfig>) -> Result<Transform, RuleError> {
        let env = |k: &str| std::env::var(k).ok();
        let rules: Vec<Rule> = rules
            .into_iter()
            .enumerate()
            .map(|(i, c)| Rule::from_config(i, c, &env))
            .collect::<Result<_, _>>()?;
        Ok(Transform {
            rules: rules.into(),
        })
    }

    /// The rules as the file writes them.
    pub fn configs(&self) -> impl Iterator<Item = &RuleConfig> {
        self.rules.iter().map(|r| &r.config)
    }

    /// The rules, checked.
    pub fn new(rules: Vec<Rule>) -> Transform {
        Transform {
            rules: rules.into(),
        }
    }

    /// True when there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Applies every rule to `work`, in order.
    pub fn apply(&self, work: &mut Work) {
        if self.rules.is_empty() {
            return;
        }
        match work {
            Work::Profiles(data, _) => {
                for rule in self.rules.iter() {
                    profiles::apply(&rule.action, data);
                }
            }
            Work::Spans(records, request) => {
                for rule in self.rules.iter() {
                    spans::apply(&rule.action, records, request.as_mut());
                }
            }
        }
    }
}

impl TryFrom<Vec<RuleConfig>> for Transform {
    type Error = RuleError;
    fn try_from(rules: Vec<RuleConfig>) -> Result<Transform, RuleError> {
        Transform::from_config(rules)
    }
}

impl Serialize for Transform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.configs())
    }
}

mod profiles;
mod spans;

/// A value's hash as 16 hex digits (FNV-1a, then a finaliser).
fn hash_value(v: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in v.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    format!("{h:016x}")
}

/// An attribute value as text (what selectors match).
fn value_text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

/// Adds `key=value` to `labels`, and again with `.` written `_` when it has dots.
fn push_label(labels: &mut Vec<(String, String)>, key: &str, value: String) {
    if key.contains('.') {
        labels.push((key.replace('.', "_"), value.clone()));
    }
    labels.push((key.to_owned(), value));
}

/// Sets `key` in `attributes` (where missing only, unless `overwrite`); whether it did.
fn set_attribute(attributes: &mut Vec<KeyValue>, key: &str, value: &str, overwrite: bool) -> bool {
    match attributes.iter_mut().find(|kv| kv.key == key) {
        Some(_) if !overwrite => false,
        Some(kv) => {
            *kv = spanprof_format::otlp::string_kv(key, value);
            true
        }
        None => {
            attributes.push(spanprof_format::otlp::string_kv(key, value));
            true
        }
    }
}

#[cfg(test)]
mod tests;
