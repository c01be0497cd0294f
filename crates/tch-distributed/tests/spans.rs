//! The timeline on real processes (CPU, Gloo): with it on, DDP times each gradient
//! bucket's all-reduce through a communication hook, every backward pass reduces every
//! bucket once, the collectives the program issues are timed, and the hook leaves the
//! training bit-for-bit what it is without it (on 3 ranks, where scaling by 1/3 and
//! dividing by 3 could differ).
mod common;

use std::time::Duration;

use common::*;
use dist::spans::{self, Arg, Lane};
use dist::{DdpOptions, DistributedDataParallel};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    common::init_env(Duration::from_secs(60));
    run_scenario(&[("timeline", timeline_scenario)]);
}

#[derive(Debug)]
struct Net {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    fc: nn::Linear,
}

impl ModuleT for Net {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.apply(&self.conv1).relu().apply(&self.conv2).relu().flatten(1, -1).apply(&self.fc)
    }
}

fn build(seed: i64) -> (nn::VarStore, Net) {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(Device::Cpu);
    let p = vs.root();
    let conv =
        |p, i, o, stride| nn::conv2d(p, i, o, 3, nn::ConvConfig { stride, padding: 1, ..Default::default() });
    let net = Net {
        conv1: conv(&p / "conv1", 1, 4, 1),
        conv2: conv(&p / "conv2", 4, 8, 2),
        fc: nn::linear(&p / "fc", 8 * 4 * 4, 10, Default::default()),
    };
    (vs, net)
}

/// Small buckets, so that the little model has several (fc.weight alone is 5 kB).
fn options() -> DdpOptions {
    DdpOptions { bucket_cap_mb: 0.002, first_bucket_cap_mb: 0.001, ..DdpOptions::default() }
}

const STEPS: i64 = 3;

/// Trains `STEPS` SGD steps of DDP from rank 0's weights on this rank's share of fixed
/// batches; after each backward pass, `after_backward` sees the model.
fn train(
    ddp: &DistributedDataParallel<Net>,
    vs: &nn::VarStore,
    mut after_backward: impl FnMut(&DistributedDataParallel<Net>),
) {
    let rank = dist::get_rank().unwrap() as i64;
    let mut opt = nn::Sgd::default().build(vs, 0.1).unwrap();
    for step in 0..STEPS {
        tch::manual_seed(500 + step * 10 + rank);
        let x = Tensor::randn([4, 1, 8, 8], (Kind::Float, Device::Cpu));
        let y = Tensor::randint(10, [4], (Kind::Int64, Device::Cpu));
        let loss = ddp.forward_t(&x, true).cross_entropy_for_logits(&y);
        opt.zero_grad();
        loss.backward();
        after_backward(ddp);
        opt.step();
    }
}

fn timeline_scenario() {
    let rank = dist::get_rank().unwrap() as i64;
    // Without the timeline: the Reducer's own all-reduce.
    let (plain_vs, plain_net) = build(7 + 100 * rank);
    let plain = DistributedDataParallel::new(plain_net, &plain_vs, options()).unwrap();
    train(&plain, &plain_vs, |_| {});
    assert!(spans::take().is_empty(), "nothing is recorded while the timeline is off");

    // With it: the timing hook.
    spans::start();
    let (timed_vs, timed_net) = build(7 + 100 * rank);
    let timed = DistributedDataParallel::new(timed_net, &timed_vs, options()).unwrap();
    let mut layouts = 0;
    let mut backward = 0;
    train(&timed, &timed_vs, |ddp| {
        let events = spans::take();
        layouts += events.iter().filter(|e| e.name == "DDP buckets").count();
        let buckets: Vec<_> = events.iter().filter(|e| e.name.starts_with("all_reduce bucket")).collect();
        let expected = ddp.buckets().unwrap();
        assert!(expected.len() > 1, "the small caps make several buckets: {expected:?}");
        // Every bucket reduced exactly once in this backward pass, with its own size.
        let mut indices: Vec<usize> = buckets
            .iter()
            .map(|e| match e.lane {
                Lane::Bucket(i) => i,
                other => panic!("a bucket on lane {other:?}"),
            })
            .collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..expected.len()).collect::<Vec<_>>(), "backward {backward}: {buckets:?}");
        for e in &buckets {
            let Lane::Bucket(i) = e.lane else { unreachable!() };
            let params = expected[i].len() as i64;
            let bytes: i64 = expected[i].iter().map(|&p| ddp.parameters()[p].1.numel() as i64 * 4).sum();
            assert!(e.args.contains(&("params", Arg::Int(params))), "{e:?}");
            assert!(e.args.contains(&("bytes", Arg::Int(bytes))), "{e:?}");
            assert!(e.dur_us.is_some_and(|d| d >= 0.0) && e.start_us > 1.6e15, "{e:?}");
        }
        backward += 1;
    });
    assert_eq!(backward, STEPS);
    // The layout at construction, and again when the first forward regrouped the buckets.
    assert!(layouts >= 1, "DDP's bucket layout is on the timeline");

    // The hook changed nothing: bit-identical weights.
    let plain_vars = plain_vs.variables();
    for (name, t) in timed_vs.variables() {
        assert!(t.equal(&plain_vars[&name]), "rank {rank}: {name} differs with the timing hook");
    }

    // Collectives the program issues are timed from the call until they returned.
    dist::barrier().unwrap();
    let mut sum = Tensor::from_slice(&[1.0f64]);
    dist::all_reduce(&mut sum, dist::ReduceOp::Sum).unwrap();
    let events = spans::take();
    let collective = |name: &str| {
        events
            .iter()
            .find(|e| e.name == name && e.lane == Lane::Collectives)
            .unwrap_or_else(|| panic!("no {name} in {events:?}"))
    };
    assert!(collective("barrier").dur_us.is_some());
    assert!(collective("all_reduce").args.contains(&("reduce_op", Arg::Text("SUM".into()))));
}

#[test]
fn ddp_buckets_are_timed_and_the_hook_changes_no_bit() {
    let world = 3;
    let outcomes = run_ranks(
        "timeline",
        env_ranks(0..world, world, child_process::free_port().unwrap()),
        &[],
        Duration::from_secs(240),
    );
    assert_all_ok(&outcomes);
}
