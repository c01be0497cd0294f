//! A tour of the collectives over CPU ranks this program starts itself: each rank runs
//! every call of `torch.distributed` this crate has, prints what it got and checks it
//! against what the call promises.
//!
//!     cargo run -p tch-distributed --example collective_tour -- --world-size 3
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[derive(Parser)]
#[command(about = "Every collective once, checked, over CPU ranks (Gloo)")]
struct Args {
    /// Ranks to start (2 or more: point-to-point needs a partner).
    #[arg(long, default_value_t = 2)]
    world_size: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.world_size < 2 {
        eprintln!("error: --world-size must be at least 2, got {}", args.world_size);
        return ExitCode::from(2);
    }
    // The ranks' rendezvous on loopback at a free port (torchrun's --standalone): the
    // parent picks it and hands it down, since each rank re-runs main.
    let options = match dist::SpawnOptions::new(args.world_size).standalone() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match options.spawn(|rank| tour(rank, args.world_size)) {
        Ok(()) => {
            println!("all {} ranks got what every collective promises", args.world_size);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The values of a 1-D tensor, as integers (every tensor of the tour holds integers).
fn values(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).flatten(0, -1)).expect("a CPU tensor")
}

/// Prints one result and fails the rank when it is not the promised one.
fn expect(rank: usize, call: &str, got: Vec<i64>, want: Vec<i64>) -> dist::Result<()> {
    println!("rank {rank}: {call} = {got:?}");
    if got != want {
        let message = format!("rank {rank}: {call} gave {got:?}, expected {want:?}");
        return Err(dist::DistError::new(dist::ErrorKind::Other, message));
    }
    Ok(())
}

fn tour(rank: usize, world_size: usize) -> dist::Result<()> {
    let init = dist::InitOptions {
        world_size: Some(world_size),
        rank: Some(rank),
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let (r, n) = (rank as i64, world_size as i64);
    let ranks: Vec<i64> = (0..n).collect();
    let float = (Kind::Float, Device::Cpu);

    // all_reduce: every rank ends with the combination of all ranks' tensors.
    let mut t = Tensor::from_slice(&[r + 1, 10 * r]);
    dist::all_reduce(&mut t, dist::ReduceOp::Sum)?;
    expect(
        rank,
        "all_reduce(sum of [rank+1, 10*rank])",
        values(&t),
        vec![n * (n + 1) / 2, 10 * n * (n - 1) / 2],
    )?;
    let mut t = Tensor::from_slice(&[r]);
    dist::all_reduce(&mut t, dist::ReduceOp::Max)?;
    expect(rank, "all_reduce(max of rank)", values(&t), vec![n - 1])?;

    // The async form: the call returns a Work at once, wait() completes it.
    let mut t = Tensor::from_slice(&[1i64]);
    let work = dist::all_reduce_async(&mut t, dist::ReduceOp::Sum)?;
    work.wait()?;
    expect(rank, "all_reduce_async(1).wait()", values(&t), vec![n])?;

    // reduce: only the destination's tensor holds the result.
    let mut t = Tensor::from_slice(&[r + 1]);
    dist::reduce(&mut t, 0, dist::ReduceOp::Product)?;
    if rank == 0 {
        expect(rank, "reduce(product of rank+1) to rank 0", values(&t), vec![(1..=n).product()])?;
    }

    // broadcast: the source's tensor everywhere.
    let mut t = if rank == 0 {
        Tensor::from_slice(&[42i64, 7])
    } else {
        Tensor::zeros([2], (Kind::Int64, Device::Cpu))
    };
    dist::broadcast(&mut t, 0)?;
    expect(rank, "broadcast([42, 7]) from rank 0", values(&t), vec![42, 7])?;

    // all_gather: one output tensor per rank.
    let mut outputs: Vec<Tensor> = (0..n).map(|_| Tensor::zeros([1], float)).collect();
    dist::all_gather(&mut outputs, &Tensor::from_slice(&[r as f32 * 10.0]))?;
    let gathered = outputs.iter().flat_map(values).collect();
    expect(rank, "all_gather(10*rank)", gathered, ranks.iter().map(|x| x * 10).collect())?;

    // all_gather_into_tensor and reduce_scatter_tensor: FSDP's pair, over one flat tensor.
    let mut flat = Tensor::zeros([2 * n], float);
    dist::all_gather_into_tensor(&mut flat, &Tensor::from_slice(&[r as f32, -(r as f32)]))?;
    expect(
        rank,
        "all_gather_into_tensor([rank, -rank])",
        values(&flat),
        ranks.iter().flat_map(|&x| [x, -x]).collect(),
    )?;
    let mut mine = Tensor::zeros([1], float);
    // Every rank contributes [0, 1, ..., n-1]; rank i keeps the sum of element i.
    let contribution = Tensor::arange(n, float);
    dist::reduce_scatter_tensor(&mut mine, &contribution, dist::ReduceOp::Sum)?;
    expect(rank, "reduce_scatter_tensor(sum of [0..n])", values(&mine), vec![r * n])?;

    // send/recv around a ring, the blocking and the async form.
    let (next, prev) = ((rank + 1) % world_size, (rank + world_size - 1) % world_size);
    let mut got = Tensor::zeros([1], (Kind::Int64, Device::Cpu));
    let receiving = dist::irecv(&mut got, prev, 0)?;
    dist::isend(&Tensor::from_slice(&[r]), next, 0)?.wait()?;
    receiving.wait()?;
    expect(rank, "isend(rank) to the next rank, irecv from the previous", values(&got), vec![prev as i64])?;
    if rank == 0 {
        dist::send(&Tensor::from_slice(&[99i64]), 1, 1)?;
    } else if rank == 1 {
        let mut t = Tensor::zeros([1], (Kind::Int64, Device::Cpu));
        dist::recv(&mut t, 0, 1)?;
        expect(rank, "recv from rank 0", values(&t), vec![99])?;
    }

    // new_group: a group of the last two ranks; every rank calls it, members get it.
    let members = [world_size - 2, world_size - 1];
    match dist::new_group(Some(&members), None)? {
        Some(group) => {
            let mut t = Tensor::from_slice(&[r]);
            group.all_reduce(&mut t, dist::ReduceOp::Sum)?;
            let call = format!("all_reduce(sum of rank) in new_group({members:?})");
            expect(rank, &call, values(&t), vec![members.iter().sum::<usize>() as i64])?;
        }
        None => println!("rank {rank}: not in new_group({members:?})"),
    }

    dist::barrier()?;
    dist::destroy_process_group()
}
