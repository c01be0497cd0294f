//! Hints from the lab guide: the guide is the one place the help is written, so the
//! checker quotes it rather than keeping a second copy that could drift.
use std::path::{Path, PathBuf};

use lab_course::{guide_page, page_in_book, CourseError, Version};

/// Everything that can go wrong quoting the guide. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HintError {
    /// Not one of the lab's steps (lab-course knows which there are).
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
    #[error(
        "{}: its \"What to change\" has no folded part `<details>` + `{summary}`; restore the \
         page with `git checkout -- {}`, or read it directly",
        path.display(), path.display()
    )]
    PartMissing { path: PathBuf, summary: &'static str },
}

/// `step` itself, or [`HintError::NoSuchStep`] if the lab has no such step.
fn lab_step(step: u8) -> Result<u8, HintError> {
    Version::Starter(step).validate().map(Version::step).map_err(HintError::NoSuchStep)
}

const WHAT_TO_CHANGE: &str = "## What to change";
const COMMON_MISTAKES: &str = "## Common mistakes";
const CHECKER_WILL_TEST: &str = "## What the checker will test";

/// Where `scripts/book.sh build` puts the lab guide as a book (HTML), relative to the
/// repository root: `lab-guide/book.toml`'s `build-dir`.
pub const BOOK_DIR: &str = "target/book";

/// The page of `step` in the built book, relative to the repository root, at its
/// section "What the checker will test": `target/book/steps/step-07.html#what-…`.
pub fn book_page(step: u8) -> String {
    let html = Path::new(BOOK_DIR).join(page_in_book(step).with_extension("html"));
    format!("{}#{}", html.display(), heading_id(CHECKER_WILL_TEST))
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

/// How much a hint gives away. A student asks for each in turn: what to look at first,
/// then which functions, and the code only when they ask for the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// "What to change" up to its folded parts (where the TODOs are, the idea), and
    /// "Common mistakes".
    Look = 1,
    /// Also the part "Which API": the functions and types to use, PyTorch's names beside.
    Api = 2,
    /// Also the part "The code": the answer.
    Answer = 3,
}

impl Level {
    /// The level numbered `n` (1 to 3), as `--level` takes it.
    pub fn from_number(n: u8) -> Option<Level> {
        [Level::Look, Level::Api, Level::Answer].into_iter().find(|l| *l as u8 == n)
    }

    fn title(self) -> &'static str {
        match self {
            Level::Look => "what to look at",
            Level::Api => "which API",
            Level::Answer => "the answer",
        }
    }
}

/// The number of levels, as the hint's first line counts them.
pub const LEVELS: u8 = Level::Answer as u8;

/// The `<summary>` lines of the folded parts of "What to change" (mdBook shows a
/// `<details>` block folded, so the page's first read stops before them): the API (hint
/// level 2) and the code (level 3, the answer, which a students' copy leaves out).
pub use lab_course::students_copy::{API_SUMMARY, CODE_SUMMARY};

/// The parts of a step page's "What to change": the text before its folded parts, and
/// the folded parts' bodies (without their `<details>`, `<summary>` and `</details>` lines).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct WhatToChange<'a> {
    pub lead: &'a str,
    pub api: Option<&'a str>,
    pub code: Option<&'a str>,
}

