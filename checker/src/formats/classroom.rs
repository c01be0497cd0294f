//! `--classroom`: a GitHub Classroom grader's runner result, as the newer grader
//! actions make it and the grading reporter reads it (github-education-resources/
//! autograding-command-grader src/main.js, and autograding-grading-reporter
//! src/main.js and src/notify-classroom.js, read 2026-11-28):
//!
//! - the result is JSON, handed to the reporter base64-encoded in the environment
//!   variable `<RUNNER>_RESULTS` (the workflow encodes this file);
//! - top level: `version` (1), `status` (`pass`, `fail` or `error`: the reporter fails
//!   the workflow on either of the last two), `max_score`, `tests`;
//! - per test: `name`, `status` (`pass` counts as passed), `message`, `score`, and the
//!   grader's `test_code`, `filename`, `line_no`, `duration`.
//!
//! The reporter gives GitHub Classroom the sum of every test's `score` out of the sum
//! of the runners' `max_score`: a check passed earns its share of its step's points.
use serde::Serialize;

use super::keep_start;
use crate::checks::Verdict;
use crate::grade::Grade;

/// At most this much of a test's message (the reporter prints it in the job's log).
const MESSAGE_LIMIT: usize = 4000;

#[derive(Debug, Serialize)]
pub struct RunnerResult {
    pub version: u8,
    pub status: Verdict,
    pub max_score: f64,
    pub tests: Vec<Test>,
}

#[derive(Debug, Serialize)]
pub struct Test {
    pub name: String,
    pub status: Verdict,
    pub message: String,
    pub score: f64,
    /// The command that repeats the check on the student's own copy.
    pub test_code: String,
    pub filename: String,
    pub line_no: u32,
    /// Milliseconds; a check has no time of its own (its step's runs judge them all).
    pub duration: u64,
}

pub fn render(grade: &Grade) -> RunnerResult {
    let tests = grade
        .steps
        .iter()
        .flat_map(|s| {
            s.graded().map(move |c| Test {
                name: s.test_name(c),
                status: c.verdict,
                message: keep_start(c.message.as_deref().unwrap_or(&c.observed), MESSAGE_LIMIT),
                score: c.points,
                test_code: s.repeat_command(grade.seed),
                filename: lab_course::Version::Starter(s.step)
                    .crate_dir()
                    .join("src/main.rs")
                    .display()
                    .to_string(),
                line_no: 0,
                duration: 0,
            })
        })
        .collect();
    RunnerResult { version: 1, status: grade.status(), max_score: grade.max_points(), tests }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};

    // Against autograding-command-grader's generateResult (version 1, status, max_score,
    // tests with name, status, score, message, test_code, filename, line_no, duration)
    // and the reporter's sum of the tests' scores:
    // https://github.com/github-education-resources/autograding-grading-reporter/blob/main/src/notify-classroom.js
    #[test]
    fn each_check_passed_earns_its_share() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = render(&grade_of(vec![s]));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["status"], "fail");
        assert_eq!(json["max_score"], 10.0);
        let tests = json["tests"].as_array().unwrap();
        let summed: f64 = tests.iter().map(|t| t["score"].as_f64().unwrap()).sum();
        assert_eq!(summed, 5.0, "the reporter's total");
        assert_eq!(tests[0]["name"], "step 8: throughput-reduced");
        assert_eq!(tests[0]["status"], "pass");
        assert_eq!(tests[1]["status"], "fail");
        assert!(tests[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("error[epoch-barrier]: step 8: saw epoch-barrier\n"));
        assert_eq!(tests[1]["test_code"], "cargo checker verify step 8 --seed 7");
        let mut keys: Vec<&String> = tests[0].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["duration", "filename", "line_no", "message", "name", "score", "status", "test_code"]
        );
    }

    #[test]
    fn a_program_that_does_not_compile_is_an_error_worth_nothing() {
        let build = check(step_00::BUILDS, 0, false);
        let r = render(&grade_of(vec![step_run(1, vec![build])]));
        assert_eq!(r.status, Verdict::Error);
        assert!(r.tests.iter().all(|t| t.status == Verdict::Error && t.score == 0.0));
        assert_eq!(r.max_score, 10.0);
    }
}
