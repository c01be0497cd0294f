//! The options every step program has besides the lab's own: what CPU runs need
//! (a narrow model, a subset, a thread count), where the data comes from, which
//! device, and how long to wait for other ranks. Step programs flatten them into
//! their `Args` (`#[command(flatten)] run: labkit::RunOptions`).
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tch::Device;

use crate::checkpoint::CheckpointOptions;
use crate::data::{DatasetKind, DatasetOptions, DownloadOptions, GenerateOptions};
use crate::model::ModelSettings;
use crate::parsers::{positive_tflops, threads, timeout_seconds};
use crate::perf::{Amp, AmpParser, PerfSettings};
use crate::widths::Widths;

/// Where a rank computes: `auto` (one GPU per rank when this node has a GPU for every
/// rank, else the CPU), `cpu`, or `cuda` (`gpu` too).
// No doc comments on the values: see `DatasetKind`'s note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(missing_docs)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    #[value(alias = "gpu")]
    Cuda,
}

impl DeviceChoice {
    /// The device of the process with this local rank: `cuda:<local_rank>` or the CPU.
    ///
    /// `Auto` picks CUDA only when there is a GPU for every rank of this node (the
    /// ranks one launcher started), so that a node never mixes GPU and CPU ranks:
    /// NCCL needs one GPU per rank, and with fewer GPUs all ranks use Gloo on the CPU.
    /// Ranks started by hand with `LOCAL_RANK` but no `LOCAL_WORLD_SIZE` use the CPU.
    pub fn for_local_rank(self, local_rank: usize) -> Device {
        let gpus = tch::Cuda::device_count().max(0) as usize;
        match self {
            DeviceChoice::Cpu => Device::Cpu,
            // More ranks than GPUs only gets this far with --share-gpus (see
            // `RunOptions::apply`): the ranks then take the GPUs in turn.
            DeviceChoice::Cuda => Device::Cuda(if gpus == 0 { local_rank } else { local_rank % gpus }),
            DeviceChoice::Auto => match ranks_on_this_node() {
                Some(ranks) if gpus >= ranks.max(local_rank + 1) => Device::Cuda(local_rank),
                Some(_) => Device::Cpu,
                // Launched (LOCAL_RANK) without LOCAL_WORLD_SIZE: a rank cannot tell how
                // many ranks share the GPUs, and guessing per rank could put rank 0 on
                // a GPU and rank 1 on the CPU. The CPU is the one answer all agree on.
                None if std::env::var_os(tch_distributed::LOCAL_RANK_ENV).is_some() => Device::Cpu,
                // A single process: the first GPU if there is one.
                None => Device::cuda_if_available(),
            },
        }
    }

    /// The single-GPU program's device: the first GPU, or the CPU.
    pub fn first(self) -> Device {
        match self {
            DeviceChoice::Cpu => Device::Cpu,
            DeviceChoice::Cuda => Device::Cuda(0),
            DeviceChoice::Auto => Device::cuda_if_available(),
        }
    }
}

/// How many ranks run on this node, as the launcher said: spawn, or
/// `LOCAL_WORLD_SIZE` (torchrun and the checker set it).
fn ranks_on_this_node() -> Option<usize> {
    if let Some(me) = tch_distributed::spawned_rank() {
        return Some(me.nprocs);
    }
    std::env::var(tch_distributed::LOCAL_WORLD_SIZE_ENV).ok()?.trim().parse().ok()
}

/// The options of every step program that the lab's Python did not need.
#[derive(Args, Debug, Clone)]
pub struct RunOptions {
    /// Channel widths of the WideResNet: `lab` (16,160,320,640; 17,117,466 parameters),
    /// `narrow` (8,16,32,64; for CPU runs) or four numbers, e.g. 16,32,64,128.
    #[arg(long, default_value = "lab", value_name = "WIDTHS")]
    pub width: Widths,

    /// Train on the first N training images only (quick CPU runs).
    #[arg(long, value_name = "N")]
    pub train_subset: Option<usize>,

    /// Validate on the first N test images only.
    #[arg(long, value_name = "N")]
    pub test_subset: Option<usize>,

    /// Directory of the data set: the real files go here, a generated stand-in in a
    /// subdirectory.
    #[arg(long, default_value = "data", value_name = "DIR")]
    pub data_dir: PathBuf,

    /// `real` (Fashion-MNIST; downloaded when missing), `generated` (a learnable
    /// stand-in made on this machine; works offline) or `auto` (real when present or
    /// downloadable, otherwise generated, and the program says so).
    #[arg(long, default_value = "auto", value_name = "KIND", ignore_case = true)]
    pub dataset: DatasetKind,

