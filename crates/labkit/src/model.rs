//! The lab's WideResNet (WRN-16-10 style) for 28×28 single-channel images.
//!
//! cbr = 3×3 conv (same padding, no bias) → BatchNorm → ReLU.
//! Block(in, out, scale) = cbr(in, out) → Dropout(0.01) → cbr(out, out), plus a
//! residual: a 1×1 conv (with bias) when the block changes width, identity otherwise.
//! Layout: cbr 1→w0; Block w0→w1 (scale); Block w1→w1; MaxPool 2; Block w1→w2 (scale);
//! Block w2→w2; MaxPool 2; Block w2→w3 (scale); Block w3→w3; AvgPool 7; Linear w3→10.
//! The lab's widths [16, 160, 320, 640] give 17,117,466 parameters; CPU runs use
//! narrower ones (e.g. [8, 16, 32, 64]: 173,778), same architecture.
//!
//! Built whole ([`WideResNet::new`]), with each block passed through a wrapper as it is
//! built ([`WideResNet::new_wrapped`]: FSDP's per-block `fully_shard`), or as one stage
//! of a pipeline, a range of its [`LAYERS`] ([`WideResNet::stage`]).
//!
//! Beside it, the exact-comparison model ([`Mlp`], `--model mlp`): a small perceptron
//! whose training on N ranks equals one rank's to float32 rounding, step after step,
//! which the WideResNet's BatchNorm and max-pool do not allow. The lab's constructor
//! builds it when the run asks (`WideResNet::new(&vs.root(), &args.run, norm)`), so that
//! the checker can compare a student's program step by step without another program.
use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};

use tch::nn::{self, ModuleT};
use tch::Tensor;
use tch_distributed::{self as dist, DistError, ProcessGroup};

use crate::dropout::dropout;
use crate::perf::PerfSettings;
use crate::probes;
use crate::widths::{Architecture, Widths, MLP_WIDTHS};

// PyTorch's default initialisation, which the lab's model gets and tch's defaults
// differ from: conv and linear weights and biases uniform in ±1/sqrt(fan_in) (tch:
// Kaiming with the ReLU gain, sqrt(6) times wider, and zero biases), BatchNorm
// weight 1 (tch: uniform in [0, 1]). With tch's defaults the narrow model learns
// the same data markedly slower at the lab's learning rate.

fn torch_uniform(fan_in: i64) -> nn::Init {
    let bound = 1.0 / (fan_in as f64).sqrt();
    nn::Init::Uniform { lo: -bound, up: bound }
}

fn torch_conv(fan_in: i64) -> nn::ConvConfig {
    nn::ConvConfig { ws_init: torch_uniform(fan_in), bs_init: torch_uniform(fan_in), ..Default::default() }
}

fn torch_linear(fan_in: i64) -> nn::LinearConfig {
    nn::LinearConfig { ws_init: torch_uniform(fan_in), bs_init: Some(torch_uniform(fan_in)), bias: true }
}

fn torch_batch_norm() -> nn::BatchNormConfig {
    nn::BatchNormConfig { ws_init: nn::Init::Const(1.0), ..Default::default() }
}

/// How the model normalises: per-rank BatchNorm (the lab's default) or SyncBatchNorm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Norm {
    #[default]
    /// Each rank normalises with its own batch's statistics (`nn::batch_norm2d`).
    BatchNorm,
    /// Statistics over every rank's batch (tch-distributed's `SyncBatchNorm`).
    SyncBatchNorm,
}

/// Where the BatchNorms of a tensor-parallel model ([`WideResNet::tensor_parallel_with`])
/// take their batch statistics.
#[derive(Debug, Clone, Default)]
pub enum TensorParallelNorm {
    /// Each rank over its own batch: the first BatchNorm of a block on this rank's
    /// channels, the others whole. With TP over the whole world (every rank holds the
    /// same batch) that is the whole batch's statistics.
    #[default]
    PerRank,
    /// SyncBatchNorm over the given group, the data-parallel one (`mesh["dp"]`): each
    /// block's first BatchNorm over the DP peers that hold the same channels (the same
    /// TP coordinate), the others over every DP peer. Never the world group: TP peers
    /// hold the same batch (counted twice) and other channels (mixed up).
    SyncBatchNorm(Arc<ProcessGroup>),
}

/// The exact-comparison model: a multilayer perceptron on the flattened 28×28 image,
/// 784 → 128 → ReLU → 64 → ReLU → 10 (`hidden1`, `hidden2`, `fc`; 109,386 parameters,
/// PyTorch's default initialisation). No BatchNorm, no max-pool, no dropout: nothing
/// whose result depends on which other images share the batch, or flips on a rounding
/// difference. So N ranks × batch B under DDP take, step after step, the step of one
/// rank × batch N·B up to the order float32 sums the gradients in (about 1e-7 of a
/// weight), where the WideResNet's BatchNorm statistics and max-pool choices let
/// the two runs part after a step or two (checker step 7, `matches-single-rank`).
///
/// A perceptron rather than a convolutional net with strided convolutions: a linear
/// layer's forward and backward are matrix products whatever the batch size, while the
/// convolution algorithm (oneDNN's blocking, cuDNN's benchmark mode, which the lab turns
/// on for GPUs) is chosen per shape, and N ranks × batch B and one rank × batch N·B have
/// different shapes. Its few tensors of very different sizes (100,352 values down to
/// 10) are also what the under-the-hood track's buckets and optimizer shards share out.
///
/// ```
/// use labkit::Mlp;
/// use tch::nn::{ModuleT, VarStore};
/// use tch::{Device, Kind, Tensor};
///
/// let vs = VarStore::new(Device::Cpu);
/// let model = Mlp::new(&vs.root());
/// let images = Tensor::zeros([2, 1, 28, 28], (Kind::Float, Device::Cpu));
/// assert_eq!(model.forward_t(&images, true).size(), [2, 10]);
/// assert_eq!(labkit::parameter_count(&vs), 109_386);
/// ```
#[derive(Debug)]
pub struct Mlp {
    hidden1: nn::Linear,
    hidden2: nn::Linear,
    fc: nn::Linear,
}

