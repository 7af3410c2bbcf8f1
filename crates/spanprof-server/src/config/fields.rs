//! Serde forms of runtime field types as the config file writes them: a `Duration` in
//! readable units (`15s`), a list of string pairs as a mapping (`{env: prod}`).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::units::{ReadableDuration, ReadableSize};

/// A `Duration` field read and written as a [`ReadableDuration`] (`#[serde(with = …)]`).
pub mod duration {
    use super::{Deserialize, Deserializer, Duration, ReadableDuration, Serialize, Serializer};

    /// Writes `d` as `15s`, `20ms`, `7d`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        ReadableDuration(*d).serialize(s)
    }

    /// Reads `15s`, `20ms`, `7d`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        ReadableDuration::deserialize(d).map(|r| r.0)
    }
}

/// A byte count read and written as a [`ReadableSize`] (`1GiB`).
pub mod size {
    use super::{Deserialize, Deserializer, ReadableSize, Serialize, Serializer};

    /// Writes `n` as `1GiB`, `512MiB`.
    pub fn serialize<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
        ReadableSize(*n).serialize(s)
    }

    /// Reads `1GiB`, `512MiB`, a bare number of bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        ReadableSize::deserialize(d).map(|r| r.0)
    }
}

/// A byte count held as `usize` (a buffer's size), read and written as a [`ReadableSize`].
pub mod size_usize {
    use super::{Deserialize, Deserializer, ReadableSize, Serialize, Serializer};

    /// Writes `n` as `32MiB`.
    pub fn serialize<S: Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        ReadableSize(*n as u64).serialize(s)
    }

    /// Reads `32MiB`; a size past the address space is as large as it can be.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        ReadableSize::deserialize(d).map(|r| usize::try_from(r.0).unwrap_or(usize::MAX))
    }
}

/// Pairs of strings (labels, headers) read and written as a YAML mapping, in key order.
pub mod string_map {
    use std::collections::BTreeMap;

    use super::{Deserialize, Deserializer, Serializer};

    /// Writes the pairs as a mapping.
    pub fn serialize<S: Serializer>(pairs: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
    }

    /// Reads a mapping of strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .collect())
    }
}
