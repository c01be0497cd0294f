//! Tensor parallelism across real processes (Gloo). The region operators: a two-layer MLP
//! split Megatron's way over 2 and 3 ranks (the first layer column-parallel behind
//! `copy_to_region`, the second row-parallel before `reduce_from_region`) against the
//! whole MLP, which every rank also runs on its own from the same seed. Output, loss and
//! every gradient (the input's included) must agree to float32 rounding; without
//! `copy_to_region` the input's gradient is only this rank's part, and the test shows it.
//! Megatron's other two operators, `gather_from_region` and `scatter_to_region`: forward
//! values and gradients against the whole tensors on one rank, the traced collectives
//! of each forward and backward, and dimensions they cannot split refused before any
//! collective starts.
//! `parallelize_module`: a conv net and MLP split by a plan (conv channels as Linear
//! features) from TP rank 0's weights, against rank 0's whole net.
mod common;

use std::time::Duration;

use common::*;
use std::collections::HashMap;

use dist::ParallelStyle::{Colwise, Rowwise};
use tch::nn::{self, ConvConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(60);
/// Rows, input features, hidden features (a multiple of 2 and 3), outputs.
const N: i64 = 5;
const IN: i64 = 4;
const HIDDEN: i64 = 12;
const OUT: i64 = 3;
/// float32 sums in another order (a split over ranks, then an all-reduce): a few ulps,
/// relative to the reference's scale (PyTorch's own TP tests use rtol 1.3e-6).
const TOLERANCE: f64 = 2e-6;
/// The WideResNet's deeper sums (convolutions of 9 × channels terms, 13 layers deep) in
/// another order: measured up to ~1e-6 of the scale here; 1e-5 leaves room.
const WRN_TOLERANCE: f64 = 1e-5;

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[
        ("mlp", mlp_scenario),
        ("regions", regions_scenario),
        ("plan", plan_scenario),
        ("wrn", wrn_scenario),
    ]);
}

fn leaf(t: Tensor) -> Tensor {
    t.detach().set_requires_grad(true)
}

/// max|got - want| / max(1, max|want|).
fn max_diff(got: &Tensor, want: &Tensor) -> f64 {
    let scale = want.abs().max().double_value(&[]).max(1.0);
    (got - want).abs().max().double_value(&[]) / scale
}

fn mlp_scenario() {
    init_env(TIMEOUT);
    let group = dist::default_group().unwrap();
    let (rank, world) = (group.rank() as i64, group.world_size() as i64);
    tch::manual_seed(0);
    let opts = (Kind::Float, Device::Cpu);
    let (w1, b1) = (Tensor::randn([HIDDEN, IN], opts), Tensor::randn([HIDDEN], opts));
    let (w2, b2) = (Tensor::randn([OUT, HIDDEN], opts), Tensor::randn([OUT], opts));
    let x = Tensor::randn([N, IN], opts);

    // The whole MLP, on this rank alone.
    let (xw, w1w, b1w, w2w, b2w) =
        (leaf(x.copy()), leaf(w1.copy()), leaf(b1.copy()), leaf(w2.copy()), leaf(b2.copy()));
    let whole = (xw.matmul(&w1w.tr()) + &b1w).relu().matmul(&w2w.tr()) + &b2w;
    (&whole * &whole).sum(Kind::Float).backward();

    // This rank's slices: fc1's output features (rows of w1, b1), fc2's input features
    // (columns of w2); fc2's bias whole, added once after the reduction.
    let part = HIDDEN / world;
    let (xt, b2t) = (leaf(x.copy()), leaf(b2.copy()));
    let w1t = leaf(w1.narrow(0, rank * part, part));
    let b1t = leaf(b1.narrow(0, rank * part, part));
    let w2t = leaf(w2.narrow(1, rank * part, part));
    let hidden = (dist::copy_to_region(&xt, &group).unwrap().matmul(&w1t.tr()) + &b1t).relu();
    let split = dist::reduce_from_region(&hidden.matmul(&w2t.tr()), &group).unwrap() + &b2t;
    (&split * &split).sum(Kind::Float).backward();

    let checks = [
        ("output", max_diff(&split, &whole)),
        ("input gradient", max_diff(&xt.grad(), &xw.grad())),
        ("fc1 weight gradient", max_diff(&w1t.grad(), &w1w.grad().narrow(0, rank * part, part))),
        ("fc1 bias gradient", max_diff(&b1t.grad(), &b1w.grad().narrow(0, rank * part, part))),
        ("fc2 weight gradient", max_diff(&w2t.grad(), &w2w.grad().narrow(1, rank * part, part))),
        ("fc2 bias gradient", max_diff(&b2t.grad(), &b2w.grad())),
    ];
    for (what, diff) in checks {
        println!("rank {rank}: {what} differs by {diff:.2e}");
        assert!(diff <= TOLERANCE, "rank {rank}: the {what} differs from the whole MLP's by {diff}");
    }

    // Megatron's classic mistake: no copy_to_region. The forward is the same, but the
    // input's gradient is only what this rank's slice of fc1 contributes.
    let xm = leaf(x.copy());
    let hidden = (xm.matmul(&w1t.tr()) + &b1t).relu();
    let mistake = dist::reduce_from_region(&hidden.matmul(&w2t.tr()), &group).unwrap() + &b2t;
    (&mistake * &mistake).sum(Kind::Float).backward();
    let partial = max_diff(&xm.grad(), &xw.grad());
    println!("rank {rank}: without copy_to_region the input gradient differs by {partial:.2e}");
    assert!(partial > 1e-2, "a missing copy_to_region must leave a partial input gradient ({partial})");
    dist::destroy_process_group().unwrap();
}