impl Mlp {
    /// The widths of its layers, input first.
    pub const WIDTHS: [i64; 4] = MLP_WIDTHS;

    /// Its three linear layers on `p` (`p / "hidden1"`, `"hidden2"`, `"fc"`), drawn from
    /// libtorch's generator as they are (seed it first for a reproducible model).
    pub fn new(p: &nn::Path) -> Mlp {
        let [input, h1, h2, classes] = Self::WIDTHS;
        let linear =
            |name: &str, fan_in: i64, out: i64| nn::linear(p / name, fan_in, out, torch_linear(fan_in));
        Mlp {
            hidden1: linear("hidden1", input, h1),
            hidden2: linear("hidden2", h1, h2),
            fc: linear("fc", h2, classes),
        }
    }
}

impl ModuleT for Mlp {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.flatten(1, -1).apply(&self.hidden1).relu().apply(&self.hidden2).relu().apply(&self.fc)
    }
}

#[derive(Debug)]
enum NormLayer {
    Local(nn::BatchNorm),
    /// Statistics over every rank's batch of its group (the default process group at
    /// forward time unless given one; plain batch norm when there is none or it has one
    /// rank). Its collective's failure goes to the model's [`Fault`].
    Sync(tch_distributed::SyncBatchNorm, Fault),
}

impl NormLayer {
    fn new(p: nn::Path, channels: i64, layers: Layers) -> NormLayer {
        match layers.norm {
            Norm::BatchNorm => NormLayer::Local(nn::batch_norm2d(p, channels, torch_batch_norm())),
            Norm::SyncBatchNorm => NormLayer::Sync(
                tch_distributed::SyncBatchNorm::new(
                    p,
                    channels,
                    torch_batch_norm(),
                    layers.sync_group.cloned(),
                ),
                layers.fault.clone(),
            ),
        }
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        match self {
            NormLayer::Local(bn) => xs.apply_t(bn, train),
            NormLayer::Sync(bn, fault) => fault.guard(|| bn.try_forward(xs, train), || xs.shallow_clone()),
        }
    }
}

/// The first collective that failed in the model's forward (a SyncBatchNorm's, a
/// tensor-parallel region's): tch's `ModuleT::forward_t` cannot return it, so the
/// layer keeps it here and hands on a tensor of the right shape, later layers skip
/// their collectives (the group is broken: they would wait or fail alike), and the
/// model's forward returns it ([`WideResNet::try_forward_t`], `labkit::train`) or,
/// called as a plain `ModuleT`, panics with it as DDP's and SyncBatchNorm's do.
#[derive(Debug, Clone, Default)]
struct Fault(Arc<Mutex<Option<DistError>>>);

impl Fault {
    fn slot(&self) -> MutexGuard<'_, Option<DistError>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `collective`'s tensor, or `instead`'s when it fails or an earlier one did.
    fn guard(
        &self,
        collective: impl FnOnce() -> dist::Result<Tensor>,
        instead: impl FnOnce() -> Tensor,
    ) -> Tensor {
        if self.slot().is_some() {
            return instead();
        }
        match collective() {
            Ok(t) => t,
            Err(e) => {
                *self.slot() = Some(e);
                instead()
            }
        }
    }

    fn take(&self) -> Option<DistError> {
        self.slot().take()
    }
}

thread_local! {
    /// Whether the forward running on this thread was started by a caller that takes
    /// the model's [`Fault`] itself (so `ModuleT::forward_t` must not panic with it).
    static TAKING_FAULTS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `forward` (a model's, or a wrapper's around one, such as DDP's) with the
/// WideResNet's failed collectives kept for `Model::take_forward_error` (the training
/// loop's trait) instead of panicking in its `ModuleT::forward_t`.
pub(crate) fn taking_faults<T>(forward: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            TAKING_FAULTS.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(TAKING_FAULTS.with(|t| t.replace(true)));
    forward()
}

/// How every layer of one model is built, decided once in [`WideResNet::new`].
#[derive(Debug, Clone, Copy)]
struct Layers<'a> {
    norm: Norm,
    /// The group a SyncBatchNorm synchronises over (`None`: the default group).
    sync_group: Option<&'a Arc<ProcessGroup>>,
    /// Where its SyncBatchNorms keep a failed collective.
    fault: &'a Fault,
    /// `--channels-last`.
    channels_last: bool,
    dropout: f64,
}

/// With `--channels-last`, stores the conv's weight in NHWC layout once, rather than
/// letting every convolution convert it.
fn channels_last_if_set(conv: nn::Conv2D, layers: Layers<'_>) -> nn::Conv2D {
    if layers.channels_last {
        let nhwc = crate::perf::to_channels_last(&conv.ws);
        let mut ws = conv.ws.shallow_clone();
        // Same storage as the VarStore's variable: the optimizer sees the new layout.
        tch::no_grad(|| ws.set_data(&nhwc));
    }
    conv
}

/// conv3×3 → norm → ReLU.
#[derive(Debug)]
struct Cbr {
    conv: nn::Conv2D,
    norm: NormLayer,
}

impl Cbr {
    fn new(p: nn::Path, cin: i64, cout: i64, layers: Layers<'_>) -> Cbr {
        let cfg = nn::ConvConfig { padding: 1, bias: false, ..torch_conv(cin * 9) };
        let conv = channels_last_if_set(nn::conv2d(&p / "conv", cin, cout, 3, cfg), layers);
        Cbr { conv, norm: NormLayer::new(&p / "bn", cout, layers) }
    }
}

/// One residual block of the WideResNet: cbr → Dropout → cbr, plus the shortcut.
/// [`WideResNet::new_wrapped`] hands each one to its caller as it is built (where
/// FSDP shards it).
#[derive(Debug)]
pub struct Block {
    first: Cbr,
    second: Cbr,
    shortcut: Option<nn::Conv2D>,
    dropout: f64,
}

const DROPOUT: f64 = 0.01;

impl Block {
    fn new(p: nn::Path, cin: i64, cout: i64, scale: bool, layers: Layers<'_>) -> Block {
        Block {
            first: Cbr::new(&p / "cbr1", cin, cout, layers),
            second: Cbr::new(&p / "cbr2", cout, cout, layers),
            shortcut: scale.then(|| {
                channels_last_if_set(nn::conv2d(&p / "shortcut", cin, cout, 1, torch_conv(cin)), layers)
            }),
            dropout: layers.dropout,
        }
    }
}

impl ModuleT for Block {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let main =
            self.second.forward_t(&dropout(&self.first.forward_t(xs, train), self.dropout, train), train);
        let residual = match &self.shortcut {
            Some(conv) => xs.apply(conv),
            None => xs.shallow_clone(),
        };
        main + residual
    }
}

