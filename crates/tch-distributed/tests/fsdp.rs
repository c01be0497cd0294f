//! FSDP (`FullyShard`) against DDP on real Gloo ranks: a small WideResNet-like conv net
//! with BatchNorm and residual blocks (dim 0 sizes the world size does not divide, so
//! shards are padded), SGD with momentum. After K steps the gathered weights must equal
//! DDP's; each rank must hold about 1/N of the parameters, gradients and optimizer
//! variables (measured from its tensors), the full parameters of at most the root and
//! one block at a time (measured from their storages), and issue exactly FSDP2's
//! collectives: an all-gather before each block's forward and backward, one
//! reduce-scatter per block of the right size, no all-reduce.
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed::debug::{CollectiveCall, CollectiveOp};
use tch_distributed::{self as dist, DdpOptions, DistributedDataParallel, FsdpOptions, FullyShard};

const DEADLINE: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(60);
const STEPS: i64 = 3;
const BATCH: i64 = 4;
const BLOCKS: [&str; 3] = ["block1", "block2", "block3"];

#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("fsdp_vs_ddp", fsdp_vs_ddp_scenario), ("wide_resnet", wide_resnet_scenario)]);
}

/// conv3×3 (no bias) → BatchNorm → ReLU, as the lab's cbr.
#[derive(Debug)]
struct Cbr {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl Cbr {
    fn new(p: nn::Path, cin: i64, cout: i64) -> Cbr {
        let cfg = nn::ConvConfig { padding: 1, bias: false, ..Default::default() };
        Cbr {
            conv: nn::conv2d(&p / "conv", cin, cout, 3, cfg),
            bn: nn::batch_norm2d(&p / "bn", cout, Default::default()),
        }
    }
}

impl ModuleT for Cbr {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        xs.apply(&self.conv).apply_t(&self.bn, train).relu()
    }
}

/// The lab's residual block: cbr → cbr, plus a 1×1 conv shortcut when the width changes.
#[derive(Debug)]
struct Block {
    first: Cbr,
    second: Cbr,
    shortcut: Option<nn::Conv2D>,
}

impl Block {
    fn new(p: nn::Path, cin: i64, cout: i64) -> Block {
        Block {
            first: Cbr::new(&p / "cbr1", cin, cout),
            second: Cbr::new(&p / "cbr2", cout, cout),
            shortcut: (cin != cout).then(|| nn::conv2d(&p / "shortcut", cin, cout, 1, Default::default())),
        }
    }
}

impl ModuleT for Block {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let main = self.second.forward_t(&self.first.forward_t(xs, train), train);
        match &self.shortcut {
            Some(conv) => main + xs.apply(conv),
            None => main + xs,
        }
    }
}

/// stem → block1 (4→7) → block2 (7→7) → max pool → block3 (7→5) → average → linear 5→10.
#[derive(Debug)]
struct Net {
    stem: Cbr,
    blocks: Vec<Box<dyn ModuleT>>,
    fc: nn::Linear,
}

impl ModuleT for Net {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut x = self.stem.forward_t(xs, train);
        for (i, block) in self.blocks.iter().enumerate() {
            if i == 2 {
                x = x.max_pool2d_default(2);
            }
            x = block.forward_t(&x, train);
        }
        x.mean_dim([2i64, 3].as_slice(), false, Kind::Float).apply(&self.fc)
    }
}

/// The model on `vs`, each block passed through `wrap` as it is made (where FSDP
/// shards it). Every rank draws different initial weights: both wrappers must start
/// from rank 0's.
fn build(vs: &nn::VarStore, rank: usize, wrap: &dyn Fn(Block, &str) -> Box<dyn ModuleT>) -> Net {
    tch::manual_seed(10 + rank as i64);
    let root = vs.root();
    let stem = Cbr::new(&root / "stem", 1, 4);
    let widths = [(4, 7), (7, 7), (7, 5)];
    let blocks = BLOCKS
        .iter()
        .zip(widths)
        .map(|(name, (cin, cout))| wrap(Block::new(&root / *name, cin, cout), name))
        .collect();
    Net { stem, blocks, fc: nn::linear(&root / "fc", 5, 10, Default::default()) }
}

/// Rank `rank`'s batch at `step`: the same for DDP and FSDP.
fn batch(step: i64, rank: usize) -> (Tensor, Tensor) {
    tch::manual_seed(1000 + 10 * step + rank as i64);
    let images = Tensor::rand([BATCH, 1, 12, 12], (Kind::Float, Device::Cpu));
    let labels = Tensor::randint(10, [BATCH], (Kind::Int64, Device::Cpu));
    (images, labels)
}

