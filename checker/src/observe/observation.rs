//! What a verification observed, the checks' input: each [`Run`], its processes (how
//! each ended) and its trace. Serde-derived, so that a recorded observation is a fixture.
use std::collections::BTreeMap;
use std::path::Path;

use lab_trace::Trace;
use serde::{Deserialize, Serialize};

use super::Variation;
use crate::job::Ended;

/// A process of a [`Run`], where it ran and how it ended.
#[derive(Serialize, Deserialize)]
pub struct RankProcess {
    pub node: usize,
    /// `None` for a self-spawning invocation.
    pub local_rank: Option<usize>,
    pub ended: Ended,
}

/// One job of the program: its processes and the trace its ranks wrote.
#[derive(Serialize, Deserialize)]
pub struct Run {
    pub processes: Vec<RankProcess>,
    pub trace: Trace,
}

/// The kinds of run a verification makes. A step declares the kinds it adds (its
/// module in `checks`); a check names the kind its evidence comes from, and the
/// [`Observation`] is read by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunKind {
    /// The run most checks judge: hidden variations, a late rank from step 8,
    /// downloads from the mirror from step 5, the early stop from step 11.
    Main,
    /// `--help` and a bad option value.
    Options,
    /// The program with one rank made to fail.
    FailingRank,
    /// The finished lab's quick evaluation.
    QuickEvaluation,
    /// The N-rank and 1-rank runs of the comparison.
    Equivalence,
    /// The runs stopped and resumed, and the uninterrupted one.
    Resume,
    /// The pipeline's runs and the uncut model's step beside them.
    Pipeline,
    /// The runs with `--fsdp` and without.
    Fsdp,
    /// The run with `--tensor-parallel T` and the one-rank run beside it.
    TensorParallel,
    /// Step 16's 2-D mesh run (`--tensor-parallel 2` on 4 ranks) and DDP beside it.
    Mesh,
}

/// What the runs of one kind (but [`RunKind::Main`], always [`Observation::main`])
/// observed.
pub enum Runs {
    Options { help: Ended, bad_value: Ended },
    FailingRank(Ended),
    QuickEvaluation(Ended),
    Equivalence(Equivalence),
    Resume(ResumeRuns),
    Pipeline(PipelineRuns),
    Fsdp(FsdpRuns),
    TensorParallel(TensorParallelRuns),
    Mesh(MeshRuns),
}

impl Runs {
    pub fn kind(&self) -> RunKind {
        match self {
            Runs::Options { .. } => RunKind::Options,
            Runs::FailingRank(_) => RunKind::FailingRank,
            Runs::QuickEvaluation(_) => RunKind::QuickEvaluation,
            Runs::Equivalence(_) => RunKind::Equivalence,
            Runs::Resume(_) => RunKind::Resume,
            Runs::Pipeline(_) => RunKind::Pipeline,
            Runs::Fsdp(_) => RunKind::Fsdp,
            Runs::TensorParallel(_) => RunKind::TensorParallel,
            Runs::Mesh(_) => RunKind::Mesh,
        }
    }

    /// How every process of these runs ended.
    pub fn processes(&self) -> Vec<&Ended> {
        match self {
            Runs::Options { help, bad_value } => vec![help, bad_value],
            Runs::FailingRank(ended) | Runs::QuickEvaluation(ended) => vec![ended],
            Runs::Equivalence(runs) => runs.processes().map(|p| &p.ended).collect(),
            Runs::Resume(runs) => runs.processes().map(|p| &p.ended).collect(),
            Runs::Pipeline(runs) => runs.processes().map(|p| &p.ended).collect(),
            Runs::Fsdp(runs) => runs.processes().map(|p| &p.ended).collect(),
            Runs::TensorParallel(runs) => runs.processes().map(|p| &p.ended).collect(),
            Runs::Mesh(runs) => runs.processes().map(|p| &p.ended).collect(),
        }
    }
}

/// Everything one verification observed. Recorded (and read back) in the form the
/// fixtures hold, one field per kind of run (see [`Recorded`]).
#[derive(Deserialize)]
#[serde(from = "Recorded")]
pub struct Observation {
    pub step: u8,
    pub variation: Variation,
    pub source: String,
    /// The run most checks judge.
    pub main: Run,
    pub port: Option<u16>,
    pub downloads: Option<BTreeMap<String, usize>>,
    /// The other kinds' runs, each kind at most once, in the order made.
    runs: Vec<Runs>,
}

impl Observation {
    /// An observation of the main run alone; [`Observation::insert`] adds the others.
    pub fn of_main(
        step: u8,
        variation: Variation,
        source: String,
        main: Run,
        port: Option<u16>,
    ) -> Observation {
        Observation { step, variation, source, main, port, downloads: None, runs: Vec::new() }
    }

    /// The runs of kind `kind`, when they were made (never for [`RunKind::Main`]).
    pub fn run(&self, kind: RunKind) -> Option<&Runs> {
        self.runs.iter().find(|r| r.kind() == kind)
    }

