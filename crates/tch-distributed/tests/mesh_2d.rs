//! DDP over "dp" × tensor parallelism over "tp" on a 2 × 2 device mesh of 4 Gloo ranks
//! (step 16's library side). The mesh's groups are PyTorch's (TP {0,1},{2,3}, DP
//! {0,2},{1,3}, made in that order on every rank, as the group observer reports them).
//! labkit's narrow WideResNet under TP over "tp", wrapped in DDP over "dp", each DP rank
//! on its own batches and TP peers on the same ones, trains a few SGD steps; its weights,
//! gathered over TP, are compared with the whole model's trained
//!
//! - with per-rank BatchNorm: by DDP over the DP group (2 ranks), and by one rank that
//!   averages the two DP ranks' batch losses (each batch normalised alone, as DDP's
//!   ranks do);
//! - with SyncBatchNorm over the DP group: by one rank on the two batches concatenated
//!   (SyncBatchNorm's definition: the statistics of the global batch).
//!
//! Meanwhile TP's collectives (six all-reduces forward, six backward) go to the TP group
//! only and DDP's to the DP group only, none to the world. Misuse is an error on every
//! rank, never a panic or a wait: a mesh that is not the world, widths the TP group
//! cannot split, TP peers fed batches of different sizes (a forward error, also under DDP).
//!
//! The ranks run with the checker's equivalence switch (`DDP_LAB_EQUIVALENCE=1`): no
//! dropout, whose masks are drawn per process. The references are the model cut into
//! two pipeline stages, which the switch leaves with the BatchNorm asked for.
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use labkit::{Model, Norm, TensorParallelNorm, WideResNet, Widths};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(60);
const SEED: i64 = 5;
const STEPS: i64 = 3;
/// Images per DP rank and step.
const BATCH: i64 = 8;
const LR: f64 = 0.01;
/// float32 sums in other orders (convolutions split over channels and all-reduced,
/// gradients averaged by DDP rather than by one loss), relative to each parameter's
/// scale. Measured on these ranks: after one step at most 3e-8 (float32 rounding of the
/// weights), both norms; after three, 6e-8 with SyncBatchNorm over the 16 images of the
/// two DP ranks and 3.9e-6 with per-rank BatchNorm, whose statistics over 8 images
/// amplify each step's rounding into the next (at 4 images and a learning rate of 0.05
/// the same rounding grows to 5e-3 in three steps: hence this batch and rate). 2e-5
/// leaves room for another machine's reduction order and is still far below what a
/// wrong split, a missing all-reduce or gradients averaged over the wrong group make
/// (1e-3 and more after one step).
const TOLERANCE: f64 = 2e-5;

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[
        ("per_rank_norm", || train_and_compare(false)),
        ("sync_norm", || train_and_compare(true)),
        ("misuse", misuse_scenario),
        ("traced", traced_scenario),
    ]);
}

/// What the observers saw: every group made or numbered, every collective issued.
#[derive(Default)]
struct Seen {
    groups: Vec<dist::debug::GroupCreation>,
    calls: Vec<dist::debug::CollectiveCall>,
}

fn observe() -> Arc<Mutex<Seen>> {
    let seen: Arc<Mutex<Seen>> = Default::default();
    let (groups, calls) = (seen.clone(), seen.clone());
    assert!(dist::debug::set_group_observer(move |g| groups.lock().unwrap().groups.push(g.clone())));
    assert!(dist::debug::set_collective_observer(move |c| calls.lock().unwrap().calls.push(c.clone())));
    seen
}

/// The 2 × 2 mesh, after checking that every rank made PyTorch's groups in PyTorch's
/// order: the default group 0, then DP's rows {0,2} and {1,3}, then TP's {0,1} and
/// {2,3}, each numbered on every rank and joined by its members.
fn mesh(seen: &Mutex<Seen>) -> dist::DeviceMesh {
    let mesh = dist::init_device_mesh(Device::Cpu, &[2, 2], &["dp", "tp"]).unwrap();
    let rank = dist::get_rank().unwrap();
    let member = |ranks: &[usize]| ranks.iter().position(|&r| r == rank);
    let want: Vec<dist::debug::GroupCreation> = [
        (0, vec![0, 1, 2, 3], None),
        (1, vec![0, 2], Some("dp")),
        (2, vec![1, 3], Some("dp")),
        (3, vec![0, 1], Some("tp")),
        (4, vec![2, 3], Some("tp")),
    ]
    .into_iter()
    .map(|(group, ranks, dim)| dist::debug::GroupCreation {
        group,
        rank: member(&ranks),
        ranks,
        mesh_dim: dim.map(String::from),
    })
    .collect();
    assert_eq!(seen.lock().unwrap().groups, want, "rank {rank}: the mesh's groups");
    let (dp, tp) = (mesh.get_group("dp").unwrap(), mesh.get_group("tp").unwrap());
    assert_eq!((dp.group_name(), tp.group_name()), ((1 + rank % 2).to_string(), (3 + rank / 2).to_string()));
    mesh
}

