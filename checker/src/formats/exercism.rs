//! `--json`: exercism's test-runner results, version 3, as its interface document
//! specifies them (exercism/docs, building/tooling/test-runners/interface.md, the
//! revision of 2026-05-30):
//!
//! - top level: `version` (3), `status` (`pass`: every test passed; `fail`: at least
//!   one test failed or errored; `error`: only when every test errored, e.g. the code
//!   does not compile), `message` (required with `error`: the compiler's error; at most
//!   65535 characters, counted in bytes; null or absent otherwise), `tests` (required
//!   with pass and fail, in the order of the test file: here the registry's);
//! - per test: `name`, `status` (pass, fail, error), `message` (required with fail and
//!   error), `output` (what the user's program printed, at most 500 characters),
//!   `test_code`, `task_id` (a number, one task per test).
//!
//! Only those keys. The spec names the fields results.json supports and no others, so
//! the checker's own (points, seed, steps, sandbox) are not added here: the points and
//! the sandbox are in the `--gradescope` report (scores, `extra_data`), the seed and the
//! sandbox in the `--junit` report's properties, and the seed in each test's
//! `test_code`, which repeats the run.
use serde::Serialize;

use super::{keep_end, keep_start};
use crate::checks::Verdict;
use crate::grade::{CheckGrade, Grade, StepGrade};

/// The spec's limit on a test's `output`, in characters.
pub const OUTPUT_LIMIT: usize = 500;
/// The spec's limit on the top-level `message`, in bytes ("65535 characters; the
/// effective maximum length is less if the value contains multibyte characters").
pub const MESSAGE_LIMIT_BYTES: usize = 65535;

#[derive(Debug, Serialize)]
pub struct Results {
    pub version: u8,
    /// Spelled as the spec does: [`Verdict`] serialises as pass, fail or error.
    pub status: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub tests: Vec<Test>,
}

#[derive(Debug, Serialize)]
pub struct Test {
    pub name: String,
    pub status: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub test_code: String,
    pub task_id: u32,
}

pub fn render(grade: &Grade) -> Results {
    let tests = grade.steps.iter().flat_map(|s| s.graded().map(move |c| test(grade, s, c))).collect();
    Results {
        version: 3,
        status: grade.status(),
        message: grade.error().map(|e| cut_bytes(&e, MESSAGE_LIMIT_BYTES)),
        tests,
    }
}

fn test(grade: &Grade, step: &StepGrade, check: &CheckGrade) -> Test {
    // exercism has no "could not judge": such a check fails, its message saying why.
    let status = check.verdict;
    Test {
        name: step.test_name(check),
        status,
        message: check.message.clone(),
        // What the program printed; none when it never ran (the compiler's errors are
        // the message, not the user's output).
        output: (step.not_run.is_none() && !step.output.is_empty())
            .then(|| keep_end(&step.output, OUTPUT_LIMIT)),
        test_code: format!("{}\n# {}: {}", step.repeat_command(grade.seed), check.id, check.observes),
        // exercism numbers tasks from 1 (the number heading a task); the lab's steps
        // from 0, so step N is task N + 1. Each check belongs to exactly one step.
        task_id: u32::from(check.step) + 1,
    }
}

/// `text` cut to at most `limit` bytes, keeping its start (the first compiler error
/// matters most) and cut where [`keep_start`] cuts: at a line's or a sentence's end.
fn cut_bytes(text: &str, limit: usize) -> String {
    // keep_start counts characters; a character is at least a byte, so fewer
    // characters each round until the bytes fit.
    let mut chars = limit;
    loop {
        let kept = keep_start(text, chars);
        if kept.len() <= limit {
            return kept;
        }
        chars -= (kept.len() - limit).min(chars);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};

    #[test]
    fn only_the_specs_keys_in_its_spelling() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = serde_json::to_value(render(&grade_of(vec![s]))).unwrap();
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["status", "tests", "version"]);
        assert_eq!(r["version"], 3);
        assert_eq!(r["status"], "fail");
        let passed = &r["tests"][0];
        assert_eq!(passed["name"], "step 8: throughput-reduced");
        assert_eq!(passed["status"], "pass");
        assert!(passed.get("message").is_none(), "a passed test has no message: {passed}");
        assert_eq!(passed["task_id"], 9);
        assert_eq!(
            passed["test_code"],
            "cargo checker verify step 8 --seed 7\n# throughput-reduced: the collective that carried each rank's images/sec, and what rank 0 printed"
        );
        assert_eq!(r["tests"][1]["status"], "fail");
        assert!(r["tests"][1]["message"].as_str().unwrap().contains("hint: do it"));
    }

    #[test]
    fn nothing_ran_is_an_error_with_the_compilers_message() {
        let mut build = check(step_00::BUILDS, 0, false);
        let errors: Vec<String> = (0..5000).map(|i| format!("error: é{i} is not found")).collect();
        build.observed = format!("cargo build failed:\n{}", errors.join("\n"));
        let r = render(&grade_of(vec![step_run(3, vec![build])]));
        assert_eq!(r.status, Verdict::Error);
        let message = r.message.unwrap();
        assert!(message.starts_with("cargo build failed:\nerror: é0 is not found\n"));
        assert!(message.len() <= MESSAGE_LIMIT_BYTES, "{} bytes", message.len());
        // Cut after a whole error, saying how much is left out.
        let (kept, note) = message.rsplit_once('\n').unwrap();
        assert!(kept.ends_with(" is not found"), "{kept}");
        assert!(note.starts_with('[') && note.ends_with(" more characters left out]"), "{note}");
        assert!(r
            .tests
            .iter()
            .all(|t| t.status == Verdict::Error && t.message.is_some() && t.output.is_none()));
    }

    #[test]
    fn output_is_the_programs_last_500_characters() {
        let mut s = step_run(0, vec![check(step_00::IMPORTS_DIST, 0, true), check(step_00::TRAINS, 0, true)]);
        let lines: Vec<String> = (0..100).map(|i| format!("Epoch = {i}: the line of epoch {i}")).collect();
        s.output = lines.join("\n");
        let r = render(&grade_of(vec![s]));
        for t in &r.tests {
            let output = t.output.as_deref().unwrap();
            assert!(output.chars().count() <= OUTPUT_LIMIT, "{output}");
            // Whole lines, the last ones, under a line saying how much came before.
            let (note, kept) = output.split_once('\n').unwrap();
            assert!(note.ends_with(" earlier characters left out]"), "{note}");
            assert!(kept.ends_with("Epoch = 99: the line of epoch 99"), "{kept}");
            assert!(kept.lines().all(|l| lines.iter().any(|whole| whole == l)), "{kept}");
            assert!(kept.lines().count() > 10, "{kept}");
        }
    }
}
