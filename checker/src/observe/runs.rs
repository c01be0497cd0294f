//! Running the step's program: the runs of a verification (its ranks for a job, --help
//! and a bad value, a failing rank, the quick evaluation), each job's processes with the
//! checker's rights ([`crate::job`]) or in the sandbox ([`crate::confined`], whose
//! supervisor runs the same [`crate::job`] inside).
use std::path::Path;
use std::time::Duration;

use lab_trace::Trace;

use super::command_line::{common_args, rendezvous_env, rendezvous_port, Stop};
use super::placement::{gpus, node_gpus, placement, visible_devices};
use super::{Gains, Plan, RankProcess, Run, RunKind, Setup, Variation};
use crate::confined::{self, JobSandbox};
use crate::job::{Ended, Job, Launch};

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

/// What every run of one verification shares: what it runs ([`Plan`]), the program
/// and where.
pub(super) struct Runner<'a> {
    pub plan: &'a Plan,
    pub bin: &'a Path,
    pub setup: &'a Setup,
}

impl Runner<'_> {
    /// `--help` and `--num-gpus two`, both at once: neither touches the network or the
    /// other's files.
    pub(super) fn help_and_bad_value(&self, grace: Duration) -> (Ended, Ended) {
        let Runner { bin, setup, .. } = *self;
        let launch = |name: &str, args: &[&str]| Launch {
            name: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec![],
        };
        let launches = [launch("help", &["--help"]), launch("bad-value", &["--num-gpus", "two"])];
        let job = Job {
            bin,
            launches: &launches,
            dir: &setup.work,
            carry: &[],
            limit: Duration::from_secs(60),
            grace,
        };
        let [help, bad_value]: [Ended; 2] =
            run_processes(&job, setup.confine.as_ref()).try_into().expect("one end per launch");
        (help, bad_value)
    }

    /// The program run with rank 1 made to fail (step 10 on), on one node of the main run's
    /// ranks per node: one invocation is the whole job (with more nodes, node 0's ranks
    /// would wait for the others' at the rendezvous until its timeout).
    pub(super) fn failing_rank_run(&self, v: &Variation, grace: Duration) -> Ended {
        let Runner { plan, bin, setup } = *self;
        let v = &Variation { nodes: 1, ..v.clone() };
        let mut args = common_args(plan, v, 0, Stop::AtTheLastEpoch);
        args.extend(["--dataset".into(), "generated".into()]);
        args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
        let mut env = vec![(labkit::FAIL_RANK_ENV.into(), "1".into())];
        env.extend(rendezvous_env());
        let launch = Launch { name: "failing-rank".into(), args, env };
        let job = Job {
            bin,
            launches: &[launch],
            dir: &setup.work,
            carry: &[],
            limit: Duration::from_secs(120),
            grace,
        };
        run_processes(&job, setup.confine.as_ref()).remove(0)
    }

    /// The finished lab's quick evaluation (step 11) on the stand-in ([`STAND_IN_EVALUATION`]).
    pub(super) fn quick_evaluation(&self, grace: Duration) -> Ended {
        let Runner { bin, setup, .. } = *self;
        let mut args: Vec<String> = STAND_IN_EVALUATION.map(String::from).to_vec();
        args.extend(
            ["--num-gpus", "2", "--width", "narrow", "--threads", "1", "--dataset", "generated"]
                .map(String::from),
        );
        args.extend(placement(1, 2, gpus()).options());
        args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
        let launch = Launch { name: "quick-evaluation".into(), args, env: rendezvous_env() };
        let job = Job {
            bin,
            launches: &[launch],
            dir: &setup.work,
            carry: &[],
            limit: Duration::from_secs(400),
            grace,
        };
        run_processes(&job, setup.confine.as_ref()).remove(0)
    }

    /// Starts the program as the plan's step needs (one process per rank before step 10,
    /// one invocation per node from step 10) and gathers what its processes did.
    /// Returns the run (its processes and trace) and the rendezvous port given (if any).
    pub(super) fn job(&self, v: &Variation, job: WhichRun, extra: &[String]) -> (Run, Option<u16>) {
        self.job_carrying(v, job, extra, &[])
    }

    /// [`Runner::job`], the files under the directories `carry` names (of the work
    /// directory) carried in from an earlier job and out to a later one ([`Job::carry`]).
    pub(super) fn job_carrying(
        &self,
        v: &Variation,
        job: WhichRun,
        extra: &[String],
        carry: &[&str],
    ) -> (Run, Option<u16>) {
        let Runner { plan, bin, setup } = *self;
        let prefix = job.prefix();
        let trace_dir = setup.work.join(format!("{prefix}trace"));
        let _ = std::fs::create_dir_all(&trace_dir);
        let port = plan.has(Gains::ProcessGroup).then(rendezvous_port);
        let mut launches = Vec::new();
        let mut placement = Vec::new();
        // From step 11 (the finished lab, its early stop) the main run stops early, on
        // every rank alike when the program is right.
        let stop = if job == WhichRun::Main && plan.has(Gains::EarlyStop) {
            Stop::Early
        } else {
            Stop::AtTheLastEpoch
        };
        for node in 0..v.nodes {
            let mut args = common_args(plan, v, node, stop);
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
            let main = job == WhichRun::Main;
            if main && plan.has(Gains::DataOncePerNode) {
                // A rank that does not wait for its node's data then always reads too early.
                env.push((labkit::SLOW_PREPARE_ENV.into(), "1".into()));
            }
            if main && plan.has(Gains::ThroughputBarrier) && v.world_size() > 1 {
                env.push((labkit::SLOW_RANK_ENV.into(), (v.world_size() - 1).to_string()));
            }
            if main && plan.has(Gains::Checkpoints) {
                // A rank that loads without waiting for rank 0's write then always reads too early.
                env.push((labkit::SLOW_SAVE_ENV.into(), "1".into()));
            }
            if job.dropout_off() {
                env.push((labkit::EQUIVALENCE_ENV.into(), "1".into()));
            }
            if job.steps_traced() {
                env.push((labkit::TRACE_STEPS_ENV.into(), super::EXACT_STEPS.to_string()));
            }
            match (&setup.mirror, plan.has(Gains::DataOncePerNode) && main) {
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
            if plan.has(Gains::SpawnsItsRanks) {
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
        let job = Job {
            bin,
            launches: &launches,
            dir: &setup.work,
            carry,
            limit: setup.limit,
            grace: Duration::from_secs(45),
        };
        let ended = run_processes(&job, setup.confine.as_ref());
        let processes = placement
            .into_iter()
            .zip(ended)
            .map(|((node, local_rank), ended)| RankProcess { node, local_rank, ended })
            .collect();
        (Run { processes, trace: Trace::read(&trace_dir) }, port)
    }
}

/// Which run of a verification: one job of a [`RunKind`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WhichRun {
    Main,
    /// The N-ranks-equal-1-rank comparison's N ranks, and its 1 rank.
    EquivalenceMany,
    EquivalenceOne,
    /// The same comparison on the exact-comparison model (`--model mlp`), step by step.
    ExactMany,
    ExactOne,
    /// Step 12's runs.
    Uninterrupted,
    Stopped,
    Resumed,
    /// Step 13's runs: the pipeline trained with micro-batches, one step of it with one,
    /// and the same step of the uncut model.
    Pipelined,
    Cut,
    Uncut,
    /// Step 14's runs with `--fsdp` and without: dropout on (both draw the same masks
    /// from the same seeds) and per-rank BatchNorm, whose collectives would mix with FSDP's.
    WithFsdp,
    WithDdp,
    /// Step 15's runs: the model split with `--tensor-parallel`, and whole on one rank.
    TpSplit,
    TpWhole,
    /// Step 16's runs: the 2 × 2 mesh, and DDP on the DP dimension's 2 ranks.
    MeshSplit,
    MeshDdp,
}

impl WhichRun {
    pub(super) fn kind(self) -> RunKind {
        match self {
            WhichRun::Main => RunKind::Main,
            WhichRun::EquivalenceMany
            | WhichRun::EquivalenceOne
            | WhichRun::ExactMany
            | WhichRun::ExactOne => RunKind::Equivalence,
            WhichRun::Uninterrupted | WhichRun::Stopped | WhichRun::Resumed => RunKind::Resume,
            WhichRun::Pipelined | WhichRun::Cut | WhichRun::Uncut => RunKind::Pipeline,
            WhichRun::WithFsdp | WhichRun::WithDdp => RunKind::Fsdp,
            WhichRun::TpSplit | WhichRun::TpWhole => RunKind::TensorParallel,
            WhichRun::MeshSplit | WhichRun::MeshDdp => RunKind::Mesh,
        }
    }

    /// What its processes' names and its trace's directory start with.
    fn prefix(self) -> &'static str {
        match self {
            WhichRun::Main => "",
            WhichRun::EquivalenceMany => "equivalence-many-",
            WhichRun::EquivalenceOne => "equivalence-one-",
            WhichRun::ExactMany => "exact-many-",
            WhichRun::ExactOne => "exact-one-",
            WhichRun::Uninterrupted => "uninterrupted-",
            WhichRun::Stopped => "stopped-",
            WhichRun::Resumed => "resumed-",
            WhichRun::Pipelined => "pipeline-pipelined-",
            WhichRun::Cut => "pipeline-cut-",
            WhichRun::Uncut => "pipeline-uncut-",
            WhichRun::WithFsdp => "fsdp-",
            WhichRun::WithDdp => "ddp-",
            WhichRun::TpSplit => "tp-split-",
            WhichRun::TpWhole => "tp-whole-",
            WhichRun::MeshSplit => "mesh-",
            WhichRun::MeshDdp => "mesh-ddp-",
        }
    }

    /// Dropout off: the comparisons (the pipelined run of step 13 trains as students run
    /// it; step 14's runs keep dropout on, both drawing the same masks from the same seeds).
    fn dropout_off(self) -> bool {
        !matches!(self, WhichRun::Main | WhichRun::WithFsdp | WhichRun::WithDdp | WhichRun::Pipelined)
    }

    /// The weights traced after each of the first steps: the step-by-step comparison.
    fn steps_traced(self) -> bool {
        matches!(self, WhichRun::ExactMany | WhichRun::ExactOne)
    }

    /// Every rank seeded apart by the checker (`--seed` + local rank, `SEED_PER_RANK_ENV`),
    /// so that DDP must broadcast rank 0's weights; not in step 13's runs, whose stages
    /// must start from the uncut model's weights (`--seed` alone), nor in step 15's,
    /// whose TP peers must build one model from one seed (PyTorch's TP asks the same),
    /// nor in step 16's.
    fn ranks_seeded_apart(self) -> bool {
        !matches!(self.kind(), RunKind::Pipeline | RunKind::TensorParallel | RunKind::Mesh)
    }
}

/// Starts every process of `job`, waits for all of them up to its limit, and kills the
/// process groups of those still running then. When one process fails, the others get
/// the job's grace to end on their own (a distributed program should notice a dead
/// peer) before they are killed too. With `confine`, all of them run in one sandbox,
/// where each job's directory is a tmpfs of its own and only the files under the job's
/// `carry` (binary included) go in and come back whole.
pub(super) fn run_processes(job: &Job<'_>, confine: Option<&JobSandbox>) -> Vec<Ended> {
    match confine {
        Some(confine) => confined::run_all(confine, job),
        None => crate::job::run_plain(job),
    }
}
