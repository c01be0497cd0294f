//! `checker verify step N`: build the step, run it on several ranks with hidden
//! variations, and judge what happened against the checks of steps 0..=N.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tch_distributed::DistributedSampler;

use crate::launch::{self, Build, Ended, Launch};

/// The hidden variations of one verification, all drawn from `--seed`.
#[derive(Debug, Clone)]
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

/// splitmix64: enough randomness for choosing variations, reproducible from a seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl Variation {
    pub fn for_step(step: u8, seed: u64) -> Variation {
        let mut d = Draw(seed ^ (u64::from(step) << 32));
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
    pub root: PathBuf,
    /// A fresh directory for this verification's files.
    pub work: PathBuf,
    /// A data directory with the generated stand-in ready (shared, read-only use).
    pub shared_data: PathBuf,
    /// Base URL and manifest of a local mirror serving the stand-in (step 5 on).
    pub mirror: Option<(String, PathBuf)>,
    pub limit: Duration,
}

/// A process of the main run and what it was.
pub struct RankProcess {
    pub node: usize,
    /// `None` for a self-spawning invocation.
    pub local_rank: Option<usize>,
    pub ended: Ended,
}

/// Everything one verification observed.
pub struct Observation {
    pub step: u8,
    pub variation: Variation,
    pub source: String,
    pub processes: Vec<RankProcess>,
    pub trace: Vec<Value>,
    pub port: Option<u16>,
    pub help: Option<Ended>,
    pub bad_value: Option<Ended>,
    pub fail_run: Option<Ended>,
    pub quick_run: Option<Ended>,
    pub downloads: Option<BTreeMap<String, usize>>,
    /// Step 7 on: the N-rank and 1-rank runs of the comparison.
    pub equivalence: Option<Equivalence>,
}

/// The two runs that must train to the same weights.
pub struct Equivalence {
    /// The N-rank run's settings.
    pub settings: Variation,
    pub many: Vec<RankProcess>,
    pub many_trace: Vec<Value>,
    pub one: Vec<RankProcess>,
    pub one_trace: Vec<Value>,
}

/// One check's verdict.
#[derive(Debug, Clone)]
pub struct CheckResult {
    pub id: &'static str,
    pub step: u8,
    pub passed: bool,
    pub observed: String,
    pub expected: String,
    pub hint: &'static str,
}

fn free_port() -> u16 {
    launcher::free_port().unwrap_or(29_500)
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
    phase(&format!("running {} rank(s)", v.world_size()));
    let (processes, trace, port) = run_job(step, bin, v, setup, Job::Main);
    // N ranks x batch B against 1 rank x batch N*B (step 7 on): same data, same
    // initial weights, dropout off and statistics over the global batch.
    let equivalence = (step >= 7).then(|| {
        phase("comparing with one rank and the whole batch");
        let many = v.for_equivalence(v.nodes, v.ranks_per_node, v.batch_size);
        let one = v.for_equivalence(1, 1, v.batch_size * v.world_size());
        // Independent jobs on their own ports: run them side by side.
        let ((many_p, many_t, _), (one_p, one_t, _)) = std::thread::scope(|scope| {
            let many_job = scope.spawn(|| run_job(step, bin, &many, setup, Job::Equivalence("many")));
            let one_run = run_job(step, bin, &one, setup, Job::Equivalence("one"));
            (many_job.join().expect("the comparison's run thread"), one_run)
        });
        Equivalence { settings: many, many: many_p, many_trace: many_t, one: one_p, one_trace: one_t }
    });

    if step >= 1 {
        phase("checking --help and a bad option value");
    }
    let (help, bad_value) = if step >= 1 {
        // Both at once: neither touches the network or the other's files.
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
        );
        let bad = ended.pop();
        (ended.pop(), bad)
    } else {
        (None, None)
    };
    let fail_run = (step >= 10).then(|| {
        phase("running with a failing rank");
        let mut args = common_args(step, v, 0);
        args.extend(["--dataset".into(), "generated".into()]);
        args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
        let env = vec![
            (labkit::FAIL_RANK_ENV.into(), "1".into()),
            ("MASTER_ADDR".into(), "127.0.0.1".into()),
            ("MASTER_PORT".into(), free_port().to_string()),
        ];
        let launch = Launch { name: "failing-rank".into(), args, env };
        launch::run_all(bin, &[launch], &setup.work, Duration::from_secs(120), grace).remove(0)
    });
    let quick_run = (step >= 11).then(|| {
        phase("running the quick evaluation (about a minute)");
        let text =
            std::fs::read_to_string(setup.root.join("scripts/quick-evaluation.args")).unwrap_or_default();
        let mut args: Vec<String> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(str::split_whitespace)
            .map(String::from)
            .collect();
        args.extend(
            ["--num-gpus", "2", "--width", "narrow", "--threads", "1", "--dataset", "generated"]
                .map(String::from),
        );
        args.extend(placement(1, 2, gpus()).options());
        args.extend(["--data-dir".into(), setup.shared_data.display().to_string()]);
        let env =
            vec![("MASTER_ADDR".into(), "127.0.0.1".into()), ("MASTER_PORT".into(), free_port().to_string())];
        let launch = Launch { name: "quick-evaluation".into(), args, env };
        launch::run_all(bin, &[launch], &setup.work, Duration::from_secs(400), grace).remove(0)
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
        quick_run,
        downloads: None,
        equivalence,
    }
}

