//! Every event of the trace, one struct each with exactly the fields its line has. The
//! line's `event` field is the [`Event`] variant's name in snake case (`EpochReport` is
//! `epoch_report`); neither side spells it out.
use serde::{Deserialize, Serialize};

use crate::floats;
pub use crate::names::{CollectiveOp, DatasetAction, DatasetKind, Dtype, ReduceOp};

/// An event's own struct, found in an [`Event`] ([`crate::Record::get`]).
pub trait EventKind: Sized + 'static {
    /// `Some` when `event` is of this kind.
    fn of(event: &Event) -> Option<&Self>;
}

macro_rules! events {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// What a trace line records.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "event", rename_all = "snake_case")]
        pub enum Event {
            $($(#[$doc])* $name($name),)*
        }

        $(
            impl EventKind for $name {
                fn of(event: &Event) -> Option<&Self> {
                    match event {
                        Event::$name(e) => Some(e),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
            }

            impl From<$name> for Event {
                fn from(e: $name) -> Event {
                    Event::$name(e)
                }
            }
        )*
    };
}

events! {
    /// `labkit::announce_world`: the world the program is about to form.
    World,
    /// `labkit::worker_started`: a worker entered, with the local rank it was given.
    Worker,
    /// `labkit::prepare_dataset` begins.
    PrepareDataset,
    /// `labkit::prepare_dataset` has made the data set ready on disk.
    DatasetReady,
    /// `labkit::load_dataset` begins reading (before any file is opened).
    LoadDataset,
    /// `labkit::load_dataset` has read the data set.
    DatasetLoaded,
    /// `labkit::train`: the indices of the epoch's training batches, in order.
    TrainIndices,
    /// The weights before the first training step (after DDP's broadcast).
    InitialWeights,
    /// The weights after an epoch of training.
    Weights,
    /// `labkit::test`: this rank's validation over its share.
    Validation,
    /// `EpochReport::record`: the epoch's figures as the rank holds them.
    EpochReport,
    /// `EpochReport::print`: the epoch line printed.
    Printed,
    /// `labkit::images_per_sec`: this rank's own throughput.
    ImagesPerSec,
    /// `labkit::print_summary`: the quick evaluation's summary.
    Summary,
    /// A collective the program issued (tch-distributed's debug observer).
    Collective,
    /// `labkit::resume`: training continues from a checkpoint.
    Resumed,
    /// `labkit::save_checkpoint` or `write_checkpoint`: a checkpoint has been written
    /// (this line's time is when it became whole: its commit).
    CheckpointSaved,
    /// `labkit::write_checkpoint` begins writing (before any file is touched).
    SaveCheckpoint,
    /// `labkit::load_checkpoint` begins reading (before any file is opened).
    LoadCheckpoint,
    /// `labkit::load_checkpoint` has loaded a checkpoint's weights.
    CheckpointLoaded,
    /// `labkit::train` or `labkit::train_pipeline`: the run's first training step, its
    /// loss and the weights after it, as float values (not a bitwise digest).
    FirstStep,
    /// `labkit::train`, when the checker asks (`DDP_LAB_TRACE_STEPS`): the weights after
    /// each of the run's first training steps, as float values.
    TrainingStep,
    /// `labkit::train`, for the steps [`TrainingStep`] records: the step's backward pass
    /// begins. The collectives between it and [`BackwardEnded`] ran inside backward
    /// (DDP's buckets, a hook's launches): the overlap the checker judges.
    BackwardStarted,
    /// `labkit::train`, for the steps [`TrainingStep`] records: the step's backward pass
    /// has returned, before the model's `after_backward` (a DDP written by hand) and the
    /// optimizer step.
    BackwardEnded,
    /// `labkit::train_pipeline`: the part of the model this rank holds, its stage.
    PipelineStage,
    /// `labkit::train_pipeline`: an epoch of the pipeline on this rank, its time busy
    /// and idle (the bubble).
    PipelineEpoch,
    /// `labkit::train`, on rank 0 after each epoch: each parameter of the whole model
    /// summarised in floats (gathered from the shards under FSDP), for comparisons
    /// closer than [`Weights::projection`] and looser than bitwise.
    ParameterValues,
    /// `labkit::train` under FSDP, on every rank after each epoch: what the rank holds.
    ShardsHeld,
    /// `labkit::train` under tensor parallelism, on every rank after each epoch: each
    /// parameter's slice on this rank (its split dimension, offset and length) and the
    /// TP group it is split over.
    TensorSlices,
    /// `EarlyStopping::record`: the accuracy a rank decided on, and its decision.
    StopDecision,
    /// A process group this process made or numbered (tch-distributed's group
    /// observer): what a [`Collective`]'s `group` number stands for.
    GroupCreated,
}

/// See [`Event::World`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct World {
    /// The world size announced (every rank on every node).
    pub world_size: usize,
    /// The rendezvous address, `host:port`.
    pub rendezvous: String,
}

/// See [`Event::Worker`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    /// The local rank the worker was called with.
    pub worker_local_rank: usize,
}

/// See [`Event::PrepareDataset`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrepareDataset {
    /// The data directory asked for (`--data-dir`).
    pub dir: String,
    /// The data set asked for.
    pub kind: DatasetKind,
}