fn sgd() -> nn::Sgd {
    nn::Sgd { momentum: 0.9, ..Default::default() }
}

/// Elements of each unit's shards on one rank: each parameter's torch.chunk size
/// (ceil(dim0 / world)) times its row, summed; the root takes what no block took.
fn unit_shard_numels(params: &[(String, Vec<i64>)], world: i64) -> Vec<(String, i64)> {
    let shard = |shape: &Vec<i64>| (shape[0] + world - 1) / world * shape[1..].iter().product::<i64>();
    let mut units: Vec<(String, i64)> = BLOCKS
        .iter()
        .map(|b| {
            let n = params
                .iter()
                .filter(|(name, _)| name.starts_with(&format!("{b}.")))
                .map(|(_, s)| shard(s))
                .sum();
            (b.to_string(), n)
        })
        .collect();
    let root = params.iter().filter(|(name, _)| !BLOCKS.iter().any(|b| name.starts_with(&format!("{b}."))));
    units.push(("root".into(), root.map(|(_, s)| shard(s)).sum()));
    units
}

fn fsdp_vs_ddp_scenario() {
    let seen: Arc<Mutex<Vec<CollectiveCall>>> = Arc::default();
    let sink = seen.clone();
    assert!(dist::debug::set_collective_observer(move |call| sink.lock().unwrap().push(call.clone())));
    init_env(TIMEOUT);
    let rank = dist::get_rank().unwrap();
    let world = dist::get_world_size().unwrap() as i64;

    // DDP: the reference.
    let ddp_vs = nn::VarStore::new(Device::Cpu);
    let net = build(&ddp_vs, rank, &|block, _| Box::new(block));
    let ddp = DistributedDataParallel::new(net, &ddp_vs, DdpOptions::default()).unwrap();
    let mut ddp_opt = sgd().build(&ddp_vs, 0.05).unwrap();
    let mut ddp_losses = Vec::new();
    for step in 0..STEPS {
        let (images, labels) = batch(step, rank);
        let loss = ddp.forward_t(&images, true).cross_entropy_for_logits(&labels);
        ddp_opt.backward_step(&loss);
        ddp_losses.push(loss.double_value(&[]));
    }
    let params: Vec<(String, Vec<i64>)> = {
        let mut named: Vec<(String, Tensor)> =
            ddp_vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named.into_iter().map(|(n, t)| (n, t.size())).collect()
    };
    let model_numel: i64 = params.iter().map(|(_, s)| s.iter().product::<i64>()).sum();
    let full_bytes = |prefix: &str| -> i64 {
        params
            .iter()
            .filter(|(n, _)| {
                if prefix.is_empty() {
                    !BLOCKS.iter().any(|b| n.starts_with(&format!("{b}.")))
                } else {
                    n.starts_with(&format!("{prefix}."))
                }
            })
            .map(|(_, s)| s.iter().product::<i64>() * 4)
            .sum()
    };

    // FSDP on a second VarStore built from the same seeds.
    let fsdp_vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::new(&fsdp_vs, FsdpOptions::default()).unwrap();
    let net = build(&fsdp_vs, rank, &|block, name| Box::new(fsdp.fully_shard(block, name).unwrap()));
    let model = fsdp.fully_shard(net, "").unwrap();
    let mut opt = sgd().build(fsdp.shards().unwrap(), 0.05).unwrap();

    let units = unit_shard_numels(&params, world);
    // units() lists the fully_shard calls, blocks then root, with their sizes.
    let listed: Vec<(String, i64, i64)> =
        fsdp.units().into_iter().map(|u| (u.prefix, u.numel, u.shard_numel)).collect();
    let expected: Vec<(String, i64, i64)> = units
        .iter()
        .map(|(name, shard)| {
            let prefix = if name == "root" { String::new() } else { name.clone() };
            (prefix.clone(), full_bytes(&prefix) / 4, *shard)
        })
        .collect();
    assert_eq!(listed, expected, "FullyShard::units");
    let numel_of = |unit: &str| units.iter().find(|(n, _)| n == unit).unwrap().1;
    let before_steps = seen.lock().unwrap().len();
    for step in 0..STEPS {
        let (images, labels) = batch(step, rank);
        fsdp.reset_peak();
        let logits = model.forward_t(&images, true);
        // After forward only the root (which FSDP2 never reshards after forward) holds
        // its full parameters: every block's were freed.
        let after_forward = fsdp.memory().unwrap();
        assert_eq!(
            after_forward.unsharded_bytes,
            full_bytes(""),
            "step {step}: full bytes held after forward"
        );
        let loss = logits.cross_entropy_for_logits(&labels);
        opt.backward_step(&loss);
        let memory = fsdp.memory().unwrap();
        assert_eq!(memory.unsharded_bytes, 0, "step {step}: every full parameter freed after backward");
        let largest_block = BLOCKS.iter().map(|b| full_bytes(b)).max().unwrap();
        assert_eq!(
            memory.peak_unsharded_bytes,
            full_bytes("") + largest_block,
            "step {step}: at most the root and one block unsharded at a time"
        );
        let diff = (loss.double_value(&[]) - ddp_losses[step as usize]).abs();
        assert!(diff <= 1e-5, "step {step}: FSDP's loss differs from DDP's by {diff}");
    }

    // What this rank holds: about 1/N of the model, measured from its tensors.
    let memory = fsdp.memory().unwrap();
    let shard_numel: i64 = units.iter().map(|(_, n)| n).sum();
    assert_eq!(memory.model_numel, model_numel);
    assert_eq!(memory.shard_numel, shard_numel);
    assert_eq!(memory.shard_bytes, shard_numel * 4);
    assert_eq!(memory.grad_bytes, memory.shard_bytes, "gradients: one per shard element");
    let optimizer_numel: i64 =
        fsdp.shards().unwrap().trainable_variables().iter().map(|t| t.numel() as i64).sum();
    assert_eq!(optimizer_numel, shard_numel, "the optimizer's variables are the shards");
    // P / N, plus at most world - 1 padding rows per parameter (this model's widths are
    // chosen odd, so padding is a visible share of it; the lab's are even).
    let padding_bound: i64 = params.iter().map(|(_, s)| (world - 1) * s[1..].iter().product::<i64>()).sum();
    assert!(shard_numel * world - model_numel <= padding_bound, "{shard_numel} x {world} vs {model_numel}");
    let share = shard_numel as f64 / model_numel as f64;
    println!(
        "rank {rank}: holds {shard_numel} of {model_numel} parameters ({share:.3}); DDP holds all {model_numel} and as many gradients"
    );

    // The collectives of the training steps, in order, with their sizes.
    let calls: Vec<(CollectiveOp, i64)> =
        seen.lock().unwrap()[before_steps..].iter().map(|c| (c.op, c.numel)).collect();
    let ag = |unit: &str| (CollectiveOp::AllGatherIntoTensor, numel_of(unit));
    let rs = |unit: &str| (CollectiveOp::ReduceScatterTensor, numel_of(unit) * world);
    let one_step = vec![
        // Forward: the root, then each block just before it runs.
        ag("root"),
        ag("block1"),
        ag("block2"),
        ag("block3"),
        // Backward: each block gathered again before its backward, its gradients
        // reduce-scattered after; the root's last, once the stem's are in.
        ag("block3"),
        rs("block3"),
        ag("block2"),
        rs("block2"),
        ag("block1"),
        rs("block1"),
        rs("root"),
    ];
    let want: Vec<(CollectiveOp, i64)> = (0..STEPS).flat_map(|_| one_step.clone()).collect();
    assert_eq!(calls, want, "rank {rank}: FSDP's collectives");
    assert!(
        !calls.iter().any(|(op, _)| *op == CollectiveOp::AllReduce),
        "FSDP must not all-reduce the model"
    );

    // The weights gathered on rank 0 equal DDP's after the same steps.
    let state = fsdp.full_state_dict().unwrap();
    assert_eq!(state.is_some(), rank == 0);
    if let Some(state) = state {
        let reference = ddp_vs.variables();
        let mut worst = 0f64;
        for (name, _) in &params {
            let (_, gathered) =
                state.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} missing"));
            let diff = (gathered - &reference[name]).abs().max().double_value(&[]);
            worst = worst.max(diff);
        }
        assert!(worst <= 1e-5, "FSDP's weights differ from DDP's by {worst} after {STEPS} steps");
        // Buffers come along for a checkpoint.
        assert!(state.iter().any(|(n, _)| n == "block1.cbr1.bn.running_mean"));
        println!("max |FSDP - DDP| after {STEPS} steps: {worst:e}");
    }
    dist::destroy_process_group().unwrap();
}

