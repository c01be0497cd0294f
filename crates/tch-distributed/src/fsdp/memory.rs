//! What a sharded model costs this rank: `ShardMemory`, and the running count of full
//! parameters' bytes it reports.
use std::sync::atomic::{AtomicI64, Ordering};

/// What this rank holds of a sharded model, measured from its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardMemory {
    /// Parameters of the whole model (P).
    pub model_numel: i64,
    /// Elements of this rank's shards, padding included: about P / world size.
    pub shard_numel: i64,
    /// Bytes of this rank's shards (what the optimizer steps on).
    pub shard_bytes: i64,
    /// Bytes of the shards' gradients now (0 before the first backward pass).
    pub grad_bytes: i64,
    /// Bytes of full (unsharded) parameters allocated now, from their storages.
    pub unsharded_bytes: i64,
    /// The most full-parameter bytes allocated at once since the last
    /// [`FullyShard::reset_peak`](super::FullyShard::reset_peak) (measured at every all-gather and free).
    pub peak_unsharded_bytes: i64,
}

#[derive(Default)]
pub(super) struct Memory {
    pub(super) unsharded: AtomicI64,
    pub(super) peak: AtomicI64,
}

impl Memory {
    pub(super) fn change(&self, delta: i64) {
        let now = self.unsharded.fetch_add(delta, Ordering::SeqCst) + delta;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
}
