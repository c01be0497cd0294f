//! Beyond DDP: DDP, FSDP (per block), a 2-stage GPipe pipeline and 2-way tensor
//! parallelism (Megatron's channel split of each block's convs) of the lab's WideResNet
//! on CPU ranks over Gloo, Rust (tch-distributed) against PyTorch
//! (`DistributedDataParallel`, FSDP2's `fully_shard`, `torch.distributed.pipelining`,
//! and the same TP written by hand with `torch.autograd.Function`s), in one run.
//!
//!     cargo run -p ddp-bench --release --bin beyond
//!     cargo run -p ddp-bench --release --bin beyond -- --width lab --warmup 1 --steps 3 --repeats 1
//!
//! For each repeat and each mode, the runner starts the ranks of one side (this binary
//! with `--rank-process`, or `bench/python/beyond.py`), then the other's, alternating
//! which side goes first. Every rank trains on the same images (the real Fashion-MNIST
//! when it is here, else the generated stand-in; the table says which): `--warmup`
//! untimed steps, then `--steps` timed ones between two barriers. A run's time per step
//! is its slowest rank's; its memory is the largest rank's peak resident set during the
//! training steps (VmHWM, restarted at the first step through /proc/self/clear_refs),
//! next to the parameter and gradient bytes each rank holds, measured from its tensors
//! (plain SGD keeps no optimizer state). The bytes each rank sends per step are read
//! from the Rust ranks' timeline (every collective's and send's tensor, DDP's buckets;
//! [`wire_bytes`]) and counted at the call by the PyTorch TP rank. A side's figure is
//! the median over repeats. Nothing here asserts on timings.
use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use ddp_bench::common::{load_average, median, probe_python, run_ranks, Side, Timing};
use labkit::{DatasetKind, DatasetOptions, Norm, WideResNet, Widths};
use serde_json::{json, Value};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::Device;
use tch_distributed as dist;

type Res<T> = Result<T, Box<dyn Error>>;

/// The layers of the first pipeline stage (`labkit::model::LAYERS[..CUT]`: stem, block1,
/// block2, pool1, block3): the cut that splits the forward's FLOPs most evenly at both
/// the narrow and the lab's widths (about 45% and 55%).
const CUT: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Ddp,
    Fsdp,
    Pipeline,
    Tp,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Ddp => "ddp",
            Mode::Fsdp => "fsdp",
            Mode::Pipeline => "pipeline",
            Mode::Tp => "tp",
        }
    }

    fn describe(self, micro_batches: usize) -> String {
        match self {
            Mode::Ddp => "DDP".into(),
            Mode::Fsdp => "FSDP (per block)".into(),
            Mode::Pipeline => format!("pipeline (2 stages, {micro_batches} micro-batches)"),
            Mode::Tp => "TP (2-way, block convs' channels)".into(),
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "beyond",
    about = "DDP, FSDP, a pipeline and tensor parallelism of the WideResNet, Rust vs PyTorch: images/sec, memory and bytes sent per rank, 2 CPU ranks over Gloo"
)]
struct Args {
    /// WideResNet widths: `narrow`, `lab`, or four channel counts.
    #[arg(long, default_value = "narrow")]
    width: Widths,
    /// Images per rank per step (DDP, FSDP); the pipeline's first stage and every TP
    /// rank take the job's batch, this times the world size, so every mode trains as
    /// many images per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Micro-batches per pipeline step; they must divide the job's batch.
    #[arg(long, default_value_t = 4)]
    micro_batches: usize,
    /// Which modes to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ddp,fsdp,pipeline,tp")]
    modes: Vec<Mode>,
    #[command(flatten)]
    timing: Timing,
    /// Intra-op threads per rank, the same on both sides.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `auto` (the real Fashion-MNIST when present, else the generated stand-in), `real`
    /// or `generated`.
    #[arg(long, default_value = "auto")]
    dataset: String,
    /// Data directory [default: <workspace>/data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Also write every run's figures as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Internal: run as one Rust rank of this mode.
    #[arg(long, hide = true)]
    rank_process: Option<Mode>,
}