/// A residual block split over a tensor-parallel group, Megatron's way for convs: the
/// first conv column-parallel (its output channels split; the block's input through
/// `copy_to_region`), its BatchNorm on this rank's channels (statistics per channel over
/// the local batch, which every TP rank holds whole), the second conv row-parallel (its
/// input channels split; `reduce_from_region` sums the partial outputs), then the second
/// BatchNorm, the shortcut and the sum replicated.
#[derive(Debug)]
struct TensorParallelBlock {
    block: Block,
    group: Arc<ProcessGroup>,
    fault: Fault,
}

impl ModuleT for TensorParallelBlock {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let Block { first, second, shortcut, dropout: rate } = &self.block;
        // Every TP rank reaches these collectives at the same point of the same forward;
        // a failure (a rank gone, TP peers with batches of different sizes) is the
        // model's error, with a tensor of the same shape handed on meanwhile.
        let into = self.fault.guard(|| dist::copy_to_region(xs, &self.group), || xs.shallow_clone());
        let partial = dropout(&first.forward_t(&into, train), *rate, train).apply(&second.conv);
        let summed =
            self.fault.guard(|| dist::reduce_from_region(&partial, &self.group), || partial.shallow_clone());
        let main = second.norm.forward_t(&summed, train).relu();
        let residual = match shortcut {
            Some(conv) => xs.apply(conv),
            None => xs.shallow_clone(),
        };
        main + residual
    }
}

impl ModuleT for Cbr {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.norm.forward_t(&xs.apply(&self.conv), train).relu()
    }
}

/// `MaxPool2d(2)` between the stages.
#[derive(Debug)]
struct MaxPool;

impl ModuleT for MaxPool {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.max_pool2d_default(2)
    }
}

/// `AvgPool2d(7)` → flatten → the linear classifier.
#[derive(Debug)]
struct Head {
    fc: nn::Linear,
}

impl ModuleT for Head {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        average_pool_7(xs).flatten(1, -1).apply(&self.fc)
    }
}

/// The model's layers in forward order, each named as the VarStore path of its
/// parameters (the pools have none). [`WideResNet::stage`] takes a range of them.
pub const LAYERS: [&str; 10] =
    ["stem", "block1", "block2", "pool1", "block3", "block4", "pool2", "block5", "block6", "fc"];

/// The residual blocks among [`LAYERS`], in order.
pub const BLOCKS: [&str; 6] = ["block1", "block2", "block3", "block4", "block5", "block6"];

/// One of [`LAYERS`] as built.
#[derive(Debug)]
struct Layer {
    name: &'static str,
    module: Box<dyn ModuleT>,
}

/// What a model is built with: the run's settings that shape its layers and its
/// forward pass. A step program passes `&args.run` (the seed, `--width`,
/// `--channels-last`, `--amp`); library code and tests may pass bare [`Widths`]
/// (nothing seeded, float32, NCHW).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ModelSettings {
    /// `--seed`: the initial weights are drawn right after `torch.manual_seed(seed)`.
    pub seed: Option<u64>,
    /// The model (`--model`: the WideResNet, or the exact-comparison [`Mlp`] in its
    /// place), its widths, the memory layout and the autocast `train` and `test` use.
    pub perf: PerfSettings,
}

impl From<Widths> for ModelSettings {
    fn from(widths: Widths) -> Self {
        ModelSettings { seed: None, perf: PerfSettings { widths, ..PerfSettings::default() } }
    }
}

/// The lab's WideResNet. Input: `[N, 1, 28, 28]` floats in [0, 1]; output: `[N, 10]` logits.
/// A [`stage`](WideResNet::stage) of it takes and gives the activations between its layers.
/// Built with [`Architecture::Mlp`] (`--model mlp`), it holds the exact-comparison
/// [`Mlp`] instead, as its one layer `mlp`: the student's program runs it unchanged.
#[derive(Debug)]
pub struct WideResNet {
    /// The [`LAYERS`] it holds, in forward order: all of them but in a stage.
    layers: Vec<Layer>,
    /// The settings it was built with; `train` and `test` run its forward under them.
    perf: PerfSettings,
    /// A collective of its forward that failed, kept until the forward returns it.
    fault: Fault,
    /// Split over a TP group ([`WideResNet::tensor_parallel`]): what the trace records
    /// of its slices after each epoch.
    pub(crate) split: Option<crate::split_model::SplitModel>,
}

