//! The `processors` section: linking, the pipeline's queue and batching, the transform
//! rules. Read from the file as is and run with; its `Default` is the one set of defaults.

use serde::{Deserialize, Serialize};
use spanprof_format::LinkConfig;

use super::units::{ReadableDuration, ReadableSize};
use super::ConfigError;
use crate::transform::Transform;

/// `processors`: the pipeline's stages between receivers and sinks.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessorsConfig {
    /// Which sample attributes become span links (`--span-id-key` and the others add keys).
    pub link: LinkConfig,
    /// The pipeline's bounded queue and batching.
    pub batch: BatchConfig,
    /// Rules applied, in order, to each batch's work before the sinks (none by default).
    #[serde(skip_serializing_if = "Transform::is_empty")]
    pub transform: Transform,
}

/// `processors.batch`: the pipeline's bounded queue and its batches.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Requests waiting at most; beyond, receivers answer 429 / RESOURCE_EXHAUSTED.
    pub queue_capacity: usize,
    /// About the memory that decoded requests waiting in the queue or being written may
    /// take, in bytes (0 = no limit); beyond, receivers answer 429 / RESOURCE_EXHAUSTED too.
    /// One request is always taken when none is waiting, whatever its size.
    pub queue_size: ReadableSize,
    /// Requests written to the store in one durable write at most.
    pub max_items: usize,
    /// How long a batch may wait for requests that receivers are still decoding. A batch
    /// takes what queued up during the previous write and is written as soon as no request
    /// is being decoded, or when this is up.
    pub max_age: ReadableDuration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            queue_capacity: 1024,
            queue_size: ReadableSize(512 << 20),
            max_items: 256,
            max_age: ReadableDuration(std::time::Duration::from_millis(20)),
        }
    }
}

impl BatchConfig {
    /// [`Self::queue_size`] in bytes, as the pipeline counts them (0 = no limit).
    pub fn queue_bytes(&self) -> usize {
        usize::try_from(self.queue_size.0).unwrap_or(usize::MAX)
    }
}

impl ProcessorsConfig {
    /// Refuses a queue that holds or writes nothing, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let defaults = BatchConfig::default();
        for (key, n, default) in [
            (
                "queue_capacity",
                self.batch.queue_capacity,
                defaults.queue_capacity,
            ),
            ("max_items", self.batch.max_items, defaults.max_items),
        ] {
            if n == 0 {
                return Err(format!(
                    "processors.batch.{key} 0: the queue holds and writes one request at \
                     least; give a count (default {default}; queue_size is the one where 0 \
                     means no limit)"
                )
                .into());
            }
        }
        Ok(())
    }
}
