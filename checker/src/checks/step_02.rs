//! Step 2: the world size and the rendezvous address.
use std::collections::BTreeSet;

use lab_trace::event::World;

use super::{events, malformed, set, Check, Finding, Step};
use crate::observe::{Observation, RunKind};

pub const WORLD_SIZE: &str = "world-size";
pub const RENDEZVOUS: &str = "rendezvous";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[
        Check {
            id: WORLD_SIZE,
            observes: "the world each rank announced",
            needs: Some(RunKind::Main),
            hint: "the world size counts every rank on every node (guide: step 2)",
            judge: world_size,
        },
        Check {
            id: RENDEZVOUS,
            observes: "the rendezvous address each rank announced",
            needs: Some(RunKind::Main),
            hint: "the lab's localhost:9956 unless MASTER_ADDR and MASTER_PORT are set (guide: step 2)",
            judge: rendezvous,
        },
    ],
};

fn world_size(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let worlds = events::<World>(trace);
    let expected = format!("world size {ws} ({} node(s) x {} GPU(s))", v.nodes, v.ranks_per_node);
    if worlds.is_empty() {
        return Finding::missing("no world announced (labkit::announce_world was not called)", expected);
    }
    let sizes: BTreeSet<usize> = worlds.iter().map(|(_, w)| w.world_size).collect();
    Finding::shown(sizes == BTreeSet::from([ws]), format!("world size {}", set(&sizes)), expected)
}

fn rendezvous(obs: &Observation) -> Option<Finding> {
    let expected = match obs.port {
        Some(p) => format!("127.0.0.1:{p} (env://)"),
        None => "localhost:9956".to_string(),
    };
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let worlds = events::<World>(trace);
    if worlds.is_empty() {
        return Finding::missing("no world announced (labkit::announce_world was not called)", expected);
    }
    let addresses: BTreeSet<&str> = worlds.iter().map(|(_, w)| w.rendezvous.as_str()).collect();
    Finding::shown(addresses == BTreeSet::from([expected.as_str()]), set(&addresses), expected.clone())
}
