//! A class's gradebook: one row per submission with its points per step, its status
//! and total, as CSV (RFC 4180, the `csv` crate) for a spreadsheet or an LMS import.
//!
//! `grade --crates DIR --json-dir OUT` leaves beside each submission's report
//! (`OUT/<name>.json`, exercism's format, which has no points) an entry
//! (`OUT/<name>.entry.json`: the points the grade gave), and writes `OUT/gradebook.csv`
//! from the entries. Graded in shards (`--shard I/N`, one Slurm array task each), the
//! entries of all the tasks land in one OUT, and `checker gradebook OUT --crates DIR`
//! makes the one gradebook from them, a submission whose task died showing as missing.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::grade::{Grade, STEP_POINTS};

/// What an entry's file name ends with, after the submission's name.
pub const ENTRY_SUFFIX: &str = ".entry.json";
/// The gradebook's file in OUT.
pub const GRADEBOOK_FILE: &str = "gradebook.csv";

/// One submission's grade, as the gradebook needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub submission: String,
    /// "pass", "fail" or "error", as the reports say it.
    pub status: String,
    pub points: f64,
    pub max_points: f64,
    pub steps: Vec<StepPoints>,
    /// Why nothing could be graded, when nothing ran (usually the compiler's errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepPoints {
    pub step: u8,
    pub points: f64,
    pub max_points: f64,
}

impl Entry {
    pub fn of(submission: &str, grade: &Grade) -> Entry {
        Entry {
            submission: submission.to_string(),
            status: grade.status().as_str().to_string(),
            points: grade.points(),
            max_points: grade.max_points(),
            steps: grade
                .steps
                .iter()
                .map(|s| StepPoints { step: s.step, points: s.points(), max_points: STEP_POINTS })
                .collect(),
            error: grade.error(),
        }
    }

    /// Its file in `out`.
    pub fn path(out: &Path, submission: &str) -> PathBuf {
        out.join(format!("{submission}{ENTRY_SUFFIX}"))
    }

    pub fn write(&self, out: &Path) -> Result<(), String> {
        let path = Entry::path(out, &self.submission);
        let text = serde_json::to_string_pretty(self).expect("an entry serialises") + "\n";
        atomic_file::write_atomically(&path, text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// A row of the gradebook: a submission's entry, or the fact that it has none.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Graded(Entry),
    /// Handed in but never graded (its task died, or was never run).
    Missing(String),
}

impl Row {
    fn submission(&self) -> &str {
        match self {
            Row::Graded(entry) => &entry.submission,
            Row::Missing(name) => name,
        }
    }
}

/// The rows for OUT's entries, and a missing row for each of `expected` (the names
/// handed in) without one; sorted by submission.
pub fn collect(out: &Path, expected: &[String]) -> Result<Vec<Row>, String> {
    let entries = std::fs::read_dir(out).map_err(|e| {
        format!("{}: {e}; name the folder the reports were written to (--json-dir)", out.display())
    })?;
    let mut rows = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !name.ends_with(ENTRY_SUFFIX) {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let entry: Entry = serde_json::from_str(&text).map_err(|e| {
            format!("{}: not a grade entry ({e}); grade the submission again to remake it", path.display())
        })?;
        rows.push(Row::Graded(entry));
    }
    for name in expected {
        if !rows.iter().any(|r| r.submission() == name) {
            rows.push(Row::Missing(name.clone()));
        }
    }
    rows.sort_by(|a, b| a.submission().cmp(b.submission()));
    Ok(rows)
}

/// The CSV: `submission,status,points,max_points,step 0,…,step N,error`, a column per
/// step any entry graded, the error's first line (the whole is in the reports).
pub fn csv(rows: &[Row]) -> String {
    let mut steps: Vec<u8> = rows
        .iter()
        .flat_map(|r| match r {
            Row::Graded(e) => e.steps.iter().map(|s| s.step).collect(),
            Row::Missing(_) => vec![],
        })
        .collect();
    steps.sort_unstable();
    steps.dedup();
    let mut out = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = ["submission", "status", "points", "max_points"].map(String::from).to_vec();
    header.extend(steps.iter().map(|s| format!("step {s}")));
    header.push("error".into());
    // Writing to a Vec cannot fail.
    out.write_record(&header).expect("CSV into memory");
    for row in rows {
        let record: Vec<String> = match row {
            Row::Graded(e) => {
                let mut record =
                    vec![e.submission.clone(), e.status.clone(), number(e.points), number(e.max_points)];
                for step in &steps {
                    let points = e.steps.iter().find(|s| s.step == *step).map(|s| number(s.points));
                    record.push(points.unwrap_or_default());
                }
                record.push(e.error.as_deref().map(headline).unwrap_or_default().to_string());
                record
            }
            Row::Missing(name) => {
                let mut record = vec![name.clone(), "missing".into(), String::new(), String::new()];
                record.extend(steps.iter().map(|_| String::new()));
                record.push("no report: its grading did not finish (run it again)".into());
                record
            }
        };
        out.write_record(&record).expect("CSV into memory");
    }
    String::from_utf8(out.into_inner().expect("CSV into memory")).expect("CSV of UTF-8 text")
}

/// The line of an error message a gradebook shows: the compiler's first `error`, else
/// the first line.
fn headline(message: &str) -> &str {
    let mut lines = message.lines().map(str::trim);
    let first = message.lines().next().unwrap_or("").trim();
    lines.find(|l| l.starts_with("error")).unwrap_or(first)
}

/// Points as a spreadsheet reads them: "10", "3.33".
fn number(p: f64) -> String {
    let rounded = (p * 100.0).round() / 100.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0}")
    } else {
        format!("{rounded}")
    }
}

