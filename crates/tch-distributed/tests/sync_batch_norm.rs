//! SyncBatchNorm across real processes (Gloo) against tch's own `nn::batch_norm2d` run by
//! each process on the whole (concatenated) batch: the expected values always come from
//! that independent implementation, never from SyncBatchNorm's formulas.
//!
//! Errors are measured relative to the reference's scale: max|got - want| / max(1, max|want|).
mod common;

use std::time::Duration;

use common::*;
use dist::{ErrorKind, ReduceOp, SyncBatchNorm};
use tch::nn::{self, BatchNormConfig, ModuleT};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(60);
const C: i64 = 3;
const H: i64 = 5;
const W: i64 = 4;
const STEPS: i64 = 2;

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[
        ("train", train_scenario),
        ("single", single_scenario),
        ("eval_alone", eval_alone_scenario),
    ]);
}

fn init_env() {
    common::init_env(TIMEOUT);
}

fn config(affine: bool) -> BatchNormConfig {
    // Not the defaults, so that a layer ignoring them would be caught.
    BatchNormConfig { momentum: 0.3, eps: 1e-3, affine, ..Default::default() }
}

/// The global batch of a step (and the loss weights `g`), the same in every process:
/// channels with different means (one far from zero) and spreads.
fn global_batch(n: i64, step: i64, kind: Kind, device: Device) -> (Tensor, Tensor) {
    tch::manual_seed(1000 + step);
    let opts = (Kind::Double, Device::Cpu);
    let mean = Tensor::from_slice(&[3.0, -2.0, 20.0]).view([1, C, 1, 1]);
    let spread = Tensor::from_slice(&[2.0, 0.5, 1.5]).view([1, C, 1, 1]);
    let x = Tensor::randn([n, C, H, W], opts) * spread + mean;
    let g = Tensor::randn([n, C, H, W], opts);
    (x.to_kind(kind).to_device(device), g.to_kind(kind).to_device(device))
}

/// Gives the layer's four variables fixed non-default values (the same in every process).
fn set_state(ws: Option<&Tensor>, bs: Option<&Tensor>, running_mean: &Tensor, running_var: &Tensor) {
    tch::manual_seed(7);
    let opts = (Kind::Double, Device::Cpu);
    let weight = Tensor::rand([C], opts) + 0.5;
    let bias = Tensor::randn([C], opts) * 0.1;
    let rm = Tensor::randn([C], opts);
    let rv = Tensor::rand([C], opts) + 1.0;
    tch::no_grad(|| {
        let copy = |dst: &Tensor, src: &Tensor| {
            let mut dst = dst.shallow_clone();
            dst.copy_(src);
        };
        if let Some(w) = ws {
            copy(w, &weight);
        }
        if let Some(b) = bs {
            copy(b, &bias);
        }
        copy(running_mean, &rm);
        copy(running_var, &rv);
    });
}

fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.size(), want.size(), "shapes differ");
    if want.numel() == 0 {
        return 0.0;
    }
    let got = got.to_device(Device::Cpu).to_kind(Kind::Double);
    let want = want.to_device(Device::Cpu).to_kind(Kind::Double);
    let diff = (&got - &want).abs().max().double_value(&[]);
    let scale = want.abs().max().double_value(&[]).max(1.0);
    diff / scale
}

fn parse_kind(s: &str) -> Kind {
    match s {
        "f32" => Kind::Float,
        "f64" => Kind::Double,
        other => panic!("unknown kind {other}"),
    }
}

