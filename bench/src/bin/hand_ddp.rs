//! DDP written by hand against the libraries': on 2 CPU ranks over Gloo, the same MLP,
//! the same batches and the same plain SGD, trained four ways, timed per step, with how
//! much of the gradients' all-reduce ran while backward was still computing.
//!
//!     cargo run -p ddp-bench --release --bin hand_ddp
//!
//! | mode | what averages the gradients |
//! |---|---|
//! | `by-hand` | after backward, one blocking `all_reduce` per parameter, divided by the world size |
//! | `buckets` | the hand-written bucketed DDP of `tch-distributed/examples/bucketed_ddp.rs`: post-accumulate-grad hooks launch each bucket's `all_reduce_async` during backward, waited for before the step |
//! | `library` | tch-distributed's `DistributedDataParallel` (libtorch's Reducer) |
//! | `pytorch` | `torch.nn.parallel.DistributedDataParallel` (`bench/python/hand_ddp.py`) |
//!
//! The hand-written bucketed DDP has one home, the example: this binary compiles that
//! file as a module (as `tests/grad_hooks.rs` does) and uses its `BucketedDdp`.
//! See bench/README.md for what is measured and how.
#[allow(dead_code)] // the example's own main, reference model and printing
#[path = "../../../crates/tch-distributed/examples/bucketed_ddp.rs"]
mod bucketed_ddp;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bucketed_ddp::BucketedDdp;
use clap::{Parser, ValueEnum};
use ddp_bench::common::{load_average, median, probe_python, run_ranks, Timing};
use serde_json::{json, Value};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;
use tch_distributed::spans::{self, Event, Lane};

type Res<T> = Result<T, Box<dyn Error>>;

const WORLD_SIZE: usize = 2;
/// How far the hand-written runs' and PyTorch's weights may end from the library DDP's:
/// float32 sums in another order (measured ~1e-8 here after a few steps).
pub const WEIGHT_TOLERANCE: f64 = 1e-5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    ByHand,
    Buckets,
    Library,
    Pytorch,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ByHand => "by-hand",
            Mode::Buckets => "buckets",
            Mode::Library => "library",
            Mode::Pytorch => "pytorch",
        }
    }

    fn row(self) -> &'static str {
        match self {
            Mode::ByHand => "by hand, after backward (one all-reduce per parameter)",
            Mode::Buckets => "by hand, buckets overlapped with backward (hooks + async all-reduce)",
            Mode::Library => "tch-distributed DistributedDataParallel",
            Mode::Pytorch => "PyTorch DistributedDataParallel",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "Hand-written DDP (by hand, bucketed) against tch-distributed's and PyTorch's DDP: 2 CPU ranks, Gloo, an MLP"
)]
struct Args {
    /// Inputs per example.
    #[arg(long, default_value_t = 256)]
    features: i64,
    /// Hidden layers' widths, comma-separated (a ReLU after each).
    #[arg(long, value_delimiter = ',', default_value = "512,512,512")]
    hidden: Vec<i64>,
    /// Classes (the last layer's outputs).
    #[arg(long, default_value_t = 10)]
    classes: i64,
    /// Examples per rank and step.
    #[arg(long, default_value_t = 64)]
    batch_size: i64,
    /// A bucket's cap in KiB: the hand-written DDP's, and the libraries' bucket_cap_mb
    /// (their first bucket capped at 1 MiB or this, the smaller, as PyTorch's default).
    #[arg(long, default_value_t = 256)]
    bucket_cap_kb: usize,
    /// Modes to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "by-hand,buckets,library,pytorch")]
    modes: Vec<Mode>,
    #[command(flatten)]
    timing: Timing,
    /// SGD's learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Intra-op threads per rank, the same on both sides.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Writes every run's per-rank figures here (JSON).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Writes rank 0's median timed step of each mode's last run here, as a Chrome trace
    /// (one process per mode): what the guide's overlap figure is drawn from.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Internal: run as one Rust rank of this mode.
    #[arg(long, hide = true, value_enum)]
    rank_process: Option<Mode>,
    /// Internal: where rank 0 writes its final weights (float32, little-endian).
    #[arg(long, hide = true)]
    weights_out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    ddp_bench::common::bench_main("hand_ddp", args.rank_process.is_some(), || match args.rank_process {
        Some(mode) => rank_main(&args, mode),
        None => runner(&args),
    })
}

