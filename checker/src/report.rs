//! The terminal report of `verify` and `watch`: every check with what was observed and
//! expected, a hint and the guide's page for each failure, and a summary naming where
//! to start.
use std::path::Path;

use crate::checks::{self, CheckResult, Verdict};
use crate::color;
use crate::verify::StepRun;

/// `verify`: one step's full report; true when every check passed.
pub fn print_run(root: &Path, step: u8, seed: u64, run: &StepRun) -> bool {
    println!("== step {step} ({}): {}", run.package, run.variation.describe());
    println!("   (repeat exactly with --seed {seed})");
    if let Some(bin) = &run.prebuilt {
        println!(
            "   judging {}, built elsewhere from this course revision ({})",
            bin.display(),
            labkit::revision::COURSE_REVISION
        );
    }
    if let Some(dir) = &run.kept {
        println!("   run files kept in {}", dir.display());
    }
    report(root, step, &run.results)
}

/// Prints every check; true when all passed.
fn report(root: &Path, step: u8, results: &[CheckResult]) -> bool {
    let paint = |verdict: Verdict| match verdict {
        Verdict::Pass => color::paint(color::PASS, "PASS"),
        Verdict::Fail => color::paint(color::FAIL, "FAIL"),
        Verdict::CouldNotJudge => color::paint(color::UNJUDGED, "????"),
        // Only `grade` says it, never of a check in a run's report.
        Verdict::Error => color::paint(color::FAIL, "ERR!"),
    };
    for r in results {
        // Through anstream: coloured or not as `--color` and NO_COLOR say (see `color`).
        anstream::println!("{} step {:>2} {}: {}", paint(r.verdict), r.step, r.id, first_line(&r.observed));
        if !r.passed() {
            for line in r.observed.lines().skip(1) {
                println!("         {line}");
            }
            println!("         expected: {}", r.expected);
        }
        if r.failed() {
            println!("         hint: {}", r.hint);
            // What the guide says this check is about, when a step's page names it, and
            // that page in the guide built as a book; for a check no page describes
            // (`builds`), the page of the step being checked.
            let about = guide_hints::check_hint_for(root, r.step, r.id);
            if let Some(about) = &about {
                let about = about.strip_prefix(&format!("`{}`: ", r.id)).unwrap_or(about).to_string();
                println!("         guide: {about}");
            }
            let page_step = if about.is_some() { r.step } else { step };
            println!("         page: {}", guide_hints::book_location(root, page_step));
        }
    }
    let passed = results.iter().filter(|r| r.passed()).count();
    let unjudged = results.iter().filter(|r| r.verdict == Verdict::CouldNotJudge).count();
    let mut summary = format!("   {passed}/{} checks passed", results.len());
    if unjudged > 0 {
        summary.push_str(&format!(", {unjudged} could not be judged"));
    }
    if let Some(first) = checks::first_failing_step(results) {
        let ids: Vec<&str> = results.iter().filter(|r| r.failed() && r.step == first).map(|r| r.id).collect();
        summary.push_str(&format!(
            "; {} of step {first}'s own failed ({}){}",
            ids.len(),
            ids.join(", "),
            if first < step { ": start there" } else { "" }
        ));
    }
    println!("{summary}");
    passed == results.len()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