/// DP rank `dp_rank`'s batch of step `step`: images in [0, 1] and labels.
fn batch(step: i64, dp_rank: usize) -> (Tensor, Tensor) {
    tch::manual_seed(1000 + 10 * step + dp_rank as i64);
    let images = Tensor::rand([BATCH, 1, 28, 28], (Kind::Float, Device::Cpu));
    let labels = Tensor::randint(10, [BATCH], (Kind::Int64, Device::Cpu));
    (images, labels)
}

/// The whole model as two pipeline stages on one VarStore: the plain blocks, the
/// initial weights [`WideResNet::new`] draws from the seed, and the BatchNorm asked for
/// (a whole model would get SyncBatchNorm over the world under the equivalence switch).
#[derive(Debug)]
struct Whole(WideResNet, WideResNet);

impl Whole {
    fn new(vs: &nn::VarStore) -> Whole {
        tch::manual_seed(SEED);
        let first = WideResNet::stage(&vs.root(), Widths::NARROW, Norm::BatchNorm, 0..5);
        tch::manual_seed(SEED);
        let second = WideResNet::stage(&vs.root(), Widths::NARROW, Norm::BatchNorm, 5..10);
        Whole(first, second)
    }
}

impl ModuleT for Whole {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.1.forward_t(&self.0.forward_t(xs, train), train)
    }
}

/// `loss` of each step, then an SGD step on `vs`.
fn train(vs: &nn::VarStore, mut loss: impl FnMut(i64) -> Tensor) {
    let mut sgd = nn::Sgd::default().build(vs, LR).unwrap();
    for step in 0..STEPS {
        sgd.backward_step(&loss(step));
    }
}

/// max|got - want| / max(1, max|want|).
fn max_diff(got: &Tensor, want: &Tensor) -> f64 {
    let scale = want.abs().max().double_value(&[]).max(1.0);
    (got - want).abs().max().double_value(&[]) / scale
}

