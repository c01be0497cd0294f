//! `coursegen students-copy DIR`: the repository a class gets. The steps' starters, the
//! libraries, the checker, the guide and the scripts students run, without the answers:
//! no `solutions/`, no master (`course/lab/`), and the step pages' folded part "The
//! code" left out (so `cargo checker hint step N --answer` there says the answers are
//! with the instructor).
//!
//! What cannot be left out: the starter of step N+1 is the program after step N, so a
//! copy holding the starters of steps 0 to N holds the answers of steps 0 to N-1 there.
//! `--through N` releases steps 0 to N only, as an instructor releases them over a term.
//!
//! The copy is written into a temporary folder beside DIR and renamed to DIR at the end:
//! an error leaves nothing half-written.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use toml_edit::DocumentMut;

pub use crate::copy_mark::{read_mark, Mark, MARK, STARTERS};
use crate::{crate_files, CourseError, Version, LAST_STEP, MASTER};

/// The `<summary>` line opening the step pages' folded part that names the API (hint level 2).
pub const API_SUMMARY: &str = "<summary>Which API</summary>";
/// The `<summary>` line opening the step pages' folded part that holds the step's code
/// (the answer, hint level 3): a students' copy leaves it out.
pub const CODE_SUMMARY: &str = "<summary>The code</summary>";
/// What stands in a students' copy where a page's part "The code" was.
pub const WITHHELD: &str =
    "*The code of this step is with your instructor: this copy of the lab leaves the answers out.*";

/// Paths (relative to the root, `/`-separated prefixes) a students' copy leaves out, and why.
const LEFT_OUT: &[(&str, &str)] = &[
    ("solutions/", "the answers"),
    ("course/", "the master, which holds every answer"),
    // The checker's and tools' tests use the solutions and the master, and broken.rs
    // holds each step's answer with a mistake in it.
    ("checker/tests/", "tests run on the solutions"),
    ("checker/fixtures/", "traces recorded from the solutions, for the tests"),
    ("tools/coursegen/tests/", "tests of the master"),
    ("crates/step-reset/tests/", "tests of the master"),
    ("crates/guide-hints/tests/", "tests that read the answers"),
    ("demo/", "the instructor's demo runs the finished lab"),
    ("bench/", "benchmarks of the finished lab"),
    (".github/", "the instructor's CI; a class's workflow comes from `checker autograder github-classroom`"),
    (".ci/", "the instructor's CI"),
];

/// What [`write`] wrote.
#[derive(Debug)]
pub struct Written {
    pub files: usize,
    pub through: u8,
}

/// Writes the students' copy of the repository at `root` into `dest`, which must not
/// exist yet (or be an empty folder), releasing steps 0 to `through`.
pub fn write(root: &Path, dest: &Path, through: u8) -> Result<Written, CourseError> {
    let through = Version::Starter(through).validate()?.step();
    if !root.join(MASTER).is_file() {
        return Err(CourseError::CopyRefused {
            reason: format!(
                "{} has no {MASTER}: make the students' copy from the instructor's full repository",
                root.display()
            ),
        });
    }
    let empty = fs::read_dir(dest).map(|mut d| d.next().is_none());
    match empty {
        Ok(false) => {
            return Err(CourseError::CopyRefused {
                reason: format!("{} already exists and is not empty: name a new folder", dest.display()),
            })
        }
        Ok(true) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(CourseError::CopyRefused {
                reason: format!("{} is a file: name a new folder", dest.display()),
            })
        }
        Err(source) => return Err(CourseError::Io { path: dest.to_path_buf(), source }),
    }
    let name = dest.file_name().ok_or_else(|| CourseError::CopyRefused {
        reason: format!("{} names no folder: name a new folder, e.g. ddp-lab-class", dest.display()),
    })?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(CourseError::CopyRefused {
            reason: format!("{} does not exist: make it first", parent.display()),
        });
    }
    let files = planned_files(root, through)?;
    let temp = parent.join(format!(".{}.students-copy-{}", name.to_string_lossy(), std::process::id()));
    let _ = fs::remove_dir_all(&temp);
    let result = (|| {
        for (rel, content) in &files {
            let path = temp.join(rel);
            fs::create_dir_all(path.parent().expect("under the copy")).map_err(io(&path))?;
            fs::write(&path, content).map_err(io(&path))?;
            let source = root.join(rel);
            let same = fs::read(&source).is_ok_and(|bytes| &bytes == content);
            copy_mode(&source, &path, same)?;
        }
        // An empty folder is replaced; rename(2) refuses a folder that is not empty.
        let _ = fs::remove_dir(dest);
        fs::rename(&temp, dest).map_err(io(dest))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&temp);
    }
    result?;
    Ok(Written { files: files.len(), through })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CourseError + '_ {
    move |source| CourseError::Io { path: path.to_path_buf(), source }
}

/// Keeps a script executable in the copy, and a copied file's modification time (as
/// `cp -p` does), so that cargo, which judges path dependencies by it, finds a build of
/// an earlier copy fresh. A file the copy changes or renders gets the time it is written.
fn copy_mode(from: &Path, to: &Path, same: bool) -> Result<(), CourseError> {
    if let Ok(meta) = fs::metadata(from) {
        fs::set_permissions(to, meta.permissions()).map_err(io(to))?;
        if let (true, Ok(modified)) = (same, meta.modified()) {
            let file = fs::File::options().write(true).open(to).map_err(io(to))?;
            file.set_modified(modified).map_err(io(to))?;
        }
    }
    Ok(())
}

