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

use super::keep_end;
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

/// `text` cut to at most `limit` bytes at a character boundary, keeping its start
/// (the first compiler error matters most) and saying it was cut.
fn cut_bytes(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    const NOTE: &str = "\n[cut: the rest is in the full report, `cargo checker verify`]";
    let mut end = limit - NOTE.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{NOTE}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::id;
    use crate::grade::tests::{check, grade_of, step_run};

    #[test]
    fn only_the_specs_keys_in_its_spelling() {
        let s = step_run(8, vec![check(id::THROUGHPUT_REDUCED, 8, true), check(id::EPOCH_BARRIER, 8, false)]);
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
        let mut build = check(id::BUILDS, 0, false);
        build.observed = format!("cargo build failed:\nerror: {}", "é".repeat(40_000));
        let r = render(&grade_of(vec![step_run(3, vec![build])]));
        assert_eq!(r.status, Verdict::Error);
        let message = r.message.unwrap();
        assert!(message.starts_with("cargo build failed:\nerror: é"));
        assert!(message.len() <= MESSAGE_LIMIT_BYTES, "{} bytes", message.len());
        assert!(message.ends_with("`cargo checker verify`]"));
        assert!(r
            .tests
            .iter()
            .all(|t| t.status == Verdict::Error && t.message.is_some() && t.output.is_none()));
    }

    #[test]
    fn output_is_the_programs_last_500_characters() {
        let mut s = step_run(0, vec![check(id::IMPORTS_DIST, 0, true), check(id::TRAINS, 0, true)]);
        s.output = "x".repeat(2000) + "Epoch = 3 the end";
        let r = render(&grade_of(vec![s]));
        for t in &r.tests {
            let output = t.output.as_deref().unwrap();
            assert_eq!(output.chars().count(), OUTPUT_LIMIT);
            assert!(output.ends_with("Epoch = 3 the end"));
        }
    }
}
