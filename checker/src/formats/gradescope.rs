//! `--gradescope`: the results.json a Gradescope autograder leaves in
//! /autograder/results, as Gradescope's "Autograder Specifications" document it
//! (gradescope/autograder_samples, docs/specs.md, read 2026-11-25):
//!
//! - top level, every key optional: `score` (overrides the tests' total), `execution_time`
//!   (seconds), `output` (text for the whole submission), `output_format`,
//!   `visibility`, `stdout_visibility`, `extra_data` (stored, not shown), `tests`;
//! - per test: `score`, `max_score`, `status` (`passed` or `failed`), `name`, `number`,
//!   `output`, `tags`, `visibility`.
//!
//! A `leaderboard` (a list of `name`, `value` and `order`, "asc" or "desc") holds the
//! finished lab's images/sec when the finished program was graded (`grade all`).
//!
//! The summary above the tests is Markdown (`output_format`: "md", compiler errors in
//! code blocks); a test's output stays text (`test_output_format`), since it is the
//! program's own. A check named by `--hidden-until-due` is a test with visibility
//! `after_due_date`: students see it once the assignment's due date has passed.
//!
//! There is no top-level `max_score`: the assignment's total is set on Gradescope (10
//! points per step graded); it is in `extra_data` for whoever reads the file.
use serde::Serialize;

use super::{keep_end, summary};
use crate::checks::Verdict;
use crate::grade::{CheckGrade, Confinement, Grade, StepGrade, STEP_POINTS};

/// How much of a run's output a failed test shows (Gradescope collapses it).
const OUTPUT_TAIL: usize = 4000;

#[derive(Debug, Serialize)]
pub struct Results {
    pub score: f64,
    pub execution_time: u64,
    pub output: String,
    /// "md": the summary is Markdown, its compiler errors in code blocks (the top
    /// level's default, "simple_format", would render their `<` and `>` as HTML).
    pub output_format: &'static str,
    /// "text": a test's output is the check's message and the program's output.
    pub test_output_format: &'static str,
    pub visibility: Visibility,
    /// The autograder's stdout (the checker's table and warnings) is for the
    /// instructor; everything a student needs is in `output` and the tests.
    pub stdout_visibility: Visibility,
    pub extra_data: ExtraData,
    pub tests: Vec<Test>,
    /// The finished lab's images/sec, for the assignment's leaderboard; absent when the
    /// finished program was not graded or did not run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaderboard: Vec<LeaderboardEntry>,
}

/// One column of the leaderboard: its name, the value, and which way is better.
#[derive(Debug, Serialize)]
pub struct LeaderboardEntry {
    pub name: &'static str,
    pub value: f64,
    pub order: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Test {
    pub name: String,
    pub score: f64,
    pub max_score: f64,
    pub status: Status,
    pub output: String,
    pub visibility: Visibility,
    /// "7.1": step 7, its first test.
    pub number: String,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    Visible,
    Hidden,
    AfterDueDate,
}

/// What Gradescope stores with the result without showing it.
#[derive(Debug, Serialize)]
pub struct ExtraData {
    pub seed: u64,
    /// The sandbox's description, or "none".
    pub sandbox: serde_json::Value,
    /// Why the code ran without a sandbox, when none could be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsandboxed_because: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submission: Option<String>,
    pub max_score: f64,
    pub steps: Vec<StepSummary>,
}

#[derive(Debug, Serialize)]
pub struct StepSummary {
    pub step: u8,
    pub status: Verdict,
    pub points: f64,
    pub max_points: f64,
}

/// The results; the checks named in `hidden_until_due` are shown after the due date.
pub fn render(grade: &Grade, hidden_until_due: &[String]) -> Results {
    let tests = grade
        .steps
        .iter()
        .flat_map(|s| s.graded().enumerate().map(move |(i, c)| test(s, i + 1, c, hidden_until_due)))
        .collect();
    let unsandboxed_because = match &grade.confinement {
        Confinement::Unconfined { why } => why.clone(),
        Confinement::Sandboxed(_) => None,
    };
    Results {
        score: grade.points(),
        execution_time: grade.steps.iter().map(|s| s.seconds).sum::<f64>().ceil() as u64,
        output: summary(grade, true),
        output_format: "md",
        test_output_format: "text",
        visibility: Visibility::Visible,
        stdout_visibility: Visibility::Hidden,
        extra_data: ExtraData {
            seed: grade.seed,
            sandbox: grade.confinement.sandbox_json(),
            unsandboxed_because,
            submission: grade.submission.clone(),
            max_score: grade.max_points(),
            steps: grade
                .steps
                .iter()
                .map(|s| StepSummary {
                    step: s.step,
                    status: s.status(),
                    points: s.points(),
                    max_points: STEP_POINTS,
                })
                .collect(),
        },
        tests,
        leaderboard: grade
            .finished_images_per_sec()
            .map(|value| LeaderboardEntry { name: "Images/sec", value: value.round(), order: "desc" })
            .into_iter()
            .collect(),
    }
}

fn test(step: &StepGrade, number: usize, check: &CheckGrade, hidden_until_due: &[String]) -> Test {
    let mut output = check.message.clone().unwrap_or_else(|| check.observed.clone());
    if !check.passed() && step.not_run.is_none() && !step.output.is_empty() {
        let tail = keep_end(&step.output, OUTPUT_TAIL);
        let which = if tail != step.output {
            format!("its last lines, at most {OUTPUT_TAIL} characters")
        } else {
            "all of it".into()
        };
        output.push_str(&format!("\n\nWhat the program printed (rank 0, {which}):\n{tail}"));
    }
    Test {
        name: step.test_name(check),
        score: check.points,
        max_score: check.max_points,
        status: if check.passed() { Status::Passed } else { Status::Failed },
        output,
        visibility: if hidden_until_due.iter().any(|id| id == check.id) {
            Visibility::AfterDueDate
        } else {
            Visibility::Visible
        },
        number: format!("{}.{number}", step.step),
        tags: vec![format!("step {}", check.step)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};

    fn render_all(grade: &Grade) -> Results {
        render(grade, &[])
    }

    #[test]
    fn scores_are_the_points_and_statuses_gradescopes_words() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = render_all(&grade_of(vec![s]));
        assert_eq!(r.score, 5.0);
        assert_eq!(r.execution_time, 13);
        assert_eq!(r.extra_data.max_score, 10.0);
        let t: Vec<(&str, f64, f64, Status, &str)> = r
            .tests
            .iter()
            .map(|t| (t.name.as_str(), t.score, t.max_score, t.status, t.number.as_str()))
            .collect();
        assert_eq!(
            t,
            [
                ("step 8: throughput-reduced", 5.0, 5.0, Status::Passed, "8.1"),
                ("step 8: epoch-barrier", 0.0, 5.0, Status::Failed, "8.2"),
            ]
        );
        // A failed test says why and shows what the program printed.
        let output = &r.tests[1].output;
        assert!(output.starts_with("error[epoch-barrier]: step 8: saw epoch-barrier\n"), "{output}");
        assert!(output.contains("= expected: want\n") && output.contains("= hint: do it\n"), "{output}");
        assert!(r.tests[1].output.ends_with("(rank 0, all of it):\nEpoch = 0 ..."), "{}", r.tests[1].output);
        assert_eq!(r.tests[0].output, "saw throughput-reduced");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["tests"][0]["status"], "passed");
        assert_eq!(json["visibility"], "visible");
        assert_eq!(json["stdout_visibility"], "hidden");
        assert!(json.get("leaderboard").is_none(), "step 8 is not the finished lab");
        // Markdown: a list of the steps, the command in code.
        assert_eq!((r.output_format, r.test_output_format), ("md", "text"));
        assert!(r.output.starts_with("- Step 8 ("), "{}", r.output);
        assert!(r.output.contains(": 5 of 10 points.\n"), "{}", r.output);
        assert!(r.output.contains("`cargo checker verify step 8 --seed 7`"), "{}", r.output);
    }

