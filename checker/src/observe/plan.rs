//! What a verification of a step runs, and how: the [`Plan`] the steps' declarations
//! make (`checks::plan`, from the registry of steps). A step declares what its program
//! gains ([`Gains`]) and the kinds of run it adds ([`RunKind`]); a verification of
//! step N runs the program as steps 0 to N declare.
use super::RunKind;

/// What a step's program gains that the checker's runs rely on: each is declared by the
/// step that brings it, and holds from that step on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gains {
    /// `--num-nodes`, `--num-gpus`, `--node-id` (and so `--help` and a bad value).
    NodeOptions,
    /// The process group, over the rendezvous address the program reads (`MASTER_ADDR`,
    /// `MASTER_PORT`).
    ProcessGroup,
    /// The data set downloaded once per node, then a barrier (the mirror that counts
    /// downloads, a slow preparation).
    DataOncePerNode,
    /// DDP, so N ranks × batch B must train as 1 rank × N·B.
    Ddp,
    /// Throughput measured behind a barrier (a slow rank shows a missing one).
    ThroughputBarrier,
    /// The program spawns its node's ranks (one launch per node; a failing rank must
    /// bring the others down).
    SpawnsItsRanks,
    /// The early stop of the quick evaluation (the main run stops early).
    EarlyStop,
    /// Checkpoints and `--resume` (a slow save shows a missing barrier).
    Checkpoints,
    /// `--momentum`: SGD with momentum, whose buffers the checkpoints and the shards
    /// carry (the checker draws it on half its seeds).
    Momentum,
    /// The model cut into pipeline stages.
    Pipeline,
    /// FSDP.
    Fsdp,
    /// `--tensor-parallel T`: every block split over the ranks.
    TensorParallel,
    /// `--tensor-parallel T` with T dividing the world size: a 2-D mesh, DDP over "dp" ×
    /// TP over "tp".
    Mesh,
}

/// What a verification of step `step` runs: what steps 0 to `step` gained and the kinds
/// of run they added.
#[derive(Debug, Clone)]
pub struct Plan {
    pub step: u8,
    pub gains: Vec<Gains>,
    pub runs: Vec<RunKind>,
}

impl Plan {
    /// Whether the step's program has `gains`.
    pub fn has(&self, gains: Gains) -> bool {
        self.gains.contains(&gains)
    }

    /// Whether the verification makes the runs of `kind`.
    pub fn makes(&self, kind: RunKind) -> bool {
        self.runs.contains(&kind)
    }
}
