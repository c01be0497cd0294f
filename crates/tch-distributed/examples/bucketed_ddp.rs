//! DDP written by hand, as PyTorch's does it, over CPU ranks that this program starts
//! itself: gradients in buckets, each bucket's all-reduce launched from a gradient hook
//! as soon as its last gradient is accumulated, while backward goes on.
//!
//!     cargo run -p tch-distributed --example bucketed_ddp -- --world-size 2 --bucket-cap-kb 8
//!
//! - the parameters are broadcast from rank 0 (DDP's constructor does the same);
//! - they are put in buckets of at most `--bucket-cap-kb` in reverse order (backward
//!   produces the last layer's gradients first);
//! - a post-accumulate-grad hook on each parameter counts the bucket's gradients down
//!   and, at zero, flattens them into one tensor and starts its `all_reduce_async`;
//! - after backward, every bucket's `Work` is waited for, the sums divided by the world
//!   size and copied back into the `.grad`s, and only then does the optimizer step.
//!
//! Every rank also trains one model on the whole batch (every rank's rows) from the same
//! weights, and checks the averaged gradients and the weights against it at every step.
//! The timeline (`dist::spans`) shows the overlap: the first bucket's all-reduce starts
//! before backward returns.
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;
use tch_distributed::spans::{self, Lane};

#[derive(Parser, Clone)]
#[command(about = "A hand-written bucketed DDP on synthetic data over CPU ranks (Gloo)")]
pub struct Args {
    /// Ranks to start.
    #[arg(long, default_value_t = 2)]
    pub world_size: usize,
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Points per step on each rank.
    #[arg(long, default_value_t = 32)]
    pub batch_size: i64,
    /// A bucket's size in KiB of gradients (PyTorch's bucket_cap_mb, smaller to fit
    /// this small model several times).
    #[arg(long, default_value_t = 8)]
    pub bucket_cap_kb: usize,
}

const FEATURES: i64 = 32;
const HIDDEN: i64 = 64;
const CLASSES: i64 = 4;
/// The layers, first to last; each has a weight and a bias (PyTorch's parameter order).
const LAYERS: [&str; 3] = ["fc1", "fc2", "fc3"];
/// What one process on the whole batch and the ranks may differ by: float32 sums in
/// another order (measured ~1e-7 here).
pub const TOLERANCE: f64 = 1e-5;

