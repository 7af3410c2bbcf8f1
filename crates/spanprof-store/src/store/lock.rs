//! The data directory's lock file, so two stores (or two servers) never write one directory.

use super::StoreError;

/// The file a store holds an exclusive lock on while it is open (`flock`; the kernel drops it
/// when the process exits, however it exits).
pub const LOCK_FILE: &str = "LOCK";

/// Locks `dir` for this store (creating it if missing).
pub(super) fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, StoreError> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    if dir.exists() && !dir.is_dir() {
        // create_dir_all would say only "File exists".
        return Err(io(dir)(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "a file, not a directory: give a directory for the store (made if missing)",
        )));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    // A lock just released can stay held for a moment: by a process that is exiting, or by
    // a child that a thread of this process forks and that has not yet exec'd (it shares
    // every open file until then, and with it the lock). Wait a little before refusing.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    dir: dir.to_path_buf(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
    }
}

/// How long opening waits for a directory's lock before it reports the directory in use.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
