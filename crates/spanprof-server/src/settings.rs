//! Named settings that clients keep on the server: what Pyroscope's `settings.v1` API holds
//! per tenant, and what Grafana's Profiles Drilldown app reads each time it opens and writes
//! from its settings page (`pluginSettings`: the app's options as a JSON text). Served by
//! [`crate::api::pyroscope_query`]; kept in `settings.json` in the data directory, replaced
//! whole and durably on every change (a few small entries, changed by hand).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The file in the data directory.
pub const FILE: &str = "settings.json";

/// Settings kept at most: the file stays small whatever clients send.
pub const MAX_SETTINGS: usize = 1024;
/// Longest name, bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest value, bytes (Drilldown's is about 100).
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// One setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// Its name (`pluginSettings`).
    pub name: String,
    /// Its value, text the client reads as it likes.
    pub value: String,
    /// When it was last changed, ms since the epoch.
    pub modified_at_ms: i64,
}

/// Why a setting was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// The setting itself is not acceptable (no name, too long).
    #[error("{0}")]
    Invalid(String),
    /// The stored setting was changed later than this write says it was (Pyroscope's
    /// answer, `already_exists`): an editor that read an older value does not overwrite a
    /// newer one.
    #[error(
        "failed to update {name}: newer update already written (stored at {stored_ms} ms, \
         this one at {given_ms} ms)"
    )]
    Older {
        /// The setting.
        name: String,
        /// When the stored value was written, ms since the epoch.
        stored_ms: i64,
        /// When this one says it was, ms since the epoch.
        given_ms: i64,
    },
    /// [`MAX_SETTINGS`] are stored and this would be another.
    #[error("{MAX_SETTINGS} settings are stored, the most kept; {0} would be another")]
    TooMany(String),
    /// The file could not be written; nothing changed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The file's content: read as owned settings, written from borrowed ones.
#[derive(Serialize, Deserialize)]
struct Stored<S> {
    settings: Vec<S>,
}

/// The settings of this server.
#[derive(Debug)]
pub struct Settings {
    dir: PathBuf,
    /// By name, as the file holds them; held while the file is written, so writes reach it
    /// in the order they are answered.
    entries: Mutex<BTreeMap<String, Setting>>,
}

impl Settings {
    /// The settings stored in `dir`. A file that cannot be read as settings is moved aside
    /// (`settings.json.damaged`, logged) rather than stop the server or be overwritten
    /// unseen: settings are a convenience of clients, the server runs without them.
    pub fn open(dir: &Path) -> Settings {
        let path = dir.join(FILE);
        let entries = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Stored<Setting>>(&bytes) {
                Ok(stored) => stored
                    .settings
                    .into_iter()
                    .map(|s| (s.name.clone(), s))
                    .collect(),
                Err(e) => {
                    let aside = dir.join(format!("{FILE}.damaged"));
                    let moved = std::fs::rename(&path, &aside);
                    tracing::warn!(
                        path = %path.display(),
                        error = %e,
                        moved_to = %aside.display(),
                        moved = moved.is_ok(),
                        "the settings file is not readable: starting without settings"
                    );
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the settings file cannot be read: starting without settings");
                BTreeMap::new()
            }
        };
        Settings {
            dir: dir.to_owned(),
            entries: Mutex::new(entries),
        }
    }

    /// Every setting, in name order.
    pub fn all(&self) -> Vec<Setting> {
        self.lock().values().cloned().collect()
    }