/// The collectives this process issued since the observer was installed, as
/// `describe()` strings, drained.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

fn observe() -> Seen {
    let seen: Seen = Default::default();
    let sink = seen.clone();
    assert!(dist::debug::set_collective_observer(move |c| sink.lock().unwrap().push(c.describe())));
    seen
}

fn drain(seen: &Seen) -> Vec<String> {
    std::mem::take(&mut *seen.lock().unwrap())
}

/// gather_from_region and scatter_to_region alone (on dims -1, 0 and a middle one),
/// then in Megatron's MLP with the other pair: fc1 column-parallel with its output
/// gathered (`gather_output=True`), fc2 row-parallel fed by a scatter
/// (`input_is_parallel=False`). Every value and gradient against the whole tensors,
/// which every rank also holds from the same seed.
fn regions_scenario() {
    init_env(TIMEOUT);
    let seen = observe();
    let group = dist::default_group().unwrap();
    let (rank, world) = (group.rank() as i64, group.world_size() as i64);
    let opts = (Kind::Float, Device::Cpu);
    tch::manual_seed(0);
    // Dimension 1 has 6 (a multiple of 2 and 3), the others not: 5 and 7.
    let x = Tensor::randn([5, 6, 7], opts);
    let dims: [(i64, i64); 3] = [(-1, 2), (0, 0), (1, 1)];
    for (dim, index) in dims {
        // Each rank's part of a whole whose every dimension splits: gather it back.
        let whole = Tensor::randn([5 * world, 6, 7 * world], opts);
        let weight = Tensor::randn(whole.size(), opts);
        let part_len = whole.size()[index as usize] / world;
        let mine = leaf(whole.narrow(index, rank * part_len, part_len));
        let gathered = dist::gather_from_region(&mine, dim, &group).unwrap();
        assert_eq!(drain(&seen), [format!("all_gather_into_tensor() Float[{}]", mine.numel())]);
        assert!(gathered.equal(&whole), "rank {rank}: gather along {dim} is not the whole tensor");
        (&gathered * &weight).sum(Kind::Float).backward();
        assert_eq!(drain(&seen), Vec::<String>::new(), "gather's backward needs no collective");
        // One rank's computation: d/dwhole sum(whole * weight) = weight; mine is a slice.
        let want = weight.narrow(index, rank * part_len, part_len);
        assert!(
            mine.grad().equal(&want),
            "rank {rank}: gather's gradient along {dim} is not this rank's slice"
        );
    }
    // Scatter along the one dimension every group size here divides, written both ways.
    for dim in [1, -2] {
        let whole = leaf(x.copy());
        let weight = Tensor::randn([5, 6, 7], opts);
        let part = 6 / world;
        let mine = dist::scatter_to_region(&whole, dim, &group).unwrap();
        assert_eq!(drain(&seen), Vec::<String>::new(), "scatter's forward needs no collective");
        assert!(mine.equal(&x.narrow(1, rank * part, part)), "rank {rank}: scatter kept the wrong slice");
        // Each rank's loss is its slice's part of the whole's: the gradient all-gathered
        // from the ranks' slices is the whole loss's gradient, weight itself.
        (&mine * weight.narrow(1, rank * part, part)).sum(Kind::Float).backward();
        assert_eq!(drain(&seen), [format!("all_gather_into_tensor() Float[{}]", mine.numel())]);
        assert!(whole.grad().equal(&weight), "rank {rank}: scatter's gradient is not the whole");
    }

    // Misuse: an error on every rank, before any collective (no rank waits on another).
    let uneven = dist::scatter_to_region(&leaf(x.copy()), 0, &group).unwrap_err();
    assert!(uneven.message().contains("dimension 0 of the input [5, 6, 7] has 5, which"), "{uneven}");
    assert!(uneven.message().contains("cannot split evenly"), "{uneven}");
    assert_eq!(uneven.exit_code(), 2);
    for bad in [3, -4] {
        let e = dist::gather_from_region(&x, bad, &group).unwrap_err();
        assert!(e.message().contains(&format!("dimension {bad} is out of range")), "{e}");
        let e = dist::scatter_to_region(&x, bad, &group).unwrap_err();
        assert!(e.message().contains("valid: -3 to 2"), "{e}");
    }
    assert_eq!(drain(&seen), Vec::<String>::new(), "a refused call must not start a collective");

    // Megatron's MLP with both pairs, against the whole MLP.
    let (w1, b1) = (Tensor::randn([HIDDEN, IN], opts), Tensor::randn([HIDDEN], opts));
    let (w2, b2) = (Tensor::randn([OUT, HIDDEN], opts), Tensor::randn([OUT], opts));
    let input = Tensor::randn([N, IN], opts);
    let (xw, w1w, b1w, w2w, b2w) =
        (leaf(input.copy()), leaf(w1.copy()), leaf(b1.copy()), leaf(w2.copy()), leaf(b2.copy()));
    let whole = (xw.matmul(&w1w.tr()) + &b1w).relu().matmul(&w2w.tr()) + &b2w;
    (&whole * &whole).sum(Kind::Float).backward();

    let part = HIDDEN / world;
    let (xt, b2t) = (leaf(input.copy()), leaf(b2.copy()));
    let w1t = leaf(w1.narrow(0, rank * part, part));
    let b1t = leaf(b1.narrow(0, rank * part, part));
    let w2t = leaf(w2.narrow(1, rank * part, part));
    let split = dist::copy_to_region(&xt, &group).unwrap().matmul(&w1t.tr()) + &b1t;
    let hidden = dist::gather_from_region(&split, -1, &group).unwrap().relu();
    let into = dist::scatter_to_region(&hidden, -1, &group).unwrap();
    let out = dist::reduce_from_region(&into.matmul(&w2t.tr()), &group).unwrap() + &b2t;
    let gather = format!("all_gather_into_tensor() Float[{}]", N * part);
    let forward = [gather.clone(), format!("all_reduce(op=SUM) Float[{}]", N * OUT)];
    assert_eq!(drain(&seen), forward, "rank {rank}: the forward's collectives: gather, then g");
    (&out * &out).sum(Kind::Float).backward();
    // Backward in reverse: scatter's all-gather, then f's all-reduce of the input's gradient.
    let backward = [gather, format!("all_reduce(op=SUM) Float[{}]", N * IN)];
    assert_eq!(drain(&seen), backward, "rank {rank}: the backward's collectives");
    let checks = [
        ("output", max_diff(&out, &whole)),
        ("input gradient", max_diff(&xt.grad(), &xw.grad())),
        ("fc1 weight gradient", max_diff(&w1t.grad(), &w1w.grad().narrow(0, rank * part, part))),
        ("fc1 bias gradient", max_diff(&b1t.grad(), &b1w.grad().narrow(0, rank * part, part))),
        ("fc2 weight gradient", max_diff(&w2t.grad(), &w2w.grad().narrow(1, rank * part, part))),
        ("fc2 bias gradient", max_diff(&b2t.grad(), &b2w.grad())),
    ];
    for (what, diff) in checks {
        println!("rank {rank}: gathered MLP's {what} differs by {diff:.2e}");
        assert!(
            diff <= TOLERANCE,
            "rank {rank}: the gathered MLP's {what} differs from the whole's by {diff}"
        );
    }
    dist::destroy_process_group().unwrap();
}

