//! The links of a Markdown file that lives in the repository rather than in the book, such
//! as the README: GitHub and editors render them where they are, so
//!
//! - a relative link must name a file or folder of the repository (and stay inside it);
//! - a link into the guide's sources (`lab-guide/src/PAGE.md`) must name a page mdBook
//!   built, and its `#fragment` an `id` on that built page, since mdBook makes the ids
//!   that readers of the book land on;
//! - any other `#fragment` of a Markdown file (the file's own `#section` included) must
//!   name one of its headings, as GitHub makes their anchors.
//!
//! Links with a scheme (`https:` …) are not followed, as in the book. Code spans and
//! fenced code blocks hold no links.
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use crate::{html_name, ids_of, leaves_the_book, percent_decode};

/// Checks the links of the Markdown `file`, which lies under the repository `root`,
/// against the repository and against the book whose sources are `src` and whose HTML
/// mdBook wrote to `html`. One line per problem, naming the file, the line and what to
/// do; empty when every link resolves. Fails only when a file cannot be read.
///
/// ```no_run
/// use std::path::Path;
/// let problems = bookcheck::check_repository_file(
///     Path::new("README.md"),
///     Path::new("."),
///     Path::new("lab-guide/src"),
///     Path::new("target/book"),
/// )?;
/// assert!(problems.is_empty(), "{problems:#?}");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn check_repository_file(file: &Path, root: &Path, src: &Path, html: &Path) -> io::Result<Vec<String>> {
    let text = read(file)?;
    let root = canonical(root)?;
    let here = inside(&root, &canonical(file)?)
        .and_then(|f| f.parent().map(Path::to_path_buf))
        .ok_or_else(|| io::Error::other(format!("{} is not inside {}", file.display(), root.display())))?;
    let book_src = inside(&root, &canonical(src)?);
    let mut problems = Vec::new();
    for link in links(&text) {
        let at = format!("{}:{}: link \"{}\"", file.display(), link.line, link.target);
        if leaves_the_book(&link.target) {
            continue;
        }
        let (path, fragment) = match link.target.split_once('#') {
            Some((p, f)) => (p, Some(percent_decode(f))),
            None => (link.target.as_str(), None),
        };
        let path = percent_decode(path.split('?').next().unwrap_or_default());
        if path.is_empty() {
            if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
                if !github_anchors(&text).contains(&fragment) {
                    problems.push(format!(
                        "{at}: {} has no heading whose anchor is \"#{fragment}\"; link a heading that is there \
                         (its anchor is its text in lower case, spaces as '-', punctuation dropped)",
                        file.display()
                    ));
                }
            }
            continue;
        }
        let Some(target) = resolve(&here, &path) else {
            problems.push(format!("{at} points outside the repository; link a file inside it"));
            continue;
        };
        let on_disk = root.join(&target);
        if !on_disk.exists() {
            problems.push(format!(
                "{at}: {} does not exist; correct the link, or link the page where that text lives now",
                target.display()
            ));
            continue;
        }
        let page = book_src.as_ref().and_then(|s| target.strip_prefix(s).ok());
        match (page, fragment) {
            (Some(page), fragment) if page.extension().is_some_and(|e| e == "md") => {
                let page = page.to_string_lossy().replace('\\', "/");
                let built = html.join(html_name(&page));
                let Ok(built_text) = std::fs::read_to_string(&built) else {
                    problems.push(format!(
                        "{at}: the book has no page {} built from it; list {page} in SUMMARY.md and build the \
                         book (bash scripts/book.sh build)",
                        built.display()
                    ));
                    continue;
                };
                if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
                    if !ids_of(&built_text).contains(&fragment) {
                        problems.push(format!(
                            "{at}: {} has no heading or anchor with id \"{fragment}\"; link one that is there",
                            built.display()
                        ));
                    }
                }
            }
            // Another Markdown file of the repository, as GitHub shows it.
            (_, Some(fragment)) if !fragment.is_empty() && on_disk.extension().is_some_and(|e| e == "md") => {
                let anchors = github_anchors(&read(&on_disk)?);
                if !anchors.contains(&fragment) {
                    problems.push(format!(
                        "{at}: {} has no heading whose anchor is \"#{fragment}\"; link a heading that is there",
                        target.display()
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(problems)
}

/// A link's target and the line (from 1) where its `](` or reference definition is.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
}

/// Every inline link and image (`[text](target "title")`, `![alt](target)`) and every
/// reference definition (`[label]: target`) outside code.
fn links(markdown: &str) -> Vec<Link> {
    let prose = without_code(markdown);
    let mut out = Vec::new();
    let line_of = |at: usize| prose[..at].matches('\n').count() + 1;
    let mut from = 0;
    while let Some(i) = prose[from..].find("](") {
        let start = from + i + 2;
        let mut depth = 0usize;
        let mut end = prose.len();
        for (j, c) in prose[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = start + j;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inside = prose[start..end].trim();
        let target = inside
            .strip_prefix('<')
            .and_then(|t| t.split_once('>'))
            .map_or_else(|| inside.split_whitespace().next().unwrap_or_default(), |(t, _)| t);
        if !target.is_empty() {
            out.push(Link { line: line_of(start), target: target.to_string() });
        }
        from = end.min(prose.len()).max(start);
    }
    for (n, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') {
            continue;
        }
        if let Some((label, rest)) = trimmed[1..].split_once("]:") {
            if !label.is_empty() && !label.contains('[') {
                if let Some(target) = rest.split_whitespace().next() {
                    out.push(Link { line: n + 1, target: target.trim_matches(['<', '>']).to_string() });
                }
            }
        }
    }
    out
}

/// `markdown` with fenced code blocks and code spans blanked out (as spaces), its lines
/// kept where they were.
fn without_code(markdown: &str) -> String {
    blank_code_spans(&without_fences(markdown))
}

/// `markdown` with the lines of fenced code blocks emptied.
fn without_fences(markdown: &str) -> String {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match &fence {
            Some(open) => {
                if trimmed.starts_with(open.as_str())
                    && trimmed.trim_start_matches(open.as_str()).trim().is_empty()
                {
                    fence = None;
                }
                lines.push(String::new());
            }
            None => {
                let marker: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
                if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap_or('`')) {
                    fence = Some(marker);
                    lines.push(String::new());
                } else {
                    lines.push(line.to_string());
                }
            }
        }
    }
    lines.join("\n")
}

