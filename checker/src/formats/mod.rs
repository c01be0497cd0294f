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

/// Where the reports go; each is optional.
#[derive(Debug, Clone, Default)]
pub struct Reports {
    pub json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub gradescope: Option<PathBuf>,
    pub prairielearn: Option<PathBuf>,
    pub autolab: Option<PathBuf>,
    pub coderunner: Option<PathBuf>,
    pub classroom: Option<PathBuf>,
    pub codegrade: Option<PathBuf>,
    /// Checks whose results students see only after the due date (`--hidden-until-due`):
    /// Gradescope's `after_due_date`, CodeRunner's hidden rows.
    pub hidden_until_due: Vec<String>,
}

impl Reports {
    pub fn any(&self) -> bool {
        [&self.json, &self.junit, &self.gradescope, &self.prairielearn]
            .into_iter()
            .chain([&self.autolab, &self.coderunner, &self.classroom, &self.codegrade])
            .any(Option::is_some)
    }

    /// Renders every report asked for and writes them atomically: each to a temporary
    /// file beside its path, and only when all are written, each renamed over its path.
    /// A report is whole or absent, and a path that cannot be written leaves none of
    /// them. Returns the paths written.
    pub fn write(&self, grade: &Grade, listing: junit::Listing) -> Result<Vec<PathBuf>, String> {
        let mut rendered: Vec<(&Path, String)> = Vec::new();
        if let Some(path) = &self.json {
            rendered.push((path, json(&exercism::render(grade))));
        }
        if let Some(path) = &self.junit {
            rendered.push((path, junit::render(grade, listing)));
        }
        let hidden = &self.hidden_until_due;
        if let Some(path) = &self.gradescope {
            rendered.push((path, json(&gradescope::render(grade, hidden))));
        }
        if let Some(path) = &self.prairielearn {
            rendered.push((path, json(&prairielearn::render(grade))));
        }
        if let Some(path) = &self.autolab {
            // One line: Autolab reads the last line the autograder prints.
            let line = serde_json::to_string(&autolab::render(grade)).expect("a report serialises");
            rendered.push((path, line + "\n"));
        }
        if let Some(path) = &self.coderunner {
            rendered.push((path, json(&coderunner::render(grade, hidden))));
        }
        if let Some(path) = &self.classroom {
            rendered.push((path, json(&classroom::render(grade))));
        }
        if let Some(path) = &self.codegrade {
            rendered.push((path, junit::render_codegrade(grade)));
        }
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

/// The end of `text`, at most `limit` characters (Unicode scalar values) of it.
pub fn last_chars(text: &str, limit: usize) -> &str {
    match text.char_indices().rev().nth(limit.saturating_sub(1)) {
        Some((start, _)) if limit > 0 => &text[start..],
        _ if limit == 0 => "",
        _ => text,
    }
}

/// `text` whole when it has at most `limit` characters, else its end under a line
/// saying so, the two together at most `limit` characters.
pub fn keep_end(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let note = |kept: usize| format!("[output cut to its last {kept} characters]\n");
    let kept = limit.saturating_sub(note(limit).chars().count());
    format!("{}{}", note(kept), last_chars(text, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_is_kept_and_counted_in_characters() {
        assert_eq!(last_chars("abcdef", 2), "ef");
        assert_eq!(last_chars("ab", 5), "ab");
        assert_eq!(last_chars("ab", 0), "");
        // Characters, not bytes: "é" is two bytes and one character.
        assert_eq!(last_chars("aéé", 2), "éé");
        let long = "é".repeat(600) + "the end";
        let kept = keep_end(&long, 500);
        assert_eq!(kept.chars().count(), 500);
        assert!(kept.starts_with("[output cut to its last 460 characters]\n"), "{kept}");
        assert!(kept.ends_with("the end"));
        assert_eq!(keep_end("short", 500), "short");
    }
}