/// A small conv net and MLP (conv 2→6, conv 6→4 without bias, flatten, fc 36→12, fc
/// 12→3) in a VarStore, initialised from `seed`.
fn net(seed: i64) -> nn::VarStore {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    let pad = ConvConfig { padding: 1, ..Default::default() };
    let _ = nn::conv2d(&root / "conv1", 2, 6, 3, pad);
    let _ = nn::conv2d(&root / "conv2", 6, 4, 3, ConvConfig { bias: false, ..pad });
    let _ = nn::linear(&root / "fc1", 36, 12, Default::default());
    let _ = nn::linear(&root / "fc2", 12, 3, Default::default());
    vs
}

/// The net's forward from its variables; `tp` puts the region operators where the plan
/// split the layers (and fc2's bias after the reduction).
fn forward(
    w: &HashMap<String, Tensor>,
    x: &Tensor,
    tp: Option<&std::sync::Arc<dist::ProcessGroup>>,
) -> Tensor {
    let f = |t: &Tensor| tp.map_or_else(|| t.shallow_clone(), |g| dist::copy_to_region(t, g).unwrap());
    let g = |t: &Tensor| tp.map_or_else(|| t.shallow_clone(), |g| dist::reduce_from_region(t, g).unwrap());
    let conv = |t: &Tensor, name: &str, bias: bool| {
        let b = bias.then(|| &w[&format!("{name}.bias")]);
        t.conv2d(&w[&format!("{name}.weight")], b, [1, 1], [1, 1], [1, 1], 1)
    };
    let h = conv(&f(x), "conv1", true).relu();
    let h = g(&conv(&h, "conv2", false)).flatten(1, -1);
    let h = (f(&h).matmul(&w["fc1.weight"].tr()) + &w["fc1.bias"]).relu();
    g(&h.matmul(&w["fc2.weight"].tr())) + &w["fc2.bias"]
}

