//! Observation: build the step, run it on several ranks with hidden variations, and
//! gather what happened (processes, outputs, traces). Judging is `checks`' job.
//!
//! One module per job: [`plan`] says what a step's verification runs (the [`Plan`] its
//! declarations in `checks` make), [`variation`] draws the hidden variations,
//! [`placement`] puts the ranks on CPUs or GPUs, [`command_line`] writes each run's
//! options and environment, [`runs`] starts the runs and gathers their processes and
//! traces, [`build_errors`] builds the crate, [`observation`] holds (and records) what
//! was seen, by [`RunKind`]. This file runs the kinds of run the plan names, in order.
mod build_errors;
mod command_line;
mod observation;
mod placement;
mod plan;
mod runs;
mod variation;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use build_errors::{build, BuildFailure, BuildFailureRecord};
use command_line::checkpoint_args;
pub use observation::{
    Equivalence, ExactSteps, FsdpRuns, MeshRuns, Observation, PipelineRuns, RankProcess, ResumeRuns, Run,
    RunKind, Runs, TensorParallelRuns,
};
pub use plan::{Gains, Plan};
use runs::{Runner, WhichRun};
pub use variation::{Variation, EXACT_STEPS, FSDP_STEPS, MESH_STEPS, TP_STEPS};

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
    pub confine: Option<crate::confined::JobSandbox>,
}

/// Runs the step's program as `plan` says and gathers the observation.
/// `phase` hears what is being run, for progress display.
pub fn observe(
    plan: &Plan,
    bin: &Path,
    source: String,
    v: &Variation,
    setup: &Setup,
    phase: &dyn Fn(&str),
) -> Observation {
    let runner = Runner { plan, bin, setup };
    let grace = Duration::from_secs(45);
    // The quick evaluation (step 11) trains for seconds on both cores while the other
    // runs mostly wait (start-up, rendezvous, the late rank): it runs beside them, on its
    // own port and in its own sandbox, and is joined last.
    std::thread::scope(|scope| {
        let quick_run =
            plan.makes(RunKind::QuickEvaluation).then(|| scope.spawn(|| runner.quick_evaluation(grace)));
        let mut observation = observe_runs(&runner, source, v, phase, grace);
        if let Some(run) = quick_run {
            phase("finishing the quick evaluation (it started with the first run)");
            observation.insert(Runs::QuickEvaluation(run.join().expect("the quick evaluation's thread")));
        }
        observation
    })
}

