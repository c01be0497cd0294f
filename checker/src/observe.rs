//! Observation: build the step, run it on several ranks with hidden variations, and
//! gather what happened (processes, outputs, traces). Judging is `checks`' job.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lab_trace::Trace;
use labkit::Placement;
use serde::{Deserialize, Serialize};

use crate::job::{Ended, Launch};
use crate::launch::{self, Build};

/// The hidden variations of one verification, all drawn from the checker's `--seed`
/// (`seed`), the programs' own `--seed` among them (`program_seed`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Variation {
    pub seed: u64,
    pub nodes: usize,
    pub ranks_per_node: usize,
    pub train_subset: usize,
    pub test_subset: usize,
    pub batch_size: usize,
    pub epochs: usize,
    /// The programs' `--seed` (each rank's initial model: this plus its local rank, see
    /// `labkit::SEED_PER_RANK_ENV`). Recorded observations before it had this name call
    /// it `init_seed`.
    #[serde(alias = "init_seed")]
    pub program_seed: u64,
}

impl Variation {
    pub fn for_step(step: u8, seed: u64) -> Variation {
        // SplitMix64: reproducible from the seed, on every machine.
        let mut d = labkit::Rng::new(seed ^ (u64::from(step) << 32));
        let (nodes, ranks_per_node) = match step {
            0 | 1 => (1, 1),
            // Step 4 is about ranks across nodes: two simulated nodes.
            4 => (2, 2),
            2 | 3 | 5..=9 => [(1, 2), (1, 3), (2, 2)][d.below(3) as usize],
            _ => [(1, 2), (1, 3)][d.below(2) as usize],
        };
        let world = nodes * ranks_per_node;
        // Sizes that the world size does not divide exercise the sampler's padding.
        let mut train_subset = 90 + d.below(60) as usize;
        if world > 1 && train_subset.is_multiple_of(world) {
            train_subset += 1;
        }
        let mut test_subset = 40 + d.below(30) as usize;
        if world > 1 && test_subset.is_multiple_of(world) {
            test_subset += 1;
        }
        Variation {
            seed,
            nodes,
            ranks_per_node,
            train_subset,
            test_subset,
            batch_size: 16,
            epochs: 2,
            program_seed: d.below(1_000_000),
        }
    }

    /// The settings of one run of the equivalence comparison: one epoch of exactly one
    /// global batch (no padding, no short batch). One step is the claim; over more
    /// steps float32 rounding (different sums, SyncBatchNorm's gathered statistics)
    /// grows until it hides what is being compared.
    pub fn for_equivalence(&self, nodes: usize, ranks_per_node: usize, batch_size: usize) -> Variation {
        let global_batch = self.batch_size * self.world_size();
        Variation {
            nodes,
            ranks_per_node,
            batch_size,
            train_subset: global_batch,
            test_subset: global_batch,
            epochs: 1,
            ..self.clone()
        }
    }

    /// The settings of step 14's two runs, FSDP and DDP: the main run's world, one
    /// epoch of [`FSDP_STEPS`] full global batches (no padding, no short batch): the
    /// weights of both after K steps are compared to 1e-5, and float32 rounding (a
    /// reduce-scatter sums in another order than DDP's all-reduce) grows with every step.
    pub fn for_fsdp(&self) -> Variation {
        let global_batch = self.batch_size * self.world_size();
        Variation {
            train_subset: FSDP_STEPS * global_batch,
            test_subset: global_batch,
            epochs: 1,
            ..self.clone()
        }
    }

