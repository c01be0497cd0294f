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

/// Everything one verification observed.
#[derive(Serialize, Deserialize)]
pub struct Observation {
    pub step: u8,
    pub variation: Variation,
    pub source: String,
    /// The run most checks judge.
    pub main: Run,
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
}

impl Equivalence {
    /// Every process of both runs.
    pub fn processes(&self) -> impl Iterator<Item = &RankProcess> {
        [&self.many, &self.one].into_iter().flat_map(|run| &run.processes)
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
