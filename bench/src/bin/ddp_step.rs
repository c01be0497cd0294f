//! DDP training-step time, Rust (tch-distributed's DistributedDataParallel over
//! libtorch's c10d::Reducer) against PyTorch's DistributedDataParallel, on CPU ranks
//! (Gloo) on this machine, in one run.
//!
//!     cargo run -p ddp-bench --release --bin ddp_step
//!
//! For each world size (default 1 and 2) and each repeat, the runner starts that many
//! Rust ranks (this binary, `--rank-process`) and then as many PyTorch ranks
//! (`bench/python/ddp_step.py`), alternating which side goes first. Every rank builds the
//! lab's WideResNet at `--widths`, wraps it in DDP, and times `--steps` SGD steps
//! (forward, cross-entropy, backward with the gradient all-reduce, step) on a fixed
//! batch after `--warmup` untimed ones; a run's time per step is its slowest rank's,
//! and a side's figure is the median over repeats. It prints per-rank images/sec,
//! the ratio Rust ÷ PyTorch, and the DDP efficiency (per-rank images/sec at world
//! size N ÷ at world size 1) of both. A control run (Rust ranks in a group, each
//! training its model alone, no DDP) gives the machine's own ceiling: what running N
//! processes at once costs here, DDP or not. Nothing here asserts on timings.
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::Parser;
use ddp_bench::common::{median, run_ranks};
use labkit::{Norm, WideResNet, Widths};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

type Res<T> = Result<T, Box<dyn Error>>;

/// Targets from the issue: Rust not slower than PyTorch; efficiency at N=2 ≥ 0.90.
const RATIO_TARGET: f64 = 1.0;
const EFFICIENCY_TARGET: f64 = 0.90;

#[derive(Parser, Debug)]
#[command(about = "DDP training-step time, Rust vs PyTorch: WideResNet, Gloo, CPU ranks on this machine")]
struct Args {
    /// WideResNet widths: `narrow`, `lab`, or four channel counts.
    #[arg(long, default_value = "narrow")]
    widths: Widths,
    /// Batch size per rank.
    #[arg(long, default_value_t = 32)]
    batch_size: i64,
    /// World sizes to measure, comma-separated; the first is the efficiency baseline.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    world_sizes: Vec<usize>,
    /// Untimed steps before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed steps per run.
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Runs per world size and side; the figure is their median.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Intra-op threads per rank, the same on both sides.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Internal: run as one Rust rank.
    #[arg(long, hide = true)]
    rank_process: bool,
    /// Internal: the control run; the rank joins the group but trains its model alone
    /// (no DDP), which measures what running N processes costs on this machine.
    #[arg(long, hide = true)]
    no_ddp: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    ddp_bench::common::bench_main("ddp_step", args.rank_process, || {
        if args.rank_process {
            rank_main(&args)
        } else {
            runner(&args)
        }
    })
}

