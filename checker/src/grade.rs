//! `checker grade`: points per step and a JSON report an autograder can read, in the
//! shape of exercism's test-runner results (version 3: a top-level status, and one
//! entry per test with its status, message and captured output).
use serde_json::{json, Value};

use crate::checks::{self, id, CheckResult, Verdict};

/// Points a step is worth, shared equally by the checks it introduces.
pub const STEP_POINTS: f64 = 10.0;
/// Exercism truncates captured output to this many characters; so do we.
const OUTPUT_LIMIT: usize = 500;

/// One graded step: its run's checks (or the single failed build).
pub struct GradedStep {
    pub step: u8,
    pub title: &'static str,
    pub results: Vec<CheckResult>,
    pub output: String,
}

impl GradedStep {
    /// The step's own checks that passed in its run.
    fn own_passed(&self) -> usize {
        checks::ids(self.step)
            .iter()
            .filter(|id| self.results.iter().any(|r| r.step == self.step && r.id == **id && r.passed()))
            .count()
    }

    pub fn points(&self) -> f64 {
        let own = checks::ids(self.step).len();
        STEP_POINTS * self.own_passed() as f64 / own as f64
    }

    /// Did it build and run at all (a failed build leaves only the `builds` check)?
    fn built(&self) -> bool {
        !self.results.iter().any(|r| r.id == id::BUILDS)
    }

    /// "pass" when every check of its run passed, "error" when it did not build.
    pub fn status(&self) -> Verdict {
        if !self.built() {
            Verdict::Error
        } else if self.results.iter().all(CheckResult::passed) {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= OUTPUT_LIMIT {
        return text.to_string();
    }
    let tail: String = text.chars().rev().take(OUTPUT_LIMIT).collect::<Vec<_>>().into_iter().rev().collect();
    format!("[output truncated to its last {OUTPUT_LIMIT} characters]\n{tail}")
}

/// The JSON report.
pub fn report(steps: &[GradedStep], seed: u64) -> Value {
    let mut tests = Vec::new();
    for s in steps {
        let own = checks::ids(s.step);
        let share = STEP_POINTS / own.len() as f64;
        let build_error = s.results.iter().find(|r| r.id == id::BUILDS);
        for id in &own {
            let (status, message) =
                match (build_error, s.results.iter().find(|r| r.step == s.step && r.id == *id)) {
                    (Some(b), _) => (Verdict::Error, Some(format!("{}\n{}", b.observed, b.hint))),
                    (None, Some(r)) if r.passed() => (Verdict::Pass, None),
                    (None, Some(r)) if r.verdict == Verdict::CouldNotJudge => {
                        (r.verdict, Some(format!("{}\nexpected: {}", r.observed, r.expected)))
                    }
                    (None, Some(r)) => (
                        Verdict::Fail,
                        Some(format!("observed: {}\nexpected: {}\nhint: {}", r.observed, r.expected, r.hint)),
                    ),
                    (None, None) => (Verdict::Error, Some("the check did not run".to_string())),
                };
            tests.push(json!({
                "name": format!("step {}: {id}", s.step),
                "task_id": u32::from(s.step) + 1,
                "step": s.step,
                "status": status,
                "message": message,
                "output": truncate(&s.output),
                "points": if status == Verdict::Pass { share } else { 0.0 },
                "max_points": share,
            }));
        }
        // Earlier steps' checks that this step's run broke: no points, but shown.
        for r in s.results.iter().filter(|r| r.step < s.step && r.failed() && r.id != id::BUILDS) {
            tests.push(json!({
                "name": format!("step {}: {} (from step {}, broken again)", s.step, r.id, r.step),
                "task_id": u32::from(s.step) + 1,
                "step": s.step,
                "status": Verdict::Fail,
                "message": format!("observed: {}\nexpected: {}\nhint: {}", r.observed, r.expected, r.hint),
                "output": truncate(&s.output),
                "points": 0.0,
                "max_points": 0.0,
            }));
        }
    }
    let points: f64 = steps.iter().map(GradedStep::points).sum();
    let max_points = STEP_POINTS * steps.len() as f64;
    let status =
        if steps.iter().all(|s| s.status() == Verdict::Pass) { Verdict::Pass } else { Verdict::Fail };
    json!({
        "version": 3,
        "status": status,
        "message": Value::Null,
        "seed": seed,
        "points": points,
        "max_points": max_points,
        "steps": steps.iter().map(|s| json!({
            "step": s.step,
            "title": s.title,
            "status": s.status(),
            "points": s.points(),
            "max_points": STEP_POINTS,
        })).collect::<Vec<_>>(),
        "tests": tests,
    })
}

/// The table printed on stdout.
pub fn table(steps: &[GradedStep]) -> String {
    let mut out = String::from("step  points  status  title\n");
    for s in steps {
        out.push_str(&format!(
            "{:>4}  {:>6}  {:<6}  {}\n",
            s.step,
            format!("{}/{}", fmt_points(s.points()), fmt_points(STEP_POINTS)),
            s.status(),
            s.title
        ));
    }
    let points: f64 = steps.iter().map(GradedStep::points).sum();
    out.push_str(&format!("total {}/{}\n", fmt_points(points), fmt_points(STEP_POINTS * steps.len() as f64)));
    out
}

/// "10", "3.3": points as the table shows them.
pub fn fmt_points(p: f64) -> String {
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &'static str, step: u8, passed: bool) -> CheckResult {
        CheckResult {
            id,
            step,
            verdict: if passed { Verdict::Pass } else { Verdict::Fail },
            observed: format!("saw {id}"),
            expected: "want".into(),
            hint: "do it",
        }
    }

    fn step_run(step: u8, results: Vec<CheckResult>) -> GradedStep {
        GradedStep { step, title: "t", results, output: "Epoch = 0 ...".into() }
    }

    #[test]
    fn points_are_the_share_of_own_checks_passed() {
        // Step 8 introduces two checks: one passing earns half the step.
        let s = step_run(
            8,
            vec![
                check(id::TRAINS, 0, true),
                check(id::THROUGHPUT_REDUCED, 8, true),
                check(id::EPOCH_BARRIER, 8, false),
            ],
        );
        assert_eq!(checks::ids(8), [id::THROUGHPUT_REDUCED, id::EPOCH_BARRIER]);
        assert_eq!(s.points(), 5.0);
        assert_eq!(s.status(), Verdict::Fail);
        let r = report(&[s], 7);
        assert_eq!(r["points"], 5.0);
        assert_eq!(r["max_points"], 10.0);
        assert_eq!(r["status"], "fail");
        let tests = r["tests"].as_array().unwrap();
        assert_eq!(tests.len(), 2);
        assert_eq!(tests[0]["name"], "step 8: throughput-reduced");
        assert_eq!(tests[0]["status"], "pass");
        assert_eq!(tests[0]["message"], Value::Null);
        assert_eq!(tests[1]["status"], "fail");
        assert!(tests[1]["message"].as_str().unwrap().contains("hint: do it"));
    }

    #[test]
    fn a_failed_build_is_an_error_worth_nothing() {
        let s = step_run(6, vec![check(id::BUILDS, 0, false)]);
        assert_eq!(s.points(), 0.0);
        assert_eq!(s.status(), Verdict::Error);
        let r = report(&[s], 1);
        for t in r["tests"].as_array().unwrap() {
            assert_eq!(t["status"], "error");
            assert!(t["message"].as_str().unwrap().contains("saw builds"));
        }
    }

    #[test]
    fn broken_earlier_checks_are_listed_without_points() {
        let s = step_run(
            6,
            vec![
                check(id::TRAINS, 0, false),
                check(id::SAMPLER_SHARES, 6, true),
                check(id::SAMPLER_SET_EPOCH, 6, true),
            ],
        );
        assert_eq!(s.points(), 10.0);
        assert_eq!(s.status(), Verdict::Fail);
        let r = report(&[s], 1);
        let names: Vec<&str> =
            r["tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "step 6: sampler-shares",
                "step 6: sampler-set-epoch",
                "step 6: trains (from step 0, broken again)"
            ]
        );
    }

