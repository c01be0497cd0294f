//! Fully sharded data parallel for tch models, in the manner of PyTorch's FSDP2
//! (`torch.distributed.fsdp.fully_shard`).
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
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tch::nn::{ModuleT, VarStore, Variables};
use tch::{Device, Kind, Tensor};

use crate::ddp::broadcast_coalesced;
use crate::error::{check, DistError, Result};
use crate::ffi;
use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;

/// Options of [`FullyShard`].
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
    /// [`FullyShard::reset_peak`] (measured at every all-gather and free).
    pub peak_unsharded_bytes: i64,
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

#[derive(Default)]
struct Registry {
    /// Names of the variables (parameters and buffers) some `fully_shard` took.
    claimed: HashSet<String>,
    /// Buffers (and frozen variables) the units took: not sharded.
    buffers: Named,
    units: Vec<Arc<Unit>>,
    root_sharded: bool,
}

#[derive(Default)]
struct Memory {
    unsharded: AtomicI64,
    peak: AtomicI64,
}

impl Memory {
    fn change(&self, delta: i64) {
        let now = self.unsharded.fetch_add(delta, Ordering::SeqCst) + delta;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
}

/// Variables with their VarStore names.
type Named = Vec<(String, Tensor)>;

/// The VarStore's variables: trainable ones in creation order, then the others, by name.
fn variables(model: &Mutex<Variables>) -> (Named, Named) {
    let model = lock(model);
    let mut named: Vec<(&String, &Tensor)> = model.named_variables.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let mut trainable = Vec::new();
    for var in &model.trainable_variables {
        // The same tensor under its name (is_set_to: the same storage, even once freed).
        if let Some(i) = named.iter().position(|(_, t)| t.is_set_to(&var.tensor)) {
            let (name, t) = named.remove(i);
            trainable.push((name.clone(), t.shallow_clone()));
        }
    }
    let others = named.into_iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    (trainable, others)
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

/// A module whose parameters [`FullyShard::fully_shard`] sharded: its forward
/// all-gathers them first and frees them after, and sets up the backward pass.
pub struct FsdpModule<M> {
    module: M,
    unit: Arc<Unit>,
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

/// One `fully_shard` call's parameters: all-gathered together, reduce-scattered together.
struct Unit {
    name: String,
    /// The VarStore path `fully_shard` was given.
    prefix: String,
    group: Arc<ProcessGroup>,
    memory: Arc<Memory>,
    reshard_after_forward: bool,
    /// What the summed gradients are divided by.
    gradient_divide_factor: f64,
    state: Mutex<UnitState>,
}

struct UnitState {
    params: Vec<ShardedParam>,
    /// Elements of this rank's shards together (each padded).
    flat_len: i64,
    /// Whether the full parameters hold memory now.
    unsharded: bool,
}

struct ShardedParam {
    name: String,
    /// The module's own tensor (the original VarStore's variable): full shape; memory
    /// only while unsharded.
    full: Tensor,
    /// Rank r's chunk, padded to `shard_rows` rows: a variable of the shard VarStore.
    shard: Tensor,
    shape: Vec<i64>,
    shard_rows: i64,
    kind: Kind,
    device: Device,
}

impl ShardedParam {
    fn shard_numel(&self) -> i64 {
        self.shard.numel() as i64
    }

    /// The full shape padded to `world_size * shard_rows` rows.
    fn padded_shape(&self, world_size: usize) -> Vec<i64> {
        let mut shape = self.shape.clone();
        shape[0] = self.shard_rows * world_size as i64;
        shape
    }
}

impl Unit {
    fn new(
        what: &str,
        prefix: &str,
        params: Named,
        group: &Arc<ProcessGroup>,
        shards: &VarStore,
        memory: &Arc<Memory>,
        options: &FsdpOptions,
    ) -> Result<Unit> {
        let root = prefix.is_empty();
        let world = group.world_size() as i64;
        let rank = group.rank() as i64;
        let placed = |t: &Tensor| (t.kind(), t.device());
        if let Some(((first, a), (other, b))) =
            params.first().and_then(|p| params.iter().find(|q| placed(&q.1) != placed(&p.1)).map(|q| (p, q)))
        {
            return Err(DistError::invalid(format!(
                "{what}: \"{first}\" is {:?} on {:?} but \"{other}\" is {:?} on {:?}: the parameters of one fully_shard call are all-gathered as one tensor and must share a dtype and device: shard them in separate calls",
                a.kind(),
                a.device(),
                b.kind(),
                b.device()
            )));
        }
        // Everything is checked before the first shard is made: a refused call leaves
        // the shard VarStore as it was.
        if let Some((name, _)) = params.iter().find(|(_, t)| t.dim() == 0) {
            return Err(DistError::invalid(format!(
                "{what}: \"{name}\" is a scalar: parameters are sharded along dim 0, so a scalar cannot be; make it shape [1]"
            )));
        }
        let mut sharded = Vec::new();
        for (name, full) in params {
            let shape = full.size();
            // torch.chunk's chunk size, and rank r's rows of it (none past the end).
            let shard_rows = (shape[0] + world - 1) / world;
            let start = (rank * shard_rows).min(shape[0]);
            let rows = (shape[0] - start).min(shard_rows);
            let mut padded_shape = shape.clone();
            padded_shape[0] = shard_rows;
            let shard = tch::no_grad(|| {
                let padded = Tensor::zeros(padded_shape.as_slice(), (full.kind(), full.device()));
                if rows > 0 {
                    padded.narrow(0, 0, rows).copy_(&full.narrow(0, start, rows));
                }
                padded
            });
            let shard = var_at(shards, &name, shard);
            sharded.push(ShardedParam {
                name,
                kind: full.kind(),
                device: full.device(),
                full,
                shard,
                shape,
                shard_rows,
            });
        }
        // The shards hold the parameters from now on: the full ones give their memory back.
        for p in &mut sharded {
            storage_free(&mut p.full)?;
        }
        let flat_len = sharded.iter().map(ShardedParam::shard_numel).sum();
        Ok(Unit {
            name: what.to_string(),
            prefix: prefix.to_string(),
            group: group.clone(),
            memory: memory.clone(),
            reshard_after_forward: options.reshard_after_forward && !root,
            gradient_divide_factor: options.gradient_divide_factor.unwrap_or(world as f64),
            state: Mutex::new(UnitState { params: sharded, flat_len, unsharded: false }),
        })
    }

    /// All-gathers the shards into the full parameters (allocating their memory).
    fn unshard(&self, state: &mut UnitState) -> Result<()> {
        if state.params.is_empty() {
            return Ok(());
        }
        let world = self.group.world_size() as i64;
        tch::no_grad(|| {
            let (kind, device) = (state.params[0].kind, state.params[0].device);
            let shards: Vec<Tensor> = state.params.iter().map(|p| p.shard.detach().view([-1])).collect();
            let flat = Tensor::cat(&shards, 0);
            let mut gathered = Tensor::empty([world * state.flat_len], (kind, device));
            self.group.all_gather_into_tensor(&mut gathered, &flat)?;
            // Row r: rank r's shards one after the other.
            let by_rank = gathered.view([world, state.flat_len]);
            let before = state.storage_bytes()?;
            let mut offset = 0;
            for p in &mut state.params {
                let len = p.shard_numel();
                let padded = by_rank.narrow(1, offset, len).reshape(p.padded_shape(world as usize));
                storage_alloc(&mut p.full)?;
                copy_unversioned(&mut p.full, &padded.narrow(0, 0, p.shape[0]))?;
                offset += len;
            }
            self.memory.change(state.storage_bytes()? - before);
            state.unsharded = true;
            Ok(())
        })
    }

    /// Frees the full parameters' memory.
    fn reshard(&self, state: &mut UnitState) -> Result<()> {
        if !state.unsharded {
            return Ok(());
        }
        let before = state.storage_bytes()?;
        for p in &mut state.params {
            storage_free(&mut p.full)?;
        }
        self.memory.change(state.storage_bytes()? - before);
        state.unsharded = false;
        Ok(())
    }

    fn pre_forward(self: &Arc<Self>) -> Result<()> {
        let mut state = lock(&self.state);
        // Always gathered afresh: the optimizer may have stepped since the last time.
        self.unshard(&mut state)?;
        if grad_enabled() && !state.params.is_empty() {
            let mut fulls: Vec<*mut c_void> =
                state.params.iter_mut().map(|p| p.full.as_mut_ptr() as *mut c_void).collect();
            let mut shards: Vec<*mut c_void> =
                state.params.iter_mut().map(|p| p.shard.as_mut_ptr() as *mut c_void).collect();
            let ctx = Arc::into_raw(self.clone()) as *mut c_void;
            let mut err = ptr::null_mut();
            check(
                unsafe {
                    ffi::tchd_fsdp_attach(
                        fulls.as_mut_ptr(),
                        fulls.len(),
                        shards.as_mut_ptr(),
                        shards.len(),
                        reduce_scatter_gradients,
                        drop_unit,
                        ctx,
                        &mut err,
                    )
                },
                err,
            )
            .map_err(|e| e.context(&self.name))?;
        }
        Ok(())
    }

    fn post_forward(self: &Arc<Self>, out: &Tensor) -> Result<()> {
        let recorded = grad_enabled() && out.requires_grad();
        let mut state = lock(&self.state);
        if self.reshard_after_forward || !recorded {
            self.reshard(&mut state)?;
        }
        if recorded && !state.params.is_empty() {
            // Before the block's backward: its parameters again.
            let mut out = out.shallow_clone();
            let ctx = Arc::into_raw(self.clone()) as *mut c_void;
            let mut err = ptr::null_mut();
            check(
                unsafe {
                    ffi::tchd_register_grad_hook(
                        out.as_mut_ptr() as *mut c_void,
                        unshard_for_backward,
                        drop_unit,
                        ctx,
                        &mut err,
                    )
                },
                err,
            )
            .map_err(|e| e.context(&self.name))?;
        }
        Ok(())
    }

    fn pre_backward(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if !state.unsharded {
            self.unshard(&mut state)?;
        }
        Ok(())
    }

    /// The block's full gradients (`None`: the parameter got none) to its shards':
    /// padded, laid out rank by rank as the all-gather lays out shards, reduce-scattered,
    /// divided by the world size. Then frees the full parameters.
    fn post_backward(&self, grads: Vec<Option<Tensor>>) -> Result<Vec<Tensor>> {
        let mut state = lock(&self.state);
        let world = self.group.world_size() as i64;
        let (kind, device) = (state.params[0].kind, state.params[0].device);
        let mut pieces = Vec::with_capacity(grads.len());
        for (p, grad) in state.params.iter().zip(grads) {
            let grad = grad.unwrap_or_else(|| Tensor::zeros(p.shape.as_slice(), (kind, device)));
            let missing = p.shard_rows * world - p.shape[0];
            let padded = if missing > 0 {
                let mut pad = p.shape.clone();
                pad[0] = missing;
                Tensor::cat(&[grad, Tensor::zeros(pad.as_slice(), (kind, device))], 0)
            } else {
                grad
            };
            pieces.push(padded.reshape([world, p.shard_numel()]));
        }
        let input = Tensor::cat(&pieces, 1);
        drop(pieces);
        let mut reduced = Tensor::empty([state.flat_len], (kind, device));
        self.group.reduce_scatter_tensor(&mut reduced, &input, ReduceOp::Sum)?;
        drop(input);
        // The average over ranks, as DDP's (unless the options say otherwise): Gloo has
        // no ReduceOp::Avg.
        let _ = reduced.g_div_scalar_(self.gradient_divide_factor);
        let mut offset = 0;
        let mut shard_grads = Vec::with_capacity(state.params.len());
        for p in &state.params {
            let len = p.shard_numel();
            shard_grads.push(reduced.narrow(0, offset, len).view(p.shard.size().as_slice()));
            offset += len;
        }
        self.reshard(&mut state)?;
        Ok(shard_grads)
    }
}

impl UnitState {
    fn storage_bytes(&self) -> Result<i64> {
        self.params.iter().map(|p| storage_bytes(&p.full)).sum()
    }
}

/// The shard VarStore's variable for `name` (`block1.conv.weight`: path `block1.conv`).
fn var_at(vs: &VarStore, name: &str, value: Tensor) -> Tensor {
    let mut path = vs.root();
    let mut parts: Vec<&str> = name.split('.').collect();
    let last = parts.pop().unwrap_or(name);
    for part in parts {
        path = path.sub(part);
    }
    // `add`, not `var_copy`: the shard keeps the parameter's dtype.
    path.add(last, value, true)
}

fn bytes_of(t: &Tensor) -> i64 {
    t.numel() as i64 * t.kind().elt_size_in_bytes() as i64
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn grad_enabled() -> bool {
    unsafe { ffi::tchd_grad_enabled() != 0 }
}

fn storage_bytes(t: &Tensor) -> Result<i64> {
    let mut out = 0;
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_nbytes(t.as_ptr() as *const c_void, &mut out, &mut err) }, err)?;
    Ok(out)
}

fn storage_free(t: &mut Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_free(t.as_mut_ptr() as *mut c_void, &mut err) }, err)
}

