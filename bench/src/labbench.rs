//! The `lab` benchmark's options and plan: which configurations run, which programs,
//! with which extra options, on which devices. Kept apart from the binary so that the
//! rules are tested without running anything.
use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
pub use labkit::Placement;

/// `torch.compile` modes the reference accepts (`default` is a plain `torch.compile(model)`).
pub const COMPILE_MODES: [&str; 4] =
    ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "lab",
    about = "The finished lab in Rust vs its PyTorch reference: images/sec, DDP efficiency, all_reduce bandwidth"
)]
pub struct Args {
    /// WideResNet widths, as the lab's --width (`narrow`, `lab` or four numbers).
    #[arg(long, default_value = "narrow")]
    pub width: String,
    /// Training images (the first N).
    #[arg(long, default_value_t = 4000)]
    pub train_subset: usize,
    /// Validation images (the first N).
    #[arg(long, default_value_t = 1000)]
    pub test_subset: usize,
    /// Epochs per run; the first is dropped from the throughput (at least 2).
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Images per batch on each rank.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Ranks of the distributed measurement, 1 to 64. Above 1, each repeat also runs 1
    /// rank, for the DDP efficiency; at 1 only that runs, and efficiency is n/a.
    #[arg(long, default_value_t = 2)]
    pub world_size: usize,
    /// Torch threads per rank, both sides.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Runs per side and world size; the figures are medians over them.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// all_reduce message size in MB for the bandwidth ratio; 0 skips it.
    #[arg(long, default_value_t = 16.0)]
    pub allreduce_mb: f64,
    /// `generated` (made here, offline), `real` or `auto`, as the lab's --dataset.
    #[arg(long, default_value = "generated")]
    pub dataset: String,
    /// Data directory [default: <workspace>/data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Also write the results as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// `cpu` (Gloo) or `cuda`: one GPU per rank over NCCL, or, with more ranks than this
    /// node has GPUs, ranks sharing them over Gloo (both programs' --share-gpus).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Also run the reference under `torch.compile(model)` (after the DDP wrap), as a
    /// third column; MODE is torch.compile's mode. Compiling takes minutes on a CPU.
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        default_missing_value = "default",
        value_parser = clap::builder::PossibleValuesParser::new(COMPILE_MODES),
        alias = "torch-compile"
    )]
    pub compile: Option<String>,
    /// Extra options for both programs, comma-separated, e.g. `--lab-args=--amp,bf16,--channels-last`.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub lab_args: Vec<String>,
    /// Seconds one run may take before it is killed.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

/// How the settings line and the JSON describe where the ranks run.
pub fn describe_placement(placement: Placement, world_size: usize) -> String {
    match placement {
        Placement::Cpu => "Gloo on CPU".into(),
        Placement::GpuPerRank => "one GPU per rank (NCCL)".into(),
        Placement::SharedGpus { gpus } => format!(
            "one GPU per rank (NCCL) at 1 rank; {world_size} ranks sharing {gpus} GPU{} (Gloo on CUDA tensors)",
            if gpus == 1 { "" } else { "s" }
        ),
    }
}

/// The program a column of the table runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// The finished lab, solutions/step_11.
    Rust,
    /// lab_reference.py, eager.
    PyTorch,
    /// lab_reference.py under torch.compile.
    Compiled,
}

impl Column {
    pub fn name(self) -> &'static str {
        match self {
            Column::Rust => "Rust",
            Column::PyTorch => "PyTorch",
            Column::Compiled => "PyTorch compiled",
        }
    }
}

/// Checks the options against each other and against this node's `gpus`: the problem
/// and what to do, in one line, when they do not fit.
pub fn validate(a: &Args, gpus: usize) -> Result<(), String> {
    a.width.parse::<labkit::Widths>()?;
    a.dataset.parse::<labkit::DatasetKind>().map_err(|e| e.to_string())?;
    if a.epochs < 2 {
        return Err("--epochs must be at least 2: the first epoch is dropped from the throughput".into());
    }
    if a.world_size < 1 || a.world_size > 64 {
        return Err(format!(
            "--world-size must be between 1 and 64, got {} (1 measures one rank only, without DDP efficiency)",
            a.world_size
        ));
    }
    if a.repeats == 0 || a.threads == 0 || a.batch_size == 0 || a.train_subset == 0 || a.test_subset == 0 {
        return Err(
            "--repeats, --threads, --batch-size, --train-subset and --test-subset must be at least 1".into(),
        );
    }
    if a.train_subset < a.world_size * a.batch_size {
        return Err(format!(
            "--train-subset {} gives a rank of {} less than one batch of {}",
            a.train_subset, a.world_size, a.batch_size
        ));
    }
    if a.device != "cpu" && a.device != "cuda" {
        return Err(format!("--device {}: expected cpu or cuda", a.device));
    }
    if a.device == "cuda" && gpus == 0 {
        return Err(
            "--device cuda, but libtorch sees no GPU on this machine: run the benchmark on a GPU node (shared/GPU.md says how to carry the build there), or use --device cpu"
                .into(),
        );
    }
    if let Some(bad) = a
        .lab_args
        .iter()
        .find(|x| !["--amp", "bf16", "off", "--channels-last", "--sync-batch-norm"].contains(&x.as_str()))
    {
        return Err(format!("--lab-args: `{bad}` is not one of the options both programs share (--amp bf16|off, --channels-last, --sync-batch-norm)"));
    }
    if !(0.0..=1024.0).contains(&a.allreduce_mb) {
        return Err(format!("--allreduce-mb must be between 0 and 1024, got {}", a.allreduce_mb));
    }
    Ok(())
}

