//! Observation: build the step, run it on several ranks with hidden variations, and
//! gather what happened (processes, outputs, traces). Judging is `checks`' job.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lab_trace::Trace;
use serde::{Deserialize, Serialize};

use crate::cargo_build::{self, Build};
use crate::job::{Ended, Launch};

/// The hidden variations of one verification, all drawn from `--seed`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Variation {
    pub seed: u64,
    pub nodes: usize,
    pub ranks_per_node: usize,
    pub train_subset: usize,
    pub test_subset: usize,
    pub batch_size: usize,
    pub epochs: usize,
    pub init_seed: u64,
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
            init_seed: d.below(1_000_000),
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

    pub fn world_size(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    pub fn describe(&self) -> String {
        format!(
            "seed {}: {}, {} training and {} validation images, batch {}, {} epochs",
            self.seed,
            placement(self.nodes, self.ranks_per_node, gpus()).describe(self.nodes, self.ranks_per_node),
            self.train_subset,
            self.test_subset,
            self.batch_size,
            self.epochs
        )
    }
}

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
    child_process::free_port().unwrap_or(29_500)
}

/// Where the ranks of a run compute, and through which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// CPU processes, Gloo.
    Cpu,
    /// A GPU of its own for every rank, NCCL.
    GpuPerRank,
    /// More ranks on a node than GPUs: they share them (`--share-gpus`), Gloo on CUDA
    /// tensors, so a one-GPU machine still checks every step on GPU tensors.
    SharedGpus { gpus: usize },
}

/// A GPU per rank when this machine has one for each rank of a single node; shared
/// GPUs otherwise (simulated nodes share one machine, so their local ranks land on the
/// same GPUs, which NCCL refuses); the CPU without GPUs.
pub fn placement(nodes: usize, ranks_per_node: usize, gpus: usize) -> Placement {
    if gpus == 0 {
        Placement::Cpu
    } else if nodes == 1 && gpus >= ranks_per_node {
        Placement::GpuPerRank
    } else {
        Placement::SharedGpus { gpus }
    }
}

impl Placement {
    /// The program's options that ask for it.
    pub fn options(self) -> Vec<String> {
        match self {
            Placement::Cpu => vec!["--device".into(), "cpu".into()],
            Placement::GpuPerRank => vec!["--device".into(), "cuda".into()],
            Placement::SharedGpus { .. } => vec!["--device".into(), "cuda".into(), "--share-gpus".into()],
        }
    }

    /// e.g. "2 node(s) x 2 GPU rank(s) sharing 1 GPU, Gloo".
    pub fn describe(self, nodes: usize, ranks_per_node: usize) -> String {
        match self {
            Placement::Cpu => format!("{nodes} node(s) x {ranks_per_node} CPU rank(s), Gloo"),
            Placement::GpuPerRank => format!("{nodes} node(s) x {ranks_per_node} GPU rank(s), NCCL"),
            Placement::SharedGpus { gpus } => {
                format!("{nodes} node(s) x {ranks_per_node} GPU rank(s) sharing {gpus} GPU(s), Gloo")
            }
        }
    }
}

fn gpus() -> usize {
    static GPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *GPUS.get_or_init(|| usize::try_from(tch::Cuda::device_count()).unwrap_or(0))
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
    let resume = (step >= 12).then(|| {
        phase("stopping a run after epoch 0 and resuming it");
        resume_runs(step, bin, v, setup)
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
    }
}

/// `--save-every 1` into a fresh checkpoint directory of the verification, and `more`.
fn checkpoint_args(setup: &Setup, dir: &str, more: &[&str]) -> Vec<String> {
    let dir = setup.work.join(dir);
    let mut args =
        vec!["--save-every".into(), "1".into(), "--checkpoint-dir".into(), dir.display().to_string()];
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// Step 12's comparison: the main run's world and data for two epochs, dropout off
/// (its random draws are not in a checkpoint, so a resumed run would draw others):
/// one run trains both epochs; another stops after epoch 0 and a third resumes it.
fn resume_runs(step: u8, bin: &Path, v: &Variation, setup: &Setup) -> ResumeRuns {
    let settings = Variation { epochs: 2, ..v.clone() };
    let stopped_after = 0;
    let stopped_settings = Variation { epochs: stopped_after + 1, ..settings.clone() };
    let whole_args = checkpoint_args(setup, "uninterrupted-checkpoints", &[]);
    let stopped_args = checkpoint_args(setup, "resumed-checkpoints", &[]);
    let resumed_args = checkpoint_args(setup, "resumed-checkpoints", &["--resume"]);
    // The uninterrupted run beside the stopped one (their own ports and directories).
    let ((whole, whole_trace, _), (stopped, _, _)) = std::thread::scope(|scope| {
        let whole =
            scope.spawn(|| run_job(step, bin, &settings, setup, Job::Resume("uninterrupted"), &whole_args));
        let stopped = run_job(step, bin, &stopped_settings, setup, Job::Resume("stopped"), &stopped_args);
        (whole.join().expect("the uninterrupted run's thread"), stopped)
    });
    let (resumed, resumed_trace, _) =
        run_job(step, bin, &settings, setup, Job::Resume("resumed"), &resumed_args);
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
    let mut ended = cargo_build::run_all(
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
    cargo_build::run_all(bin, &[launch], &setup.work, Duration::from_secs(120), grace, setup.confine.as_ref())
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
    cargo_build::run_all(bin, &[launch], &setup.work, Duration::from_secs(400), grace, setup.confine.as_ref())
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
    let prefix = match job {
        Job::Main => String::new(),
        Job::Equivalence(name) => format!("equivalence-{name}-"),
        Job::Resume(name) => format!("{name}-"),
    };
    let trace_dir = setup.work.join(format!("{prefix}trace"));
    let _ = std::fs::create_dir_all(&trace_dir);
    let port = (step >= 4).then(rendezvous_port);
    let mut launches = Vec::new();
    let mut placement = Vec::new();
    for node in 0..v.nodes {
        let mut args = common_args(step, v, node);
        args.extend(extra.iter().cloned());
        let mut env: Vec<(String, String)> = vec![
            (lab_trace::TRACE_ENV.into(), trace_dir.display().to_string()),
            (labkit::INIT_SEED_ENV.into(), v.init_seed.to_string()),
        ];
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
        if !main {
            // Dropout off (both comparisons).
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
    let ended = cargo_build::run_all(
        bin,
        &launches,
        &setup.work,
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
    match cargo_build::build(root, package, manifest_dir, sandbox) {
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
        // Simulated nodes share one machine's GPUs.
        assert_eq!(placement(2, 2, 4), Placement::SharedGpus { gpus: 4 });
        let shared = placement(2, 2, 1);
        assert_eq!(shared.describe(2, 2), "2 node(s) x 2 GPU rank(s) sharing 1 GPU(s), Gloo");
        assert!(shared.options().contains(&"--share-gpus".to_string()));
        assert_eq!(placement(1, 2, 0).options(), ["--device", "cpu"]);
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