/// The lab's narrow WideResNet (173,778 parameters), sharded per block as FSDP2 is
/// applied (`WideResNet::new_wrapped`: each block through `fully_shard` as it is
/// built, then the root), against DDP: the same weights after K steps, half the
/// parameters per rank on 2 ranks, and never more than the root and one block
/// unsharded at a time.
fn wide_resnet_scenario() {
    init_env(TIMEOUT);
    let rank = dist::get_rank().unwrap();
    let world = dist::get_world_size().unwrap() as i64;
    let build = |vs: &nn::VarStore| {
        tch::manual_seed(20 + rank as i64);
        labkit::WideResNet::new(&vs.root(), labkit::Widths::NARROW, labkit::Norm::BatchNorm)
    };
    let batch = |step: i64| {
        tch::manual_seed(2000 + 10 * step + rank as i64);
        let images = Tensor::rand([8, 1, 28, 28], (Kind::Float, Device::Cpu));
        (images, Tensor::randint(10, [8], (Kind::Int64, Device::Cpu)))
    };
    let ddp_vs = nn::VarStore::new(Device::Cpu);
    let ddp = DistributedDataParallel::new(build(&ddp_vs), &ddp_vs, DdpOptions::default()).unwrap();
    let mut ddp_opt = nn::Sgd::default().build(&ddp_vs, 0.02).unwrap();
    for step in 0..2 {
        let (images, labels) = batch(step);
        // Dropout draws from the global generator: the same masks in both runs.
        tch::manual_seed(step);
        ddp_opt.backward_step(&ddp.forward_t(&images, true).cross_entropy_for_logits(&labels));
    }

    let vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::new(&vs, FsdpOptions::default()).unwrap();
    tch::manual_seed(20 + rank as i64);
    let mut blocks = Vec::new();
    let net = labkit::WideResNet::new_wrapped(
        &vs.root(),
        labkit::Widths::NARROW,
        labkit::Norm::BatchNorm,
        |block, name| {
            blocks.push(name.to_string());
            Box::new(fsdp.fully_shard(block, name).unwrap())
        },
    );
    assert_eq!(blocks, labkit::model::BLOCKS, "every block sharded on its own");
    let model = fsdp.fully_shard(net, "").unwrap();
    let mut opt = nn::Sgd::default().build(fsdp.shards().unwrap(), 0.02).unwrap();
    // Full bytes of the parameters under a prefix ("": the root's, what no block holds).
    let full_bytes = |prefix: &str| -> i64 {
        let in_unit = |name: &str| {
            if prefix.is_empty() {
                !blocks.iter().any(|b| name.starts_with(&format!("{b}.")))
            } else {
                name.starts_with(&format!("{prefix}."))
            }
        };
        ddp_vs
            .variables()
            .iter()
            .filter(|(n, t)| t.requires_grad() && in_unit(n))
            .map(|(_, t)| t.numel() as i64 * 4)
            .sum()
    };
    let largest_block = blocks.iter().map(|b| full_bytes(b)).max().unwrap();
    for step in 0..2 {
        let (images, labels) = batch(step);
        tch::manual_seed(step);
        fsdp.reset_peak();
        opt.backward_step(&model.forward_t(&images, true).cross_entropy_for_logits(&labels));
        assert_eq!(
            fsdp.memory().unwrap().peak_unsharded_bytes,
            full_bytes("") + largest_block,
            "step {step}: the root and at most one block unsharded at a time"
        );
    }
    let memory = fsdp.memory().unwrap();
    assert_eq!(memory.model_numel, 173_778);
    // Every dim 0 of the narrow model is even: exactly half each on 2 ranks.
    if world == 2 {
        assert_eq!(memory.shard_numel, 173_778 / 2);
    }
    assert_eq!((memory.grad_bytes, memory.unsharded_bytes), (memory.shard_bytes, 0));
    println!("rank {rank}: WideResNet shard {} of {} parameters", memory.shard_numel, memory.model_numel);
    if let Some(state) = fsdp.full_state_dict().unwrap() {
        let reference = ddp_vs.variables();
        let mut worst = 0f64;
        for (name, gathered) in &state {
            let diff = (gathered - &reference[name]).abs().max().double_value(&[]);
            worst = worst.max(diff);
        }
        assert_eq!(state.len(), reference.len(), "every parameter and buffer");
        assert!(worst <= 1e-5, "FSDP's WideResNet differs from DDP's by {worst}");
        println!("WideResNet: max |FSDP - DDP| after 2 steps: {worst:e}");
    }
    dist::destroy_process_group().unwrap();
}

