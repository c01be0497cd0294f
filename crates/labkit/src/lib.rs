//! What the DDP lab hands students ready-made: the WideResNet model (and the
//! exact-comparison [`Mlp`] the checker trains in its place), Fashion-MNIST
//! (download, checksums, a generated stand-in), batch iteration, the lab's report
//! lines, the trace the checker reads, and a timeline of a run for Perfetto.
//!
//! The modules depend on one another without a cycle (`tools/module-graph`'s workspace test); from
//! the bottom: `course_sources` and `revision` (the course revision every program
//! carries), `error`, `rng`, `widths`, `parsers`, `placement` (which device and backend
//! each rank of a node gets), `trace`, `perfetto`; `data`, `perf`, `probes`,
//! `dropout`; `run` (the run's settings); `model`, `loader`, `report`, `optim` (the SGD whose state a checkpoint saves);
//! `checkpoint`;
//! `lab` (`train`, `test`), `sharded` (the model under FSDP), `console` (the lines about
//! processes), `dataset` (the lab's calls for its data), `exit` (how `main` ends);
//! `options` (`RunOptions::apply`); `pipeline` (the model cut into stages:
//! `train_pipeline`, `test_pipeline`).
#![warn(missing_docs)]
pub mod checkpoint;
mod console;
pub mod course_sources;
pub mod data;
mod dataset;
pub mod dropout;
mod error;
mod exit;
mod lab;
pub mod loader;
pub mod model;
mod optim;
mod options;
mod parsers;
pub mod perf;
pub mod perfetto;
mod pipeline;
mod placement;
pub mod probes;
pub mod report;
pub mod revision;
mod rng;
mod run;
mod sharded;
mod split_model;
mod tensor_parallel;
pub mod trace;
mod widths;

pub use checkpoint::{
    checkpoint_due, load_checkpoint, resume, resume_after, save as save_checkpoint, write_checkpoint,
    Checkpoint, CheckpointError, CheckpointOptions, Start, TrainingState,
};
pub use console::{announce_world, worker_started};
pub use data::{
    download, ensure_dataset, generate, load_ready, DataError, DatasetAction, DatasetKind, DatasetOptions,
    DatasetReady, DownloadOptions, EpochBatches, FashionMnist, GenerateOptions, Manifest, Split,
};
pub use dataset::{load_dataset, prepare_dataset};
pub use error::{BoxError, Failure, Result};
pub use exit::{exit_code, finish};
pub use lab::{test, train, Model};
pub use loader::{DataLoader, LoaderOptions, RandomSampler, Sampler, SequentialSampler};
pub use model::{parameter_count, Block, Mlp, ModelSettings, Norm, TensorParallelNorm, WideResNet};
pub use optim::{Optimizer, Sgd};
pub use options::RunOptions;
pub use parsers::{learning_rate, momentum, node_count, node_index, positive, ranks_per_node};
pub use perf::{forward_flops_per_image, Amp};
pub use pipeline::{
    check_pipeline, pipeline_refusal, stage_layers, test_pipeline, train_pipeline, Bubble, PipelineRequest,
};
pub use placement::{check_gpus, gpu_count, DeviceChoice, GpuRequest, Placement};
pub use probes::{
    EQUIVALENCE_ENV, FAIL_AT_EPOCH_ENV, FAIL_ONCE_ENV, FAIL_RANK_ENV, SEED_PER_RANK_ENV, SLOW_PREPARE_DELAY,
    SLOW_PREPARE_ENV, SLOW_RANK_DELAY, SLOW_RANK_ENV, SLOW_SAVE_DELAY, SLOW_SAVE_ENV, STALL_RANK_ENV,
    TRACE_STEPS_ENV,
};
pub use report::{images_per_sec, EarlyStopping, EpochReport};
pub use report::{print_summary, Summary};
pub use rng::Rng;
pub use sharded::ShardedModel;
pub use tensor_parallel::{
    check_device_mesh, check_tensor_parallel, device_mesh_refusal, tensor_parallel_refusal,
    TensorParallelRequest,
};
pub use widths::{Architecture, Widths};

/// Tests that seed or draw from libtorch's global generator hold this, so that tests
/// running in parallel threads do not draw from each other's seeds.
#[cfg(test)]
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
