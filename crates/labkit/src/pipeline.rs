//! The lab's model cut into stages, one per rank (`--pipeline`, step 13): which layers
//! each stage holds, what a pipeline refuses to run, and its epoch loop over
//! `dist::Pipeline` (GPipe), as [`train`](crate::train) and [`test`](crate::test) are
//! for the uncut model.
//!
//! Every rank of a pipeline walks the same batches (the first stage needs their images,
//! the last their labels); each holds, computes and steps only its own layers.
use std::ops::Range;
use std::time::Duration;

use lab_trace::event;
use tch::Kind;
use tch_distributed as dist;

use crate::error::Result;
use crate::loader::{DataLoader, Sampler};
use crate::model::{WideResNet, LAYERS};
use crate::optim::Optimizer;
use crate::options::RunOptions;
use crate::perf::Amp;
use crate::widths::Architecture;
use crate::{perfetto, probes, run, trace};

/// The layers (indices into [`LAYERS`]) that stage `stage` of `stages` holds: the ten
/// layers shared out in order, as evenly as they go (2 stages: the stem to block3,
/// then block4 to the classifier). Even counts of layers are not even work or memory
/// (the last blocks hold most of the parameters): a simple cut, not a balanced one.
///
/// ```
/// assert_eq!(labkit::stage_layers(0, 2), 0..5);
/// assert_eq!(labkit::stage_layers(1, 2), 5..10);
/// assert_eq!(labkit::stage_layers(2, 3), 6..10);
/// ```
///
/// Panics unless `stage < stages <= 10` ([`check_pipeline`] refuses more stages first).
pub fn stage_layers(stage: usize, stages: usize) -> Range<usize> {
    assert!(
        stage < stages && stages <= LAYERS.len(),
        "stage_layers({stage}, {stages}): a stage below the stage count, at most {} stages",
        LAYERS.len()
    );
    stage * LAYERS.len() / stages..(stage + 1) * LAYERS.len() / stages
}

/// What a pipelined run asks for, for [`check_pipeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineRequest {
    /// The world size: one stage per rank.
    pub stages: usize,
    /// `--micro-batches`.
    pub micro_batches: usize,
    /// `--batch-size`.
    pub batch_size: usize,
    /// `--sync-batch-norm`.
    pub sync_batch_norm: bool,
}

/// Why a pipeline cannot run with these options, or `None` when it can.
pub fn pipeline_refusal(request: PipelineRequest, run: &RunOptions) -> Option<String> {
    let PipelineRequest { stages, micro_batches, batch_size, sync_batch_norm } = request;
    let layers = LAYERS.len();
    if stages < 2 {
        return Some(format!(
            "--pipeline cuts the model into one stage per rank and needs at least 2 ranks, but this job has {stages}: run it with --num-gpus 2 (or more ranks over --num-nodes)"
        ));
    }
    if stages > layers {
        return Some(format!(
            "--pipeline: {stages} ranks, but the WideResNet has {layers} layers to share out as stages: run it on 2 to {layers} ranks"
        ));
    }
    if !batch_size.is_multiple_of(micro_batches) {
        return Some(format!(
            "--micro-batches {micro_batches} cannot share --batch-size {batch_size} equally: choose a number of micro-batches that divides the batch size"
        ));
    }
    if sync_batch_norm {
        return Some(
            "--sync-batch-norm with --pipeline: each rank holds different layers, so no two ranks normalise the same BatchNorm; leave --sync-batch-norm out"
                .into(),
        );
    }
    if run.checkpoint.save_every.is_some() || run.checkpoint.resume {
        return Some(
            "--save-every and --resume with --pipeline: a checkpoint is one whole model written by rank 0, but in a pipeline each rank holds only its stage; train without checkpoints"
                .into(),
        );
    }
    if run.model == Architecture::Mlp {
        return Some(
            "--model mlp with --pipeline: the pipeline's stages are the WideResNet's layers, and the perceptron is one layer; leave --model out with --pipeline"
                .into(),
        );
    }
    if run.amp != Amp::Off || run.channels_last {
        return Some(
            "--amp and --channels-last do not apply to the pipeline's stages: leave them out with --pipeline"
                .into(),
        );
    }
    None
}

/// Ends the program with exit code 2 when a pipeline cannot run with these options
/// ([`pipeline_refusal`] says why): call it in `main`, before any rank starts.
pub fn check_pipeline(request: PipelineRequest, run: &RunOptions) {
    if let Some(why) = pipeline_refusal(request, run) {
        eprintln!("error: {why}");
        std::process::exit(2);
    }
}

/// What one epoch of [`train_pipeline`] measured on this rank: the share of its steps
/// it spent idle (the bubble), beside GPipe's own figure for the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bubble {
    /// This rank's stage, and the number of stages.
    pub stage: usize,
    /// The number of stages.
    pub stages: usize,
    /// Micro-batches per step.
    pub micro_batches: usize,
    /// The measured idle share, 1 - busy / total over the epoch's steps.
    pub measured: f64,
    /// (stages - 1) / (micro-batches + stages - 1): what equal stages and free
    /// communication would leave idle.
    pub ideal: f64,
}