    pub fn world_size(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    pub fn describe(&self) -> String {
        format!(
            "seed {}: {}, {} training and {} validation images, batch {}, {} epochs, program --seed {}",
            self.seed,
            describe_placement(
                placement(self.nodes, self.ranks_per_node, gpus()),
                self.nodes,
                self.ranks_per_node
            ),
            self.train_subset,
            self.test_subset,
            self.batch_size,
            self.epochs,
            self.program_seed
        )
    }
}

/// The training steps (K) of step 14's FSDP and DDP runs.
pub const FSDP_STEPS: usize = 3;

/// Where the verification runs and what it may use.
pub struct Setup {
    /// A fresh directory for this verification's files.
    pub work: PathBuf,
    /// A data directory with the generated stand-in ready (shared, read-only use).
    pub shared_data: PathBuf,
    /// Base URL and manifest of a local mirror serving the stand-in (step 5 on).
    pub mirror: Option<(String, PathBuf)>,
    pub limit: Duration,
    /// The sandbox every run of the step goes into; `None`: the checker's own rights.
    pub confine: Option<crate::confined::Confinement>,
}

/// A process of the main run and what it was.
#[derive(Serialize, Deserialize)]
pub struct RankProcess {
    pub node: usize,
    /// `None` for a self-spawning invocation.
    pub local_rank: Option<usize>,
    pub ended: Ended,
}

/// Everything one verification observed.
#[derive(Serialize, Deserialize)]
pub struct Observation {
    pub step: u8,
    pub variation: Variation,
    pub source: String,
    pub processes: Vec<RankProcess>,
    pub trace: Trace,
    pub port: Option<u16>,
    pub help: Option<Ended>,
    pub bad_value: Option<Ended>,
    pub fail_run: Option<Ended>,
    pub quick_run: Option<Ended>,
    pub downloads: Option<BTreeMap<String, usize>>,
    /// Step 7 on: the N-rank and 1-rank runs of the comparison.
    pub equivalence: Option<Equivalence>,
    /// Step 12 on: a run stopped and resumed, and the same run never stopped.
    #[serde(default)]
    pub resume: Option<ResumeRuns>,
    /// Step 13 on: the model cut into stages, one per rank (`--pipeline`).
    #[serde(default)]
    pub pipeline: Option<PipelineRuns>,
    /// Step 14 on: the program with `--fsdp` and without (DDP), on the same data.
    #[serde(default)]
    pub fsdp: Option<FsdpRuns>,
}

/// Step 13's runs, on the main run's world, every rank seeded alike (`--seed`, so that
/// each stage starts from the uncut model's weights): the pipeline trained with
/// micro-batches; and one step of it with a single micro-batch (BatchNorm then
/// normalises over the batch, as the uncut model does) beside the same step of the
/// uncut model on one rank, dropout off in both.
#[derive(Serialize, Deserialize)]
pub struct PipelineRuns {
    /// The pipelined run's settings.
    pub settings: Variation,
    /// Its `--micro-batches`.
    pub micro_batches: usize,
    pub pipelined: Vec<RankProcess>,
    pub pipelined_trace: Trace,
    /// The one-step comparison's settings (its world is the main run's).
    pub step_settings: Variation,
    pub cut: Vec<RankProcess>,
    pub cut_trace: Trace,
    pub uncut: Vec<RankProcess>,
    pub uncut_trace: Trace,
}

impl PipelineRuns {
    /// Every process of the three runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        self.pipelined.iter().chain(&self.cut).chain(&self.uncut)
    }
}

/// Step 14's two runs: the same program, world, data and seeds, with `--fsdp` and
/// without it (DDP), side by side.
#[derive(Serialize, Deserialize)]
pub struct FsdpRuns {
    /// Their settings ([`Variation::for_fsdp`]).
    pub settings: Variation,
    pub fsdp: Vec<RankProcess>,
    pub fsdp_trace: Trace,
    pub ddp: Vec<RankProcess>,
    pub ddp_trace: Trace,
}

impl FsdpRuns {
    /// Every process of both runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        self.fsdp.iter().chain(&self.ddp)
    }
}

/// The runs that must end with the same weights (step 12): one trains every epoch,
/// the other is stopped after `stopped_after` and resumed with `--resume`.
#[derive(Serialize, Deserialize)]
pub struct ResumeRuns {
    /// Their settings (the main run's world and data, dropout off).
    pub settings: Variation,
    /// The last epoch the stopped run trained.
    pub stopped_after: usize,
    pub uninterrupted: Vec<RankProcess>,
    pub uninterrupted_trace: Trace,
    pub stopped: Vec<RankProcess>,
    pub resumed: Vec<RankProcess>,
    pub resumed_trace: Trace,
}

impl ResumeRuns {
    /// Every process of the three runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        self.uninterrupted.iter().chain(&self.stopped).chain(&self.resumed)
    }
}

/// The two runs that must train to the same weights.
#[derive(Serialize, Deserialize)]
pub struct Equivalence {
    /// The N-rank run's settings.
    pub settings: Variation,
    pub many: Vec<RankProcess>,
    pub many_trace: Trace,
    pub one: Vec<RankProcess>,
    pub one_trace: Trace,
}

/// A free port for a run's rendezvous; the lab's default port if none can be found.
fn rendezvous_port() -> u16 {
    launcher::free_port().unwrap_or(29_500)
}

/// Where the ranks of each node of a run compute, by labkit's placement rule (the
/// programs' own) applied to the GPUs the node sees ([`node_gpus`]): a GPU per rank when
/// there is one for each, shared GPUs when there are fewer, the CPU without GPUs.
/// Simulated nodes share this machine; with fewer GPUs than nodes they all see every
/// GPU, and their ranks share them over Gloo when they outnumber them, or use the CPU
/// when they do not (the programs would then choose NCCL, which refuses two ranks of
/// one job on one GPU).
pub fn placement(nodes: usize, ranks_per_node: usize, gpus: usize) -> Placement {
    match node_gpus(0, nodes, gpus) {
        Some(own) => Placement::for_gpus(ranks_per_node, own.len()),
        None if nodes == 1 || ranks_per_node > gpus => Placement::for_gpus(ranks_per_node, gpus),
        None => Placement::Cpu,
    }
}

