//! `--autolab`: Autolab's autoresult, as its "Guide for Lab Authors" defines it
//! (docs.autolabproject.com/lab, "Writing Autograders", read 2026-11-28): the last
//! line the autograder prints is a JSON object with `scores`, a problem's name to its
//! points (the names exactly as the assessment defines its problems), and an optional
//! `scoreboard`, the values of the scoreboard's columns in order.
//!
//! The problems are the steps, named `step N` (the assessment defines a problem per
//! step graded, each worth 10 points). The scoreboard's one column is the total: its
//! column specification is [`SCOREBOARD_SPEC`].
use std::collections::BTreeMap;

use serde::Serialize;

use crate::grade::Grade;

/// What the instructor pastes as the assessment's scoreboard column specification.
pub const SCOREBOARD_SPEC: &str = r#"{"scoreboard": [{"hdr": "Total", "asc": 0}]}"#;

#[derive(Debug, Serialize)]
pub struct Autoresult {
    pub scores: BTreeMap<String, f64>,
    pub scoreboard: Vec<f64>,
}

/// The name of a step's problem on Autolab.
pub fn problem(step: u8) -> String {
    format!("step {step}")
}

pub fn render(grade: &Grade) -> Autoresult {
    let scores = grade.steps.iter().map(|s| (problem(s.step), s.points())).collect();
    Autoresult { scores, scoreboard: vec![grade.points()] }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::id;
    use crate::grade::tests::{check, grade_of, step_run};
    use crate::grade::StepGrade;

    // Against https://docs.autolabproject.com/lab/#writing-autograders: one line of
    // JSON, {"scores": {problem: points, ...}, "scoreboard": [column values]}.
    #[test]
    fn each_step_is_a_problem_scored_in_points() {
        let s8 =
            step_run(8, vec![check(id::THROUGHPUT_REDUCED, 8, true), check(id::EPOCH_BARRIER, 8, false)]);
        let s0 = StepGrade::not_run(0, "no main.rs".into());
        let r = render(&grade_of(vec![s0, s8]));
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(line, r#"{"scores":{"step 0":0.0,"step 8":5.0},"scoreboard":[5.0]}"#);
        // The column specification is JSON with one column per value of the scoreboard.
        let spec: serde_json::Value = serde_json::from_str(SCOREBOARD_SPEC).unwrap();
        assert_eq!(spec["scoreboard"].as_array().unwrap().len(), r.scoreboard.len());
        assert!(spec["scoreboard"][0]["hdr"].is_string());
    }
}
