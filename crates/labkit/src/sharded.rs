//! The lab's model sharded with FSDP (step 14, `--fsdp`), as the training loop runs it:
//! [`ShardedModel`] holds the root module `fully_shard` returned and the
//! [`FullyShard`](dist::FullyShard) that keeps the shards, and after each epoch says
//! what this rank holds, measured from its tensors: once on standard output, and in
//! the trace for the checker with the whole model gathered on rank 0.
use std::cell::Cell;

use lab_trace::event;
use tch::nn::{self, ModuleT};
use tch::Tensor;
use tch_distributed as dist;

use crate::error::Result;
use crate::lab::Model;
use crate::optim::Optimizer;
use crate::perf::PerfSettings;
use crate::report::grouped;
use crate::trace;

/// A model sharded over the ranks: what `train` and `test` take under `--fsdp`.
///
/// ```no_run
/// use labkit::{Norm, ShardedModel, WideResNet, Widths};
/// use tch::nn::{self, OptimizerConfig};
/// use tch_distributed as dist;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?;
/// let vs = nn::VarStore::new(tch::Device::Cpu);
/// let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
/// let net = WideResNet::try_new_wrapped(&vs.root(), Widths::NARROW, Norm::BatchNorm, |block, name| {
///     Ok(Box::new(fsdp.fully_shard(block, name)?))
/// })?;
/// let model = fsdp.fully_shard(net, "")?;
/// let mut optimizer = nn::Sgd::default().build(fsdp.shards()?, 0.01)?;
/// let model = ShardedModel::new(model, fsdp);
/// // labkit::train(&model, &mut optimizer, &mut train_loader)?;
/// # Ok(()) }
/// ```
pub struct ShardedModel<M> {
    model: dist::FsdpModule<M>,
    fsdp: dist::FullyShard,
    /// Whether this rank has printed what it holds (once, after its first epoch).
    printed: Cell<bool>,
}

impl<M> ShardedModel<M> {
    /// `model`: what `fsdp.fully_shard(net, "")` (the root) returned.
    pub fn new(model: dist::FsdpModule<M>, fsdp: dist::FullyShard) -> Self {
        ShardedModel { model, fsdp, printed: Cell::new(false) }
    }

    /// The shards and their collectives.
    pub fn fsdp(&self) -> &dist::FullyShard {
        &self.fsdp
    }

    /// What this rank holds now, in elements, measured from its tensors: its shards,
    /// their gradients, what `optimizer` steps on and the state it keeps
    /// (`optimizer_state_numel`: its momentum buffers), and the most full parameters
    /// held at once so far.
    pub fn held(
        &self,
        epoch: usize,
        optimizer: &nn::Optimizer,
        optimizer_state_numel: i64,
    ) -> Result<event::ShardsHeld> {
        let memory = self.fsdp.memory()?;
        let element_bytes = if memory.shard_numel > 0 { memory.shard_bytes / memory.shard_numel } else { 4 };
        let optimizer_numel = optimizer.trainable_variables().iter().map(|t| t.numel() as i64).sum();
        let units = self
            .fsdp
            .units()
            .into_iter()
            .map(|u| event::ShardUnit { prefix: u.prefix, numel: u.numel, shard_numel: u.shard_numel })
            .collect();
        Ok(event::ShardsHeld {
            epoch,
            model_numel: memory.model_numel,
            shard_numel: memory.shard_numel,
            grad_numel: memory.grad_bytes / element_bytes.max(1),
            optimizer_numel,
            optimizer_state_numel,
            peak_unsharded_numel: memory.peak_unsharded_bytes / element_bytes.max(1),
            element_bytes,
            units,
        })
    }
}

/// FullyShard's refusal of an optimizer, with how the lab builds one on the shards.
fn in_the_lab(e: dist::DistError) -> dist::DistError {
    dist::DistError::new(
        e.kind(),
        format!("{e}; in the lab: `labkit::Sgd::new(fsdp.shards()?, args.base_lr, args.momentum)?`"),
    )
}

