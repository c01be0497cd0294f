//! A student's progress: the last verdict of `verify` for each of their steps, kept
//! in `.checker/progress.json`, and shown by `checker list`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use checker::PROGRESS_FILE_ENV;
use serde_json::{json, Value};

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

fn file(root: &Path) -> PathBuf {
    match std::env::var_os(PROGRESS_FILE_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => root.join(".checker").join("progress.json"),
    }
}

/// Every step's status (steps never verified are `NotTried`).
pub fn load(root: &Path) -> BTreeMap<u8, Status> {
    let saved: Value = std::fs::read_to_string(file(root))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    (0..=coursegen::LAST_STEP)
        .map(|step| {
            let status = match saved[format!("step_{step:02}")].as_str() {
                Some("done") => Status::Done,
                Some("failing") => Status::Failing,
                _ => Status::NotTried,
            };
            (step, status)
        })
        .collect()
}

/// Records a verdict, atomically (a temp file renamed over the old one).
pub fn record(root: &Path, step: u8, passed: bool) -> std::io::Result<()> {
    let mut all: BTreeMap<String, Value> = load(root)
        .into_iter()
        .filter(|(_, s)| *s != Status::NotTried)
        .map(|(n, s)| (format!("step_{n:02}"), json!(s.word())))
        .collect();
    all.insert(format!("step_{step:02}"), json!(if passed { "done" } else { "failing" }));
    let path = file(root);
    std::fs::create_dir_all(path.parent().expect("a parent"))?;
    atomic_file::write_atomically(&path, serde_json::to_string_pretty(&all)? + "\n")
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

    #[test]
    fn verdicts_are_kept_and_listed() {
        let root = std::env::temp_dir().join(format!("checker-progress-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert!(load(&root).values().all(|s| *s == Status::NotTried));
        record(&root, 3, false).unwrap();
        record(&root, 0, true).unwrap();
        record(&root, 3, true).unwrap();
        record(&root, 7, false).unwrap();
        let statuses = load(&root);
        assert_eq!(statuses[&0], Status::Done);
        assert_eq!(statuses[&3], Status::Done);
        assert_eq!(statuses[&7], Status::Failing);
        assert_eq!(statuses[&5], Status::NotTried);
        let text = render(&statuses, coursegen::STEPS);
        assert!(text.contains(&format!("step  7  failing    {}\n", coursegen::STEPS[7])), "{text}");
        // 2 steps done of every step of the lab, on a bar 24 wide.
        let steps = coursegen::STEPS.len();
        let filled = 2 * 24 / steps;
        let bar = format!("[{}{}] 2/{steps} steps done\n", "#".repeat(filled), "-".repeat(24 - filled));
        assert!(text.ends_with(&bar), "{text}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
