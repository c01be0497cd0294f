//! Step 16: DDP x TP on a 2-D mesh. Scaffolded by `coursegen new-step`: its check is not judged
//! yet, and fails until it is written.
use super::{Check, Finding, Step};
use crate::observe::Observation;

pub const MESH_GROUPS: &str = "mesh-groups";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[Check {
        id: MESH_GROUPS,
        observes: "nothing yet: the check is not written",
        needs: None,
        hint: "step 16's checks are not written yet (guide: step 16)",
        judge: not_judged_yet,
    }],
};

/// Missing evidence, never a pass: with nothing needed, the verdict is a failure, so a
/// step scaffolded but not finished cannot be passed.
fn not_judged_yet(_obs: &Observation) -> Option<Finding> {
    Finding::missing(
        "not judged yet: `mesh-groups` is not written (checker/src/checks/step_16.rs)",
        "what `mesh-groups` checks, once it is written",
    )
}
