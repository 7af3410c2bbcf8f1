//! Sealed segments' indexes kept loaded, least recently used first out.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::file::{read_index, IndexError};
use super::SegmentIndex;

/// Recently used sealed indexes, at most `capacity`.
#[derive(Debug)]
pub(crate) struct IndexCache {
    capacity: usize,
    entries: Mutex<Vec<(u64, Arc<SegmentIndex>)>>,
}

impl IndexCache {
    pub fn new(capacity: usize) -> Self {
        IndexCache {
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The index of sealed segment `segment`, loaded from `dir` on a miss.
    pub fn get(&self, dir: &Path, segment: u64) -> Result<Arc<SegmentIndex>, IndexError> {
        self.get_if_present(dir, segment)?
            .ok_or(IndexError::Missing(segment))
    }

    /// [`IndexCache::get`], `None` when the index file is not there (its segment deleted).
    pub fn get_if_present(
        &self,
        dir: &Path,
        segment: u64,
    ) -> Result<Option<Arc<SegmentIndex>>, IndexError> {
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        if let Some(i) = e.iter().position(|(id, _)| *id == segment) {
            let hit = e.remove(i);
            let index = Arc::clone(&hit.1);
            e.insert(0, hit);
            return Ok(Some(index));
        }
        drop(e);
        let Some((index, _)) = read_index(dir, segment)? else {
            return Ok(None);
        };
        let index = Arc::new(index);
        let mut e = self.entries.lock().expect("index cache lock poisoned");
        e.insert(0, (segment, Arc::clone(&index)));
        e.truncate(self.capacity);
        Ok(Some(index))
    }

    pub fn forget(&self, segment: u64) {
        self.entries
            .lock()
            .expect("index cache lock poisoned")
            .retain(|(id, _)| *id != segment);
    }
}