impl WideResNet {
    /// `settings`: `&args.run` in a step program, or bare [`Widths`].
    ///
    /// ```
    /// use labkit::{Norm, WideResNet, Widths};
    /// use tch::nn::{ModuleT, VarStore};
    /// use tch::{Device, Kind, Tensor};
    ///
    /// let vs = VarStore::new(Device::Cpu);
    /// let model = WideResNet::new(&vs.root(), Widths::NARROW, Norm::BatchNorm);
    /// let images = Tensor::zeros([2, 1, 28, 28], (Kind::Float, Device::Cpu));
    /// assert_eq!(model.forward_t(&images, false).size(), [2, 10]); // ten classes
    /// ```
    pub fn new(p: &nn::Path, settings: impl Into<ModelSettings>, norm: Norm) -> WideResNet {
        Self::build(p, settings.into(), norm, 0..LAYERS.len(), Built::Plain, &mut |block, _| Box::new(block))
    }

    /// The same model, each residual block passed through `wrap` with its name (its
    /// VarStore path, one of [`BLOCKS`]) right after it is built, before the next
    /// one: the way FSDP2's `fully_shard` is applied per block. The weights are those
    /// [`new`](WideResNet::new) draws.
    ///
    /// ```no_run
    /// use labkit::{Norm, WideResNet, Widths};
    /// use tch::nn::{self, ModuleT};
    /// use tch_distributed as dist;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?;
    /// let vs = nn::VarStore::new(tch::Device::Cpu);
    /// let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
    /// let net = WideResNet::new_wrapped(&vs.root(), Widths::NARROW, Norm::BatchNorm, |block, name| {
    ///     Box::new(fsdp.fully_shard(block, name).expect("every rank shards the same blocks"))
    /// });
    /// let model = fsdp.fully_shard(net, "")?; // the root: the stem and the classifier
    /// # Ok(()) }
    /// ```
    pub fn new_wrapped(
        p: &nn::Path,
        settings: impl Into<ModelSettings>,
        norm: Norm,
        mut wrap: impl FnMut(Block, &str) -> Box<dyn ModuleT>,
    ) -> WideResNet {
        Self::build(p, settings.into(), norm, 0..LAYERS.len(), Built::Plain, &mut wrap)
    }