    #[cfg(test)]
    pub fn run_mut(&mut self, kind: RunKind) -> Option<&mut Runs> {
        self.runs.iter_mut().find(|r| r.kind() == kind)
    }

    /// Adds runs, in place of any of their kind.
    pub fn insert(&mut self, runs: Runs) {
        self.runs.retain(|r| r.kind() != runs.kind());
        self.runs.push(runs);
    }

    /// How every process of the runs of `kind` ended; `None` when they were not made.
    pub fn processes(&self, kind: RunKind) -> Option<Vec<&Ended>> {
        match kind {
            RunKind::Main => Some(self.main.processes.iter().map(|p| &p.ended).collect()),
            kind => self.run(kind).map(Runs::processes),
        }
    }

    pub fn equivalence(&self) -> Option<&Equivalence> {
        match self.run(RunKind::Equivalence)? {
            Runs::Equivalence(runs) => Some(runs),
            _ => None,
        }
    }

    pub fn resume(&self) -> Option<&ResumeRuns> {
        match self.run(RunKind::Resume)? {
            Runs::Resume(runs) => Some(runs),
            _ => None,
        }
    }

    pub fn pipeline(&self) -> Option<&PipelineRuns> {
        match self.run(RunKind::Pipeline)? {
            Runs::Pipeline(runs) => Some(runs),
            _ => None,
        }
    }

    pub fn fsdp(&self) -> Option<&FsdpRuns> {
        match self.run(RunKind::Fsdp)? {
            Runs::Fsdp(runs) => Some(runs),
            _ => None,
        }
    }

    pub fn tensor_parallel(&self) -> Option<&TensorParallelRuns> {
        match self.run(RunKind::TensorParallel)? {
            Runs::TensorParallel(runs) => Some(runs),
            _ => None,
        }
    }

    pub fn mesh(&self) -> Option<&MeshRuns> {
        match self.run(RunKind::Mesh)? {
            Runs::Mesh(runs) => Some(runs),
            _ => None,
        }
    }

    /// The one process of a [`RunKind::FailingRank`] or [`RunKind::QuickEvaluation`].
    pub fn single(&self, kind: RunKind) -> Option<&Ended> {
        match self.run(kind)? {
            Runs::FailingRank(ended) | Runs::QuickEvaluation(ended) => Some(ended),
            _ => None,
        }
    }

    /// `--help`'s and the bad value's processes.
    pub fn options(&self) -> Option<(&Ended, &Ended)> {
        match self.run(RunKind::Options)? {
            Runs::Options { help, bad_value } => Some((help, bad_value)),
            _ => None,
        }
    }
}

/// An [`Observation`] as it is recorded: one optional field per kind of run, the form
/// of every fixture under `checker/fixtures/observations`.
#[derive(Deserialize)]
struct Recorded {
    step: u8,
    variation: Variation,
    source: String,
    main: Run,
    port: Option<u16>,
    help: Option<Ended>,
    bad_value: Option<Ended>,
    fail_run: Option<Ended>,
    quick_run: Option<Ended>,
    downloads: Option<BTreeMap<String, usize>>,
    equivalence: Option<Equivalence>,
    #[serde(default)]
    resume: Option<ResumeRuns>,
    #[serde(default)]
    pipeline: Option<PipelineRuns>,
    #[serde(default)]
    fsdp: Option<FsdpRuns>,
    #[serde(default)]
    tensor_parallel: Option<TensorParallelRuns>,
    #[serde(default)]
    mesh: Option<MeshRuns>,
}

/// [`Recorded`], borrowed from an observation to write it.
#[derive(Serialize)]
struct RecordedRef<'a> {
    step: u8,
    variation: &'a Variation,
    source: &'a str,
    main: &'a Run,
    port: Option<u16>,
    help: Option<&'a Ended>,
    bad_value: Option<&'a Ended>,
    fail_run: Option<&'a Ended>,
    quick_run: Option<&'a Ended>,
    downloads: Option<&'a BTreeMap<String, usize>>,
    equivalence: Option<&'a Equivalence>,
    resume: Option<&'a ResumeRuns>,
    pipeline: Option<&'a PipelineRuns>,
    fsdp: Option<&'a FsdpRuns>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tensor_parallel: Option<&'a TensorParallelRuns>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mesh: Option<&'a MeshRuns>,
}

impl Serialize for Observation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let options = self.options();
        RecordedRef {
            step: self.step,
            variation: &self.variation,
            source: &self.source,
            main: &self.main,
            port: self.port,
            help: options.map(|(help, _)| help),
            bad_value: options.map(|(_, bad_value)| bad_value),
            fail_run: self.single(RunKind::FailingRank),
            quick_run: self.single(RunKind::QuickEvaluation),
            downloads: self.downloads.as_ref(),
            equivalence: self.equivalence(),
            resume: self.resume(),
            pipeline: self.pipeline(),
            fsdp: self.fsdp(),
            tensor_parallel: self.tensor_parallel(),
            mesh: self.mesh(),
        }
        .serialize(serializer)
    }
}

