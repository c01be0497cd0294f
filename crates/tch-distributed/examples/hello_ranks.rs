//! Smoke run of the real c10d machinery: starts `--world-size` CPU ranks on this
//! machine, joins them in a Gloo group, and has each print what its collectives got.
//!
//!     cargo run -p tch-distributed --example hello_ranks -- --world-size 4
use std::net::TcpListener;
use std::process::{Child, Command, ExitCode};
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
    /// Internal: run as one rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
    #[arg(long, hide = true)]
    rank_process: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.world_size == 0 || args.world_size > 64 {
        eprintln!("error: --world-size must be between 1 and 64, got {}", args.world_size);
        return ExitCode::from(2);
    }
    if args.rank_process {
        return match rank_main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rank error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    launch(&args)
}

/// Starts one process per rank and waits; if one fails the rest are killed.
fn launch(args: &Args) -> ExitCode {
    let port =
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
    println!("starting {} ranks (Gloo, rendezvous 127.0.0.1:{port})", args.world_size);
    let exe = std::env::current_exe().expect("own path");
    let mut children: Vec<Child> = (0..args.world_size)
        .map(|rank| {
            Command::new(&exe)
                .args(["--rank-process", "--world-size", &args.world_size.to_string()])
                .args(["--timeout", &args.timeout.to_string()])
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", args.world_size.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
                .expect("start a rank")
        })
        .collect();
    let mut ok = true;
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        for (rank, child) in children.iter_mut().enumerate() {
            if done[rank] {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                done[rank] = true;
                if !status.success() {
                    eprintln!("rank {rank} failed ({status}); stopping the others");
                    ok = false;
                }
            }
        }
        if !ok {
            for (rank, child) in children.iter_mut().enumerate() {
                if !done[rank] {
                    let _ = child.kill();
                    let _ = child.wait();
                    done[rank] = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if ok {
        println!("all {} ranks agree", args.world_size);
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn rank_main(args: &Args) -> dist::Result<()> {
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::Init::Env,
        None,
        None,
        Duration::from_secs(args.timeout),
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