    /// Base URL to download Fashion-MNIST from, instead of the public mirrors
    /// (also: the DDP_LAB_MIRROR environment variable).
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,

    /// `auto` (a GPU per rank when this node has enough, else the CPU), `cpu` or `cuda`.
    #[arg(long, default_value = "auto", value_name = "DEVICE", ignore_case = true)]
    pub device: DeviceChoice,

    /// Torch threads per rank on the CPU (default: torch's own choice). On a CPU-only
    /// node, cores divided by ranks avoids oversubscription.
    #[arg(long, value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,

    /// Seeds everything random in a rank: the initial weights, dropout, and the order
    /// of the plain RandomSampler (steps before 6); the same seed on every rank. The
    /// DistributedSampler's order is its own seed (0) plus the epoch, as in PyTorch.
    /// Same seed, options, world size and thread count: the same metrics on CPU.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// Seconds to wait for the other ranks (rendezvous and every collective) before
    /// failing instead of hanging.
    #[arg(long, default_value_t = 60, value_name = "SECONDS", value_parser = timeout_seconds)]
    pub timeout: u64,

    /// Mixed precision: `off`, or `bf16` (autocast: convolutions in bfloat16;
    /// parameters, gradients and the loss stay float32). CPU and CUDA.
    #[arg(long, default_value = "off", value_name = "MODE", ignore_case = true, value_parser = AmpParser)]
    pub amp: Amp,

    /// Channels-last (NHWC) layout for images and convolution weights: faster
    /// convolutions on tensor-core GPUs.
    #[arg(long)]
    pub channels_last: bool,

    /// With --device cuda: let this node's ranks share its GPUs when it has fewer GPUs
    /// than ranks (local rank mod GPUs). They then talk through Gloo on CUDA tensors,
    /// since NCCL refuses two ranks on one GPU: slower than a GPU per rank, but a
    /// multi-rank program runs on a one-GPU machine.
    #[arg(long)]
    pub share_gpus: bool,

    /// Peak TFLOP/s of one device, for the model-FLOP utilisation line (default: a
    /// table of known GPUs: H100, H200, A100, T4; none on CPUs).
    #[arg(long, value_name = "TFLOPS", value_parser = positive_tflops)]
    pub peak_tflops: Option<f64>,

    // --save-every, --checkpoint-dir, --resume: with the checkpoints, which read them.
    // A doc comment here would reach clap, hence no `///`.
    #[allow(missing_docs)]
    #[command(flatten)]
    pub checkpoint: CheckpointOptions,
}

/// What `labkit::resume` and `labkit::save_checkpoint` read of the options.
impl AsRef<CheckpointOptions> for RunOptions {
    fn as_ref(&self) -> &CheckpointOptions {
        &self.checkpoint
    }
}

/// Rejects a `--node-id` that is not one of the job's `--num-nodes` nodes: prints the
/// problem and the fix, and exits with status 2 (as for any bad option) before the
/// program does anything else.
pub fn check_node_id(node_id: usize, num_nodes: usize) {
    if node_id >= num_nodes {
        eprintln!(
            "error: --node-id {node_id} is not a node of this job: with --num-nodes {num_nodes} the nodes are 0 to {}; give each node its own --node-id below --num-nodes",
            num_nodes.saturating_sub(1)
        );
        std::process::exit(2);
    }
}

/// What one node asks of its GPUs, for [`check_gpus`]: `--device`, `--share-gpus`, and
/// how many ranks it runs. The defaults are the options' (`auto`, not shared) and one
/// rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRequest {
    /// `--device`.
    pub device: DeviceChoice,
    /// `--share-gpus`: ranks may share a GPU.
    pub share_gpus: bool,
    /// The ranks of this node.
    pub ranks: usize,
}

impl Default for GpuRequest {
    fn default() -> Self {
        GpuRequest { device: DeviceChoice::Auto, share_gpus: false, ranks: 1 }
    }
}

