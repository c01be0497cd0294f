//! Data-parallel training (DDP) of a small classifier on a synthetic data set, over CPU
//! ranks that this program starts itself; the README walks through the same program.
//!
//!     cargo run -p tch-distributed --example ddp_train -- --world-size 2 --epochs 5
//!     torchrun --no-python --nproc-per-node 2 target/debug/examples/ddp_train
//!
//! Each rank trains on its own part of every epoch (DistributedSampler), DDP averages
//! the gradients, and at the end the ranks check that their replicas are identical.
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser, Clone)]
#[command(about = "DDP training on synthetic data over CPU ranks (Gloo)")]
struct Args {
    /// Ranks to start when not launched by torchrun.
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    /// Points in the synthetic data set (all ranks together).
    #[arg(long, default_value_t = 4096)]
    samples: usize,
    /// Points per step on each rank.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

/// Features per point and classes of the synthetic data set.
const FEATURES: i64 = 32;
const CLASSES: i64 = 4;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match dist::LaunchEnv::from_env() {
        // torchrun started this process as one of its ranks.
        Ok(Some(launch)) => train(launch.rank, launch.world_size, &args),
        Ok(None) => start_ranks(&args),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `torch.multiprocessing.spawn`: the binary runs again once per rank. Each child re-runs
/// `main`, so only the parent's choice of port counts, handed down in the environment.
fn start_ranks(args: &Args) -> dist::Result<()> {
    if dist::spawned_rank().is_none() {
        println!("starting {} ranks (Gloo, rendezvous on loopback)", args.world_size);
    }
    dist::SpawnOptions::new(args.world_size).standalone()?.spawn(|rank| train(rank, args.world_size, args))
}

fn train(rank: usize, world_size: usize, args: &Args) -> dist::Result<()> {
    let init = dist::InitOptions {
        world_size: Some(world_size),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;

    // The same data set on every rank (same seed): labels a fixed linear map decides.
    tch::manual_seed(0);
    let points = Tensor::randn([args.samples as i64, FEATURES], (Kind::Float, Device::Cpu));
    let labels =
        points.matmul(&Tensor::randn([FEATURES, CLASSES], (Kind::Float, Device::Cpu))).argmax(1, false);

    // Ranks may start from different weights: DDP broadcasts rank 0's when it wraps.
    tch::manual_seed(rank as i64 + 1);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = nn::seq_t()
        .add(nn::linear(vs.root() / "fc1", FEATURES, 64, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs.root() / "fc2", 64, CLASSES, Default::default()));
    let model = dist::DistributedDataParallel::new(net, &vs, dist::DdpOptions::default())?;
    let mut opt = nn::Sgd::default().build(&vs, 0.1)?;

    let mut sampler =
        dist::DistributedSampler::new(args.samples, world_size, rank, dist::SamplerOptions::default())?;
    let mut mean_losses = Vec::new();
    for epoch in 0..args.epochs {
        sampler.set_epoch(epoch); // a new shuffle each epoch, the same on every rank
        let (mut loss_sum, mut steps) = (0.0, 0.0);
        let indices: Vec<i64> = sampler.indices().iter().map(|&i| i as i64).collect();
        for batch in indices.chunks(args.batch_size) {
            let batch = Tensor::from_slice(batch);
            let logits = model.forward_t(&points.index_select(0, &batch), true);
            let loss = logits.cross_entropy_for_logits(&labels.index_select(0, &batch));
            opt.backward_step(&loss); // backward all-reduces (averages) the gradients
            loss_sum += loss.double_value(&[]);
            steps += 1.0;
        }
        // Each rank saw a part of the epoch: sum the parts to report the whole.
        let mut totals = Tensor::from_slice(&[loss_sum, steps]);
        dist::all_reduce(&mut totals, dist::ReduceOp::Sum)?;
        let mean = totals.double_value(&[0]) / totals.double_value(&[1]);
        mean_losses.push(mean);
        if rank == 0 {
            println!("epoch {epoch}: mean loss {mean:.4}");
        }
    }

    // Every rank's replica must be the same model: compare them all on every rank.
    let flat = Tensor::cat(&vs.trainable_variables().iter().map(|p| p.flatten(0, -1)).collect::<Vec<_>>(), 0);
    let replicas = dist::default_group()?.all_gather_to_vec(&flat.detach())?;
    if replicas.iter().any(|r| !r.equal(&replicas[0])) {
        return Err(dist::DistError::new(dist::ErrorKind::Other, "the replicas differ after training"));
    }
    if let (Some(first), Some(last)) = (mean_losses.first(), mean_losses.last()) {
        if mean_losses.len() > 1 && last >= first {
            let message =
                format!("the loss did not fall: {first:.4} in the first epoch, {last:.4} in the last");
            return Err(dist::DistError::new(dist::ErrorKind::Other, message));
        }
    }
    if rank == 0 {
        println!("{world_size} replicas identical after {} epochs", args.epochs);
    }
    dist::destroy_process_group()
}