/// Writes `OUT/gradebook.csv` from OUT's entries; returns its path and the rows.
pub fn write(out: &Path, expected: &[String]) -> Result<(PathBuf, Vec<Row>), String> {
    let rows = collect(out, expected)?;
    if rows.is_empty() {
        return Err(format!(
            "{}: no grade entries (*{ENTRY_SUFFIX}) in it; grade with `grade ... --crates DIR --json-dir {}` first",
            out.display(),
            out.display()
        ));
    }
    let path = out.join(GRADEBOOK_FILE);
    atomic_file::write_atomically(&path, csv(&rows))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((path, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, steps: &[(u8, f64)], error: Option<&str>) -> Entry {
        let points = steps.iter().map(|s| s.1).sum();
        Entry {
            submission: name.into(),
            status: if error.is_some() { "error" } else { "fail" }.into(),
            points,
            max_points: 10.0 * steps.len() as f64,
            steps: steps
                .iter()
                .map(|&(step, points)| StepPoints { step, points, max_points: 10.0 })
                .collect(),
            error: error.map(String::from),
        }
    }

    #[test]
    fn entries_and_missing_submissions_make_one_sorted_gradebook() {
        let out = tempfile::tempdir().unwrap();
        entry("bob", &[(0, 10.0), (1, 10.0 / 3.0)], None).write(out.path()).unwrap();
        entry(
            "alice, jr",
            &[(0, 0.0), (1, 0.0)],
            Some("cargo build -p x failed:\nerror[E0425]: cannot find value `x`\n  --> src/main.rs"),
        )
        .write(out.path())
        .unwrap();
        // The exercism report beside an entry is not read as one.
        std::fs::write(out.path().join("bob.json"), "{}").unwrap();
        let expected = ["alice, jr", "bob", "carol"].map(String::from);
        let (path, rows) = write(out.path(), &expected).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2], Row::Missing("carol".into()));
        let text = std::fs::read_to_string(path).unwrap();
        // Read back with a CSV reader, as a spreadsheet would.
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header, ["submission", "status", "points", "max_points", "step 0", "step 1", "error"]);
        let records: Vec<Vec<String>> =
            reader.records().map(|r| r.unwrap().iter().map(String::from).collect()).collect();
        assert_eq!(
            records[0],
            ["alice, jr", "error", "0", "20", "0", "0", "error[E0425]: cannot find value `x`"]
        );
        assert_eq!(records[1], ["bob", "fail", "13.33", "20", "10", "3.33", ""]);
        assert_eq!(records[2][..2], ["carol".to_string(), "missing".to_string()]);
    }

    #[test]
    fn a_folder_without_entries_is_refused_with_what_to_do() {
        let out = tempfile::tempdir().unwrap();
        let err = write(out.path(), &[]).unwrap_err();
        assert!(err.contains("--json-dir"), "{err}");
        assert!(!out.path().join(GRADEBOOK_FILE).exists());
        let broken = out.path().join(format!("x{ENTRY_SUFFIX}"));
        std::fs::write(&broken, "not json").unwrap();
        assert!(collect(out.path(), &[]).unwrap_err().contains("grade the submission again"));
    }
}