    // The spec's visibilities: "hidden", "after_due_date", "after_published", "visible"
    // (https://github.com/gradescope/autograder_samples/blob/master/docs/specs.md).
    #[test]
    fn checks_hidden_until_due_are_shown_after_the_due_date() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = render(&grade_of(vec![s]), &[step_08::EPOCH_BARRIER.to_string()]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["tests"][0]["visibility"], "visible");
        assert_eq!(json["tests"][1]["visibility"], "after_due_date");
        assert_eq!(json["visibility"], "visible");
    }

    // The spec's leaderboard: [{"name": ..., "value": ..., "order": "asc"|"desc"}].
    #[test]
    fn the_finished_lab_ranks_on_images_per_sec() {
        let mut s = step_run(lab_course::LAB_LAST_STEP, vec![]);
        s.output = "Epoch =  0: Cumulative Time = 2.000, Epoch Time = 2.000, Images/sec = 812.4, Validation Loss = 0.500, Validation Accuracy = 0.800".into();
        let json = serde_json::to_value(render_all(&grade_of(vec![s]))).unwrap();
        assert_eq!(
            json["leaderboard"],
            serde_json::json!([{"name": "Images/sec", "value": 812.0, "order": "desc"}])
        );
    }

    #[test]
    fn a_build_failure_scores_nothing_and_shows_the_compiler() {
        let mut build = check(step_00::BUILDS, 0, false);
        build.observed = "cargo build failed:\nerror[E0425]: cannot find value `y` in this scope".into();
        let r = render_all(&grade_of(vec![step_run(1, vec![build])]));
        assert_eq!(r.score, 0.0);
        assert!(r.output.contains("Nothing could be run"), "{}", r.output);
        assert!(r.output.contains("error[E0425]: cannot find value `y`"), "{}", r.output);
        // In a code block, whose fence outlasts the backticks inside it.
        assert!(r.output.contains("\n```text\ncargo build failed:\n"), "{}", r.output);
        assert!(r.tests.iter().all(|t| t.status == Status::Failed && t.score == 0.0));
        assert!(r.tests.iter().all(|t| t.output.contains("error[E0425]")));
    }

    #[test]
    fn unsandboxed_grading_is_said_and_recorded() {
        let mut g = grade_of(vec![step_run(0, vec![check(step_00::IMPORTS_DIST, 0, true)])]);
        g.confinement =
            Confinement::Unconfined { why: Some("bubblewrap cannot make namespaces here".into()) };
        let r = render_all(&g);
        assert!(
            r.output.contains("Ran in no sandbox, since none can be made here (bubblewrap cannot"),
            "{}",
            r.output
        );
        assert_eq!(r.extra_data.sandbox, "none");
        assert_eq!(
            r.extra_data.unsandboxed_because.as_deref(),
            Some("bubblewrap cannot make namespaces here")
        );
    }
}
