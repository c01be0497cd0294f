//! Collectives across real processes on loopback (CPU, Gloo): 2, 3 and 4 ranks; every
//! collective and reduce op; f32, f64, i64; 1 element to 64 MB; env:// and explicit
//! init; default-group lifecycle; async work handles; the tensor forms FSDP uses
//! (`all_gather_into_tensor`, `reduce_scatter_tensor`) and point-to-point `send`/`recv`.
mod common;

use std::time::{Duration, Instant};

use common::*;
use dist::{Backend, ErrorKind, Init, ReduceOp};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(60);

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[
        ("collectives", collectives_scenario),
        ("sizes", sizes_scenario),
        ("explicit_init", explicit_init_scenario),
        ("lifecycle", lifecycle_scenario),
        ("async", async_scenario),
        ("tensor_forms", tensor_forms_scenario),
        ("point_to_point", point_to_point_scenario),
    ]);
}

fn init_env() {
    common::init_env(TIMEOUT);
}

/// The value rank `r` contributes at element `i`: small integers, so every op is exact
/// in every dtype (products stay far below 2^24).
fn contribution(r: i64, i: i64) -> i64 {
    1 + (r + i) % 3
}

fn input(kind: Kind, rank: i64, n: i64) -> Tensor {
    let values: Vec<i64> = (0..n).map(|i| contribution(rank, i)).collect();
    Tensor::from_slice(&values).to_kind(kind)
}

fn expected(op: ReduceOp, world: i64, n: i64) -> Vec<i64> {
    (0..n)
        .map(|i| {
            let vals = (0..world).map(|r| contribution(r, i));
            match op {
                ReduceOp::Sum => vals.sum(),
                ReduceOp::Product => vals.product(),
                ReduceOp::Min => vals.min().unwrap(),
                ReduceOp::Max => vals.max().unwrap(),
                ReduceOp::Avg => unreachable!(),
            }
        })
        .collect()
}

fn as_i64(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64)).unwrap()
}

fn collectives_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    assert_eq!(rank as usize, test_rank());
    assert_eq!(world as usize, env_usize(dist::WORLD_SIZE_ENV));
    assert_eq!(dist::get_backend().unwrap(), Backend::Gloo);
    let n = 37;
    for kind in [Kind::Float, Kind::Double, Kind::Int64] {
        for op in [ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max] {
            let mut t = input(kind, rank, n);
            dist::all_reduce(&mut t, op).unwrap();
            assert_eq!(t.kind(), kind);
            assert_eq!(as_i64(&t), expected(op, world, n), "all_reduce {op:?} {kind:?}");

            // reduce: only the destination is guaranteed the result (as in PyTorch).
            let dst = (world - 1) as usize;
            let mut t = input(kind, rank, n);
            dist::reduce(&mut t, dst, op).unwrap();
            if rank as usize == dst {
                assert_eq!(as_i64(&t), expected(op, world, n), "reduce {op:?} {kind:?} to {dst}");
            }
        }
        // broadcast from a non-zero source when there is one.
        let src = (1 % world) as usize;
        let mut t = input(kind, rank, n);
        dist::broadcast(&mut t, src).unwrap();
        assert_eq!(as_i64(&t), as_i64(&input(kind, src as i64, n)), "broadcast {kind:?} from {src}");

        let mut outs: Vec<Tensor> = (0..world).map(|_| Tensor::zeros([n], (kind, Device::Cpu))).collect();
        dist::all_gather(&mut outs, &input(kind, rank, n)).unwrap();
        for (r, out) in outs.iter().enumerate() {
            assert_eq!(as_i64(out), as_i64(&input(kind, r as i64, n)), "all_gather {kind:?} slot {r}");
        }
    }
    // Gloo has no AVG (neither has PyTorch's): a clear error, not a crash.
    let mut t = input(Kind::Float, rank, 4);
    let e = dist::all_reduce(&mut t, ReduceOp::Avg).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("Sum, then divide by the world size"), "{e}");
    // Argument errors are caught before any collective is started.
    let e = dist::broadcast(&mut t, world as usize).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains(&format!("source rank {world} does not exist")), "{e}");
    let mut wrong = vec![t.zeros_like()];
    if world > 1 {
        assert_eq!(dist::all_gather(&mut wrong, &t).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    let mut strided = Tensor::zeros([4, 4], (Kind::Float, Device::Cpu)).transpose(0, 1);
    let e = dist::all_reduce(&mut strided, ReduceOp::Sum).unwrap_err();
    assert!(e.message().contains("not contiguous"), "{e}");
    // The group still works after rejected calls.
    dist::barrier().unwrap();
    dist::destroy_process_group().unwrap();
}

/// 1 element up to 64 MB (16 Mi f32) per rank.
fn sizes_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    for n in [1i64, 3, 1000, 1 << 18, 1 << 20, 1 << 22, 1 << 24] {
        // Element i of rank r: r * 1000 + i % 1000, exact in f32.
        let base = Tensor::arange(n, (Kind::Float, Device::Cpu)).fmod(1000.0);
        let mut t = &base + (rank * 1000) as f64;
        dist::all_reduce(&mut t, ReduceOp::Sum).unwrap();
        let offset: i64 = (0..world).map(|r| r * 1000).sum();
        let want = base * world as f64 + offset as f64;
        let diff = (&t - &want).abs().max().double_value(&[]);
        assert_eq!(diff, 0.0, "all_reduce of {n} f32 elements");
        let mut b = if rank == 0 {
            Tensor::ones([n], (Kind::Float, Device::Cpu))
        } else {
            Tensor::zeros([n], (Kind::Float, Device::Cpu))
        };
        dist::broadcast(&mut b, 0).unwrap();
        assert_eq!(b.sum(Kind::Double).double_value(&[]), n as f64, "broadcast of {n} elements");
    }
    dist::destroy_process_group().unwrap();
}