/// Each rank normalises its slice of the global batch (TCHD_SIZES: per-rank batch sizes)
/// for STEPS training steps, with and without affine parameters, and checks the output,
/// the input gradient, the running statistics, the weight/bias gradients summed over
/// ranks, and eval mode afterwards, against tch's batch_norm2d over the whole batch.
/// Then a global batch of one value per channel must fail on every rank alike.
fn train_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap();
    let world = dist::get_world_size().unwrap();
    let sizes: Vec<i64> =
        std::env::var("TCHD_SIZES").unwrap().split(',').map(|s| s.trim().parse().unwrap()).collect();
    assert_eq!(sizes.len(), world, "TCHD_SIZES needs one batch size per rank");
    let kind = parse_kind(&std::env::var("TCHD_KIND").unwrap());
    let device = match std::env::var("TCHD_DEVICE").as_deref() {
        Ok("cuda") => Device::Cuda(0),
        _ => Device::Cpu,
    };
    let tol = match kind {
        Kind::Double => 1e-10,
        _ => 1e-4,
    };
    let total: i64 = sizes.iter().sum();
    let offset: i64 = sizes[..rank].iter().sum();
    let local = sizes[rank];

    for affine in [true, false] {
        let mut vs_ref = nn::VarStore::new(device);
        let bn_ref = nn::batch_norm2d(vs_ref.root() / "bn", C, config(affine));
        let mut vs = nn::VarStore::new(device);
        // Both ways to name the group: the default one at call time, and explicitly.
        let group = if affine { None } else { Some(dist::default_group().unwrap()) };
        let bn = SyncBatchNorm::new(vs.root() / "bn", C, config(affine), group);
        // After creation: tch makes the running statistics f32 whatever the store's kind.
        vs_ref.set_kind(kind);
        vs.set_kind(kind);
        set_state(bn_ref.ws.as_ref(), bn_ref.bs.as_ref(), &bn_ref.running_mean, &bn_ref.running_var);
        set_state(bn.ws.as_ref(), bn.bs.as_ref(), &bn.running_mean, &bn.running_var);

        let mut worst = [0f64; 6];
        for step in 0..STEPS {
            for mut v in vs_ref.trainable_variables().into_iter().chain(vs.trainable_variables()) {
                v.zero_grad();
            }
            let (x, g) = global_batch(total, step, kind, device);

            let xr = x.copy().set_requires_grad(true);
            let yr = bn_ref.forward_t(&xr, true);
            (&yr * &g).sum(kind).backward();

            let xl = x.narrow(0, offset, local).copy().set_requires_grad(true);
            let y = bn.forward_t(&xl, true);
            (&y * g.narrow(0, offset, local)).sum(kind).backward();

            let errs = [
                rel_err(&y, &yr.narrow(0, offset, local)),
                rel_err(&xl.grad(), &xr.grad().narrow(0, offset, local)),
                rel_err(&bn.running_mean, &bn_ref.running_mean),
                rel_err(&bn.running_var, &bn_ref.running_var),
                if affine {
                    rel_err(&summed(bn.ws.as_ref().unwrap().grad()), &bn_ref.ws.as_ref().unwrap().grad())
                } else {
                    0.0
                },
                if affine {
                    rel_err(&summed(bn.bs.as_ref().unwrap().grad()), &bn_ref.bs.as_ref().unwrap().grad())
                } else {
                    0.0
                },
            ];
            let names = ["output", "input grad", "running_mean", "running_var", "weight grad", "bias grad"];
            for (i, e) in errs.iter().enumerate() {
                assert!(
                    *e <= tol,
                    "step {step} affine={affine} {kind:?}: {} differs by {e:e} (tolerance {tol:e})",
                    names[i]
                );
                worst[i] = worst[i].max(*e);
            }
        }
        // Eval mode: running statistics, as plain batch norm (computed in the same op).
        let (x, _) = global_batch(total, STEPS, kind, device);
        let xl = x.narrow(0, offset, local);
        let e = rel_err(&bn.forward_t(&xl, false), &bn_ref.forward_t(&x, false).narrow(0, offset, local));
        assert!(e <= tol, "eval output differs by {e:e}");
        println!(
            "rank {rank}/{world} {kind:?} sizes {sizes:?} affine={affine}: worst relative error over {STEPS} steps: output {:.1e}, input grad {:.1e}, running_mean {:.1e}, running_var {:.1e}, weight grad {:.1e}, bias grad {:.1e}; eval {e:.1e}",
            worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]
        );
    }
    // A global batch of one value per channel cannot be normalised: every rank gets the
    // same error (the check follows the all-reduce), so none is left waiting.
    let vs = nn::VarStore::new(device);
    let bn = SyncBatchNorm::new(vs.root(), C, config(true), None);
    vs.root().set_kind(kind);
    let n = if rank == 0 { 1 } else { 0 };
    let x = Tensor::zeros([n, C, 1, 1], (kind, device));
    let e = bn.try_forward(&x, true).expect_err("one value per channel over all ranks");
    assert!(e.message().contains("more than 1 value per channel when training, got 1 over all ranks"), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    dist::barrier().unwrap();
    dist::destroy_process_group().unwrap();
}

/// The sum over ranks of a local gradient (what DDP's averaging is a multiple of).
fn summed(grad: Tensor) -> Tensor {
    let mut t = grad.copy();
    dist::all_reduce(&mut t, ReduceOp::Sum).unwrap();
    t
}