impl From<Recorded> for Observation {
    fn from(r: Recorded) -> Observation {
        let mut obs = Observation::of_main(r.step, r.variation, r.source, r.main, r.port);
        obs.downloads = r.downloads;
        // --help and the bad value are run together: both or neither were recorded.
        if let (Some(help), Some(bad_value)) = (r.help, r.bad_value) {
            obs.insert(Runs::Options { help, bad_value });
        }
        let runs = [
            r.fail_run.map(Runs::FailingRank),
            r.quick_run.map(Runs::QuickEvaluation),
            r.equivalence.map(Runs::Equivalence),
            r.resume.map(Runs::Resume),
            r.pipeline.map(Runs::Pipeline),
            r.fsdp.map(Runs::Fsdp),
            r.tensor_parallel.map(Runs::TensorParallel),
            r.mesh.map(Runs::Mesh),
        ];
        runs.into_iter().flatten().for_each(|runs| obs.insert(runs));
        obs
    }
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
    pub pipelined: Run,
    /// The one-step comparison's settings (its world is the main run's).
    pub step_settings: Variation,
    pub cut: Run,
    pub uncut: Run,
}

impl PipelineRuns {
    /// Every process of the three runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.pipelined, &self.cut, &self.uncut].into_iter().flat_map(|run| &run.processes)
    }
}

/// Step 14's two runs: the same program, world (one node of the main run's ranks per
/// node), data and seeds, with `--fsdp` and without it (DDP), side by side.
#[derive(Serialize, Deserialize)]
pub struct FsdpRuns {
    /// Their settings ([`Variation::for_fsdp`]).
    pub settings: Variation,
    pub fsdp: Run,
    pub ddp: Run,
}

impl FsdpRuns {
    /// Every process of both runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.fsdp, &self.ddp].into_iter().flat_map(|run| &run.processes)
    }
}

/// Step 15's two runs, on the same data and seed, dropout off, every rank seeded
/// alike (TP peers must start from one model): the program with `--tensor-parallel`
/// on [`Variation::for_tensor_parallel`]'s ranks, and without it on one rank.
#[derive(Serialize, Deserialize)]
pub struct TensorParallelRuns {
    /// The split run's settings; the one-rank run's are the same on one rank.
    pub settings: Variation,
    pub split: Run,
    pub whole: Run,
}

impl TensorParallelRuns {
    /// Every process of both runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.split, &self.whole].into_iter().flat_map(|run| &run.processes)
    }
}

/// Step 16's two runs, on the same data and seed, dropout off, every rank seeded alike
/// ([`Variation::for_mesh`]): the program with `--tensor-parallel 2 --sync-batch-norm`
/// on 4 ranks (a 2 × 2 mesh, DDP over "dp" × TP over "tp"), and without it on 2 ranks
/// (DDP over the DP dimension's 2 replicas, whose samplers walk the same shares).
#[derive(Serialize, Deserialize)]
pub struct MeshRuns {
    /// The mesh run's settings; the DDP run's are the same on 2 ranks.
    pub settings: Variation,
    pub mesh: Run,
    pub ddp: Run,
}

impl MeshRuns {
    /// Every process of both runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.mesh, &self.ddp].into_iter().flat_map(|run| &run.processes)
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
    pub uninterrupted: Run,
    /// Its trace is recorded like the others', though no check reads it (the resumed
    /// run's is the one compared); the fixtures recorded before hold an empty one.
    pub stopped: Run,
    pub resumed: Run,
}

impl ResumeRuns {
    /// Every process of the three runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.uninterrupted, &self.stopped, &self.resumed].into_iter().flat_map(|run| &run.processes)
    }
}

/// The two runs that must train to the same weights.
#[derive(Serialize, Deserialize)]
pub struct Equivalence {
    /// The N-rank run's settings.
    pub settings: Variation,
    pub many: Run,
    pub one: Run,
    /// The same comparison on the exact-comparison model, step by step. `None` in the
    /// observations recorded before it ran (not written then, so that they write back
    /// as recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<ExactSteps>,
}

/// N ranks × batch B against 1 rank × batch N·B on the exact-comparison model
/// (`--model mlp`), the weights traced after each of the first `steps` steps.
#[derive(Serialize, Deserialize)]
pub struct ExactSteps {
    /// The N-rank run's settings ([`Variation::for_exact_steps`]).
    pub settings: Variation,
    /// The steps traced (`labkit::TRACE_STEPS_ENV`).
    pub steps: usize,
    pub many: Run,
    pub one: Run,
}

impl Equivalence {
    /// Every process of the runs, the exact model's too.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        let exact = self.exact.iter().flat_map(|e| [&e.many, &e.one]);
        [&self.many, &self.one].into_iter().chain(exact).flat_map(|run| &run.processes)
    }
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
        self.main
            .processes
            .first()
            .map(|p| format!("{}{}", p.ended.stdout, p.ended.stderr))
            .unwrap_or_default()
    }
}
