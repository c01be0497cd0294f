//! `--coderunner`: what a Moodle CodeRunner question's combinator template grader
//! prints, as CodeRunner's documentation defines it ("Combinator-template grading",
//! coderunner.org.nz, documentation V3.2.1 section 8.2, read 2026-11-28): one JSON
//! object with
//!
//! - `fraction`: the mark, from 0 to 1;
//! - `testresults`: a table as a list of rows, the first the column headers; a column
//!   headed `iscorrect` shows a tick (1) or a cross (0), one headed `ishidden` is not
//!   shown and hides its row from students (1) but not from staff;
//! - `prologuehtml`, `epiloguehtml`: HTML shown before and after the table.
//!
//! A check named by `--hidden-until-due` is a hidden row: CodeRunner has no due date,
//! so students never see it while staff do.
use serde::Serialize;
use serde_json::{json, Value};

use super::{keep_start, summary};
use crate::grade::{fmt_points, Grade};

/// The table's header row.
pub const HEADER: [&str; 6] = ["iscorrect", "Check", "Points", "What it looks at", "Message", "ishidden"];
/// At most this much of a row's message.
const MESSAGE_LIMIT: usize = 2000;

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub fraction: f64,
    pub testresults: Vec<Vec<Value>>,
    pub prologuehtml: String,
    pub epiloguehtml: String,
}

pub fn render(grade: &Grade, hidden_until_due: &[String]) -> Outcome {
    let mut rows = vec![HEADER.iter().map(|h| json!(h)).collect::<Vec<Value>>()];
    for step in &grade.steps {
        for check in step.graded() {
            let hidden = hidden_until_due.iter().any(|id| id == check.id);
            rows.push(vec![
                json!(u8::from(check.passed())),
                json!(step.test_name(check)),
                json!(format!("{}/{}", fmt_points(check.points), fmt_points(check.max_points))),
                json!(check.observes),
                json!(keep_start(check.message.as_deref().unwrap_or(""), MESSAGE_LIMIT)),
                json!(u8::from(hidden)),
            ]);
        }
    }
    let max = grade.max_points();
    Outcome {
        fraction: if max > 0.0 { grade.points() / max } else { 0.0 },
        testresults: rows,
        prologuehtml: format!("<pre>{}</pre>", html(&summary(grade, false))),
        epiloguehtml: format!("<p>{} of {} points.</p>", fmt_points(grade.points()), fmt_points(max)),
    }
}

/// Text as HTML character data.
fn html(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};

    // Against coderunner.org.nz's documentation, "Combinator-template grading"
    // (https://coderunner.org.nz/mod/book/view.php?id=193&chapterid=739): fraction,
    // testresults with a header row (iscorrect, ishidden), prologuehtml, epiloguehtml.
    #[test]
    fn the_table_has_a_header_row_and_a_row_per_check() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = render(&grade_of(vec![s]), &[step_08::EPOCH_BARRIER.to_string()]);
        assert_eq!(r.fraction, 0.5);
        assert_eq!(r.testresults.len(), 3);
        assert_eq!(r.testresults[0], HEADER.map(|h| json!(h)));
        let iscorrect = HEADER.iter().position(|h| *h == "iscorrect").unwrap();
        let ishidden = HEADER.iter().position(|h| *h == "ishidden").unwrap();
        assert_eq!(r.testresults[1][iscorrect], 1);
        assert_eq!(r.testresults[2][iscorrect], 0);
        assert_eq!(r.testresults[1][ishidden], 0);
        assert_eq!(r.testresults[2][ishidden], 1, "epoch-barrier is hidden until due");
        assert_eq!(r.testresults[2][1], "step 8: epoch-barrier");
        assert_eq!(r.testresults[2][2], "0/5");
        assert!(r.testresults[2][4]
            .as_str()
            .unwrap()
            .starts_with("error[epoch-barrier]: step 8: saw epoch-barrier\n"));
        assert!(r.testresults.iter().all(|row| row.len() == HEADER.len()));
        assert!(r.prologuehtml.starts_with("<pre>Step 8 ("), "{}", r.prologuehtml);
        assert_eq!(r.epiloguehtml, "<p>5 of 10 points.</p>");
        let json = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["epiloguehtml", "fraction", "prologuehtml", "testresults"]);
    }

    #[test]
    fn compiler_errors_are_escaped_in_the_prologue() {
        let mut build = check(step_00::BUILDS, 0, false);
        build.observed = "error: expected `<` here: Vec<u8> & more".into();
        let r = render(&grade_of(vec![step_run(1, vec![build])]), &[]);
        assert_eq!(r.fraction, 0.0);
        assert!(r.prologuehtml.contains("Vec&lt;u8&gt; &amp; more"), "{}", r.prologuehtml);
        assert!(r.testresults[1..].iter().all(|row| row[0] == 0));
    }
}