/// The line a rank prints of what it holds.
fn describe(rank: usize, world_size: usize, held: &event::ShardsHeld) -> String {
    let share = |n: i64| 100.0 * n as f64 / held.model_numel.max(1) as f64;
    // Plain SGD keeps no state: said only where there is some (--momentum).
    let state = match held.optimizer_state_numel {
        0 => String::new(),
        n => format!(" and keeps momentum for {}", grouped(n)),
    };
    format!(
        "rank {rank} holds {} of the model's {} parameters ({:.1}%; 1/{world_size} is {:.1}%, DDP's replica 100%): gradients for {}, the optimizer steps on {}{state}; at most {} full parameters at once ({:.1}%)",
        grouped(held.shard_numel),
        grouped(held.model_numel),
        share(held.shard_numel),
        100.0 / world_size as f64,
        grouped(held.grad_numel),
        grouped(held.optimizer_numel),
        grouped(held.peak_unsharded_numel),
        share(held.peak_unsharded_numel),
    )
}

impl<M: ModuleT + Model> Model for ShardedModel<M> {
    fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor> {
        Ok(self.model.try_forward_t(images, train)?)
    }

    fn perf(&self) -> PerfSettings {
        self.model.module().perf()
    }

    /// Refuses an optimizer that is not on this rank's shards, with FullyShard's
    /// message and the lab's way to build it (the library's names tch's own SGD); what
    /// the rank holds is recorded first, so that the checker sees what the optimizer
    /// would have stepped on.
    fn check_optimizer(&self, optimizer: &nn::Optimizer) -> Result<()> {
        if let Err(e) = self.fsdp.check_optimizer(optimizer) {
            if trace::enabled() {
                trace::record(self.held(0, optimizer, 0)?);
            }
            return Err(in_the_lab(e).into());
        }
        Ok(())
    }

    /// Prints (after the first epoch) and records what this rank holds; when traced,
    /// gathers the whole model on rank 0 for the trace (every rank takes part).
    fn after_epoch(&self, epoch: usize, optimizer: &dyn Optimizer) -> Result<()> {
        let held = self.held(epoch, optimizer.stepper(), optimizer.state_numel())?;
        if !self.printed.replace(true) {
            let group = self.fsdp.group();
            println!("{}", describe(group.rank(), group.world_size(), &held));
        }
        if trace::enabled() {
            trace::record(held);
            // Only the parameters: the full state dict has rank 0's buffers too.
            let names: std::collections::HashSet<String> =
                self.fsdp.shards()?.variables().into_keys().collect();
            if let Some(state) = self.fsdp.full_state_dict()? {
                let parameters: Vec<(String, Tensor)> =
                    state.into_iter().filter(|(name, _)| names.contains(name)).collect();
                trace::record_parameter_values(epoch, true, &parameters);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A student who builds the lab's optimizer on vs reads how to build it on the
    /// shards with the lab's own optimizer, and the error stays a misuse (exit code 2).
    #[test]
    fn a_refused_optimizer_is_told_the_labs_way() {
        let refused = dist::DistError::new(dist::ErrorKind::InvalidArgument, "FSDP: build it on the shards");
        let told = in_the_lab(refused.clone());
        assert_eq!(told.kind(), refused.kind());
        assert_eq!(told.exit_code(), refused.exit_code());
        assert!(
            told.to_string()
                .starts_with("FSDP: build it on the shards; in the lab: `labkit::Sgd::new(fsdp.shards()?"),
            "{told}"
        );
    }

    #[test]
    fn the_rank_says_what_it_holds_against_ddps_replica() {
        let held = event::ShardsHeld {
            epoch: 0,
            model_numel: 173_778,
            shard_numel: 86_889,
            grad_numel: 86_889,
            optimizer_numel: 86_889,
            optimizer_state_numel: 0,
            peak_unsharded_numel: 74_722,
            element_bytes: 4,
            units: Vec::new(),
        };
        assert_eq!(
            describe(1, 2, &held),
            "rank 1 holds 86,889 of the model's 173,778 parameters (50.0%; 1/2 is 50.0%, DDP's replica 100%): gradients for 86,889, the optimizer steps on 86,889; at most 74,722 full parameters at once (43.0%)"
        );
        // With --momentum the buffers are counted too: the shards' share of them.
        let with_momentum = event::ShardsHeld { optimizer_state_numel: 86_889, ..held };
        assert!(
            describe(1, 2, &with_momentum)
                .contains("the optimizer steps on 86,889 and keeps momentum for 86,889;"),
            "{}",
            describe(1, 2, &with_momentum)
        );
    }
}
