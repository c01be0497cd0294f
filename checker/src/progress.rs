//! A student's progress: the last verdict of `verify` for each of their steps, kept
//! in `.checker/progress.json`, and shown by `checker list`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use checker::PROGRESS_FILE_ENV;
use serde::{Deserialize, Serialize};

use crate::checks::CheckResult;

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Done,
    Failing,
    NotTried,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Failing => "failing",
            Status::NotTried => "not tried",
        }
    }
}

/// A verdict as the file keeps it: only steps `verify` has judged are in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kept {
    Done,
    Failing,
}

/// The file: `{"step_03": "done", "step_07": "failing"}`. Keys the checker does not know
/// (a later course's steps) are kept as they are.
type ProgressFile = BTreeMap<String, Kept>;

/// A step's key: its starter's package name.
fn key(step: u8) -> String {
    lab_course::Version::Starter(step).package_name()
}

fn file(root: &Path) -> PathBuf {
    match std::env::var_os(PROGRESS_FILE_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => root.join(".checker").join("progress.json"),
    }
}

/// The file as kept; none yet is no progress. A file that is not the checker's is an
/// error naming it and what to do, never read as "nothing done" (and then overwritten).
fn read(path: &Path) -> Result<ProgressFile, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ProgressFile::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not the checker's progress file ({e}): it keeps a verdict per step, e.g. {{\"step_03\": \"done\"}}; delete it to start the record afresh (`checker verify` writes it again)",
            path.display()
        )
    })
}

/// Every step's status (steps never verified are `NotTried`).
pub fn load(root: &Path) -> Result<BTreeMap<u8, Status>, String> {
    let kept = read(&file(root))?;
    Ok((0..=lab_course::LAST_STEP)
        .map(|step| {
            let status = match kept.get(&key(step)) {
                Some(Kept::Done) => Status::Done,
                Some(Kept::Failing) => Status::Failing,
                None => Status::NotTried,
            };
            (step, status)
        })
        .collect())
}

/// The verdicts one `verify` of step `step` gives: the step itself is done when every
/// check passed and failing otherwise; an earlier step is done when this run judged its
/// checks and all of them passed (a step-9 program that passes steps 0-8's checks has
/// done them, whichever crate it is). An earlier step with a check not passed keeps
/// what its own crate's last `verify` said: that crate is what "failing" is about.
pub fn verdicts(step: u8, results: &[CheckResult]) -> Vec<(u8, bool)> {
    let mut verdicts: Vec<(u8, bool)> = (0..step)
        .filter(|earlier| {
            let mut of_it = results.iter().filter(|r| r.step == *earlier).peekable();
            of_it.peek().is_some() && of_it.all(CheckResult::passed)
        })
        .map(|earlier| (earlier, true))
        .collect();
    verdicts.push((step, !results.is_empty() && results.iter().all(CheckResult::passed)));
    verdicts
}

/// Records the verdicts of one `verify` of step `step` ([`verdicts`]), atomically (a
/// temp file renamed over the old one). A file that cannot be read is left as it is,
/// and the error says why.
pub fn record_run(root: &Path, step: u8, results: &[CheckResult]) -> Result<(), String> {
    record(root, &verdicts(step, results))
}

