//! `FullyShard`, the face of fully sharded data parallel for tch models, in the manner
//! of PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`).
//!
//! Where [`DistributedDataParallel`](crate::DistributedDataParallel) keeps a whole
//! replica of the model on every rank, FSDP keeps 1/N of it: a model of P parameters
//! costs about P/N per rank in parameters, gradients and optimizer state, plus the full
//! parameters of the block that is computing at the moment.
//!
//! What happens, as in FSDP2:
//! - [`FullyShard::fully_shard`] is applied to each block (the variables under a
//!   VarStore path, e.g. `"block3"`), then to the root (`""`: every variable left).
//!   Each parameter becomes a shard along dim 0: rank r keeps chunk r of
//!   `torch.chunk(param, world_size, dim=0)`, padded with zero rows to
//!   `ceil(dim0 / world_size)` rows so that every rank's shard has the same size. The
//!   shards are the variables of [`FullyShard::shards`], the VarStore the optimizer is
//!   built on: it sees, and keeps state for, this rank's shards only;
//! - before a block's forward its parameters are all-gathered
//!   ([`ProcessGroup::all_gather_into_tensor`], one call per block over the
//!   concatenated shards) into the module's own parameter tensors; after the forward
//!   their memory is freed (`reshard_after_forward`; the root keeps its own until
//!   backward, as FSDP2's does, since backward needs it first);
//! - before the block's backward they are all-gathered again, from a hook on the block's
//!   output; once autograd has the block's full gradients they are
//!   [`reduce_scatter_tensor`](ProcessGroup::reduce_scatter_tensor)ed (one call per
//!   block) and divided by the world size (DDP's average: Gloo has no `Avg`, and
//!   FSDP2 divides the same way), which leaves each rank the gradient of its shard in
//!   the shard's `.grad`, and the full parameters are freed again.
//!
//! Nothing is computed twice: the forward's saved tensors are the module's parameter
//! tensors themselves, emptied after forward and filled again before backward, as
//! FSDP2 does with `untyped_storage().resize_()`. (Recomputing each block's forward in
//! backward instead would cost about a third more compute.) See `shim/fsdp.cpp`.
//!
//! ```no_run
//! use tch::nn::{self, ModuleT, OptimizerConfig};
//! use tch::{Device, Kind, Tensor};
//! use tch_distributed as dist;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?;
//! let vs = nn::VarStore::new(Device::Cpu);
//! let root = vs.root();
//! let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
//! // Blocks first, each its own unit of all-gather and reduce-scatter, then the root.
//! let block = |name: &str, cin, cout| {
//!     let layer = nn::seq_t()
//!         .add(nn::linear(&root / name / "fc", cin, cout, Default::default()))
//!         .add_fn(|x| x.relu());
//!     fsdp.fully_shard(layer, name)
//! };
//! let body = nn::seq_t().add(block("block1", 784, 256)?).add(block("block2", 256, 256)?);
//! let model = fsdp.fully_shard(body.add(nn::linear(&root / "head", 256, 10, Default::default())), "")?;
//! // The optimizer steps on this rank's shards only.
//! let mut opt = nn::Sgd::default().build(fsdp.shards()?, 0.01)?;
//! let (images, labels) = (Tensor::rand([32, 784], (Kind::Float, Device::Cpu)),
//!                         Tensor::randint(10, [32], (Kind::Int64, Device::Cpu)));
//! let loss = model.forward_t(&images, true).cross_entropy_for_logits(&labels);
//! opt.backward_step(&loss); // gradients reduce-scattered and averaged during backward
//! // A checkpoint: the whole model, gathered on rank 0.
//! if let Some(state) = fsdp.full_state_dict()? {
//!     println!("{} tensors", state.len());
//! }
//! # Ok(()) }
//! ```
//!
//! After `fully_shard` the model's full parameters in the original VarStore hold no
//! memory outside a block's forward and backward: save and load through
//! [`FullyShard::full_state_dict`], and build the optimizer on
//! [`FullyShard::shards`], never on the original VarStore ([`FullyShard::check_optimizer`]
//! refuses one that is not, before it steps). Buffers (BatchNorm's
//! running statistics) are not sharded: each rank keeps its own, as FSDP2 does.
//!
//! Beside this file: `options` (`FsdpOptions`), `registry` (what the calls took),
//! `unit` (one call's parameters and their state machine), `hooks` (the forward's
//! hooks and the shim's callbacks), `module` (`FsdpModule`), `memory` and `storage`.
mod hooks;
mod memory;
mod module;
mod options;
mod registry;
mod storage;
mod unit;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tch::nn::{ModuleT, VarStore, Variables};
use tch::Tensor;