/// tcp://host:port with explicit world size and rank: no MASTER_* / RANK / WORLD_SIZE set.
fn explicit_init_scenario() {
    for var in [dist::MASTER_ADDR_ENV, dist::MASTER_PORT_ENV, dist::RANK_ENV, dist::WORLD_SIZE_ENV] {
        assert!(std::env::var(var).is_err(), "{var} must not be set in this scenario");
    }
    let init: Init = std::env::var("TCHD_INIT_URL").unwrap().parse().unwrap();
    let world = env_usize("TCHD_WORLD");
    let rank = test_rank();
    dist::init_process_group(
        Backend::Gloo,
        dist::InitOptions { init_method: init, world_size: Some(world), rank: Some(rank), timeout: TIMEOUT },
    )
    .unwrap();
    assert_eq!(dist::get_rank().unwrap(), rank);
    let mut t = Tensor::from_slice(&[rank as f64]);
    dist::all_reduce(&mut t, ReduceOp::Max).unwrap();
    assert_eq!(t.double_value(&[0]), (world - 1) as f64);
    dist::destroy_process_group().unwrap();
}

fn lifecycle_scenario() {
    assert!(!dist::is_initialized());
    let e = dist::get_rank().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotInitialized);
    assert!(e.message().contains("init_process_group"), "{e}");
    assert_eq!(dist::barrier().unwrap_err().kind(), ErrorKind::NotInitialized);
    init_env();
    assert!(dist::is_initialized());
    let e =
        dist::init_process_group(Backend::Gloo, dist::InitOptions { timeout: TIMEOUT, ..Default::default() })
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyInitialized);
    dist::barrier().unwrap();
    dist::destroy_process_group().unwrap();
    assert!(!dist::is_initialized());
    assert_eq!(dist::destroy_process_group().unwrap_err().kind(), ErrorKind::NotInitialized);
}

