//! Tensor-parallel training (Megatron's split) of a small classifier on a synthetic data
//! set, over CPU ranks that this program starts itself:
//!
//!     cargo run -p tch-distributed --example tp_train -- --world-size 2 --steps 30
//!
//! Every rank sees the same batches (tensor parallelism splits the model, not the data).
//! `parallelize_module` gives each rank its slice of rank 0's weights: fc1's outputs
//! (column-parallel, behind `copy_to_region`) and fc2's inputs (row-parallel, before
//! `reduce_from_region`, fc2's bias added once after it). Each rank also trains the whole
//! model on its own from the same weights, and at the end the slices, gathered, must
//! equal it.
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use dist::ParallelStyle::{Colwise, Rowwise};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser, Clone)]
#[command(about = "Tensor-parallel training on synthetic data over CPU ranks (Gloo)")]
struct Args {
    /// Ranks to split the model over (they must divide the hidden width, 64).
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Points per step (every rank sees all of them).
    #[arg(long, default_value_t = 64)]
    batch_size: i64,
}

const FEATURES: i64 = 32;
const HIDDEN: i64 = 64;
const CLASSES: i64 = 4;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.world_size == 0 || HIDDEN % args.world_size as i64 != 0 {
        eprintln!("error: --world-size must divide the hidden width {HIDDEN}, got {}", args.world_size);
        return ExitCode::from(2);
    }
    if dist::spawned_rank().is_none() {
        println!("starting {} ranks (Gloo, rendezvous on loopback)", args.world_size);
    }
    let ran = dist::SpawnOptions::new(args.world_size)
        .standalone()
        .and_then(|o| o.spawn(|rank| train(rank, &args)));
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The classifier in `vs`: fc1 (FEATURES → HIDDEN), ReLU, fc2 (HIDDEN → CLASSES).
fn classifier(vs: &nn::VarStore) {
    let _ = nn::linear(vs.root() / "fc1", FEATURES, HIDDEN, Default::default());
    let _ = nn::linear(vs.root() / "fc2", HIDDEN, CLASSES, Default::default());
}

/// Its forward from its variables; with `tp`, split as the plan split it.
fn forward(vs: &nn::VarStore, x: &Tensor, tp: Option<&Arc<dist::ProcessGroup>>) -> dist::Result<Tensor> {
    let w = vs.variables();
    let x = match tp {
        Some(group) => dist::copy_to_region(x, group)?,
        None => x.shallow_clone(),
    };
    let hidden = (x.matmul(&w["fc1.weight"].tr()) + &w["fc1.bias"]).relu();
    let partial = hidden.matmul(&w["fc2.weight"].tr());
    let summed = match tp {
        Some(group) => dist::reduce_from_region(&partial, group)?,
        None => partial,
    };
    Ok(summed + &w["fc2.bias"])
}

fn train(rank: usize, args: &Args) -> dist::Result<()> {
    let init = dist::InitOptions {
        world_size: Some(args.world_size),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let group = dist::default_group()?;

    // The same data on every rank: labels a fixed linear map decides.
    tch::manual_seed(0);
    let points = Tensor::randn([args.batch_size * 8, FEATURES], (Kind::Float, Device::Cpu));
    let labels =
        points.matmul(&Tensor::randn([FEATURES, CLASSES], (Kind::Float, Device::Cpu))).argmax(1, false);

    // Each rank draws its own weights; parallelize_module takes rank 0's slices.
    tch::manual_seed(rank as i64 + 1);
    let split = nn::VarStore::new(Device::Cpu);
    classifier(&split);
    dist::parallelize_module(&split, &group, &[("fc1", Colwise), ("fc2", Rowwise)])?;
    // The whole model from rank 0's weights, trained alongside for the comparison.
    tch::manual_seed(1);
    let whole = nn::VarStore::new(Device::Cpu);
    classifier(&whole);

    let mut opt_split = nn::Sgd::default().build(&split, 0.1)?;
    let mut opt_whole = nn::Sgd::default().build(&whole, 0.1)?;
    for step in 0..args.steps {
        let rows = (step as i64 * args.batch_size) % points.size()[0];
        let (x, y) = (points.narrow(0, rows, args.batch_size), labels.narrow(0, rows, args.batch_size));
        let loss = forward(&split, &x, Some(&group))?.cross_entropy_for_logits(&y);
        opt_split.backward_step(&loss);
        opt_whole.backward_step(&forward(&whole, &x, None)?.cross_entropy_for_logits(&y));
        if rank == 0 && step % 10 == 0 {
            println!("step {step}: loss {:.4}", loss.double_value(&[]));
        }
    }

    // fc1's slices gathered in rank order are the whole fc1.
    let (mine, full) = (split.variables(), whole.variables());
    let gathered = Tensor::cat(&group.all_gather_to_vec(&mine["fc1.weight"].detach())?, 0);
    let diff = (&gathered - &full["fc1.weight"]).abs().max().double_value(&[]);
    if diff > 1e-5 {
        let message = format!("rank {rank}: the gathered fc1 differs from the whole model's by {diff:.2e}");
        return Err(dist::DistError::new(dist::ErrorKind::Other, message));
    }
    if rank == 0 {
        println!(
            "{} ranks' slices equal the whole model after {} steps (max diff {diff:.1e})",
            args.world_size, args.steps
        );
    }
    dist::destroy_process_group()
}