/// One training step plus an eval pass with both layers, demanding bit-identical
/// outputs, input gradients, parameter gradients and running statistics.
fn assert_same_as_batch_norm(group: Option<std::sync::Arc<dist::ProcessGroup>>, what: &str) {
    for affine in [true, false] {
        let vs_ref = nn::VarStore::new(Device::Cpu);
        let bn_ref = nn::batch_norm2d(vs_ref.root(), C, config(affine));
        let vs = nn::VarStore::new(Device::Cpu);
        let bn = SyncBatchNorm::new(vs.root(), C, config(affine), group.clone());
        set_state(bn_ref.ws.as_ref(), bn_ref.bs.as_ref(), &bn_ref.running_mean, &bn_ref.running_var);
        set_state(bn.ws.as_ref(), bn.bs.as_ref(), &bn.running_mean, &bn.running_var);
        let (x, g) = global_batch(6, 0, Kind::Float, Device::Cpu);
        let xr = x.copy().set_requires_grad(true);
        let xs = x.copy().set_requires_grad(true);
        let yr = bn_ref.forward_t(&xr, true);
        let y = bn.forward_t(&xs, true);
        (&yr * &g).sum(Kind::Float).backward();
        (&y * &g).sum(Kind::Float).backward();
        let ctx = format!("{what}, affine={affine}");
        assert!(y.equal(&yr), "{ctx}: output");
        assert!(xs.grad().equal(&xr.grad()), "{ctx}: input grad");
        assert!(bn.running_mean.equal(&bn_ref.running_mean), "{ctx}: running_mean");
        assert!(bn.running_var.equal(&bn_ref.running_var), "{ctx}: running_var");
        if affine {
            assert!(
                bn.ws.as_ref().unwrap().grad().equal(&bn_ref.ws.as_ref().unwrap().grad()),
                "{ctx}: weight grad"
            );
            assert!(
                bn.bs.as_ref().unwrap().grad().equal(&bn_ref.bs.as_ref().unwrap().grad()),
                "{ctx}: bias grad"
            );
        }
        assert!(bn.forward_t(&x, false).equal(&bn_ref.forward_t(&x, false)), "{ctx}: eval output");
    }
}

/// No process group, then a group of one rank (default and explicit): plain batch norm.
fn single_scenario() {
    assert!(!dist::is_initialized());
    assert_same_as_batch_norm(None, "no process group");
    init_env();
    assert_eq!(dist::get_world_size().unwrap(), 1);
    assert_same_as_batch_norm(None, "default group of one rank");
    assert_same_as_batch_norm(Some(dist::default_group().unwrap()), "explicit group of one rank");
    dist::destroy_process_group().unwrap();
}

/// Rank 1 leaves right after joining; rank 0 then runs SyncBatchNorm in eval mode
/// (forward and backward). Any collective would fail (peer gone) or time out.
fn eval_alone_scenario() {
    init_env();
    let rank = dist::get_rank().unwrap();
    if rank == 1 {
        dist::destroy_process_group().unwrap();
        return;
    }
    // Give rank 1 time to be gone, so a stray collective cannot find it.
    std::thread::sleep(Duration::from_millis(500));
    let vs_ref = nn::VarStore::new(Device::Cpu);
    let bn_ref = nn::batch_norm2d(vs_ref.root(), C, config(true));
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = SyncBatchNorm::new(vs.root(), C, config(true), None);
    set_state(bn_ref.ws.as_ref(), bn_ref.bs.as_ref(), &bn_ref.running_mean, &bn_ref.running_var);
    set_state(bn.ws.as_ref(), bn.bs.as_ref(), &bn.running_mean, &bn.running_var);
    let running = (bn.running_mean.copy(), bn.running_var.copy());
    for step in 0..3 {
        let (x, g) = global_batch(4, step, Kind::Float, Device::Cpu);
        let xs = x.copy().set_requires_grad(true);
        let xr = x.copy().set_requires_grad(true);
        let y = bn.try_forward(&xs, false).expect("eval forward must not communicate");
        let yr = bn_ref.forward_t(&xr, false);
        assert!(y.equal(&yr), "eval output is plain batch norm with running statistics");
        (&y * &g).sum(Kind::Float).backward();
        (&yr * &g).sum(Kind::Float).backward();
        assert!(xs.grad().equal(&xr.grad()), "eval input grad");
    }
    assert!(
        bn.running_mean.equal(&running.0) && bn.running_var.equal(&running.1),
        "eval left the running stats alone"
    );
    // A training pass, by contrast, needs rank 1 and must fail cleanly, not hang or crash.
    let (x, _) = global_batch(4, 0, Kind::Float, Device::Cpu);
    let e = bn.try_forward(&x, true).expect_err("training needs the missing rank");
    println!("training without the peer failed as expected: {e}");
    assert!(
        matches!(e.kind(), ErrorKind::Network | ErrorKind::Backend | ErrorKind::Timeout | ErrorKind::Other),
        "{e:?}"
    );
    assert!(e.message().contains("SyncBatchNorm forward on rank 0 of 2"), "{e}");
    let _ = dist::destroy_process_group();
}