/// Code spans (a run of N backticks up to the next run of exactly N) replaced by spaces.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in code_spans(&chars) {
        out.extend(&chars[from..span.start]);
        out.extend(chars[span.clone()].iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
        from = span.end;
    }
    out.extend(&chars[from..]);
    out
}

/// Where the code spans of `chars` are, backticks included. A run of backticks with no
/// closing run of the same length is literal text.
fn code_spans(chars: &[char]) -> Vec<std::ops::Range<usize>> {
    let run_at = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let close = loop {
            if j >= chars.len() {
                break None;
            }
            if chars[j] == '`' {
                let m = run_at(j);
                if m == n {
                    break Some(j);
                }
                j += m;
            } else {
                j += 1;
            }
        };
        match close {
            Some(j) => {
                spans.push(i..j + n);
                i = j + n;
            }
            None => i += n,
        }
    }
    spans
}

/// The repository paths that the code spans of the Markdown `file` name and that are not
/// there: a span that is a path (letters, digits, `_.-`, at least one `/`) beginning with
/// a folder of `root` (not a hidden one, not `target`), read from `root`. Placeholders
/// (`step_NN`) are skipped. One line per missing path, naming the file and line.
pub fn missing_paths_in_code_spans(file: &Path, root: &Path) -> io::Result<Vec<String>> {
    let text = without_fences(&read(file)?);
    let chars: Vec<char> = text.chars().collect();
    let mut problems = Vec::new();
    for span in code_spans(&chars) {
        let inner: String = chars[span.clone()].iter().collect();
        let path = inner.trim_matches('`').trim();
        let top = path.split('/').next().unwrap_or_default();
        let path_like = path.contains('/')
            && path.chars().all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
            && !path.contains("NN");
        if !path_like || top.is_empty() || top.starts_with('.') || top == "target" || !root.join(top).is_dir()
        {
            continue;
        }
        if !root.join(path).exists() {
            let line = chars[..span.start].iter().filter(|&&c| c == '\n').count() + 1;
            problems.push(format!(
                "{}:{line}: `{path}` is not in the repository; name the file where it is now",
                file.display()
            ));
        }
    }
    Ok(problems)
}

