//! Step 4: the global rank, and only rank 0 prints.
use std::collections::{BTreeMap, BTreeSet};

use lab_trace::event::Printed;
use lab_trace::Record;

use super::{epoch_lines, events, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const GLOBAL_RANK: &str = "global-rank";
pub const RANK0_PRINTS: &str = "rank0-prints";

pub const STEP: Step = Step {
    gains: &[Gains::ProcessGroup],
    runs: &[],
    checks: &[
        Check {
            id: GLOBAL_RANK,
            observes: "the rank and group size each process joined with",
            // A group that never forms is this check's own property (two ranks claiming one
            // number never meet): no rank at all is a failure here, not "could not judge".
            needs: None,
            hint: "a global rank counts every rank of the nodes before this one, then adds the local rank; pass it and the world size to init_process_group (guide: step 4)",
            judge: global_rank,
        },
        Check {
            id: RANK0_PRINTS,
            observes: "which ranks printed epoch lines",
            needs: Some(RunKind::Main),
            hint: "wrap the report's print in `if global_rank == 0` (guide: step 4)",
            judge: rank0_prints,
        },
    ],
};

/// Each rank process of the main run: its node, its local rank, the global rank it
/// joined a group with (`None`: it joined none) and the stderr that would say why.
/// Before step 10 a rank is a process the checker started; from step 10 it is a child
/// that a node's invocation spawned (its records' parent is that invocation), so that
/// a finished program is held to the same numbering.
fn joined<'a>(obs: &'a Observation, trace: &[Record]) -> Vec<(usize, usize, Option<usize>, &'a str)> {
    let mut out = Vec::new();
    for p in &obs.main.processes {
        let stderr = p.ended.stderr.as_str();
        match p.local_rank {
            Some(local) => {
                let got = trace.iter().filter(|r| r.pid == p.ended.pid).find_map(|r| r.rank);
                out.push((p.node, local, got, stderr));
            }
            None => {
                let parent = i64::from(p.ended.pid);
                let mut children: BTreeMap<u32, (Option<usize>, Option<usize>)> = BTreeMap::new();
                for r in trace.iter().filter(|r| r.ppid == parent) {
                    let child = children.entry(r.pid).or_default();
                    child.0 = child.0.or(r.local_rank);
                    child.1 = child.1.or(r.rank);
                }
                let mut spawned: Vec<(usize, Option<usize>)> =
                    children.into_values().filter_map(|(local, rank)| Some((local?, rank))).collect();
                spawned.sort();
                out.extend(spawned.into_iter().map(|(local, rank)| (p.node, local, rank, stderr)));
            }
        }
    }
    out
}

/// Whether the ranks that joined a group joined the wrong one: a group of another size
/// than the world's, or a rank number other than node id x ranks per node + local rank.
/// (A rank that crashed before joining any group says nothing of step 4.)
pub(super) fn group_formed_wrongly(obs: &Observation) -> bool {
    let v = &obs.variation;
    let Ok(trace) = obs.main.trace.checked() else { return false };
    let sizes: BTreeSet<usize> = trace.iter().filter_map(|r| r.world_size).collect();
    let wrong_rank = joined(obs, trace)
        .into_iter()
        .any(|(node, local, got, _)| got.is_some_and(|rank| rank != node * v.ranks_per_node + local));
    wrong_rank || sizes.iter().any(|&size| size != v.world_size())
}

pub(super) fn global_rank(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let mut wrong = Vec::new();
    for (node, local, got, stderr) in joined(obs, trace) {
        let expect = node * v.ranks_per_node + local;
        match got {
            Some(rank) if rank == expect => {}
            Some(rank) => {
                wrong.push(format!("node {node} local rank {local}: rank {rank}, expected {expect}"))
            }
            // It never joined: its own error says why (init_process_group refused it).
            None => wrong.push(format!(
                "node {node} local rank {local} joined no group (expected global rank {expect}){}",
                super::last_error_line(stderr).map(|l| format!(": {l}")).unwrap_or_default()
            )),
        }
    }
    let sizes: BTreeSet<usize> = trace.iter().filter_map(|r| r.world_size).collect();
    if sizes != BTreeSet::from([ws]) {
        wrong.push(format!("group sizes {sizes:?}, expected {ws}"));
    }
    Finding::shown(
        wrong.is_empty(),
        if wrong.is_empty() { format!("group sizes {sizes:?}") } else { wrong.join("; ") },
        format!("global rank = node id x ranks per node + local rank; group size {ws}"),
    )
}

fn rank0_prints(obs: &Observation) -> Option<Finding> {
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let printed = events::<Printed>(trace);
    let lines = epoch_lines(obs);
    let expected = "only global rank 0 prints the epoch lines";
    if printed.is_empty() {
        return Finding::missing(
            format!("no epoch line printed through the report ({} line(s))", lines.len()),
            expected,
        );
    }
    let printers: BTreeSet<Option<usize>> = printed.iter().map(|(record, _)| record.rank).collect();
    Finding::shown(
        printers == BTreeSet::from([Some(0)]) && lines.len() == printed.len(),
        format!("epoch lines printed by ranks {printers:?}, {} line(s)", lines.len()),
        expected,
    )
}
