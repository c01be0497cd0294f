//! `coursegen new-step`: the files a new step needs, scaffolded, so that adding a step
//! is this command and then an edit of what is new.
//!
//! Step N (one after [`LAST_STEP`]) gets its title in [`STEPS`], a block in the master
//! with the starter's `TODO Step N`, a checks module declaring the step (no gains, no
//! runs of its own, one check with its id, not judged yet: it fails until it is
//! written), its line in the checks' registry (and its `mod` line), a guide page with the check's bullet, a line in the guide's SUMMARY and a row
//! in the checker page's table of checks. Every edit is planned before any file is
//! written: a step already (partly) there, or a file without the line an edit goes
//! next to, leaves the tree as it was.
use std::fs;
use std::path::{Path, PathBuf};

use lab_course::{page_in_book, Version, LAST_STEP, MASTER, STEPS};

/// The files `new-step` edits, relative to the repository root (it creates two more:
/// [`checks_module`] and [`guide_page`]).
pub const LIB: &str = "crates/lab-course/src/lib.rs";
pub const REGISTRY: &str = "checker/src/checks/mod.rs";
pub const SUMMARY: &str = "lab-guide/src/SUMMARY.md";
pub const CHECKER_PAGE: &str = "lab-guide/src/checker.md";

/// The checks module of `step`, e.g. `checker/src/checks/step_15.rs`.
pub fn checks_module(step: u8) -> PathBuf {
    PathBuf::from(format!("checker/src/checks/step_{step:02}.rs"))
}

pub use lab_course::guide_page;

/// Why `new-step` wrote nothing. The messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum NewStepError {
    #[error(
        "the title {0:?} cannot be used: give one line of text, without `//`, `{{{{` or a \
         backquote (it goes into Rust comments, strings and Markdown)"
    )]
    BadTitle(String),
    #[error(
        "the check id {0:?} cannot be used: write it as the checks' ids are, lowercase words \
         joined by `-` (e.g. `sharded-memory`), starting with a letter; pass one with --check"
    )]
    BadCheckId(String),
    #[error("the check id `{id}` is already {}'s; pass another with --check", module.display())]
    CheckIdTaken { id: String, module: PathBuf },
    #[error("step {step} is already (partly) there: {what}; nothing was written")]
    Exists { step: u8, what: String },
    #[error(
        "{}: {anchor} not found, so the step's line cannot go next to it; nothing was written",
        path.display()
    )]
    AnchorMissing { path: PathBuf, anchor: String },
    #[error(
        "{LIB}'s STEPS lists {found} steps, but this coursegen was built with {built}: rebuild \
         it from that tree (`cargo run -p coursegen -- new-step ...` does) and run it again"
    )]
    OutOfStep { found: usize, built: usize },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// One file `new-step` writes: its path relative to the root, whether it is new, and
/// its whole content afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: PathBuf,
    pub created: bool,
    pub content: String,
}

/// The step `new-step` adds: the one after the last.
pub fn next_step() -> u8 {
    LAST_STEP + 1
}

/// The check id made from a title: its words, lowercase, joined by `-`.
pub fn check_id_from(title: &str) -> String {
    let lower = title.to_lowercase();
    lower.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect::<Vec<_>>().join("-")
}

