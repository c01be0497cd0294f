//! Hints from the lab guide: the guide is the one place the help is written, so the
//! checker quotes it rather than keeping a second copy that could drift.
use std::path::{Path, PathBuf};

use coursegen::{CourseError, Version};

/// Everything that can go wrong quoting the guide. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HintError {
    /// Not one of the lab's steps (coursegen knows which there are).
    #[error(transparent)]
    NoSuchStep(CourseError),
    #[error(
        "cannot read the lab guide page {} ({source}); run the checker from the repository root, \
         or restore the page with `git checkout -- {}`",
        path.display(), path.display()
    )]
    GuideMissing { path: PathBuf, source: std::io::Error },
    #[error(
        "{} has no section \"{section}\"; restore the page with `git checkout -- {}`, \
         or read it directly",
        path.display(), path.display()
    )]
    SectionMissing { path: PathBuf, section: &'static str },
}

/// `step` itself, or [`HintError::NoSuchStep`] if the lab has no such step.
fn lab_step(step: u8) -> Result<u8, HintError> {
    Version::Starter(step).validate().map(Version::step).map_err(HintError::NoSuchStep)
}

const WHAT_TO_CHANGE: &str = "## What to change";
const COMMON_MISTAKES: &str = "## Common mistakes";
const CHECKER_WILL_TEST: &str = "## What the checker will test";

/// The guide page of `step`, relative to the repository root.
pub fn guide_page(step: u8) -> PathBuf {
    PathBuf::from(format!("lab-guide/src/steps/step-{step:02}.md"))
}

/// Where `scripts/book.sh build` puts the lab guide as a book (HTML), relative to the
/// repository root: `lab-guide/book.toml`'s `build-dir`.
pub const BOOK_DIR: &str = "target/book";

/// The page of `step` in the built book, relative to the repository root, at its
/// section "What the checker will test": `target/book/steps/step-07.html#what-…`.
pub fn book_page(step: u8) -> String {
    format!("{BOOK_DIR}/steps/step-{step:02}.html#{}", heading_id(CHECKER_WILL_TEST))
}

/// Where a failed check's report sends the student: a place that exists. The page of
/// `step` in the built book ([`book_page`]) when `repo_root` has it; else the page's
/// Markdown source at the line that names `check` under "What the checker will test"
/// (`lab-guide/src/steps/step-07.md:88`, which editors and terminals open at that line),
/// or at that section's heading, or the page itself.
pub fn book_location(repo_root: &Path, step: u8, check: Option<&str>) -> String {
    let page = book_page(step);
    let file = page.split('#').next().unwrap_or_default();
    if repo_root.join(file).is_file() {
        return page;
    }
    let source = guide_page(step);
    let text = std::fs::read_to_string(repo_root.join(&source)).unwrap_or_default();
    match source_line(&text, check) {
        Some(line) => format!("{}:{line}", source.display()),
        None => source.display().to_string(),
    }
}

/// The 1-based line of `page` where the bullet naming `check` (in backticks) begins
/// under "What the checker will test", else that section's heading line.
fn source_line(page: &str, check: Option<&str>) -> Option<usize> {
    let lines: Vec<&str> = page.lines().collect();
    let heading = lines.iter().position(|l| l.trim_end() == CHECKER_WILL_TEST)?;
    let needle = check.map(|id| format!("`{id}`"));
    let mut bullet = None;
    for (i, line) in lines.iter().enumerate().skip(heading + 1) {
        if is_section_break(line.trim_end()) {
            break;
        }
        if line.starts_with("- ") || line.starts_with("* ") {
            bullet = Some(i);
        }
        if let (Some(needle), Some(start)) = (&needle, bullet) {
            if line.contains(needle.as_str()) {
                return Some(start + 1);
            }
        }
        if line.trim().is_empty() {
            bullet = None;
        }
    }
    Some(heading + 1)
}