/// Records verdicts (step, passed), all at once.
fn record(root: &Path, verdicts: &[(u8, bool)]) -> Result<(), String> {
    let path = file(root);
    let mut kept = read(&path)?;
    for (step, passed) in verdicts {
        kept.insert(key(*step), if *passed { Kept::Done } else { Kept::Failing });
    }
    let text = serde_json::to_string_pretty(&kept).map_err(|e| e.to_string())? + "\n";
    let write = |path: &Path| -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        atomic_file::write_atomically(path, text)
    };
    write(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `checker list`: a line per step and a bar of the steps done.
pub fn render(statuses: &BTreeMap<u8, Status>, titles: &[&str]) -> String {
    let mut out = String::new();
    for (step, status) in statuses {
        let title = titles.get(*step as usize).copied().unwrap_or("");
        out.push_str(&format!("step {step:>2}  {:<9}  {title}\n", status.word()));
    }
    let done = statuses.values().filter(|s| **s == Status::Done).count();
    let width = 24;
    let filled = done * width / statuses.len().max(1);
    out.push_str(&format!(
        "[{}{}] {done}/{} steps done\n",
        "#".repeat(filled),
        "-".repeat(width - filled),
        statuses.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Verdict;

    #[test]
    fn verdicts_are_kept_and_listed() {
        let root = std::env::temp_dir().join(format!("checker-progress-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert!(load(&root).unwrap().values().all(|s| *s == Status::NotTried));
        record(&root, &[(3, false)]).unwrap();
        record(&root, &[(0, true)]).unwrap();
        record(&root, &[(3, true)]).unwrap();
        record(&root, &[(7, false)]).unwrap();
        let statuses = load(&root).unwrap();
        assert_eq!(statuses[&0], Status::Done);
        assert_eq!(statuses[&3], Status::Done);
        assert_eq!(statuses[&7], Status::Failing);
        assert_eq!(statuses[&5], Status::NotTried);
        let text = render(&statuses, lab_course::STEPS);
        assert!(text.contains(&format!("step  7  failing    {}\n", lab_course::STEPS[7])), "{text}");
        // 2 steps done of every step of the lab, on a bar 24 wide.
        let steps = lab_course::STEPS.len();
        let filled = 2 * 24 / steps;
        let bar = format!("[{}{}] 2/{steps} steps done\n", "#".repeat(filled), "-".repeat(24 - filled));
        assert!(text.ends_with(&bar), "{text}");
        // The file is the verdicts, by step.
        let kept = std::fs::read_to_string(root.join(".checker/progress.json")).unwrap();
        let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(kept, serde_json::json!({"step_00": "done", "step_03": "done", "step_07": "failing"}));
        let _ = std::fs::remove_dir_all(&root);
    }

    fn result(step: u8, verdict: Verdict) -> CheckResult {
        CheckResult::new("some-check", step, verdict, String::new(), String::new(), "")
    }

    /// A step-9 run that passed steps 0-8's checks credits them, whichever crate ran;
    /// an earlier step with a check not passed (failed or not judged) is left as its own
    /// crate's last verify left it; step 9 itself is failing if any check was not passed.
    #[test]
    fn a_later_steps_run_credits_every_earlier_step_whose_checks_all_passed() {
        use Verdict::{CouldNotJudge, Fail, Pass};
        let mut results: Vec<CheckResult> = (0..=9).map(|step| result(step, Pass)).collect();
        results.push(result(4, Pass));
        assert_eq!(verdicts(9, &results), (0..=9).map(|s| (s, true)).collect::<Vec<_>>());
        results.push(result(4, Fail));
        results.push(result(6, CouldNotJudge));
        results.push(result(9, Fail));
        let expected: Vec<(u8, bool)> =
            [0, 1, 2, 3, 5, 7, 8].map(|s| (s, true)).into_iter().chain([(9, false)]).collect();
        assert_eq!(verdicts(9, &results), expected);
        // A crate that did not build: only its `builds` check (of step 0), failed.
        assert_eq!(verdicts(9, &[result(0, Fail)]), vec![(9, false)]);

        let root = std::env::temp_dir().join(format!("checker-progress-credit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        record(&root, &[(4, false)]).unwrap();
        record_run(&root, 9, &(0..=9).map(|step| result(step, Pass)).collect::<Vec<_>>()).unwrap();
        let statuses = load(&root).unwrap();
        assert!((0..=9).all(|s| statuses[&s] == Status::Done), "{statuses:?}");
        assert_eq!(statuses[&10], Status::NotTried);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A file that is not the checker's is named, with what to do, and never
    /// overwritten: recording a verdict leaves it as it was.
    #[test]
    fn a_file_that_is_not_progress_is_named_and_kept() {
        let root = std::env::temp_dir().join(format!("checker-progress-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join(".checker/progress.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for bad in ["{\"step_03\": \"finished\"}", "[1, 2]", "{\"step_03\": "] {
            std::fs::write(&path, bad).unwrap();
            let e = load(&root).unwrap_err();
            assert!(
                e.contains("progress.json is not the checker's progress file") && e.contains("delete it"),
                "{e}"
            );
            assert!(record(&root, &[(3, true)]).is_err());
            assert_eq!(std::fs::read_to_string(&path).unwrap(), bad, "left as it was");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
