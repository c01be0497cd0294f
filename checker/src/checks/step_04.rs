//! Step 4: the global rank, and only rank 0 prints.
use std::collections::BTreeSet;

use lab_trace::event::Printed;

use super::{epoch_lines, events, id, malformed, Check, Finding, Needs};
use crate::observe::Observation;

pub const CHECKS: &[Check] = &[
    Check {
        id: id::GLOBAL_RANK,
        step: 4,
        observes: "the rank and group size each process joined with",
        // A group that never forms is this check's own property (two ranks claiming one
        // number never meet): no rank at all is a failure here, not "could not judge".
        needs: Needs::Nothing,
        hint: "global_rank = node_id * num_gpus + local_rank; pass it and the world size to init_process_group (guide: step 4)",
        judge: global_rank,
    },
    Check {
        id: id::RANK0_PRINTS,
        step: 4,
        observes: "which ranks printed epoch lines",
        needs: Needs::Main,
        hint: "wrap the report's print in `if global_rank == 0` (guide: step 4)",
        judge: rank0_prints,
    },
];

/// Whether the ranks that joined a group joined the wrong one: a group of another size
/// than the world's, or a rank number other than node id x ranks per node + local rank.
/// (A rank that crashed before joining any group says nothing of step 4.)
pub(super) fn group_formed_wrongly(obs: &Observation) -> bool {
    let v = &obs.variation;
    let Ok(trace) = obs.main.trace.checked() else { return false };
    let sizes: BTreeSet<usize> = trace.iter().filter_map(|r| r.world_size).collect();
    let wrong_rank = obs.main.processes.iter().any(|p| {
        let Some(local) = p.local_rank else { return false };
        let got = trace.iter().filter(|r| r.pid == p.ended.pid).find_map(|r| r.rank);
        got.is_some_and(|rank| rank != p.node * v.ranks_per_node + local)
    });
    wrong_rank || sizes.iter().any(|&size| size != v.world_size())
}

pub(super) fn global_rank(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let mut wrong = Vec::new();
    for p in &obs.main.processes {
        let Some(local) = p.local_rank else { continue };
        let expect = p.node * v.ranks_per_node + local;
        let got = trace.iter().filter(|r| r.pid == p.ended.pid).find_map(|r| r.rank);
        match got {
            Some(rank) if rank == expect => {}
            Some(rank) => {
                wrong.push(format!("node {} local rank {local}: rank {rank}, expected {expect}", p.node))
            }
            // It never joined: its own error says why (init_process_group refused it).
            None => wrong.push(format!(
                "node {} local rank {local} joined no group (expected global rank {expect}){}",
                p.node,
                super::last_error_line(&p.ended.stderr).map(|l| format!(": {l}")).unwrap_or_default()
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