/// `parallelize_module` on a net every rank initialised from its own seed: the split
/// net must compute what TP rank 0's whole net computes (its weights are the ones
/// taken, `src_data_rank=0`), gradients included, and bad plans are refused.
fn plan_scenario() {
    init_env(TIMEOUT);
    let group = dist::default_group().unwrap();
    let rank = group.rank() as i64;
    let split = net(100 + rank);
    let bad = dist::parallelize_module(&split, &group, &[("fc3", Colwise)]).unwrap_err();
    assert!(bad.message().contains("no parameter under \"fc3\""), "{bad}");
    let twice = dist::parallelize_module(&split, &group, &[("fc1", Colwise), ("fc1.weight", Rowwise)]);
    assert!(twice.unwrap_err().message().contains("two entries"));
    let plan = [("conv1", Colwise), ("conv2", Rowwise), ("fc1", Colwise), ("fc2", Rowwise)];
    dist::parallelize_module(&split, &group, &plan).unwrap();
    let whole = net(100); // rank 0's
    let x = Tensor::randn([2, 2, 3, 3], (Kind::Float, Device::Cpu));
    let mut x0 = x.copy();
    group.broadcast(&mut x0, 0).unwrap(); // the same batch on every TP rank
    let (ws, ww) = (split.variables(), whole.variables());
    let (ys, yw) = (forward(&ws, &x0, Some(&group)), forward(&ww, &x0, None));
    (&ys * &ys).sum(Kind::Float).backward();
    (&yw * &yw).sum(Kind::Float).backward();
    assert!(max_diff(&ys, &yw) <= TOLERANCE, "rank {rank}: output differs by {}", max_diff(&ys, &yw));
    let world = group.world_size() as i64;
    for (name, dim) in [
        ("conv1.weight", Some(0)),
        ("conv1.bias", Some(0)),
        ("conv2.weight", Some(1)),
        ("fc1.weight", Some(0)),
        ("fc1.bias", Some(0)),
        ("fc2.weight", Some(1)),
        ("fc2.bias", None),
    ] {
        let (mine, full) = (&ws[name], &ww[name]);
        let slice = |t: &Tensor| match dim {
            Some(d) => t.chunk(world, d)[rank as usize].shallow_clone(),
            None => t.shallow_clone(),
        };
        assert_eq!(mine.size(), slice(full).size(), "rank {rank}: {name}'s shape");
        assert!(max_diff(mine, &slice(full)) == 0.0, "rank {rank}: {name} is not rank 0's slice");
        let diff = max_diff(&mine.grad(), &slice(&full.grad()));
        assert!(diff <= TOLERANCE, "rank {rank}: {name}'s gradient differs by {diff}");
    }
    dist::destroy_process_group().unwrap();
}