/// Which run of a verification.
#[derive(Clone, Copy)]
enum Job {
    /// The run most checks judge: hidden variations, a late rank from step 8,
    /// downloads from the mirror from step 5.
    Main,
    /// The N-ranks-equal-1-rank comparison ("many" or "one").
    Equivalence(&'static str),
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
) -> (Vec<RankProcess>, Vec<Value>, Option<u16>) {
    let prefix = match job {
        Job::Main => String::new(),
        Job::Equivalence(name) => format!("equivalence-{name}-"),
    };
    let trace_dir = setup.work.join(format!("{prefix}trace"));
    let _ = std::fs::create_dir_all(&trace_dir);
    let port = (step >= 4).then(free_port);
    let mut launches = Vec::new();
    let mut placement = Vec::new();
    for node in 0..v.nodes {
        let mut args = common_args(step, v, node);
        let mut env: Vec<(String, String)> = vec![
            ("DDP_LAB_TRACE".into(), trace_dir.display().to_string()),
            (labkit::INIT_SEED_ENV.into(), v.init_seed.to_string()),
        ];
        match port {
            Some(p) => {
                env.push(("MASTER_ADDR".into(), "127.0.0.1".into()));
                env.push(("MASTER_PORT".into(), p.to_string()));
            }
            // Empty counts as unset: the program must fall back to the lab's address.
            None => {
                env.push(("MASTER_ADDR".into(), String::new()));
                env.push(("MASTER_PORT".into(), String::new()));
            }
        }
        let main = matches!(job, Job::Main);
        if main && step >= 8 && v.world_size() > 1 {
            env.push((labkit::SLOW_RANK_ENV.into(), (v.world_size() - 1).to_string()));
        }
        if !main {
            env.push((labkit::EQUIVALENCE_ENV.into(), "1".into()));
        }
        match (&setup.mirror, step >= 5 && main) {
            (Some((url, manifest)), true) => {
                let dir = setup.work.join(format!("data-node{node}"));
                args.extend(["--dataset".into(), "real".into(), "--mirror".into(), url.clone()]);
                args.extend(["--data-dir".into(), dir.display().to_string()]);
                env.push(("DDP_LAB_MANIFEST".into(), manifest.display().to_string()));
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
                env.push(("LOCAL_RANK".into(), local.to_string()));
                env.push(("LOCAL_WORLD_SIZE".into(), v.ranks_per_node.to_string()));
                launches.push(Launch {
                    name: format!("{prefix}node{node}-rank{local}"),
                    args: args.clone(),
                    env,
                });
                placement.push((node, Some(local)));
            }
        }
    }
    let ended = launch::run_all(bin, &launches, &setup.work, setup.limit, Duration::from_secs(45));
    let processes = placement
        .into_iter()
        .zip(ended)
        .map(|((node, local_rank), ended)| RankProcess { node, local_rank, ended })
        .collect();
    (processes, read_trace(&trace_dir), port)
}

fn read_trace(dir: &Path) -> Vec<Value> {
    let mut events = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return events };
    for entry in entries.flatten() {
        if let Ok(text) = std::fs::read_to_string(entry.path()) {
            events.extend(text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()));
        }
    }
    events.sort_by(|a, b| {
        a["time"].as_f64().partial_cmp(&b["time"].as_f64()).unwrap_or(std::cmp::Ordering::Equal)
    });
    events
}

/// Builds a crate; on failure the single failing check that says so.
pub fn build_or_fail(
    root: &Path,
    package: &str,
    manifest_dir: Option<&Path>,
) -> Result<PathBuf, CheckResult> {
    match launch::build(root, package, manifest_dir) {
        Ok(Build::Binary(bin)) => Ok(bin),
        Ok(Build::Failed(errors)) => Err(CheckResult {
            id: "builds",
            step: 0,
            passed: false,
            observed: format!("cargo build -p {package} failed:\n{}", readable_errors(&errors)),
            expected: "the crate compiles".into(),
            hint: "fix the first compiler error first; later ones often follow from it",
        }),
        Err(e) => Err(CheckResult {
            id: "builds",
            step: 0,
            passed: false,
            observed: format!("could not run cargo: {e}"),
            expected: "cargo on PATH".into(),
            hint: "run the checker from the repository, where `cargo build` works",
        }),
    }
}

