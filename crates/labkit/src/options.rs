//! The options every step program has besides the lab's own: what CPU runs need
//! (a narrow model, a subset, a thread count), where the data comes from, which
//! device, and how long to wait for other ranks. Step programs flatten them into
//! their `Args` (`#[command(flatten)] run: labkit::RunOptions`).
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tch::Device;

use crate::checkpoint::CheckpointOptions;
use crate::data::{DatasetKind, DatasetOptions, DownloadOptions, GenerateOptions};
use crate::model::ModelSettings;
use crate::parsers::{positive_tflops, threads, timeout_seconds};
use crate::perf::{Amp, AmpParser, PerfSettings};
use crate::placement::{gpu_count, DeviceChoice, GpuRequest, Placement};
use crate::widths::{Architecture, Widths};

/// The options of every step program that the lab's Python did not need.
#[derive(Args, Debug, Clone)]
pub struct RunOptions {
    /// Channel widths of the WideResNet: `lab` (16,160,320,640; 17,117,466 parameters),
    /// `narrow` (8,16,32,64; for CPU runs) or four numbers, e.g. 16,32,64,128.
    #[arg(long, default_value = "lab", value_name = "WIDTHS")]
    pub width: Widths,

    /// The model `WideResNet::new` builds: `wide-resnet` (the lab's) or `mlp`, a small
    /// perceptron without BatchNorm, max-pool or dropout, whose training on N ranks
    /// equals one rank's to float rounding at every step (the checker's step-by-step
    /// comparison; `--width` is the WideResNet's alone).
    #[arg(long, default_value = "wide-resnet", value_name = "MODEL", ignore_case = true)]
    pub model: Architecture,

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

/// Rejects a `--node-id` that is not one of the job's `--num-nodes` nodes.
fn check_node_id(node_id: usize, num_nodes: usize) -> Result<(), String> {
    if node_id >= num_nodes {
        return Err(format!(
            "--node-id {node_id} is not a node of this job: with --num-nodes {num_nodes} the nodes are 0 to {}; give each node its own --node-id below --num-nodes",
            num_nodes.saturating_sub(1)
        ));
    }
    Ok(())
}

/// Bad input found before anything started: prints the problem and what to do, and
/// exits with 2, as for any bad option.
fn refuse(problem: &str) -> ! {
    eprintln!("error: {problem}");
    std::process::exit(2);
}

impl RunOptions {
    /// Checks this node's part of the job before anything starts: that `node_id` is one
    /// of the job's `num_nodes` nodes, and that the node can place its `num_gpus` ranks
    /// as `--device` and `--share-gpus` ask (see [`Placement::of_node`]). On bad input it
    /// prints the problem and what to do, and exits with 2. A program that spawns its
    /// ranks calls it before `spawn`, so the node gets one message, not one per rank.
    pub fn check_node(&self, node_id: usize, num_nodes: usize, num_gpus: usize) {
        if let Err(problem) = check_node_id(node_id, num_nodes) {
            refuse(&problem);
        }
        self.placement(num_gpus);
    }

    /// Where the `ranks` ranks of this node (the program's `--num-gpus`) compute, by the
    /// lab's one placement rule ([`Placement::of_node`]) with the GPUs libtorch sees. Too
    /// few GPUs for `--device cuda` is bad input: the problem is printed and the process
    /// exits with 2 ([`RunOptions::check_node`] finds it first).
    pub fn placement(&self, ranks: usize) -> Placement {
        let request = GpuRequest { device: self.device, share_gpus: self.share_gpus, ranks };
        Placement::of_node(request, gpu_count()).unwrap_or_else(|problem| refuse(&problem))
    }

    /// The device of the rank with this local rank, on a node of `ranks` ranks:
    /// `cuda:<local_rank>` when every rank has a GPU, `cuda:<local_rank mod GPUs>` for
    /// ranks sharing GPUs (`--share-gpus`), else the CPU.
    ///
    /// ```
    /// use clap::Parser;
    /// #[derive(Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     run: labkit::RunOptions,
    /// }
    /// let args = Args::parse_from(["lab", "--device", "cpu"]);
    /// // Local rank 1 of a node of 2 ranks (the program's --num-gpus).
    /// assert_eq!(args.run.device_for(1, 2), tch::Device::Cpu);
    /// assert_eq!(args.run.backend(2), tch_distributed::Backend::Gloo);
    /// ```
    pub fn device_for(&self, local_rank: usize, ranks: usize) -> Device {
        self.placement(ranks).device(local_rank)
    }