fn train_and_compare(sync: bool) {
    let seen = observe();
    init_env(TIMEOUT);
    let mesh = mesh(&seen);
    let (dp, tp) = (mesh.get_group("dp").unwrap(), mesh.get_group("tp").unwrap());
    let dp_rank = mesh.get_local_rank("dp").unwrap();
    let rank = dist::get_rank().unwrap();
    let what = if sync { "SyncBatchNorm over dp" } else { "per-rank BatchNorm" };
    seen.lock().unwrap().calls.clear();

    // DDP over "dp" × TP over "tp".
    let vs = nn::VarStore::new(Device::Cpu);
    tch::manual_seed(SEED);
    let norm = if sync { TensorParallelNorm::SyncBatchNorm(dp.clone()) } else { TensorParallelNorm::PerRank };
    let net = WideResNet::tensor_parallel_with(&vs, Widths::NARROW, &tp, norm).unwrap();
    let model =
        dist::DistributedDataParallel::with_group(net, &vs, dp.clone(), dist::DdpOptions::default()).unwrap();
    train(&vs, |step| {
        let (images, labels) = batch(step, dp_rank);
        model.forward(&images, true).unwrap().cross_entropy_for_logits(&labels)
    });
    let calls = std::mem::take(&mut seen.lock().unwrap().calls);
    let on = |group: &dist::ProcessGroup| -> Vec<&dist::debug::CollectiveCall> {
        calls.iter().filter(|c| c.group.to_string() == group.group_name()).collect()
    };
    let (on_tp, on_dp) = (on(&tp), on(&dp));
    assert_eq!(on_tp.len() + on_dp.len(), calls.len(), "rank {rank}: collectives outside the mesh's groups");
    // parallelize_module's broadcasts of TP rank 0's weights (each block's first conv,
    // its BatchNorm's weight, bias and running statistics, the second conv: 6 tensors),
    // then per step and block reduce_from_region in forward, copy_to_region in backward.
    let described: Vec<String> = on_tp.iter().map(|c| c.describe()).collect();
    let (plan, steps) = described.split_at(described.len().min(36));
    assert!(plan.iter().all(|d| d.starts_with("broadcast(root=0) Float[")), "rank {rank}: {plan:?}");
    assert_eq!(steps.len() as i64, 12 * STEPS, "rank {rank}: TP's all-reduces in {STEPS} steps: {steps:?}");
    assert!(steps.iter().all(|d| d.starts_with("all_reduce(op=SUM) Float[")), "rank {rank}: {steps:?}");
    // DDP's check and broadcast of the replicas, then its buffers' broadcast before each
    // forward (its gradient all-reduces are c10d's own, unobserved: the weights below
    // show which group averaged them).
    use dist::debug::CollectiveOp as Op;
    assert_eq!(on_dp.len() as i64, 2 + STEPS, "rank {rank}: DDP's calls on the DP group");
    assert!(
        on_dp.iter().all(|c| matches!(c.op, Op::VerifyParamsAcrossProcesses | Op::BroadcastCoalesced)),
        "rank {rank}: on the DP group only DDP's own calls: {:?}",
        on_dp.iter().map(|c| c.describe()).collect::<Vec<_>>()
    );
    drop(model);

    // The references, on this rank alone or over the DP group.
    let references: Vec<(&str, nn::VarStore)> = if sync {
        let one = nn::VarStore::new(Device::Cpu);
        let whole = Whole::new(&one);
        train(&one, |step| {
            let ((x0, y0), (x1, y1)) = (batch(step, 0), batch(step, 1));
            whole
                .forward_t(&Tensor::cat(&[x0, x1], 0), true)
                .cross_entropy_for_logits(&Tensor::cat(&[y0, y1], 0))
        });
        vec![("one rank on the concatenated batch", one)]
    } else {
        let ddp_vs = nn::VarStore::new(Device::Cpu);
        let ddp = dist::DistributedDataParallel::with_group(
            Whole::new(&ddp_vs),
            &ddp_vs,
            dp.clone(),
            Default::default(),
        )
        .unwrap();
        train(&ddp_vs, |step| {
            let (images, labels) = batch(step, dp_rank);
            ddp.try_forward_t(&images, true).unwrap().cross_entropy_for_logits(&labels)
        });
        drop(ddp);
        let one = nn::VarStore::new(Device::Cpu);
        let whole = Whole::new(&one);
        train(&one, |step| {
            let losses: Vec<Tensor> = (0..2)
                .map(|d| {
                    let (images, labels) = batch(step, d);
                    whole.forward_t(&images, true).cross_entropy_for_logits(&labels)
                })
                .collect();
            (&losses[0] + &losses[1]) / 2.0
        });
        vec![("DDP of the whole model over dp", ddp_vs), ("one rank averaging the batches' losses", one)]
    };

    // This rank's parameters, the split ones gathered over TP, in one order on every rank.
    let mine: HashMap<String, Tensor> =
        vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
    let mut names: Vec<&String> = mine.keys().collect();
    names.sort();
    for (reference, ref_vs) in &references {
        let theirs = ref_vs.variables();
        assert_eq!(theirs.len(), vs.variables().len(), "rank {rank}: the same variables as {reference}");
        let mut worst = (0.0, String::new());
        for name in &names {
            let (got, want) = (&mine[*name], &theirs[*name]);
            let got = match (0..got.dim()).find(|&d| got.size()[d] != want.size()[d]) {
                Some(dim) => dist::gather_from_region(&got.detach(), dim as i64, &tp).unwrap(),
                None => got.detach(),
            };
            let diff = max_diff(&got, want);
            assert!(
                diff <= TOLERANCE,
                "rank {rank}, {what}: {name} differs from {reference}'s by {diff:.2e}"
            );
            if diff >= worst.0 {
                worst = (diff, name.to_string());
            }
        }
        println!("rank {rank}, {what}: against {reference}, at most {:.2e} ({})", worst.0, worst.1);
    }
    dist::destroy_process_group().unwrap();
}