// --- one rank ----------------------------------------------------------------------

/// The MLP: Linear, ReLU, ..., Linear.
#[derive(Debug)]
struct Mlp {
    layers: Vec<nn::Linear>,
}

impl Mlp {
    fn new(root: &nn::Path, widths: &[i64]) -> Mlp {
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| nn::linear(root / format!("fc{}", i + 1), w[0], w[1], Default::default()))
            .collect();
        Mlp { layers }
    }

    /// Weight and bias of each layer, first to last (PyTorch's `parameters()` order).
    fn parameters(&self) -> Vec<Tensor> {
        let mut all = Vec::new();
        for layer in &self.layers {
            all.push(layer.ws.shallow_clone());
            all.extend(layer.bs.as_ref().map(Tensor::shallow_clone));
        }
        all
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Tensor {
        let last = self.layers.len() - 1;
        self.layers.iter().enumerate().fold(x.shallow_clone(), |h, (i, layer)| {
            let out = layer.forward(&h);
            if i < last {
                out.relu()
            } else {
                out
            }
        })
    }
}

/// The first weights, by formula (`hand_ddp.py` computes the same), different on each
/// rank: whatever averages the gradients must first make them rank 0's.
fn initial(param_index: usize, shape: &[i64], rank: usize) -> Tensor {
    let numel: i64 = shape.iter().product();
    let fan_in = if shape.len() == 2 { shape[1] } else { 1 };
    let phase = (param_index * 10 + rank) as f64;
    ((Tensor::arange(numel, (Kind::Float, Device::Cpu)) * 0.7 + phase).sin() / (fan_in as f64).sqrt())
        .reshape(shape)
}

/// Rank `rank`'s batch of step `step`, by formula (`hand_ddp.py` computes the same).
fn batch(args: &Args, rank: usize, step: usize) -> (Tensor, Tensor) {
    let offset = (step * WORLD_SIZE + rank) as f64;
    let n = args.batch_size * args.features;
    let x = (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.01 + offset)
        .sin()
        .reshape([args.batch_size, args.features]);
    let y = (Tensor::arange(args.batch_size, (Kind::Int64, Device::Cpu)) * 7
        + (step * WORLD_SIZE + rank) as i64)
        .remainder(args.classes);
    (x, y)
}

/// What averages this rank's gradients.
enum Averaging {
    ByHand(Arc<dist::ProcessGroup>),
    Buckets(BucketedDdp),
    Library(dist::DistributedDataParallel<Mlp>),
}

/// One step's timeline (µs since the Unix epoch) and what it shows.
struct StepTimeline {
    events: Vec<Event>,
    overlap: f64,
    exposed_us: f64,
}

/// The share of the communication window (first gradient all-reduce's launch to the
/// last one's end) that lay inside backward (its call to the last gradient
/// accumulated), and how long communication went on after backward.
fn overlap_of(backward: (f64, f64), all_reduces: &[(f64, f64)]) -> (f64, f64) {
    let start = all_reduces.iter().map(|a| a.0).fold(f64::INFINITY, f64::min);
    let end = all_reduces.iter().map(|a| a.1).fold(f64::NEG_INFINITY, f64::max);
    if all_reduces.is_empty() || end <= start {
        return (0.0, 0.0);
    }
    let inside = (end.min(backward.1) - start.max(backward.0)).max(0.0);
    (inside / (end - start), (end - backward.1).max(0.0))
}

fn span_event(name: &str, lane: Lane, start_us: f64, end_us: f64) -> Event {
    Event {
        name: name.to_string(),
        category: "compute",
        lane,
        start_us,
        dur_us: Some((end_us - start_us).max(0.0)),
        args: Vec::new(),
    }
}

