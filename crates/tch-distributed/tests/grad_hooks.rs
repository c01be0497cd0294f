//! Gradient hooks (`register_hook`, `register_post_accumulate_grad_hook`) and what a
//! hand-written DDP builds with them. In one process: when and how often the hooks run,
//! what they see, a replaced gradient, removal, and a hook's error or panic failing the
//! backward call instead of the process. On 2 Gloo ranks: `examples/bucketed_ddp.rs`'s
//! buckets, launched from post-accumulate-grad hooks, start their all-reduce before
//! backward returns (the timeline and the hooks' count both show it) and average the
//! gradients to one process's on the whole batch. And tch's optimizer on a part of the
//! parameters, which a ZeRO-1 steps on each rank's part.
mod common;

#[allow(dead_code)] // the example's `main` and printing; the test runs its `train`
#[path = "../examples/bucketed_ddp.rs"]
mod bucketed_ddp;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tch::{Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("bucketed", bucketed_scenario)]);
}

/// A two-layer net's parameters (w1, b1, w2, b2) and its loss on fixed data.
fn net() -> Vec<Tensor> {
    tch::manual_seed(0);
    [[5, 3].as_slice(), &[5], &[2, 5], &[2]]
        .iter()
        .map(|shape| Tensor::randn(*shape, (Kind::Float, tch::Device::Cpu)).set_requires_grad(true))
        .collect()
}

fn loss(p: &[Tensor]) -> Tensor {
    let x = Tensor::linspace(-1.0, 1.0, 12, (Kind::Float, tch::Device::Cpu)).view([4, 3]);
    let h = (x.matmul(&p[0].tr()) + &p[1]).relu();
    (h.matmul(&p[2].tr()) + &p[3]).square().sum(Kind::Float)
}

/// What post-accumulate-grad hooks saw: (parameter index, its .grad).
type Seen = Arc<Mutex<Vec<(usize, Vec<f32>)>>>;

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

/// The gradients of one plain backward, without hooks.
fn plain_grads() -> Vec<Vec<f32>> {
    let p = net();
    loss(&p).backward();
    p.iter().map(|t| values(&t.grad())).collect()
}

#[test]
fn post_accumulate_grad_hooks_run_once_per_parameter_after_accumulation_last_layer_first() {
    let p = net();
    let seen: Seen = Arc::default();
    let _handles: Vec<_> = p
        .iter()
        .enumerate()
        .map(|(i, param)| {
            let seen = seen.clone();
            dist::register_post_accumulate_grad_hook(param, move |param| {
                // The parameter itself, its .grad already holding this backward's gradient.
                assert!(param.requires_grad() && param.is_leaf());
                seen.lock().unwrap().push((i, values(&param.grad())));
                Ok(())
            })
            .unwrap()
        })
        .collect();
    let plain = plain_grads();

    loss(&p).backward();
    let first = std::mem::take(&mut *seen.lock().unwrap());
    let order: Vec<usize> = first.iter().map(|(i, _)| *i).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 1, 2, 3], "once per parameter per backward: {order:?}");
    // Backward reaches the second layer's parameters before the first's.
    let last_of_layer_2 = order.iter().rposition(|&i| i >= 2).unwrap();
    let first_of_layer_1 = order.iter().position(|&i| i < 2).unwrap();
    assert!(last_of_layer_2 < first_of_layer_1, "not last layer first: {order:?}");
    for (i, grad) in &first {
        assert_eq!(grad, &plain[*i], "parameter {i}'s hook saw another gradient than backward's");
    }

    // A second backward without zero_grad: the hook sees the sum, accumulated.
    loss(&p).backward();
    let second = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(second.len(), 4);
    for (i, grad) in &second {
        let doubled: Vec<f32> = plain[*i].iter().map(|g| 2.0 * g).collect();
        assert_eq!(grad, &doubled, "parameter {i}: not the accumulated gradient");
    }
}

#[test]
fn a_post_accumulate_grad_hook_does_not_run_for_a_parameter_without_gradient() {
    let p = net();
    let unused = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    let _h = dist::register_post_accumulate_grad_hook(&unused, move |_| {
        *counter.lock().unwrap() += 1;
        Ok(())
    })
    .unwrap();
    loss(&p).backward();
    assert_eq!(*calls.lock().unwrap(), 0);
    assert!(!unused.grad().defined());
}

