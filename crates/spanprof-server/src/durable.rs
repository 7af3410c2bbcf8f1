//! Small files replaced whole, atomically and durably: a crash leaves the old content or the
//! new, never a mix, and the new one is on disk once the call returns.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `dir/name`: a temporary file beside it, fsync, rename over the old one,
/// fsync of the directory (without it the rename itself may be lost).
pub fn replace(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}
