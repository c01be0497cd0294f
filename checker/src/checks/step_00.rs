//! Step 0: the single-GPU program, with the distributed module imported.
use super::{epoch_lines, Check, CheckResult, Evidence, Finding, Step, Verdict};
use crate::observe::{BuildFailure, Gains, Observation, RunKind};

/// Reported by [`build_failed`] when the crate does not compile (not a check of the
/// registry).
pub const BUILDS: &str = "builds";
pub const IMPORTS_DIST: &str = "imports-dist";
pub const TRAINS: &str = "trains";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[RunKind::Main],
    checks: &[
        Check {
            id: IMPORTS_DIST,
            observes: "the program's text",
            needs: None,
            hint: "the Rust mirror of `import torch.distributed as dist` is one `use` line (guide: step 0)",
            judge: imports_dist,
        },
        Check {
            id: TRAINS,
            observes: "every process's exit and the epoch lines",
            needs: None,
            hint: "run the step by hand (see the guide's page) and read the first error",
            judge: trains,
        },
    ],
};

/// The `builds` check: a crate that does not build leaves nothing else to judge, so it
/// is reported alone, as step 0's failure, and is not in the registry.
pub fn build_failed(package: &str, failure: &BuildFailure) -> CheckResult {
    let (observed, expected, hint) = match failure {
        BuildFailure::Errors(errors) => (
            format!("cargo build -p {package} failed:\n{errors}"),
            "the crate compiles",
            "fix the first compiler error first; later ones often follow from it",
        ),
        BuildFailure::NoCargo(why) => (
            format!("could not run cargo: {why}"),
            "cargo on PATH",
            "run the checker from the repository, where `cargo build` works",
        ),
    };
    CheckResult::new(BUILDS, 0, Verdict::Fail, observed, expected.into(), hint)
}

fn imports_dist(obs: &Observation) -> Option<Finding> {
    let import = regex::Regex::new(r"(?m)^\s*use\s+tch_distributed\s+as\s+dist\s*;").unwrap();
    let found = import.is_match(&obs.source);
    Finding::shown(
        found,
        if found { "found" } else { "no `use ... as dist;` line in src/main.rs" },
        "the distributed module imported under the name `dist`",
    )
}

/// A crash is this check's own property: it fails, never "could not judge".
fn trains(obs: &Observation) -> Option<Finding> {
    let failures: Vec<String> = obs
        .main
        .processes
        .iter()
        .filter(|p| !p.ended.success())
        .map(|p| {
            let tail: Vec<&str> = p.ended.stderr.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{}: {}\n    {}", p.ended.name, p.ended.describe(), tail.join("\n    "))
        })
        .collect();
    let lines = epoch_lines(obs);
    // Exactly as labkit's formatter prints it: parsed back and printed again, the same.
    let malformed = lines.iter().find(|l| !labkit::EpochReport::is_epoch_line(l));
    let observed = if !failures.is_empty() {
        let mut text = format!("{} process(es) failed:\n  {}", failures.len(), failures.join("\n  "));
        if let Some(desync) = super::collectives::desync(&obs.main.trace.records) {
            text.push_str(&format!("\n{desync}"));
        }
        text
    } else if lines.is_empty() {
        "no epoch line printed".into()
    } else if let Some(bad) = malformed {
        format!("an epoch line not in the lab's format: {bad:?}")
    } else {
        format!("{} epoch line(s), every process exited 0", lines.len())
    };
    let expected = "every process exits 0 and epoch lines are printed in the lab's format";
    // From step 5 on, a rank that read the data before it was ready dies of it: the
    // report blames step 5's barrier, which names the mistake, not this check.
    let early_read = obs.main.trace.checked().ok().and_then(super::step_05::early_reads);
    if let (false, true, Some(early)) =
        (failures.is_empty(), obs.step >= super::since(Gains::DataOncePerNode), early_read)
    {
        return Some(Finding {
            evidence: Evidence::Consequence,
            observed: format!(
                "a rank read the data set before it was ready (step 5's `{}`): {early}\n{observed}",
                super::step_05::DATA_BARRIER
            ),
            expected: expected.into(),
            blames: Some(super::step_05::DATA_BARRIER),
            at: None,
        });
    }
    // From step 4 on, ranks that did not all join one group of the world size (a world
    // size or rank computed wrongly, refused by init_process_group) fail for it: the
    // report blames step 4's ranks, which names the mistake.
    if obs.step >= super::since(Gains::ProcessGroup)
        && !failures.is_empty()
        && super::step_04::group_formed_wrongly(obs)
    {
        let ranks = super::step_04::global_rank(obs).filter(|f| f.evidence == Evidence::Broken);
        if let Some(ranks) = ranks {
            return Some(Finding {
                evidence: Evidence::Consequence,
                observed: format!(
                    "the ranks did not all join one group of the world size (step 4's `{}`): {}\n{observed}",
                    super::step_04::GLOBAL_RANK,
                    ranks.observed
                ),
                expected: expected.into(),
                blames: Some(super::step_04::GLOBAL_RANK),
                at: None,
            });
        }
    }
    // Ranks whose collectives part ways fail (a mismatch, a dead peer): the report
    // blames the step that owns the diverging call, which names the mistake.
    let divergence = super::collectives::divergence(obs, RunKind::Main);
    if let (false, Some(divergence)) = (failures.is_empty(), divergence) {
        if let Some(owner) = divergence.owner_words() {
            return Some(Finding {
                evidence: Evidence::Consequence,
                observed: format!(
                    "the ranks' collectives part ways ({owner}): {}\n{observed}",
                    divergence.sentence
                ),
                expected: expected.into(),
                blames: divergence.owner.map(|(_, id)| id),
                at: None,
            });
        }
    }
    Finding::shown(failures.is_empty() && !lines.is_empty() && malformed.is_none(), observed, expected)
}
