//! One `fully_shard` call's parameters and their state machine (FSDP2's
//! `FSDPParamGroup`): sharded, unsharded by all-gather, resharded, and their gradients
//! reduce-scattered.
use std::sync::{Arc, Mutex, MutexGuard};

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use super::memory::Memory;
use super::options::FsdpOptions;
use super::storage::{copy_unversioned, storage_alloc, storage_bytes, storage_free};
use crate::error::{DistError, Result};
use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;

/// Variables with their VarStore names.
pub(super) type Named = Vec<(String, Tensor)>;

/// One `fully_shard` call's parameters: all-gathered together, reduce-scattered together.
pub(super) struct Unit {
    pub(super) name: String,
    /// The VarStore path `fully_shard` was given.
    pub(super) prefix: String,
    group: Arc<ProcessGroup>,
    memory: Arc<Memory>,
    pub(super) reshard_after_forward: bool,
    /// What the summed gradients are divided by.
    gradient_divide_factor: f64,
    pub(super) state: Mutex<UnitState>,
}

pub(super) struct UnitState {
    pub(super) params: Vec<ShardedParam>,
    /// Elements of this rank's shards together (each padded).
    pub(super) flat_len: i64,
    /// Whether the full parameters hold memory now.
    unsharded: bool,
}

pub(super) struct ShardedParam {
    pub(super) name: String,
    /// The module's own tensor (the original VarStore's variable): full shape; memory
    /// only while unsharded.
    pub(super) full: Tensor,
    /// Rank r's chunk, padded to `shard_rows` rows: a variable of the shard VarStore.
    pub(super) shard: Tensor,
    pub(super) shape: Vec<i64>,
    shard_rows: i64,
    pub(super) kind: Kind,
    pub(super) device: Device,
}

impl ShardedParam {
    fn shard_numel(&self) -> i64 {
        self.shard.numel() as i64
    }

    /// The full shape padded to `world_size * shard_rows` rows.
    pub(super) fn padded_shape(&self, world_size: usize) -> Vec<i64> {
        let mut shape = self.shape.clone();
        shape[0] = self.shard_rows * world_size as i64;
        shape
    }
}

impl Unit {
    pub(super) fn new(
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
    pub(super) fn unshard(&self, state: &mut UnitState) -> Result<()> {
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
    pub(super) fn reshard(&self, state: &mut UnitState) -> Result<()> {
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

    pub(super) fn pre_backward(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if !state.unsharded {
            self.unshard(&mut state)?;
        }
        Ok(())
    }

    /// The block's full gradients (`None`: the parameter got none) to its shards':
    /// padded, laid out rank by rank as the all-gather lays out shards, reduce-scattered,
    /// divided by the world size. Then frees the full parameters.
    pub(super) fn post_backward(&self, grads: Vec<Option<Tensor>>) -> Result<Vec<Tensor>> {
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

/// The guard even of a lock a panic poisoned: the state under it is still whole.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