    /// The backend of the process group of a node of `ranks` ranks: PyTorch's rule
    /// (NCCL for a GPU, Gloo for the CPU; `Backend::for_device`), except that ranks
    /// sharing a GPU (`--share-gpus` with fewer GPUs than ranks) use Gloo, which allows it.
    pub fn backend(&self, ranks: usize) -> tch_distributed::Backend {
        self.placement(ranks).backend()
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

    /// Applies the process-wide settings, as the top of a PyTorch script does, in
    /// order: [`exit_with_2_on_bad_input`](Self::exit_with_2_on_bad_input), the timeline
    /// ([`crate::perfetto::start_if_asked`]), [`threads`](Self::threads),
    /// [`refuse_cuda_without_a_gpu`](Self::refuse_cuda_without_a_gpu),
    /// [`seed`](Self::seed), [`tune_convolutions`](Self::tune_convolutions). Each sets
    /// something that belongs to the whole process (libtorch's thread pool and generators,
    /// cuDNN's mode, what a spawned rank does on its way out), which is why they are done
    /// once here and not passed along. The rest of the options travel as values: to the
    /// model (`WideResNet::new(&vs.root(), &args.run, norm)`, which `train` and `test`
    /// take them from), to the placement (`args.run.backend(args.num_gpus)`,
    /// `args.run.device_for(local_rank, args.num_gpus)`) and to `print_summary(&args.run, …)`.
    pub fn apply(&self) {
        crate::revision::keep();
        Self::exit_with_2_on_bad_input();
        // DDP_LAB_TIMELINE: on before the program makes its process group and DDP model.
        crate::perfetto::start_if_asked();
        self.threads();
        self.refuse_cuda_without_a_gpu();
        self.seed();
        self.tune_convolutions();
    }

    /// A spawned rank that fails on bad input exits with 2, so that `spawn`, and with it
    /// the run, ends with 2 too. Registered with tch-distributed for the whole process:
    /// a spawned rank ends inside `dist::spawn(n, worker)` (the lab's `mp.spawn`), whose
    /// arguments are the lab's and leave no room for labkit's rule.
    fn exit_with_2_on_bad_input() {
        tch_distributed::set_worker_exit_code(|e| i32::from(crate::exit::exit_code(e)));
    }

    /// `--threads`: the size of libtorch's intra-op thread pool, one per process.
    fn threads(&self) {
        if let Some(n) = self.threads {
            tch::set_num_threads(n.max(1) as i32);
        }
    }

    /// `--device cuda` on a machine without a GPU: refused in every program, before
    /// anything starts (this process needs one GPU; a node's ranks are checked against
    /// its GPUs by [`RunOptions::check_node`], which knows how many there are).
    fn refuse_cuda_without_a_gpu(&self) {
        self.placement(1);
    }

    /// `--seed` seeds libtorch's generators (CPU and CUDA), which belong to the process,
    /// as `torch.manual_seed(seed)` at the top of a PyTorch script; the plain sampler
    /// draws its seed from them.
    fn seed(&self) {
        tch::manual_seed(self.seed as i64);
    }

    /// cuDNN's benchmark mode, a process-wide switch, when GPUs may be used: the lab's
    /// shapes never change, so autotuning each convolution once pays off.
    fn tune_convolutions(&self) {
        let gpu_allowed = self.device != DeviceChoice::Cpu;
        if gpu_allowed && tch::Cuda::is_available() {
            tch::Cuda::cudnn_set_benchmark(true);
        }
    }

    /// The speed settings: `--amp`, `--channels-last`, `--model`, `--width`, `--peak-tflops`, and
    /// whether `--device` allows GPUs.
    pub fn perf(&self) -> PerfSettings {
        PerfSettings {
            amp: self.amp,
            channels_last: self.channels_last,
            widths: self.width,
            architecture: self.model,
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
    use super::{check_node_id, Amp, Architecture, DatasetKind, DeviceChoice, RunOptions};
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
        // --model: the WideResNet unless the checker (or the under-the-hood track) asks.
        assert_eq!(parse(&[]).unwrap().model, Architecture::WideResNet);
        assert_eq!(parse(&["--model", "MLP"]).unwrap().model, Architecture::Mlp);
        let e = parse(&["--model", "resnet"]).unwrap_err();
        assert!(e.contains("[possible values: wide-resnet, mlp]"), "{e}");
        let e = parse(&["--amp", "int8"]).unwrap_err();
        assert!(e.contains("[possible values: off, bf16]"), "{e}");
        // Display gives the names clap parses (the trace and the MFU line print them).
        assert_eq!(
            (DatasetKind::Generated.to_string(), Amp::Bf16.to_string()),
            ("generated".into(), "bf16".into())
        );
    }

    #[test]
    fn a_node_outside_the_job_is_named_with_the_nodes_there_are() {
        assert_eq!(check_node_id(1, 2), Ok(()));
        let e = check_node_id(2, 2).unwrap_err();
        assert!(e.contains("--node-id 2") && e.contains("--num-nodes 2") && e.contains("0 to 1"), "{e}");
    }
}
