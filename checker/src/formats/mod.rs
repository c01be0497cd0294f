//! The reports `grade` and `verify` write, each in a published format and each
//! rendered from the one grade model ([`crate::grade::Grade`]) by a module of its own,
//! named for its platform: exercism's test-runner results (`--json`), JUnit XML
//! (`--junit`, and `--codegrade` without properties), Gradescope's results.json
//! (`--gradescope`), PrairieLearn's results.json (`--prairielearn`), Autolab's
//! autoresult (`--autolab`), Moodle CodeRunner's combinator-grader outcome
//! (`--coderunner`) and a GitHub Classroom grader's runner result (`--classroom`).
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::grade::{fmt_points, Grade, STEP_POINTS};

pub mod autolab;
pub mod classroom;
pub mod coderunner;
pub mod exercism;
pub mod gradescope;
pub mod junit;
pub mod prairielearn;

/// A report format: one per option of [`Reports`], each rendered by its module. Every
/// list of the formats (the options `--crates` conflicts with, "any report asked for",
/// the writing) is iterated from [`Format::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Junit,
    Gradescope,
    Prairielearn,
    Autolab,
    Coderunner,
    Classroom,
    Codegrade,
}

impl Format {
    /// Every format, in the order [`Reports::write`] writes them.
    pub const ALL: [Format; 8] = [
        Format::Json,
        Format::Junit,
        Format::Gradescope,
        Format::Prairielearn,
        Format::Autolab,
        Format::Coderunner,
        Format::Classroom,
        Format::Codegrade,
    ];

    /// The id of its option in [`Reports`] (`--json` is `json`), as clap names it.
    pub fn arg(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Junit => "junit",
            Format::Gradescope => "gradescope",
            Format::Prairielearn => "prairielearn",
            Format::Autolab => "autolab",
            Format::Coderunner => "coderunner",
            Format::Classroom => "classroom",
            Format::Codegrade => "codegrade",
        }
    }

    /// The report of `grade` in this format. `listing` is JUnit's; `hidden` the checks
    /// shown only after the due date (Gradescope, CodeRunner).
    pub fn render(self, grade: &Grade, listing: junit::Listing, hidden: &[String]) -> String {
        match self {
            Format::Json => json(&exercism::render(grade)),
            Format::Junit => junit::render(grade, listing),
            Format::Gradescope => json(&gradescope::render(grade, hidden)),
            Format::Prairielearn => json(&prairielearn::render(grade)),
            // One line: Autolab reads the last line the autograder prints.
            Format::Autolab => {
                serde_json::to_string(&autolab::render(grade)).expect("a report serialises") + "\n"
            }
            Format::Coderunner => json(&coderunner::render(grade, hidden)),
            Format::Classroom => json(&classroom::render(grade)),
            Format::Codegrade => junit::render_codegrade(grade),
        }
    }
}

/// Where the reports go; each is optional. `grade`'s report options, as the command line
/// spells them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Reports {
    /// Write exercism's test-runner results (version 3) here: a status, and per check
    /// its status, message, the program's output (its last 500 characters) and the
    /// command that repeats it.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write JUnit XML here: one testsuite per step, one testcase per check.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Write Gradescope's results.json here: the score, and per check a test with its
    /// score, status and output.
    #[arg(long, value_name = "PATH")]
    pub gradescope: Option<PathBuf>,
    /// Write PrairieLearn's external-grader results.json here: a score from 0 to 1,
    /// a test per check, and `gradable: false` when nothing could be run.
    #[arg(long, value_name = "PATH")]
    pub prairielearn: Option<PathBuf>,
    /// Write Autolab's autoresult here, one line: {"scores": {"step N": points}, "scoreboard": [total]}.
    #[arg(long, value_name = "PATH")]
    pub autolab: Option<PathBuf>,
    /// Write what a Moodle CodeRunner combinator template grader prints here: the
    /// fraction, and a row per check.
    #[arg(long, value_name = "PATH")]
    pub coderunner: Option<PathBuf>,
    /// Write a GitHub Classroom grader's runner result here (JSON, version 1): a test
    /// per check with its score, for the grading reporter to sum.
    #[arg(long, value_name = "PATH")]
    pub classroom: Option<PathBuf>,
    /// Write JUnit XML for CodeGrade's AutoTest here (its $CG_JUNIT_XML_LOCATION): no
    /// properties, only the checks that carry points.
    #[arg(long, value_name = "PATH")]
    pub codegrade: Option<PathBuf>,
    /// Checks students see only after the due date (Gradescope), or never (hidden
    /// rows in CodeRunner): their ids, e.g. `--hidden-until-due epoch-barrier,trains`.
    #[arg(long, value_name = "CHECK,...", value_delimiter = ',', value_parser = crate::checks::check_id)]
    pub hidden_until_due: Vec<String>,
}

impl Reports {
    pub fn any(&self) -> bool {
        Format::ALL.into_iter().any(|format| self.path(format).is_some())
    }

    /// Where the report in `format` goes, if it was asked for.
    pub fn path(&self, format: Format) -> Option<&Path> {
        let path = match format {
            Format::Json => &self.json,
            Format::Junit => &self.junit,
            Format::Gradescope => &self.gradescope,
            Format::Prairielearn => &self.prairielearn,
            Format::Autolab => &self.autolab,
            Format::Coderunner => &self.coderunner,
            Format::Classroom => &self.classroom,
            Format::Codegrade => &self.codegrade,
        };
        path.as_deref()
    }