impl Bubble {
    /// The line rank 0 prints after its epoch line.
    pub fn line(&self) -> String {
        format!(
            "Pipeline: {} stages, {} micro-batches, stage {} idle {:.1}% of its steps (GPipe's bubble: {:.1}%)",
            self.stages,
            self.micro_batches,
            self.stage,
            100.0 * self.measured,
            100.0 * self.ideal
        )
    }

    /// Prints [`line`](Bubble::line).
    pub fn print(&self) {
        println!("{}", self.line());
    }
}

/// One epoch of training through the pipeline: for every batch the loader's sampler
/// gives, the stages' forwards and backwards over `pipeline`'s micro-batches (GPipe),
/// then an SGD step on this rank's stage. The first stage reads the images, the last
/// the labels and the cross-entropy; every rank must walk the same batches. A last
/// batch that the micro-batches cannot share equally is left out, as a `DataLoader`
/// with `drop_last` would. Returns what the bubble was on this rank.
///
/// Traced (`DDP_LAB_TRACE`): the stage this rank holds, the first step's loss and
/// weights, the weights after each epoch, and the bubble.
pub fn train_pipeline<S: Sampler, O: Optimizer>(
    pipeline: &dist::Pipeline<WideResNet>,
    optimizer: &mut O,
    loader: &mut DataLoader<'_, S>,
) -> Result<Bubble> {
    let indices = loader.sampler.epoch_indices();
    let epoch = run::next_epoch();
    let group = dist::default_group()?;
    let (stage, stages) = (group.rank(), group.world_size());
    let micro_batches = pipeline.micro_batches();
    if trace::enabled() {
        trace::record(event::TrainIndices { epoch, indices: indices.clone() });
        if epoch == 0 {
            let parameters = optimizer.stepper().trainable_variables().iter().map(|t| t.numel() as i64).sum();
            let layers = pipeline.stage().layer_names().into_iter().map(String::from).collect();
            trace::record(event::PipelineStage { stage, stages, micro_batches, layers, parameters });
        }
    }
    perfetto::epoch_started(epoch);
    let train_span = perfetto::span("train");
    probes::at_epoch_start(epoch)?;
    if epoch == 0 {
        trace::record_initial_weights(&optimizer.stepper().trainable_variables());
    }
    let (mut busy, mut total, mut steps) = (Duration::ZERO, Duration::ZERO, 0usize);
    for (images, labels) in loader.split.epoch_batches(&indices, loader.batch_size, loader.device) {
        if !(images.size()[0] as usize).is_multiple_of(micro_batches) {
            continue;
        }
        optimizer.zero_grad();
        let step = pipeline.train_step(&images, &labels, |logits, y| logits.cross_entropy_for_logits(y))?;
        optimizer.step();
        if epoch == 0 && steps == 0 {
            trace::record_first_step(step.loss, &optimizer.stepper().trainable_variables());
        }
        busy += step.busy;
        total += step.total;
        steps += 1;
    }
    probes::at_epoch_end(epoch);
    trace::record_weights(epoch, &optimizer.stepper().trainable_variables());
    train_span.end();
    perfetto::flush();
    let measured = if total.is_zero() { 0.0 } else { 1.0 - busy.as_secs_f64() / total.as_secs_f64() };
    let ideal = (stages - 1) as f64 / (micro_batches + stages - 1) as f64;
    trace::record(event::PipelineEpoch {
        epoch,
        stage,
        stages,
        micro_batches,
        steps,
        busy: busy.as_secs_f64(),
        total: total.as_secs_f64(),
        bubble: measured,
        ideal_bubble: ideal,
    });
    Ok(Bubble { stage, stages, micro_batches, measured, ideal })
}

/// The lab's `test` through the pipeline: every batch the loader's sampler gives goes
/// forward through the stages in evaluation mode; the last stage returns the accuracy
/// (correct / total) and the loss (the mean of the batch losses), the others `None`:
/// hand the last stage's figures to every rank (a broadcast) to report them.
pub fn test_pipeline<S: Sampler>(
    pipeline: &dist::Pipeline<WideResNet>,
    loader: &mut DataLoader<'_, S>,
) -> Result<Option<(f64, f64)>> {
    let indices = loader.sampler.epoch_indices();
    let device = loader.device;
    let group = dist::default_group()?;
    let last = group.rank() + 1 == group.world_size();
    let validation = perfetto::span("validation");
    let (mut loss_sum, mut correct, mut total, mut batches) = (0.0f64, 0i64, 0usize, 0usize);
    for (images, labels) in loader.split.epoch_batches(&indices, loader.batch_size, device) {
        if let Some(logits) = pipeline.eval(&images)? {
            let logits = logits.to_kind(Kind::Float);
            loss_sum += logits.cross_entropy_for_logits(&labels).double_value(&[]);
            correct += logits.argmax(-1, false).eq_tensor(&labels).sum(Kind::Int64).int64_value(&[]);
            total += labels.size()[0] as usize;
            batches += 1;
        }
    }
    validation.end();
    perfetto::epoch_ended();
    perfetto::flush();
    if !last {
        return Ok(None);
    }
    let accuracy = if total == 0 { 0.0 } else { correct as f64 / total as f64 };
    let loss = if batches == 0 { 0.0 } else { loss_sum / batches as f64 };
    if trace::enabled() {
        trace::record(event::Validation { accuracy, loss, correct, total, batches, indices });
    }
    Ok(Some((accuracy, loss)))
}
