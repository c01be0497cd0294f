//! DistributedDataParallel on real processes (CPU, Gloo): N ranks × batch B train to
//! the same weights as 1 process × batch N·B; different seeds end up identical;
//! no_sync accumulates; buffers follow rank 0; unused parameters give PyTorch's error;
//! a rank that dies makes the others fail instead of hanging.
//!
//! BatchNorm and exactness: a training-mode BatchNorm normalises each rank's slice with
//! that slice's statistics, which differ from the full batch's, so N×B could not equal
//! 1×N·B. The equivalence model therefore runs its BatchNorm in eval mode (running
//! statistics: a per-channel affine map whose weight and bias still train);
//! SyncBatchNorm, tested on its own, is the training-mode answer.
mod common;

use std::time::{Duration, Instant};

use common::*;
use dist::{DdpOptions, DistributedDataParallel, ErrorKind, ReduceOp};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);

#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    common::init_env(rank_timeout());
    run_scenario(&[
        ("equivalence", equivalence_scenario),
        ("no_sync", no_sync_scenario),
        ("buffers", buffers_scenario),
        ("unused", unused_scenario),
        ("mismatch", mismatch_scenario),
        ("dead_rank", dead_rank_scenario),
        ("killed_in_backward", killed_in_backward_scenario),
    ]);
}

/// The group timeout a scenario runs with (`TCHD_TIMEOUT_MS`, default 60 s).
fn rank_timeout() -> Duration {
    Duration::from_millis(std::env::var("TCHD_TIMEOUT_MS").map_or(60_000, |v| v.parse().unwrap()))
}

/// A small conv net with a (eval-mode, see the module doc) BatchNorm.
#[derive(Debug)]
struct Net {
    conv1: nn::Conv2D,
    bn: nn::BatchNorm,
    conv2: nn::Conv2D,
    fc: nn::Linear,
}

impl Net {
    fn new(p: &nn::Path) -> Net {
        let conv = |p, i, o, stride| {
            nn::conv2d(p, i, o, 3, nn::ConvConfig { stride, padding: 1, ..Default::default() })
        };
        Net {
            conv1: conv(p / "conv1", 1, 4, 1),
            bn: nn::batch_norm2d(p / "bn", 4, Default::default()),
            conv2: conv(p / "conv2", 4, 8, 2),
            fc: nn::linear(p / "fc", 8 * 4 * 4, 10, Default::default()),
        }
    }
}

impl ModuleT for Net {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.apply(&self.conv1)
            .apply_t(&self.bn, false)
            .relu()
            .apply(&self.conv2)
            .relu()
            .flatten(1, -1)
            .apply(&self.fc)
    }
}

fn build(seed: i64) -> (nn::VarStore, Net) {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root());
    (vs, net)
}

