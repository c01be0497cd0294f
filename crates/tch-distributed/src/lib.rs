// The crate's documentation is its README, so that every example in it is compiled
// (and the runnable ones run) by `cargo test --doc`.
#![doc = include_str!("../README.md")]
// The README shows whole files (a dependent's build.rs), `fn main` included.
#![allow(clippy::needless_doctest_main)]
#![warn(missing_docs)]
mod amp;
mod c_args;
mod collectives;
mod color;
mod connect;
mod ddp;
pub mod debug;
mod default_group;
mod device_mesh;
pub mod diagnostics;
mod error;
mod ffi;
mod fsdp;
mod grad_hooks;
mod group;
mod launch_env;
mod mismatch;
mod new_group;
mod pipeline;
mod reduce_op;
mod rendezvous;
mod sampler;
mod shim_callback;
pub mod spans;
mod spawn;
mod store;
mod sync_batch_norm;
mod tensor_parallel;

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
pub use device_mesh::{init_device_mesh, DeviceMesh};
pub use error::{DistError, ErrorKind, Result};
pub use fsdp::{FsdpModule, FsdpOptions, FullyShard, ShardMemory, ShardedUnit};
pub use grad_hooks::{register_hook, register_post_accumulate_grad_hook, RemovableHandle};
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
pub use tensor_parallel::{
    copy_to_region, gather_from_region, parallelize_module, reduce_from_region, scatter_to_region,
    ParallelStyle,
};

/// PyTorch's default process-group timeout (30 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