#[test]
fn register_hook_replaces_the_gradient_of_a_parameter_and_of_an_intermediate() {
    let plain = plain_grads();

    // On a parameter: the doubled gradient is what gets accumulated.
    let p = net();
    let before = Arc::new(Mutex::new(None));
    let record = before.clone();
    let watched = p[2].shallow_clone();
    let _double = dist::register_hook(&p[2], move |grad| {
        // Runs before accumulation: no .grad yet in the first backward.
        *record.lock().unwrap() = Some(watched.grad().defined());
        Ok(Some(grad * 2.0))
    })
    .unwrap();
    loss(&p).backward();
    assert_eq!(*before.lock().unwrap(), Some(false), "the hook ran after the gradient was accumulated");
    let doubled: Vec<f32> = plain[2].iter().map(|g| 2.0 * g).collect();
    assert_eq!(values(&p[2].grad()), doubled);
    assert_eq!(values(&p[0].grad()), plain[0], "another parameter's gradient changed");

    // On an intermediate tensor: what flows back from it is replaced (zeroed here), so
    // the first layer gets no gradient through it; None leaves a gradient as it is.
    let p = net();
    let x = Tensor::linspace(-1.0, 1.0, 12, (Kind::Float, tch::Device::Cpu)).view([4, 3]);
    let h = (x.matmul(&p[0].tr()) + &p[1]).relu();
    let _zero = dist::register_hook(&h, |grad| Ok(Some(grad.zeros_like()))).unwrap();
    let _keep = dist::register_hook(&p[3], |_| Ok(None)).unwrap();
    (h.matmul(&p[2].tr()) + &p[3]).square().sum(Kind::Float).backward();
    assert!(values(&p[0].grad()).iter().all(|&g| g == 0.0), "the replaced gradient did not flow back");
    assert_eq!(values(&p[3].grad()), plain[3]);
}

#[test]
fn a_removed_or_dropped_hook_does_not_run_and_the_others_still_do() {
    let p = net();
    let calls: Arc<Mutex<Vec<&str>>> = Arc::default();
    let hook = |name: &'static str| {
        let calls = calls.clone();
        move |_: &Tensor| {
            calls.lock().unwrap().push(name);
            Ok(())
        }
    };
    let removed = dist::register_post_accumulate_grad_hook(&p[0], hook("removed")).unwrap();
    let kept = dist::register_post_accumulate_grad_hook(&p[0], hook("kept")).unwrap();
    let dropped = dist::register_post_accumulate_grad_hook(&p[0], hook("dropped")).unwrap();
    let calls_in_hook = calls.clone();
    let removed_grad_hook = dist::register_hook(&p[0], move |_| {
        calls_in_hook.lock().unwrap().push("grad hook");
        Ok(Some(Tensor::zeros([5, 3], (Kind::Float, tch::Device::Cpu))))
    })
    .unwrap();
    loss(&p).backward();
    assert_eq!(*calls.lock().unwrap(), ["grad hook", "removed", "kept", "dropped"]);

    calls.lock().unwrap().clear();
    removed.remove();
    drop(dropped);
    removed_grad_hook.remove();
    let _ = p[0].grad().zero_();
    loss(&p).backward();
    assert_eq!(*calls.lock().unwrap(), ["kept"]);
    assert_eq!(values(&p[0].grad()), plain_grads()[0], "the removed gradient hook still zeroes");
    drop(kept);
}

#[test]
fn a_hook_error_or_panic_fails_backward_and_the_process_goes_on() {
    let p = net();
    let failing = dist::register_post_accumulate_grad_hook(&p[1], |_| {
        Err(dist::DistError::new(dist::ErrorKind::Other, "bucket 3 is full twice"))
    })
    .unwrap();
    let err = loss(&p).f_backward().unwrap_err().to_string();
    assert!(err.contains("post-accumulate-grad hook: bucket 3 is full twice"), "{err}");
    failing.remove();

    let panicking = dist::register_hook(&p[3], |_| panic!("hook panicked on purpose")).unwrap();
    let err = loss(&p).f_backward().unwrap_err().to_string();
    assert!(err.contains("gradient hook: hook panicked on purpose"), "{err}");
    // A replacement of the wrong shape is libtorch's error, not a crash.
    panicking.remove();
    let _wrong =
        dist::register_hook(&p[3], |_| Ok(Some(Tensor::zeros([7], (Kind::Float, tch::Device::Cpu)))))
            .unwrap();
    let err = loss(&p).f_backward().unwrap_err().to_string();
    assert!(err.contains("size"), "{err}");
}

#[test]
fn hooks_on_tensors_without_a_gradient_or_a_grad_are_refused() {
    let plain = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu));
    for err in [
        dist::register_hook(&plain, |_| Ok(None)).unwrap_err(),
        dist::register_post_accumulate_grad_hook(&plain, |_| Ok(())).unwrap_err(),
    ] {
        assert_eq!(err.kind(), dist::ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("does not require grad"), "{err}");
    }
    let leaf = plain.set_requires_grad(true);
    let err = dist::register_post_accumulate_grad_hook(&(&leaf * 2), |_| Ok(())).unwrap_err();
    assert_eq!(err.kind(), dist::ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("not a leaf"), "{err}");
}