/// Every run of a verification but the quick evaluation.
fn observe_runs(
    runner: &Runner<'_>,
    source: String,
    v: &Variation,
    phase: &dyn Fn(&str),
    grace: Duration,
) -> Observation {
    let plan = runner.plan;
    phase(&format!("running {} rank(s)", v.world_size()));
    let main_args = match plan.has(Gains::Checkpoints) {
        true => checkpoint_args(runner.setup, "checkpoints", &[]),
        false => Vec::new(),
    };
    let (main, port) = runner.job(v, WhichRun::Main, &main_args);
    // N ranks x batch B against 1 rank x batch N*B (step 7 on): same data, same
    // initial weights, dropout off and statistics over the global batch: one step of
    // the lab's model, and EXACT_STEPS steps over two epochs of the exact-comparison one.
    let equivalence = plan.makes(RunKind::Equivalence).then(|| {
        phase("comparing with one rank and the whole batch");
        let many = v.for_equivalence(v.nodes, v.ranks_per_node, v.batch_size);
        let one = v.for_equivalence(1, 1, v.batch_size * v.world_size());
        // On one node of the main run's ranks per node (2 or 3): what the exact
        // comparison judges (the step DDP takes) does not depend on the nodes, whose
        // mistakes the main run shows, and 7 start-ups of libtorch would cost 4 more.
        let exact_many = v.for_exact_steps(v.ranks_per_node, v.ranks_per_node);
        let exact_one = v.for_exact_steps(v.ranks_per_node, 1);
        let exact_args = ["--model".to_string(), "mlp".to_string()];
        // Independent jobs on their own ports: run them side by side (mostly start-up).
        let ((many_run, _), (one_run, _), (exact_many_run, _), (exact_one_run, _)) =
            std::thread::scope(|scope| {
                let many_job = scope.spawn(|| runner.job(&many, WhichRun::EquivalenceMany, &[]));
                let one_job = scope.spawn(|| runner.job(&one, WhichRun::EquivalenceOne, &[]));
                let exact_many_job =
                    scope.spawn(|| runner.job(&exact_many, WhichRun::ExactMany, &exact_args));
                let exact_one_run = runner.job(&exact_one, WhichRun::ExactOne, &exact_args);
                let joined = |job: std::thread::ScopedJoinHandle<'_, _>| {
                    job.join().expect("the comparison's run thread")
                };
                (joined(many_job), joined(one_job), joined(exact_many_job), exact_one_run)
            });
        let exact =
            ExactSteps { settings: exact_many, steps: EXACT_STEPS, many: exact_many_run, one: exact_one_run };
        Equivalence { settings: many, many: many_run, one: one_run, exact: Some(exact) }
    });
    // Step 13's runs beside step 12's (their own ports and directories): most of each
    // run is start-up and rendezvous, which overlap well.
    let (resume, pipeline) = std::thread::scope(|scope| {
        let pipeline = plan.makes(RunKind::Pipeline).then(|| scope.spawn(|| pipeline_runs(runner, v)));
        let resume = plan.makes(RunKind::Resume).then(|| {
            phase(
                "stopping a run after epoch 0 and resuming it (and, from step 13, the model cut into stages)",
            );
            resume_runs(runner, v)
        });
        let pipeline = pipeline.map(|runs| {
            phase("finishing the pipeline's runs (--pipeline, and one step of it beside the uncut model)");
            runs.join().expect("the pipeline runs' thread")
        });
        (resume, pipeline)
    });
    let fsdp = plan.makes(RunKind::Fsdp).then(|| {
        phase("training with --fsdp and with DDP on the same data");
        fsdp_runs(runner, v)
    });
    let tensor_parallel = plan.makes(RunKind::TensorParallel).then(|| {
        phase("training with --tensor-parallel and, beside it, on one rank");
        tensor_parallel_runs(runner, v)
    });
    let mesh = plan.makes(RunKind::Mesh).then(|| {
        phase("training on a 2-D mesh (--tensor-parallel 2 on 4 ranks) and, beside it, DDP on 2");
        mesh_runs(runner, v)
    });

    let mut observation = Observation::of_main(plan.step, v.clone(), source, main, port);
    let made = [
        equivalence.map(Runs::Equivalence),
        resume.map(Runs::Resume),
        pipeline.map(Runs::Pipeline),
        fsdp.map(Runs::Fsdp),
        tensor_parallel.map(Runs::TensorParallel),
        mesh.map(Runs::Mesh),
    ];
    made.into_iter().flatten().for_each(|runs| observation.insert(runs));
    if plan.makes(RunKind::Options) {
        phase("checking --help and a bad option value");
        let (help, bad_value) = runner.help_and_bad_value(grace);
        observation.insert(Runs::Options { help, bad_value });
    }
    if plan.makes(RunKind::FailingRank) {
        phase("running with a failing rank");
        observation.insert(Runs::FailingRank(runner.failing_rank_run(v, grace)));
    }
    observation
}

/// The micro-batches of step 13's pipelined run: 4 per batch of 16.
pub const PIPELINE_MICRO_BATCHES: usize = 4;

/// Step 13's runs (see [`PipelineRuns`]), side by side on their own ports.
fn pipeline_runs(runner: &Runner<'_>, v: &Variation) -> PipelineRuns {
    // Three batches and two epochs: the bubble of a few steps, the epoch lines.
    let settings = Variation { train_subset: 3 * v.batch_size, epochs: 2, ..v.clone() };
    let step_settings = v.for_equivalence(v.nodes, v.ranks_per_node, v.batch_size);
    let uncut_settings = Variation { nodes: 1, ranks_per_node: 1, ..step_settings.clone() };
    let pipeline_args = |micro_batches: usize| -> Vec<String> {
        vec!["--pipeline".into(), "--micro-batches".into(), micro_batches.to_string()]
    };
    let (pipelined_args, cut_args) = (pipeline_args(PIPELINE_MICRO_BATCHES), pipeline_args(1));
    let ((pipelined, _), (cut, _), (uncut, _)) = std::thread::scope(|scope| {
        let pipelined = scope.spawn(|| runner.job(&settings, WhichRun::Pipelined, &pipelined_args));
        let cut = scope.spawn(|| runner.job(&step_settings, WhichRun::Cut, &cut_args));
        let uncut = runner.job(&uncut_settings, WhichRun::Uncut, &[]);
        (
            pipelined.join().expect("the pipelined run's thread"),
            cut.join().expect("the cut run's thread"),
            uncut,
        )
    });
    PipelineRuns { settings, micro_batches: PIPELINE_MICRO_BATCHES, pipelined, step_settings, cut, uncut }
}