/// The compiler's errors without the noise: the `error` and `warning: unused` blocks,
/// at most 60 lines.
fn readable_errors(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("Compiling")).collect();
    let mut out: Vec<&str> = lines.iter().take(60).copied().collect();
    if lines.len() > 60 {
        out.push("... (more in `cargo build` output)");
    }
    out.join("\n")
}

impl Observation {
    fn events(&self, kind: &str) -> Vec<&Value> {
        self.trace.iter().filter(|e| e["event"] == kind).collect()
    }

    /// Events of one kind per global rank (from the trace's `rank` field), in order.
    fn by_rank(&self, kind: &str) -> BTreeMap<u64, Vec<&Value>> {
        let mut out: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
        for e in self.events(kind) {
            if let Some(r) = e["rank"].as_u64() {
                out.entry(r).or_default().push(e);
            }
        }
        out
    }

    fn all_stdout(&self) -> String {
        self.processes.iter().map(|p| p.ended.stdout.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// The first process's stdout and stderr: what a student would see running it.
    pub fn first_output(&self) -> String {
        self.processes.first().map(|p| format!("{}{}", p.ended.stdout, p.ended.stderr)).unwrap_or_default()
    }

    fn failures(&self) -> Vec<String> {
        self.processes
            .iter()
            .filter(|p| !p.ended.success())
            .map(|p| {
                let tail: Vec<&str> = p.ended.stderr.lines().rev().take(8).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("{}: {}\n    {}", p.ended.name, p.ended.describe(), tail.join("\n    "))
            })
            .collect()
    }
}

fn result(
    id: &'static str,
    step: u8,
    passed: bool,
    observed: String,
    expected: String,
    hint: &'static str,
) -> CheckResult {
    CheckResult { id, step, passed, observed, expected, hint }
}

fn epoch_line_regex() -> regex::Regex {
    regex::Regex::new(
        r"^Epoch = +\d+: Cumulative Time = \d+\.\d{3}, Epoch Time = \d+\.\d{3}, Images/sec = [0-9.e+-]+, Validation Loss = [0-9.]+, Validation Accuracy = \d\.\d{3}$",
    )
    .expect("valid regex")
}

/// How far the two runs' weights may drift apart, relative to the step's change.
/// Measured on the solutions: 2e-5 to 3e-3. Beyond summation order, rounding flips a
/// few max-pool and ReLU decisions, whose gradients then differ outright. A model not
/// wrapped in DDP is off by 0.5 to 1.3.
pub const EQUIVALENCE_TOLERANCE: f64 = 0.05;

/// Rank 0's weights after the epoch, N ranks against 1 rank: the largest difference
/// of the weight projections relative to their size.
fn judge_equivalence(eq: &Equivalence) -> (bool, String) {
    let failed: Vec<String> = eq
        .many
        .iter()
        .chain(&eq.one)
        .filter(|p| !p.ended.success())
        .map(|p| format!("{}: {}", p.ended.name, p.ended.describe()))
        .collect();
    if !failed.is_empty() {
        return (false, format!("a run of the comparison failed: {}", failed.join(", ")));
    }
    let projection = |trace: &[Value], kind: &str| -> Option<Vec<f64>> {
        let w = trace
            .iter()
            .find(|e| e["event"] == kind && e["rank"] == 0 && (e["epoch"] == 0 || e["epoch"].is_null()))?;
        w["projection"].as_array()?.iter().map(Value::as_f64).collect()
    };
    let (Some(many), Some(one), Some(start)) = (
        projection(&eq.many_trace, "weights"),
        projection(&eq.one_trace, "weights"),
        projection(&eq.one_trace, "initial_weights"),
    ) else {
        return (false, "no weights traced before or after the epoch in one of the runs".into());
    };
    // Relative to how far one epoch moved the weights: the starting point is shared,
    // so only the updates can differ.
    let moved = one.iter().zip(&start).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())).max(1e-12);
    let diff = many.iter().zip(&one).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / moved;
    let n = eq.settings.world_size();
    (
        diff <= EQUIVALENCE_TOLERANCE,
        format!(
            "{n} ranks x batch {} against 1 rank x batch {}: difference {diff:.1e} of the epoch's change",
            eq.settings.batch_size,
            eq.settings.batch_size * n
        ),
    )
}