/// A group of one rank: FSDP is plain training, bit for bit, whether blocks reshard
/// after forward or keep their parameters until backward.
#[test]
fn one_rank_fsdp_is_plain_training() {
    one_rank_fsdp(true);
    one_rank_fsdp(false);
}

fn one_rank_fsdp(reshard_after_forward: bool) {
    let group = Arc::new(single_rank_group(None));
    let plain_vs = nn::VarStore::new(Device::Cpu);
    let plain = build(&plain_vs, 0, &|block, _| Box::new(block));
    let mut plain_opt = sgd().build(&plain_vs, 0.05).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let options = FsdpOptions { reshard_after_forward, ..FsdpOptions::default() };
    let fsdp = FullyShard::with_group(&vs, group, options).unwrap();
    let net = build(&vs, 0, &|block, name| Box::new(fsdp.fully_shard(block, name).unwrap()));
    let model = fsdp.fully_shard(net, "").unwrap();
    let mut opt = sgd().build(fsdp.shards().unwrap(), 0.05).unwrap();
    let model_bytes = fsdp.memory().unwrap().model_numel * 4;
    for step in 0..STEPS {
        let (images, labels) = batch(step, 0);
        plain_opt.backward_step(&plain.forward_t(&images, true).cross_entropy_for_logits(&labels));
        let logits = model.try_forward_t(&images, true).unwrap();
        // Without resharding every block keeps its parameters until its backward.
        let held = fsdp.memory().unwrap().unsharded_bytes;
        assert_eq!(
            held == model_bytes,
            !reshard_after_forward,
            "{held} of {model_bytes} bytes held after forward"
        );
        opt.backward_step(&logits.cross_entropy_for_logits(&labels));
        assert_eq!(fsdp.memory().unwrap().unsharded_bytes, 0);
    }
    let (images, _) = batch(STEPS, 0);
    // Evaluation without autograd: every full parameter, the root's too, freed after.
    let (want, got) = tch::no_grad(|| (plain.forward_t(&images, false), model.forward_t(&images, false)));
    assert!(got.equal(&want), "eval outputs differ");
    assert_eq!(fsdp.memory().unwrap().unsharded_bytes, 0);
    let state = fsdp.full_state_dict().unwrap().expect("rank 0 gets the state");
    let reference = plain_vs.variables();
    for (name, t) in &state {
        assert!(t.equal(&reference[name]), "{name} differs");
    }
}