/// Whether the ranks of one node can run as `request` asks with `gpus` GPUs: the
/// problem and what to do when they cannot. Too few GPUs is bad input unless the ranks
/// may share them (`--share-gpus`).
///
/// ```
/// use labkit::{check_gpus, DeviceChoice, GpuRequest};
/// let two_ranks = GpuRequest { device: DeviceChoice::Cuda, ranks: 2, ..Default::default() };
/// assert!(check_gpus(two_ranks, 1).is_err()); // NCCL needs a GPU per rank
/// assert!(check_gpus(GpuRequest { share_gpus: true, ..two_ranks }, 1).is_ok());
/// ```
pub fn check_gpus(request: GpuRequest, gpus: usize) -> Result<(), String> {
    let GpuRequest { device, share_gpus, ranks } = request;
    if device != DeviceChoice::Cuda || ranks <= gpus && gpus > 0 {
        return Ok(());
    }
    if gpus == 0 {
        return Err(
            "--device cuda, but libtorch sees no GPU on this node: run on the CPU (--device cpu, or --device auto, which uses GPUs where there are enough)"
                .into(),
        );
    }
    if share_gpus {
        return Ok(());
    }
    Err(format!(
        "--device cuda with {ranks} ranks on this node, which has {gpus} GPU(s) (NCCL needs one per rank): ask for at most {gpus} rank(s) per node (--num-gpus {gpus}), or add --share-gpus to let ranks share a GPU (Gloo on CUDA tensors)"
    ))
}

impl RunOptions {
    /// The backend of this rank's process group: PyTorch's rule (NCCL for a GPU,
    /// Gloo for the CPU; `Backend::for_device`), except that ranks sharing a GPU
    /// (`--share-gpus` with fewer GPUs than ranks) use Gloo, which allows it.
    pub fn backend(&self, local_rank: usize) -> tch_distributed::Backend {
        let device = self.device.for_local_rank(local_rank);
        let gpus = tch::Cuda::device_count().max(0) as usize;
        let ranks = ranks_on_this_node().unwrap_or(1);
        if device.is_cuda() && self.share_gpus && ranks > gpus {
            return tch_distributed::Backend::Gloo;
        }
        tch_distributed::Backend::for_device(device)
    }

    /// Refuses `--device cuda` with fewer GPUs than this node's ranks (see
    /// [`check_gpus`]): prints the problem and what to do, and exits with 2 before
    /// anything starts. Called by [`RunOptions::apply`] in ranks that know how many ranks
    /// their node has (spawned, or launched with `LOCAL_WORLD_SIZE`), and by `spawn`
    /// before it starts any rank.
    fn check_gpus_or_exit(&self, ranks: usize) {
        let gpus = tch::Cuda::device_count().max(0) as usize;
        let request = GpuRequest { device: self.device, share_gpus: self.share_gpus, ranks };
        if let Err(problem) = check_gpus(request, gpus) {
            eprintln!("error: {problem}");
            std::process::exit(2);
        }
    }

    /// The rendezvous and collective timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }

    /// What to hand [`crate::prepare_dataset`] and [`crate::load_dataset`].
    pub fn dataset_options(&self) -> DatasetOptions {
        DatasetOptions {
            dir: self.data_dir.clone(),
            kind: self.dataset,
            download: DownloadOptions {
                mirrors: self.mirror.iter().cloned().collect(),
                ..Default::default()
            },
            generated: GenerateOptions::default(),
            system_dir: crate::data::system_dir(),
        }
    }

    /// Applies the process-wide settings, as the top of a PyTorch script does: torch's
    /// thread count, the seed (`torch.manual_seed`), cuDNN's benchmark mode when GPUs may
    /// be used (the lab's shapes never change, so autotuning each convolution once pays
    /// off); and spawned ranks exit with 2 on bad input. The rest of the options travel
    /// explicitly: to the model (`WideResNet::new(&vs.root(), &args.run, norm)`, which
    /// `train` and `test` take them from) and to `print_summary(&args.run, …)`.
    pub fn apply(&self) {
        // A spawned rank that finds bad input exits with 2, and so does the run.
        tch_distributed::set_worker_exit_code(|e| i32::from(crate::exit::exit_code(e)));
        // DDP_LAB_TIMELINE: on before the program makes its process group and DDP model.
        crate::perfetto::start_if_asked();
        if let Some(n) = self.threads {
            tch::set_num_threads(n.max(1) as i32);
        }
        // Too few GPUs: refused once per node, in the process that starts the ranks
        // (spawn) or, for launched ranks, in each rank before it does anything.
        if tch_distributed::spawned_rank().is_none() {
            self.check_gpus_or_exit(ranks_on_this_node().unwrap_or(1));
        }
        let (device, share_gpus) = (self.device, self.share_gpus);
        tch_distributed::set_spawn_check(move |nprocs| {
            let request = GpuRequest { device, share_gpus, ranks: nprocs };
            check_gpus(request, tch::Cuda::device_count().max(0) as usize)
        });
        // Seeds libtorch's generators (CPU and CUDA), as torch.manual_seed(seed) at the
        // top of a PyTorch script; the plain sampler draws its seed from them.
        tch::manual_seed(self.seed as i64);
        let gpu_allowed = self.device != DeviceChoice::Cpu;
        if gpu_allowed && tch::Cuda::is_available() {
            tch::Cuda::cudnn_set_benchmark(true);
        }
    }

