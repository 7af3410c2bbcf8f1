//! The `storage` section: where the embedded store keeps its data and how much it may keep.
//! Read from the file as is and run with; its `Default` is the one set of defaults.

use std::path::PathBuf;

use serde::{Deserialize, Serialize, Serializer};
use spanprof_store::store::SeriesLimits;

use super::remote::{BackendKind, RemoteSection};
use super::units::{ReadableDuration, ReadableSize};
use super::ConfigError;

/// `storage`: the embedded store and the query backend.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Write what arrives to the embedded store (`--no-store` turns it off). Unset: yes,
    /// unless `backend` is remote (a query frontend keeps nothing unless told to); `false`
    /// runs a pure collector that only forwards.
    #[serde(serialize_with = "enabled_as_default")]
    pub enabled: Option<bool>,
    /// Store directory (`--data`).
    pub dir: PathBuf,
    /// Data older than this is deleted, whole segments (`--retention`); unset keeps
    /// everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<ReadableDuration>,
    /// Oldest segments are deleted while the store is larger than this (`--max-size`);
    /// unset: no size limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<ReadableSize>,
    /// Oldest segments are also deleted while the data directory's volume has less than
    /// this available and less than 5 % of its size (0 = never; 10 GiB, as Pyroscope's): a
    /// full disk fails every write.
    pub min_free_disk: ReadableSize,
    /// A segment is sealed past this size (16 MiB). Memory follows it: the open segment's
    /// index and the one being sealed are in memory, about 4 MiB of RSS per MiB of segment
    /// at one span per 2.5 samples.
    pub segment_size: ReadableSize,
    /// Series the store holds at most (see [`SeriesLimits::max_series`]).
    pub max_series: usize,
    /// Bytes the store's symbols may take (see `StoreConfig::max_symbol_bytes`).
    pub max_symbols_size: ReadableSize,
    /// Which source answers queries: the embedded store, or a Pyroscope and a Tempo.
    pub backend: BackendKind,
    /// Where the remote Pyroscope and Tempo are (`backend: remote`); loaded into
    /// [`super::ServerConfig::remote`], so not written back.
    #[serde(skip_serializing)]
    pub remote: Option<RemoteSection>,
}

/// Smallest store segment.
pub const MIN_SEGMENT_BYTES: u64 = 64 << 10;

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            enabled: None,
            dir: PathBuf::from("./spanprof-data"),
            retention: None,
            max_size: None,
            min_free_disk: ReadableSize(10 << 30),
            segment_size: ReadableSize(16 << 20),
            max_series: SeriesLimits::default().max_series,
            max_symbols_size: ReadableSize(128 << 20),
            backend: BackendKind::Embedded,
            remote: None,
        }
    }
}

impl StorageConfig {
    /// Whether what arrives is written to the embedded store.
    pub fn store_enabled(&self) -> bool {
        self.enabled
            .unwrap_or(self.backend == BackendKind::Embedded)
    }

    /// Refuses sizes that cannot work, naming the key and flag: a retention of 0 deleted
    /// data as it came, and a tiny segment size started a segment at every write.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retention.is_some_and(|r| r.0.is_zero()) {
            return Err(
                "storage.retention (--retention) 0s would delete the data as it is \
                 written: give an age such as 7d, or leave it out to keep data whatever its age"
                    .into(),
            );
        }
        if self.max_size == Some(ReadableSize(0)) {
            return Err(
                "storage.max_size (--max-size) 0 would delete the data as it is \
                 written: give a size such as 20GiB, or leave it out for no size limit"
                    .into(),
            );
        }
        if self.segment_size.0 < MIN_SEGMENT_BYTES {
            return Err(format!(
                "storage.segment_size {} bytes: must be at least 64KiB (retention deletes \
                 whole segments; smaller ones start a file at nearly every write)",
                self.segment_size.0
            )
            .into());
        }
        if self.remote.is_some() && self.backend != BackendKind::Remote {
            return Err(
                "storage.remote is set but storage.backend is not remote: add \
                 `backend: remote` to use it, or remove the section"
                    .into(),
            );
        }
        Ok(())
    }
}

/// `enabled` as the example writes its default: what an unset value means with the default
/// backend.
fn enabled_as_default<S: Serializer>(enabled: &Option<bool>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(enabled.unwrap_or(true))
}