/// Every file change for step [`next_step`] titled `title`, its check `check_id` (made
/// from the title when `None`), computed from the files under `root`; nothing is written.
pub fn plan(root: &Path, title: &str, check_id: Option<&str>) -> Result<Vec<FileChange>, NewStepError> {
    let title = title.trim();
    if title.is_empty() || title.contains(['\n', '\r', '`']) || title.contains("//") || title.contains("{{") {
        return Err(NewStepError::BadTitle(title.to_string()));
    }
    let id = check_id.map_or_else(|| check_id_from(title), str::to_string);
    let id_is_good = id.starts_with(|c: char| c.is_ascii_lowercase())
        && id
            .split('-')
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    if !id_is_good {
        return Err(NewStepError::BadCheckId(id));
    }
    let step = next_step();
    let last = LAST_STEP;
    let new = Scaffold { step, title, id: &id };

    // Whatever of the step is there already, before anything else: a step half
    // scaffolded is named as such, not as a tree coursegen was not built from.
    for path in [checks_module(step), guide_page(step)] {
        if root.join(&path).exists() {
            return Err(NewStepError::Exists { step, what: format!("{} exists", path.display()) });
        }
    }
    let (lib, master, registry, summary, checker_page) = (
        Text::read(root, LIB)?,
        Text::read(root, MASTER)?,
        Text::read(root, REGISTRY)?,
        Text::read(root, SUMMARY)?,
        Text::read(root, CHECKER_PAGE)?,
    );
    let opener = format!("//@ step {step}");
    let page_link = format!("({})", page_in_book(step).display());
    let row = |n: u8| format!("| {n} |");
    let there = [
        (master.has_line(&opener), format!("{MASTER} has a `{opener}` block")),
        (
            registry.has_line(&format!("pub mod step_{step:02};")),
            format!("{REGISTRY} has `pub mod step_{step:02};`"),
        ),
        (
            registry.has_line(&format!("&step_{step:02}::STEP,")),
            format!("{REGISTRY}'s registry has `&step_{step:02}::STEP`"),
        ),
        (summary.text.contains(&page_link), format!("{SUMMARY} links to {page_link}")),
        (
            checker_page.text.lines().any(|l| l.starts_with(&row(step))),
            format!("{CHECKER_PAGE}'s table has a row `{} ...`", row(step)),
        ),
    ];
    if let Some((_, what)) = there.into_iter().find(|(there, _)| *there) {
        return Err(NewStepError::Exists { step, what });
    }
    // Each check's id is a constant of its step's module.
    for old in 0..step {
        let module = checks_module(old);
        let full = root.join(&module);
        let text = fs::read_to_string(&full).map_err(|source| NewStepError::Io { path: full, source })?;
        if text.contains(&format!("&str = {id:?};")) {
            return Err(NewStepError::CheckIdTaken { id, module });
        }
    }
    let found = lib.steps_listed()?;
    if found != STEPS.len() {
        return Err(NewStepError::OutOfStep { found, built: STEPS.len() });
    }

    let lib = lib.insert_before_end_of("pub const STEPS: &[&str] = &[", "];", &format!("    {title:?},"))?;
    let master = master.append(&new.master_block());
    let registry = registry
        .insert_after_line(&format!("pub mod step_{last:02};"), &format!("pub mod step_{step:02};"))?
        .insert_after_line(&format!("&step_{last:02}::STEP,"), &format!("    &step_{step:02}::STEP,"))?;
    let summary = summary.insert_after_line_containing(
        &format!("({})", page_in_book(last).display()),
        &format!("- [Step {step}: {title}]{page_link}"),
    )?;
    let checker_page = checker_page
        .insert_after_line_starting(&row(last), &format!("{} `{id}` (not judged yet) |", row(step)))?;

    let mut changes = vec![
        FileChange { path: checks_module(step), created: true, content: new.checks_module() },
        FileChange { path: guide_page(step), created: true, content: new.guide_page() },
    ];
    for edited in [lib, master, registry, summary, checker_page] {
        changes.push(FileChange { path: PathBuf::from(edited.path), created: false, content: edited.text });
    }
    Ok(changes)
}

/// Writes the planned changes, each file replaced whole through a temporary file.
pub fn write(root: &Path, changes: &[FileChange]) -> Result<(), NewStepError> {
    for change in changes {
        let path = root.join(&change.path);
        let io = |source| NewStepError::Io { path: path.clone(), source };
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        atomic_file::write_atomically(&path, &change.content).map_err(io)?;
    }
    Ok(())
}

