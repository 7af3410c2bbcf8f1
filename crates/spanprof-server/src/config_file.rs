//! The YAML configuration file of `spanprof serve --config FILE`: sections `server`,
//! `storage`, `receivers`, `processors`, `exporters`; every key optional (defaults as
//! without a file), unknown keys an error naming the key and its line, durations and sizes
//! in human units (`15s`, `512MiB`).
//!
//! Every key, with what it does, is in [`EXAMPLE`] (`config_example.yaml`, printed by
//! `spanprof serve --config-example`), which a test loads.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{ForwarderConfig, ServerConfig};

/// A configuration file with every key, commented: defaults or example values.
pub const EXAMPLE: &str = include_str!("config_example.yaml");

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed or has an unknown key or a bad value (the message has the line).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    server: crate::config::ServerSection,
    #[serde(default)]
    storage: crate::config::StorageConfig,
    #[serde(default)]
    receivers: crate::config::ReceiversConfig,
    #[serde(default)]
    processors: crate::config::ProcessorsConfig,
    #[serde(
        default,
        deserialize_with = "crate::config::exporters::deserialize_list"
    )]
    exporters: Vec<ForwarderConfig>,
    #[serde(default)]
    auth: crate::auth::config::AuthConfig,
}

/// A YAML error as a user reads it: serde's Rust type names in words, and a line for an
/// unknown top-level section (the parser gives none at the root).
fn worded(message: String, text: &str) -> String {
    let mut m = message
        .replace("expected usize", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("expected a boolean", "expected true or false")
        .replace(
            "expected struct File",
            "expected sections (server, storage, receivers, processors, exporters, auth) with their keys",
        );
    // A transform rule's error names the rule (`processors.transform[2] "pod" …`) after the
    // section's key.
    m = m.replace("processors: processors.transform[", "processors.transform[");
    // A section given a value: "expected struct Server" names our type.
    if let Some(at) = m.find("expected struct ") {
        let name_end = m[at + "expected struct ".len()..]
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .map_or(m.len(), |i| at + "expected struct ".len() + i);
        m.replace_range(at..name_end, "expected a mapping of keys");
    }
    if !m.contains(" at line ") {
        if let Some(name) = m
            .strip_prefix("unknown field `")
            .and_then(|r| r.split_once('`'))
            .map(|(name, _)| name.to_owned())
        {
            let line = text
                .lines()
                .position(|l| l.starts_with(&format!("{name}:")))
                .map(|i| i + 1);
            if let Some(line) = line {
                m.push_str(&format!(" at line {line} column 1"));
            }
        }
    }
    m
}

/// Reads `path` onto `base`: each section is read as the runtime config and replaces the
/// base's whole, its defaults where the file is silent (`auth`'s secrets are read and kept as
/// digests). Values are checked once flags are over them, by [`ServerConfig::validate`].
pub fn load(path: &Path, mut base: ServerConfig) -> Result<ServerConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let file: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_norway::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: worded(e.to_string(), &text),
        })?
    };
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    base.auth = std::sync::Arc::new(file.auth.load().map_err(invalid)?);
    base.server = file.server;
    if file.storage.backend == crate::config::remote::BackendKind::Remote {
        let section = file.storage.remote.clone().unwrap_or_default();
        base.remote = Some(section.load().map_err(|e| invalid(e.to_string()))?);
    }
    base.storage = file.storage;
    base.receivers = file.receivers;
    base.processors = file.processors;
    base.exporters = file.exporters;
    Ok(base)
}

#[cfg(test)]
mod tests;
