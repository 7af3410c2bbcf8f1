//! The `receivers` section: the Go `/debug/pprof` endpoints to pull and how collectors share
//! them. Read from the file as is and run with; its `Default` is the one set of defaults.

use serde::{Deserialize, Deserializer, Serialize};

use super::replicas::Replicas;
use super::{ConfigError, ScrapeTarget};

/// `receivers`: what is pulled (pushed data needs no setting here).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReceiversConfig {
    /// Targets to pull profiles from (`--scrape` adds some), none by default.
    #[serde(
        deserialize_with = "scrape_targets",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub scrape: Vec<ScrapeTarget>,
    /// How many collectors share `scrape` (`--replicas`); with `replica`, this process
    /// scrapes only the targets that hash to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// This collector's index among `replicas`, 0 to replicas-1 (`--replica`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
}

impl ReceiversConfig {
    /// This process's share of `scrape` when several collectors split one list (`None`:
    /// it scrapes every target); an error names the keys and flags.
    pub fn replica_set(&self) -> Result<Option<Replicas>, ConfigError> {
        match (self.replicas, self.replica) {
            (None, None) => Ok(None),
            (count, index) => Replicas::new(count.unwrap_or(1), index.unwrap_or(0))
                .map(Some)
                .map_err(|e| {
                    format!("receivers.replicas / receivers.replica (--replicas, --replica): {e}")
                        .into()
                }),
        }
    }
}

/// Scrape targets as written, each with its URL made a base URL and its credentials moved
/// to a header, as [`ScrapeTarget::new`] does.
fn scrape_targets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ScrapeTarget>, D::Error> {
    Ok(Vec::<ScrapeTarget>::deserialize(d)?
        .into_iter()
        .map(ScrapeTarget::normalized)
        .collect())
}
