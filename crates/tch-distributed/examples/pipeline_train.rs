//! Pipeline parallelism with GPipe's schedule: a classifier cut into one stage per rank,
//! over CPU ranks this program starts itself.
//!
//!     cargo run -p tch-distributed --example pipeline_train -- --stages 2 --micro-batches 4
//!
//! The first stage reads the points, the last the labels; activations travel forward
//! and their gradients back with send/recv. The last stage prints the loss and the
//! bubble, the share of the step it waited.
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser)]
#[command(about = "A model cut into pipeline stages, one per CPU rank (Gloo)")]
struct Args {
    /// Stages, one rank each (2 or more).
    #[arg(long, default_value_t = 2)]
    stages: usize,
    /// Micro-batches each batch is split into.
    #[arg(long, default_value_t = 4)]
    micro_batches: usize,
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Points per batch (a multiple of --micro-batches).
    #[arg(long, default_value_t = 64)]
    batch_size: i64,
}

const FEATURES: i64 = 32;
const HIDDEN: i64 = 64;
const CLASSES: i64 = 4;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.stages < 2 {
        eprintln!("error: --stages must be at least 2, got {}", args.stages);
        return ExitCode::from(2);
    }
    // The ranks' rendezvous on loopback at a free port (torchrun's --standalone): the
    // parent picks it and hands it down, since each rank re-runs main.
    let options = match dist::SpawnOptions::new(args.stages).standalone() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match options.spawn(|rank| run_stage(rank, &args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_stage(rank: usize, args: &Args) -> dist::Result<()> {
    let init = dist::InitOptions {
        world_size: Some(args.stages),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let (first, last) = (rank == 0, rank + 1 == args.stages);

    // This rank's part of the model only: its own parameters and optimizer state.
    let vs = nn::VarStore::new(Device::Cpu);
    let inputs = if first { FEATURES } else { HIDDEN };
    let stage = if last {
        nn::seq_t().add(nn::linear(vs.root() / "head", inputs, CLASSES, Default::default()))
    } else {
        nn::seq_t().add(nn::linear(vs.root() / "fc", inputs, HIDDEN, Default::default())).add_fn(|x| x.relu())
    };
    let pipeline = dist::Pipeline::new(stage, dist::default_group()?, args.micro_batches)?;
    let mut opt = nn::Adam::default().build(&vs, 1e-2)?;

    // Every stage draws the same batches (one seed); the first reads the points, the
    // last the labels, the others neither.
    tch::manual_seed(0);
    let rule = Tensor::randn([FEATURES, CLASSES], (Kind::Float, Device::Cpu));
    let mut losses = Vec::new();
    for step in 0..args.steps {
        let points = Tensor::randn([args.batch_size, FEATURES], (Kind::Float, Device::Cpu));
        let labels = points.matmul(&rule).argmax(1, false);
        opt.zero_grad();
        let result = pipeline.train_step(&points, &labels, |logits, y| logits.cross_entropy_for_logits(y))?;
        opt.step();
        if let Some(loss) = result.loss {
            losses.push(loss);
            if step % 10 == 0 || step + 1 == args.steps {
                println!(
                    "step {step}: loss {loss:.4}, bubble {:.0}% (GPipe's ideal {:.0}%)",
                    100.0 * result.bubble(),
                    100.0 * result.ideal_bubble()
                );
            }
        }
    }
    if last && losses.len() >= 4 {
        // The mean of the first and last quarters: single batches are noisy.
        let quarter = losses.len() / 4;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (early, late) = (mean(&losses[..quarter]), mean(&losses[losses.len() - quarter..]));
        if late >= early {
            let message = format!("the loss did not fall: {early:.4} early, {late:.4} late");
            return Err(dist::DistError::new(dist::ErrorKind::Other, message));
        }
        println!("{} stages trained: loss {early:.4} early, {late:.4} late", args.stages);
    }
    dist::destroy_process_group()
}
