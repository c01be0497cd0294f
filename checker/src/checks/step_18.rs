//! Step 18: Buckets overlapped with backward. Scaffolded by `coursegen new-step`: its check is not judged
//! yet, and fails until it is written.
use super::{Check, Finding, Step};
use crate::observe::Observation;

pub const BUCKETS_OVERLAP: &str = "buckets-overlap";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[Check {
        id: BUCKETS_OVERLAP,
        observes: "nothing yet: the check is not written",
        needs: None,
        hint: "step 18's checks are not written yet (guide: step 18)",
        judge: not_judged_yet,
    }],
};

/// Missing evidence, never a pass: with nothing needed, the verdict is a failure, so a
/// step scaffolded but not finished cannot be passed.
fn not_judged_yet(_obs: &Observation) -> Option<Finding> {
    Finding::missing(
        "not judged yet: `buckets-overlap` is not written (checker/src/checks/step_18.rs)",
        "what `buckets-overlap` checks, once it is written",
    )
}