fn main() -> ExitCode {
    let args = Args::parse();
    let sizes = [
        ("--world-size", args.world_size as i64),
        ("--steps", args.steps as i64),
        ("--batch-size", args.batch_size),
        ("--bucket-cap-kb", args.bucket_cap_kb as i64),
    ];
    if let Some((name, value)) = sizes.iter().find(|(_, value)| *value < 1) {
        eprintln!("error: {name} must be at least 1, got {value}");
        return ExitCode::from(2);
    }
    if dist::spawned_rank().is_none() {
        println!("starting {} ranks (Gloo, rendezvous on loopback)", args.world_size);
    }
    let ran = dist::SpawnOptions::new(args.world_size).standalone().and_then(|o| {
        o.spawn(|rank| {
            let report = train(rank, &args)?;
            if rank == 0 {
                report.print(&args);
            }
            report.check()
        })
    });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One bucket: its parameters, how many of their gradients this backward still owes,
/// and its all-reduce once launched.
struct Bucket {
    params: Vec<Tensor>,
    pending: usize,
    in_flight: Option<(Tensor, dist::Work)>,
}

/// What the hooks share: the buckets, and when each was launched.
struct Buckets {
    group: Arc<dist::ProcessGroup>,
    buckets: Vec<Bucket>,
    /// Gradients accumulated so far in this backward.
    ready: usize,
    /// (bucket, gradients ready when it was launched), in launch order.
    launches: Vec<(usize, usize)>,
}

impl Buckets {
    /// One more gradient of bucket `index` is accumulated; launches the bucket if that was
    /// its last.
    fn gradient_ready(&mut self, index: usize) -> dist::Result<()> {
        self.ready += 1;
        let bucket = &mut self.buckets[index];
        if bucket.pending == 0 {
            let message = format!("bucket {index} got its gradients twice: call finish_gradient_synchronization after every backward");
            return Err(dist::DistError::new(dist::ErrorKind::Other, message));
        }
        bucket.pending -= 1;
        if bucket.pending == 0 {
            let grads: Vec<Tensor> = bucket.params.iter().map(Tensor::grad).collect();
            let mut flat = Tensor::flatten_dense_tensors(&grads);
            let work = self.group.all_reduce_async(&mut flat, dist::ReduceOp::Sum)?;
            bucket.in_flight = Some((flat, work));
            self.launches.push((index, self.ready));
        }
        Ok(())
    }
}

/// The hand-written DDP: the buckets and the hooks that fill them.
pub struct BucketedDdp {
    state: Arc<Mutex<Buckets>>,
    _hooks: Vec<dist::RemovableHandle>,
}

impl BucketedDdp {
    /// Broadcasts `params` from rank 0 and hooks them, in buckets of at most `cap_bytes`
    /// in reverse order.
    pub fn new(group: Arc<dist::ProcessGroup>, params: &[Tensor], cap_bytes: usize) -> dist::Result<Self> {
        for p in params {
            // In place, without autograd recording the write to a leaf.
            let mut data = p.detach();
            group.broadcast(&mut data, 0)?;
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut bucket_of = vec![0; params.len()];
        let mut bytes = 0;
        for (i, p) in params.iter().enumerate().rev() {
            let size = p.numel() * p.kind().elt_size_in_bytes();
            if buckets.is_empty() || bytes + size > cap_bytes {
                buckets.push(Bucket { params: Vec::new(), pending: 0, in_flight: None });
                bytes = 0;
            }
            bytes += size;
            let last = buckets.len() - 1;
            buckets[last].params.push(p.shallow_clone());
            buckets[last].pending += 1;
            bucket_of[i] = last;
        }
        let state = Arc::new(Mutex::new(Buckets { group, buckets, ready: 0, launches: Vec::new() }));
        let mut hooks = Vec::new();
        for (p, &bucket) in params.iter().zip(&bucket_of) {
            let state = state.clone();
            hooks.push(dist::register_post_accumulate_grad_hook(p, move |_param| {
                state.lock().unwrap_or_else(PoisonError::into_inner).gradient_ready(bucket)
            })?);
        }
        Ok(Self { state, _hooks: hooks })
    }

    /// How many buckets the parameters make.
    pub fn bucket_count(&self) -> usize {
        self.lock().buckets.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After backward: waits for every bucket, averages it into the `.grad`s, and makes
    /// the buckets ready for the next backward. Returns the launches: (bucket,
    /// gradients ready by then), in order.
    pub fn finish_gradient_synchronization(&self) -> dist::Result<Vec<(usize, usize)>> {
        let mut state = self.lock();
        let world = state.group.world_size() as f64;
        for (i, bucket) in state.buckets.iter_mut().enumerate() {
            let Some((mut flat, work)) = bucket.in_flight.take() else {
                let message = format!(
                    "bucket {i} was never reduced: {} of its parameters got no gradient in this backward (an unused parameter; PyTorch's DDP needs find_unused_parameters=True for it)",
                    bucket.pending
                );
                return Err(dist::DistError::new(dist::ErrorKind::Other, message));
            };
            work.wait()?;
            flat /= world;
            let grads: Vec<Tensor> = bucket.params.iter().map(Tensor::grad).collect();
            for (mut grad, averaged) in
                grads.into_iter().zip(Tensor::unflatten_dense_tensors(&flat, &bucket.params))
            {
                grad.copy_(&averaged);
            }
            bucket.pending = bucket.params.len();
        }
        state.ready = 0;
        Ok(std::mem::take(&mut state.launches))
    }
}

/// The model's parameters in PyTorch's order (fc1.weight, fc1.bias, fc2.weight, ...).
fn mlp(vs: &nn::VarStore) -> Vec<Tensor> {
    let mut inputs = FEATURES;
    for (i, name) in LAYERS.iter().enumerate() {
        let outputs = if i + 1 == LAYERS.len() { CLASSES } else { HIDDEN };
        let _ = nn::linear(vs.root() / *name, inputs, outputs, Default::default());
        inputs = outputs;
    }
    let vars = vs.variables();
    LAYERS
        .iter()
        .flat_map(|l| ["weight", "bias"].map(|p| vars[&format!("{l}.{p}")].shallow_clone()))
        .collect()
}

fn forward(params: &[Tensor], x: &Tensor) -> Tensor {
    let mut h = x.shallow_clone();
    for (i, layer) in params.chunks(2).enumerate() {
        h = h.matmul(&layer[0].tr()) + &layer[1];
        if i + 1 < params.len() / 2 {
            h = h.relu();
        }
    }
    h
}

fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

/// One step's first all-reduce and backward on the timeline (µs since the Unix epoch):
/// the collective's span runs from its launch to the return of its `wait()`.
pub struct Overlap {
    pub all_reduce_start: f64,
    pub all_reduce_waited: f64,
    pub backward_end: f64,
}

impl Overlap {
    /// Launched during backward and waited for after it: in flight while backward went
    /// on (a program that waits right after each launch has it end before backward's end).
    pub fn overlapped(&self) -> bool {
        self.all_reduce_start < self.backward_end && self.backward_end <= self.all_reduce_waited
    }
}

/// What a run showed.
pub struct Report {
    pub buckets: usize,
    pub params: usize,
    /// Per step: the launches (bucket, gradients ready when it started).
    pub launches: Vec<Vec<(usize, usize)>>,
    /// Per step, from the timeline: when the first bucket's all-reduce was in flight.
    pub overlap: Vec<Overlap>,
    /// The largest difference from one process on the whole batch: averaged gradients
    /// (over every step) and weights (after the last).
    pub max_grad_diff: f64,
    pub max_param_diff: f64,
}

impl Report {
    fn print(&self, args: &Args) {
        let first = &self.launches[0];
        println!(
            "{} parameters in {} bucket{} of at most {} KiB; bucket 0's all-reduce started with {} of {} gradients ready",
            self.params,
            self.buckets,
            if self.buckets == 1 { "" } else { "s" },
            args.bucket_cap_kb,
            first.first().map_or(0, |l| l.1),
            self.params
        );
        let overlapped = self.overlap.iter().filter(|o| o.overlapped()).count();
        println!(
            "overlap: the first all-reduce was in flight while backward went on in {overlapped} of {} steps",
            self.launches.len()
        );
        println!(
            "{} ranks equal one process on the whole batch after {} steps: max |diff| {:.1e} (gradients), {:.1e} (weights)",
            args.world_size,
            self.launches.len(),
            self.max_grad_diff,
            self.max_param_diff
        );
    }

    fn check(&self) -> dist::Result<()> {
        let worst = self.max_grad_diff.max(self.max_param_diff);
        if worst > TOLERANCE {
            let message = format!("the ranks differ from one process on the whole batch by {worst:.2e} (more than {TOLERANCE:.0e})");
            return Err(dist::DistError::new(dist::ErrorKind::Other, message));
        }
        Ok(())
    }
}

/// One rank's run (also what tests/grad_hooks.rs runs on its ranks).
pub fn train(rank: usize, args: &Args) -> dist::Result<Report> {
    let init = dist::InitOptions {
        world_size: Some(args.world_size),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let group = dist::default_group()?;
    spans::start();

    // Every rank draws the whole batch; rank r trains on its rows, the reference on all.
    tch::manual_seed(0);
    let total = args.batch_size * args.world_size as i64;
    let points = Tensor::randn([total * args.steps as i64, FEATURES], (Kind::Float, Device::Cpu));
    let labels =
        points.matmul(&Tensor::randn([FEATURES, CLASSES], (Kind::Float, Device::Cpu))).argmax(1, false);

    // Each rank draws its own weights: the broadcast makes them rank 0's.
    tch::manual_seed(rank as i64 + 1);
    let vs = nn::VarStore::new(Device::Cpu);
    let params = mlp(&vs);
    let ddp = BucketedDdp::new(group.clone(), &params, args.bucket_cap_kb * 1024)?;
    let mut reference_vs = nn::VarStore::new(Device::Cpu);
    let reference = mlp(&reference_vs);
    reference_vs.copy(&vs)?;

    let mut opt = nn::Sgd { momentum: 0.9, ..Default::default() }.build(&vs, 0.05)?;
    let mut reference_opt = nn::Sgd { momentum: 0.9, ..Default::default() }.build(&reference_vs, 0.05)?;
    let mut report = Report {
        buckets: ddp.bucket_count(),
        params: params.len(),
        launches: Vec::new(),
        overlap: Vec::new(),
        max_grad_diff: 0.0,
        max_param_diff: 0.0,
    };
    for step in 0..args.steps as i64 {
        let (x, y) = (points.narrow(0, step * total, total), labels.narrow(0, step * total, total));
        let rows = args.batch_size;
        let (mine_x, mine_y) = (x.narrow(0, rank as i64 * rows, rows), y.narrow(0, rank as i64 * rows, rows));

        opt.zero_grad();
        let loss = forward(&params, &mine_x).cross_entropy_for_logits(&mine_y);
        let backward = spans::span("backward", "compute", Lane::Compute);
        loss.f_backward()?; // the hooks launch the buckets' all-reduces in here
        backward.end();
        report.launches.push(ddp.finish_gradient_synchronization()?);
        opt.step();

        reference_opt.zero_grad();
        forward(&reference, &x).cross_entropy_for_logits(&y).f_backward()?;
        let grads: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
        let reference_grads: Vec<Tensor> = reference.iter().map(Tensor::grad).collect();
        report.max_grad_diff = report.max_grad_diff.max(max_diff(&grads, &reference_grads));
        reference_opt.step();

        let events = spans::take();
        let backward_end =
            events.iter().find(|e| e.name == "backward").map(|e| e.start_us + e.dur_us.unwrap_or(0.0));
        let first_all_reduce =
            events.iter().filter(|e| e.name == "all_reduce").min_by(|a, b| a.start_us.total_cmp(&b.start_us));
        if let (Some(all_reduce), Some(backward_end)) = (first_all_reduce, backward_end) {
            report.overlap.push(Overlap {
                all_reduce_start: all_reduce.start_us,
                all_reduce_waited: all_reduce.start_us + all_reduce.dur_us.unwrap_or(0.0),
                backward_end,
            });
        }
    }
    report.max_param_diff = max_diff(&params, &reference);
    spans::stop();
    dist::destroy_process_group()?;
    Ok(report)
}