pub use memory::ShardMemory;
pub use module::FsdpModule;
pub use options::FsdpOptions;

use crate::ddp::broadcast_coalesced;
use crate::error::{DistError, Result};
use crate::group::ProcessGroup;
use memory::Memory;
use registry::{variables, Registry};
use storage::{bytes_of, storage_bytes};
use unit::{lock, Unit};

/// One `fully_shard` call's parameters, as [`FullyShard::units`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedUnit {
    /// The VarStore path given to `fully_shard` (`"block3"`; `""` for the root).
    pub prefix: String,
    /// Elements of its full parameters: what one all-gather makes whole.
    pub numel: i64,
    /// Elements of this rank's shards of them, padding included: what each rank puts
    /// into the all-gather, and a world size times what the reduce-scatter takes.
    pub shard_numel: i64,
}

/// The sharded parameters of one model over a process group: the Rust form of FSDP2's
/// mesh and state. Make it on the model's VarStore before the model, then
/// [`fully_shard`](Self::fully_shard) each block as it is built, and the root last.
pub struct FullyShard {
    group: Arc<ProcessGroup>,
    options: FsdpOptions,
    /// The model's VarStore (its variables, shared): read at each `fully_shard`.
    model: Arc<Mutex<Variables>>,
    /// The optimizer's variables: this rank's shards, under the model's names.
    shards: VarStore,
    state: Mutex<Registry>,
    memory: Arc<Memory>,
}

impl FullyShard {
    /// Prepares to shard the model that will be built on `vs`, over the default
    /// process group.
    pub fn new(vs: &VarStore, options: FsdpOptions) -> Result<Self> {
        Self::with_group(vs, crate::default_group()?, options)
    }

    /// [`FullyShard::new`] over an explicit group.
    pub fn with_group(vs: &VarStore, group: Arc<ProcessGroup>, options: FsdpOptions) -> Result<Self> {
        if let Some(factor) = options.gradient_divide_factor.filter(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(DistError::invalid(format!(
                "FsdpOptions::gradient_divide_factor is {factor}: the summed gradients are divided by it, so it must be a positive number (None: the world size, the average)"
            )));
        }
        Ok(FullyShard {
            group,
            options,
            model: vs.variables_.clone(),
            shards: VarStore::new(vs.device()),
            state: Mutex::default(),
            memory: Arc::default(),
        })
    }

