//! Step 10: one invocation spawns the node's ranks, and a failing rank ends the run.
use std::collections::BTreeSet;

use lab_trace::event::Worker;

use super::{events, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const SELF_SPAWN: &str = "self-spawn";
pub const FAILING_RANK_ENDS_RUN: &str = "failing-rank-ends-run";

pub const STEP: Step = Step {
    gains: &[Gains::SpawnsItsRanks],
    runs: &[RunKind::FailingRank],
    checks: &[
        Check {
            id: SELF_SPAWN,
            observes: "which processes ran the workers, and their parent",
            needs: None,
            hint: "main starts this node's ranks itself with dist::spawn, one worker per GPU of the node, each given its local rank and the arguments (guide: step 10)",
            judge: self_spawn,
        },
        Check {
            id: FAILING_RANK_ENDS_RUN,
            observes: "a run whose rank 1 fails on purpose",
            needs: None,
            hint: "let dist::spawn run the ranks: it stops the others when one fails (guide: step 10)",
            judge: failing_rank_ends_run,
        },
    ],
};

/// One invocation per node, each the parent of its node's `--num-gpus` workers: a node
/// that spawns the world size (`dist::spawn(args.world_size, ...)`) starts too many.
fn self_spawn(obs: &Observation) -> Option<Finding> {
    let (nodes, n) = (obs.variation.nodes, obs.variation.ranks_per_node);
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let workers = events::<Worker>(trace);
    // Each invocation's workers: the distinct processes whose parent it is.
    let children: Vec<usize> = obs
        .main
        .processes
        .iter()
        .map(|p| {
            let parent = i64::from(p.ended.pid);
            let pids: BTreeSet<u32> = workers
                .iter()
                .filter(|(record, _)| record.ppid == parent)
                .map(|(record, _)| record.pid)
                .collect();
            pids.len()
        })
        .collect();
    let invocations = match nodes {
        1 => "one invocation".to_string(),
        _ => format!("{} invocation(s) for {nodes} nodes", children.len()),
    };
    Finding::shown(
        children.len() == nodes && children.iter().all(|&c| c == n) && workers.len() == nodes * n,
        format!(
            "{invocations}; {} worker(s) in child processes of {}, {} in all",
            children.iter().map(usize::to_string).collect::<Vec<_>>().join(" and "),
            if nodes == 1 { "it" } else { "each" },
            workers.len()
        ),
        format!("one invocation per node starts that node's {n} rank processes (--num-gpus)"),
    )
}

fn failing_rank_ends_run(obs: &Observation) -> Option<Finding> {
    let f = obs.single(RunKind::FailingRank)?;
    let names_rank = f.stderr.contains("rank 1");
    Finding::shown(
        // It must end because of rank 1 (and say so), not by a timeout of its own.
        f.status.is_some_and(|st| !st.success()) && !f.timed_out && !f.left_behind && names_rank,
        format!(
            "with rank 1 failing: {} after {:.1} s{}{}",
            f.describe(),
            f.elapsed.as_secs_f64(),
            if f.left_behind { ", processes left behind" } else { "" },
            if names_rank { "" } else { ", and no message naming rank 1" }
        ),
        "a non-zero exit that names the failed rank 1, no hang, no process left behind",
    )
}