fn rank_main(args: &Args, mode: Mode) -> Res<()> {
    tch::set_num_threads(args.threads as i32);
    let timeout = std::time::Duration::from_secs(args.timeout);
    dist::init_process_group(dist::Backend::Gloo, dist::InitOptions { timeout, ..Default::default() })?;
    let group = dist::default_group()?;
    let rank = group.rank();
    let world = group.world_size();
    // On before the library's DDP is made: it then times each bucket's all-reduce.
    spans::start();

    let vs = nn::VarStore::new(Device::Cpu);
    let widths: Vec<i64> =
        std::iter::once(args.features).chain(args.hidden.iter().copied()).chain([args.classes]).collect();
    let net = Mlp::new(&vs.root(), &widths);
    let params = net.parameters();
    tch::no_grad(|| {
        for (i, p) in params.iter().enumerate() {
            p.shallow_clone().copy_(&initial(i, &p.size(), rank));
        }
    });
    let cap_bytes = args.bucket_cap_kb * 1024;
    let (averaging, net) = match mode {
        Mode::ByHand => {
            for p in &params {
                group.broadcast(&mut p.detach(), 0)?;
            }
            (Averaging::ByHand(group.clone()), Some(net))
        }
        Mode::Buckets => {
            (Averaging::Buckets(BucketedDdp::new(group.clone(), &params, cap_bytes)?), Some(net))
        }
        Mode::Library => {
            let cap_mb = cap_bytes as f64 / (1024.0 * 1024.0);
            let opts = dist::DdpOptions {
                bucket_cap_mb: cap_mb,
                first_bucket_cap_mb: cap_mb.min(1.0),
                ..Default::default()
            };
            (Averaging::Library(dist::DistributedDataParallel::new(net, &vs, opts)?), None)
        }
        Mode::Pytorch => return Err("the pytorch mode runs bench/python/hand_ddp.py, not this binary".into()),
    };
    // When the last gradient of a backward was accumulated: backward's compute ends there
    // (the libraries' backward() returns only after waiting for their all-reduces).
    let last_gradient = Arc::new(Mutex::new(0.0f64));
    let _hooks = params
        .iter()
        .map(|p| {
            let last = last_gradient.clone();
            dist::register_post_accumulate_grad_hook(p, move |_| {
                *last.lock().unwrap_or_else(|e| e.into_inner()) = spans::now_us();
                Ok(())
            })
        })
        .collect::<dist::Result<Vec<_>>>()?;
    let mut opt = nn::Sgd::default().build(&vs, args.lr)?;
    // Rank 0's weights, which every mode starts from once it has made them the same.
    let start: Vec<Tensor> = params.iter().map(|p| p.detach().copy()).collect();

    let mut step_seconds = Vec::new();
    let mut timelines = Vec::new();
    let mut buckets = 0;
    for step in 0..args.timing.warmup + args.timing.steps {
        if step == args.timing.warmup {
            dist::barrier()?;
        }
        let (x, y) = batch(args, rank, step);
        spans::take();
        let started = Instant::now();
        let t0 = spans::now_us();
        opt.zero_grad();
        let logits = match (&averaging, &net) {
            (Averaging::Library(ddp), _) => ddp.try_forward_t(&x, true)?,
            (_, Some(net)) => net.forward(&x),
            _ => unreachable!("only the library's DDP holds the model"),
        };
        let loss = logits.cross_entropy_for_logits(&y);
        let b0 = spans::now_us();
        loss.f_backward()?;
        let returned = spans::now_us();
        let mut launch_order = Vec::new();
        match &averaging {
            Averaging::ByHand(group) => {
                for p in &params {
                    let mut grad = p.grad();
                    group.all_reduce(&mut grad, dist::ReduceOp::Sum)?;
                    grad /= world as f64;
                }
            }
            Averaging::Buckets(ddp) => {
                launch_order = ddp.finish_gradient_synchronization()?.into_iter().map(|(b, _)| b).collect();
                buckets = ddp.bucket_count();
            }
            Averaging::Library(_) => {}
        }
        let synced = spans::now_us();
        opt.step();
        let stepped = spans::now_us();
        let seconds = started.elapsed().as_secs_f64();
        let b1 = *last_gradient.lock().unwrap_or_else(|e| e.into_inner());
        let b1 = if b1 >= b0 { b1 } else { returned };

        // The gradients' all-reduces, each on its bucket's lane (the hand-written
        // buckets in the order they were launched; by hand, one lane for all).
        let mut comm: Vec<Event> = spans::take()
            .into_iter()
            .filter(|e| e.dur_us.is_some() && (e.name == "all_reduce" || matches!(e.lane, Lane::Bucket(_))))
            .collect();
        comm.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        if let Averaging::Buckets(_) = &averaging {
            for (e, b) in comm.iter_mut().zip(&launch_order) {
                e.name = format!("all_reduce bucket {b}");
                e.lane = Lane::Bucket(*b);
            }
        }
        // The library's Reducer rebuilds its buckets after the first backward: count the
        // timed steps' only.
        if matches!(averaging, Averaging::Library(_)) && step >= args.timing.warmup {
            buckets = buckets.max(comm.len());
        }
        let windows: Vec<(f64, f64)> =
            comm.iter().map(|e| (e.start_us, e.start_us + e.dur_us.unwrap_or(0.0))).collect();
        let (overlap, exposed_us) = overlap_of((b0, b1), &windows);
        let mut events =
            vec![span_event("forward", Lane::Compute, t0, b0), span_event("backward", Lane::Compute, b0, b1)];
        if synced > b1 {
            events.push(span_event("waiting for gradients", Lane::Compute, b1, synced));
        }
        events.push(span_event("optimizer step", Lane::Compute, synced, stepped));
        events.extend(comm);
        if step >= args.timing.warmup {
            step_seconds.push(seconds);
            timelines.push(StepTimeline { events, overlap, exposed_us });
        }
    }
    if let (Some(path), 0) = (&args.weights_out, rank) {
        write_weights(path, &params)?;
    }
    // The timed step nearest the median: a typical one, not one a busy machine stretched.
    let typical = median(&step_seconds);
    let shown = (0..timelines.len())
        .min_by(|&a, &b| (step_seconds[a] - typical).abs().total_cmp(&(step_seconds[b] - typical).abs()))
        .ok_or("no timed step")?;
    let trace: Vec<Value> =
        timelines[shown].events.iter().map(|e| labkit::perfetto::chrome_event(rank, e)).collect();
    let result = json!({
        "rank": rank,
        "step_seconds": median(&step_seconds),
        "overlap": median(&timelines.iter().map(|t| t.overlap).collect::<Vec<_>>()),
        "exposed_ms": median(&timelines.iter().map(|t| t.exposed_us / 1e3).collect::<Vec<_>>()),
        "buckets": if mode == Mode::ByHand { params.len() } else { buckets },
        "params": params.iter().map(Tensor::numel).sum::<usize>(),
        "weights_moved": params.iter().zip(&start).map(|(p, s)| (p - s).abs().max().double_value(&[])).fold(0.0, f64::max),
        "timeline": trace,
    });
    println!("result {result}");
    drop(averaging);
    dist::destroy_process_group()?;
    Ok(())
}

