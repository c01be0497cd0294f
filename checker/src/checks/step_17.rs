//! Step 17: Gradients averaged by hand. Scaffolded by `coursegen new-step`: its check is not judged
//! yet, and fails until it is written.
use super::{Check, Finding, Step};
use crate::observe::Observation;

pub const GRADIENTS_AVERAGED: &str = "gradients-averaged";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[Check {
        id: GRADIENTS_AVERAGED,
        observes: "nothing yet: the check is not written",
        needs: None,
        hint: "step 17's checks are not written yet (guide: step 17)",
        judge: not_judged_yet,
    }],
};

/// Missing evidence, never a pass: with nothing needed, the verdict is a failure, so a
/// step scaffolded but not finished cannot be passed.
fn not_judged_yet(_obs: &Observation) -> Option<Finding> {
    Finding::missing(
        "not judged yet: `gradients-averaged` is not written (checker/src/checks/step_17.rs)",
        "what `gradients-averaged` checks, once it is written",
    )
}
