//! GPipe on real Gloo ranks: a model cut into one stage per rank, micro-batches sent
//! forward and gradients back. One step must equal the uncut model's on the same batch
//! (loss and weights), each rank must hold only its stage, and the bubble is measured.
mod common;

use std::time::Duration;

use common::*;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(60);
/// Layer i maps WIDTHS[i] features to WIDTHS[i + 1].
const WIDTHS: [i64; 7] = [12, 16, 16, 12, 8, 8, 5];
const BATCH: i64 = 16;
const MICRO_BATCHES: usize = 4;

#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("gpipe", gpipe_scenario), ("micro_batches_differ", micro_batches_differ)]);
}

/// Layers `range` of the model (each linear + ReLU but the last), on `vs`.
fn layers(vs: &nn::VarStore, range: std::ops::Range<usize>) -> nn::SequentialT {
    let mut seq = nn::seq_t();
    for i in range {
        seq = seq.add(nn::linear(vs.root() / format!("l{i}"), WIDTHS[i], WIDTHS[i + 1], Default::default()));
        if i + 2 < WIDTHS.len() {
            seq = seq.add_fn(|x| x.relu());
        }
    }
    seq
}

fn numel(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(|t| t.numel() as i64).sum()
}

fn gpipe_scenario() {
    init_env(TIMEOUT);
    let (rank, world) = (dist::get_rank().unwrap(), dist::get_world_size().unwrap());
    let n_layers = WIDTHS.len() - 1;
    let mine = rank * n_layers / world..(rank + 1) * n_layers / world;

    // The uncut model, the same on every rank (the reference), and this rank's stage
    // with the same weights.
    tch::manual_seed(3);
    let whole_vs = nn::VarStore::new(Device::Cpu);
    let whole = layers(&whole_vs, 0..n_layers);
    let mut stage_vs = nn::VarStore::new(Device::Cpu);
    let stage = layers(&stage_vs, mine.clone());
    stage_vs.copy(&whole_vs).unwrap();
    let stage_numel = numel(&stage_vs);
    let expected: i64 = mine.clone().map(|i| WIDTHS[i] * WIDTHS[i + 1] + WIDTHS[i + 1]).sum();
    assert_eq!(stage_numel, expected, "rank {rank} holds layers {mine:?} only");
    assert!(stage_numel < numel(&whole_vs));

    tch::manual_seed(5);
    let images = Tensor::randn([BATCH, WIDTHS[0]], (Kind::Float, Device::Cpu));
    let labels = Tensor::randint(WIDTHS[n_layers], [BATCH], (Kind::Int64, Device::Cpu));
    let loss_fn = |logits: &Tensor, y: &Tensor| logits.cross_entropy_for_logits(y);

    let pipeline = dist::Pipeline::new(stage, dist::default_group().unwrap(), MICRO_BATCHES).unwrap();
    let mut opt = nn::Sgd::default().build(&stage_vs, 0.1).unwrap();
    opt.zero_grad();
    // Only the first stage's input and the last stage's targets are read.
    let (input, targets) = (
        if rank == 0 { images.shallow_clone() } else { Tensor::zeros([0], (Kind::Float, Device::Cpu)) },
        if rank + 1 == world {
            labels.shallow_clone()
        } else {
            Tensor::zeros([0], (Kind::Int64, Device::Cpu))
        },
    );
    // The ranks start the step together, so that the bubble measures the schedule, not
    // a rank that was still building its model.
    dist::barrier().unwrap();
    let step = pipeline.train_step(&input, &targets, loss_fn).unwrap();
    opt.step();

    let mut whole_opt = nn::Sgd::default().build(&whole_vs, 0.1).unwrap();
    let whole_loss = whole.forward_t(&images, true);
    let whole_loss = loss_fn(&whole_loss, &labels);
    whole_opt.backward_step(&whole_loss);

    assert_eq!(step.loss.is_some(), rank + 1 == world);
    if let Some(loss) = step.loss {
        let diff = (loss - whole_loss.double_value(&[])).abs();
        assert!(diff <= 1e-5, "the pipeline's loss differs from the uncut model's by {diff}");
    }
    let reference = whole_vs.variables();
    let mut worst = 0f64;
    for (name, t) in stage_vs.variables() {
        worst = worst.max((&t - &reference[&name]).abs().max().double_value(&[]));
    }
    assert!(worst <= 1e-5, "rank {rank}: stage weights differ from the uncut model's by {worst}");
    // The bubble: measured, and GPipe's own figure for this shape.
    assert_eq!((step.stage, step.stages, step.micro_batches), (rank, world, MICRO_BATCHES));
    assert!(step.busy > Duration::ZERO && step.busy <= step.total, "{step:?}");
    let ideal = (world - 1) as f64 / (MICRO_BATCHES + world - 1) as f64;
    assert_eq!(step.ideal_bubble(), ideal);
    println!(
        "stage {rank} of {world}: {stage_numel} parameters, weights within {worst:e} of the uncut model, bubble {:.2} measured ({ideal:.2} in theory)",
        step.bubble()
    );

    // Evaluation: the stages' forwards in turn give the uncut model's output, on the
    // last stage only (each stage takes the uncut model's weights first).
    stage_vs.copy(&whole_vs).unwrap();
    let output = pipeline.eval(&input).unwrap();
    assert_eq!(output.is_some(), rank + 1 == world);
    if let Some(output) = output {
        let expected = tch::no_grad(|| whole.forward_t(&images, false));
        let diff = (&output - &expected).abs().max().double_value(&[]);
        assert!(diff <= 1e-5, "the pipeline's evaluation differs from the uncut model's by {diff}");
    }

    // A batch the micro-batches cannot share is refused before anything is sent.
    if rank == 0 {
        let odd = Tensor::zeros([BATCH + 1, WIDTHS[0]], (Kind::Float, Device::Cpu));
        let e = pipeline.train_step(&odd, &targets, loss_fn).unwrap_err();
        assert!(e.message().contains("17 rows, which 4 micro-batches cannot share equally"), "{e}");
    }
    dist::barrier().unwrap();
    dist::destroy_process_group().unwrap();
}

/// Rank 1 splits its batches in 2, the others in 4: refused on every rank before any
/// activation travels (their sends and receives would not pair up).
fn micro_batches_differ() {
    init_env(TIMEOUT);
    let rank = dist::get_rank().unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let micro_batches = if rank == 1 { 2 } else { 4 };
    let e =
        dist::Pipeline::new(layers(&vs, 0..1), dist::default_group().unwrap(), micro_batches).unwrap_err();
    assert_eq!(e.kind(), dist::ErrorKind::InvalidArgument);
    assert!(
        e.message().contains("different numbers of micro-batches (stage 0: 4, stage 1: 2, stage 2: 4)"),
        "{e}"
    );
    dist::destroy_process_group().unwrap();
}

#[test]
fn stages_that_split_batches_differently_are_refused() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("micro_batches_differ", env_ranks(0..3, 3, port), &[], DEADLINE));
}

#[test]
fn gpipe_step_equals_the_uncut_model_on_2_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("gpipe", env_ranks(0..2, 2, port), &[], DEADLINE));
}

#[test]
fn gpipe_step_equals_the_uncut_model_on_3_ranks() {
    let port = child_process::free_port().unwrap();
    assert_all_ok(&run_ranks("gpipe", env_ranks(0..3, 3, port), &[], DEADLINE));
}