    /// Stores `setting` (a `modified_at_ms` of 0 or less is `now_ms`) durably and returns it
    /// as stored. Blocks on the disk: call it off the async workers.
    pub fn set(&self, mut setting: Setting, now_ms: i64) -> Result<Setting, SetError> {
        if setting.name.is_empty() {
            return Err(SetError::Invalid("the setting has no name".to_owned()));
        }
        if setting.name.len() > MAX_NAME_BYTES {
            return Err(SetError::Invalid(format!(
                "the setting's name is {} bytes, more than {MAX_NAME_BYTES}",
                setting.name.len()
            )));
        }
        if setting.value.len() > MAX_VALUE_BYTES {
            return Err(SetError::Invalid(format!(
                "the value of {} is {} bytes, more than {MAX_VALUE_BYTES}",
                setting.name,
                setting.value.len()
            )));
        }
        if setting.modified_at_ms <= 0 {
            setting.modified_at_ms = now_ms;
        }
        let mut entries = self.lock();
        match entries.get(&setting.name) {
            Some(old) if old.modified_at_ms > setting.modified_at_ms => {
                return Err(SetError::Older {
                    name: setting.name,
                    stored_ms: old.modified_at_ms,
                    given_ms: setting.modified_at_ms,
                })
            }
            None if entries.len() >= MAX_SETTINGS => return Err(SetError::TooMany(setting.name)),
            _ => {}
        }
        let previous = entries.insert(setting.name.clone(), setting.clone());
        let stored = Stored {
            settings: entries.values().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&stored).expect("settings serialize");
        // The data directory is there: the store made it before the server started.
        if let Err(source) = crate::durable::replace(&self.dir, FILE, &bytes) {
            // Not written: the map goes back to what the file holds.
            match previous {
                Some(old) => entries.insert(setting.name, old),
                None => entries.remove(&setting.name),
            };
            return Err(SetError::Write {
                path: self.dir.join(FILE).display().to_string(),
                source,
            });
        }
        tracing::info!(name = %setting.name, bytes = setting.value.len(), "setting stored");
        Ok(setting)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Setting>> {
        // A panic while holding it (in serializing or writing) can leave a setting in the map
        // that the file lacks; the next write puts it there.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(name: &str, value: &str, at: i64) -> Setting {
        Setting {
            name: name.to_owned(),
            value: value.to_owned(),
            modified_at_ms: at,
        }
    }

    #[test]
    fn settings_outlive_the_server_and_an_older_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings::open(dir.path());
        assert_eq!(s.all(), []);
        let stored = s
            .set(setting("pluginSettings", "{\"maxNodes\":16384}", 0), 1_000)
            .unwrap();
        assert_eq!(stored.modified_at_ms, 1_000, "0 is now");
        s.set(setting("another", "x", 900), 1_001).unwrap();
        let err = s
            .set(setting("pluginSettings", "old", 999), 1_002)
            .unwrap_err();
        assert!(
            matches!(
                err,
                SetError::Older {
                    stored_ms: 1_000,
                    given_ms: 999,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "failed to update pluginSettings: newer update already written (stored at 1000 ms, this one at 999 ms)"
        );
        // The same time is not older (Pyroscope refuses only strictly older writes).
        s.set(
            setting("pluginSettings", "{\"maxNodes\":8192}", 1_000),
            1_003,
        )
        .unwrap();
        drop(s);
        let again = Settings::open(dir.path());
        assert_eq!(
            again.all(),
            [
                setting("another", "x", 900),
                setting("pluginSettings", "{\"maxNodes\":8192}", 1_000)
            ]
        );
    }

    #[test]
    fn bad_settings_are_refused_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings::open(dir.path());
        for bad in [
            setting("", "x", 1),
            setting(&"n".repeat(MAX_NAME_BYTES + 1), "x", 1),
            setting("big", &"v".repeat(MAX_VALUE_BYTES + 1), 1),
        ] {
            assert!(matches!(s.set(bad, 5), Err(SetError::Invalid(_))));
        }
        for i in 0..MAX_SETTINGS {
            s.set(setting(&format!("s{i:04}"), "", 1), 5).unwrap();
        }
        assert!(matches!(
            s.set(setting("one-more", "", 1), 5),
            Err(SetError::TooMany(_))
        ));
        // An existing one still changes.
        s.set(setting("s0000", "changed", 2), 5).unwrap();
        assert_eq!(Settings::open(dir.path()).all().len(), MAX_SETTINGS);
    }

    #[test]
    fn a_damaged_file_is_moved_aside_not_overwritten_unseen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"{\"settings\": [trunc").unwrap();
        let s = Settings::open(dir.path());
        assert_eq!(s.all(), []);
        assert_eq!(
            std::fs::read(dir.path().join(format!("{FILE}.damaged"))).unwrap(),
            b"{\"settings\": [trunc"
        );
        s.set(setting("pluginSettings", "{}", 3), 5).unwrap();
        assert_eq!(Settings::open(dir.path()).all().len(), 1);
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings::open(dir.path());
        s.set(setting("kept", "1", 1), 5).unwrap();
        // The temporary file's name taken by a directory: creating it fails.
        std::fs::create_dir(dir.path().join(format!("{FILE}.tmp"))).unwrap();
        let err = s.set(setting("lost", "2", 1), 5).unwrap_err();
        assert!(matches!(err, SetError::Write { .. }), "{err}");
        // Nor does a failed change of a stored one.
        let err = s.set(setting("kept", "changed", 2), 5).unwrap_err();
        assert!(matches!(err, SetError::Write { .. }), "{err}");
        assert_eq!(s.all(), [setting("kept", "1", 1)]);
    }
}
