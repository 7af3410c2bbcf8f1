//! Retention: the oldest segments deleted past the age, size or free-disk limits.

use std::path::Path;

use super::{Store, StoreError};

impl Store {
    /// Whether the store is past its size limit ([`StoreConfig::retention_bytes`](super::StoreConfig::retention_bytes)): the
    /// next [`Store::enforce_retention`] has segments to delete.
    pub fn over_size_limit(&self) -> bool {
        self.cfg.retention_bytes.is_some_and(|max| {
            let index_bytes = self
                .state
                .read()
                .expect("store state lock poisoned")
                .index_bytes();
            self.log.total_bytes() + index_bytes > max
        })
    }

    /// Deletes whole sealed segments whose data is all older than the retention age, then the
    /// oldest ones while the store is over the size limit or the disk is nearly full
    /// ([`StoreConfig::min_free_disk_bytes`](super::StoreConfig::min_free_disk_bytes)). Returns the segments deleted.
    pub fn enforce_retention(&self, now_ns: u64) -> Result<usize, StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        let segments = self.log.segments();
        let mut total: u64 = segments.iter().map(|s| s.bytes).sum::<u64>()
            + self
                .state
                .read()
                .expect("store state lock poisoned")
                .index_bytes();
        let newest = {
            self.state
                .read()
                .expect("store state lock poisoned")
                .newest_per_segment()
        };
        // What the volume lacks of its free space: taken from the oldest segments, by their
        // sizes (a file a query still reads is freed only once it is done with it).
        let mut disk_deficit = self.disk_deficit();
        let lacking = disk_deficit;
        let mut deleted = 0;
        // Segments deleted only for the disk: (how many, the newest of them).
        let mut for_disk = (0, 0);
        for seg in segments.iter().filter(|s| !s.active) {
            let newest_ns = newest.get(&seg.id).copied().unwrap_or(0);
            let too_old = self
                .cfg
                .retention_age_ns
                .is_some_and(|age| newest_ns < now_ns.saturating_sub(age) as i64);
            let too_big = self.cfg.retention_bytes.is_some_and(|max| total > max);
            let disk_low = disk_deficit > 0;
            if !(too_old || too_big || disk_low) {
                continue;
            }
            if disk_low && !(too_old || too_big) {
                for_disk = (for_disk.0 + 1, seg.id);
            }
            self.log.delete_segment(seg.id)?;
            let freed = seg.bytes
                + self
                    .state
                    .read()
                    .expect("store state lock poisoned")
                    .sealed
                    .get(&seg.id)
                    .map_or(0, |x| x.index_bytes);
            total -= freed;
            disk_deficit = disk_deficit.saturating_sub(freed);
            self.state
                .write()
                .expect("store state lock poisoned")
                .forget_segment(seg.id);
            deleted += 1;
        }
        if for_disk.0 > 0 {
            tracing::warn!(
                segments = for_disk.0,
                up_to_segment = for_disk.1,
                lacking_bytes = lacking,
                min_free_disk = self.cfg.min_free_disk_bytes,
                "retention: the disk is nearly full, so the oldest segments were deleted"
            );
        }
        if deleted > 0 {
            let mut st = self.state.write().expect("store state lock poisoned");
            let forgotten = st.forget_unused_series();
            if forgotten > 0 {
                tracing::info!(
                    segments = deleted,
                    series = forgotten,
                    "retention: series with no data left are forgotten"
                );
            }
            let bytes_before = st.symbol_bytes;
            let dropped = st.drop_unused_generations();
            if dropped > 0 {
                tracing::info!(
                    generations = dropped,
                    freed_bytes = bytes_before.saturating_sub(st.symbol_bytes),
                    symbol_bytes = st.symbol_bytes,
                    "retention: symbols of earlier builds with no data left are dropped"
                );
            }
        }
        Ok(deleted)
    }

    /// Bytes the data directory's volume lacks to have as much available as the smaller of
    /// [`StoreConfig::min_free_disk_bytes`] and [`StoreConfig::min_free_disk_ratio`] of its
    /// size (0 when it has them, or when that cannot be told).
    fn disk_deficit(&self) -> u64 {
        if self.cfg.min_free_disk_bytes == 0 {
            return 0;
        }
        disk_space(&self.cfg.dir).map_or(0, |(available, total)| {
            let by_ratio = (self.cfg.min_free_disk_ratio * total as f64) as u64;
            self.cfg
                .min_free_disk_bytes
                .min(by_ratio)
                .saturating_sub(available)
        })
    }
}

/// Bytes available to this process and the size of the volume `dir` is on.
#[cfg(unix)]
// statvfs has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is a C struct of integers, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads the NUL-terminated path and writes only the struct it is given.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

#[cfg(not(unix))]
fn disk_space(_dir: &Path) -> Option<(u64, u64)> {
    None
}
