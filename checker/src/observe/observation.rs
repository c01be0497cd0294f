//! What a verification observed, the checks' input: the processes of each run, how
//! each ended, the traces. Serde-derived, so that a recorded observation is a fixture.
use std::collections::BTreeMap;
use std::path::Path;

use lab_trace::Trace;
use serde::{Deserialize, Serialize};

use super::Variation;
use crate::job::Ended;

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