const WORLD_SIZE: usize = 2;

fn main() -> ExitCode {
    let args = Args::parse();
    ddp_bench::common::bench_main("beyond", args.rank_process.is_some(), || match args.rank_process {
        Some(mode) => rank_main(&args, mode),
        None => runner(&args),
    })
}

/// The data options both the runner and the Rust ranks use (the ranks find the same
/// copy again, as the lab's ranks do).
fn data_options(args: &Args) -> Res<DatasetOptions> {
    let kind: DatasetKind = args.dataset.parse()?;
    let dir = args.data_dir.clone().unwrap_or_else(|| lab_program::workspace_root().join("data"));
    Ok(DatasetOptions { dir, kind, ..DatasetOptions::default() })
}

/// Images the run needs: every step's job batch, at most the training split.
fn images_needed(args: &Args) -> usize {
    ((args.timing.warmup + args.timing.steps) * args.batch_size * WORLD_SIZE).min(60_000)
}

/// A field of /proc/self/status in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line.split_whitespace().nth(1)?.parse::<i64>().ok().map(|kb| kb * 1024)
}

/// Restarts VmHWM from the current resident set (Linux ≥ 4.0): the training's own peak.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn bytes_of(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(|t| t.numel() as i64 * t.kind().elt_size_in_bytes() as i64).sum()
}

/// Bytes of the gradients the store's parameters hold now.
fn grad_bytes_of(vs: &nn::VarStore) -> i64 {
    let grads = vs.trainable_variables().into_iter().map(|t| t.grad()).filter(|g| g.defined());
    grads.map(|g| g.numel() as i64 * g.kind().elt_size_in_bytes() as i64).sum()
}

/// The bytes one rank sends for a timeline event of a group of `world` ranks, as ring
/// algorithms move them (the usual cost model, e.g. NCCL's "bus bandwidth"):
/// all-reduce 2(n-1)/n of the tensor, all-gather (n-1) x its shard, reduce-scatter and
/// broadcast (n-1)/n of the whole (a broadcast's relays averaged over the ranks), a
/// send its tensor, a receive nothing (its sender counted it). None: no traffic
/// (a barrier, or an event that is not a collective).
fn wire_bytes(event: &dist::spans::Event, world: usize) -> Option<f64> {
    let bytes = event.args.iter().find(|(k, _)| *k == "bytes").and_then(|(_, v)| match v {
        dist::spans::Arg::Int(b) => Some(*b as f64),
        _ => None,
    })?;
    let n = world as f64;
    let name = event.name.as_str();
    let factor = match event.category {
        // DDP's gradient buckets (`all_reduce bucket i`).
        "ddp" if name.starts_with("all_reduce") => 2.0 * (n - 1.0) / n,
        "collective" => match name {
            "all_reduce" => 2.0 * (n - 1.0) / n,
            "all_gather" | "all_gather_into_tensor" => n - 1.0,
            "reduce_scatter_tensor" | "broadcast" | "broadcast_coalesced" | "reduce" => (n - 1.0) / n,
            "send" | "isend" => 1.0,
            _ => return None,
        },
        _ => return None,
    };
    Some(bytes * factor)
}

/// How one rank trains: the model in its mode, stepped on a batch.
enum Trainer {
    Ddp(dist::DistributedDataParallel<WideResNet>),
    Fsdp(dist::FsdpModule<WideResNet>, dist::FullyShard),
    Pipeline(dist::Pipeline<WideResNet>),
    Tp(WideResNet),
}