/// On one rank the reduce-scatter sums one gradient: a divide factor of 2 halves it,
/// which for SGD without momentum is plain training at half the learning rate.
#[test]
fn the_gradient_divide_factor_divides_the_gradients() {
    let group = Arc::new(single_rank_group(None));
    let plain_vs = nn::VarStore::new(Device::Cpu);
    let plain = build(&plain_vs, 0, &|block, _| Box::new(block));
    let mut plain_opt = nn::Sgd::default().build(&plain_vs, 0.025).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let options = FsdpOptions { gradient_divide_factor: Some(2.0), ..FsdpOptions::default() };
    let fsdp = FullyShard::with_group(&vs, group, options).unwrap();
    let net = build(&vs, 0, &|block, name| Box::new(fsdp.fully_shard(block, name).unwrap()));
    let model = fsdp.fully_shard(net, "").unwrap();
    let mut opt = nn::Sgd::default().build(fsdp.shards().unwrap(), 0.05).unwrap();
    for step in 0..STEPS {
        let (images, labels) = batch(step, 0);
        plain_opt.backward_step(&plain.forward_t(&images, true).cross_entropy_for_logits(&labels));
        opt.backward_step(&model.forward_t(&images, true).cross_entropy_for_logits(&labels));
    }
    let reference = plain_vs.variables();
    for (name, t) in fsdp.full_state_dict().unwrap().expect("rank 0 gets the state") {
        assert!(t.allclose(&reference[&name], 1e-6, 1e-7, false), "{name} differs");
    }
    // Refused: a factor that is no number to divide by.
    for bad in [0.0, -1.0, f64::NAN] {
        let options = FsdpOptions { gradient_divide_factor: Some(bad), ..FsdpOptions::default() };
        let e = FullyShard::with_group(&vs, Arc::new(single_rank_group(None)), options).unwrap_err();
        assert!(e.message().contains("gradient_divide_factor"), "{e}");
    }
}

