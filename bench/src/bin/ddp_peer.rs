//! A Rust rank that trains the lab's WideResNet under tch-distributed's
//! DistributedDataParallel in the same group as PyTorch ranks running
//! `bench/python/ddp_peer.py`: same model, same batches, same SGD steps, the same
//! lines printed. Every rank prints `start:` and `end:`, the sums of its parameters'
//! float32 bit patterns; in one job they must be identical on every rank.
//!
//!     export MASTER_ADDR=127.0.0.1 MASTER_PORT=29512 WORLD_SIZE=2
//!     RANK=0 target/release/ddp_peer & RANK=1 .venv/bin/python bench/python/ddp_peer.py; wait
//!
//! `--device cuda` (both sides): NCCL, one GPU per rank, `cuda:<LOCAL_RANK>` (LOCAL_RANK
//! defaults to RANK for ranks started by hand on one node).
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use labkit::{Norm, WideResNet, Widths};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser, Debug)]
#[command(
    about = "One rank of a DDP job that PyTorch ranks (bench/python/ddp_peer.py) may share: env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); Gloo on the CPU, or NCCL with --device cuda"
)]
struct Args {
    /// SGD steps.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Images per rank and step.
    #[arg(long, default_value_t = 4)]
    batch_size: i64,
    /// WideResNet widths: `narrow`, `lab`, or four channel counts.
    #[arg(long, default_value = "narrow")]
    widths: Widths,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// `cpu` (Gloo) or `cuda` (NCCL, one GPU per rank: `cuda:<LOCAL_RANK>`).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    device: String,
}

/// Where this rank computes: the CPU, or the GPU of its local rank (LOCAL_RANK, else
/// RANK: ranks started by hand on one node). An error names what is missing.
fn placement(device: &str) -> Result<Device, String> {
    if device == "cpu" {
        return Ok(Device::Cpu);
    }
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok());
    let local_rank = var(dist::LOCAL_RANK_ENV).or_else(|| var(dist::RANK_ENV)).unwrap_or(0);
    let gpus = tch::Cuda::device_count().max(0) as usize;
    if gpus == 0 {
        return Err(
            "--device cuda: libtorch sees no GPU on this machine; run with --device cpu (Gloo)".into()
        );
    }
    if local_rank >= gpus {
        return Err(format!(
            "--device cuda: local rank {local_rank}, but this node has {gpus} GPU(s) and NCCL needs one per rank: \
             start at most {gpus} rank(s) here (set LOCAL_RANK on each), or use --device cpu"
        ));
    }
    if std::env::var_os(dist::LOCAL_RANK_ENV).is_none() {
        // The default group binds to cuda:<LOCAL_RANK>, as init_process_group(device_id=…).
        std::env::set_var(dist::LOCAL_RANK_ENV, local_rank.to_string());
    }
    Ok(Device::Cuda(local_rank))
}

/// Rank `rank`'s batch: the numbers `ddp_peer.py`'s `batch` computes (on the CPU, then
/// moved, as there).
fn batch(rank: usize, size: i64, device: Device) -> (Tensor, Tensor) {
    let pixels = size * 28 * 28;
    let x = (Tensor::arange(pixels, (Kind::Float, Device::Cpu)) * 0.001 + rank as f64)
        .sin()
        .reshape([size, 1, 28, 28]);
    let y = (Tensor::arange(size, (Kind::Int64, Device::Cpu)) + rank as i64).remainder(10);
    (x.to_device(device), y.to_device(device))
}

/// The sum of the float32 bit patterns: any changed bit changes it.
fn bits(t: &Tensor) -> i64 {
    t.detach().contiguous().view_dtype(Kind::Int).to_kind(Kind::Int64).sum(Kind::Int64).int64_value(&[])
}

fn show_state(what: &str, params: &[(String, Tensor)]) {
    let all: Vec<String> = params.iter().map(|(_, t)| bits(t).to_string()).collect();
    println!("{what}: {}", all.join(" "));
}

fn run(args: &Args, device: Device) -> dist::Result<()> {
    let backend = if device.is_cuda() { dist::Backend::Nccl } else { dist::Backend::Gloo };
    dist::init_process_group(
        backend,
        dist::InitOptions { timeout: Duration::from_secs(args.timeout), ..Default::default() },
    )?;
    let rank = dist::get_rank()?;
    println!("rust rank {rank} of {} on {device:?}", dist::get_world_size()?);
    tch::set_num_threads(1);
    // A seed of its own: DDP's broadcast from rank 0 is what makes the replicas equal.
    tch::manual_seed(1000 + rank as i64);
    let vs = nn::VarStore::new(device);
    let model = WideResNet::new(&vs.root(), args.widths, Norm::BatchNorm);
    let ddp = dist::DistributedDataParallel::new(model, &vs, dist::DdpOptions::default())?;
    show_state("start", ddp.parameters());
    let mut opt = nn::Sgd::default().build(&vs, args.lr).expect("an SGD optimizer");
    let (x, y) = batch(rank, args.batch_size, device);
    for _ in 0..args.steps {
        opt.zero_grad();
        // Eval mode: no dropout, BatchNorm on its running statistics, so the job's
        // result does not depend on how the batch is split (see ddp_peer.py).
        let loss = ddp.try_forward_t(&x, false)?.cross_entropy_for_logits(&y);
        loss.backward();
        opt.step();
    }
    show_state("end", ddp.parameters());
    dist::destroy_process_group()?;
    println!("rust rank finished");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Its PyTorch peers check nothing: this rank must not either, or it would wait for
    // helper groups they never make.
    ddp_bench::common::check_collectives_as_pytorch();
    if args.steps == 0 || args.batch_size < 1 || args.lr <= 0.0 {
        eprintln!("error: --steps and --batch-size must be at least 1 and --lr positive");
        return ExitCode::from(2);
    }
    let device = match placement(&args.device) {
        Ok(device) => device,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&args, device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.kind() == dist::ErrorKind::InvalidArgument { 2 } else { 1 })
        }
    }
}