fn rank_main(args: &Args, mode: Mode) -> Res<()> {
    tch::set_num_threads(args.threads as i32);
    let timeout = Duration::from_secs(args.timeout);
    dist::init_process_group(dist::Backend::Gloo, dist::InitOptions { timeout, ..Default::default() })?;
    let (rank, world) = (dist::get_rank()?, dist::get_world_size()?);
    let needed = images_needed(args);
    let (_, data) = labkit::data::load_ready_first(&data_options(args)?, Some(needed), Some(1))?;
    let train = data.train;
    let job_batch = args.batch_size * world;
    // Images [first, first + size) of step `step`'s job batch, wrapping around the set.
    let batch = |step: usize, first: usize, size: usize| {
        let indices: Vec<usize> = (0..size).map(|i| (step * job_batch + first + i) % train.len()).collect();
        train.batch(&indices, Device::Cpu)
    };

    tch::manual_seed(0);
    // The timeline from the start: DDP times (and so reports) its buckets only when it
    // is recording as DDP is made. What it records before the timed steps is dropped.
    dist::spans::start();
    let vs = nn::VarStore::new(Device::Cpu);
    let (trainer, mut opt) = match mode {
        Mode::Ddp => {
            let net = WideResNet::new(&vs.root(), args.width, Norm::BatchNorm);
            let ddp = dist::DistributedDataParallel::new(net, &vs, dist::DdpOptions::default())?;
            (Trainer::Ddp(ddp), nn::Sgd::default().build(&vs, 0.01)?)
        }
        Mode::Fsdp => {
            let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
            let mut failed = None;
            let net = WideResNet::new_wrapped(&vs.root(), args.width, Norm::BatchNorm, |block, name| {
                match fsdp.fully_shard(block, name) {
                    Ok(sharded) => Box::new(sharded),
                    Err(e) => {
                        failed.get_or_insert(e);
                        Box::new(nn::seq_t())
                    }
                }
            });
            if let Some(e) = failed {
                return Err(e.into());
            }
            let model = fsdp.fully_shard(net, "")?;
            let opt = nn::Sgd::default().build(fsdp.shards()?, 0.01)?;
            (Trainer::Fsdp(model, fsdp), opt)
        }
        Mode::Pipeline => {
            if world != 2 {
                return Err("the pipeline mode cuts the model into 2 stages: run it on 2 ranks".into());
            }
            let layers = if rank == 0 { 0..CUT } else { CUT..labkit::model::LAYERS.len() };
            let stage = WideResNet::stage(&vs.root(), args.width, Norm::BatchNorm, layers);
            let pipeline = dist::Pipeline::new(stage, dist::default_group()?, args.micro_batches)?;
            (Trainer::Pipeline(pipeline), nn::Sgd::default().build(&vs, 0.01)?)
        }
        Mode::Tp => {
            // Every rank draws the whole model from the same seed; parallelize_module
            // keeps its slices of TP rank 0's.
            let net = WideResNet::tensor_parallel(&vs, args.width, &dist::default_group()?)?;
            (Trainer::Tp(net), nn::Sgd::default().build(&vs, 0.01)?)
        }
    };
    let mut step = |i: usize| -> Res<()> {
        match &trainer {
            Trainer::Tp(net) => {
                // TP peers compute on the same images: the job's batch on each.
                let (x, y) = batch(i, 0, job_batch);
                opt.backward_step(&net.forward_t(&x, true).cross_entropy_for_logits(&y));
            }
            Trainer::Pipeline(pipeline) => {
                let (x, y) = batch(i, 0, job_batch);
                opt.zero_grad();
                pipeline.train_step(&x, &y, |logits, y| logits.cross_entropy_for_logits(y))?;
                opt.step();
            }
            Trainer::Ddp(ddp) => {
                let (x, y) = batch(i, rank * args.batch_size, args.batch_size);
                opt.backward_step(&ddp.try_forward_t(&x, true)?.cross_entropy_for_logits(&y));
            }
            Trainer::Fsdp(model, _) => {
                let (x, y) = batch(i, rank * args.batch_size, args.batch_size);
                opt.backward_step(&model.try_forward_t(&x, true)?.cross_entropy_for_logits(&y));
            }
        }
        Ok(())
    };

    let peak_before = status_bytes("VmHWM");
    let reset = reset_peak_rss();
    let rss_start = status_bytes("VmRSS");
    for i in 0..args.timing.warmup {
        step(i)?;
    }
    dist::barrier()?;
    dist::spans::take();
    let start = Instant::now();
    for i in args.timing.warmup..args.timing.warmup + args.timing.steps {
        step(i)?;
    }
    // Taken before the barrier: only the steps' own traffic.
    let events = dist::spans::take();
    dist::spans::stop();
    dist::barrier()?;
    let seconds = start.elapsed().as_secs_f64() / args.timing.steps as f64;
    let peak_training = status_bytes("VmHWM");
    let (param_bytes, grad_bytes, peak_unsharded) = match &trainer {
        Trainer::Fsdp(_, fsdp) => {
            let memory = fsdp.memory()?;
            (memory.shard_bytes, memory.grad_bytes, Some(memory.peak_unsharded_bytes))
        }
        _ => (bytes_of(&vs), grad_bytes_of(&vs), None),
    };
    let sent: f64 = events.iter().filter_map(|e| wire_bytes(e, world)).sum();
    let result = json!({
        "step_seconds": seconds,
        "peak_rss": peak_before.max(peak_training),
        "training_peak_rss": if reset { peak_training } else { None },
        "rss_start": rss_start,
        "param_bytes": param_bytes,
        "grad_bytes": grad_bytes,
        "sent_bytes_per_step": sent / args.timing.steps as f64,
        "peak_unsharded_bytes": peak_unsharded,
        "threads": tch::get_num_threads(),
    });
    println!("result {result}");
    drop(trainer);
    dist::destroy_process_group()?;
    Ok(())
}