/// An optimizer on anything but this rank's shards is refused before it steps: on the
/// model's VarStore it would step the full parameters FSDP frees (a crash, SIGSEGV, in
/// the lab's loop, which reads them), on another FullyShard's shards it would train
/// another model.
#[test]
fn an_optimizer_not_on_the_shards_is_refused_before_it_steps() {
    let group = Arc::new(single_rank_group(None));
    let vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::with_group(&vs, group.clone(), FsdpOptions::default()).unwrap();
    let net = build(&vs, 0, &|block, name| Box::new(fsdp.fully_shard(block, name).unwrap()));
    let _model = fsdp.fully_shard(net, "").unwrap();

    let on_shards = sgd().build(fsdp.shards().unwrap(), 0.05).unwrap();
    fsdp.check_optimizer(&on_shards).unwrap();

    let on_the_model = sgd().build(&vs, 0.05).unwrap();
    let e = fsdp.check_optimizer(&on_the_model).unwrap_err();
    assert_eq!(e.kind(), dist::ErrorKind::InvalidArgument);
    assert!(
        e.message().contains("the optimizer steps on ")
            && e.message().contains("of the model's full parameters"),
        "{e}"
    );
    assert!(e.message().contains("nn::Sgd::default().build(fsdp.shards()?, lr)"), "names the fix: {e}");

    let other_vs = nn::VarStore::new(Device::Cpu);
    let other = FullyShard::with_group(&other_vs, group, FsdpOptions::default()).unwrap();
    let other_net = build(&other_vs, 0, &|block, name| Box::new(other.fully_shard(block, name).unwrap()));
    let _other_model = other.fully_shard(other_net, "").unwrap();
    let on_other_shards = sgd().build(other.shards().unwrap(), 0.05).unwrap();
    let e = fsdp.check_optimizer(&on_other_shards).unwrap_err();
    assert!(e.message().contains("not this FullyShard's shards"), "{e}");

    let empty = nn::VarStore::new(Device::Cpu);
    let on_nothing = sgd().build(&empty, 0.05).unwrap();
    let e = fsdp.check_optimizer(&on_nothing).unwrap_err();
    assert!(e.message().contains("steps on none of"), "{e}");
}

/// What `fully_shard` cannot do is refused with what to do instead.
#[test]
fn fully_shard_refuses_what_it_cannot_shard() {
    let group = Arc::new(single_rank_group(None));
    let vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::with_group(&vs, group.clone(), FsdpOptions::default()).unwrap();
    let a = nn::linear(vs.root() / "a", 4, 3, Default::default());
    let scale = vs.root().var("scale", &[], nn::Init::Const(1.0));
    let _a = fsdp.fully_shard(a, "a").unwrap();
    let e = fsdp.fully_shard(nn::seq(), "a").unwrap_err();
    assert!(e.message().contains("fully_shard(\"a\"): no parameter left under \"a\""), "{e}");
    assert!(e.message().contains("(e.g. \"scale\")"), "{e}");
    let e = fsdp.shards().unwrap_err();
    assert!(e.message().contains("1 parameter(s), e.g. \"scale\", belong to no fully_shard call"), "{e}");
    let e = fsdp.fully_shard(nn::seq(), "").unwrap_err();
    assert!(e.message().contains("\"scale\" is a scalar"), "{e}");
    drop(scale);

    let vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::with_group(&vs, group.clone(), FsdpOptions::default()).unwrap();
    let _b = nn::linear(vs.root() / "b", 2, 2, Default::default());
    let _ = vs.root().sub("b").add("extra", Tensor::ones([2], (Kind::Double, Device::Cpu)), true);
    let e = fsdp.fully_shard(nn::seq(), "b").unwrap_err();
    assert!(
        e.message().contains("\"b.extra\" is Double on Cpu: the parameters of one fully_shard call"),
        "{e}"
    );
    let _root = fsdp.fully_shard(nn::seq(), "").unwrap_err();

    let vs = nn::VarStore::new(Device::Cpu);
    let fsdp = FullyShard::with_group(&vs, group, FsdpOptions::default()).unwrap();
    let c = nn::linear(vs.root() / "c", 2, 2, Default::default());
    let _root = fsdp.fully_shard(c, "").unwrap();
    let e = fsdp.fully_shard(nn::seq(), "c").unwrap_err();
    assert!(e.message().contains("the root is already sharded"), "{e}");
}

#[test]
fn wide_resnet_equals_ddp_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("wide_resnet", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn fsdp_equals_ddp_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("fsdp_vs_ddp", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn fsdp_equals_ddp_on_3_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("fsdp_vs_ddp", env_ranks(0..3, 3, port), &[], DEADLINE));
}