fn storage_alloc(t: &mut Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_alloc(t.as_mut_ptr() as *mut c_void, &mut err) }, err)
}

fn copy_unversioned(dst: &mut Tensor, src: &Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(
        unsafe {
            ffi::tchd_copy_unversioned(
                dst.as_mut_ptr() as *mut c_void,
                src.as_ptr() as *const c_void,
                &mut err,
            )
        },
        err,
    )
}

/// An error for the shim, which frees it with `free`.
fn report(err: *mut *mut c_char, message: &str) -> c_int {
    if !err.is_null() {
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        unsafe { *err = libc::strdup(text.as_ptr()) };
    }
    ffi::TCHD_ERR_OTHER
}

/// Runs `body` for the shim: errors and panics become a status and a message (nothing
/// may unwind into C++).
fn for_shim(err: *mut *mut c_char, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ffi::TCHD_OK,
        Ok(Err(e)) => report(err, &format!("FSDP: {e}")),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            report(err, &format!("FSDP: {text}"))
        }
    }
}

extern "C" fn drop_unit(ctx: *mut c_void) {
    // SAFETY: every context handed to the shim is an Arc<Unit> from Arc::into_raw.
    drop(unsafe { Arc::from_raw(ctx as *const Unit) });
}

extern "C" fn unshard_for_backward(ctx: *mut c_void, err: *mut *mut c_char) -> c_int {
    // SAFETY: the hook's context, alive until drop_unit.
    let unit = unsafe { &*(ctx as *const Unit) };
    for_shim(err, || unit.pre_backward().map_err(|e| e.context(&unit.name)))
}

extern "C" fn reduce_scatter_gradients(
    ctx: *mut c_void,
    grads: *const *mut c_void,
    n: usize,
    shard_grads: *mut *mut c_void,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: the node's context, alive until drop_unit; the gradients are owned
    // `at::Tensor*`s the shim made for us (or null).
    let unit = unsafe { &*(ctx as *const Unit) };
    let grads: Vec<Option<Tensor>> = (0..n)
        .map(|i| {
            let p = unsafe { *grads.add(i) };
            (!p.is_null()).then(|| unsafe { Tensor::from_ptr(p as *mut torch_sys::C_tensor) })
        })
        .collect();
    for_shim(err, || {
        let out = unit.post_backward(grads).map_err(|e| e.context(&unit.name))?;
        for (i, mut t) in out.into_iter().enumerate() {
            // Ownership goes to the shim, which frees the handle.
            unsafe { *shard_grads.add(i) = t.as_mut_ptr() as *mut c_void };
            std::mem::forget(t);
        }
        Ok(())
    })
}