/// The GPUs simulated node `node` of `nodes` sees (positions among this machine's):
/// its own equal share, as a real node has its own GPUs, so that two nodes' local rank
/// 0 never land on one GPU. `None`: every GPU (one node, or fewer GPUs than nodes).
pub fn node_gpus(node: usize, nodes: usize, gpus: usize) -> Option<std::ops::Range<usize>> {
    let share = gpus / nodes.max(1);
    (nodes > 1 && share > 0).then(|| node * share..(node + 1) * share)
}

/// `CUDA_VISIBLE_DEVICES` for a node that sees `own` of this machine's GPUs: their
/// positions, or the entries at those positions of the checker's own
/// `CUDA_VISIBLE_DEVICES` when it has one (e.g. "2,3" makes position 0 GPU 2).
fn visible_devices(own: std::ops::Range<usize>) -> String {
    let outer = std::env::var("CUDA_VISIBLE_DEVICES").ok().filter(|v| !v.trim().is_empty());
    let outer: Option<Vec<String>> = outer.map(|v| v.split(',').map(|d| d.trim().to_string()).collect());
    own.map(|i| outer.as_ref().and_then(|o| o.get(i).cloned()).unwrap_or_else(|| i.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// e.g. "2 node(s) x 2 GPU rank(s) sharing 1 GPU, Gloo".
pub fn describe_placement(placement: Placement, nodes: usize, ranks_per_node: usize) -> String {
    match placement {
        Placement::Cpu => format!("{nodes} node(s) x {ranks_per_node} CPU rank(s), Gloo"),
        Placement::GpuPerRank => format!("{nodes} node(s) x {ranks_per_node} GPU rank(s), NCCL"),
        Placement::SharedGpus { gpus } => {
            format!("{nodes} node(s) x {ranks_per_node} GPU rank(s) sharing {gpus} GPU(s), Gloo")
        }
    }
}

/// The GPUs libtorch sees here, asked once.
fn gpus() -> usize {
    static GPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *GPUS.get_or_init(labkit::gpu_count)
}

fn common_args(step: u8, v: &Variation, node: usize) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--width".into(),
        "narrow".into(),
        "--batch-size".into(),
        v.batch_size.to_string(),
        "--epochs".into(),
        v.epochs.to_string(),
        "--patience".into(),
        "0".into(),
        "--train-subset".into(),
        v.train_subset.to_string(),
        "--test-subset".into(),
        v.test_subset.to_string(),
        "--threads".into(),
        "1".into(),
        "--timeout".into(),
        // Generous: on a loaded 2-core machine a rank can start seconds after another.
        "60".into(),
    ];
    args.extend(placement(v.nodes, v.ranks_per_node, gpus()).options());
    if step >= 1 {
        args.extend([
            "--num-nodes".into(),
            v.nodes.to_string(),
            "--num-gpus".into(),
            v.ranks_per_node.to_string(),
            "--node-id".into(),
            node.to_string(),
        ]);
    }
    args
}

/// Runs the step's program as the step needs and gathers the observation.
/// `phase` hears what is being run, for progress display.
pub fn observe(
    step: u8,
    bin: &Path,
    source: String,
    v: &Variation,
    setup: &Setup,
    phase: &dyn Fn(&str),
) -> Observation {
    let grace = Duration::from_secs(45);
    // The quick evaluation (step 11) trains for seconds on both cores while the other
    // runs mostly wait (start-up, rendezvous, the late rank): it runs beside them, on its
    // own port and in its own sandbox, and is joined last.
    std::thread::scope(|scope| {
        let quick_run = (step >= 11).then(|| scope.spawn(|| quick_evaluation(bin, setup, grace)));
        let mut observation = observe_runs(step, bin, source, v, setup, phase, grace);
        observation.quick_run = quick_run.map(|run| {
            phase("finishing the quick evaluation (it started with the first run)");
            run.join().expect("the quick evaluation's thread")
        });
        observation
    })
}

/// Every run of a verification but the quick evaluation.
fn observe_runs(
    step: u8,
    bin: &Path,
    source: String,
    v: &Variation,
    setup: &Setup,
    phase: &dyn Fn(&str),
    grace: Duration,
) -> Observation {
    phase(&format!("running {} rank(s)", v.world_size()));
    let main_args = if step >= 12 { checkpoint_args(setup, "checkpoints", &[]) } else { Vec::new() };
    let (processes, trace, port) = run_job(step, bin, v, setup, Job::Main, &main_args);
    // N ranks x batch B against 1 rank x batch N*B (step 7 on): same data, same
    // initial weights, dropout off and statistics over the global batch.
    let equivalence = (step >= 7).then(|| {
        phase("comparing with one rank and the whole batch");
        let many = v.for_equivalence(v.nodes, v.ranks_per_node, v.batch_size);
        let one = v.for_equivalence(1, 1, v.batch_size * v.world_size());
        // Independent jobs on their own ports: run them side by side.
        let ((many_p, many_t, _), (one_p, one_t, _)) = std::thread::scope(|scope| {
            let many_job = scope.spawn(|| run_job(step, bin, &many, setup, Job::Equivalence("many"), &[]));
            let one_run = run_job(step, bin, &one, setup, Job::Equivalence("one"), &[]);
            (many_job.join().expect("the comparison's run thread"), one_run)
        });
        Equivalence { settings: many, many: many_p, many_trace: many_t, one: one_p, one_trace: one_t }
    });
    // Step 13's runs beside step 12's (their own ports and directories): most of each
    // run is start-up and rendezvous, which overlap well.
    let (resume, pipeline) = std::thread::scope(|scope| {
        let pipeline = (step >= 13).then(|| scope.spawn(|| pipeline_runs(step, bin, v, setup)));
        let resume = (step >= 12).then(|| {
            phase(
                "stopping a run after epoch 0 and resuming it (and, from step 13, the model cut into stages)",
            );
            resume_runs(step, bin, v, setup)
        });
        let pipeline = pipeline.map(|runs| {
            phase("finishing the pipeline's runs (--pipeline, and one step of it beside the uncut model)");
            runs.join().expect("the pipeline runs' thread")
        });
        (resume, pipeline)
    });
    let fsdp = (step >= 14).then(|| {
        phase("training with --fsdp and with DDP on the same data");
        fsdp_runs(step, bin, v, setup)
    });

    if step >= 1 {
        phase("checking --help and a bad option value");
    }
    let (help, bad_value) = if step >= 1 { help_and_bad_value(bin, setup, grace) } else { (None, None) };
    let fail_run = (step >= 10).then(|| {
        phase("running with a failing rank");
        failing_rank_run(step, bin, v, setup, grace)
    });
    Observation {
        step,
        variation: v.clone(),
        source,
        processes,
        trace,
        port,
        help,
        bad_value,
        fail_run,
        quick_run: None,
        downloads: None,
        equivalence,
        resume,
        fsdp,
        pipeline,
    }
}

/// The micro-batches of step 13's pipelined run: 4 per batch of 16.
pub const PIPELINE_MICRO_BATCHES: usize = 4;

/// Step 13's runs (see [`PipelineRuns`]), side by side on their own ports.
fn pipeline_runs(step: u8, bin: &Path, v: &Variation, setup: &Setup) -> PipelineRuns {
    // Three batches and two epochs: the bubble of a few steps, the epoch lines.
    let settings = Variation { train_subset: 3 * v.batch_size, epochs: 2, ..v.clone() };
    let step_settings = v.for_equivalence(v.nodes, v.ranks_per_node, v.batch_size);
    let uncut_settings = Variation { nodes: 1, ranks_per_node: 1, ..step_settings.clone() };
    let pipeline_args = |micro_batches: usize| -> Vec<String> {
        vec!["--pipeline".into(), "--micro-batches".into(), micro_batches.to_string()]
    };
    let (pipelined_args, cut_args) = (pipeline_args(PIPELINE_MICRO_BATCHES), pipeline_args(1));
    let ((pipelined, pipelined_trace, _), (cut, cut_trace, _), (uncut, uncut_trace, _)) =
        std::thread::scope(|scope| {
            let pipelined = scope
                .spawn(|| run_job(step, bin, &settings, setup, Job::Pipeline("pipelined"), &pipelined_args));
            let cut =
                scope.spawn(|| run_job(step, bin, &step_settings, setup, Job::Pipeline("cut"), &cut_args));
            let uncut = run_job(step, bin, &uncut_settings, setup, Job::Pipeline("uncut"), &[]);
            (
                pipelined.join().expect("the pipelined run's thread"),
                cut.join().expect("the cut run's thread"),
                uncut,
            )
        });
    PipelineRuns {
        settings,
        micro_batches: PIPELINE_MICRO_BATCHES,
        pipelined,
        pipelined_trace,
        step_settings,
        cut,
        cut_trace,
        uncut,
        uncut_trace,
    }
}

/// Step 14's runs ([`Variation::for_fsdp`]), on their own ports, side by side.
fn fsdp_runs(step: u8, bin: &Path, v: &Variation, setup: &Setup) -> FsdpRuns {
    let settings = v.for_fsdp();
    let ((fsdp, fsdp_trace, _), (ddp, ddp_trace, _)) = std::thread::scope(|scope| {
        let fsdp =
            scope.spawn(|| run_job(step, bin, &settings, setup, Job::Fsdp("fsdp"), &["--fsdp".into()]));
        let ddp = run_job(step, bin, &settings, setup, Job::Fsdp("ddp"), &[]);
        (fsdp.join().expect("the FSDP run's thread"), ddp)
    });
    FsdpRuns { settings, fsdp, fsdp_trace, ddp, ddp_trace }
}

/// `--save-every 1` into a fresh checkpoint directory of the verification, and `more`.
fn checkpoint_args(setup: &Setup, dir: &str, more: &[&str]) -> Vec<String> {
    let dir = setup.work.join(dir);
    let mut args =
        vec!["--save-every".into(), "1".into(), "--checkpoint-dir".into(), dir.display().to_string()];
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// Step 12's comparison: the main run's data on 2 ranks of one node for two epochs,
/// dropout off (its random draws are not in a checkpoint, so a resumed run would draw
/// others): one run trains both epochs; another stops after epoch 0 and a third resumes
/// it. Two ranks, because bitwise equality needs sums that do not depend on their
/// order: over 3 ranks Gloo's ring adds an element's three gradients in an order set
/// by where DDP's buckets put it, and DDP lays its buckets out again after a process's
/// first step, which the resumed process takes at epoch 1 and the uninterrupted one at
/// epoch 0 (seen: other weights on 3 ranks, `--seed 1`). Two addends commute.
fn resume_runs(step: u8, bin: &Path, v: &Variation, setup: &Setup) -> ResumeRuns {
    let settings = Variation { epochs: 2, nodes: 1, ranks_per_node: 2, ..v.clone() };
    let stopped_after = 0;
    let stopped_settings = Variation { epochs: stopped_after + 1, ..settings.clone() };
    let whole_args = checkpoint_args(setup, "uninterrupted-checkpoints", &[]);
    let stopped_args = checkpoint_args(setup, "resumed-checkpoints", &[]);
    let resumed_args = checkpoint_args(setup, "resumed-checkpoints", &["--resume"]);
    // In the sandbox each job's work directory is its own: the checkpoint crosses over.
    let carry = ["resumed-checkpoints"];
    // The uninterrupted run beside the stopped one (their own ports and directories).
    let ((whole, whole_trace, _), (stopped, _, _)) = std::thread::scope(|scope| {
        let whole =
            scope.spawn(|| run_job(step, bin, &settings, setup, Job::Resume("uninterrupted"), &whole_args));
        let stopped = run_job_carrying(
            step,
            bin,
            &stopped_settings,
            setup,
            Job::Resume("stopped"),
            &stopped_args,
            &carry,
        );
        (whole.join().expect("the uninterrupted run's thread"), stopped)
    });
    let (resumed, resumed_trace, _) =
        run_job_carrying(step, bin, &settings, setup, Job::Resume("resumed"), &resumed_args, &carry);
    ResumeRuns {
        settings,
        stopped_after,
        uninterrupted: whole,
        uninterrupted_trace: whole_trace,
        stopped,
        resumed,
        resumed_trace,
    }
}

/// `--help` and `--num-gpus two`, both at once: neither touches the network or the
/// other's files.
fn help_and_bad_value(bin: &Path, setup: &Setup, grace: Duration) -> (Option<Ended>, Option<Ended>) {
    let launch = |name: &str, args: &[&str]| Launch {
        name: name.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
    };
    let mut ended = launch::run_all(
        bin,
        &[launch("help", &["--help"]), launch("bad-value", &["--num-gpus", "two"])],
        &setup.work,
        Duration::from_secs(60),
        grace,
        setup.confine.as_ref(),
    );
    let bad = ended.pop();
    (ended.pop(), bad)
}

/// MASTER_ADDR and MASTER_PORT for a run of its own on this machine.
fn rendezvous_env() -> Vec<(String, String)> {
    vec![
        (tch_distributed::MASTER_ADDR_ENV.into(), "127.0.0.1".into()),
        (tch_distributed::MASTER_PORT_ENV.into(), rendezvous_port().to_string()),
    ]
}

/// The program run with rank 1 made to fail (step 10 on).
fn failing_rank_run(step: u8, bin: &Path, v: &Variation, setup: &Setup, grace: Duration) -> Ended {
    let mut args = common_args(step, v, 0);
    args.extend(["--dataset".into(), "generated".into()]);
    args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
    let mut env = vec![(labkit::FAIL_RANK_ENV.into(), "1".into())];
    env.extend(rendezvous_env());
    let launch = Launch { name: "failing-rank".into(), args, env };
    launch::run_all(bin, &[launch], &setup.work, Duration::from_secs(120), grace, setup.confine.as_ref())
        .remove(0)
}

/// The quick evaluation the checker judges `target-reached` on: the finished lab on the
/// generated stand-in, 8,000 training images, at most 6 epochs, stopping at the first
/// epoch that reaches the target (`--patience 1`: `target-reached` asks whether it is
/// reached, and the lab's default of two epochs in a row would train a second epoch only
/// to confirm it). Measured over the program's `--seed` 0-19 (2026-11-25): 7 seeds reach
/// 0.85 at epoch 0, 11 at epoch 1, 2 at epoch 2, so 6 epochs leave a margin of 3; the
/// checker runs the default seed 0, 0.863 at epoch 0. The main job's own evaluation
/// (scripts/quick-evaluation.args) trains on the real Fashion-MNIST and takes minutes,
/// too long for a check that runs on every `verify`; the report names the data set.
pub const STAND_IN_EVALUATION: [&str; 8] =
    ["--train-subset", "8000", "--test-subset", "2000", "--epochs", "6", "--patience", "1"];

/// The finished lab's quick evaluation (step 11) on the stand-in ([`STAND_IN_EVALUATION`]).
fn quick_evaluation(bin: &Path, setup: &Setup, grace: Duration) -> Ended {
    let mut args: Vec<String> = STAND_IN_EVALUATION.map(String::from).to_vec();
    args.extend(
        ["--num-gpus", "2", "--width", "narrow", "--threads", "1", "--dataset", "generated"]
            .map(String::from),
    );
    args.extend(placement(1, 2, gpus()).options());
    args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
    let launch = Launch { name: "quick-evaluation".into(), args, env: rendezvous_env() };
    launch::run_all(bin, &[launch], &setup.work, Duration::from_secs(400), grace, setup.confine.as_ref())
        .remove(0)
}

/// Which run of a verification.
#[derive(Clone, Copy)]
enum Job {
    /// The run most checks judge: hidden variations, a late rank from step 8,
    /// downloads from the mirror from step 5.
    Main,
    /// The N-ranks-equal-1-rank comparison ("many" or "one").
    Equivalence(&'static str),
    /// Step 12's stopped, resumed and uninterrupted runs.
    Resume(&'static str),
    /// Step 14's runs with `--fsdp` and without ("fsdp" or "ddp"): dropout on (both draw
    /// the same masks from the same seeds) and per-rank BatchNorm, whose collectives
    /// would mix with FSDP's.
    Fsdp(&'static str),
    /// Step 13's runs: "pipelined", "cut" (one step) and "uncut" (the same step).
    Pipeline(&'static str),
}

impl Job {
    /// Dropout off: the comparisons (the pipelined run of step 13 trains as students run
    /// it; step 14's runs keep dropout on, both drawing the same masks from the same seeds).
    fn dropout_off(self) -> bool {
        !matches!(self, Job::Main | Job::Fsdp(_) | Job::Pipeline("pipelined"))
    }

    /// Every rank seeded apart by the checker (`--seed` + local rank, `SEED_PER_RANK_ENV`),
    /// so that DDP must broadcast rank 0's weights; not in step 13's runs, whose stages
    /// must start from the uncut model's weights (`--seed` alone).
    fn ranks_seeded_apart(self) -> bool {
        !matches!(self, Job::Pipeline(_))
    }
}

/// Starts the program as step `step` needs (one process per rank before step 10, one
/// invocation per node from step 10) and gathers what its processes did.
/// Returns the processes, the trace, and the rendezvous port given (if any).
fn run_job(
    step: u8,
    bin: &Path,
    v: &Variation,
    setup: &Setup,
    job: Job,
    extra: &[String],
) -> (Vec<RankProcess>, Trace, Option<u16>) {
    run_job_carrying(step, bin, v, setup, job, extra, &[])
}

/// [`run_job`], the files under the directories `carry` names (of the work directory)
/// carried in from an earlier job and out to a later one ([`launch::run_carrying`]).
fn run_job_carrying(
    step: u8,
    bin: &Path,
    v: &Variation,
    setup: &Setup,
    job: Job,
    extra: &[String],
    carry: &[&str],
) -> (Vec<RankProcess>, Trace, Option<u16>) {
    let prefix = match job {
        Job::Main => String::new(),
        Job::Equivalence(name) => format!("equivalence-{name}-"),
        Job::Resume(name) => format!("{name}-"),
        Job::Pipeline(name) => format!("pipeline-{name}-"),
        Job::Fsdp(name) => format!("{name}-"),
    };
    let trace_dir = setup.work.join(format!("{prefix}trace"));
    let _ = std::fs::create_dir_all(&trace_dir);
    let port = (step >= 4).then(rendezvous_port);
    let mut launches = Vec::new();
    let mut placement = Vec::new();
    for node in 0..v.nodes {
        let mut args = common_args(step, v, node);
        args.extend(["--seed".into(), v.program_seed.to_string()]);
        args.extend(extra.iter().cloned());
        let mut env: Vec<(String, String)> =
            vec![(lab_trace::TRACE_ENV.into(), trace_dir.display().to_string())];
        if job.ranks_seeded_apart() {
            env.push((labkit::SEED_PER_RANK_ENV.into(), "1".into()));
        }
        if let Some(own) = node_gpus(node, v.nodes, gpus()) {
            env.push(("CUDA_VISIBLE_DEVICES".into(), visible_devices(own)));
        }
        match port {
            Some(p) => {
                env.push((tch_distributed::MASTER_ADDR_ENV.into(), "127.0.0.1".into()));
                env.push((tch_distributed::MASTER_PORT_ENV.into(), p.to_string()));
            }
            // Empty counts as unset: the program must fall back to the lab's address.
            None => {
                env.push((tch_distributed::MASTER_ADDR_ENV.into(), String::new()));
                env.push((tch_distributed::MASTER_PORT_ENV.into(), String::new()));
            }
        }
        let main = matches!(job, Job::Main);
        if main && step >= 5 {
            // A rank that does not wait for its node's data then always reads too early.
            env.push((labkit::SLOW_PREPARE_ENV.into(), "1".into()));
        }
        if main && step >= 8 && v.world_size() > 1 {
            env.push((labkit::SLOW_RANK_ENV.into(), (v.world_size() - 1).to_string()));
        }
        if main && step >= 12 {
            // A rank that loads without waiting for rank 0's write then always reads too early.
            env.push((labkit::SLOW_SAVE_ENV.into(), "1".into()));
        }
        if job.dropout_off() {
            env.push((labkit::EQUIVALENCE_ENV.into(), "1".into()));
        }
        match (&setup.mirror, step >= 5 && main) {
            (Some((url, manifest)), true) => {
                let dir = setup.work.join(format!("data-node{node}"));
                args.extend(["--dataset".into(), "real".into(), "--mirror".into(), url.clone()]);
                args.extend(["--data-dir".into(), dir.display().to_string()]);
                env.push((labkit::data::MANIFEST_ENV.into(), manifest.display().to_string()));
            }
            _ => {
                args.extend(["--dataset".into(), "generated".into()]);
                args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
            }
        }
        if step >= 10 {
            launches.push(Launch { name: format!("{prefix}node{node}"), args, env });
            placement.push((node, None));
        } else {
            for local in 0..v.ranks_per_node {
                let mut env = env.clone();
                env.push((tch_distributed::LOCAL_RANK_ENV.into(), local.to_string()));
                env.push((tch_distributed::LOCAL_WORLD_SIZE_ENV.into(), v.ranks_per_node.to_string()));
                launches.push(Launch {
                    name: format!("{prefix}node{node}-rank{local}"),
                    args: args.clone(),
                    env,
                });
                placement.push((node, Some(local)));
            }
        }
    }
    let ended = launch::run_carrying(
        bin,
        &launches,
        &setup.work,
        carry,
        setup.limit,
        Duration::from_secs(45),
        setup.confine.as_ref(),
    );
    let processes = placement
        .into_iter()
        .zip(ended)
        .map(|((node, local_rank), ended)| RankProcess { node, local_rank, ended })
        .collect();
    (processes, Trace::read(&trace_dir), port)
}

/// Why a build gave no binary; `checks::build_failed` judges it.
#[derive(Debug, Clone)]
pub enum BuildFailure {
    /// The compiler's errors, made readable.
    Errors(String),
    /// cargo itself could not be run: why.
    NoCargo(String),
}

/// Builds a crate: its binary, or why there is none.
pub fn build(
    root: &Path,
    package: &str,
    manifest_dir: Option<&Path>,
    sandbox: Option<&crate::sandbox::Sandbox>,
) -> Result<PathBuf, BuildFailure> {
    match launch::build(root, package, manifest_dir, sandbox) {
        Ok(Build::Binary(bin)) => Ok(bin),
        Ok(Build::Failed(errors)) => Err(BuildFailure::Errors(readable_errors(&errors))),
        Err(e) => Err(BuildFailure::NoCargo(e.to_string())),
    }
}

/// The compiler's errors without the noise: no `Compiling` lines, a linker's command
/// line (thousands of characters of object files) left out so that the linker's own
/// message after it shows, other long lines cut, at most 60 lines.
fn readable_errors(text: &str) -> String {
    const WIDEST: usize = 300;
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("Compiling"))
        .map(|l| {
            let body = l.trim_start().trim_start_matches("= note:").trim_start();
            if body.starts_with("\"cc\"") || body.starts_with("\"c++\"") || body.starts_with("LC_ALL=") {
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}= note: (the linker's command line, left out)")
            } else if l.chars().count() > WIDEST {
                format!("{} ...", l.chars().take(WIDEST).collect::<String>())
            } else {
                l.to_string()
            }
        })
        .collect();
    let mut out: Vec<String> = lines.iter().take(60).cloned().collect();
    if lines.len() > 60 {
        out.push("... (more in `cargo build` output)".into());
    }
    if text.contains("No space left on device") {
        out.push(
            "the disk is full: free some space (`cargo clean` removes the build outputs) and check again"
                .into(),
        );
    }
    out.join("\n")
}

impl Observation {
    /// Writes the observation where [`checker::RECORD_OBSERVATION_ENV`] says, if it says; a failure to write
    /// is a warning (the verification goes on).
    pub fn record_if_asked(&self) {
        let Some(path) = std::env::var_os(checker::RECORD_OBSERVATION_ENV) else { return };
        let written = serde_json::to_string_pretty(self)
            .map_err(std::io::Error::other)
            .and_then(|text| atomic_file::write_atomically(Path::new(&path), text));
        if let Err(e) = written {
            eprintln!("warning: cannot record the observation in {}: {e}", Path::new(&path).display());
        }
    }

    /// The first process's stdout and stderr: what a student would see running it.
    pub fn first_output(&self) -> String {
        self.processes.first().map(|p| format!("{}{}", p.ended.stdout, p.ended.stderr)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn ranks_share_the_gpus_when_there_are_too_few() {
        assert_eq!(placement(1, 2, 0), Placement::Cpu);
        assert_eq!(placement(1, 2, 2), Placement::GpuPerRank);
        assert_eq!(placement(1, 3, 1), Placement::SharedGpus { gpus: 1 });
        // Simulated nodes share one machine's GPUs: each sees its own share of them.
        assert_eq!(placement(2, 2, 4), Placement::GpuPerRank);
        assert_eq!((node_gpus(0, 2, 4), node_gpus(1, 2, 4)), (Some(0..2), Some(2..4)));
        let shared = placement(2, 2, 1);
        assert_eq!(describe_placement(shared, 2, 2), "2 node(s) x 2 GPU rank(s) sharing 1 GPU(s), Gloo");
        assert!(shared.options().contains(&"--share-gpus".to_string()));
        assert_eq!(placement(1, 2, 0).options(), ["--device", "cpu"]);
    }

    /// Every rank of a run where the programs put it, given the options the checker
    /// passes and the GPUs each node sees: (node, device of the machine or None for the
    /// CPU) per rank, and the backend.
    fn ranks_placed(
        nodes: usize,
        ranks_per_node: usize,
        gpus: usize,
    ) -> (Vec<Option<usize>>, tch_distributed::Backend) {
        let expected = placement(nodes, ranks_per_node, gpus);
        let options = expected.options();
        let request = labkit::GpuRequest {
            device: if options[1] == "cpu" { labkit::DeviceChoice::Cpu } else { labkit::DeviceChoice::Cuda },
            share_gpus: options.iter().any(|o| o == "--share-gpus"),
            ranks: ranks_per_node,
        };
        let mut devices = Vec::new();
        let mut backends = Vec::new();
        for node in 0..nodes {
            let own = node_gpus(node, nodes, gpus).unwrap_or(0..gpus);
            let program = Placement::of_node(request, own.len()).unwrap();
            assert_eq!(program, expected, "{nodes} x {ranks_per_node} ranks, {gpus} GPUs: node {node}");
            backends.push(program.backend());
            for local in 0..ranks_per_node {
                devices.push(match program.device(local) {
                    tch::Device::Cuda(i) => Some(own.clone().nth(i).unwrap()),
                    _ => None,
                });
            }
        }
        backends.dedup();
        assert_eq!(backends.len(), 1, "every node of a job on one backend");
        (devices, backends[0])
    }

    #[test]
    fn the_programs_place_ranks_as_the_checker_describes_and_nccl_never_sees_a_gpu_twice() {
        for gpus in [0, 1, 2, 3, 4, 8] {
            for (nodes, ranks_per_node) in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)] {
                let (devices, backend) = ranks_placed(nodes, ranks_per_node, gpus);
                let what = format!("{nodes} x {ranks_per_node} ranks, {gpus} GPUs: {devices:?}");
                if backend == tch_distributed::Backend::Nccl {
                    let mut used: Vec<usize> = devices.iter().map(|d| d.unwrap()).collect();
                    used.sort();
                    used.dedup();
                    assert_eq!(used.len(), devices.len(), "NCCL with two ranks on one GPU: {what}");
                }
                // GPUs are used whenever the ranks can be placed on them.
                let on_gpus = devices.iter().all(Option::is_some);
                assert_eq!(on_gpus, gpus > 0 && !(nodes > gpus && ranks_per_node <= gpus), "{what}");
            }
        }
    }

    #[test]
    fn a_simulated_node_sees_its_share_of_the_gpus_the_checker_sees() {
        assert_eq!(node_gpus(0, 1, 8), None);
        assert_eq!(node_gpus(1, 2, 3), Some(1..2));
        assert_eq!(node_gpus(1, 2, 1), None);
        // Positions, unless the checker itself was given GPUs (read from the environment,
        // so only checked when the test's environment sets nothing).
        if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() {
            assert_eq!(visible_devices(2..4), "2,3");
        }
    }

    #[test]
    fn a_link_error_shows_the_linkers_message_not_its_command_line() {
        let objects = " \"/t/deps/a.o\"".repeat(500);
        let cargo = format!(
            "   Compiling solution_06 v0.1.0\nerror: linking with `cc` failed: exit status: 1\n  |\n  = note:  \"cc\" \"-m64\"{objects}\n  = note: /usr/bin/ld: final link failed: No space left on device\n          collect2: error: ld returned 1 exit status\n"
        );
        let shown = readable_errors(&cargo);
        assert!(!shown.contains("Compiling"), "{shown}");
        assert!(!shown.contains("a.o"), "{shown}");
        assert!(shown.contains("(the linker's command line, left out)"), "{shown}");
        assert!(shown.contains("final link failed: No space left on device"), "{shown}");
        assert!(shown.contains("the disk is full"), "{shown}");
        assert!(shown.lines().all(|l| l.chars().count() < 320), "{shown}");
    }

    use super::*;
}