    /// Shards the parameters under `prefix` (a VarStore path: `"block3"` takes
    /// `block3.*`) and returns `module` wrapped so that its forward all-gathers them
    /// first and frees them after, and its backward reduce-scatters their gradients
    /// (`fully_shard(module)`). `prefix` `""` is the root: every parameter no earlier
    /// call took. Every rank makes the same calls in the same order. With
    /// [`FsdpOptions::sync_module_states`], the parameters and buffers taken are first
    /// broadcast from rank 0.
    pub fn fully_shard<M: ModuleT>(&self, module: M, prefix: &str) -> Result<FsdpModule<M>> {
        let mut registry = lock(&self.state);
        let root = prefix.is_empty();
        let what = format!("fully_shard(\"{prefix}\")");
        if registry.root_sharded {
            return Err(DistError::invalid(format!(
                "{what}: the root is already sharded: shard every block first, then the root (\"\"), as FSDP2 does"
            )));
        }
        let inside = |name: &str| {
            !registry.claimed.contains(name)
                && (root || name == prefix || name.starts_with(&format!("{prefix}.")))
        };
        let (params, others) = variables(&self.model);
        let (params, frozen): (Vec<_>, Vec<_>) =
            params.into_iter().filter(|(n, _)| inside(n)).partition(|(_, t)| t.requires_grad());
        let buffers: Vec<_> =
            frozen.into_iter().chain(others.into_iter().filter(|(n, _)| inside(n))).collect();
        if params.is_empty() && !root {
            let (all, _) = variables(&self.model);
            let left: Vec<&String> =
                all.iter().map(|(n, _)| n).filter(|n| !registry.claimed.contains(*n)).collect();
            let example = left.first().map_or(String::new(), |n| format!(" (e.g. \"{n}\")"));
            return Err(DistError::invalid(format!(
                "{what}: no parameter left under \"{prefix}\": build the block on this path first, and name a VarStore path that holds parameters{example}, each block once"
            )));
        }
        if self.options.sync_module_states {
            let mut state: Vec<Tensor> =
                params.iter().chain(&buffers).map(|(_, t)| t.shallow_clone()).collect();
            broadcast_coalesced(&self.group, &mut state).map_err(|e| e.context(&what))?;
        }
        let names: Vec<String> = params.iter().chain(&buffers).map(|(n, _)| n.clone()).collect();
        let unit = Arc::new(Unit::new(
            &what,
            prefix,
            params,
            &self.group,
            &self.shards,
            &self.memory,
            &self.options,
        )?);
        registry.claimed.extend(names);
        registry.buffers.extend(buffers);
        registry.root_sharded = root;
        registry.units.push(unit.clone());
        Ok(FsdpModule { module, unit })
    }

    /// The VarStore of this rank's shards, to build the optimizer on
    /// (`nn::Sgd::default().build(fsdp.shards()?, lr)`). An error until every trainable
    /// parameter belongs to a `fully_shard` call (the root takes the rest).
    pub fn shards(&self) -> Result<&VarStore> {
        let registry = lock(&self.state);
        let (params, _) = variables(&self.model);
        let left: Vec<&String> = params
            .iter()
            .filter(|(n, t)| t.requires_grad() && !registry.claimed.contains(n))
            .map(|(n, _)| n)
            .collect();
        if let Some(name) = left.first() {
            return Err(DistError::invalid(format!(
                "{} parameter(s), e.g. \"{name}\", belong to no fully_shard call: shard the root (\"\") last, which takes every parameter left",
                left.len()
            )));
        }
        Ok(&self.shards)
    }

    /// Refuses an optimizer that does not step on exactly this rank's shards, before it
    /// steps: one built on the model's VarStore would step the full parameters, which
    /// FSDP frees outside each block's forward and backward (reading or writing them
    /// there reads freed memory, a crash rather than an error), and would leave the
    /// shards, which hold the model, untouched. PyTorch cannot make this mistake: after
    /// `fully_shard` the module's parameters are the shards.
    ///
    /// The error names the fix: `nn::Sgd::default().build(fsdp.shards()?, lr)`.
    pub fn check_optimizer(&self, optimizer: &tch::nn::Optimizer) -> Result<()> {
        let stepped = optimizer.trainable_variables();
        let registry = lock(&self.state);
        let (mut fulls, mut shards) = (Vec::new(), Vec::new());
        for unit in &registry.units {
            for p in &lock(&unit.state).params {
                fulls.push((p.name.clone(), p.full.shallow_clone()));
                shards.push(p.shard.shallow_clone());
            }
        }
        drop(registry);
        // is_set_to: the same tensor (storage, offset, shape), even while its memory is freed.
        let full: Vec<&str> = stepped
            .iter()
            .filter_map(|t| fulls.iter().find(|(_, f)| f.is_set_to(t)).map(|(name, _)| name.as_str()))
            .collect();
        if let Some(first) = full.first() {
            return Err(DistError::invalid(format!(
                "FSDP: the optimizer steps on {} of the model's full parameters (e.g. \"{first}\"), which FSDP frees outside each block's forward and backward: build it on this rank's shards, `nn::Sgd::default().build(fsdp.shards()?, lr)`, not on the model's VarStore",
                full.len()
            )));
        }
        let foreign = stepped.iter().filter(|t| !shards.iter().any(|s| s.is_set_to(t))).count();
        if foreign > 0 {
            return Err(DistError::invalid(format!(
                "FSDP: the optimizer steps on {foreign} tensor(s) that are not this FullyShard's shards (another model's, or another FullyShard's): build it on this one's `fsdp.shards()?`"
            )));
        }
        let missing = shards.iter().filter(|s| !stepped.iter().any(|t| t.is_set_to(s))).count();
        if missing > 0 {
            return Err(DistError::invalid(format!(
                "FSDP: the optimizer steps on none of {missing} of this rank's {} shards: build it on `fsdp.shards()?` after the root is sharded (the root takes every parameter left)",
                shards.len()
            )));
        }
        Ok(())
    }

