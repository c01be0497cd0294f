//! The lab's training loop, which the lab never changes: `train` (one epoch) and `test`
//! (accuracy and loss), for the plain WideResNet and the WideResNet under DDP alike.
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use lab_trace::event;
use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};
use tch_distributed as dist;

use crate::error::Result;
use crate::loader::{DataLoader, Sampler};
use crate::model::WideResNet;
use crate::optim::Optimizer;
use crate::perf::{self, PerfSettings};
use crate::{perfetto, probes, run, trace};

/// A model the training loop can run: the plain WideResNet, the WideResNet wrapped
/// in DDP (whose forward can fail when another rank is gone), or sharded with FSDP
/// (`ShardedModel`, step 14).
pub trait Model {
    /// The model's output (logits) for a batch of `images`, in training mode when `train`.
    fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor>;
    /// The run's speed settings the model was built with; `train` and `test` run its
    /// forward pass under them (`--channels-last`, `--amp bf16`).
    fn perf(&self) -> PerfSettings;
    /// Called by `train` on every rank after each epoch, with the optimizer that
    /// stepped: what the trace records of the model beyond its weight digests (nothing
    /// by default). A sharded model's is collective: every rank calls it.
    fn after_epoch(&self, _epoch: usize, _optimizer: &dyn Optimizer) -> Result<()> {
        Ok(())
    }
    /// Called by `train` before the epoch's first step: an error when `optimizer`
    /// cannot train this model (a sharded model's optimizer must step on its shards).
    fn check_optimizer(&self, _optimizer: &nn::Optimizer) -> Result<()> {
        Ok(())
    }
    /// The collective that failed inside the last forward, taken: one of the model's
    /// own layers (a tensor-parallel region, a SyncBatchNorm) that a wrapper's forward
    /// (DDP's) cannot see. None by default.
    fn take_forward_error(&self) -> Option<dist::DistError> {
        None
    }
    /// Called by `train` after each step's backward pass, before the optimizer steps:
    /// where a DDP written by hand averages its gradients (the course's steps after the
    /// mesh), and an error there is the step's. Nothing by default: DDP's Reducer has
    /// averaged them inside backward already.
    fn after_backward(&self) -> Result<()> {
        Ok(())
    }
    /// Whether the model is split over a TP group: its `after_epoch` records its slices
    /// and the weights gathered from them, so a DDP around it (step 16's 2-D mesh)
    /// hands the epoch to it rather than recording its replica of slices as whole.
    fn split_over_ranks(&self) -> bool {
        false
    }
}

/// One model or another, chosen at run time (`--fsdp`: sharded, else DDP).
impl<M: Model + ?Sized> Model for Box<M> {
    fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor> {
        (**self).forward(images, train)
    }
    fn perf(&self) -> PerfSettings {
        (**self).perf()
    }
    fn after_epoch(&self, epoch: usize, optimizer: &dyn Optimizer) -> Result<()> {
        (**self).after_epoch(epoch, optimizer)
    }
    fn check_optimizer(&self, optimizer: &nn::Optimizer) -> Result<()> {
        (**self).check_optimizer(optimizer)
    }
    fn take_forward_error(&self) -> Option<dist::DistError> {
        (**self).take_forward_error()
    }
    fn after_backward(&self) -> Result<()> {
        (**self).after_backward()
    }
    fn split_over_ranks(&self) -> bool {
        (**self).split_over_ranks()
    }
}

impl Model for WideResNet {
    fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor> {
        Ok(self.try_forward_t(images, train)?)
    }
    fn perf(&self) -> PerfSettings {
        *WideResNet::perf(self)
    }
    fn take_forward_error(&self) -> Option<dist::DistError> {
        WideResNet::take_forward_error(self)
    }
    /// Split over a TP group: every rank records its slices, and rank 0 the weights
    /// gathered from them (collective: every TP rank calls it). Nothing otherwise.
    fn after_epoch(&self, epoch: usize, _optimizer: &dyn Optimizer) -> Result<()> {
        match &self.split {
            Some(split) if trace::enabled() => Ok(split.record(epoch)?),
            _ => Ok(()),
        }
    }
    fn split_over_ranks(&self) -> bool {
        self.split.is_some()
    }
}