fn write_weights(path: &std::path::Path, params: &[Tensor]) -> Res<()> {
    let flat = Tensor::cat(&params.iter().map(|p| p.detach().flatten(0, -1)).collect::<Vec<_>>(), 0);
    let values = Vec::<f32>::try_from(&flat)?;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes)?;
    Ok(())
}

fn read_weights(path: &std::path::Path) -> Res<Vec<f32>> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("rank 0 wrote no weights to {}: {e}", path.display()))?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

// --- the runner --------------------------------------------------------------------

/// One run of one mode: its ranks' results and rank 0's final weights.
struct Run {
    mode: Mode,
    step_seconds: f64,
    ranks: Vec<Value>,
    weights: Vec<f32>,
}

impl Run {
    /// The mean over the ranks of `field`.
    fn mean_of(&self, field: &str) -> f64 {
        self.ranks.iter().map(|r| r[field].as_f64().unwrap_or(f64::NAN)).sum::<f64>()
            / self.ranks.len() as f64
    }
}

fn runner(args: &Args) -> Res<()> {
    let sizes = [
        ("--features", args.features),
        ("--classes", args.classes),
        ("--batch-size", args.batch_size),
        ("--bucket-cap-kb", args.bucket_cap_kb as i64),
        ("--steps", args.timing.steps as i64),
        ("--repeats", args.timing.repeats as i64),
        ("--threads", args.threads as i64),
    ];
    if let Some((name, value)) = sizes.iter().find(|(_, v)| *v < 1) {
        return Err(format!("{name} must be at least 1, got {value}").into());
    }
    if args.hidden.iter().any(|w| *w < 1) || args.modes.is_empty() {
        return Err("--hidden takes positive widths (e.g. 512,512) and --modes at least one mode".into());
    }
    let env = probe_python(args.python.as_deref(), "hand_ddp.py")?;
    let exe = std::env::current_exe()?;
    let scratch = tempfile::tempdir()?;
    let widths: Vec<String> = args.hidden.iter().map(i64::to_string).collect();
    let common = vec![
        "--features".to_string(),
        args.features.to_string(),
        "--hidden".into(),
        widths.join(","),
        "--classes".into(),
        args.classes.to_string(),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--bucket-cap-kb".into(),
        args.bucket_cap_kb.to_string(),
        "--warmup".into(),
        args.timing.warmup.to_string(),
        "--steps".into(),
        args.timing.steps.to_string(),
        "--lr".into(),
        args.lr.to_string(),
        "--threads".into(),
        args.threads.to_string(),
        "--timeout".into(),
        args.timeout.to_string(),
    ];
    let mut runs: Vec<Run> = Vec::new();
    let mut settings = String::new();
    for rep in 0..args.timing.repeats {
        let mut order = args.modes.clone();
        if rep % 2 == 1 {
            order.reverse();
        }
        for mode in order {
            let weights_path = scratch.path().join(format!("{}-{rep}.f32", mode.name()));
            let (program, mut all) = match mode {
                Mode::Pytorch => (env.python.clone(), vec![env.script.display().to_string()]),
                _ => (exe.clone(), vec!["--rank-process".to_string(), mode.name().to_string()]),
            };
            all.extend(common.iter().cloned());
            all.extend(["--weights-out".to_string(), weights_path.display().to_string()]);
            let ranks = run_ranks(&program, &all, WORLD_SIZE, args.threads)?;
            let step_seconds =
                ranks.iter().map(|r| r["step_seconds"].as_f64().unwrap_or(f64::NAN)).fold(0.0, f64::max);
            let run = Run { mode, step_seconds, weights: read_weights(&weights_path)?, ranks };
            if settings.is_empty() {
                settings = format!(
                    "MLP {} → {} → {} ({} parameters), {WORLD_SIZE} CPU ranks over Gloo, {} thread(s) per rank, batch {} per rank, buckets of at most {} KiB, {} warm-up + {} timed steps, median step of each run, median of {} run(s); torch {}",
                    args.features,
                    widths.join(" → "),
                    args.classes,
                    run.ranks[0]["params"],
                    args.threads,
                    args.batch_size,
                    args.bucket_cap_kb,
                    args.timing.warmup,
                    args.timing.steps,
                    args.timing.repeats,
                    env.torch_version
                );
                eprintln!("{settings}");
                if let Some(load) = load_average().filter(|l| *l > 1.0) {
                    eprintln!(
                        "warning: load average {load:.1}: other work on this machine skews the timings"
                    );
                }
            }
            eprintln!(
                "  repeat {}: {:<8} {:.2} ms/step, overlap {:.2}",
                rep + 1,
                mode.name(),
                run.step_seconds * 1e3,
                run.mean_of("overlap")
            );
            runs.push(run);
        }
    }
    println!("{settings}\n\n{}", table(args, &runs));
    if let Some(path) = &args.json {
        let library = runs.iter().rev().find(|r| r.mode == Mode::Library).map(|r| &r.weights);
        let all: Vec<Value> = runs
            .iter()
            .map(|r| {
                let diff = library.map(|l| max_diff(&r.weights, l));
                json!({ "mode": r.mode.name(), "step_seconds": r.step_seconds, "max_weight_diff_vs_library": diff, "ranks": r.ranks })
            })
            .collect();
        let doc = json!({ "settings": settings, "weight_tolerance": WEIGHT_TOLERANCE, "runs": all });
        atomic_file::write_atomically(path, serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(path) = &args.timeline {
        atomic_file::write_atomically(
            path,
            serde_json::to_string_pretty(&timeline(args, &runs, &settings))?,
        )?;
    }
    Ok(())
}

/// The largest |a − b| (infinite when the lengths differ: not the same model).
fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max)
}