/// What the README promises a ZeRO-1 for its optimizer: tch's `COptimizer` on a part of
/// the parameters (`add_parameters`) steps that part only, with state of its own, so two
/// optimizers on two halves (two ranks' parts) step as one on the whole does.
#[test]
fn optimizers_on_parts_of_the_parameters_step_as_one_on_the_whole() {
    let sgd = || tch::COptimizer::sgd(0.1, 0.9, 0.0, 0.0, false).unwrap();
    let (whole, parts) = (net(), net());
    let mut one = sgd();
    for t in &whole {
        one.add_parameters(t, 0).unwrap();
    }
    let (mut first, mut second) = (sgd(), sgd());
    for (i, t) in parts.iter().enumerate() {
        if i < 2 { &mut first } else { &mut second }.add_parameters(t, 0).unwrap();
    }
    let untouched = values(&parts[2]);
    for step in 0..3 {
        for (params, opts) in [(&whole, vec![&one]), (&parts, vec![&first, &second])] {
            for opt in &opts {
                opt.zero_grad().unwrap();
            }
            loss(params).backward();
            if step == 0 && opts.len() == 2 {
                // One part steps: the other's parameters stay.
                first.step().unwrap();
                assert_eq!(values(&parts[2]), untouched, "the first part's optimizer moved the second's");
                second.step().unwrap();
            } else {
                for opt in &opts {
                    opt.step().unwrap();
                }
            }
        }
    }
    // Three steps with momentum: the parts' optimizers together are the whole's.
    for (a, b) in whole.iter().zip(&parts) {
        assert_eq!(values(a), values(b));
    }
}

/// The example's DDP on one rank refuses, by name, what PyTorch's refuses: a parameter
/// without a gradient (its bucket never reduced) and a second backward before the
/// gradients were synchronized.
#[test]
fn bucketed_ddp_names_an_unused_parameter_and_a_missed_synchronization() {
    let group = Arc::new(single_rank_group(None));
    let p = net();
    let unused = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let with_unused: Vec<Tensor> = p.iter().chain([&unused]).map(Tensor::shallow_clone).collect();
    let ddp = bucketed_ddp::BucketedDdp::new(group.clone(), &with_unused, 1 << 20).unwrap();
    loss(&p).backward();
    let err = ddp.finish_gradient_synchronization().unwrap_err().to_string();
    assert!(err.contains("bucket 0 was never reduced: 1 of its parameters got no gradient"), "{err}");
    drop(ddp);

    let ddp = bucketed_ddp::BucketedDdp::new(group, &p, 1 << 20).unwrap();
    loss(&p).backward();
    let err = loss(&p).f_backward().unwrap_err().to_string();
    assert!(err.contains("call finish_gradient_synchronization after every backward"), "{err}");
    drop(ddp);
}

fn bucketed_scenario() {
    let args = bucketed_ddp::Args { world_size: 2, steps: 4, batch_size: 16, bucket_cap_kb: 8 };
    let report = bucketed_ddp::train(test_rank(), &args).unwrap();
    // Last parameter first, 8 KiB at most unless one parameter is larger: fc3.bias,
    // fc3.weight and fc2.bias (1,296 bytes); fc2.weight (16 KiB); fc1.bias; fc1.weight.
    assert_eq!((report.params, report.buckets), (6, 4));
    for (step, launches) in report.launches.iter().enumerate() {
        let order: Vec<usize> = launches.iter().map(|l| l.0).collect();
        assert_eq!(order, [0, 1, 2, 3], "step {step}: buckets launched in another order");
        // Bucket 0 (the last layers') went out while gradients were still to come.
        assert!(
            launches[0].1 < report.params,
            "step {step}: bucket 0 waited for every gradient: {launches:?}"
        );
    }
    // The timeline: the first all-reduce starts before backward returns, and its wait
    // returns after: it was in flight while backward went on.
    assert_eq!(report.overlap.len(), args.steps);
    for (step, o) in report.overlap.iter().enumerate() {
        assert!(
            o.overlapped(),
            "step {step}: the first all-reduce ran from {} to {} µs, backward ended at {} µs",
            o.all_reduce_start,
            o.all_reduce_waited,
            o.backward_end
        );
    }
    println!("rank {}: max |diff| {:.1e} {:.1e}", test_rank(), report.max_grad_diff, report.max_param_diff);
    assert!(report.max_grad_diff <= 1e-6, "averaged gradients differ by {}", report.max_grad_diff);
    assert!(report.max_param_diff <= 1e-6, "weights differ by {}", report.max_param_diff);
}

#[test]
fn bucketed_ddp_overlaps_backward_and_averages_like_one_process() {
    let outcomes =
        run_ranks("bucketed", env_ranks(0..2, 2, child_process::free_port().unwrap()), &[], DEADLINE);
    assert_all_ok(&outcomes);
}