    /// [`new_wrapped`](WideResNet::new_wrapped) with a wrapper that can fail, as
    /// `fully_shard` can (a rank gone during its broadcast): the first error is
    /// returned once the model is built, and no block after it is wrapped.
    ///
    /// ```no_run
    /// use labkit::{Norm, WideResNet, Widths};
    /// use tch::nn;
    /// use tch_distributed as dist;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?;
    /// let vs = nn::VarStore::new(tch::Device::Cpu);
    /// let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
    /// let net = WideResNet::try_new_wrapped(&vs.root(), Widths::NARROW, Norm::BatchNorm, |block, name| {
    ///     Ok(Box::new(fsdp.fully_shard(block, name)?))
    /// })?;
    /// let model = fsdp.fully_shard(net, "")?;
    /// # Ok(()) }
    /// ```
    pub fn try_new_wrapped(
        p: &nn::Path,
        settings: impl Into<ModelSettings>,
        norm: Norm,
        mut wrap: impl FnMut(Block, &str) -> tch_distributed::Result<Box<dyn ModuleT>>,
    ) -> tch_distributed::Result<WideResNet> {
        let mut failed = None;
        let net = Self::build(p, settings.into(), norm, 0..LAYERS.len(), Built::Plain, &mut |block, name| {
            if failed.is_some() {
                return Box::new(block);
            }
            wrap(block, name).unwrap_or_else(|e| {
                failed = Some(e);
                Box::new(MaxPool)
            })
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(net),
        }
    }

    /// The model split over the tensor-parallel group `group` (every rank of it calls
    /// this alike): in each block the first conv and its BatchNorm column-parallel, the
    /// second conv row-parallel ([`TensorParallelBlock`]'s forward), the stem, the
    /// shortcuts, the second BatchNorms and the head replicated. The weights are TP rank
    /// 0's, as [`new`](WideResNet::new) draws them there (`src_data_rank=0`). Per-rank
    /// BatchNorm: [`tensor_parallel_with`](WideResNet::tensor_parallel_with) with
    /// [`TensorParallelNorm::PerRank`].
    pub fn tensor_parallel(
        vs: &nn::VarStore,
        settings: impl Into<ModelSettings>,
        group: &Arc<ProcessGroup>,
    ) -> dist::Result<WideResNet> {
        Self::tensor_parallel_with(vs, settings, group, TensorParallelNorm::PerRank)
    }

    /// [`tensor_parallel`](WideResNet::tensor_parallel) with its BatchNorms' statistics
    /// taken as `norm` says: on a 2-D mesh, TP over `mesh["tp"]` and SyncBatchNorm over
    /// `mesh["dp"]`, the model then wrapped in DDP over the DP group. When traced, each
    /// rank records after each epoch the slice it holds of every variable and its TP
    /// group (`tensor_slices`).
    /// A width the group's size does not divide is an error (nothing is split then).
    ///
    /// ```no_run
    /// use labkit::{TensorParallelNorm, WideResNet, Widths};
    /// use tch::nn;
    /// use tch_distributed as dist;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?; // 4 ranks
    /// let mesh = dist::init_device_mesh(tch::Device::Cpu, &[2, 2], &["dp", "tp"])?;
    /// let (dp, tp) = (mesh.get_group("dp")?, mesh.get_group("tp")?);
    /// let vs = nn::VarStore::new(tch::Device::Cpu);
    /// let net = WideResNet::tensor_parallel_with(&vs, Widths::NARROW, &tp, TensorParallelNorm::SyncBatchNorm(dp.clone()))?;
    /// let model = dist::DistributedDataParallel::with_group(net, &vs, dp, dist::DdpOptions::default())?;
    /// # let _ = model;
    /// # Ok(()) }
    /// ```
    pub fn tensor_parallel_with(
        vs: &nn::VarStore,
        settings: impl Into<ModelSettings>,
        group: &Arc<ProcessGroup>,
        norm: TensorParallelNorm,
    ) -> dist::Result<WideResNet> {
        let (norm, sync_group) = match &norm {
            TensorParallelNorm::PerRank => (Norm::BatchNorm, None),
            TensorParallelNorm::SyncBatchNorm(over) => (Norm::SyncBatchNorm, Some(over)),
        };
        let fault = Fault::default();
        let mut blocks = Vec::new();
        let built = Built::TensorParallel { sync_group, fault: &fault };
        let mut net =
            Self::build(&vs.root(), settings.into(), norm, 0..LAYERS.len(), built, &mut |block, name| {
                blocks.push(name.to_string());
                Box::new(TensorParallelBlock { block, group: group.clone(), fault: fault.clone() })
            });
        let shapes = crate::split_model::shapes(vs);
        use dist::ParallelStyle::{Colwise, Rowwise};
        let plan: Vec<(String, dist::ParallelStyle)> = blocks
            .iter()
            .flat_map(|b| {
                [
                    (format!("{b}.cbr1.conv"), Colwise),
                    (format!("{b}.cbr1.bn"), Colwise),
                    (format!("{b}.cbr2.conv"), Rowwise),
                ]
            })
            .collect();
        let plan: Vec<(&str, dist::ParallelStyle)> = plan.iter().map(|(p, s)| (p.as_str(), *s)).collect();
        dist::parallelize_module(vs, group, &plan)?;
        let split = crate::split_model::SplitModel::new(vs, group, shapes);
        if group.rank() == 0 {
            println!("{}", split.describe());
        }
        net.split = Some(split);
        Ok(net)
    }

    /// The layers `layers` of the model (indices into [`LAYERS`]) and nothing else: one
    /// stage of a pipeline. Its parameters are on `p` under the uncut model's names,
    /// with the values the uncut model draws from the same seed (every layer is built,
    /// in order, and the others are dropped), so that a model cut into stages starts
    /// where the uncut one does. Its forward takes the activations of the layer before
    /// the range (the images for the first stage) and returns those of its last layer.
    ///
    /// ```
    /// use labkit::{Norm, WideResNet, Widths};
    /// use tch::nn::{ModuleT, VarStore};
    /// use tch::{Device, Kind, Tensor};
    ///
    /// let (first, second) = (VarStore::new(Device::Cpu), VarStore::new(Device::Cpu));
    /// // Cut after block3 (stem, block1, block2, pool1, block3 | block4 … fc).
    /// let a = WideResNet::stage(&first.root(), Widths::NARROW, Norm::BatchNorm, 0..5);
    /// let b = WideResNet::stage(&second.root(), Widths::NARROW, Norm::BatchNorm, 5..10);
    /// let images = Tensor::zeros([2, 1, 28, 28], (Kind::Float, Device::Cpu));
    /// let between = a.forward_t(&images, false);
    /// assert_eq!(between.size(), [2, 32, 14, 14]);
    /// assert_eq!(b.forward_t(&between, false).size(), [2, 10]);
    /// assert_eq!(labkit::parameter_count(&first) + labkit::parameter_count(&second), 173_778);
    /// ```
    ///
    /// Panics when `layers` is empty or reaches past [`LAYERS`].
    pub fn stage(
        p: &nn::Path,
        settings: impl Into<ModelSettings>,
        norm: Norm,
        layers: std::ops::Range<usize>,
    ) -> WideResNet {
        assert!(
            !layers.is_empty() && layers.end <= LAYERS.len(),
            "WideResNet::stage({layers:?}): a stage is a non-empty range of the {} layers 0..{}",
            LAYERS.len(),
            LAYERS.len()
        );
        Self::build(p, settings.into(), norm, layers, Built::Plain, &mut |block, _| Box::new(block))
    }

    fn build(
        p: &nn::Path,
        settings: ModelSettings,
        norm: Norm,
        keep: std::ops::Range<usize>,
        built: Built<'_>,
        wrap: &mut dyn FnMut(Block, &str) -> Box<dyn ModuleT>,
    ) -> WideResNet {
        crate::revision::keep();
        let ModelSettings { seed, perf } = settings;
        probes::seed_before_model(seed);
        if perf.architecture == Architecture::Mlp {
            // Whole or not at all: a pipeline's stages and tensor parallelism cut the
            // WideResNet's layers (`pipeline_refusal` refuses --model mlp first).
            assert!(
                keep == (0..LAYERS.len()),
                "--model mlp builds the whole perceptron only: the stages of a pipeline are the WideResNet's layers"
            );
            // No residual block for a wrapper (FSDP's per-block `fully_shard`) to take:
            // the root unit holds it all.
            let module: Box<dyn ModuleT> = Box::new(Mlp::new(p));
            return WideResNet {
                layers: vec![Layer { name: "mlp", module }],
                perf,
                fault: Fault::default(),
                split: None,
            };
        }
        let equivalence = probes::equivalence_run();
        // The checker's equivalence run normalises over the global batch, as one rank
        // with the whole batch does. Not in a stage of a pipeline: its ranks hold other
        // layers, and each stage already sees the whole (micro-)batch.
        let whole = keep == (0..LAYERS.len());
        let own_fault = Fault::default();
        let (sync_group, fault, tensor_parallel) = match built {
            Built::Plain => (None, &own_fault, false),
            Built::TensorParallel { sync_group, fault } => (sync_group, fault, true),
        };
        let layers = Layers {
            // Not under TP: its norms are already the whole batch's over TP peers, and the
            // default group (the world) would mix TP peers' channels.
            norm: if equivalence && whole && !tensor_parallel { Norm::SyncBatchNorm } else { norm },
            sync_group,
            fault,
            channels_last: perf.channels_last,
            // Off for the checker's N-ranks-equal-1-rank comparison: dropout draws from
            // each process's own generator.
            dropout: if equivalence { 0.0 } else { DROPOUT },
        };
        let [w0, w1, w2, w3] = perf.widths.0;
        // Block i's input and output widths, and whether it changes width (a shortcut conv).
        let blocks = [
            (w0, w1, true),
            (w1, w1, false),
            (w1, w2, true),
            (w2, w2, false),
            (w2, w3, true),
            (w3, w3, false),
        ];
        // Layers outside `keep` are still built, on a VarStore dropped at the end, so that
        // the kept ones draw the same initial values as in the uncut model.
        let elsewhere = nn::VarStore::new(p.device());
        let mut kept = Vec::new();
        let mut block = 0;
        for (i, &name) in LAYERS.iter().enumerate() {
            let here = keep.contains(&i);
            let path = if here { p / name } else { elsewhere.root() / name };
            let module: Box<dyn ModuleT> = match name {
                "stem" => Box::new(Cbr::new(path, 1, w0, layers)),
                "pool1" | "pool2" => Box::new(MaxPool),
                "fc" => Box::new(Head { fc: nn::linear(path, w3, 10, torch_linear(w3)) }),
                _ => {
                    let (cin, cout, scale) = blocks[block];
                    block += 1;
                    let built = Block::new(path, cin, cout, scale, layers);
                    if here {
                        wrap(built, name)
                    } else {
                        Box::new(built)
                    }
                }
            };
            if here {
                kept.push(Layer { name, module });
            }
        }
        WideResNet { layers: kept, perf, fault: fault.clone(), split: None }
    }

    /// The forward pass, with a failed collective inside it (a SyncBatchNorm's, a
    /// tensor-parallel region's) as an error rather than a panic.
    pub fn try_forward_t(&self, xs: &Tensor, train: bool) -> dist::Result<Tensor> {
        let out = taking_faults(|| self.forward_t(xs, train));
        match self.fault.take() {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The collective of the last forward that failed, taken (see
    /// `Model::take_forward_error` (the training loop's trait)).
    pub(crate) fn take_forward_error(&self) -> Option<DistError> {
        self.fault.take()
    }

    /// The speed settings it was built with (`--amp`, `--channels-last`, `--width`, …).
    pub fn perf(&self) -> &PerfSettings {
        &self.perf
    }

    /// The names of the [`LAYERS`] it holds, in forward order.
    pub fn layer_names(&self) -> Vec<&'static str> {
        self.layers.iter().map(|l| l.name).collect()
    }
}

impl ModuleT for WideResNet {
    /// Panics when a collective inside fails, unless the caller takes the error
    /// ([`WideResNet::try_forward_t`], `labkit::train` also through DDP).
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut x = xs.shallow_clone();
        for layer in &self.layers {
            x = layer.module.forward_t(&x, train);
        }
        if !TAKING_FAULTS.with(Cell::get) {
            if let Some(e) = self.fault.take() {
                panic!("{e}");
            }
        }
        x
    }
}

/// How [`WideResNet::build`] builds: the plain model (its own [`Fault`], SyncBatchNorm
/// over the default group) or the tensor-parallel one.
#[derive(Clone, Copy)]
enum Built<'a> {
    Plain,
    TensorParallel { sync_group: Option<&'a Arc<ProcessGroup>>, fault: &'a Fault },
}

/// The lab's `AvgPool2d(7)`. Not tch's `avg_pool2d_default`: that one passes a divisor
/// override of 1 and so returns the 7×7 *sum*, 49 times the mean, which makes the
/// initial logits huge and plain SGD at the lab's learning rate diverge to NaN.
fn average_pool_7(x: &Tensor) -> Tensor {
    x.avg_pool2d([7, 7], [7, 7], [0, 0], false, true, None::<i64>)
}

/// Number of trainable values in a VarStore.
pub fn parameter_count(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(|t| t.numel() as i64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// tch's random generator is process-wide and these tests run on parallel threads:
    /// every test that draws from it holds this lock, so seeds mean what they say.
    use crate::torch_rng_lock as rng_lock;

    fn count(widths: Widths) -> i64 {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = WideResNet::new(&vs.root(), widths, Norm::BatchNorm);
        parameter_count(&vs)
    }

    #[test]
    fn lab_width_has_the_labs_parameter_count() {
        let _rng = rng_lock();
        assert_eq!(count(Widths::LAB), 17_117_466);
    }

    /// `--model mlp` through the lab's constructor: the perceptron, seeded as the
    /// WideResNet is, under its own names; the default stays the WideResNet.
    #[test]
    fn the_labs_constructor_builds_the_exact_model_when_asked() {
        let _rng = rng_lock();
        let settings = |architecture| {
            let perf = PerfSettings { widths: Widths::NARROW, architecture, ..PerfSettings::default() };
            ModelSettings { seed: Some(7), perf }
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let net = WideResNet::new(&vs.root(), settings(Architecture::Mlp), Norm::BatchNorm);
        assert_eq!(net.layer_names(), ["mlp"]);
        assert_eq!(parameter_count(&vs), 109_386);
        let names: Vec<String> = named(&vs).into_iter().map(|(n, _)| n).collect();
        let expected =
            ["fc.bias", "fc.weight", "hidden1.bias", "hidden1.weight", "hidden2.bias", "hidden2.weight"];
        assert_eq!(names, expected);
        // The seed is --seed's, as for the WideResNet.
        tch::manual_seed(7);
        let plain_vs = nn::VarStore::new(Device::Cpu);
        let plain = Mlp::new(&plain_vs.root());
        for ((name, a), (_, b)) in named(&vs).iter().zip(named(&plain_vs)) {
            assert!(a.equal(&b), "{name} differs from Mlp::new's after the same seed");
        }
        let x = Tensor::rand([3, 1, 28, 28], (Kind::Float, Device::Cpu));
        assert!(net.forward_t(&x, true).equal(&plain.forward_t(&x, true)));
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = WideResNet::new(&vs.root(), settings(Architecture::default()), Norm::BatchNorm);
        assert_eq!(parameter_count(&vs), 173_778);
    }

    /// The gradient of the mean loss over a batch of 24 by N = 3 ranks (each the mean of
    /// its 8, then averaged, as DDP does) is one process's over the 24 to float32
    /// rounding for the perceptron; the WideResNet's BatchNorm, normalising each rank's
    /// 8 images apart (and its dropout), makes it another gradient altogether. The property the checker's
    /// step-by-step comparison rests on.
    #[test]
    fn the_exact_models_gradient_over_ranks_is_the_whole_batchs() {
        let _rng = rng_lock();
        tch::manual_seed(3);
        let images = Tensor::rand([24, 1, 28, 28], (Kind::Float, Device::Cpu));
        let labels = Tensor::randint(10, [24], (Kind::Int64, Device::Cpu));
        // Largest difference between the whole batch's gradients and the ranks' average,
        // relative to the largest gradient value.
        let parted = |vs: &nn::VarStore, model: &dyn ModuleT| -> f64 {
            let grads = |range: std::ops::Range<i64>| -> Vec<Tensor> {
                let (x, y) = (
                    images.narrow(0, range.start, range.end - range.start),
                    labels.narrow(0, range.start, range.end - range.start),
                );
                for t in vs.trainable_variables() {
                    let mut g = t.grad();
                    if g.defined() {
                        let _ = g.zero_();
                    }
                }
                model.forward_t(&x, true).cross_entropy_for_logits(&y).backward();
                vs.trainable_variables().iter().map(|t| t.grad().copy()).collect()
            };
            let whole = grads(0..24);
            let ranks: Vec<Vec<Tensor>> = (0..3).map(|r| grads(r * 8..(r + 1) * 8)).collect();
            let mut worst = 0.0f64;
            let mut largest = 0.0f64;
            for (i, w) in whole.iter().enumerate() {
                let averaged = (&ranks[0][i] + &ranks[1][i] + &ranks[2][i]) / 3.0;
                worst = worst.max((w - averaged).abs().max().double_value(&[]));
                largest = largest.max(w.abs().max().double_value(&[]));
            }
            worst / largest
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let mlp = Mlp::new(&vs.root());
        let exact = parted(&vs, &mlp);
        assert!(exact < 1e-5, "the perceptron's gradients differ by {exact:.1e} of the largest");
        let vs = nn::VarStore::new(Device::Cpu);
        let wrn = WideResNet::new(&vs.root(), Widths([4, 8, 8, 8]), Norm::BatchNorm);
        let apart = parted(&vs, &wrn);
        assert!(apart > 1e-3, "the WideResNet's gradients differ by only {apart:.1e} of the largest");
    }

    #[test]
    fn narrow_width_parameter_count() {
        let _rng = rng_lock();
        assert_eq!(count(Widths::NARROW), 173_778);
    }

    #[test]
    fn average_pool_is_a_mean_not_a_sum() {
        let _rng = rng_lock();
        let x = Tensor::rand([2, 3, 7, 7], (Kind::Float, Device::Cpu));
        let pooled = average_pool_7(&x).flatten(1, -1);
        let mean = x.mean_dim([2i64, 3].as_slice(), false, Kind::Float);
        assert!(pooled.allclose(&mean, 1e-6, 1e-6, false));
    }

    #[test]
    fn initialisation_follows_pytorch_defaults() {
        let _rng = rng_lock();
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = WideResNet::new(&vs.root(), Widths::NARROW, Norm::BatchNorm);
        let vars = vs.variables();
        let max_abs = |name: &str| vars[name].abs().max().double_value(&[]);
        assert!(max_abs("block3.cbr1.conv.weight") <= 1.0 / (16.0 * 9.0f64).sqrt());
        assert!(max_abs("block3.shortcut.weight") <= 1.0 / 16f64.sqrt());
        assert!(max_abs("block3.shortcut.bias") > 0.0);
        assert!(max_abs("fc.weight") <= 1.0 / 64f64.sqrt());
        assert_eq!(vars["block3.cbr1.bn.weight"].min().double_value(&[]), 1.0);
    }

    /// Without a process group SyncBatchNorm is batch norm: same variables (names,
    /// values from the same seed) and the same training-mode output.
    #[test]
    fn sync_batch_norm_model_equals_batch_norm_model_on_one_process() {
        let _rng = rng_lock();
        let build = |norm| {
            tch::manual_seed(11);
            let vs = nn::VarStore::new(Device::Cpu);
            let net = WideResNet::new(&vs.root(), Widths([4, 8, 8, 8]), norm);
            (vs, net)
        };
        let (vs_a, a) = build(Norm::BatchNorm);
        let (vs_b, b) = build(Norm::SyncBatchNorm);
        let mut va: Vec<_> = vs_a.variables().into_iter().collect();
        let mut vb: Vec<_> = vs_b.variables().into_iter().collect();
        va.sort_by(|x, y| x.0.cmp(&y.0));
        vb.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(va.len(), vb.len());
        for ((na, ta), (nb, tb)) in va.iter().zip(&vb) {
            assert_eq!(na, nb);
            assert!(ta.equal(tb), "{na} differs");
        }
        tch::manual_seed(3);
        let x = Tensor::rand([2, 1, 28, 28], (Kind::Float, Device::Cpu));
        // Dropout draws from the global generator: reseed before each forward.
        tch::manual_seed(4);
        let ya = a.forward_t(&x, true);
        tch::manual_seed(4);
        let yb = b.forward_t(&x, true);
        let diff = (ya - yb).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "outputs differ by {diff}");
    }

    /// Variables by name, sorted.
    fn named(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
        let mut v: Vec<_> = vs.variables().into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// A failing wrapper's first error comes back; no block after it reaches the wrapper.
    #[test]
    fn a_failing_wrapper_returns_its_first_error() {
        let _rng = rng_lock();
        let vs = nn::VarStore::new(Device::Cpu);
        let mut seen = Vec::new();
        let built =
            WideResNet::try_new_wrapped(&vs.root(), Widths([4, 8, 8, 16]), Norm::BatchNorm, |block, name| {
                seen.push(name.to_string());
                if name == "block2" {
                    Err(tch_distributed::DistError::new(
                        tch_distributed::ErrorKind::Other,
                        format!("{name} refused"),
                    ))
                } else {
                    Ok(Box::new(block))
                }
            });
        assert_eq!(built.unwrap_err().message(), "block2 refused");
        assert_eq!(seen, ["block1", "block2"]);
        let vs = nn::VarStore::new(Device::Cpu);
        let ok =
            WideResNet::try_new_wrapped(&vs.root(), Widths([4, 8, 8, 16]), Norm::BatchNorm, |block, _| {
                Ok(Box::new(block))
            });
        assert_eq!(ok.unwrap().layer_names(), LAYERS);
    }

    /// Each block goes through the wrapper once, in order, under its VarStore name, and
    /// the wrapped model is the plain one: same variables, same output.
    #[test]
    fn wrapped_blocks_are_the_plain_model() {
        let _rng = rng_lock();
        tch::manual_seed(5);
        let plain_vs = nn::VarStore::new(Device::Cpu);
        let plain = WideResNet::new(&plain_vs.root(), Widths([4, 8, 8, 16]), Norm::BatchNorm);
        tch::manual_seed(5);
        let vs = nn::VarStore::new(Device::Cpu);
        let mut seen = Vec::new();
        let wrapped =
            WideResNet::new_wrapped(&vs.root(), Widths([4, 8, 8, 16]), Norm::BatchNorm, |block, name| {
                // Built on its own path before the wrapper sees it, and nothing of later layers yet.
                let vars = vs.variables();
                assert!(vars.contains_key(&format!("{name}.cbr1.conv.weight")), "{name} not built yet");
                assert!(!vars.contains_key("fc.weight"), "{name}: the classifier built before it");
                seen.push(name.to_string());
                Box::new(block)
            });
        assert_eq!(seen, BLOCKS);
        let (a, b) = (named(&plain_vs), named(&vs));
        assert_eq!(a.len(), b.len());
        for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert!(ta.equal(tb), "{na} differs");
        }
        let x = Tensor::rand([2, 1, 28, 28], (Kind::Float, Device::Cpu));
        assert!(plain.forward_t(&x, false).equal(&wrapped.forward_t(&x, false)));
    }

    /// A model cut into stages is the uncut model: each stage holds only its layers'
    /// variables, with the uncut model's names and initial values, and the stages one
    /// after the other compute its output.
    #[test]
    fn stages_are_the_uncut_model() {
        let _rng = rng_lock();
        let widths = Widths([4, 8, 8, 16]);
        tch::manual_seed(9);
        let whole_vs = nn::VarStore::new(Device::Cpu);
        let whole = WideResNet::new(&whole_vs.root(), widths, Norm::BatchNorm);
        let mut stages = Vec::new();
        for range in [0..5, 5..8, 8..10] {
            tch::manual_seed(9);
            let vs = nn::VarStore::new(Device::Cpu);
            let stage = WideResNet::stage(&vs.root(), widths, Norm::BatchNorm, range.clone());
            assert_eq!(stage.layer_names(), LAYERS[range.clone()]);
            for (name, t) in named(&vs) {
                let layer = name.split('.').next().unwrap();
                assert!(LAYERS[range.clone()].contains(&layer), "{name} outside stage {range:?}");
                assert!(t.equal(&whole_vs.variables()[&name]), "{name} differs from the uncut model's");
            }
            stages.push((vs, stage));
        }
        let total: i64 = stages.iter().map(|(vs, _)| parameter_count(vs)).sum();
        assert_eq!(total, parameter_count(&whole_vs));
        let x = Tensor::rand([3, 1, 28, 28], (Kind::Float, Device::Cpu));
        let mut y = x.shallow_clone();
        for (_, stage) in &stages {
            y = stage.forward_t(&y, false);
        }
        assert!(y.allclose(&whole.forward_t(&x, false), 1e-6, 1e-6, false));
    }

    #[test]
    #[should_panic(expected = "a stage is a non-empty range of the 10 layers")]
    fn a_stage_past_the_last_layer_is_refused() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = WideResNet::stage(&vs.root(), Widths::NARROW, Norm::BatchNorm, 8..11);
    }

    #[test]
    fn forward_shape_and_widths_parsing() {
        let _rng = rng_lock();
        let vs = nn::VarStore::new(Device::Cpu);
        let net = WideResNet::new(&vs.root(), Widths([4, 8, 16, 32]), Norm::BatchNorm);
        let out = net.forward_t(&Tensor::rand([3, 1, 28, 28], (Kind::Float, Device::Cpu)), true);
        assert_eq!(out.size(), vec![3, 10]);
        assert_eq!("8,16,32,64".parse::<Widths>().unwrap(), Widths::NARROW);
        assert_eq!("lab".parse::<Widths>().unwrap(), Widths::LAB);
        for bad in ["8,16,32", "a,b,c,d", "0,1,2,3", ""] {
            assert!(bad.parse::<Widths>().is_err(), "{bad}");
        }
    }
}