/// One run of one side and mode: the slowest rank's step, the largest rank's memory.
#[derive(Debug, Clone)]
struct Run {
    step_seconds: f64,
    /// Per rank, in rank order.
    ranks: Vec<Value>,
}

impl Run {
    /// The largest value of `field` over the ranks (None when a rank lacks it).
    fn max_of(&self, field: &str) -> Option<f64> {
        self.ranks.iter().map(|r| r[field].as_f64()).try_fold(f64::MIN, |m, v| v.map(|v| m.max(v)))
    }
}

fn runner(args: &Args) -> Res<()> {
    if args.timing.repeats == 0 || args.timing.steps == 0 || args.modes.is_empty() || args.batch_size == 0 {
        return Err(
            "--repeats, --steps and --batch-size must be at least 1, and --modes name one mode".into()
        );
    }
    let job_batch = args.batch_size * WORLD_SIZE;
    if args.modes.contains(&Mode::Pipeline)
        && (args.micro_batches == 0 || !job_batch.is_multiple_of(args.micro_batches))
    {
        return Err(format!(
            "--micro-batches {} does not divide the pipeline's batch of {job_batch} ({} per rank x {WORLD_SIZE} ranks): pick a divisor, e.g. 4",
            args.micro_batches, args.batch_size
        )
        .into());
    }
    let odd: Vec<i64> = args.width.0[1..].iter().copied().filter(|w| w % WORLD_SIZE as i64 != 0).collect();
    if args.modes.contains(&Mode::Tp) && !odd.is_empty() {
        return Err(format!(
            "--width {}: tensor parallelism splits each block's channels over {WORLD_SIZE} ranks, and {odd:?} do not split evenly: pick block widths that are multiples of {WORLD_SIZE}, or leave tp out of --modes",
            args.width
        )
        .into());
    }
    let env = probe_python(args.python.as_deref(), "beyond.py")?;
    if env.rust_libtorch != env.python_libtorch {
        eprintln!(
            "warning: Rust loads libtorch from {} but Python from {}: the two sides run different builds",
            env.rust_libtorch.display(),
            env.python_libtorch.display()
        );
    }
    // Prepared once here, so that no rank prepares it while others read.
    let ready = labkit::ensure_dataset(&data_options(args)?)?;
    let data = match ready.kind_used {
        DatasetKind::Real => "the real Fashion-MNIST",
        _ => "the generated stand-in (the real Fashion-MNIST is not on this machine)",
    };
    let exe = std::env::current_exe()?;
    let params = parameter_count(args.width);
    let settings = format!(
        "WideResNet {} ({params} parameters), {WORLD_SIZE} CPU ranks over Gloo, {} thread(s) per rank, batch {} per rank ({job_batch} per step), {} warm-up + {} timed steps, median of {} repeat(s), {data}; torch {}",
        args.width, args.threads, args.batch_size, args.timing.warmup, args.timing.steps, args.timing.repeats, env.torch_version
    );
    eprintln!("{settings}");
    if let Some(load) = load_average().filter(|l| *l > 1.0) {
        eprintln!("warning: load average {load:.1}: other work on this machine skews the timings");
    }
    let common = |side: Side, mode: Mode| -> Vec<String> {
        let mut v = vec![
            "--width".to_string(),
            args.width.to_string(),
            "--batch-size".into(),
            args.batch_size.to_string(),
            "--micro-batches".into(),
            args.micro_batches.to_string(),
            "--warmup".into(),
            args.timing.warmup.to_string(),
            "--steps".into(),
            args.timing.steps.to_string(),
            "--threads".into(),
            args.threads.to_string(),
            "--timeout".into(),
            args.timeout.to_string(),
        ];
        match side {
            Side::Rust => {
                v.extend([
                    "--rank-process".into(),
                    mode.name().into(),
                    "--dataset".into(),
                    ready.kind_used.to_string(),
                ]);
                if let Some(dir) = &args.data_dir {
                    v.extend(["--data-dir".into(), dir.display().to_string()]);
                }
            }
            Side::PyTorch => v.extend([
                "--mode".into(),
                mode.name().into(),
                "--data-dir".into(),
                ready.dir.display().to_string(),
            ]),
        }
        v
    };
    let mut runs: Vec<(Mode, Side, Run)> = Vec::new();
    for rep in 0..args.timing.repeats {
        for &mode in &args.modes {
            let order = if rep % 2 == 0 { [Side::Rust, Side::PyTorch] } else { [Side::PyTorch, Side::Rust] };
            for side in order {
                let program = match side {
                    Side::Rust => (exe.clone(), Vec::new()),
                    Side::PyTorch => (env.python.clone(), vec![env.script.display().to_string()]),
                };
                let run = run_side(&program, &common(side, mode), args)?;
                eprintln!(
                    "  repeat {}: {:<8} {:<7} {:.1} ms/step, peak RSS {:.0} MB",
                    rep + 1,
                    mode.name(),
                    side.name(),
                    run.step_seconds * 1e3,
                    run.max_of("training_peak_rss").or(run.max_of("peak_rss")).unwrap_or(f64::NAN) / MB
                );
                runs.push((mode, side, run));
            }
        }
    }
    let table = table(args, &runs);
    println!("{settings}\n\n{table}");
    if let Some(path) = &args.json {
        let all: Vec<Value> = runs
            .iter()
            .map(|(mode, side, run)| {
                json!({ "mode": mode.name(), "side": side.name(), "step_seconds": run.step_seconds, "ranks": run.ranks })
            })
            .collect();
        let doc = json!({ "settings": settings, "runs": all });
        atomic_file::write_atomically(path, serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(())
}

const MB: f64 = 1024.0 * 1024.0;

/// The Markdown table: per mode, images/sec and memory of both sides, with their ratios.
fn table(args: &Args, runs: &[(Mode, Side, Run)]) -> String {
    let job_batch = (args.batch_size * WORLD_SIZE) as f64;
    let mut out = String::from(
        "| mode | Rust img/s | PyTorch img/s | Rust ÷ PyTorch (goal ≥ 1.0) | Rust peak MB/rank | PyTorch peak MB/rank | Rust ÷ PyTorch (goal ≤ 1.0) | parameters held per rank, Rust / PyTorch (MB) | parameters + gradients per rank, Rust / PyTorch (MB) | sent per rank per step, Rust (MB) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for &mode in &args.modes {
        let of =
            |side: Side| runs.iter().filter(move |(m, s, _)| *m == mode && *s == side).map(|(_, _, r)| r);
        let speed = |side: Side| median(&of(side).map(|r| job_batch / r.step_seconds).collect::<Vec<_>>());
        let peak = |side: Side| {
            median(
                &of(side)
                    .filter_map(|r| r.max_of("training_peak_rss").or(r.max_of("peak_rss")))
                    .collect::<Vec<_>>(),
            ) / MB
        };
        let med =
            |side: Side, f: &dyn Fn(&Run) -> Option<f64>| median(&of(side).filter_map(f).collect::<Vec<_>>());
        let held = |side: Side| med(side, &|r| r.max_of("param_bytes")) / MB;
        let state = |side: Side| {
            med(side, &|r| {
                r.ranks
                    .iter()
                    .map(|k| Some(k["param_bytes"].as_f64()? + k["grad_bytes"].as_f64()?))
                    .try_fold(f64::MIN, |m, v| v.map(|v| m.max(v)))
            }) / MB
        };
        let sent = med(Side::Rust, &|r| r.max_of("sent_bytes_per_step")) / MB;
        let (rs, ps) = (speed(Side::Rust), speed(Side::PyTorch));
        let (rm, pm) = (peak(Side::Rust), peak(Side::PyTorch));
        out += &format!(
            "| {} | {rs:.1} | {ps:.1} | {:.2} {} | {rm:.0} | {pm:.0} | {:.2} {} | {:.2} / {:.2} | {:.2} / {:.2} | {sent:.2} |\n",
            mode.describe(args.micro_batches),
            rs / ps,
            if rs / ps >= 1.0 { "met" } else { "NOT met" },
            rm / pm,
            if rm <= pm { "met" } else { "NOT met" },
            held(Side::Rust),
            held(Side::PyTorch),
            state(Side::Rust),
            state(Side::PyTorch),
        );
    }
    // Where the memory goes: what the process held before its first step (the runtime,
    // libtorch, the model, the data), and what training added on top, per side.
    out += "\n| mode | side | before training MB/rank | training's peak MB/rank | added by training MB/rank | FSDP's full parameters at once, peak MB |\n|---|---|---|---|---|---|\n";
    for &mode in &args.modes {
        for side in [Side::Rust, Side::PyTorch] {
            let of: Vec<&Run> =
                runs.iter().filter(|(m, s, _)| *m == mode && *s == side).map(|(_, _, r)| r).collect();
            let med = |f: &dyn Fn(&Run) -> Option<f64>| {
                median(&of.iter().filter_map(|r| f(r)).collect::<Vec<_>>()) / MB
            };
            let start = med(&|r| r.max_of("rss_start"));
            let peak = med(&|r| r.max_of("training_peak_rss"));
            // Per rank, then the largest rank's.
            let added = med(&|r| {
                r.ranks
                    .iter()
                    .map(|k| Some(k["training_peak_rss"].as_f64()? - k["rss_start"].as_f64()?))
                    .try_fold(f64::MIN, |m, v| v.map(|v| m.max(v)))
            });
            let unsharded = match (mode, side) {
                (Mode::Fsdp, Side::Rust) => format!("{:.2}", med(&|r| r.max_of("peak_unsharded_bytes"))),
                _ => "n/a".into(),
            };
            out += &format!(
                "| {} | {} | {start:.0} | {peak:.0} | {added:.1} | {unsharded} |\n",
                mode.describe(args.micro_batches),
                side.name()
            );
        }
    }
    out
}

/// Runs the ranks of one side; its time per step is the slowest rank's.
fn run_side(program: &(PathBuf, Vec<String>), common: &[String], args: &Args) -> Res<Run> {
    let all: Vec<String> = program.1.iter().chain(common).cloned().collect();
    let ranks = run_ranks(&program.0, &all, WORLD_SIZE, args.threads)?;
    let worst = ranks.iter().map(|r| r["step_seconds"].as_f64().unwrap_or(f64::NAN)).fold(0.0, f64::max);
    Ok(Run { step_seconds: worst, ranks })
}

fn parameter_count(widths: Widths) -> i64 {
    let vs = nn::VarStore::new(Device::Cpu);
    let _ = WideResNet::new(&vs.root(), widths, Norm::BatchNorm);
    labkit::parameter_count(&vs)
}