/// Per mode, medians over its runs: the Markdown table.
fn table(args: &Args, runs: &[Run]) -> String {
    let median_of = |mode: Mode, f: &dyn Fn(&Run) -> f64| -> f64 {
        median(&runs.iter().filter(|r| r.mode == mode).map(f).collect::<Vec<_>>())
    };
    let library_ms = median_of(Mode::Library, &|r| r.step_seconds * 1e3);
    let library = runs.iter().rev().find(|r| r.mode == Mode::Library).map(|r| &r.weights);
    let mut out = String::from(
        "| mode | ms/step | ÷ library DDP's | share of the all-reduce window inside backward | all-reduce left after backward (ms) | buckets | max abs weight diff from library DDP |\n|---|---|---|---|---|---|---|\n",
    );
    for &mode in &args.modes {
        let ms = median_of(mode, &|r| r.step_seconds * 1e3);
        let ratio = if library_ms.is_nan() { "n/a".to_string() } else { format!("{:.2}", ms / library_ms) };
        let diff =
            runs.iter().rev().find(|r| r.mode == mode).zip(library).map(|(r, l)| max_diff(&r.weights, l));
        let buckets = runs.iter().find(|r| r.mode == mode).map_or(0.0, |r| r.mean_of("buckets"));
        out.push_str(&format!(
            "| {} | {ms:.2} | {ratio} | {:.2} | {:.2} | {buckets:.0}{} | {} |\n",
            mode.row(),
            median_of(mode, &|r| r.mean_of("overlap")),
            median_of(mode, &|r| r.mean_of("exposed_ms")),
            if mode == Mode::ByHand { " (per parameter)" } else { "" },
            diff.map_or("n/a".to_string(), |d| format!("{d:.1e}")),
        ));
    }
    out
}