    /// The speed settings: `--amp`, `--channels-last`, `--width`, `--peak-tflops`, and
    /// whether `--device` allows GPUs.
    pub fn perf(&self) -> PerfSettings {
        PerfSettings {
            amp: self.amp,
            channels_last: self.channels_last,
            widths: self.width,
            peak_tflops: self.peak_tflops,
            gpu_allowed: self.device != DeviceChoice::Cpu,
        }
    }
}

/// `WideResNet::new(&vs.root(), &args.run, norm)`: the model is built from `--seed` and
/// the speed settings.
impl From<&RunOptions> for ModelSettings {
    fn from(run: &RunOptions) -> Self {
        ModelSettings { seed: Some(run.seed), perf: run.perf() }
    }
}

/// `print_summary(&args.run, …)`: the MFU line needs the widths and the peak TFLOPS.
impl From<&RunOptions> for PerfSettings {
    fn from(run: &RunOptions) -> Self {
        run.perf()
    }
}

#[cfg(test)]
mod tests {
    use super::{check_gpus, Amp, DatasetKind, DeviceChoice, GpuRequest, RunOptions};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunOptions,
    }

    fn parse(args: &[&str]) -> Result<RunOptions, String> {
        let args = std::iter::once("lab").chain(args.iter().copied());
        Cli::try_parse_from(args).map(|cli| cli.run).map_err(|e| e.to_string())
    }

    #[test]
    fn enum_options_parse_through_clap_in_any_case_and_with_their_aliases() {
        let run = parse(&["--device", "GPU", "--dataset", "Generated", "--amp", "bfloat16"]).unwrap();
        assert_eq!(
            (run.device, run.dataset, run.amp),
            (DeviceChoice::Cuda, DatasetKind::Generated, Amp::Bf16)
        );
        let run = parse(&[]).unwrap();
        assert_eq!((run.device, run.dataset, run.amp), (DeviceChoice::Auto, DatasetKind::Auto, Amp::Off));
        assert_eq!(parse(&["--amp", "fp32"]).unwrap().amp, Amp::Off);
        let e = parse(&["--device", "tpu"]).unwrap_err();
        assert!(e.contains("invalid value 'tpu'") && e.contains("[possible values: auto, cpu, cuda]"), "{e}");
        let e = parse(&["--dataset", "mnist"]).unwrap_err();
        assert!(e.contains("[possible values: real, generated, auto]"), "{e}");
        // fp16 is not a typo: it gets the reason, in clap's "invalid value" form.
        let e = parse(&["--amp", "FP16"]).unwrap_err();
        assert!(
            e.contains("invalid value 'FP16' for '--amp <MODE>'") && e.contains("gradient scaler"),
            "{e}"
        );
        let e = parse(&["--amp", "int8"]).unwrap_err();
        assert!(e.contains("[possible values: off, bf16]"), "{e}");
        // Display gives the names clap parses (the trace and the MFU line print them).
        assert_eq!(
            (DatasetKind::Generated.to_string(), Amp::Bf16.to_string()),
            ("generated".into(), "bf16".into())
        );
    }

    #[test]
    fn more_ranks_than_gpus_is_refused_unless_shared() {
        let cuda = |share_gpus, ranks| GpuRequest { device: DeviceChoice::Cuda, share_gpus, ranks };
        let refused = check_gpus(cuda(false, 2), 1).unwrap_err();
        for part in ["2 ranks", "1 GPU", "--num-gpus 1", "--share-gpus"] {
            assert!(refused.contains(part), "{refused}");
        }
        assert_eq!(check_gpus(cuda(true, 2), 1), Ok(()));
        assert_eq!(check_gpus(cuda(false, 2), 2), Ok(()));
        assert_eq!(check_gpus(cuda(false, 1), 8), Ok(()));
    }

    #[test]
    fn no_gpu_at_all_is_refused_even_when_shared() {
        for share in [false, true] {
            let request = GpuRequest { device: DeviceChoice::Cuda, share_gpus: share, ranks: 1 };
            let refused = check_gpus(request, 0).unwrap_err();
            assert!(refused.contains("no GPU") && refused.contains("--device cpu"), "{refused}");
        }
    }

    #[test]
    fn cpu_and_auto_need_no_gpu() {
        for device in [DeviceChoice::Cpu, DeviceChoice::Auto] {
            assert_eq!(check_gpus(GpuRequest { device, share_gpus: false, ranks: 4 }, 0), Ok(()));
        }
    }
}