/// See [`Event::DatasetReady`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetReady {
    /// Where the four files are (a subdirectory for the generated stand-in).
    pub dir: String,
    /// The data set used: real or generated, never auto.
    pub kind_used: DatasetKind,
    /// What preparing did.
    pub action: DatasetAction,
    /// The files downloaded.
    pub downloaded: Vec<String>,
}

/// See [`Event::LoadDataset`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadDataset {
    /// The data directory asked for, as [`PrepareDataset::dir`].
    pub dir: String,
}

/// See [`Event::DatasetLoaded`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetLoaded {
    /// Where the files were read from.
    pub dir: String,
    /// Training samples kept.
    pub train: usize,
    /// Validation samples kept.
    pub test: usize,
}

/// See [`Event::TrainIndices`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainIndices {
    /// The epoch (0-based).
    pub epoch: usize,
    /// The sampler's indices, in the order trained.
    pub indices: Vec<usize>,
}

/// See [`Event::InitialWeights`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitialWeights {
    /// FNV-1a of every value: equal exactly when the weights are bit-for-bit equal.
    pub digest: String,
    /// The weights projected onto eight fixed directions: close when nearly equal.
    #[serde(deserialize_with = "floats::projection")]
    pub projection: [f64; 8],
}

/// See [`Event::Weights`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// The epoch just trained (0-based).
    pub epoch: usize,
    /// As [`InitialWeights::digest`].
    pub digest: String,
    /// As [`InitialWeights::projection`].
    #[serde(deserialize_with = "floats::projection")]
    pub projection: [f64; 8],
}

/// See [`Event::Validation`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// correct / total over this rank's share.
    #[serde(deserialize_with = "floats::float")]
    pub accuracy: f64,
    /// The mean of the batch losses.
    #[serde(deserialize_with = "floats::float")]
    pub loss: f64,
    /// Images classified correctly.
    pub correct: i64,
    /// Images validated.
    pub total: usize,
    /// Batches validated.
    pub batches: usize,
    /// The sampler's indices.
    pub indices: Vec<usize>,
}

/// See [`Event::EpochReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochReport {
    /// The epoch (0-based).
    pub epoch: usize,
    /// Seconds of training so far.
    #[serde(deserialize_with = "floats::float")]
    pub cumulative_time: f64,
    /// Seconds of this epoch.
    #[serde(deserialize_with = "floats::float")]
    pub epoch_time: f64,
    /// The images/sec the rank holds (rank 0: the sum over ranks).
    #[serde(deserialize_with = "floats::float")]
    pub images_per_sec: f64,
    /// The validation loss the rank holds.
    #[serde(deserialize_with = "floats::float")]
    pub validation_loss: f64,
    /// The validation accuracy the rank holds.
    #[serde(deserialize_with = "floats::float")]
    pub validation_accuracy: f64,
}

