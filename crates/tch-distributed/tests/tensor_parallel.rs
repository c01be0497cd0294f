//! Tensor parallelism's region operators across real processes (Gloo): a two-layer MLP
//! split Megatron's way over 2 and 3 ranks (the first layer column-parallel behind
//! `copy_to_region`, the second row-parallel before `reduce_from_region`) against the
//! whole MLP, which every rank also runs on its own from the same seed. Output, loss and
//! every gradient (the input's included) must agree to float32 rounding; without
//! `copy_to_region` the input's gradient is only this rank's part, and the test shows it.
mod common;

use std::time::Duration;

use common::*;
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

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("mlp", mlp_scenario)]);
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

fn run(world: usize) {
    let outcomes =
        run_ranks("mlp", env_ranks(0..world, world, child_process::free_port().unwrap()), &[], DEADLINE);
    assert_all_ok(&outcomes);
}

#[test]
fn a_megatron_split_mlp_on_two_ranks_equals_the_whole_mlp() {
    run(2);
}

#[test]
fn a_megatron_split_mlp_on_three_ranks_equals_the_whole_mlp() {
    run(3);
}