/// The id mdBook gives a Markdown heading: its text in lower case, each space a `-`,
/// punctuation dropped (`## What the checker will test` -> `what-the-checker-will-test`).
fn heading_id(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The help for a student stuck on `step`: the sections "What to change" and "Common
/// mistakes" of its guide page (headings kept), then a line pointing at the full page.
pub fn hint(repo_root: &Path, step: u8) -> Result<String, HintError> {
    let step = lab_step(step)?;
    let rel = guide_page(step);
    let page = read_page(repo_root, &rel)?;
    let mut out = String::new();
    for heading in [WHAT_TO_CHANGE, COMMON_MISTAKES] {
        let body = section(&page, heading)
            .ok_or_else(|| HintError::SectionMissing { path: rel.clone(), section: heading })?;
        out.push_str(heading);
        out.push_str("\n\n");
        out.push_str(body.trim());
        out.push_str("\n\n");
    }
    out.push_str(&format!("Full page: {}", rel.display()));
    Ok(out)
}

/// What the guide says the checker tests under `check_id`: the bullet of "What the
/// checker will test" that names it in backticks (e.g. `` `sampler-disjoint` ``), its
/// lines joined into one. `None` when the page, the section or such a bullet is missing:
/// the caller then simply shows no extra help.
pub fn check_hint_for(repo_root: &Path, step: u8, check_id: &str) -> Option<String> {
    let page = std::fs::read_to_string(repo_root.join(guide_page(lab_step(step).ok()?))).ok()?;
    let needle = format!("`{check_id}`");
    bullets(section(&page, CHECKER_WILL_TEST)?).into_iter().find(|b| b.contains(&needle))
}

fn read_page(repo_root: &Path, rel: &Path) -> Result<String, HintError> {
    std::fs::read_to_string(repo_root.join(rel))
        .map_err(|source| HintError::GuideMissing { path: rel.to_path_buf(), source })
}

/// The text under `heading` up to the next heading of the same or a higher level,
/// untrimmed. Lines inside fenced code blocks never count as headings, since a code
/// sample may well contain a `## ` line (a shell comment, say).
fn section<'a>(page: &'a str, heading: &str) -> Option<&'a str> {
    let mut start = None;
    let mut in_fence = false;
    let mut offset = 0;
    for line in page.split_inclusive('\n') {
        let text = line.trim_end();
        if text.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && is_section_break(text) {
            match start {
                Some(s) => return Some(&page[s..offset]),
                None if text == heading => start = Some(offset + line.len()),
                None => {}
            }
        }
        offset += line.len();
    }
    start.map(|s| &page[s..])
}

/// A heading of level 1 or 2: these end a `## ` section; `### ` subsections do not.
fn is_section_break(line: &str) -> bool {
    line.starts_with("# ") || line.starts_with("## ") || line == "#" || line == "##"
}

/// The top-level `- ` bullets of a section, each with its continuation lines joined by
/// single spaces and the marker removed.
fn bullets(section: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) {
            out.push(rest.trim().to_string());
            open = true;
        } else if line.trim().is_empty() || !line.starts_with([' ', '\t']) {
            // A blank line or unindented text (a closing paragraph) ends the bullet.
            open = false;
        } else if open {
            let last = out.last_mut().expect("a bullet is open");
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# Step 9: title\n\n## What to change\n\nDo this.\n\n```sh\n## not a heading\n```\n\n\
        ### Detail\n\nStill here.\n\n## What the checker will test\n\n- Metrics averaged \
        (`metrics-avg`), over\n  all ranks.\n- Another `other-check`.\n\nBy hand: `metrics-avg` too.\n\n\
        ## Common mistakes\n\n- Averaging twice.\n";

    #[test]
    fn a_checks_line_is_its_bullets_first_line() {
        // The section's heading is line 15; the bullet of `metrics-avg` begins on line
        // 17 (it goes on over line 18), `other-check`'s on 19.
        assert_eq!(source_line(PAGE, Some("metrics-avg")), Some(17));
        assert_eq!(source_line(PAGE, Some("other-check")), Some(19));
        // A check no bullet names (`builds`): the section's heading.
        assert_eq!(source_line(PAGE, Some("builds")), Some(15));
        assert_eq!(source_line(PAGE, None), Some(15));
        assert_eq!(source_line("# no such section\n", None), None);
    }

    #[test]
    fn heading_ids_are_mdbooks() {
        assert_eq!(heading_id(CHECKER_WILL_TEST), "what-the-checker-will-test");
        assert_eq!(heading_id("## Step 6: `set_epoch`, again!"), "step-6-set_epoch-again");
    }

    #[test]
    fn section_spans_code_blocks_and_subsections() {
        let body = section(PAGE, WHAT_TO_CHANGE).unwrap();
        assert!(body.contains("## not a heading"), "{body}");
        assert!(body.contains("Still here."), "{body}");
        assert!(!body.contains("checker will test"), "{body}");
        assert_eq!(section(PAGE, COMMON_MISTAKES).unwrap().trim(), "- Averaging twice.");
        assert_eq!(section(PAGE, "## Nope"), None);
    }

    #[test]
    fn bullets_join_continuation_lines_and_stop_at_paragraphs() {
        let b = bullets(section(PAGE, CHECKER_WILL_TEST).unwrap());
        assert_eq!(b, ["Metrics averaged (`metrics-avg`), over all ranks.", "Another `other-check`."]);
    }
}