/// The checks each step introduces, by id, in the order `judge` reports them.
pub const CHECKS: [&[&str]; 12] = [
    &["imports-dist", "trains"],
    &["options-listed", "options-typed"],
    &["world-size", "rendezvous"],
    &["worker-per-rank"],
    &["global-rank", "rank0-prints"],
    &["prepare-once-per-node", "downloads-per-node"],
    &["sampler-shares", "sampler-set-epoch"],
    &["weights-synchronized", "matches-single-rank"],
    &["throughput-reduced", "epoch-barrier"],
    &["metrics-averaged"],
    &["self-spawn", "failing-rank-ends-run"],
    &["summary", "target-reached"],
];

/// Every check of steps 0..=`obs.step`, in step order.
pub fn judge(obs: &Observation) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let s = obs.step;
    let v = &obs.variation;
    let ws = v.world_size();

    // Step 0.
    let import = regex::Regex::new(r"(?m)^\s*use\s+tch_distributed\s+as\s+dist\s*;").unwrap();
    out.push(result(
        "imports-dist",
        0,
        import.is_match(&obs.source),
        if import.is_match(&obs.source) {
            "found".into()
        } else {
            "no `use ... as dist;` line in src/main.rs".into()
        },
        "the distributed module imported under the name `dist`".into(),
        "the Rust mirror of `import torch.distributed as dist` is one `use` line (guide: step 0)",
    ));
    let failures = obs.failures();
    let lines: Vec<String> =
        obs.all_stdout().lines().filter(|l| l.starts_with("Epoch = ")).map(String::from).collect();
    let well_formed = lines.iter().all(|l| epoch_line_regex().is_match(l));
    out.push(result(
        "trains",
        0,
        failures.is_empty() && !lines.is_empty() && well_formed,
        if !failures.is_empty() {
            format!("{} process(es) failed:\n  {}", failures.len(), failures.join("\n  "))
        } else if lines.is_empty() {
            "no epoch line printed".into()
        } else if !well_formed {
            format!(
                "an epoch line not in the lab's format: {:?}",
                lines.iter().find(|l| !epoch_line_regex().is_match(l))
            )
        } else {
            format!("{} epoch line(s), every process exited 0", lines.len())
        },
        "every process exits 0 and epoch lines are printed in the lab's format".into(),
        "run the step by hand (see the guide's page) and read the first error",
    ));
    if s < 1 {
        return out;
    }

    // Step 1.
    if let Some(help) = &obs.help {
        let text = &help.stdout;
        let want = [("--num-nodes", "1"), ("--num-gpus", "1"), ("--node-id", "0")];
        let missing: Vec<String> = want
            .iter()
            .filter(|(opt, default)| {
                !text.lines().any(|l| l.contains(opt)) || !help_has_default(text, opt, default)
            })
            .map(|(opt, default)| format!("{opt} (default {default})"))
            .collect();
        out.push(result(
            "options-listed",
            1,
            missing.is_empty(),
            if missing.is_empty() {
                "all three in --help".into()
            } else {
                format!("--help lacks {}", missing.join(", "))
            },
            "--help lists --num-nodes, --num-gpus and --node-id with defaults 1, 1 and 0".into(),
            "three clap options in Args, with default_value_t and a doc comment each (guide: step 1)",
        ));
    }
    if let Some(bad) = &obs.bad_value {
        let code = bad.status.and_then(|s| s.code());
        out.push(result(
            "options-typed",
            1,
            // clap's "invalid value" (a typed option), not "unexpected argument" (none).
            code == Some(2)
                && bad.stderr.contains("invalid value 'two'")
                && bad.stderr.contains("--num-gpus"),
            format!("`--num-gpus two` gave {}: {}", bad.describe(), bad.stderr.lines().next().unwrap_or("")),
            "exit code 2 and clap's error: invalid value 'two' for '--num-gpus'".into(),
            "declare the options as numbers (usize), so clap rejects other values",
        ));
    }
    if s < 2 {
        return out;
    }

    // Step 2.
    let worlds = obs.events("world");
    let expected_address = match obs.port {
        Some(p) => format!("127.0.0.1:{p} (env://)"),
        None => "localhost:9956".to_string(),
    };
    let sizes: BTreeSet<u64> = worlds.iter().filter_map(|e| e["world_size"].as_u64()).collect();
    out.push(result(
        "world-size",
        2,
        !worlds.is_empty() && sizes == BTreeSet::from([ws as u64]),
        if worlds.is_empty() {
            "no world announced (labkit::announce_world was not called)".into()
        } else {
            format!("world size {sizes:?}")
        },
        format!("world size {ws} ({} node(s) x {} GPU(s))", v.nodes, v.ranks_per_node),
        "the world size counts every rank on every node (guide: step 2)",
    ));
    let addresses: BTreeSet<&str> = worlds.iter().filter_map(|e| e["rendezvous"].as_str()).collect();
    out.push(result(
        "rendezvous",
        2,
        !worlds.is_empty() && addresses == BTreeSet::from([expected_address.as_str()]),
        format!("{addresses:?}"),
        expected_address.clone(),
        "the lab's localhost:9956 unless MASTER_ADDR and MASTER_PORT are set (guide: step 2)",
    ));
    if s < 3 {
        return out;
    }

    // Step 3.
    let workers = obs.events("worker");
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for w in &workers {
        seen.entry(w["pid"].as_u64().unwrap_or(0))
            .or_default()
            .push(w["worker_local_rank"].as_u64().unwrap_or(u64::MAX));
    }
    let mut local_ranks: Vec<u64> = seen.values().flatten().copied().collect();
    local_ranks.sort();
    let mut want: Vec<u64> = (0..v.nodes).flat_map(|_| 0..v.ranks_per_node as u64).collect();
    want.sort();
    let once_each = seen.values().all(|v| v.len() == 1);
    let launched_right = obs.processes.iter().all(|p| match p.local_rank {
        Some(l) => workers.iter().any(|w| {
            w["pid"].as_u64() == Some(u64::from(p.ended.pid))
                && w["worker_local_rank"].as_u64() == Some(l as u64)
        }),
        None => true,
    });
    out.push(result(
        "worker-per-rank",
        3,
        once_each && local_ranks == want && launched_right,
        format!("worker entered with local ranks {local_ranks:?} in {} process(es)", seen.len()),
        format!("once per rank, with local ranks {want:?} (each process's LOCAL_RANK)"),
        "main reads LOCAL_RANK (dist::local_rank) and calls worker(local_rank, args) (guide: step 3)",
    ));
    if s < 4 {
        return out;
    }

    // Step 4.
    let mut wrong = Vec::new();
    for p in &obs.processes {
        let Some(local) = p.local_rank else { continue };
        let expect = (p.node * v.ranks_per_node + local) as u64;
        let got = obs
            .trace
            .iter()
            .filter(|e| e["pid"].as_u64() == Some(u64::from(p.ended.pid)))
            .find_map(|e| e["rank"].as_u64());
        if got != Some(expect) {
            wrong.push(format!("node {} local rank {local}: rank {got:?}, expected {expect}", p.node));
        }
    }
    let sizes: BTreeSet<u64> = obs.trace.iter().filter_map(|e| e["world_size"].as_u64()).collect();
    out.push(result(
        "global-rank",
        4,
        wrong.is_empty() && sizes == BTreeSet::from([ws as u64]),
        if wrong.is_empty() { format!("group sizes {sizes:?}") } else { wrong.join("; ") },
        format!("global rank = node id x ranks per node + local rank; group size {ws}"),
        "global_rank = node_id * num_gpus + local_rank; pass it and the world size to init_process_group (guide: step 4)",
    ));
    let printed = obs.events("printed");
    let printers: BTreeSet<Option<u64>> = printed.iter().map(|e| e["rank"].as_u64()).collect();
    out.push(result(
        "rank0-prints",
        4,
        !printed.is_empty() && printers == BTreeSet::from([Some(0)]) && lines.len() == printed.len(),
        format!("epoch lines printed by ranks {printers:?}, {} line(s)", lines.len()),
        "only global rank 0 prints the epoch lines".into(),
        "wrap the report's print in `if global_rank == 0` (guide: step 4)",
    ));
    if s < 5 {
        return out;
    }

    // Step 5.
    let prepares = obs.events("prepare_dataset");
    let by_non_zero: Vec<u64> = prepares
        .iter()
        .filter(|e| e["local_rank"].as_u64() != Some(0))
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    out.push(result(
        "prepare-once-per-node",
        5,
        by_non_zero.is_empty() && prepares.len() == v.nodes,
        format!("{} preparation(s); {} by a local rank other than 0", prepares.len(), by_non_zero.len()),
        format!("{} (one per node, by local rank 0), then a barrier before anyone reads", v.nodes),
        "`if local_rank == 0 { prepare }`, then dist::barrier(), then every rank loads (guide: step 5)",
    ));
    if let Some(downloads) = &obs.downloads {
        let ok = labkit::data::FILES.iter().all(|f| downloads.get(*f).copied().unwrap_or(0) == v.nodes);
        out.push(result(
            "downloads-per-node",
            5,
            ok,
            format!("the mirror served {downloads:?}"),
            format!("each of the four files exactly {} time(s), once per node", v.nodes),
            "only local rank 0 of each node may download (guide: step 5)",
        ));
    }
    if s < 6 {
        return out;
    }

    // Step 6.
    let train = obs.by_rank("train_indices");
    let mut problems = Vec::new();
    for rank in 0..ws as u64 {
        let Some(epochs) = train.get(&rank) else {
            problems.push(format!("rank {rank}: no training epoch traced"));
            continue;
        };
        for (e, event) in epochs.iter().enumerate() {
            let got: Vec<u64> = event["indices"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let want = expected_indices(v.train_subset, ws, rank as usize, e as u64);
            if got != want {
                problems.push(format!(
                    "rank {rank} epoch {e}: {} indices starting {:?}, expected {} starting {:?}",
                    got.len(),
                    &got[..got.len().min(5)],
                    want.len(),
                    &want[..want.len().min(5)]
                ));
                break;
            }
        }
    }
    let validation = obs.by_rank("validation");
    for (rank, events) in &validation {
        let got: Vec<u64> = events[0]["indices"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if got != expected_indices(v.test_subset, ws, *rank as usize, 0) {
            problems.push(format!("rank {rank}: validation indices are not its DistributedSampler share"));
        }
    }
    out.push(result(
        "sampler-shares",
        6,
        problems.is_empty(),
        if problems.is_empty() { "every rank iterated exactly its share".into() } else { problems.join("; ") },
        "each rank iterates DistributedSampler(len, world size, rank)'s indices (PyTorch's), disjoint shares covering the set".into(),
        "DistributedSampler::with_defaults(len, world_size, global_rank) for training and validation (guide: step 6)",
    ));
    let rank0 = train.get(&0).cloned().unwrap_or_default();
    let reshuffled = rank0.len() >= 2 && rank0[0]["indices"] != rank0[1]["indices"];
    out.push(result(
        "sampler-set-epoch",
        6,
        reshuffled,
        if reshuffled { "a new order each epoch".into() } else { "the same order every epoch".into() },
        "a different order in every epoch".into(),
        "call train_loader.sampler.set_epoch(epoch) at the start of every epoch (guide: step 6.5)",
    ));
    if s < 7 {
        return out;
    }

    // Step 7.
    let weights = obs.events("weights");
    let mut per_epoch: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for w in &weights {
        per_epoch
            .entry(w["epoch"].as_u64().unwrap_or(0))
            .or_default()
            .insert(w["digest"].as_str().unwrap_or("").to_string());
    }
    let differing: Vec<u64> = per_epoch.iter().filter(|(_, d)| d.len() != 1).map(|(e, _)| *e).collect();
    out.push(result(
        "weights-synchronized",
        7,
        !per_epoch.is_empty() && differing.is_empty() && weights.len() == ws * per_epoch.len(),
        if differing.is_empty() {
            format!("identical on all ranks after {} epoch(s)", per_epoch.len())
        } else {
            format!("ranks' weights differ after epoch(s) {differing:?}")
        },
        "identical weights on every rank after every epoch (ranks started from different random weights)"
            .into(),
        "wrap the model in dist::DistributedDataParallel::new(model, &vs, ...) (guide: step 7)",
    ));
    let (passed, observed) = match &obs.equivalence {
        None => (false, "the comparison did not run".to_string()),
        Some(eq) => judge_equivalence(eq),
    };
    out.push(result(
        "matches-single-rank",
        7,
        passed,
        observed,
        format!(
            "{ws} ranks x batch {b} end the epoch with the weights of 1 rank x batch {} (differences <= {EQUIVALENCE_TOLERANCE} of the epoch's change)",
            ws * v.batch_size,
            b = v.batch_size
        ),
        "DDP averages the gradients of the ranks' batches: with the DistributedSampler, one step of N ranks is one step on the N batches together (guide: step 7)",
    ));
    if s < 8 {
        return out;
    }

    // Step 8.
    let per_rank = obs.by_rank("images_per_sec");
    let mut mismatches = Vec::new();
    for (e, p) in obs.events("printed").iter().enumerate() {
        let shown = p["images_per_sec"].as_f64().unwrap_or(f64::NAN);
        let sum: f64 =
            per_rank.values().filter_map(|evs| evs.get(e)).filter_map(|x| x["value"].as_f64()).sum();
        if (shown - sum).abs() > 1e-6 * sum.abs().max(1.0) {
            mismatches.push(format!("epoch {e}: printed {shown:.1}, sum of ranks {sum:.1}"));
        }
    }
    out.push(result(
        "throughput-reduced",
        8,
        mismatches.is_empty() && !obs.events("printed").is_empty(),
        if mismatches.is_empty() {
            "rank 0 printed the sum of the ranks' images/sec".into()
        } else {
            mismatches.join("; ")
        },
        "rank 0's images/sec == the sum of every rank's".into(),
        "dist::reduce the images/sec tensor to rank 0 with ReduceOp::Sum (guide: step 8)",
    ));
    // With the barrier every rank's clock stops when the late rank arrives, so an
    // epoch's times agree across ranks; without it the others stop about the delay
    // earlier. Comparing ranks (not a fixed time) holds however slow the machine is.
    let delay = labkit::SLOW_RANK_DELAY.as_secs_f64();
    let mut per_epoch: BTreeMap<u64, Vec<(u64, f64)>> = BTreeMap::new();
    for (r, evs) in obs.by_rank("epoch_report") {
        for e in evs {
            let epoch = e["epoch"].as_u64().unwrap_or(u64::MAX);
            per_epoch.entry(epoch).or_default().push((r, e["epoch_time"].as_f64().unwrap_or(0.0)));
        }
    }
    let early: Vec<String> = per_epoch
        .iter()
        .filter_map(|(epoch, times)| {
            let latest = times.iter().map(|t| t.1).fold(0.0, f64::max);
            let before: Vec<String> = times
                .iter()
                .filter(|(_, t)| *t < latest - delay / 2.0)
                .map(|(r, t)| format!("rank {r} {t:.2} s"))
                .collect();
            (!before.is_empty()).then(|| {
                format!("epoch {epoch}: {} while the late rank took {latest:.2} s", before.join(", "))
            })
        })
        .collect();
    let complete = per_epoch.values().all(|t| t.len() == ws) && !per_epoch.is_empty();
    out.push(result(
        "epoch-barrier",
        8,
        early.is_empty() && complete,
        if !complete {
            format!("epoch times of {} epoch(s) from fewer than {ws} ranks", per_epoch.len())
        } else if early.is_empty() {
            "every rank's epoch ends with the late rank".into()
        } else {
            format!("epochs ended before the late rank: {}", early.join("; "))
        },
        format!(
            "with one rank {delay:.1} s late, every rank's epoch time within {:.2} s of the late rank's",
            delay / 2.0
        ),
        "dist::barrier() after training, before stopping the clock (guide: step 8)",
    ));
    if s < 9 {
        return out;
    }

    // Step 9.
    let raw = obs.by_rank("validation");
    let reports = obs.by_rank("epoch_report");
    let mut off = Vec::new();
    for e in 0..v.epochs {
        let accs: Vec<f64> =
            raw.values().filter_map(|evs| evs.get(e)).filter_map(|x| x["accuracy"].as_f64()).collect();
        let losses: Vec<f64> =
            raw.values().filter_map(|evs| evs.get(e)).filter_map(|x| x["loss"].as_f64()).collect();
        if accs.len() != ws {
            continue;
        }
        let (ma, ml) = (accs.iter().sum::<f64>() / ws as f64, losses.iter().sum::<f64>() / ws as f64);
        for (r, evs) in &reports {
            if let Some(rep) = evs.get(e) {
                let (a, l) = (
                    rep["validation_accuracy"].as_f64().unwrap_or(f64::NAN),
                    rep["validation_loss"].as_f64().unwrap_or(f64::NAN),
                );
                if (a - ma).abs() > 1e-9 || (l - ml).abs() > 1e-9 {
                    off.push(format!(
                        "rank {r} epoch {e}: accuracy {a:.4}, loss {l:.4}; mean {ma:.4}, {ml:.4}"
                    ));
                }
            }
        }
    }
    out.push(result(
        "metrics-averaged",
        9,
        off.is_empty() && reports.len() == ws,
        if off.is_empty() { "every rank holds the mean of the ranks' metrics".into() } else { off.join("; ") },
        "every rank's validation accuracy and loss == the mean over ranks".into(),
        "all_reduce a tensor of [accuracy, loss] with ReduceOp::Sum and divide by the world size (guide: step 9)",
    ));
    if s < 10 {
        return out;
    }

    // Step 10.
    let parent = obs.processes.first().map(|p| u64::from(p.ended.pid)).unwrap_or(0);
    let children: BTreeSet<u64> = workers
        .iter()
        .filter(|w| w["ppid"].as_u64() == Some(parent))
        .filter_map(|w| w["pid"].as_u64())
        .collect();
    out.push(result(
        "self-spawn",
        10,
        obs.processes.len() == 1 && children.len() == v.ranks_per_node && workers.len() == v.ranks_per_node,
        format!(
            "one invocation; {} worker(s) in child processes of it, {} in all",
            children.len(),
            workers.len()
        ),
        format!("one invocation starts {} rank processes (--num-gpus)", v.ranks_per_node),
        "dist::spawn(args.num_gpus, |local_rank| worker(local_rank, args)) (guide: step 10)",
    ));
    if let Some(f) = &obs.fail_run {
        out.push(result(
            "failing-rank-ends-run",
            10,
            // It must end because of rank 1 (and say so), not by a timeout of its own.
            f.status.is_some_and(|st| !st.success())
                && !f.timed_out
                && !f.left_behind
                && f.stderr.contains("rank 1"),
            format!(
                "with rank 1 failing: {} after {:.1} s{}{}",
                f.describe(),
                f.elapsed.as_secs_f64(),
                if f.left_behind { ", processes left behind" } else { "" },
                if f.stderr.contains("rank 1") { "" } else { ", and no message naming rank 1" }
            ),
            "a non-zero exit that names the failed rank 1, no hang, no process left behind".into(),
            "let dist::spawn run the ranks: it stops the others when one fails (guide: step 10)",
        ));
    }
    if s < 11 {
        return out;
    }

    // Step 11.
    let summary_line =
        obs.all_stdout().lines().find(|l| l.starts_with("Quick evaluation:")).map(String::from);
    out.push(result(
        "summary",
        11,
        summary_line.as_deref().is_some_and(|l| l.contains(&format!("{ws} rank"))),
        summary_line.clone().unwrap_or_else(|| "no `Quick evaluation:` line".into()),
        format!("rank 0 prints the quick evaluation's summary for {ws} ranks"),
        "labkit::print_summary on rank 0 after the loop, then dist::destroy_process_group() (guide: step 11)",
    ));
    if let Some(q) = &obs.quick_run {
        let line = q.stdout.lines().find(|l| l.starts_with("Quick evaluation:")).unwrap_or("");
        out.push(result(
            "target-reached",
            11,
            q.success() && line.contains("reached at epoch"),
            format!("{}: {}", q.describe(), if line.is_empty() { "no summary" } else { line }),
            "the quick evaluation reaches the target validation accuracy".into(),
            "check the learning rate and batch size against the lab's defaults (guide: step 11)",
        ));
    }
    out
}

fn help_has_default(help: &str, opt: &str, default: &str) -> bool {
    // clap prints `[default: 1]` on the option's line or on its help text's last line.
    let option_line =
        regex::Regex::new(&format!(r"^\s*(-\w, )?{}\b", regex::escape(opt))).expect("valid regex");
    let mut after = false;
    for line in help.lines() {
        if option_line.is_match(line) {
            after = true;
        } else if after && line.trim_start().starts_with('-') {
            return false;
        }
        if after && line.contains(&format!("[default: {default}]")) {
            return true;
        }
    }
    false
}

fn expected_indices(len: usize, world: usize, rank: usize, epoch: u64) -> Vec<u64> {
    match DistributedSampler::with_defaults(len, world, rank) {
        Ok(mut s) => {
            s.set_epoch(epoch);
            s.indices().into_iter().map(|i| i as u64).collect()
        }
        Err(_) => Vec::new(),
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

    use super::*;

    fn not_started() -> Ended {
        Ended {
            name: "nothing".into(),
            pid: 0,
            status: None,
            timed_out: false,
            stdout: String::new(),
            stderr: String::new(),
            elapsed: Duration::ZERO,
            left_behind: false,
        }
    }

    /// An observation of a run that produced nothing at all.
    fn nothing(step: u8) -> Observation {
        Observation {
            step,
            variation: Variation::for_step(step, 1),
            source: String::new(),
            processes: Vec::new(),
            trace: Vec::new(),
            port: None,
            help: (step >= 1).then(not_started),
            bad_value: (step >= 1).then(not_started),
            fail_run: (step >= 10).then(not_started),
            quick_run: (step >= 11).then(not_started),
            equivalence: None,
            downloads: (step >= 5).then(BTreeMap::new),
        }
    }

    #[test]
    fn the_table_of_checks_is_what_judge_reports() {
        for step in 0..12u8 {
            let results = judge(&nothing(step));
            for s in 0..=step {
                let ids: Vec<&str> = results.iter().filter(|r| r.step == s).map(|r| r.id).collect();
                assert_eq!(ids, CHECKS[usize::from(s)], "checks of step {s} in a step {step} run");
            }
        }
    }

    #[test]
    fn the_guide_describes_every_check() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        for (step, ids) in CHECKS.iter().enumerate() {
            for id in *ids {
                let bullet = checker_aux::check_hint_for(root, step as u8, id);
                assert!(
                    bullet.as_deref().is_some_and(|b| b.starts_with(&format!("`{id}`: "))),
                    "lab-guide/src/steps/step-{step:02}.md: no bullet `{id}`: ... under \"What the checker will test\""
                );
            }
        }
    }

    #[test]
    fn a_run_that_produced_nothing_fails_every_check_but_the_source_ones() {
        let results = judge(&nothing(11));
        let passed: Vec<&str> = results.iter().filter(|r| r.passed).map(|r| r.id).collect();
        assert!(passed.is_empty(), "passed with no run at all: {passed:?}");
    }
}