/// Every file of the copy, as (path relative to its root, content), computed before
/// anything is written.
pub fn planned_files(root: &Path, through: u8) -> Result<Vec<(PathBuf, Vec<u8>)>, CourseError> {
    let mut out = Vec::new();
    let held_back: Vec<PathBuf> =
        (through + 1..=LAST_STEP).map(|s| Version::Starter(s).crate_dir()).collect();
    let released = |rel: &str| !held_back.iter().any(|dir| Path::new(rel).starts_with(dir));
    for rel in tracked_files(root)? {
        if LEFT_OUT.iter().any(|(prefix, _)| rel.starts_with(prefix)) || !released(&rel) {
            continue;
        }
        // The starters come rendered from the master below, as they were released.
        if rel.starts_with("steps/") {
            continue;
        }
        let path = root.join(&rel);
        let Ok(bytes) = fs::read(&path) else { continue }; // tracked, deleted in the tree
        let bytes = if rel == "Cargo.toml" {
            workspace_manifest(&String::from_utf8_lossy(&bytes))?.into_bytes()
        } else if rel.starts_with("lab-guide/") && rel.ends_with(".md") {
            withhold_code(&String::from_utf8_lossy(&bytes)).into_bytes()
        } else {
            bytes
        };
        out.push((PathBuf::from(rel), bytes));
    }
    for step in 0..=through {
        for (rel, content) in crate_files(root, Version::Starter(step))? {
            let pristine = Path::new(STARTERS).join(rel.strip_prefix("steps").expect("a starter"));
            out.push((pristine, content.clone().into_bytes()));
            out.push((rel, content.into_bytes()));
        }
    }
    let mark = format!(
        "# A students' copy of ddp-lab (coursegen students-copy): no solutions, no master.\n\
         # The checker reads this file; steps 0 to this one are released.\nthrough = {through}\n"
    );
    out.push((PathBuf::from(MARK), mark.into_bytes()));
    Ok(out)
}

/// The files git tracks in `root` and the untracked ones it does not ignore, sorted:
/// what a clone holds, and nothing built or installed (target/, .libtorch, .venv).
fn tracked_files(root: &Path) -> Result<BTreeSet<String>, CourseError> {
    let output = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .map_err(|source| CourseError::Io { path: root.to_path_buf(), source })?;
    if !output.status.success() {
        return Err(CourseError::CopyRefused {
            reason: format!(
                "`git ls-files` failed in {} ({}): make the copy from a git checkout of the course",
                root.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// The workspace manifest without the members a students' copy leaves out.
fn workspace_manifest(text: &str) -> Result<String, CourseError> {
    let refused = |reason: &str| CourseError::CopyRefused { reason: format!("Cargo.toml: {reason}") };
    let mut doc: DocumentMut = text.parse().map_err(|e| refused(&format!("not valid TOML: {e}")))?;
    let members = doc
        .get_mut("workspace")
        .and_then(|w| w.get_mut("members"))
        .and_then(|m| m.as_array_mut())
        .ok_or_else(|| refused("no [workspace] members"))?;
    members.retain(|m| {
        let m = m.as_str().unwrap_or_default();
        let dir = format!("{}/", m.trim_end_matches("/*"));
        !LEFT_OUT.iter().any(|(prefix, _)| dir.starts_with(prefix))
    });
    Ok(doc.to_string())
}

/// `page` without its folded parts "The code" (`<details>`, then [`CODE_SUMMARY`], up to
/// `</details>`), each replaced by [`WITHHELD`]. A `<details>` inside fenced code does not count.
pub fn withhold_code(page: &str) -> String {
    let mut out = String::new();
    let mut in_fence = false;
    let mut skipping = false;
    let mut lines = page.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let text = line.trim();
        if skipping {
            if text == "</details>" {
                skipping = false;
                out.push_str(WITHHELD);
                out.push('\n');
            }
            continue;
        }
        if text.starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && text == "<details>" && lines.peek().map(|l| l.trim()) == Some(CODE_SUMMARY) {
            skipping = true;
            continue;
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withholding_drops_the_code_part_only() {
        let page = "## What to change\n\nLook here.\n\n<details>\n<summary>Which API</summary>\n\n`f`\n\n\
                    </details>\n\n<details>\n<summary>The code</summary>\n\n```rust\nlet x = f();\n```\n\n\
                    </details>\n\n## Common mistakes\n";
        let out = withhold_code(page);
        assert!(!out.contains("let x = f()"), "{out}");
        assert!(out.contains("Which API") && out.contains("`f`") && out.contains("Look here."), "{out}");
        assert!(out.contains(WITHHELD) && out.ends_with("## Common mistakes\n"), "{out}");
        // Inside fenced code a `<details>` is an example, not a part.
        let fenced = "```html\n<details>\n<summary>The code</summary>\n</details>\n```\n";
        assert_eq!(withhold_code(fenced), fenced);
    }

    #[test]
    fn the_workspace_loses_the_members_left_out() {
        let manifest = "[workspace]\nmembers = [\"crates/labkit\", \"course/lab\", \"checker\", \"demo\", \
                        \"steps/*\", \"solutions/*\"]\n";
        let out = workspace_manifest(manifest).unwrap();
        assert!(
            out.contains("\"crates/labkit\"") && out.contains("\"checker\"") && out.contains("\"steps/*\""),
            "{out}"
        );
        assert!(!out.contains("course/lab") && !out.contains("solutions") && !out.contains("demo"), "{out}");
    }

    #[test]
    fn the_mark_names_the_last_step_released() {
        let dir = std::env::temp_dir().join(format!("students-copy-mark-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_mark(&dir), None);
        fs::write(dir.join(MARK), "# a comment\nthrough = 4\n").unwrap();
        assert_eq!(read_mark(&dir), Some(Mark { through: 4 }));
        fs::remove_dir_all(&dir).unwrap();
    }
}
