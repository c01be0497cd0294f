//! `FsdpModule`: the module `fully_shard` hands back, whose forward runs its unit's
//! hooks around the wrapped module's.
use std::fmt;
use std::sync::Arc;

use tch::nn::ModuleT;
use tch::Tensor;

use super::unit::{lock, Unit};
use crate::error::Result;

/// A module whose parameters [`FullyShard::fully_shard`](super::FullyShard::fully_shard) sharded: its forward
/// all-gathers them first and frees them after, and sets up the backward pass.
pub struct FsdpModule<M> {
    pub(super) module: M,
    pub(super) unit: Arc<Unit>,
}

impl<M: ModuleT> FsdpModule<M> {
    /// The forward pass, with a collective's failure as an error rather than a panic.
    pub fn try_forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        self.unit.pre_forward()?;
        let out = self.module.forward_t(xs, train);
        self.unit.post_forward(&out)?;
        Ok(out)
    }
}

impl<M> FsdpModule<M> {
    /// The wrapped module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The names of the parameters this module shards, in PyTorch's order.
    pub fn parameter_names(&self) -> Vec<String> {
        lock(&self.unit.state).params.iter().map(|p| p.name.clone()).collect()
    }
}

impl<M: ModuleT> ModuleT for FsdpModule<M> {
    /// Panics when a collective fails (tch's modules cannot return errors):
    /// [`try_forward_t`](FsdpModule::try_forward_t) returns it instead.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.try_forward_t(xs, train).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl<M: fmt::Debug> fmt::Debug for FsdpModule<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsdpModule").field("unit", &self.unit.name).field("module", &self.module).finish()
    }
}
