//! Opening a store directory from the command line.

use std::path::Path;

use anyhow::Context;
use spanprof_store::store::{Store, StoreConfig};

/// Opens the store in `dir`, which must exist (a typo should not create an empty store), and
/// reports damage it skipped.
pub fn open_existing(dir: &Path) -> anyhow::Result<Store> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is not a spanprof data directory (it does not exist)",
            dir.display()
        );
    }
    open(dir)
}

/// Opens or creates the store in `dir`.
pub fn open(dir: &Path) -> anyhow::Result<Store> {
    let (store, report) = Store::open(StoreConfig::new(dir))
        .with_context(|| format!("opening the store in {}", dir.display()))?;
    for p in &report.problems {
        eprintln!("spanprof: warning: {p}");
    }
    if report.truncated_bytes > 0 {
        eprintln!("spanprof: dropped {} bytes of an unfinished write at the end of the log (never acknowledged)", report.truncated_bytes);
    }
    Ok(store)
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
