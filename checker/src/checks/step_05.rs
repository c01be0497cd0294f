//! Step 5: the data set prepared once per node.
use lab_trace::event::PrepareDataset;

use super::{events, id, malformed, Check, Finding, Needs};
use crate::observe::Observation;

pub const CHECKS: &[Check] = &[
    Check {
        id: id::PREPARE_ONCE_PER_NODE,
        step: 5,
        observes: "which ranks prepared the data set",
        needs: Needs::Main,
        hint: "`if local_rank == 0 { prepare }`, then dist::barrier(), then every rank loads (guide: step 5)",
        judge: prepare_once_per_node,
    },
    Check {
        id: id::DOWNLOADS_PER_NODE,
        step: 5,
        observes: "the files the local mirror served",
        needs: Needs::Main,
        hint: "only local rank 0 of each node may download (guide: step 5)",
        judge: downloads_per_node,
    },
];

fn prepare_once_per_node(obs: &Observation) -> Option<Finding> {
    let nodes = obs.variation.nodes;
    let Ok(trace) = obs.trace.checked() else { return malformed(&obs.trace) };
    let prepares = events::<PrepareDataset>(trace);
    let expected = format!("{nodes} (one per node, by local rank 0), then a barrier before anyone reads");
    if prepares.is_empty() {
        return Finding::missing("no rank prepared the data set", expected);
    }
    let by_non_zero = prepares.iter().filter(|(record, _)| record.local_rank != Some(0)).count();
    Finding::shown(
        by_non_zero == 0 && prepares.len() == nodes,
        format!("{} preparation(s); {by_non_zero} by a local rank other than 0", prepares.len()),
        expected,
    )
}

fn downloads_per_node(obs: &Observation) -> Option<Finding> {
    let downloads = obs.downloads.as_ref()?;
    let nodes = obs.variation.nodes;
    let expected = format!("each of the four files exactly {nodes} time(s), once per node");
    let observed = format!("the mirror served {downloads:?}");
    if downloads.values().all(|&n| n == 0) {
        return Finding::missing(observed, expected);
    }
    let ok = labkit::data::FILES.iter().all(|f| downloads.get(*f).copied().unwrap_or(0) == nodes);
    Finding::shown(ok, observed, expected)
}
