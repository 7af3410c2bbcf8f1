//! Sealing the active segment and starting the next one, in the background after an ingest
//! that filled it.

use std::sync::Arc;

use super::{Store, StoreError};

impl Store {
    /// Whether the active segment holds `segment_max_bytes` past its snapshot, and at least
    /// as much as the snapshot itself: every segment starts with all symbols and series, and
    /// with a snapshot larger than the data after it (many services and builds, 16 MiB
    /// segments), most of the disk and of every rotation's writing was snapshots. So the
    /// snapshots take at most half of the store.
    pub(crate) fn segment_is_full(&self) -> bool {
        let snapshot = self
            .snapshot_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        self.log.active_bytes().saturating_sub(snapshot) > self.cfg.segment_max_bytes.max(snapshot)
    }

    /// Starts a new log segment (its snapshot written), after starting new symbol generations
    /// for the services due one ([`State::roll_generations`]): the snapshot has them, empty,
    /// before any record refers to them. Returns the new segment's id. The
    /// caller holds the writer lock.
    fn rotate_log(&self) -> Result<u64, StoreError> {
        let (len, rolled) = {
            let mut st = self.state.write().expect("store state lock poisoned");
            let len = st.services.len();
            (len, st.roll_generations())
        };
        match self.log.rotate() {
            Ok(next) => {
                for (service, bytes) in rolled {
                    tracing::info!(
                        service,
                        symbol_bytes = bytes,
                        "the service's symbols are more than twice those of the binaries its \
                         profiles use (new builds): a new generation of them starts, and the \
                         old one is dropped once retention deletes the data that refers to it"
                    );
                }
                Ok(next)
            }
            Err(e) => {
                self.state
                    .write()
                    .expect("store state lock poisoned")
                    .undo_roll(len);
                Err(e.into())
            }
        }
    }

    /// Seals the active segment now (normally done when it passes `segment_max_bytes`).
    pub fn rotate(&self) -> Result<(), StoreError> {
        let _w = self.writer.lock().expect("store writer lock poisoned");
        self.rotate_locked()
    }

    /// Seals the active segment as ingest does when it is full: appends go to a new segment at
    /// once, and the old one's index file (encoding its index, Bloom filters, an fsync: seconds
    /// for a full segment) is written by a thread of its own, while queries read that
    /// index from memory until the file is there. Were it written here, the ingest call that filled the segment would
    /// stall for as long (measured: 2.4 s, in a p99 of 19 ms) and queries with it. A failed
    /// write leaves the index in memory; the next start rebuilds it from the log, as after a
    /// crash before the file was written. At most two seals run at once (a third waits), so
    /// memory stays bounded if the disk is slower than ingest. The caller holds the writer
    /// lock.
    /// Seals the active segment an ingest has just filled (or whose services are due a new
    /// symbol generation), as [`Store::rotate_in_background`]. That ingest's record is
    /// durable and published already, so a failure does not fail it (its client would send
    /// it again, and it would be stored twice): it is logged, the segment stays active past
    /// its size, and an ingest [`StoreConfig::seal_retry`] later tries again.
    pub(crate) fn seal_after_ingest(&self) {
        let mut retry_at = self
            .seal_retry_at
            .lock()
            .expect("store seal retry lock poisoned");
        let now = std::time::Instant::now();
        if retry_at.is_some_and(|at| now < at) {
            return;
        }
        match self.rotate_in_background() {
            Ok(()) => *retry_at = None,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    retry_in = ?self.cfg.seal_retry,
                    "sealing the full segment failed: what was ingested is stored, and the \
                     segment takes more until a later ingest seals it"
                );
                *retry_at = Some(now + self.cfg.seal_retry);
            }
        }
    }

    pub(crate) fn rotate_in_background(&self) -> Result<(), StoreError> {
        let next = self.rotate_log()?;
        let spare = self
            .spare_index
            .lock()
            .expect("store spare index lock poisoned")
            .take();
        let index = self
            .state
            .write()
            .expect("store state lock poisoned")
            .begin_seal(next, spare);
        let spare_index = Arc::clone(&self.spare_index);
        let state = Arc::clone(&self.state);
        let dir = state
            .read()
            .expect("store state lock poisoned")
            .index_dir
            .clone();
        let mut sealers = self.sealers.lock().expect("store sealers lock poisoned");
        sealers.retain(|s| !s.is_finished());
        while sealers.len() >= 2 {
            let _ = sealers.remove(0).join();
        }
        let seal = move || {
            lower_priority();
            let segment = index.segment;
            match super::segments::write_index(&dir, &index) {
                Ok(summary) => {
                    drop(index);
                    let sealed = state
                        .write()
                        .expect("store state lock poisoned")
                        .finish_seal(segment, summary);
                    match sealed {
                        // Emptied for the next segment here, with no lock held, unless a
                        // query still reads it (then freed by the query).
                        Some(index) => {
                            if let Ok(index) = Arc::try_unwrap(index) {
                                let emptied = index.emptied();
                                *spare_index.lock().expect("store spare index lock poisoned") =
                                    Some(emptied);
                            }
                        }
                        // Deleted while its index was written (retention, compaction).
                        None => {
                            let _ =
                                std::fs::remove_file(super::segments::index_path(&dir, segment));
                        }
                    }
                }
                Err(e) => tracing::error!(
                    segment,
                    dir = %dir.display(),
                    error = %e,
                    "writing a sealed segment's index failed: it stays in memory, and the next \
                     start rebuilds it from the log"
                ),
            }
        };
        let handle = std::thread::Builder::new()
            .name("spanprof-seal".into())
            .spawn(seal)
            .map_err(|source| StoreError::Io {
                path: self.cfg.dir.clone(),
                source,
            })?;
        sealers.push(handle);
        Ok(())
    }

    /// Seals the active segment (its index goes to disk before this returns) and starts the
    /// next. The caller holds the writer lock.
    pub(crate) fn rotate_locked(&self) -> Result<(), StoreError> {
        let next = self.rotate_log()?;
        let mut st = self.state.write().expect("store state lock poisoned");
        let dir = st.index_dir.clone();
        st.seal_active(next).map_err(|e| {
            StoreError::Invalid(format!(
                "writing the index of a sealed segment in {}: {e}",
                dir.display()
            ))
        })
    }
}

/// Gives the calling thread a lower CPU priority (nice 5): sealing a segment takes a burst of
/// CPU (most of a second for a 16 MiB segment of Go CPU profiles) that receivers waiting on
/// ingest should not queue behind. Not lower: under full load a sealer starved further falls
/// behind, and sealing indexes wait in memory (nice 10 took the load bench to 420 MB RSS).
/// Under Linux the nice value is per thread. Failure only leaves the priority as it was.
// setpriority has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority only reads its integer arguments; `who` 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 5);
    }
}
