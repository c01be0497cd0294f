//! `FsdpOptions`: what `fully_shard` is asked to do (FSDP2's `fully_shard` arguments,
//! as in `_fully_shard/_fsdp_api.py`).
/// Options of [`FullyShard`](super::FullyShard).
#[derive(Debug, Clone)]
pub struct FsdpOptions {
    /// Free a block's full parameters after its forward and all-gather them again for
    /// backward (FSDP2's `reshard_after_forward=True`, its default): the least memory.
    /// `false` keeps them from forward to backward, one all-gather fewer per block.
    /// The root never reshards after forward, as in FSDP2.
    pub reshard_after_forward: bool,
    /// Broadcast every parameter and buffer from rank 0 before sharding, so that all
    /// ranks shard the same model whatever their seed (FSDP1's `sync_module_states`;
    /// FSDP2 leaves it to the program). On by default, as DDP does it.
    pub sync_module_states: bool,
    /// What the reduce-scattered gradients are divided by: `None`, the world size (the
    /// average over ranks, as DDP's; FSDP2's default). FSDP2's
    /// `set_gradient_divide_factor`; `Some(1.0)` leaves the sum, N times DDP's gradient.
    pub gradient_divide_factor: Option<f64>,
}

impl Default for FsdpOptions {
    fn default() -> Self {
        Self { reshard_after_forward: true, sync_module_states: true, gradient_divide_factor: None }
    }
}