/// See [`Event::Printed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Printed {
    /// The epoch (0-based).
    pub epoch: usize,
    /// The line, as printed.
    pub line: String,
    /// Its images/sec, unrounded.
    #[serde(deserialize_with = "floats::float")]
    pub images_per_sec: f64,
}

/// See [`Event::ImagesPerSec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImagesPerSec {
    /// batches x batch size / epoch time.
    #[serde(deserialize_with = "floats::float")]
    pub value: f64,
    /// Batches of the epoch.
    pub batches: usize,
    /// Images per batch.
    pub batch_size: usize,
}

/// See [`Event::Summary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The summary line, as printed.
    pub line: String,
    /// Epochs trained.
    pub epochs: usize,
    /// The best validation accuracy.
    #[serde(deserialize_with = "floats::float")]
    pub best_accuracy: f64,
    /// The first epoch that reached the target, if one did.
    pub reached_at: Option<usize>,
    /// Mean images/sec.
    #[serde(deserialize_with = "floats::float")]
    pub images_per_sec: f64,
}

/// See [`Event::Collective`]; the fields of tch-distributed's `CollectiveCall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collective {
    /// Which collective.
    pub op: CollectiveOp,
    /// How a reduction combines the ranks' values; `None` for the others.
    pub reduce_op: Option<ReduceOp>,
    /// The destination of `reduce`, the source of `broadcast`.
    pub root: Option<usize>,
    /// The input's element type, none for a barrier.
    pub dtype: Option<Dtype>,
    /// Elements in the input.
    pub numel: i64,
    /// The group's count of collectives, from 0.
    pub seq: u64,
    /// Which group of the process, in creation order.
    pub group: u64,
    /// The input's values before the call, for small tensors.
    #[serde(deserialize_with = "floats::optional_floats")]
    pub values: Option<Vec<f64>>,
    /// Where the program issued it, `file:line:column` of the call in the program's
    /// source (`src/main.rs:142:13`); `None` for the calls a library makes on its own
    /// (DDP's broadcast, FSDP's all-gathers) and in traces written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

/// See [`Event::Resumed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// The epoch training continues at.
    pub epoch: usize,
    /// The checkpoint's weights file.
    pub weights: String,
    /// The loaded weights' digest, as [`Weights::digest`].
    pub digest: String,
}

/// See [`Event::StopDecision`]: what each rank decided, so that ranks which happen to
/// agree (every accuracy reaching the target) still show deciding on different values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopDecision {
    /// The accuracies recorded so far, this one included (restored ones too).
    pub recorded: usize,
    /// The accuracy recorded.
    #[serde(deserialize_with = "floats::float")]
    pub accuracy: f64,
    /// Whether training should stop.
    pub stop: bool,
}

/// See [`Event::CheckpointSaved`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSaved {
    /// The epoch saved after.
    pub epoch: usize,
    /// The weights file.
    pub weights: String,
    /// Its MD5.
    pub md5: String,
}

/// See [`Event::SaveCheckpoint`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaveCheckpoint {
    /// The epoch being saved after.
    pub epoch: usize,
    /// The checkpoint directory.
    pub dir: String,
}

/// See [`Event::LoadCheckpoint`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadCheckpoint {
    /// The checkpoint directory.
    pub dir: String,
    /// Where the saved tensors are loaded to (PyTorch's `map_location`), e.g. "cpu" or "cuda:1".
    pub device: String,
    /// Where this rank's model lives: a correct device mapping loads onto it.
    pub model_device: String,
}