/// A file being edited: its path from the root and its text so far.
struct Text {
    path: &'static str,
    text: String,
}

impl Text {
    fn read(root: &Path, path: &'static str) -> Result<Text, NewStepError> {
        let full = root.join(path);
        let text = fs::read_to_string(&full).map_err(|source| NewStepError::Io { path: full, source })?;
        Ok(Text { path, text })
    }

    /// Whether a line of the file is `line`, trimmed.
    fn has_line(&self, line: &str) -> bool {
        self.text.lines().any(|l| l.trim() == line)
    }

    fn missing(&self, anchor: String) -> NewStepError {
        NewStepError::AnchorMissing { path: PathBuf::from(self.path), anchor }
    }

    /// The number of titles in the `STEPS` table (one quoted string a line).
    fn steps_listed(&self) -> Result<usize, NewStepError> {
        let (open, close) = self.block("pub const STEPS: &[&str] = &[", "];")?;
        Ok(self
            .text
            .lines()
            .skip(open + 1)
            .take(close - open - 1)
            .filter(|l| l.trim().starts_with('"'))
            .count())
    }

    /// The line numbers (from 0) of the line that is `opener` and of the first line
    /// after it that is `closer`, both trimmed.
    fn block(&self, opener: &str, closer: &str) -> Result<(usize, usize), NewStepError> {
        let lines: Vec<&str> = self.text.lines().collect();
        let open = lines
            .iter()
            .position(|l| l.trim() == opener)
            .ok_or_else(|| self.missing(format!("the line `{opener}`")))?;
        let close = lines[open..]
            .iter()
            .position(|l| l.trim() == closer)
            .ok_or_else(|| self.missing(format!("the `{closer}` that closes `{opener}`")))?;
        Ok((open, open + close))
    }

    /// `line` inserted before line `at` (from 0).
    fn insert_at(self, at: usize, line: &str) -> Text {
        let mut lines: Vec<&str> = self.text.lines().collect();
        lines.insert(at, line);
        let mut text = lines.join("\n");
        if self.text.ends_with('\n') {
            text.push('\n');
        }
        Text { path: self.path, text }
    }

    /// `line` as the last line inside `opener` ... `closer`.
    fn insert_before_end_of(self, opener: &str, closer: &str, line: &str) -> Result<Text, NewStepError> {
        let (_, close) = self.block(opener, closer)?;
        Ok(self.insert_at(close, line))
    }

    fn insert_after(
        self,
        anchor: String,
        is_it: impl Fn(&str) -> bool,
        line: &str,
    ) -> Result<Text, NewStepError> {
        let at = self.text.lines().position(is_it).ok_or_else(|| self.missing(anchor))?;
        Ok(self.insert_at(at + 1, line))
    }

    /// `line` after the line that is `anchor`, trimmed.
    fn insert_after_line(self, anchor: &str, line: &str) -> Result<Text, NewStepError> {
        self.insert_after(format!("the line `{anchor}`"), |l| l.trim() == anchor, line)
    }

    fn insert_after_line_containing(self, anchor: &str, line: &str) -> Result<Text, NewStepError> {
        self.insert_after(format!("a line with `{anchor}`"), |l| l.contains(anchor), line)
    }

    fn insert_after_line_starting(self, anchor: &str, line: &str) -> Result<Text, NewStepError> {
        self.insert_after(format!("a line starting `{anchor}`"), |l| l.starts_with(anchor), line)
    }

    /// `block` after the last line.
    fn append(mut self, block: &str) -> Text {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
        self.text.push_str(block);
        self
    }
}

/// What the new files say about the step.
struct Scaffold<'a> {
    step: u8,
    title: &'a str,
    id: &'a str,
}