    #[test]
    fn verdicts_keep_exercisms_spelling() {
        let mut unjudged = check(id::EPOCH_BARRIER, 8, false);
        unjudged.verdict = Verdict::CouldNotJudge;
        let r = report(&[step_run(8, vec![check(id::THROUGHPUT_REDUCED, 8, true), unjudged])], 1);
        let statuses: Vec<&str> =
            r["tests"].as_array().unwrap().iter().map(|t| t["status"].as_str().unwrap()).collect();
        // Exercism has no "could not judge": such a check fails, its message saying why.
        assert_eq!(statuses, ["pass", "fail"]);
        assert_eq!(
            json!([Verdict::Pass, Verdict::Fail, Verdict::CouldNotJudge, Verdict::Error]),
            json!(["pass", "fail", "fail", "error"])
        );
    }

    #[test]
    fn long_output_keeps_its_end() {
        let long = "x".repeat(600) + "the end";
        let t = truncate(&long);
        assert!(t.ends_with("the end"));
        assert!(t.starts_with("[output truncated"));
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn the_table_totals_the_points() {
        let steps = [
            step_run(0, vec![check(id::IMPORTS_DIST, 0, true), check(id::TRAINS, 0, true)]),
            step_run(8, vec![check(id::THROUGHPUT_REDUCED, 8, true), check(id::EPOCH_BARRIER, 8, false)]),
        ];
        let t = table(&steps);
        assert!(t.contains("   0   10/10  pass"), "{t}");
        assert!(t.contains("   8    5/10  fail"), "{t}");
        assert!(t.ends_with("total 15/20\n"), "{t}");
    }
}