/// Splits "What to change" into its lead and its `<details>` parts, named by their
/// `<summary>` lines ([`API_SUMMARY`], [`CODE_SUMMARY`]); other folded parts stay in the
/// lead. `<details>` lines inside fenced code do not count.
pub fn split_what_to_change(section: &str) -> WhatToChange<'_> {
    let mut parts = WhatToChange::default();
    let mut lead_end = None;
    let mut in_fence = false;
    let mut open: Option<(usize, &str)> = None; // where the part's body starts, its summary
    let mut offset = 0;
    let mut lines = section.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let text = line.trim();
        let here = offset;
        offset += line.len();
        if text.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if text == "<details>" && open.is_none() {
            let summary = lines.peek().map(|l| l.trim()).unwrap_or_default();
            if summary == API_SUMMARY || summary == CODE_SUMMARY {
                let summary_line = lines.next().expect("peeked");
                lead_end.get_or_insert(here);
                open = Some((
                    offset + summary_line.len(),
                    if summary == API_SUMMARY { API_SUMMARY } else { CODE_SUMMARY },
                ));
                offset += summary_line.len();
            }
        } else if text == "</details>" {
            if let Some((start, summary)) = open.take() {
                let body = &section[start..here];
                if summary == API_SUMMARY {
                    parts.api = Some(body);
                } else {
                    parts.code = Some(body);
                }
            }
        }
    }
    parts.lead = &section[..lead_end.unwrap_or(section.len())];
    parts
}

/// The help for a student stuck on `step`, at `level`: the lead of its guide page's
/// "What to change" (and at level 2 its part "Which API", at level 3 its part "The
/// code" too), then "Common mistakes", then how to ask for more and where the full page is.
/// In a students' copy, which leaves the code out, level 3 says the answers are with the
/// instructor.
pub fn hint(repo_root: &Path, step: u8, level: Level) -> Result<String, HintError> {
    let step = lab_step(step)?;
    let rel = guide_page(step);
    let page = read_page(repo_root, &rel)?;
    let get = |heading: &'static str| {
        section(&page, heading)
            .ok_or_else(|| HintError::SectionMissing { path: rel.clone(), section: heading })
    };
    let change = split_what_to_change(get(WHAT_TO_CHANGE)?);
    let mistakes = get(COMMON_MISTAKES)?;
    let part = |body: Option<&'_ str>, summary: &'static str| -> Result<String, HintError> {
        body.map(str::to_string).ok_or_else(|| HintError::PartMissing { path: rel.clone(), summary })
    };
    let mut out = format!("Step {step}, hint {} of {LEVELS}: {}\n\n", level as u8, level.title());
    out.push_str(&format!("{WHAT_TO_CHANGE}\n\n{}\n\n", change.lead.trim()));
    if level >= Level::Api {
        out.push_str(&format!("### Which API\n\n{}\n\n", part(change.api, API_SUMMARY)?.trim()));
    }
    if level >= Level::Answer {
        match (change.code, lab_course::students_copy::read_mark(repo_root)) {
            (Some(code), _) => out.push_str(&format!("### The code\n\n{}\n\n", code.trim())),
            (None, Some(_)) => out.push_str(
                "### The code\n\nThis copy of the lab leaves the answers out: they are with your \
                 instructor. Ask them, or a classmate who has finished the step, to look at your code with you.\n\n",
            ),
            (None, None) => return Err(HintError::PartMissing { path: rel.clone(), summary: CODE_SUMMARY }),
        }
    }
    out.push_str(&format!("{COMMON_MISTAKES}\n\n{}\n\n", without_comments(mistakes).trim()));
    match level {
        Level::Look => out.push_str(&format!(
            "Still stuck? `cargo checker hint step {step} --level 2` names the functions to use; \
             `--answer` shows the code.\n"
        )),
        Level::Api => out.push_str(&format!(
            "Still stuck? `cargo checker hint step {step} --answer` shows the code (the answer).\n"
        )),
        Level::Answer => {}
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

/// `text` without its HTML comments: the step pages tie each common mistake to its
/// broken variant in one (`<!-- variant: … -->`), which the book hides and the hint must
/// too. The space before a comment goes with it.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(rest[..start].trim_end_matches([' ', '\t']));
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
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
    fn the_variant_markers_are_left_out_of_what_is_quoted() {
        let text = "- Forgetting `set_epoch`: the same order. <!-- variant: no-set-epoch -->\n- Two\n  lines <!-- variant: a,\n b -->\n";
        assert_eq!(without_comments(text), "- Forgetting `set_epoch`: the same order.\n- Two\n  lines\n");
        assert_eq!(without_comments("no comment"), "no comment");
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