/// Each misuse an error with what to do (exit code 2 for bad input), on every rank.
fn misuse_scenario() {
    let _seen = observe();
    init_env(TIMEOUT);
    let not_the_world = dist::init_device_mesh(Device::Cpu, &[3, 2], &["dp", "tp"]).unwrap_err();
    assert!(
        not_the_world.message().contains("dp=3 x tp=2 holds 6 ranks but the world has 4"),
        "{not_the_world}"
    );
    assert_eq!(not_the_world.exit_code(), 2);
    let mesh = dist::init_device_mesh(Device::Cpu, &[2, 2], &["dp", "tp"]).unwrap();
    let tp = mesh.get_group("tp").unwrap();

    // 63 channels in the last blocks: two TP ranks cannot split them.
    let vs = nn::VarStore::new(Device::Cpu);
    let uneven = WideResNet::tensor_parallel(&vs, Widths([8, 16, 32, 63]), &tp).unwrap_err();
    assert!(
        uneven.message().contains("has 63 along dimension 0, which 2 ranks cannot split evenly"),
        "{uneven}"
    );
    assert_eq!(uneven.exit_code(), 2);

    // TP peers on batches of different sizes (data sharded over the world, the last
    // batch short): the first all-reduce's check fails on both; the forward says so.
    let vs = nn::VarStore::new(Device::Cpu);
    tch::manual_seed(SEED);
    let net = WideResNet::tensor_parallel(&vs, Widths::NARROW, &tp).unwrap();
    let size = 4 - mesh.get_local_rank("tp").unwrap() as i64;
    let images = Tensor::rand([size, 1, 28, 28], (Kind::Float, Device::Cpu));
    let failed = net.forward(&images, true).unwrap_err().to_string();
    assert!(failed.contains("the ranks' collectives do not match"), "{failed}");
    assert!(failed.contains("all_reduce(op=SUM) Float["), "{failed}");
    // The failure is taken: the model's next forward, on matching batches, is whole.
    let images = Tensor::rand([2, 1, 28, 28], (Kind::Float, Device::Cpu));
    assert_eq!(net.try_forward_t(&images, true).unwrap().size(), [2, 10]);
    // The same under DDP over "dp", whose forward cannot see inside the model's: the
    // error still comes back from the lab's forward, not as a panic.
    let dp = mesh.get_group("dp").unwrap();
    let model = dist::DistributedDataParallel::with_group(net, &vs, dp, Default::default()).unwrap();
    let images = Tensor::rand([size, 1, 28, 28], (Kind::Float, Device::Cpu));
    let failed = model.forward(&images, true).unwrap_err().to_string();
    assert!(failed.contains("the ranks' collectives do not match"), "{failed}");
    drop(model);
    dist::destroy_process_group().unwrap();
}

/// Under the lab's trace (`DDP_LAB_TRACE`): the mesh and the 2-D model built, one
/// forward and the epoch's record, for the test to read what each rank recorded.
fn traced_scenario() {
    assert!(labkit::trace::enabled(), "the trace is on: its observers are installed");
    init_env(TIMEOUT);
    let mesh = dist::init_device_mesh(Device::Cpu, &[2, 2], &["dp", "tp"]).unwrap();
    let (dp, tp) = (mesh.get_group("dp").unwrap(), mesh.get_group("tp").unwrap());
    let vs = nn::VarStore::new(Device::Cpu);
    tch::manual_seed(SEED);
    let norm = TensorParallelNorm::SyncBatchNorm(dp);
    let net = WideResNet::tensor_parallel_with(&vs, Widths::NARROW, &tp, norm).unwrap();
    let (images, _) = batch(0, mesh.get_local_rank("dp").unwrap());
    assert_eq!(net.try_forward_t(&images, true).unwrap().size(), [BATCH, 10]);
    // What `labkit::train` does after an epoch: every rank records its slices.
    let optimizer = nn::Sgd::default().build(&vs, LR).unwrap();
    labkit::Model::after_epoch(&net, 0, &optimizer).unwrap();
    dist::destroy_process_group().unwrap();
}

