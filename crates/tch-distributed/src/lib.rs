//! `torch.distributed` for tch: libtorch's own c10d (TCPStore, ProcessGroupGloo,
//! ProcessGroupNCCL) reached through a small C++ shim.
//!
//! Lab code writes `use tch_distributed as dist;` and then reads like the Python:
//!
//! ```no_run
//! use std::time::Duration;
//! use tch::Tensor;
//! use tch_distributed as dist;
//!
//! # fn main() -> dist::Result<()> {
//! // MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE come from the environment (env://).
//! dist::init_process_group(dist::Backend::Gloo, dist::Init::Env, None, None, Duration::from_secs(60))?;
//! let mut t = Tensor::from_slice(&[dist::get_rank()? as f32]);
//! dist::all_reduce(&mut t, dist::ReduceOp::Sum)?;
//! dist::barrier()?;
//! dist::destroy_process_group()?;
//! # Ok(())
//! # }
//! ```
//!
//! Starting the ranks: [`spawn`] is `torch.multiprocessing.spawn` (the binary
//! re-executes itself once per local rank); under `torchrun --no-python` the ranks are
//! already started and [`LaunchEnv`] reads what torchrun set.
//!
//! Backend rules are PyTorch's: Gloo for CPU tensors (CUDA tensors work too), NCCL for
//! CUDA tensors only; a mismatch is an error, never a crash. Every C++ exception is
//! caught in the shim and arrives as a [`DistError`] carrying c10d's message.
mod error;
mod ffi;
mod group;
mod init;
mod launch;
mod spawn;
mod store;

use std::time::Duration;

pub use error::{DistError, ErrorKind, Result};
pub use group::{nccl_compiled_in, Backend, GroupOptions, ProcessGroup, ReduceOp, Work};
pub use init::{
    all_gather, all_gather_async, all_reduce, all_reduce_async, barrier, barrier_async, broadcast,
    broadcast_async, connect, default_group, destroy_process_group, get_backend, get_rank, get_world_size,
    init_process_group, is_initialized, is_loopback, reduce, reduce_async, Init, Rendezvous,
};
pub use launch::{local_rank, LaunchEnv};
pub use spawn::{
    spawn, spawned_rank, SpawnOptions, SpawnedRank, WorkerOutcome, DEFAULT_GRACE_PERIOD,
    SPAWN_LOCAL_RANK_VAR, SPAWN_NPROCS_VAR, SPAWN_PARENT_PID_VAR,
};
pub use store::{Store, TcpStoreOptions};

/// PyTorch's default process-group timeout (30 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