/// Rank 0's median timed step of each mode's last run, one trace process per mode.
fn timeline(args: &Args, runs: &[Run], settings: &str) -> Value {
    let mut events = Vec::new();
    for (pid, &mode) in args.modes.iter().enumerate() {
        let Some(run) = runs.iter().rev().find(|r| r.mode == mode) else { continue };
        events.push(json!({ "name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": { "name": mode.name() } }));
        events.push(json!({ "name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": { "sort_index": pid } }));
        for e in run.ranks[0]["timeline"].as_array().into_iter().flatten() {
            let mut e = e.clone();
            e["pid"] = json!(pid);
            events.push(e);
        }
    }
    json!({ "traceEvents": events, "otherData": { "settings": settings } })
}

#[cfg(test)]
mod tests {
    use super::overlap_of;

    #[test]
    fn the_overlap_is_the_share_of_the_window_inside_backward() {
        // Launched at 10 and 20 during backward (0..30), done at 25 and 50.
        assert_eq!(overlap_of((0.0, 30.0), &[(10.0, 25.0), (20.0, 50.0)]), (0.5, 20.0));
        // All after backward: none.
        assert_eq!(overlap_of((0.0, 30.0), &[(31.0, 40.0)]), (0.0, 10.0));
        // All inside: the whole window, nothing left.
        assert_eq!(overlap_of((0.0, 30.0), &[(5.0, 10.0)]), (1.0, 0.0));
        assert_eq!(overlap_of((0.0, 30.0), &[]), (0.0, 0.0));
    }
}
