//! Fully sharded data parallel (FSDP2's `fully_shard`) over CPU ranks this program
//! starts itself: each rank keeps 1/N of the parameters, gradients and optimizer state.
//!
//!     cargo run -p tch-distributed --example fsdp_train -- --world-size 2 --steps 20
//!
//! It trains a three-block classifier on synthetic data, prints what each rank holds,
//! and gathers the whole model on rank 0 at the end, as a checkpoint would.
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser)]
#[command(about = "FSDP training on synthetic data over CPU ranks (Gloo)")]
struct Args {
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    /// Training steps (one batch each).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Points per step on each rank.
    #[arg(long, default_value_t = 64)]
    batch_size: i64,
}

const FEATURES: i64 = 32;
const HIDDEN: i64 = 128;
const CLASSES: i64 = 4;

fn main() -> ExitCode {
    let args = Args::parse();
    // The ranks' rendezvous on loopback at a free port (torchrun's --standalone): the
    // parent picks it and hands it down, since each rank re-runs main.
    let options = match dist::SpawnOptions::new(args.world_size).standalone() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match options.spawn(|rank| train(rank, &args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn train(rank: usize, args: &Args) -> dist::Result<()> {
    let init = dist::InitOptions {
        world_size: Some(args.world_size),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let world_size = args.world_size as i64;

    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    // Made before the model; sync_module_states (on by default) starts every rank
    // from rank 0's weights.
    let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
    // Blocks first, each its own unit of all-gather and reduce-scatter, then the root.
    let block = |name: &str, inputs: i64| {
        let layer = nn::seq_t()
            .add(nn::linear(&root / name, inputs, HIDDEN, Default::default()))
            .add_fn(|x| x.relu());
        fsdp.fully_shard(layer, name)
    };
    let body = nn::seq_t().add(block("block1", FEATURES)?).add(block("block2", HIDDEN)?);
    let model =
        fsdp.fully_shard(body.add(nn::linear(&root / "head", HIDDEN, CLASSES, Default::default())), "")?;
    // The optimizer is built on this rank's shards, never on `vs`.
    let mut opt = nn::Adam::default().build(fsdp.shards()?, 1e-3)?;

    let memory = fsdp.memory()?;
    println!("rank {rank}: holds {} of the model's {} parameters", memory.shard_numel, memory.model_numel);
    if memory.shard_numel >= memory.model_numel && world_size > 1 {
        return Err(dist::DistError::new(dist::ErrorKind::Other, "the parameters are not sharded"));
    }

    // Each rank draws its own batches from the same labelling rule (the same seed for
    // the rule, a rank's own for the points).
    tch::manual_seed(0);
    let rule = Tensor::randn([FEATURES, CLASSES], (Kind::Float, Device::Cpu));
    tch::manual_seed(100 + rank as i64);
    let mut losses = Vec::new();
    for step in 0..args.steps {
        let points = Tensor::randn([args.batch_size, FEATURES], (Kind::Float, Device::Cpu));
        let labels = points.matmul(&rule).argmax(1, false);
        let loss = model.forward_t(&points, true).cross_entropy_for_logits(&labels);
        opt.backward_step(&loss); // gradients reduce-scattered and averaged in backward
        let mut mean = loss.detach();
        dist::all_reduce(&mut mean, dist::ReduceOp::Sum)?;
        losses.push(mean.double_value(&[]) / world_size as f64);
        if rank == 0 && (step % 5 == 0 || step + 1 == args.steps) {
            println!("step {step}: mean loss {:.4}", losses[step]);
        }
    }
    if losses.len() >= 4 {
        // The mean of the first and last quarters: single batches are noisy.
        let quarter = losses.len() / 4;
        let (early, late) = (mean(&losses[..quarter]), mean(&losses[losses.len() - quarter..]));
        if late >= early {
            let message = format!("the loss did not fall: {early:.4} early, {late:.4} late");
            return Err(dist::DistError::new(dist::ErrorKind::Other, message));
        }
    }

    // A checkpoint: every rank takes part, rank 0 receives the whole model.
    match fsdp.full_state_dict()? {
        Some(state) => {
            let numel: i64 = state.iter().map(|(_, t)| t.numel() as i64).sum();
            if numel != memory.model_numel {
                let message =
                    format!("the gathered model has {numel} parameters, not {}", memory.model_numel);
                return Err(dist::DistError::new(dist::ErrorKind::Other, message));
            }
            println!("rank {rank}: gathered the full model, {} tensors, {numel} parameters", state.len());
        }
        None if rank == 0 => {
            return Err(dist::DistError::new(dist::ErrorKind::Other, "rank 0 received no state dict"))
        }
        None => {}
    }
    dist::destroy_process_group()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}