/// The anchors GitHub gives the ATX headings of a Markdown file: the text in lower case,
/// spaces as `-`, everything but letters, digits, `-` and `_` dropped; a repeated anchor
/// gets `-1`, `-2` … .
fn github_anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in without_fences(markdown).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with([' ', '\t']) {
            continue;
        }
        let text = line[hashes..].trim().trim_end_matches('#').trim();
        let base = github_slug(text);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    anchors
}

fn github_slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `path` (relative to the directory `here`, itself relative to the repository root)
/// as a path relative to the root; `None` when it climbs out of the root.
fn resolve(here: &Path, path: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = if path.starts_with('/') {
        Vec::new()
    } else {
        here.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect()
    };
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s.to_string()),
        }
    }
    Some(parts.iter().collect())
}

/// `path` relative to `root`, when it lies inside it.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    path.strip_prefix(root).ok().map(Path::to_path_buf)
}

fn canonical(path: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn read(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_outside_code_with_their_lines() {
        let md = "# T\n\nSee [a](a.md#x) and ![f](f.svg \"title\").\n`[not](code.md)` and\n\
                  ```sh\n[not](fenced.md)\n```\n[multi\nline](b/) [p](w(1).md)\n[ref]: <c.md>\n";
        let found = links(md);
        let found: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
        assert_eq!(found, [(3, "a.md#x"), (3, "f.svg"), (9, "b/"), (9, "w(1).md"), (10, "c.md")]);
    }

    #[test]
    fn code_span_paths_that_are_not_there() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("tools/a/src")).unwrap();
        std::fs::write(root.path().join("tools/a/src/lib.rs"), "").unwrap();
        let page = root.path().join("page.md");
        std::fs::write(
            &page,
            "`tools/a/src/lib.rs`, `tools/a/` and `tools/b/src`\n```\n`tools/fenced/x`\n```\n\
             `tools/step_NN` `cargo run -p a` `src/nowhere.rs` `other/x.rs` ``tools/c``\n",
        )
        .unwrap();
        let found = missing_paths_in_code_spans(&page, root.path()).unwrap();
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].ends_with(":1: `tools/b/src` is not in the repository; name the file where it is now")
        );
        assert!(found[1].contains(":5: `tools/c`"), "{found:#?}");
    }

    #[test]
    fn github_anchors_of_headings() {
        let md = "# ddp-lab\n## For students\n## `tch-distributed`: `torch.distributed` for tch\n\
                  ## For students\n```\n# not a heading\n```\n#nospace\n";
        let anchors: Vec<String> = github_anchors(md).into_iter().collect();
        assert_eq!(
            anchors,
            ["ddp-lab", "for-students", "for-students-1", "tch-distributed-torchdistributed-for-tch"]
        );
    }

    #[test]
    fn relative_paths_stay_in_the_repository() {
        assert_eq!(resolve(Path::new(""), "lab-guide/src/a.md"), Some(PathBuf::from("lab-guide/src/a.md")));
        assert_eq!(resolve(Path::new("data"), "../README.md"), Some(PathBuf::from("README.md")));
        assert_eq!(resolve(Path::new("data"), "./x/"), Some(PathBuf::from("data/x")));
        assert_eq!(resolve(Path::new(""), "../outside.md"), None);
    }
}