/// Step 14's runs ([`Variation::for_fsdp`]), on their own ports, side by side.
fn fsdp_runs(runner: &Runner<'_>, v: &Variation) -> FsdpRuns {
    let settings = v.for_fsdp();
    let ((fsdp, _), (ddp, _)) = std::thread::scope(|scope| {
        let fsdp = scope.spawn(|| runner.job(&settings, WhichRun::WithFsdp, &["--fsdp".into()]));
        let ddp = runner.job(&settings, WhichRun::WithDdp, &[]);
        (fsdp.join().expect("the FSDP run's thread"), ddp)
    });
    FsdpRuns { settings, fsdp, ddp }
}

/// Step 15's runs ([`Variation::for_tensor_parallel`]), on their own ports, side by
/// side: dropout off in both (a TP rank draws masks for its own channels only).
fn tensor_parallel_runs(runner: &Runner<'_>, v: &Variation) -> TensorParallelRuns {
    let settings = v.for_tensor_parallel();
    let one = Variation { ranks_per_node: 1, ..settings.clone() };
    let split_args = vec!["--tensor-parallel".to_string(), settings.world_size().to_string()];
    let ((split, _), (whole, _)) = std::thread::scope(|scope| {
        let split = scope.spawn(|| runner.job(&settings, WhichRun::TpSplit, &split_args));
        let whole = runner.job(&one, WhichRun::TpWhole, &[]);
        (split.join().expect("the tensor-parallel run's thread"), whole)
    });
    TensorParallelRuns { settings, split, whole }
}

/// Step 16's runs ([`Variation::for_mesh`]), on their own ports, side by side: dropout
/// off in both, and SyncBatchNorm (over "dp" in the mesh; the checker's comparisons
/// give DDP's whole model SyncBatchNorm over its world), so that both normalise over
/// the same global batch.
fn mesh_runs(runner: &Runner<'_>, v: &Variation) -> MeshRuns {
    let settings = v.for_mesh();
    let ddp = Variation { ranks_per_node: 2, ..settings.clone() };
    let mesh_args: Vec<String> = ["--tensor-parallel", "2", "--sync-batch-norm"].map(String::from).into();
    let ((mesh, _), (ddp, _)) = std::thread::scope(|scope| {
        let mesh = scope.spawn(|| runner.job(&settings, WhichRun::MeshSplit, &mesh_args));
        let ddp = runner.job(&ddp, WhichRun::MeshDdp, &["--sync-batch-norm".to_string()]);
        (mesh.join().expect("the mesh run's thread"), ddp)
    });
    MeshRuns { settings, mesh, ddp }
}

/// Step 12's comparison: the main run's data on 2 ranks of one node for two epochs,
/// dropout off (its random draws are not in a checkpoint, so a resumed run would draw
/// others): one run trains both epochs; another stops after epoch 0 and a third resumes
/// it. Two ranks, because bitwise equality needs sums that do not depend on their
/// order: over 3 ranks Gloo's ring adds an element's three gradients in an order set
/// by where DDP's buckets put it, and DDP lays its buckets out again after a process's
/// first step, which the resumed process takes at epoch 1 and the uninterrupted one at
/// epoch 0 (seen: other weights on 3 ranks, `--seed 1`). Two addends commute.
fn resume_runs(runner: &Runner<'_>, v: &Variation) -> ResumeRuns {
    let setup = runner.setup;
    let settings = Variation { epochs: 2, nodes: 1, ranks_per_node: 2, ..v.clone() };
    let stopped_after = 0;
    let stopped_settings = Variation { epochs: stopped_after + 1, ..settings.clone() };
    let whole_args = checkpoint_args(setup, "uninterrupted-checkpoints", &[]);
    let stopped_args = checkpoint_args(setup, "resumed-checkpoints", &[]);
    let resumed_args = checkpoint_args(setup, "resumed-checkpoints", &["--resume"]);
    // In the sandbox each job's work directory is its own: the checkpoint crosses over.
    let carry = ["resumed-checkpoints"];
    // The uninterrupted run beside the stopped one (their own ports and directories).
    let ((uninterrupted, _), (stopped, _)) = std::thread::scope(|scope| {
        let whole = scope.spawn(|| runner.job(&settings, WhichRun::Uninterrupted, &whole_args));
        let stopped = runner.job_carrying(&stopped_settings, WhichRun::Stopped, &stopped_args, &carry);
        (whole.join().expect("the uninterrupted run's thread"), stopped)
    });
    let (resumed, _) = runner.job_carrying(&settings, WhichRun::Resumed, &resumed_args, &carry);
    ResumeRuns { settings, stopped_after, uninterrupted, stopped, resumed }
}
