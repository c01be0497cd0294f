//! Step 11: the quick evaluation's summary, and the target reached.
use super::{all_stdout, id, Check, Finding, Needs};
use crate::observe::Observation;

pub const CHECKS: &[Check] = &[
    Check {
        id: id::SUMMARY,
        step: 11,
        observes: "rank 0's `Quick evaluation:` line",
        needs: Needs::Main,
        hint: "labkit::print_summary on rank 0 after the loop, then dist::destroy_process_group() (guide: step 11)",
        judge: summary,
    },
    Check {
        id: id::TARGET_REACHED,
        step: 11,
        observes: "a quick evaluation on the generated stand-in (8,000 training images, until the first epoch that reaches the target, at most 6)",
        needs: Needs::QuickRun,
        hint: "check the learning rate and batch size against the lab's defaults (guide: step 11)",
        judge: target_reached,
    },
];

fn summary(obs: &Observation) -> Option<Finding> {
    let ws = obs.variation.world_size();
    let expected = format!("rank 0 prints the quick evaluation's summary for {ws} ranks");
    let Some(line) = all_stdout(obs).lines().find(|l| l.starts_with("Quick evaluation:")).map(String::from)
    else {
        return Finding::missing("no `Quick evaluation:` line", expected);
    };
    Finding::shown(line.contains(&format!("{ws} rank")), line, expected)
}

fn target_reached(obs: &Observation) -> Option<Finding> {
    let q = obs.quick_run.as_ref()?;
    let expected = "the quick evaluation reaches the target validation accuracy";
    let line = q.stdout.lines().find(|l| l.starts_with("Quick evaluation:")).unwrap_or("");
    let observed = format!(
        "{} on the generated stand-in: {}",
        q.describe(),
        if line.is_empty() { "no summary" } else { line }
    );
    if !q.success() || line.is_empty() {
        return Finding::missing(observed, expected);
    }
    Finding::shown(line.contains("reached at epoch"), observed, expected)
}