fn run_with(scenario: &str, env: &[(&str, &str)]) {
    let port = child_process::free_port().unwrap();
    let mut shared = vec![(labkit::EQUIVALENCE_ENV, "1")];
    shared.extend_from_slice(env);
    let outcomes = run_ranks(scenario, env_ranks(0..4, 4, port), &shared, DEADLINE);
    assert_all_ok(&outcomes);
}

fn run(scenario: &str) {
    run_with(scenario, &[]);
}

/// Each rank's trace names every group with its ranks and mesh dimension, and each
/// variable's slice it holds after an epoch (`tensor_slices`, with its TP group's
/// number): the dimension, where its part starts, and the whole.
#[test]
fn the_trace_tells_the_mesh_groups_and_the_slices_apart() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mesh-2d-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    run_with("traced", &[(labkit::trace::TRACE_ENV, dir.to_str().unwrap())]);
    // One file per process; the default group's event is recorded before the process
    // knows its rank (the group is being made), so the file, not the line, tells whose.
    let mut by_rank: HashMap<u64, Vec<serde_json::Value>> = HashMap::new();
    for file in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        let records: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let rank = records.iter().find_map(|r| r["rank"].as_u64()).expect("a line with the rank");
        by_rank.insert(rank, records);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(by_rank.len(), 4, "a trace from every rank");
    for (rank, records) in by_rank {
        let of = |event: &str| -> Vec<&serde_json::Value> {
            records.iter().filter(|r| r["event"] == event).collect()
        };
        let groups: Vec<String> = of("group_created")
            .iter()
            .map(|g| format!("{} {} {} {}", g["group"], g["ranks"], g["group_rank"], g["mesh_dim"]))
            .collect();
        // This rank's place in a group it belongs to, "null" in the others.
        let place = |member: bool, at: u64| if member { at.to_string() } else { "null".to_string() };
        assert_eq!(
            groups,
            [
                format!("0 [0,1,2,3] {rank} null"),
                format!("1 [0,2] {} \"dp\"", place(rank % 2 == 0, rank / 2)),
                format!("2 [1,3] {} \"dp\"", place(rank % 2 == 1, rank / 2)),
                format!("3 [0,1] {} \"tp\"", place(rank / 2 == 0, rank % 2)),
                format!("4 [2,3] {} \"tp\"", place(rank / 2 == 1, rank % 2)),
            ],
            "rank {rank}'s groups"
        );
        let held = of("tensor_slices");
        assert_eq!(held.len(), 1, "rank {rank}: one epoch's slices");
        let tp_group = 3 + rank / 2;
        assert_eq!(held[0]["group"].as_u64(), Some(tp_group), "rank {rank}: its TP group's number");
        let slices: Vec<&serde_json::Value> =
            held[0]["parameters"].as_array().unwrap().iter().filter(|p| !p["dim"].is_null()).collect();
        // Per block: the first conv, its BatchNorm's weight, bias and running statistics,
        // the second conv's weight; nothing of the replicated layers.
        assert_eq!(slices.len(), 6 * 6, "rank {rank}'s slices");
        let tp_rank = (rank % 2) as i64;
        for (parameter, dim, whole) in [
            ("block1.cbr1.conv.weight", 0, 16),
            ("block3.cbr1.bn.running_var", 0, 32),
            ("block6.cbr2.conv.weight", 1, 64),
        ] {
            let slice = slices.iter().find(|s| s["name"] == parameter).unwrap();
            let d = dim as usize;
            assert_eq!(
                (
                    slice["dim"].as_u64(),
                    slice["offset"].as_i64(),
                    slice["length"].as_i64(),
                    slice["whole"][d].as_i64()
                ),
                (Some(dim), Some(tp_rank * whole / 2), Some(whole / 2), Some(whole)),
                "rank {rank}: {parameter}'s slice"
            );
        }
        assert!(slices.iter().all(|s| !s["name"].as_str().unwrap().contains("shortcut")));
    }
}

#[test]
fn ddp_over_dp_times_tp_equals_ddp_of_the_whole_model() {
    run("per_rank_norm");
}

#[test]
fn sync_batch_norm_over_dp_equals_one_rank_on_the_whole_batch() {
    run("sync_norm");
}

#[test]
fn a_mesh_or_a_split_that_cannot_be_made_is_an_error_on_every_rank() {
    run("misuse");
}
