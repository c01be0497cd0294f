//! Smoke run of the real c10d machinery: starts `--world-size` CPU ranks on this
//! machine, joins them in a Gloo group, and has each print what its collectives got.
//!
//!     cargo run -p tch-distributed --example hello_ranks -- --world-size 4
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::{Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser)]
#[command(about = "Start N CPU ranks that all-reduce, broadcast and all-gather through c10d (Gloo)")]
struct Args {
    /// Number of ranks (processes) to start.
    #[arg(long, default_value_t = 4)]
    world_size: usize,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.world_size == 0 || args.world_size > 64 {
        eprintln!("error: --world-size must be between 1 and 64, got {}", args.world_size);
        return ExitCode::from(2);
    }
    // One process per rank through dist::spawn: a failing rank stops the others, and no
    // rank outlives this process. Only the parent picks the port (the ranks re-run main).
    if dist::spawned_rank().is_none() {
        println!("starting {} ranks (Gloo, rendezvous on loopback)", args.world_size);
    }
    match dist::SpawnOptions::new(args.world_size)
        .standalone()
        .and_then(|o| o.spawn(|rank| rank_main(rank, &args)))
    {
        Ok(()) => {
            println!("all {} ranks agree", args.world_size);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rank_main(local_rank: usize, args: &Args) -> dist::Result<()> {
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::InitOptions {
            world_size: Some(args.world_size),
            rank: Some(local_rank),
            timeout: Duration::from_secs(args.timeout),
            ..Default::default()
        },
    )?;
    let rank = dist::get_rank()?;
    let world = dist::get_world_size()?;

    let mut sum = Tensor::from_slice(&[(rank + 1) as f32]);
    dist::all_reduce(&mut sum, dist::ReduceOp::Sum)?;
    let mut max = Tensor::from_slice(&[rank as i64]);
    dist::all_reduce(&mut max, dist::ReduceOp::Max)?;
    let mut message = if rank == 0 {
        Tensor::from_slice(&[42i64])
    } else {
        Tensor::zeros([1], (Kind::Int64, tch::Device::Cpu))
    };
    dist::broadcast(&mut message, 0)?;
    let gathered = dist::default_group()?.all_gather_to_vec(&Tensor::from_slice(&[rank as i64 * 10]))?;
    let gathered: Vec<i64> = gathered.iter().map(|t| t.int64_value(&[0])).collect();
    dist::barrier()?;

    let expected_sum = (world * (world + 1) / 2) as f64;
    let got_sum = sum.double_value(&[0]);
    println!(
        "rank {rank}/{world}: all_reduce(sum of rank+1) = {got_sum} (expect {expected_sum}), max rank = {}, broadcast from 0 = {}, all_gather(rank*10) = {gathered:?}",
        max.int64_value(&[0]),
        message.int64_value(&[0])
    );
    let expected_gather: Vec<i64> = (0..world as i64).map(|r| r * 10).collect();
    if got_sum != expected_sum
        || max.int64_value(&[0]) != world as i64 - 1
        || message.int64_value(&[0]) != 42
        || gathered != expected_gather
    {
        return Err(dist::DistError::new(dist::ErrorKind::Other, "collective results are wrong"));
    }
    dist::destroy_process_group()
}