/// Several async collectives in flight at once, waited in reverse order.
fn async_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    let mut tensors: Vec<Tensor> =
        (0..4).map(|k| Tensor::from_slice(&[rank * 10 + k]).to_kind(Kind::Float)).collect();
    let works: Vec<dist::Work> =
        tensors.iter_mut().map(|t| dist::all_reduce_async(t, ReduceOp::Sum).unwrap()).collect();
    for w in works.into_iter().rev() {
        w.wait().unwrap();
    }
    for (k, t) in tensors.iter().enumerate() {
        let want: i64 = (0..world).map(|r| r * 10 + k as i64).sum();
        assert_eq!(t.double_value(&[0]), want as f64);
    }
    let b = dist::barrier_async().unwrap();
    b.wait().unwrap();
    let started = Instant::now();
    let mut big = Tensor::ones([1 << 20], (Kind::Float, Device::Cpu));
    let w = dist::all_reduce_async(&mut big, ReduceOp::Sum).unwrap();
    w.wait().unwrap();
    assert!(started.elapsed() < TIMEOUT);
    assert_eq!(big.double_value(&[0]), world as f64);
    dist::destroy_process_group().unwrap();
}

/// `all_gather_into_tensor` and `reduce_scatter_tensor`, as PyTorch defines them: the
/// gathered tensor is the ranks' inputs in rank order; rank r's reduce-scatter output is
/// chunk r of the input, reduced over the ranks.
fn tensor_forms_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    for kind in [Kind::Float, Kind::Double, Kind::Int64] {
        // Rank r's shard [2, 3]: 100 r + i.
        let shard =
            |r: i64| (Tensor::arange(6, (Kind::Int64, Device::Cpu)) + r * 100).to_kind(kind).view([2, 3]);
        let want: Vec<i64> = (0..world).flat_map(|r| (0..6).map(move |i| r * 100 + i)).collect();
        // Concatenated along dim 0, and stacked: only the element count matters.
        let mut cat = Tensor::zeros([world * 2, 3], (kind, Device::Cpu));
        dist::all_gather_into_tensor(&mut cat, &shard(rank)).unwrap();
        assert_eq!(as_i64(&cat.flatten(0, -1)), want, "all_gather_into_tensor {kind:?}");
        let mut stacked = Tensor::zeros([world, 2, 3], (kind, Device::Cpu));
        dist::all_gather_into_tensor_async(&mut stacked, &shard(rank)).unwrap().wait().unwrap();
        assert_eq!(as_i64(&stacked.flatten(0, -1)), want, "all_gather_into_tensor_async {kind:?} stacked");

        let n = 5;
        for op in [ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max] {
            // Element j of rank r's input is contribution(r, j): chunk k is [k n, (k + 1) n).
            let full = expected(op, world, world * n);
            let mut out = Tensor::zeros([n], (kind, Device::Cpu));
            dist::reduce_scatter_tensor(&mut out, &input(kind, rank, world * n), op).unwrap();
            let chunk = full[(rank * n) as usize..((rank + 1) * n) as usize].to_vec();
            assert_eq!(as_i64(&out), chunk, "reduce_scatter_tensor {op:?} {kind:?}");
        }
        let mut out = Tensor::zeros([1, n], (kind, Device::Cpu));
        let work = dist::reduce_scatter_tensor_async(&mut out, &input(kind, rank, world * n), ReduceOp::Sum);
        work.unwrap().wait().unwrap();
        let full = expected(ReduceOp::Sum, world, world * n);
        assert_eq!(
            as_i64(&out.flatten(0, -1)),
            full[(rank * n) as usize..((rank + 1) * n) as usize].to_vec()
        );
    }
    // Refused before anything starts, naming what is wrong.
    let shard = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
    let mut short = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu));
    let e = dist::all_gather_into_tensor(&mut short, &shard).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message().contains(&format!("must have world size x input = {world} x 6 = {}", world * 6)),
        "{e}"
    );
    let mut doubles = Tensor::zeros([world * 2, 3], (Kind::Double, Device::Cpu));
    let e = dist::all_gather_into_tensor(&mut doubles, &shard).unwrap_err();
    assert!(e.message().contains("same dtype and device"), "{e}");
    let mut out = Tensor::zeros([4], (Kind::Float, Device::Cpu));
    let e = dist::reduce_scatter_tensor(&mut out, &shard, ReduceOp::Sum).unwrap_err();
    let want = format!("the input has 6 elements ([2, 3]) but must have world size x output = {world} x 4");
    assert!(e.message().contains(&want), "{e}");
    let mut out = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu));
    let full = Tensor::ones([world * 2, 3], (Kind::Float, Device::Cpu));
    let e = dist::reduce_scatter_tensor(&mut out, &full, ReduceOp::Avg).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(
        e.message().contains("reduce_scatter_tensor: ReduceOp::Avg is not supported by the Gloo backend"),
        "{e}"
    );
    let strided = Tensor::ones([3, world * 2], (Kind::Float, Device::Cpu)).transpose(0, 1);
    let e = dist::reduce_scatter_tensor(&mut out, &strided, ReduceOp::Sum).unwrap_err();
    assert!(e.message().contains("not contiguous"), "{e}");
    // The group still works after rejected calls.
    dist::barrier().unwrap();
    dist::destroy_process_group().unwrap();
}