/// Where the ranks run, given this node's GPUs (after [`validate`]): the lab's
/// placement rule for `--world-size` ranks on one node, which both programs follow.
pub fn placement(a: &Args, gpus: usize) -> Placement {
    match a.device.as_str() {
        "cuda" => Placement::for_gpus(a.world_size, gpus),
        _ => Placement::Cpu,
    }
}

/// The world sizes each repeat runs: `--world-size`, then 1 for the efficiency; just 1
/// when that is the world size.
pub fn world_sizes(a: &Args) -> Vec<usize> {
    if a.world_size == 1 {
        vec![1]
    } else {
        vec![a.world_size, 1]
    }
}

/// The table's columns: Rust, PyTorch, and PyTorch compiled with `--compile`.
pub fn columns(a: &Args) -> Vec<Column> {
    let mut c = vec![Column::Rust, Column::PyTorch];
    if a.compile.is_some() {
        c.push(Column::Compiled);
    }
    c
}

/// Options both programs get beyond the lab's (see `LabSettings::extra`): `--lab-args`,
/// and `--share-gpus` when ranks share GPUs. Both programs use Gloo only when a node has
/// more ranks than GPUs, so the option leaves their 1-rank runs on NCCL.
pub fn shared_extra_args(a: &Args, placement: Placement) -> Vec<String> {
    let mut extra = a.lab_args.clone();
    if matches!(placement, Placement::SharedGpus { .. }) {
        extra.push("--share-gpus".into());
    }
    extra
}

/// What goes between the interpreter and the shared options for one column: the
/// reference script, and `--compile=MODE` for the compiled column; nothing for Rust.
pub fn column_prefix(column: Column, script: &std::path::Path, compile: Option<&str>) -> Vec<OsString> {
    match column {
        Column::Rust => Vec::new(),
        Column::PyTorch => vec![script.into()],
        Column::Compiled => vec![script.into(), format!("--compile={}", compile.unwrap_or("default")).into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("lab").chain(argv.iter().copied())).unwrap()
    }

    #[test]
    fn world_size_one_runs_one_configuration() {
        let a = args(&["--world-size", "1"]);
        assert_eq!(validate(&a, 0), Ok(()));
        assert_eq!(world_sizes(&a), vec![1]);
        assert_eq!(world_sizes(&args(&[])), vec![2, 1]);
        for bad in ["0", "65"] {
            let e = validate(&args(&["--world-size", bad]), 0).unwrap_err();
            assert!(e.contains("between 1 and 64"), "{e}");
        }
    }

    #[test]
    fn cuda_without_a_gpu_is_refused_with_what_to_do() {
        let e = validate(&args(&["--device", "cuda", "--world-size", "1"]), 0).unwrap_err();
        assert!(e.contains("--device cuda") && e.contains("no GPU") && e.contains("--device cpu"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        assert_eq!(validate(&args(&["--device", "cuda", "--world-size", "1"]), 1), Ok(()));
    }

    #[test]
    fn more_ranks_than_gpus_share_them_on_both_sides() {
        let a = args(&["--device", "cuda", "--lab-args=--amp,bf16"]);
        assert_eq!(validate(&a, 1), Ok(()));
        assert_eq!(placement(&a, 1), Placement::SharedGpus { gpus: 1 });
        assert_eq!(shared_extra_args(&a, placement(&a, 1)), ["--amp", "bf16", "--share-gpus"]);
        assert!(describe_placement(placement(&a, 1), 2).contains("2 ranks sharing 1 GPU (Gloo"));
        // Enough GPUs: one per rank, nothing added.
        assert_eq!(placement(&a, 2), Placement::GpuPerRank);
        assert_eq!(shared_extra_args(&a, placement(&a, 2)), ["--amp", "bf16"]);
        assert_eq!(placement(&args(&[]), 0), Placement::Cpu);
    }

    #[test]
    fn compile_adds_a_third_column_with_its_mode() {
        let script = std::path::Path::new("lab_reference.py");
        assert_eq!(columns(&args(&[])), [Column::Rust, Column::PyTorch]);
        for (argv, mode) in [
            (&["--compile"][..], "default"),
            (&["--compile", "reduce-overhead"][..], "reduce-overhead"),
            (&["--torch-compile=max-autotune"][..], "max-autotune"),
            // A bare --compile before another option takes no value from it.
            (&["--compile", "--world-size", "1"][..], "default"),
        ] {
            let a = args(argv);
            assert_eq!(a.compile.as_deref(), Some(mode), "{argv:?}");
            assert_eq!(columns(&a), [Column::Rust, Column::PyTorch, Column::Compiled]);
            let prefix = column_prefix(Column::Compiled, script, a.compile.as_deref());
            assert_eq!(prefix, [OsString::from("lab_reference.py"), format!("--compile={mode}").into()]);
        }
        assert!(Args::try_parse_from(["lab", "--compile", "fast"]).is_err());
        assert!(column_prefix(Column::Rust, script, Some("default")).is_empty());
    }
}