/// The lab's WideResNet (narrow) split over the TP group by labkit against the whole
/// one: the logits and the gradients of a split conv, a split BatchNorm, a row-parallel
/// conv and the replicated head agree with the whole model's. In eval mode (no dropout
/// masks, running statistics), where one forward is the same computation in another
/// order.
fn wrn_scenario() {
    use tch::nn::ModuleT;
    init_env(TIMEOUT);
    let group = dist::default_group().unwrap();
    let (rank, world) = (group.rank() as i64, group.world_size() as i64);
    let (split_vs, whole_vs) = (nn::VarStore::new(Device::Cpu), nn::VarStore::new(Device::Cpu));
    tch::manual_seed(7);
    let split = labkit::WideResNet::tensor_parallel(&split_vs, labkit::Widths::NARROW, &group).unwrap();
    tch::manual_seed(7);
    let whole = labkit::WideResNet::new(&whole_vs.root(), labkit::Widths::NARROW, labkit::Norm::BatchNorm);
    let images = Tensor::rand([4, 1, 28, 28], (Kind::Float, Device::Cpu));
    let (ys, yw) = (split.forward_t(&images, false), whole.forward_t(&images, false));
    (&ys * &ys).sum(Kind::Float).backward();
    (&yw * &yw).sum(Kind::Float).backward();
    let diff = max_diff(&ys, &yw);
    println!("rank {rank}: logits differ by {diff:.2e}");
    assert!(diff <= WRN_TOLERANCE, "rank {rank}: the split WideResNet's logits differ by {diff}");
    let (ws, ww) = (split_vs.variables(), whole_vs.variables());
    for (name, dim) in [
        ("block1.cbr1.conv.weight", Some(0)),
        ("block1.cbr1.bn.weight", Some(0)),
        ("block4.cbr2.conv.weight", Some(1)),
        ("block4.cbr2.bn.bias", None),
        ("fc.weight", None),
        ("stem.conv.weight", None),
    ] {
        let slice = |t: &Tensor| match dim {
            Some(d) => t.chunk(world, d)[rank as usize].shallow_clone(),
            None => t.shallow_clone(),
        };
        assert_eq!(ws[name].size(), slice(&ww[name]).size(), "rank {rank}: {name}'s shape");
        let diff = max_diff(&ws[name].grad(), &slice(&ww[name].grad()));
        println!("rank {rank}: {name}'s gradient differs by {diff:.2e}");
        assert!(diff <= WRN_TOLERANCE, "rank {rank}: {name}'s gradient differs by {diff}");
    }
    dist::destroy_process_group().unwrap();
}

fn run(world: usize, scenarios: &[&str]) {
    for scenario in scenarios {
        let outcomes = run_ranks(
            scenario,
            env_ranks(0..world, world, child_process::free_port().unwrap()),
            &[],
            DEADLINE,
        );
        assert_all_ok(&outcomes);
    }
}

#[test]
fn megatron_splits_on_two_ranks_equal_the_whole_models() {
    run(2, &["mlp", "regions", "plan", "wrn"]);
}

#[test]
fn megatron_splits_on_three_ranks_equal_the_whole_models() {
    // Not the WideResNet: its narrow widths (16, 32, 64) do not split three ways.
    run(3, &["mlp", "regions", "plan"]);
}