/// The global batch of a step: identical on every process.
fn global_batch(step: i64, total: i64) -> (Tensor, Tensor) {
    tch::manual_seed(1000 + step);
    let x = Tensor::randn([total, 1, 8, 8], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(10, [total], (Kind::Int64, Device::Cpu));
    (x, y)
}

fn sorted_vars(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<_> = vs.variables().into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn max_diff(a: &nn::VarStore, b: &nn::VarStore) -> f64 {
    sorted_vars(a)
        .iter()
        .zip(sorted_vars(b))
        .map(|((na, ta), (nb, tb))| {
            assert_eq!(na, &nb);
            (ta - tb).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

const B: i64 = 4;
const STEPS: i64 = 4;

fn equivalence_scenario() {
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    // The reference: one process, rank 0's seed, the whole batch.
    let (ref_vs, ref_net) = build(7);
    // This rank's replica starts from its own seed...
    let (vs, net) = build(7 + 100 * rank);
    if rank != 0 {
        assert!(max_diff(&vs, &ref_vs) > 1e-3, "seeds must give different starting weights");
    }
    let ddp = DistributedDataParallel::new(net, &vs, DdpOptions::default()).unwrap();
    // ...and is rank 0's after construction.
    assert_eq!(max_diff(&vs, &ref_vs), 0.0, "weights after DDP construction must be rank 0's");

    let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
    let mut ref_opt = nn::Sgd::default().build(&ref_vs, 0.1).unwrap();
    for step in 0..STEPS {
        let (x, y) = global_batch(step, world * B);
        let loss = ddp.forward_t(&x.narrow(0, rank * B, B), true).cross_entropy_for_logits(&y.narrow(
            0,
            rank * B,
            B,
        ));
        opt.zero_grad();
        loss.backward();
        opt.step();

        let ref_loss = ref_net.forward_t(&x, true).cross_entropy_for_logits(&y);
        ref_opt.backward_step(&ref_loss);
    }
    let diff = max_diff(&vs, &ref_vs);
    println!("rank {rank}: max |DDP - reference| after {STEPS} steps = {diff:e}");
    assert!(
        diff < 1e-5,
        "rank {rank}: {world} ranks x batch {B} differ from 1 process x batch {} by {diff}",
        world * B
    );
    // Training moved the weights (the comparison is not trivially between initial states).
    let (init_vs, _) = build(7);
    assert!(max_diff(&vs, &init_vs) > 1e-3);
    assert!(!ddp.bucket_sizes().unwrap().is_empty());
    // The buckets hold every parameter once, as many per bucket as bucket_sizes says.
    let buckets = ddp.buckets().unwrap();
    assert_eq!(buckets.iter().map(Vec::len).collect::<Vec<_>>(), ddp.bucket_sizes().unwrap());
    let mut all = buckets.concat();
    all.sort_unstable();
    assert_eq!(all, (0..ddp.parameters().len()).collect::<Vec<_>>());
}

fn no_sync_scenario() {
    let rank = dist::get_rank().unwrap() as i64;
    let world = dist::get_world_size().unwrap() as i64;
    let (ref_vs, ref_net) = build(3);
    let (vs, net) = build(3 + rank);
    let ddp = DistributedDataParallel::new(net, &vs, DdpOptions::default()).unwrap();
    let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
    let mut ref_opt = nn::Sgd::default().build(&ref_vs, 0.1).unwrap();
    let (x1, y1) = global_batch(1, world * B);
    let (x2, y2) = global_batch(2, world * B);
    let local = |t: &Tensor| t.narrow(0, rank * B, B);

    opt.zero_grad();
    ddp.no_sync(|| ddp.forward_t(&local(&x1), true).cross_entropy_for_logits(&local(&y1)).backward());
    // Inside no_sync nothing was exchanged: the ranks' gradients still differ.
    let g = ddp.parameters()[0].1.grad().flatten(0, -1).narrow(0, 0, 1).copy();
    let gathered = dist::default_group().unwrap().all_gather_to_vec(&g).unwrap();
    let distinct = gathered.iter().any(|t| (t - &gathered[0]).abs().max().double_value(&[]) > 0.0);
    assert!(distinct, "gradients were synchronised inside no_sync");
    ddp.forward_t(&local(&x2), true).cross_entropy_for_logits(&local(&y2)).backward();
    opt.step();

    ref_opt.zero_grad();
    ref_net.forward_t(&x1, true).cross_entropy_for_logits(&y1).backward();
    ref_net.forward_t(&x2, true).cross_entropy_for_logits(&y2).backward();
    ref_opt.step();
    let diff = max_diff(&vs, &ref_vs);
    assert!(diff < 1e-5, "no_sync accumulation differs from the reference by {diff}");
}

/// BatchNorm as the first layer, in training mode: its running mean follows the input
/// directly, so the broadcast of rank 0's buffers before each forward can be checked.
#[derive(Debug)]
struct BnFirst {
    bn: nn::BatchNorm,
    fc: nn::Linear,
}

impl ModuleT for BnFirst {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        xs.apply_t(&self.bn, train).flatten(1, -1).apply(&self.fc)
    }
}

fn buffers_scenario() {
    let rank = dist::get_rank().unwrap() as i64;
    tch::manual_seed(rank);
    let vs = nn::VarStore::new(Device::Cpu);
    let p = vs.root();
    let model = BnFirst {
        bn: nn::batch_norm2d(&p / "bn", 2, Default::default()),
        fc: nn::linear(&p / "fc", 2 * 3 * 3, 2, Default::default()),
    };
    let ddp = DistributedDataParallel::new(model, &vs, DdpOptions::default()).unwrap();
    let group = dist::default_group().unwrap();
    let momentum = 0.1;
    // Each rank feeds a different batch, so local running means drift apart.
    let batch = |step: i64| Tensor::full([4, 2, 3, 3], (rank * 10 + step) as f64, (Kind::Float, Device::Cpu));
    ddp.forward_t(&batch(1), true).sum(Kind::Float).backward();
    let rm = |d: &DistributedDataParallel<BnFirst>| {
        d.buffers().iter().find(|(n, _)| n == "bn.running_mean").unwrap().1.copy()
    };
    let after_first = group.all_gather_to_vec(&rm(&ddp)).unwrap();
    if dist::get_world_size().unwrap() > 1 {
        assert!((&after_first[0] - &after_first[1]).abs().max().double_value(&[]) > 0.0);
    }
    // The next forward starts from rank 0's running mean, then folds in the local batch.
    ddp.forward_t(&batch(2), true).sum(Kind::Float).backward();
    let expected = &after_first[0] * (1.0 - momentum) + (rank * 10 + 2) as f64 * momentum;
    let diff = (rm(&ddp) - expected).abs().max().double_value(&[]);
    assert!(
        diff < 1e-5,
        "rank {rank}: running mean is not rank 0's broadcast value updated locally ({diff})"
    );
}

/// A parameter that never gets a gradient.
#[derive(Debug)]
struct WithUnused {
    used: nn::Linear,
    _unused: nn::Linear,
}

impl ModuleT for WithUnused {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.apply(&self.used)
    }
}

fn unused_scenario() {
    let find_unused = std::env::var("TCHD_FIND_UNUSED").unwrap() == "1";
    let vs = nn::VarStore::new(Device::Cpu);
    let model = WithUnused {
        used: nn::linear(vs.root() / "used", 4, 2, Default::default()),
        _unused: nn::linear(vs.root() / "unused", 4, 2, Default::default()),
    };
    let opts = DdpOptions { find_unused_parameters: find_unused, ..Default::default() };
    let ddp = DistributedDataParallel::new(model, &vs, opts).unwrap();
    let x = Tensor::ones([3, 4], (Kind::Float, Device::Cpu)) * (dist::get_rank().unwrap() + 1) as f64;
    let mut results = Vec::new();
    for _ in 0..3 {
        let r = ddp.try_forward_t(&x, true).map(|y| y.sum(Kind::Float).backward());
        let failed = r.is_err();
        results.push(r);
        if failed {
            break;
        }
    }
    if find_unused {
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        // The used layer's gradients were averaged: equal on every rank.
        let g = ddp.module().used.ws.grad();
        let all = dist::default_group().unwrap().all_gather_to_vec(&g).unwrap();
        assert!(all.iter().all(|t| t.equal(&all[0])));
    } else {
        let e = results.last().unwrap().as_ref().unwrap_err();
        println!("UNUSED-ERROR {e}");
        assert!(e.message().contains("Expected to have finished reduction in the prior iteration"), "{e}");
        assert!(e.message().contains("find_unused_parameters"), "{e}");
    }
}

/// Rank 1 builds another model: with `TCHD_MISMATCH=count` one more layer (every rank
/// sees the counts, so every rank refuses), with `shape` a wider layer (as in PyTorch,
/// only the rank that differs from rank 0 refuses; rank 0 goes on and fails, without
/// hanging, at its next collective once rank 1 has left).
fn mismatch_scenario() {
    let rank = dist::get_rank().unwrap();
    let count = std::env::var("TCHD_MISMATCH").unwrap() == "count";
    let vs = nn::VarStore::new(Device::Cpu);
    let width = if rank == 1 && !count { 5 } else { 4 };
    let model = nn::linear(vs.root() / "fc", width, 2, Default::default());
    if rank == 1 && count {
        let _extra = nn::linear(vs.root() / "extra", 2, 2, Default::default());
    }
    let made = DistributedDataParallel::new(model, &vs, DdpOptions::default());
    if count || rank == 1 {
        let e = made.unwrap_err();
        println!("MISMATCH-ERROR {e}");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("do not all hold the same model"), "{e}");
        return;
    }
    let failed = match made {
        Err(e) => e,
        Ok(_) => dist::barrier().unwrap_err(),
    };
    println!("MISMATCH-RANK-0 {failed}");
    assert!(failed.is_communication_failure(), "{failed}");
}

/// Rank 1 dies after its forward pass; rank 0's backward cannot all-reduce and must
/// fail (not hang) within the group timeout.
fn dead_rank_scenario() {
    let timeout = rank_timeout();
    let rank = dist::get_rank().unwrap();
    let (vs, net) = build(1);
    let ddp = DistributedDataParallel::new(net, &vs, DdpOptions::default()).unwrap();
    let (x, y) = global_batch(0, B);
    let loss = ddp.forward_t(&x, true).cross_entropy_for_logits(&y);
    if rank == 1 {
        std::process::abort();
    }
    let started = Instant::now();
    let r = loss.f_backward();
    let mut t = Tensor::from_slice(&[1.0f32]);
    let after = dist::all_reduce(&mut t, ReduceOp::Sum);
    let elapsed = started.elapsed();
    println!("DEAD-RANK backward={r:?} all_reduce_after={after:?} elapsed_ms={}", elapsed.as_millis());
    assert!(r.is_err() || after.is_err(), "the dead rank went unnoticed");
    assert!(elapsed < timeout * 3 + Duration::from_secs(10), "took {elapsed:?}");
}

/// Rank 1 is SIGKILLed by a thread of its own while it is inside `backward()` (the
/// thread is started right before the call, and the backward pass of this model lasts
/// far longer than its delay); rank 0 must get an error, not hang.
fn killed_in_backward_scenario() {
    let timeout = rank_timeout();
    let rank = dist::get_rank().unwrap();
    tch::manual_seed(5);
    let vs = nn::VarStore::new(Device::Cpu);
    // Wide enough that one backward pass takes well over the killer's 20 ms here.
    let net = nn::seq_t()
        .add(nn::conv2d(vs.root() / "c1", 1, 64, 3, nn::ConvConfig { padding: 1, ..Default::default() }))
        .add_fn(|x| x.relu())
        .add(nn::conv2d(vs.root() / "c2", 64, 64, 3, nn::ConvConfig { padding: 1, ..Default::default() }))
        .add_fn(|x| x.relu().flatten(1, -1))
        .add(nn::linear(vs.root() / "fc", 64 * 28 * 28, 10, Default::default()));
    let ddp = DistributedDataParallel::new(net, &vs, DdpOptions::default()).unwrap();
    let x = Tensor::rand([32, 1, 28, 28], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(10, [32], (Kind::Int64, Device::Cpu));
    // One full step first: both ranks healthy, buckets rebuilt; its backward's length
    // is printed, to show the 20 ms kill lands inside the next one.
    let first = ddp.forward_t(&x, true).cross_entropy_for_logits(&y);
    let t0 = Instant::now();
    first.backward();
    println!("rank {rank}: a healthy backward took {} ms", t0.elapsed().as_millis());
    let loss = ddp.forward_t(&x, true).cross_entropy_for_logits(&y);
    let started = Instant::now();
    if rank == 1 {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
        let _ = loss.f_backward();
        // Still alive after the whole backward: the kill comes at the latest now.
        std::thread::sleep(Duration::from_secs(60));
        unreachable!("rank 1 should have been killed");
    }
    let r = loss.f_backward();
    let mut t = Tensor::from_slice(&[1.0f32]);
    let after = dist::all_reduce(&mut t, ReduceOp::Sum);
    let elapsed = started.elapsed();
    println!(
        "KILLED-IN-BACKWARD backward={r:?} all_reduce_after={after:?} elapsed_ms={}",
        elapsed.as_millis()
    );
    assert!(r.is_err() || after.is_err(), "the killed rank went unnoticed");
    if let Err(e) = &after {
        assert!(matches!(e.kind(), ErrorKind::Network | ErrorKind::Timeout), "{e}");
        assert!(e.message().contains("rank 0 of 2"), "{e}");
    }
    assert!(elapsed < timeout * 3 + Duration::from_secs(10), "took {elapsed:?}");
}

fn run(scenario: &str, world: usize, extra: &[(&str, &str)]) -> Vec<RankOutcome> {
    run_ranks(scenario, env_ranks(0..world, world, child_process::free_port().unwrap()), extra, DEADLINE)
}

#[test]
fn two_ranks_match_one_process_with_the_whole_batch() {
    assert_all_ok(&run("equivalence", 2, &[]));
}

#[test]
fn three_ranks_match_one_process_with_the_whole_batch() {
    assert_all_ok(&run("equivalence", 3, &[]));
}

#[test]
fn no_sync_accumulates_then_reduces_the_sum() {
    assert_all_ok(&run("no_sync", 2, &[]));
}

#[test]
fn buffers_follow_rank_zero_before_each_forward() {
    assert_all_ok(&run("buffers", 2, &[]));
}

#[test]
fn unused_parameter_without_find_unused_is_pytorchs_error() {
    assert_all_ok(&run("unused", 2, &[("TCHD_FIND_UNUSED", "0")]));
}

#[test]
fn unused_parameter_with_find_unused_trains() {
    assert_all_ok(&run("unused", 2, &[("TCHD_FIND_UNUSED", "1")]));
}

#[test]
fn different_parameter_counts_are_refused_on_every_rank() {
    assert_all_ok(&run("mismatch", 2, &[("TCHD_MISMATCH", "count")]));
}

#[test]
fn a_different_parameter_shape_is_refused_where_it_differs() {
    let outcomes = run("mismatch", 2, &[("TCHD_MISMATCH", "shape"), ("TCHD_TIMEOUT_MS", "10000")]);
    assert_all_ok(&outcomes);
    assert!(
        outcomes[1].output.contains("appears not to match sizes of the same param in process 0"),
        "{}",
        outcomes[1].output
    );
}

#[test]
fn a_rank_killed_during_backward_fails_the_others_within_the_timeout() {
    let outcomes = run("killed_in_backward", 2, &[("TCHD_TIMEOUT_MS", "10000")]);
    for o in &outcomes {
        eprintln!("--- rank {} ({:?})\n{}", o.rank, o.code, o.output);
    }
    assert!(outcomes[0].success, "rank 0 must notice and finish:\n{}", outcomes[0].output);
    assert_eq!(outcomes[1].code, None, "rank 1 must have died by a signal:\n{}", outcomes[1].output);
}

#[test]
fn a_rank_dying_before_backward_fails_the_others_within_the_timeout() {
    let outcomes = run("dead_rank", 2, &[("TCHD_TIMEOUT_MS", "10000")]);
    let rank0 = &outcomes[0];
    assert!(rank0.success, "rank 0 must notice and finish:\n{}", rank0.output);
    assert!(!outcomes[1].success, "rank 1 was meant to die");
}