/// See [`Event::CheckpointLoaded`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointLoaded {
    /// The epoch the checkpoint was saved after.
    pub epoch: usize,
    /// Its weights file.
    pub weights: String,
    /// The loaded weights' digest, as [`Weights::digest`].
    pub digest: String,
}

/// See [`Event::FirstStep`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstStep {
    /// The batch's mean loss: on the uncut model, or the last stage of a pipeline (the
    /// other stages never see it). A non-finite loss is written as `null`, as absent.
    pub loss: Option<f64>,
    /// Every parameter the optimizer steps, in the order it holds them (the order they
    /// were built: a pipeline's stages in turn give the uncut model's order).
    pub parameters: Vec<StepParameter>,
}

/// Float values of one parameter tensor: enough to tell two sets of weights that agree
/// to 1e-5 from two that do not, without writing every value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepParameter {
    /// Its shape.
    pub shape: Vec<i64>,
    /// Its Euclidean norm.
    #[serde(deserialize_with = "floats::float")]
    pub norm: f64,
    /// Values at evenly spaced positions of the flattened tensor (all of a small one).
    #[serde(deserialize_with = "floats::floats")]
    pub samples: Vec<f64>,
}

/// See [`Event::TrainingStep`]: [`FirstStep`]'s values for each of a run's first steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingStep {
    /// The step of the run (0-based, counted over its epochs).
    pub step: usize,
    /// The batch's mean loss on this rank (`null` when not finite).
    pub loss: Option<f64>,
    /// Every parameter the optimizer steps, in the order it holds them, after the step.
    pub parameters: Vec<StepParameter>,
}

/// See [`Event::BackwardStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackwardStarted {
    /// The step of the run, as [`TrainingStep::step`] numbers it.
    pub step: usize,
}

/// See [`Event::BackwardEnded`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackwardEnded {
    /// The step of the run, as [`TrainingStep::step`] numbers it.
    pub step: usize,
}

/// See [`Event::PipelineStage`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineStage {
    /// This rank's stage (its rank in the group).
    pub stage: usize,
    /// The number of stages (the world size).
    pub stages: usize,
    /// Micro-batches per training step.
    pub micro_batches: usize,
    /// The model's layers this stage holds, in forward order.
    pub layers: Vec<String>,
    /// Trainable values the rank's optimizer holds (the stages together should hold
    /// exactly the uncut model's).
    pub parameters: i64,
}

/// See [`Event::PipelineEpoch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineEpoch {
    /// The epoch (0-based).
    pub epoch: usize,
    /// This rank's stage.
    pub stage: usize,
    /// The number of stages.
    pub stages: usize,
    /// Micro-batches per training step.
    pub micro_batches: usize,
    /// Training steps of the epoch.
    pub steps: usize,
    /// Seconds this stage computed (its forwards and backwards).
    #[serde(deserialize_with = "floats::float")]
    pub busy: f64,
    /// Seconds of its steps, from each step's start to its last send.
    #[serde(deserialize_with = "floats::float")]
    pub total: f64,
    /// The measured idle share, 1 - busy / total.
    #[serde(deserialize_with = "floats::float")]
    pub bubble: f64,
    /// GPipe's idle share for this schedule: (stages - 1) / (micro-batches + stages - 1).
    #[serde(deserialize_with = "floats::float")]
    pub ideal_bubble: f64,
}

/// See [`Event::ParameterValues`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterValues {
    /// The epoch just trained (0-based).
    pub epoch: usize,
    /// Whether the values were all-gathered from shards (FSDP) rather than read from a
    /// whole replica (DDP).
    pub sharded: bool,
    /// Every trainable parameter, by name.
    pub parameters: Vec<ParameterSummary>,
}

/// One parameter of [`ParameterValues`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterSummary {
    /// Its VarStore name, e.g. `block3.cbr1.conv.weight`.
    pub name: String,
    /// Its elements.
    pub numel: i64,
    /// The sum of its values.
    #[serde(deserialize_with = "floats::float")]
    pub sum: f64,
    /// A few of its values, at evenly spaced flat positions (the same for equal shapes).
    #[serde(deserialize_with = "floats::floats")]
    pub sample: Vec<f64>,
}

