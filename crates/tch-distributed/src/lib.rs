//! `torch.distributed` for tch: libtorch's own c10d (TCPStore, ProcessGroupGloo,
//! ProcessGroupNCCL, the DDP Reducer) reached through a small C++ shim.
//!
//! Lab code writes `use tch_distributed as dist;` and then reads like the Python.
//! A complete data-parallel training loop (start it once per rank, e.g. with
//! `torchrun --no-python --nproc-per-node 2 ./train`, which sets the env:// variables):
//!
//! ```no_run
//! use std::time::Duration;
//! use tch::nn::{self, ModuleT, OptimizerConfig};
//! use tch::{Device, Kind, Tensor};
//! use tch_distributed as dist;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE come from the environment.
//!     let options = dist::InitOptions { timeout: Duration::from_secs(60), ..Default::default() };
//!     dist::init_process_group(dist::Backend::Gloo, options)?;
//!     let (rank, world_size) = (dist::get_rank()?, dist::get_world_size()?);
//!
//!     let vs = nn::VarStore::new(Device::Cpu);
//!     let net = nn::seq_t().add(nn::linear(vs.root() / "fc1", 784, 128, Default::default()))
//!         .add_fn(|x| x.relu()).add(nn::linear(vs.root() / "fc2", 128, 10, Default::default()));
//!     // Replicas start from rank 0's weights; backward() averages gradients across ranks.
//!     let model = dist::DistributedDataParallel::new(net, &vs, dist::DdpOptions::default())?;
//!     let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
//!
//!     let (images, labels) = (Tensor::rand([6000, 784], (Kind::Float, Device::Cpu)),
//!                             Tensor::randint(10, [6000], (Kind::Int64, Device::Cpu)));
//!     let mut sampler = dist::DistributedSampler::new(6000, world_size, rank, dist::SamplerOptions::default())?;
//!     for epoch in 0..3 {
//!         sampler.set_epoch(epoch); // a new shuffle each epoch, the same on every rank
//!         let indices: Vec<i64> = sampler.indices().iter().map(|&i| i as i64).collect();
//!         for batch in indices.chunks(32) {
//!             let batch = Tensor::from_slice(batch);
//!             let (x, y) = (images.index_select(0, &batch), labels.index_select(0, &batch));
//!             let loss = model.forward_t(&x, true).cross_entropy_for_logits(&y);
//!             opt.backward_step(&loss);
//!         }
//!         let mut loss_sum = Tensor::from_slice(&[0f32]); // e.g. a metric to average
//!         dist::all_reduce(&mut loss_sum, dist::ReduceOp::Sum)?;
//!     }
//!     dist::destroy_process_group()?;
//!     Ok(())
//! }
//! ```
//!
//! Starting the ranks: [`spawn`] is `torch.multiprocessing.spawn` (the binary
//! re-executes itself once per local rank); under `torchrun --no-python` the ranks are
//! already started and [`LaunchEnv`] reads what torchrun set.
//!
//! Backend rules are PyTorch's: Gloo for CPU tensors (CUDA tensors work too), NCCL for
//! CUDA tensors only; a mismatch is an error, never a crash. Every C++ exception is
//! caught in the shim and arrives as a [`DistError`] carrying c10d's message.
//!
//! The keys in the rendezvous store, the groups' names and the collectives DDP issues
//! are PyTorch's, so a PyTorch rank can join the same job: see `tests/python_peers.rs`
//! and the workspace README's "One job, two languages".
//!
//! [`SyncBatchNorm`] (see [`sync_batch_norm2d`]) replaces `nn::batch_norm2d` with batch
//! norm whose training statistics span all ranks, on CPU (Gloo) and CUDA alike.
//!
//! Beyond DDP: [`FullyShard`] shards a model's parameters, gradients and optimizer
//! state over the ranks as PyTorch's FSDP2 `fully_shard` does, on top of
//! [`all_gather_into_tensor`] and [`reduce_scatter_tensor`]; [`send`] and [`recv`]
//! (and [`isend`], [`irecv`]) move tensors between two ranks, which [`Pipeline`] uses
//! to run a model cut into stages with GPipe's schedule.
#![warn(missing_docs)]
mod amp;
mod c_args;
mod collectives;
mod color;
mod connect;
mod ddp;
pub mod debug;
mod default_group;
pub mod diagnostics;
mod error;
mod ffi;
mod fsdp;
mod group;
mod launch_env;
mod mismatch;
mod new_group;
mod pipeline;
mod reduce_op;
mod rendezvous;
mod sampler;
pub mod spans;
mod spawn;
mod store;
mod sync_batch_norm;

use std::time::Duration;

pub use amp::autocast_bf16;
pub use collectives::{
    all_gather, all_gather_async, all_gather_into_tensor, all_gather_into_tensor_async, all_reduce,
    all_reduce_async, barrier, barrier_async, broadcast, broadcast_async, irecv, isend, recv,
    recv_any_source, reduce, reduce_async, reduce_scatter_tensor, reduce_scatter_tensor_async, send,
};
pub use connect::connect;
pub use ddp::{broadcast_coalesced, DdpOptions, DistributedDataParallel};
pub use default_group::{
    default_group, destroy_process_group, get_backend, get_rank, get_world_size, init_process_group,
    is_initialized, InitOptions,
};
pub use error::{DistError, ErrorKind, Result};
pub use fsdp::{FsdpModule, FsdpOptions, FullyShard, ShardMemory, ShardedUnit};
pub use group::{
    checks_collectives, nccl_compiled_in, Backend, GroupOptions, ProcessGroup, Work, CHECK_COLLECTIVES_ENV,
};
pub use launch_env::{
    local_rank, spawned_rank, LaunchEnv, SpawnedRank, GROUP_RANK_ENV, GROUP_WORLD_SIZE_ENV, LOCAL_RANK_ENV,
    LOCAL_WORLD_SIZE_ENV, MASTER_ADDR_ENV, MASTER_PORT_ENV, RANK_ENV, WORLD_SIZE_ENV,
};
pub use new_group::new_group;
pub use pipeline::{Pipeline, PipelineStep};
pub use reduce_op::ReduceOp;
pub use rendezvous::{Init, Rendezvous};
pub use sampler::{DistributedSampler, SamplerOptions};
pub use spawn::{
    set_exit_hook, set_worker_exit_code, spawn, SpawnOptions, WorkerFailure, WorkerOutcome,
    DEFAULT_GRACE_PERIOD,
};
pub use store::{Store, TcpStoreOptions};
pub use sync_batch_norm::{sync_batch_norm2d, SyncBatchNorm};

/// PyTorch's default process-group timeout (30 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