fn rank_main(args: &Args) -> Res<()> {
    tch::set_num_threads(args.threads as i32);
    let timeout = Duration::from_secs(args.timeout);
    dist::init_process_group(dist::Backend::Gloo, dist::InitOptions { timeout, ..Default::default() })?;
    let rank = dist::get_rank()? as i64;
    tch::manual_seed(rank);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = WideResNet::new(&vs.root(), args.widths, Norm::BatchNorm);
    let model = if args.no_ddp {
        Err(net)
    } else {
        Ok(dist::DistributedDataParallel::new(net, &vs, dist::DdpOptions::default())?)
    };
    let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
    tch::manual_seed(100 + rank);
    let x = Tensor::rand([args.batch_size, 1, 28, 28], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(10, [args.batch_size], (Kind::Int64, Device::Cpu));
    let mut step = || -> Res<()> {
        let logits = match &model {
            Ok(ddp) => ddp.try_forward_t(&x, true)?,
            Err(plain) => tch::nn::ModuleT::forward_t(plain, &x, true),
        };
        opt.backward_step(&logits.cross_entropy_for_logits(&y));
        Ok(())
    };
    for _ in 0..args.warmup {
        step()?;
    }
    dist::barrier()?;
    let start = Instant::now();
    for _ in 0..args.steps {
        step()?;
    }
    dist::barrier()?;
    println!("result {}", start.elapsed().as_secs_f64() / args.steps as f64);
    drop(model);
    dist::destroy_process_group()?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Side {
    Rust,
    PyTorch,
    /// Rust ranks training without DDP: the machine's own cost of N processes.
    Control,
}

fn runner(args: &Args) -> Res<()> {
    if args.world_sizes.is_empty() || args.world_sizes.contains(&0) || args.repeats == 0 || args.steps == 0 {
        return Err("--world-sizes must be positive, --repeats and --steps at least 1".into());
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = args.python.clone().unwrap_or_else(|| root.join(".venv/bin/python"));
    let script = root.join("bench/python/ddp_step.py");
    let mut probe = Command::new(&python);
    probe.args(["-c", "import torch"]);
    if !child_process::output(probe, None).is_ok_and(|out| out.success()) {
        return Err(format!(
            "{} cannot import torch: run scripts/setup.sh (or pass --python)",
            python.display()
        )
        .into());
    }
    let exe = std::env::current_exe()?;
    eprintln!(
        "DDP step benchmark: WideResNet {} ({} parameters), batch {} per rank, {} thread(s) per rank, {} steps x {} repeats",
        args.widths,
        parameter_count(args.widths),
        args.batch_size,
        args.threads,
        args.steps,
        args.repeats
    );
    let mut rows = Vec::new();
    for &ws in &args.world_sizes {
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for rep in 0..args.repeats {
            let order = if rep % 2 == 0 {
                [Side::Rust, Side::PyTorch, Side::Control]
            } else {
                [Side::Control, Side::PyTorch, Side::Rust]
            };
            for side in order {
                let common = [
                    "--widths".to_string(),
                    args.widths.to_string(),
                    "--batch-size".into(),
                    args.batch_size.to_string(),
                    "--warmup".into(),
                    args.warmup.to_string(),
                    "--steps".into(),
                    args.steps.to_string(),
                    "--threads".into(),
                    args.threads.to_string(),
                    "--timeout".into(),
                    args.timeout.to_string(),
                ];
                let t = run_side(side, ws, &exe, &python, &script, &common, args.threads)?;
                eprintln!(
                    "  world size {ws}, repeat {}: {} {:.1} ms/step",
                    rep + 1,
                    match side {
                        Side::Rust => "Rust   ",
                        Side::PyTorch => "PyTorch",
                        Side::Control => "no DDP ",
                    },
                    t * 1e3
                );
                times[side as usize].push(t);
            }
        }
        rows.push((ws, median(&times[0]), median(&times[1]), median(&times[2])));
    }
    let per_rank = |t: f64| args.batch_size as f64 / t;
    let (_, base_rust, base_py, base_ctl) = rows[0];
    println!(
        "\n| world size | Rust img/s per rank | PyTorch img/s per rank | Rust ÷ PyTorch (target ≥ {RATIO_TARGET:.2}) | Rust efficiency (target ≥ {EFFICIENCY_TARGET:.2}) | PyTorch efficiency | machine ceiling (no DDP) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (ws, rust, py, ctl) in &rows {
        let ceiling = per_rank(*ctl) / per_rank(base_ctl);
        let ratio = per_rank(*rust) / per_rank(*py);
        let eff_r = per_rank(*rust) / per_rank(base_rust);
        let eff_p = per_rank(*py) / per_rank(base_py);
        println!(
            "| {ws} | {:.1} | {:.1} | {ratio:.3} {} | {eff_r:.3} {} | {eff_p:.3} | {ceiling:.3} |",
            per_rank(*rust),
            per_rank(*py),
            if ratio >= RATIO_TARGET { "met" } else { "NOT met" },
            if *ws == rows[0].0 {
                "(baseline)"
            } else if eff_r >= EFFICIENCY_TARGET && eff_r >= eff_p {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    Ok(())
}

/// Starts `ws` ranks of one side, waits, returns the slowest rank's seconds per step.
/// A failing rank stops the others.
fn run_side(
    side: Side,
    ws: usize,
    exe: &Path,
    python: &Path,
    script: &Path,
    common: &[String],
    threads: usize,
) -> Res<f64> {
    let (program, mut args): (&Path, Vec<String>) = match side {
        Side::Rust => (exe, vec!["--rank-process".into()]),
        Side::Control => (exe, vec!["--rank-process".into(), "--no-ddp".into()]),
        Side::PyTorch => (python, vec![script.display().to_string()]),
    };
    args.extend(common.iter().cloned());
    // Each rank prints `result SECONDS`: a JSON number.
    let ranks = run_ranks(program, &args, ws, threads)?;
    Ok(ranks.iter().map(|r| r.as_f64().unwrap_or(f64::NAN)).fold(0.0, f64::max))
}

fn parameter_count(widths: Widths) -> i64 {
    let vs = nn::VarStore::new(Device::Cpu);
    let _ = WideResNet::new(&vs.root(), widths, Norm::BatchNorm);
    labkit::parameter_count(&vs)
}