/// Rank r's message to rank `to` with `tag`: values that name sender, receiver and tag.
fn message(r: i64, to: i64, tag: i64) -> Tensor {
    Tensor::from_slice(&[r * 100 + to * 10 + tag, -r, tag]).to_kind(Kind::Float)
}

/// send/recv and their async forms: a ring of isend/irecv, blocking sends from rank 0 to
/// every other rank, messages told apart by their tags, and receives from any source;
/// argument errors; and the observer numbering point-to-point calls apart from the
/// collectives, which keep their own numbers.
fn point_to_point_scenario() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<dist::debug::CollectiveCall>>> = Arc::default();
    let sink = seen.clone();
    assert!(dist::debug::set_collective_observer(move |call| sink.lock().unwrap().push(call.clone())));
    init_env();
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);

    dist::barrier().unwrap();
    // A ring: everyone sends to the next rank and receives from the previous one at once.
    let send = message(rank, next, 7);
    let sent = dist::isend(&send, next as usize, 7).unwrap();
    let mut got = Tensor::zeros([3], (Kind::Float, Device::Cpu));
    dist::irecv(&mut got, prev as usize, 7).unwrap().wait().unwrap();
    sent.wait().unwrap();
    assert_eq!(as_i64(&got), as_i64(&message(prev, rank, 7)), "ring: from rank {prev}");

    // Blocking: rank 0 sends each other rank its own message, in rank order.
    if rank == 0 {
        for to in 1..world {
            dist::send(&message(0, to, 0), to as usize, 0).unwrap();
        }
    } else {
        let mut got = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        dist::recv(&mut got, 0, 0).unwrap();
        assert_eq!(as_i64(&got), as_i64(&message(0, rank, 0)));
    }

    // Tags: the last rank sends two messages to rank 0, which receives them in the other
    // order; each arrives where its tag says.
    let last = world - 1;
    if rank == last {
        let (a, b) = (message(last, 0, 1), message(last, 0, 2));
        let works = [dist::isend(&a, 0, 1).unwrap(), dist::isend(&b, 0, 2).unwrap()];
        works.into_iter().for_each(|w| w.wait().unwrap());
    } else if rank == 0 {
        let (mut two, mut one) =
            (Tensor::zeros([3], (Kind::Float, Device::Cpu)), Tensor::zeros([3], (Kind::Float, Device::Cpu)));
        dist::recv(&mut two, last as usize, 2).unwrap();
        dist::recv(&mut one, last as usize, 1).unwrap();
        assert_eq!(as_i64(&two), as_i64(&message(last, 0, 2)));
        assert_eq!(as_i64(&one), as_i64(&message(last, 0, 1)));
    }

    // From any source: rank 0 learns who sent what.
    if rank == 0 {
        let mut sources = Vec::new();
        for _ in 1..world {
            let mut got = Tensor::zeros([3], (Kind::Float, Device::Cpu));
            let from = dist::recv_any_source(&mut got, 5).unwrap() as i64;
            assert_eq!(as_i64(&got), as_i64(&message(from, 0, 5)), "the message says it came from {from}");
            sources.push(from);
        }
        sources.sort();
        assert_eq!(sources, (1..world).collect::<Vec<_>>());
    } else {
        dist::send(&message(rank, 0, 5), 0, 5).unwrap();
    }

    // Refused before anything starts.
    let e = dist::send(&send, rank as usize, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("is this rank itself"), "{e}");
    let e = dist::recv(&mut got, world as usize, 0).unwrap_err();
    assert!(e.message().contains(&format!("source rank {world} does not exist")), "{e}");
    let e = dist::send(&send, next as usize, -1).unwrap_err();
    assert!(e.message().contains("tag -1 is negative"), "{e}");
    let mut strided = Tensor::zeros([3, 2], (Kind::Float, Device::Cpu)).transpose(0, 1);
    assert!(dist::recv(&mut strided, prev as usize, 0).unwrap_err().message().contains("not contiguous"));
    dist::barrier().unwrap();

    // The observer: the two barriers are collectives #0 and #1 whatever was sent
    // between them; sends and receives have their own numbers, with the other rank.
    let seen = seen.lock().unwrap();
    let collectives: Vec<(u64, String)> =
        seen.iter().filter(|c| !c.op.is_point_to_point()).map(|c| (c.seq, c.describe())).collect();
    assert_eq!(collectives, [(0, "barrier()".to_string()), (1, "barrier()".to_string())]);
    let p2p: Vec<&dist::debug::CollectiveCall> = seen.iter().filter(|c| c.op.is_point_to_point()).collect();
    assert_eq!(p2p.iter().map(|c| c.seq).collect::<Vec<_>>(), (0..p2p.len() as u64).collect::<Vec<_>>());
    assert_eq!(p2p[0].describe(), format!("send(dst={next}) Float[3]"));
    assert_eq!(p2p[1].describe(), format!("recv(src={prev}) Float[3]"));
    assert_eq!(
        (p2p[0].bytes(), p2p[0].values.clone()),
        (12, Some(vec![(rank * 100 + next * 10 + 7) as f64, -rank as f64, 7.0]))
    );
    if rank == 0 {
        // Receives from any source name no source.
        let any: Vec<String> = p2p.iter().rev().take((world - 1) as usize).map(|c| c.describe()).collect();
        assert!(any.iter().all(|d| d == "recv() Float[3]"), "{any:?}");
    }
    drop(seen);
    dist::destroy_process_group().unwrap();
}

