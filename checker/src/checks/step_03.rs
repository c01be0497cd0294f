//! Step 3: one worker per rank, entered with the process's local rank.
use std::collections::BTreeMap;

use lab_trace::event::Worker;

use super::{events, malformed, Check, Finding, Step};
use crate::observe::{Observation, RunKind};

pub const WORKER_PER_RANK: &str = "worker-per-rank";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[Check {
        id: WORKER_PER_RANK,
        observes: "which process entered the worker, with which local rank",
        needs: Some(RunKind::Main),
        hint: "main reads LOCAL_RANK (dist::local_rank) and calls worker(local_rank, args) (guide: step 3)",
        judge: worker_per_rank,
    }],
};

fn worker_per_rank(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let workers = events::<Worker>(trace);
    let mut seen: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (record, w) in &workers {
        seen.entry(record.pid).or_default().push(w.worker_local_rank);
    }
    let mut local_ranks: Vec<usize> = seen.values().flatten().copied().collect();
    local_ranks.sort();
    let mut want: Vec<usize> = (0..v.nodes).flat_map(|_| 0..v.ranks_per_node).collect();
    want.sort();
    let expected = format!("once per rank, with local ranks {want:?} (each process's LOCAL_RANK)");
    if workers.is_empty() {
        return Finding::missing("no worker entered", expected);
    }
    let once_each = seen.values().all(|v| v.len() == 1);
    let launched_right = obs.main.processes.iter().all(|p| match p.local_rank {
        Some(l) => workers.iter().any(|(record, w)| record.pid == p.ended.pid && w.worker_local_rank == l),
        None => true,
    });
    Finding::shown(
        once_each && local_ranks == want && launched_right,
        format!("worker entered with local ranks {local_ranks:?} in {} process(es)", seen.len()),
        expected,
    )
}