/// See [`Event::TensorSlices`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSlices {
    /// The epoch just trained (0-based).
    pub epoch: usize,
    /// This rank's rank in the TP group.
    pub tp_rank: usize,
    /// The TP group's size.
    pub tp_size: usize,
    /// The TP group's number ([`GroupCreated::group`]): on a 2-D mesh, which row of it.
    /// Traces written before it was kept have none: 0, the world's group, which step
    /// 15's TP group of every rank was; 0 is left out of the JSON, so that they write
    /// back as recorded.
    #[serde(default, skip_serializing_if = "is_world")]
    pub group: u64,
    /// Every variable of the model (parameters and BatchNorm statistics), by name.
    pub parameters: Vec<ParameterSlice>,
}

/// One variable of [`TensorSlices`]: its shape on this rank against the unsplit model's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterSlice {
    /// Its VarStore name, e.g. `block3.cbr1.conv.weight`.
    pub name: String,
    /// Its shape on this rank.
    pub shape: Vec<i64>,
    /// Its shape in the unsplit model.
    pub whole: Vec<i64>,
    /// The dimension along which this rank holds part of it; `None`: it holds it whole
    /// (replicated).
    pub dim: Option<usize>,
    /// Where this rank's part starts along `dim` (0 when replicated).
    pub offset: i64,
    /// How long this rank's part is along `dim` (dimension 0's length when replicated).
    pub length: i64,
    /// FNV-1a of its values on this rank: TP peers holding it whole must agree.
    pub digest: String,
}

/// See [`Event::ShardsHeld`]: elements, measured from the tensors the rank holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardsHeld {
    /// The epoch just trained (0-based).
    pub epoch: usize,
    /// Parameters of the whole model (P).
    pub model_numel: i64,
    /// Elements of this rank's parameter shards, padding included.
    pub shard_numel: i64,
    /// Elements of the gradients this rank holds (of its shards).
    pub grad_numel: i64,
    /// Elements of the variables the optimizer steps on.
    pub optimizer_numel: i64,
    /// Elements of the state the optimizer keeps for them (SGD's momentum buffers; 0
    /// for plain SGD, and in traces written before it was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub optimizer_state_numel: i64,
    /// The most full-parameter elements held at once so far (all-gathered for a
    /// block's forward or backward).
    pub peak_unsharded_numel: i64,
    /// Bytes per element.
    pub element_bytes: i64,
    /// Every `fully_shard` call, blocks then the root.
    pub units: Vec<ShardUnit>,
}

/// Whether a count is zero: left out of the JSON, so that traces without a count read
/// and write back the same.
fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Whether a group number is the world's (the default group, 0).
fn is_world(group: &u64) -> bool {
    *group == 0
}

/// One `fully_shard` call of [`ShardsHeld`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardUnit {
    /// The VarStore path it sharded (`block3`; empty for the root).
    pub prefix: String,
    /// Elements of its full parameters.
    pub numel: i64,
    /// Elements of one rank's shards of them (each all-gather's input).
    pub shard_numel: i64,
}

/// See [`Event::GroupCreated`]. Every rank numbers every group `new_group` makes,
/// member or not (as PyTorch does), so each rank's trace lists them all, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupCreated {
    /// Its number in the process, in creation order: [`Collective::group`].
    pub group: u64,
    /// Its members' global ranks, in the order of their ranks in it.
    pub ranks: Vec<usize>,
    /// This rank's rank in it; `None` when it is not a member.
    pub group_rank: Option<usize>,
    /// The device mesh dimension (`"tp"`, `"dp"`) it is this rank's group of, when
    /// `init_device_mesh` made it; a dimension over the whole world names the default
    /// group again. `None` for the other groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_dim: Option<String>,
}
