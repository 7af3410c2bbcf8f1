//! `spanprof tenant`: the tenants a store directory holds, and deleting one's data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use spanprof_server::auth::TenantId;
use spanprof_server::tenants::TENANTS_DIR;
use spanprof_store::store::LOCK_FILE;

/// List a data directory's tenants, or delete one tenant's data.
///
/// Each tenant other than the default one keeps its store, forward queues and settings in
/// `tenants/<id>/` of the data directory (docs/security.md). Run with the server stopped: a
/// directory a running server holds is refused.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Each tenant with the bytes its data takes.
    List {
        /// The server's data directory.
        #[arg(long, value_name = "DIR", default_value = "./spanprof-data")]
        data: PathBuf,
    },
    /// Delete every profile, span, series, symbol, setting and queued export of one tenant.
    Delete {
        /// The tenant id (as in credentials or X-Scope-OrgID).
        tenant: String,
        /// The server's data directory.
        #[arg(long, value_name = "DIR", default_value = "./spanprof-data")]
        data: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::List { data } => {
            let dir = data.join(TENANTS_DIR);
            let mut tenants = Vec::new();
            if dir.is_dir() {
                for entry in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
                    let entry = entry.with_context(|| dir.display().to_string())?;
                    if entry.path().is_dir() {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        tenants.push((name, bytes_under(&entry.path())));
                    }
                }
            }
            tenants.sort();
            println!("{:<40} {:>14}", "tenant", "bytes");
            for (name, bytes) in tenants {
                println!("{name:<40} {bytes:>14}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Delete { tenant, data } => {
            let id = TenantId::new(&tenant).with_context(|| format!("tenant {tenant:?}"))?;
            if id.is_default() {
                bail!(
                    "the default tenant's data is the data directory itself: delete {} instead",
                    data.display()
                );
            }
            let dir = data.join(TENANTS_DIR).join(id.as_str());
            if !dir.is_dir() {
                bail!("{} holds no tenant {id}", data.display());
            }
            for held in [&data, &dir] {
                if in_use(held)? {
                    bail!("a running spanprof holds {}: stop it first", held.display());
                }
            }
            let bytes = bytes_under(&dir);
            std::fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))?;
            println!("deleted tenant {id}: {} ({bytes} bytes)", dir.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Whether a process holds the store lock of `dir` (a missing lock file: no).
fn in_use(dir: &Path) -> anyhow::Result<bool> {
    let path = dir.join(LOCK_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| path.display().to_string()),
    }
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
