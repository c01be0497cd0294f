//! One program, two launchers, the way the lab's `main` ends up:
//!
//!     cargo run -p tch-distributed --example spawn_ranks -- --nprocs 3
//!     torchrun --no-python --nproc-per-node 2 target/debug/examples/spawn_ranks
//!
//! Started on its own, it starts its ranks with `dist::spawn`; started by torchrun,
//! the ranks already exist and `LaunchEnv` says which one this is. Each rank joins a
//! Gloo group and all-reduces. `--hold-secs` keeps the ranks busy afterwards, to try
//! Ctrl-C or `kill` by hand.
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::Tensor;
use tch_distributed as dist;

#[derive(Parser)]
#[command(about = "Start N CPU ranks with dist::spawn (or under torchrun) that all-reduce through Gloo")]
struct Args {
    /// Ranks to start when not launched by torchrun.
    #[arg(long, default_value_t = 2)]
    nprocs: usize,
    /// Seconds before a missing rank is an error.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Seconds each rank waits after its all-reduce.
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
    /// This local rank fails (exits with 3) instead of joining: watch the others stop.
    #[arg(long)]
    fail_rank: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match dist::LaunchEnv::from_env() {
        // torchrun started this process as one rank and set the rendezvous variables.
        Ok(Some(launch)) => worker(launch.local_rank, launch.rank, launch.world_size, &args),
        Ok(None) => {
            // Every child re-runs main, so a port chosen there would differ in each of
            // them: `standalone` lets only the parent's choice count, handed down in the
            // environment.
            if dist::spawned_rank().is_none() {
                println!("starting {} ranks (Gloo, rendezvous on loopback)", args.nprocs);
            }
            dist::SpawnOptions::new(args.nprocs).standalone().and_then(|options| {
                options.spawn(|local_rank| worker(local_rank, local_rank, args.nprocs, &args))
            })
        }
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

fn worker(local_rank: usize, rank: usize, world_size: usize, args: &Args) -> dist::Result<()> {
    if args.fail_rank == Some(local_rank) {
        eprintln!("rank {rank}: failing on purpose");
        std::process::exit(3);
    }
    let timeout = Duration::from_secs(args.timeout);
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::InitOptions { world_size: Some(world_size), rank: Some(rank), timeout, ..Default::default() },
    )?;
    let mut t = Tensor::from_slice(&[rank as f32 + 1.0]);
    dist::all_reduce(&mut t, dist::ReduceOp::Sum)?;
    println!(
        "rank {rank}/{world_size} (local rank {local_rank}, pid {}): sum of rank+1 = {} (expect {})",
        std::process::id(),
        t.double_value(&[0]),
        world_size * (world_size + 1) / 2
    );
    std::thread::sleep(Duration::from_secs(args.hold_secs));
    dist::destroy_process_group()
}