    /// Renders every report asked for and writes them atomically: each to a temporary
    /// file beside its path, and only when all are written, each renamed over its path.
    /// A report is whole or absent, and a path that cannot be written leaves none of
    /// them. Returns the paths written.
    pub fn write(&self, grade: &Grade, listing: junit::Listing) -> Result<Vec<PathBuf>, String> {
        let rendered: Vec<(&Path, String)> = Format::ALL
            .into_iter()
            .filter_map(|format| {
                let path = self.path(format)?;
                Some((path, format.render(grade, listing, &self.hidden_until_due)))
            })
            .collect();
        let cannot = |path: &Path, e: std::io::Error| {
            format!("cannot write the report {}: {e}; name a writable path", path.display())
        };
        let mut pending = Vec::new();
        for (path, text) in &rendered {
            let mut file = atomic_file::Writer::new().create(path).map_err(|e| cannot(path, e))?;
            file.file().write_all(text.as_bytes()).map_err(|e| cannot(path, e))?;
            pending.push((path, file));
        }
        let mut written = Vec::new();
        for (path, file) in pending {
            file.commit().map_err(|e| cannot(path, e))?;
            written.push(path.to_path_buf());
        }
        Ok(written)
    }
}

fn json(report: &impl serde::Serialize) -> String {
    // Serialising these derived types cannot fail (string keys, finite numbers).
    serde_json::to_string_pretty(report).expect("a report serialises") + "\n"
}

/// What a grade says above its tests, in plain text or Markdown (code blocks around
/// compiler errors): points per step, what was graded, why nothing or a step did not
/// run, how the code was confined, and how to repeat the runs.
pub fn summary(grade: &Grade, markdown: bool) -> String {
    let block = |text: &str| {
        if markdown {
            // A fence longer than any run of backticks in the text, so it cannot close early.
            let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
            let fence = "`".repeat(longest.max(2) + 1);
            format!("{fence}text\n{}\n{fence}\n", text.trim_end())
        } else {
            format!("{}\n", text.trim_end())
        }
    };
    let code = |text: &str| if markdown { format!("`{text}`") } else { text.to_string() };
    let mut out = String::new();
    for s in &grade.steps {
        out.push_str(&format!(
            "{}Step {} ({}): {} of {} points.\n",
            if markdown { "- " } else { "" },
            s.step,
            s.title,
            fmt_points(s.points()),
            fmt_points(STEP_POINTS)
        ));
    }
    if let Some(found) = &grade.submission {
        out.push_str(&format!("\nGraded: {found}.\n"));
    }
    if let Some(error) = grade.error() {
        out.push_str(&format!("\nNothing could be run, so no check passed:\n\n{}\n", block(&error)));
    } else {
        for s in grade.steps.iter().filter(|s| s.not_run.is_some()) {
            let why = s.not_run.as_deref().unwrap_or("");
            out.push_str(&format!("\nStep {} did not run:\n\n{}\n", s.step, block(why)));
        }
    }
    out.push_str(&format!("\nRan in {}.\n", grade.confinement.describe()));
    if let Some(s) = grade.steps.first() {
        out.push_str(&format!(
            "Hidden variations from seed {}: {} runs the same checks on your own copy.\n",
            grade.seed,
            code(&s.repeat_command(grade.seed))
        ));
    }
    out
}

// Every format shortens text the one way: at a line's or a sentence's end, saying how
// much it left out (messages keep their start, where the diagnosis is; the program's
// output its end).
pub use crate::cut::{keep_end, keep_start};

/// Every platform's report shows a failing check's diagnosis once (the report's own
/// shape is report.rs's test; this one reads each format).
#[cfg(test)]
mod diagnosis_once {
    use crate::checks;
    use crate::report::tests::{fixture, guide_only, snapshot};
    use crate::report::C10D_DUMP;

    /// Every platform's report of the rank-0-only all-reduce: the diagnosis once, in the
    /// failing check's test; no test without points that only repeats it; no c10d dump.
    #[test]
    fn every_platform_shows_the_diagnosis_once() {
        use crate::formats::{junit, prairielearn, Format};
        use crate::grade::{Confinement, Grade, StepGrade};
        let obs = fixture("step-09-metrics-all-reduced-on-rank-0-only");
        let root = guide_only();
        let results = checks::judge(&obs);
        let step = StepGrade::judged(root.path(), 9, &results, obs.first_output(), 1_700_000_000, 19.0);
        let grade = Grade {
            seed: 4242,
            confinement: Confinement::Unconfined { why: None },
            submission: None,
            steps: vec![step],
        };
        let pl = prairielearn::render(&grade);
        let tests: Vec<String> = pl
            .tests
            .iter()
            .map(|t| format!("--- {} ({} of {})\n{}", t.name, t.points, t.max_points, t.message))
            .collect();
        snapshot("prairielearn_rank_0_only_all_reduce", &tests.join("\n"));
        assert!(pl.tests.iter().all(|t| t.max_points > 0.0), "a test without points: {tests:#?}");
        let mut rendered: Vec<(&str, String)> = Format::ALL
            .into_iter()
            .map(|format| (format.arg(), format.render(&grade, junit::Listing::Graded, &[])))
            .collect();
        rendered.push(("junit, every check", junit::render(&grade, junit::Listing::EveryCheck)));
        // JUnit repeats a failure's first line as its `message` attribute, by design.
        let attribute = regex::Regex::new(r#" message="[^"]*""#).unwrap();
        for (format, text) in rendered {
            let text = attribute.replace_all(&text, "").into_owned();
            let times = text.matches("a collective only rank 0 reaches").count();
            // Autolab's autoresult holds only the points.
            let expected = usize::from(format != "autolab");
            assert_eq!(times, expected, "{format} says the diagnosis {times} times:\n{text}");
            assert!(!text.contains(C10D_DUMP), "{format} shows c10d's dump:\n{text}");
        }
    }
}