impl<M: ModuleT + Model> Model for dist::DistributedDataParallel<M> {
    fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor> {
        let out = crate::model::taking_faults(|| self.try_forward_t(images, train))?;
        match self.module().take_forward_error() {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }
    fn perf(&self) -> PerfSettings {
        self.module().perf()
    }
    /// Rank 0's replica in floats, as a sharded model's gathered weights are recorded;
    /// a model split over a TP group (DDP over a mesh's "dp" group) records its own.
    fn after_epoch(&self, epoch: usize, optimizer: &dyn Optimizer) -> Result<()> {
        if self.module().split_over_ranks() {
            return self.module().after_epoch(epoch, optimizer);
        }
        if run::is_rank_zero() {
            trace::record_parameter_values(epoch, false, self.parameters());
        }
        Ok(())
    }
}

/// One epoch of training, as the lab's `train` function: every batch the loader's
/// sampler gives, forward, cross-entropy, backward, an SGD step (tch's `nn::Optimizer`,
/// or from step 12 on [`crate::Sgd`], which may carry momentum). With DDP the backward
/// pass also averages the gradients over all ranks.
///
/// Shows a progress bar on rank 0 when standard error is a terminal.
///
/// ```
/// use labkit::data::Split;
/// use labkit::{DataLoader, LoaderOptions, Norm, RandomSampler, SequentialSampler, WideResNet, Widths};
/// use tch::nn::{self, OptimizerConfig};
///
/// // 20 blank images of class 3, in batches of 8.
/// let data = Split::from_raw(&vec![0u8; 20 * 784], &[3u8; 20]);
/// let vs = nn::VarStore::new(tch::Device::Cpu);
/// let model = WideResNet::new(&vs.root(), Widths::NARROW, Norm::BatchNorm);
/// let mut optimizer = nn::Sgd::default().build(&vs, 0.1)?;
/// let options = LoaderOptions { batch_size: 8, ..Default::default() };
/// let mut train_loader = DataLoader::new(&data, RandomSampler::new(data.len()), options);
/// labkit::train(&model, &mut optimizer, &mut train_loader)?;
///
/// let mut test_loader = DataLoader::new(&data, SequentialSampler::new(data.len()), options);
/// let (accuracy, loss) = labkit::test(&model, &mut test_loader)?;
/// assert!((0.0..=1.0).contains(&accuracy) && loss > 0.0);
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn train<M: Model, S: Sampler, O: Optimizer>(
    model: &M,
    optimizer: &mut O,
    loader: &mut DataLoader<'_, S>,
) -> Result<()> {
    // Before anything reads the optimizer's variables (the initial weights below).
    model.check_optimizer(optimizer.stepper())?;
    let indices = loader.sampler.epoch_indices();
    let epoch = run::next_epoch();
    let perf = model.perf();
    if trace::enabled() {
        // Only built when traced: a full epoch is tens of thousands of indices.
        trace::record(event::TrainIndices { epoch, indices: indices.clone() });
    }
    perfetto::epoch_started(epoch);
    let train_span = perfetto::span("train");
    probes::at_epoch_start(epoch)?;
    if epoch == 0 {
        trace::record_initial_weights(&optimizer.stepper().trainable_variables());
    }
    let bar = progress_bar(loader.len() as u64, epoch);
    // The epoch's indices go to the device once; nothing in the loop waits for the GPU.
    let mut first_step = epoch == 0;
    let traced_steps = probes::traced_steps();
    for (images, labels) in loader.split.epoch_batches(&indices, loader.batch_size, loader.device) {
        let forward = perfetto::span("forward");
        let logits = run_forward(model, &images, true, loader.device, &perf)?;
        let loss = logits.cross_entropy_for_logits(&labels);
        perfetto::sync(loader.device);
        forward.end();
        optimizer.zero_grad();
        // DDP's Reducer all-reduces inside backward: its failure is a DistError.
        let backward = perfetto::span("backward");
        // Marks around backward for the traced steps: which collectives ran inside it.
        let traced_step = Some(run::this_step()).filter(|&s| s < traced_steps && trace::enabled());
        if let Some(step) = traced_step {
            trace::record(event::BackwardStarted { step });
        }
        loss.f_backward().map_err(dist::DistError::from)?;
        if let Some(step) = traced_step {
            trace::record(event::BackwardEnded { step });
        }
        model.after_backward()?;
        perfetto::sync(loader.device);
        backward.end();
        let step = perfetto::span("optimizer step");
        optimizer.step();
        perfetto::sync(loader.device);
        step.end();
        if first_step && trace::enabled() {
            // The float values a pipeline's first step is compared with (step 13).
            trace::record_first_step(
                Some(loss.double_value(&[])),
                &optimizer.stepper().trainable_variables(),
            );
        }
        first_step = false;
        let step_number = run::next_step();
        if step_number < traced_steps && trace::enabled() {
            // The checker's step-by-step comparison of N ranks with one (step 7).
            let loss = Some(loss.double_value(&[])).filter(|l| l.is_finite());
            trace::record_training_step(step_number, loss, &optimizer.stepper().trainable_variables());
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    probes::at_epoch_end(epoch);
    trace::record_weights(epoch, &optimizer.stepper().trainable_variables());
    model.after_epoch(epoch, &*optimizer)?;
    train_span.end();
    perfetto::flush();
    Ok(())
}

/// The lab's `test`: accuracy (correct / total) and loss (the mean of the batch
/// losses) over every batch the loader's sampler gives, in evaluation mode.
/// Returns `(accuracy, loss)` of this rank's share of the validation set.
///
/// The sums stay on the device and are read once at the end (the lab's Python reads
/// them per batch, a GPU synchronisation each): the loss sum in float64, adding the
/// same float32 batch losses in the same order, so the result is the same to the bit.
///
/// ```
/// use labkit::data::Split;
/// use labkit::{DataLoader, LoaderOptions, Norm, SequentialSampler, WideResNet, Widths};
///
/// // 10 blank images of class 0: accuracy is what the untrained model makes of them.
/// let data = Split::from_raw(&vec![0u8; 10 * 784], &[0u8; 10]);
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let model = WideResNet::new(&vs.root(), Widths::NARROW, Norm::BatchNorm);
/// let options = LoaderOptions { batch_size: 4, ..Default::default() };
/// let mut loader = DataLoader::new(&data, SequentialSampler::new(data.len()), options);
/// let (accuracy, loss) = labkit::test(&model, &mut loader)?;
/// assert!(accuracy == 0.0 || accuracy == 1.0); // the same answer for identical images
/// assert!(loss.is_finite());
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn test<M: Model, S: Sampler>(model: &M, loader: &mut DataLoader<'_, S>) -> Result<(f64, f64)> {
    let indices = loader.sampler.epoch_indices();
    let device = loader.device;
    let perf = model.perf();
    let mut loss_sum = Tensor::zeros([0i64; 0], (Kind::Double, device));
    let mut correct = Tensor::zeros([0i64; 0], (Kind::Int64, device));
    let (mut total, mut batches) = (0usize, 0usize);
    let validation = perfetto::span("validation");
    let _no_grad = tch::no_grad_guard();
    for (images, labels) in loader.split.epoch_batches(&indices, loader.batch_size, device) {
        let logits = run_forward(model, &images, false, device, &perf)?;
        loss_sum += logits.cross_entropy_for_logits(&labels).to_kind(Kind::Double);
        correct += logits.argmax(-1, false).eq_tensor(&labels).sum(Kind::Int64);
        total += labels.size()[0] as usize;
        batches += 1;
    }
    let (loss_sum, correct) = (loss_sum.double_value(&[]), correct.int64_value(&[]));
    validation.end();
    perfetto::epoch_ended();
    perfetto::flush();
    let accuracy = if total == 0 { 0.0 } else { correct as f64 / total as f64 };
    let loss = if batches == 0 { 0.0 } else { loss_sum / batches as f64 };
    if trace::enabled() {
        trace::record(event::Validation { accuracy, loss, correct, total, batches, indices });
    }
    Ok((accuracy, loss))
}

/// The model's logits as float32, under the run's speed settings (`--channels-last`,
/// `--amp bf16`; see [`crate::perf`]). Under autocast the logits come out in bf16;
/// the loss is then taken in float32, as autocast itself does for cross-entropy.
fn run_forward<M: Model>(
    model: &M,
    images: &Tensor,
    train: bool,
    device: tch::Device,
    settings: &PerfSettings,
) -> Result<Tensor> {
    let channels_last;
    let images = if settings.channels_last {
        channels_last = perf::to_channels_last(images);
        &channels_last
    } else {
        images
    };
    let logits = match settings.autocast_on(device) {
        Some(device) => dist::autocast_bf16(device, || model.forward(images, train))??,
        None => model.forward(images, train)?,
    };
    Ok(if logits.kind() == Kind::Float { logits } else { logits.to_kind(Kind::Float) })
}

fn progress_bar(batches: u64, epoch: usize) -> ProgressBar {
    if !(run::is_rank_zero() && std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(batches);
    let style = ProgressStyle::with_template(
        "epoch {prefix:>2} [{bar:30}] {pos}/{len} batches, {per_sec}, {eta} left",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(format!("{epoch}"));
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Split, HOST_INDEX_TENSORS};
    use crate::loader::LoaderOptions;
    use tch::nn::{Module, OptimizerConfig};
    use tch::Device;

    /// A model that draws no random numbers (unlike the WideResNet's dropout), so that
    /// two trainings in a test process that runs other tests alongside are comparable.
    struct Linear(nn::Linear);

    impl Model for Linear {
        fn forward(&self, images: &Tensor, _train: bool) -> Result<Tensor> {
            Ok(self.0.forward(&images.flatten(1, -1)))
        }
        fn perf(&self) -> PerfSettings {
            PerfSettings::default()
        }
    }

    fn linear(vs: &nn::VarStore) -> Linear {
        Linear(nn::linear(vs.root() / "fc", 784, 10, Default::default()))
    }

    fn split(n: usize) -> Split {
        let pixels: Vec<u8> = (0..n * 784).map(|i| ((i * 11 + i / 784 * 29) % 256) as u8).collect();
        let labels: Vec<u8> = (0..n).map(|i| (i * 3 % 10) as u8).collect();
        Split::from_raw(&pixels, &labels)
    }

    fn host_index_tensors() -> usize {
        HOST_INDEX_TENSORS.with(|n| n.get())
    }

    // Rank 1 of 3 over 50 samples: 17 indices, batches of 5, 5, 5 and 2.
    fn sampler() -> dist::DistributedSampler {
        dist::DistributedSampler::new(50, 3, 1, dist::SamplerOptions::default()).unwrap()
    }

    #[test]
    fn train_is_the_per_batch_loop_to_the_bit_and_builds_one_index_tensor_per_epoch() {
        // The layers' initialisation draws from torch's process-wide generator.
        let _rng = crate::torch_rng_lock();
        let data = split(50);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = linear(&vs);
        let mut reference_vs = nn::VarStore::new(Device::Cpu);
        let reference = linear(&reference_vs);
        reference_vs.copy(&vs).unwrap();
        let mut optimizer = nn::Sgd::default().build(&vs, 0.05).unwrap();
        let mut reference_optimizer = nn::Sgd::default().build(&reference_vs, 0.05).unwrap();
        let mut loader =
            DataLoader::new(&data, sampler(), LoaderOptions { batch_size: 5, device: Device::Cpu });

        for epoch in 0..2 {
            loader.sampler.set_epoch(epoch);
            let before = host_index_tensors();
            train(&model, &mut optimizer, &mut loader).unwrap();
            // One index tensor for the epoch's 4 batches: on a GPU, one upload, not 4.
            assert_eq!(host_index_tensors() - before, 1, "epoch {epoch}");

            // What train did before epoch_batches: a batch (and an index copy) per chunk.
            for chunk in loader.sampler.indices().chunks(5) {
                let (images, labels) = data.batch(chunk, Device::Cpu);
                let loss = reference.forward(&images, true).unwrap().cross_entropy_for_logits(&labels);
                reference_optimizer.zero_grad();
                loss.backward();
                reference_optimizer.step();
            }
            for (name, value) in vs.variables() {
                assert!(value.equal(&reference_vs.variables()[&name]), "{name} differs after epoch {epoch}");
            }
        }
    }

    /// Zeroes every gradient after backward: the optimizer then has nothing to step.
    struct Frozen(Linear, Vec<Tensor>);

    impl Model for Frozen {
        fn forward(&self, images: &Tensor, train: bool) -> Result<Tensor> {
            self.0.forward(images, train)
        }
        fn perf(&self) -> PerfSettings {
            PerfSettings::default()
        }
        fn after_backward(&self) -> Result<()> {
            for p in &self.1 {
                let _ = p.grad().zero_();
            }
            Ok(())
        }
    }

    #[test]
    fn train_calls_after_backward_between_backward_and_the_optimizer_step() {
        let _rng = crate::torch_rng_lock();
        let data = split(50);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Frozen(linear(&vs), vs.trainable_variables());
        let before: Vec<Tensor> = vs.trainable_variables().iter().map(|t| t.copy()).collect();
        let mut optimizer = nn::Sgd::default().build(&vs, 0.05).unwrap();
        let mut loader =
            DataLoader::new(&data, sampler(), LoaderOptions { batch_size: 5, device: Device::Cpu });
        train(&model, &mut optimizer, &mut loader).unwrap();
        // Its gradients were zero when the optimizer stepped: not one weight moved.
        for (after, before) in vs.trainable_variables().iter().zip(&before) {
            assert!(after.equal(before));
        }
        // The same loop without the hook moves them.
        let mut loader =
            DataLoader::new(&data, sampler(), LoaderOptions { batch_size: 5, device: Device::Cpu });
        train(&model.0, &mut optimizer, &mut loader).unwrap();
        assert!(vs.trainable_variables().iter().zip(&before).any(|(a, b)| !a.equal(b)));
    }

    #[test]
    fn test_reads_its_sums_once_and_matches_the_per_batch_reading_to_the_bit() {
        let _rng = crate::torch_rng_lock();
        let data = split(50);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = linear(&vs);
        let mut loader =
            DataLoader::new(&data, sampler(), LoaderOptions { batch_size: 5, device: Device::Cpu });

        let before = host_index_tensors();
        let (accuracy, loss) = test(&model, &mut loader).unwrap();
        assert_eq!(host_index_tensors() - before, 1);

        // The lab's test as it was: both sums read on the host after every batch.
        let (mut correct, mut total, mut loss_sum, mut batches) = (0i64, 0usize, 0.0f64, 0usize);
        let indices = loader.sampler.indices();
        for chunk in indices.chunks(5) {
            let (images, labels) = data.batch(chunk, Device::Cpu);
            let logits = model.forward(&images, false).unwrap();
            loss_sum += logits.cross_entropy_for_logits(&labels).double_value(&[]);
            correct += logits.argmax(-1, false).eq_tensor(&labels).sum(Kind::Int64).int64_value(&[]);
            total += chunk.len();
            batches += 1;
        }
        assert_eq!((total, batches), (17, 4));
        assert_eq!(accuracy, correct as f64 / total as f64);
        assert_eq!(loss.to_bits(), (loss_sum / batches as f64).to_bits());
        assert!(loss > 0.0);
    }
}