#[test]
fn tensor_forms_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("tensor_forms", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn tensor_forms_on_3_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("tensor_forms", env_ranks(0..3, 3, port), &[], DEADLINE));
}

#[test]
fn point_to_point_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("point_to_point", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn point_to_point_on_3_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("point_to_point", env_ranks(0..3, 3, port), &[], DEADLINE));
}

#[test]
fn every_collective_and_op_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("collectives", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn every_collective_and_op_on_3_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("collectives", env_ranks(0..3, 3, port), &[], DEADLINE));
}

#[test]
fn every_collective_and_op_on_4_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("collectives", env_ranks(0..4, 4, port), &[], DEADLINE));
}

#[test]
fn sizes_from_one_element_to_64_mb() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("sizes", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn explicit_tcp_init_without_environment() {
    let url = format!("tcp://127.0.0.1:{}", child_process::free_port().unwrap());
    let ranks = (0..3).map(|rank| RankSpec { rank, env: vec![], program: None }).collect();
    assert_all_ok(&run_ranks(
        "explicit_init",
        ranks,
        &[("TCHD_INIT_URL", &url), ("TCHD_WORLD", "3")],
        DEADLINE,
    ));
}

#[test]
fn default_group_lifecycle() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("lifecycle", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn async_work_handles() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("async", env_ranks(0..3, 3, port), &[], DEADLINE));
}