    /// The whole model on rank 0 for a checkpoint (FSDP2's full state dict with
    /// `rank0_only`): every parameter all-gathered (every rank must call this), then
    /// rank 0's buffers; `None` on the other ranks. Names are the original VarStore's.
    pub fn full_state_dict(&self) -> Result<Option<Vec<(String, Tensor)>>> {
        let registry = lock(&self.state);
        let mut state = Vec::new();
        for unit in &registry.units {
            let unit_state = lock(&unit.state);
            for p in &unit_state.params {
                let mut padded = Tensor::empty(p.padded_shape(self.group.world_size()), (p.kind, p.device));
                self.group.all_gather_into_tensor(&mut padded, &p.shard.detach())?;
                state.push((p.name.clone(), padded.narrow(0, 0, p.shape[0])));
            }
        }
        if self.group.rank() != 0 {
            return Ok(None);
        }
        state.extend(registry.buffers.iter().map(|(n, t)| (n.clone(), t.detach().copy())));
        Ok(Some(state))
    }

    /// What this rank holds now: shards, their gradients, full parameters.
    pub fn memory(&self) -> Result<ShardMemory> {
        let registry = lock(&self.state);
        let mut memory = ShardMemory {
            peak_unsharded_bytes: self.memory.peak.load(Ordering::SeqCst),
            ..ShardMemory::default()
        };
        for unit in &registry.units {
            let state = lock(&unit.state);
            for p in &state.params {
                memory.model_numel += p.shape.iter().product::<i64>();
                memory.shard_numel += p.shard.numel() as i64;
                memory.shard_bytes += bytes_of(&p.shard);
                let grad = p.shard.grad();
                if grad.defined() {
                    memory.grad_bytes += bytes_of(&grad);
                }
                memory.unsharded_bytes += storage_bytes(&p.full)?;
            }
        }
        Ok(memory)
    }

    /// Every `fully_shard` call so far, in call order (the blocks, then the root).
    pub fn units(&self) -> Vec<ShardedUnit> {
        let registry = lock(&self.state);
        registry
            .units
            .iter()
            .map(|unit| {
                let state = lock(&unit.state);
                ShardedUnit {
                    prefix: unit.prefix.clone(),
                    numel: state.params.iter().map(|p| p.shape.iter().product::<i64>()).sum(),
                    shard_numel: state.flat_len,
                }
            })
            .collect()
    }

    /// Starts measuring [`ShardMemory::peak_unsharded_bytes`] again from now.
    pub fn reset_peak(&self) {
        self.memory.peak.store(self.memory.unsharded.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// The group the model is sharded over.
    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }
}

impl fmt::Debug for FullyShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FullyShard")
            .field("rank", &self.group.rank())
            .field("world_size", &self.group.world_size())
            .field("options", &self.options)
            .finish()
    }
}
