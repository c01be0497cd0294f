//! `--autolab`: Autolab's autoresult, as its "Guide for Lab Authors" defines it
//! (docs.autolabproject.com/lab, "Writing Autograders", read 2026-11-28): the last
//! line the autograder prints is a JSON object with `scores`, a problem's name to its
//! points (the names exactly as the assessment defines its problems), and an optional
//! `scoreboard`, the values of the scoreboard's columns in order.
//!
//! The problems are the steps, named `step N` (the assessment defines a problem per
//! step graded, each worth 10 points). The scoreboard's columns are the total and, when
//! the finished lab is graded, its images/sec (0 when it did not run): a class's
//! leaderboard. Their column specification is [`scoreboard_spec`].
use std::collections::BTreeMap;

use lab_course::LAB_LAST_STEP;
use serde::Serialize;

use crate::grade::{Grade, Graded};

#[derive(Debug, Serialize)]
pub struct Autoresult {
    pub scores: BTreeMap<String, f64>,
    pub scoreboard: Vec<f64>,
}

/// The name of a step's problem on Autolab.
pub fn problem(step: u8) -> String {
    format!("step {step}")
}

/// Whether the scoreboard of what is graded has an images/sec column.
fn ranks_throughput(steps: &[u8]) -> bool {
    steps.contains(&LAB_LAST_STEP)
}

/// What the instructor pastes as the assessment's scoreboard column specification.
pub fn scoreboard_spec(graded: Graded) -> String {
    let mut columns = vec![r#"{"hdr": "Total", "asc": 0}"#];
    if ranks_throughput(&graded.steps()) {
        columns.push(r#"{"hdr": "Images/sec", "asc": 0}"#);
    }
    format!(r#"{{"scoreboard": [{}]}}"#, columns.join(", "))
}

pub fn render(grade: &Grade) -> Autoresult {
    let scores = grade.steps.iter().map(|s| (problem(s.step), s.points())).collect();
    let mut scoreboard = vec![grade.points()];
    let steps: Vec<u8> = grade.steps.iter().map(|s| s.step).collect();
    if ranks_throughput(&steps) {
        scoreboard.push(grade.finished_images_per_sec().map_or(0.0, f64::round));
    }
    Autoresult { scores, scoreboard }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::step_08;
    use crate::grade::tests::{check, grade_of, step_run};
    use crate::grade::StepGrade;

    // Against https://docs.autolabproject.com/lab/#writing-autograders: one line of
    // JSON, {"scores": {problem: points, ...}, "scoreboard": [column values]}.
    #[test]
    fn each_step_is_a_problem_scored_in_points() {
        let s8 = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let s0 = StepGrade::not_run(0, "no main.rs".into());
        let r = render(&grade_of(vec![s0, s8]));
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(line, r#"{"scores":{"step 0":0.0,"step 8":5.0},"scoreboard":[5.0]}"#);
        // The column specification has one column per value of the scoreboard.
        let spec: serde_json::Value = serde_json::from_str(&scoreboard_spec(Graded::Step(8))).unwrap();
        assert_eq!(spec["scoreboard"].as_array().unwrap().len(), r.scoreboard.len());
        assert_eq!(spec["scoreboard"][0]["hdr"], "Total");
    }

    #[test]
    fn the_finished_lab_is_ranked_on_its_images_per_sec() {
        let mut last = step_run(LAB_LAST_STEP, vec![]);
        last.output = "Epoch =  0: Cumulative Time = 2.000, Epoch Time = 2.000, Images/sec = 812.4, Validation Loss = 0.500, Validation Accuracy = 0.800".into();
        let r = render(&grade_of(vec![last]));
        let spec: serde_json::Value = serde_json::from_str(&scoreboard_spec(Graded::Final)).unwrap();
        assert_eq!(spec["scoreboard"][1]["hdr"], "Images/sec");
        assert_eq!(r.scoreboard.len(), 2);
        assert_eq!(r.scoreboard[1], 812.0);
        // It did not run: ranked last, still a value per column.
        let r = render(&grade_of(vec![StepGrade::not_run(LAB_LAST_STEP, "no main.rs".into())]));
        assert_eq!(r.scoreboard, [0.0, 0.0]);
    }
}