fn run_train(sizes: &str, kind: &str, device: &str) {
    let world = sizes.split(',').count();
    let port = child_process::free_port().unwrap();
    let outcomes = run_ranks(
        "train",
        env_ranks(0..world, world, port),
        &[("TCHD_SIZES", sizes), ("TCHD_KIND", kind), ("TCHD_DEVICE", device)],
        DEADLINE,
    );
    assert_all_ok(&outcomes);
    for o in &outcomes {
        for line in o.output.lines().filter(|l| l.contains("worst relative error")) {
            println!("{line}");
        }
    }
}

#[test]
fn two_ranks_f64_matches_batch_norm_on_the_whole_batch() {
    run_train("4,4", "f64", "cpu");
}

#[test]
fn two_ranks_f32_matches_batch_norm_on_the_whole_batch() {
    run_train("4,4", "f32", "cpu");
}

#[test]
fn three_ranks_f64_with_different_batch_sizes() {
    run_train("3,1,5", "f64", "cpu");
}

#[test]
fn three_ranks_f32_with_different_batch_sizes_and_an_empty_rank() {
    run_train("5,0,2", "f32", "cpu");
}

/// Two ranks on one GPU (Gloo handles CUDA tensors; NCCL refuses two ranks per GPU).
#[test]
fn two_ranks_cuda_f32_when_a_gpu_is_present() {
    if !tch::Cuda::is_available() {
        eprintln!("no CUDA device: skipped");
        return;
    }
    run_train("3,4", "f32", "cuda");
}

#[test]
fn world_of_one_is_exactly_batch_norm() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("single", env_ranks(0..1, 1, port), &[], DEADLINE));
}

#[test]
fn eval_mode_uses_running_stats_and_never_communicates() {
    let port = child_process::free_port().unwrap();
    let outcomes = run_ranks("eval_alone", env_ranks(0..2, 2, port), &[], DEADLINE);
    assert_all_ok(&outcomes);
    for line in outcomes[0].output.lines().filter(|l| l.contains("failed as expected")) {
        println!("{line}");
    }
    // Well under the group timeout: nothing waited for the missing rank.
    assert!(outcomes[0].elapsed < TIMEOUT, "rank 0 took {:?}", outcomes[0].elapsed);
}

/// Same variable names, shapes and (from the same seed) initial values as batch_norm2d,
/// so checkpoints move between the two.
#[test]
fn variables_match_batch_norm2d() {
    for affine in [true, false] {
        let vs_ref = nn::VarStore::new(Device::Cpu);
        let vs = nn::VarStore::new(Device::Cpu);
        tch::manual_seed(3);
        let _bn_ref = nn::batch_norm2d(vs_ref.root() / "layer" / "bn", 5, config(affine));
        tch::manual_seed(3);
        let _bn = dist::sync_batch_norm2d(vs.root() / "layer" / "bn", 5, config(affine));
        let want = vs_ref.variables();
        let got = vs.variables();
        let mut names: Vec<_> = got.keys().cloned().collect();
        names.sort();
        let mut want_names: Vec<_> = want.keys().cloned().collect();
        want_names.sort();
        assert_eq!(names, want_names);
        for (name, t) in &got {
            assert!(t.equal(&want[name]), "{name} differs");
            assert_eq!(t.requires_grad(), want[name].requires_grad(), "{name} trainability");
        }
        assert_eq!(vs.trainable_variables().len(), vs_ref.trainable_variables().len());
    }
}

#[test]
fn rejects_bad_input_with_clear_errors() {
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = dist::sync_batch_norm2d(vs.root(), 3, Default::default());
    let cases: [(Tensor, &str); 4] = [
        (Tensor::zeros([2, 3, 4], (Kind::Float, Device::Cpu)), "expects a 4-D input (N, C, H, W)"),
        (Tensor::zeros([2, 4, 2, 2], (Kind::Float, Device::Cpu)), "built for 3 channels but the input has 4"),
        (Tensor::zeros([2, 3, 2, 2], (Kind::Int64, Device::Cpu)), "expects a floating-point input"),
        (Tensor::zeros([0], (Kind::Float, Device::Cpu)), "expects a 4-D input"),
    ];
    for (x, msg) in cases {
        for train in [true, false] {
            let e = bn.try_forward(&x, train).expect_err(msg);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(msg), "{e}");
        }
    }
}

#[test]
#[should_panic(expected = "SyncBatchNorm expects a 4-D input (N, C, H, W)")]
fn forward_t_panics_with_the_same_message() {
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = dist::sync_batch_norm2d(vs.root(), 3, Default::default());
    let _ = bn.forward_t(&Tensor::zeros([2, 3], (Kind::Float, Device::Cpu)), true);
}