impl Scaffold<'_> {
    /// `sharded-memory` as its step's module spells its constant: `SHARDED_MEMORY`.
    fn id_const(&self) -> String {
        self.id.to_uppercase().replace('-', "_")
    }

    /// The master's block: a comment where the code will be, the starter's TODO.
    fn master_block(&self) -> String {
        let Scaffold { step, title, .. } = self;
        format!(
            "//@ step {step}\n\
             // Step {step} ({title}): its code goes here, or in blocks of step {step} where it\n\
             // changes the lab.\n\
             //@ todo\n\
             //| // TODO Step {step}: {title}.\n\
             //@ end\n"
        )
    }

    fn checks_module(&self) -> String {
        let Scaffold { step, title, id } = self;
        // A template file, not Rust source: its `use crate::…` lines belong to the
        // checker, and the module graph reads every `.rs` file of this crate as its own.
        include_str!("../templates/step_checks.rs.in")
            .replace("@STEP02@", &format!("{step:02}"))
            .replace("@STEP@", &step.to_string())
            .replace("@TITLE@", title)
            .replace("@ID_CONST@", &self.id_const())
            .replace("@ID@", id)
    }

    fn guide_page(&self) -> String {
        let Scaffold { step, title, id } = self;
        let starter = Version::Starter(*step).crate_dir();
        let starter = starter.display();
        format!(
            "# Step {step}: {title}

## Goal

TODO (author): what the program does after this step that it did not before.

## What to change

Look for the `TODO Step {step}` comments in `{starter}`.

TODO (author): where to look and the idea, in words: no line of the step's code here
(`cargo checker hint step {step}` shows this first).

<details>
<summary>Which API</summary>

TODO (author): the functions and types to use, PyTorch's names beside ours.

</details>

<details>
<summary>The code</summary>

TODO (author): the change, as step {step}'s blocks in `course/lab/main.rs` make it.

</details>

## What the checker will test

```sh
cargo checker verify step {step}
```

- `{id}`: not judged yet. TODO (author): what it looks at, and what it expects.

## Common mistakes

- TODO (author): a mistake, and the check that fails on it; the comment names its
  broken variant (checker/tests/common/variants.rs), recorded failing that check.
  <!-- variant: NAME -->
"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_ids_are_the_titles_words() {
        assert_eq!(check_id_from("Tensor parallelism (TP)"), "tensor-parallelism-tp");
        assert_eq!(check_id_from("  the --fsdp option "), "the-fsdp-option");
    }

    /// The master's block parses and renders as every block does: the starter of its
    /// step shows the TODO, the solution the comment, and nothing of the markers is left.
    /// (Shown as the last step's, since this coursegen knows no step after it.)
    #[test]
    fn the_masters_block_renders() {
        let block = Scaffold { step: LAST_STEP, title: "Tensor parallelism", id: "x" }.master_block();
        let master = format!("fn main() {{}}\n{block}");
        let starter = lab_course::render_main(&master, lab_course::Version::Starter(LAST_STEP)).unwrap();
        assert!(starter.contains(&format!("// TODO Step {LAST_STEP}: Tensor parallelism.")), "{starter}");
        let solution = lab_course::render_main(&master, lab_course::Version::Solution(LAST_STEP)).unwrap();
        assert!(solution.contains(&format!("// Step {LAST_STEP} (Tensor parallelism): its code goes here")));
        assert!(!solution.contains("TODO"), "{solution}");
    }

    #[test]
    fn lines_go_next_to_their_anchor_and_the_last_newline_stays() {
        let text = Text { path: "f", text: "a\n[\n  x\n]\nb\n".into() };
        let text = text.insert_before_end_of("[", "]", "  y").unwrap();
        assert_eq!(text.text, "a\n[\n  x\n  y\n]\nb\n");
        let text = text.insert_after_line("b", "c").unwrap();
        assert_eq!(text.text, "a\n[\n  x\n  y\n]\nb\nc\n");
        let e = text.insert_after_line("z", "w").err().unwrap();
        assert_eq!(
            e.to_string(),
            "f: the line `z` not found, so the step's line cannot go next to it; nothing was written"
        );
    }
}
