//! `coursegen new-step` on a copy of the files it edits, taken from this repository:
//! each file gets exactly the step's addition, a second run and a missing anchor are
//! refused with exit 2 and change nothing. (Never run against the repository itself.)
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use coursegen::new_step::{checks_module, guide_page, CHECKER_PAGE, LIB, REGISTRY, SUMMARY};
use lab_course::{LAST_STEP, MASTER};

const EDITED: [&str; 5] = [LIB, MASTER, REGISTRY, SUMMARY, CHECKER_PAGE];
const TITLE: &str = "Tensor parallelism";

/// A temporary root holding copies of the files `new-step` edits, and the directories
/// it creates files in; removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("coursegen-new-step-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        // The steps' checks modules too: new-step reads their check ids.
        let modules: Vec<PathBuf> = (0..=LAST_STEP).map(checks_module).collect();
        let read = modules.iter().map(|m| m.to_str().unwrap());
        for rel in EDITED.into_iter().chain(read) {
            std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
            std::fs::copy(repo.join(rel), dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        }
        std::fs::create_dir_all(dir.join("lab-guide/src/steps")).unwrap();
        Tree(dir)
    }

    fn new_step(&self, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_coursegen"))
            .arg("--root")
            .arg(&self.0)
            .args(["new-step", TITLE])
            .args(extra)
            .output()
            .unwrap()
    }

    /// Every file under the root and its content.
    fn files(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![self.0.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(&self.0).unwrap().to_path_buf();
                    out.insert(rel, std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        out
    }

    fn read(&self, rel: impl AsRef<Path>) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines `after` adds to `before`, each with the line it follows, when `after` is
/// `before` with lines inserted (and panics if any line of `before` went).
fn added(before: &str, after: &str) -> Vec<(String, String)> {
    let mut old = before.lines().peekable();
    let (mut previous, mut out) = (String::new(), Vec::new());
    for line in after.lines() {
        if old.peek() == Some(&line) {
            old.next();
        } else {
            out.push((previous.clone(), line.to_string()));
        }
        previous = line.to_string();
    }
    assert_eq!(old.next(), None, "a line was removed or changed:\n{after}");
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn each_file_gets_exactly_the_steps_addition() {
    let tree = Tree::new("adds");
    let before = tree.files();
    let out = tree.new_step(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (last, step) = (LAST_STEP, LAST_STEP + 1);
    let after = tree.files();
    let was = |rel: &str| &before[Path::new(rel)];
    let now = |rel: &str| &after[Path::new(rel)];

    let last_title = format!("    {:?},", lab_course::STEPS[usize::from(last)]);
    assert_eq!(added(was(LIB), now(LIB)), pairs(&[(&last_title, &format!("    {TITLE:?},"))]));

    let master = added(was(MASTER), now(MASTER));
    let lines: Vec<&str> = master.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(lines.first(), Some(&format!("//@ step {step}").as_str()), "{master:?}");
    assert!(lines.contains(&format!("//| // TODO Step {step}: {TITLE}.").as_str()), "{master:?}");
    assert_eq!(lines.last(), Some(&"//@ end"));
    assert!(now(MASTER).ends_with(&format!("{}\n", lines.join("\n"))), "the block goes at the end");

    let id = "tensor-parallelism";
    let registry = added(was(REGISTRY), now(REGISTRY));
    assert_eq!(registry.len(), 2, "{registry:?}");
    assert_eq!(
        registry[0],
        pairs(&[(&format!("pub mod step_{last:02};"), &format!("pub mod step_{step:02};"))])[0]
    );
    assert_eq!(
        registry[1],
        pairs(&[(&format!("    &step_{last:02}::STEP,"), &format!("    &step_{step:02}::STEP,"))])[0]
    );

    // The step's declaration: its check's id beside it, no gains and no runs of its own.
    let module = now(checks_module(step).to_str().unwrap());
    for part in [
        format!("pub const TENSOR_PARALLELISM: &str = \"{id}\";"),
        "pub const STEP: Step = Step {".into(),
        "gains: &[],".into(),
        "runs: &[],".into(),
        "id: TENSOR_PARALLELISM,".into(),
        "needs: None,".into(),
        "judge: not_judged_yet,".into(),
    ] {
        assert!(module.contains(&part), "{part} not in:\n{module}");
    }
    // The placeholder's evidence is missing, which with no run needed fails: it never passes.
    assert!(module.contains("Finding::missing(\n        \"not judged yet"), "{module}");
    assert!(!module.contains("Finding::shown") && !module.contains("Holds"), "{module}");

    let page = now(guide_page(step).to_str().unwrap());
    assert!(page.starts_with(&format!("# Step {step}: {TITLE}\n")), "{page}");
    for section in ["## What to change", "## What the checker will test", "## Common mistakes"] {
        assert!(page.lines().any(|l| l == section), "{section} not in:\n{page}");
    }
    assert!(page.lines().any(|l| l.starts_with(&format!("- `{id}`: "))), "no bullet for the check:\n{page}");

    let summary = added(was(SUMMARY), now(SUMMARY));
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert!(summary[0].0.ends_with(&format!("(steps/step-{last:02}.md)")), "{summary:?}");
    assert_eq!(summary[0].1, format!("- [Step {step}: {TITLE}](steps/step-{step:02}.md)"));

    let table = added(was(CHECKER_PAGE), now(CHECKER_PAGE));
    assert_eq!(table.len(), 1, "{table:?}");
    assert!(table[0].0.starts_with(&format!("| {last} | ")), "{table:?}");
    assert_eq!(table[0].1, format!("| {step} | `{id}` (not judged yet) |"));

    // Nothing else was written: the five edits and the two new files.
    let new: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    assert_eq!(new, [&checks_module(step), &guide_page(step)]);
}

#[test]
fn a_second_run_refuses_and_changes_nothing() {
    let tree = Tree::new("twice");
    assert!(tree.new_step(&[]).status.success());
    let once = tree.files();
    let out = tree.new_step(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let module = checks_module(LAST_STEP + 1);
    assert!(stderr(&out).contains(&format!("{} exists", module.display())), "{}", stderr(&out));
    assert_eq!(tree.files(), once);
}

/// A step whose new files went but whose edits stayed is named as there, not scaffolded
/// a second time.
#[test]
fn a_step_partly_there_is_refused() {
    let tree = Tree::new("partly");
    assert!(tree.new_step(&[]).status.success());
    let step = LAST_STEP + 1;
    std::fs::remove_file(tree.0.join(checks_module(step))).unwrap();
    std::fs::remove_file(tree.0.join(guide_page(step))).unwrap();
    let before = tree.files();
    let out = tree.new_step(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains(&format!(
            "step {step} is already (partly) there: {MASTER} has a `//@ step {step}` block"
        )),
        "{message}"
    );
    assert_eq!(tree.files(), before);
}

#[test]
fn a_missing_anchor_refuses_naming_file_and_anchor_and_writes_nothing() {
    let tree = Tree::new("anchor");
    // The SUMMARY without its line for the last step, which the new step's line follows.
    let link = format!("({})", lab_course::page_in_book(LAST_STEP).display());
    let summary: String =
        tree.read(SUMMARY).lines().filter(|l| !l.contains(&link)).map(|l| format!("{l}\n")).collect();
    std::fs::write(tree.0.join(SUMMARY), summary).unwrap();
    let before = tree.files();
    let out = tree.new_step(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains(SUMMARY) && message.contains(&format!("a line with `{link}` not found")),
        "{message}"
    );
    assert_eq!(tree.files(), before, "files were written although the plan failed");
}

#[test]
fn a_dry_run_names_the_files_and_writes_nothing() {
    let tree = Tree::new("dry");
    let before = tree.files();
    let out = tree.new_step(&["--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let step = LAST_STEP + 1;
    for created in [checks_module(step), guide_page(step)] {
        assert!(stdout.contains(&format!("would create {}\n", created.display())), "{stdout}");
    }
    for edited in EDITED {
        assert!(stdout.contains(&format!("would edit {edited}\n")), "{stdout}");
    }
    assert_eq!(tree.files(), before);
}

#[test]
fn a_check_id_taken_is_refused() {
    let tree = Tree::new("taken");
    let before = tree.files();
    let out = tree.new_step(&["--check", "equals-ddp"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`equals-ddp` is already checker/src/checks/step_14.rs's"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree.files(), before);
}

/// A tree whose STEPS lists another number of steps than this coursegen was built with
/// would get a step numbered wrong: refused, with the way out (rebuild).
#[test]
fn a_tree_coursegen_was_not_built_from_is_refused() {
    let tree = Tree::new("other");
    let last_title = format!("    {:?},", lab_course::STEPS[usize::from(LAST_STEP)]);
    let lib = tree.read(LIB).replacen(&last_title, &format!("{last_title}\n    \"one more\","), 1);
    std::fs::write(tree.0.join(LIB), lib).unwrap();
    let before = tree.files();
    let out = tree.new_step(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("rebuild"), "{}", stderr(&out));
    assert_eq!(tree.files(), before);
}
