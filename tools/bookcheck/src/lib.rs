//! Checks the lab guide as mdBook built it, so that a broken book fails the tests
//! rather than a reader:
//!
//! - every Markdown page of the source is listed in `SUMMARY.md` (mdBook silently
//!   leaves out a page that is not), and every page listed there exists and was built;
//! - every link and image of every built HTML page that stays inside the book
//!   resolves: the file exists, and a `#fragment` names an `id` of the target page;
//! - every image of the source is shown by some page (a figure nobody sees is stale);
//! - the search index was built.
//!
//! [`check_repository_file`] checks the links of a Markdown file outside the book (the
//! README) into the repository and into the built book.
//!
//! Links that leave the book (`https:`, `mailto:` …) are not followed: the check runs
//! offline. The HTML is mdBook's own, so a small scanner is enough: attribute values are
//! always double-quoted, and text never holds a raw `"` (it is escaped as `&quot;`).
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

mod repository;

pub use repository::{check_repository_file, missing_paths_in_code_spans};

/// File extensions counted as images.
const IMAGE_EXTENSIONS: [&str; 6] = ["svg", "png", "jpg", "jpeg", "gif", "webp"];

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// One line per problem, naming the page and what to do; empty when the book is sound.
    pub problems: Vec<String>,
    /// Built HTML pages read.
    pub pages: usize,
    /// Internal links followed (images excluded).
    pub links: usize,
    /// Images found.
    pub images: usize,
}

/// Checks the book whose Markdown is in `src` (the directory holding `SUMMARY.md`) and
/// whose HTML mdBook wrote to `html`. Fails only when a directory cannot be read.
pub fn check(src: &Path, html: &Path) -> io::Result<Report> {
    let mut report = Report::default();
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).map_err(|e| {
        io::Error::new(e.kind(), format!("cannot read {}: {e}", src.join("SUMMARY.md").display()))
    })?;
    let listed = summary_pages(&summary);
    let sources = files_under(src)?;
    let built = files_under(html)?;

    // The summary against the source pages and the built ones.
    for page in sources.iter().filter(|p| p.ends_with(".md") && p.as_str() != "SUMMARY.md") {
        if !listed.contains(page) {
            report.problems.push(format!(
                "{}: not in SUMMARY.md, so mdBook does not build it; add a line `- [Title]({page})` there, \
                 or delete the page",
                src.join(page).display()
            ));
        }
    }
    for page in &listed {
        if !sources.contains(page) {
            report.problems.push(format!(
                "{}: SUMMARY.md lists {page}, which does not exist",
                src.join("SUMMARY.md").display()
            ));
        } else if !built.contains(&html_name(page)) {
            report.problems.push(format!(
                "{}: {page} was not built into {}; build the book again",
                html.display(),
                html_name(page)
            ));
        }
    }
    if !built.contains("searchindex.js") && !built.contains("searchindex.json") {
        report.problems.push(format!(
            "{}: no search index (searchindex.js); mdBook was built without its search feature",
            html.display()
        ));
    }

    // Every page's ids first, since links point across pages.
    let mut pages = BTreeMap::new();
    for name in built.iter().filter(|n| n.ends_with(".html")) {
        let text = std::fs::read_to_string(html.join(name))?;
        pages.insert(name.clone(), text);
    }
    let ids: BTreeMap<&str, BTreeSet<String>> =
        pages.iter().map(|(name, text)| (name.as_str(), ids_of(text))).collect();
    let mut shown = BTreeSet::new();
    for (name, text) in &pages {
        report.pages += 1;
        let origin = origin_of(src, name, &sources);
        let refs = references(text);
        let base = refs.iter().find(|r| r.tag == "base").map(|r| r.value.clone());
        for r in refs.iter().filter(|r| r.tag != "base" && !leaves_the_book(&r.value)) {
            let image = r.tag == "img";
            if image {
                report.images += 1;
            } else {
                report.links += 1;
            }
            let what = if image { "image" } else { "link" };
            let (path, fragment) = match r.value.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (r.value.as_str(), None),
            };
            let path = path.split('?').next().unwrap_or_default();
            let target = match resolve(name, base.as_deref(), path) {
                Ok(t) => t,
                Err(e) => {
                    report.problems.push(format!("{origin}: {what} \"{}\" {e}", r.value));
                    continue;
                }
            };
            let target = if built.contains(&target) || target.is_empty() {
                target
            } else if built.contains(&join(&target, "index.html")) {
                join(&target, "index.html")
            } else {
                let hint = match source_of(src, &target, &sources) {
                    Some(s) => format!("; {s} exists: is it in SUMMARY.md?"),
                    None if image => format!("; add {} to the repository", src.join(&target).display()),
                    None => String::new(),
                };
                report.problems.push(format!(
                    "{origin}: {what} \"{}\" points at {}, which the built book does not have{hint}",
                    r.value,
                    html.join(&target).display()
                ));
                continue;
            };
            shown.insert(target.clone());
            if let (Some(fragment), Some(target_ids)) = (fragment, ids.get(target.as_str())) {
                let fragment = percent_decode(fragment);
                if !fragment.is_empty() && !target_ids.contains(&fragment) {
                    report.problems.push(format!(
                        "{origin}: {what} \"{}\": {} has no heading or anchor with id \"{fragment}\"",
                        r.value,
                        html.join(&target).display()
                    ));
                }
            }
        }
    }
    for image in sources.iter().filter(|s| is_image(s)) {
        if !shown.contains(image) {
            report.problems.push(format!(
                "{}: no page shows this image; embed it in a page or delete it",
                src.join(image).display()
            ));
        }
    }
    Ok(report)
}

/// The pages `SUMMARY.md` links, relative to the source directory. Links with no
/// target (`[Draft]()`, a draft chapter) name no page.
pub fn summary_pages(summary: &str) -> BTreeSet<String> {
    let mut pages = BTreeSet::new();
    let mut rest = summary;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or_default().trim();
        let target = target.strip_prefix("./").unwrap_or(target);
        if target.ends_with(".md") {
            pages.insert(percent_decode(target));
        }
        rest = &rest[end..];
    }
    pages
}

/// An `href` or `src` attribute and the tag it is on.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    tag: String,
    value: String,
}

/// Every `href` and `src` of the page's tags, in order. Comments and the bodies of
/// `<script>` and `<style>` are skipped.
fn references(html: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |e| &rest[e + 3..]);
            continue;
        }
        let Some(close) = rest.find('>') else { break };
        let tag_text = &rest[1..close];
        rest = &rest[close + 1..];
        let tag: String = tag_text
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if tag.is_empty() {
            continue; // a closing tag, `<!DOCTYPE`, or a stray `<`
        }
        for attr in ["href", "src"] {
            if let Some(value) = attribute(tag_text, attr) {
                out.push(Reference { tag: tag.clone(), value: unescape(value) });
            }
        }
        if (tag == "script" || tag == "style") && !tag_text.ends_with('/') {
            let end = format!("</{tag}");
            rest = rest.find(&end).map_or("", |e| &rest[e..]);
        }
    }
    out
}

/// The double-quoted value of attribute `name` inside a tag's text.
fn attribute<'a>(tag_text: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("{name}=\"");
    let mut from = 0;
    while let Some(i) = tag_text[from..].find(&needle) {
        let at = from + i;
        let preceded_by_space = tag_text[..at].ends_with(|c: char| c.is_ascii_whitespace());
        let start = at + needle.len();
        let end = start + tag_text[start..].find('"')?;
        if preceded_by_space {
            return Some(&tag_text[start..end]);
        }
        from = end;
    }
    None
}

/// The ids a page defines (`id="…"` on any tag).
fn ids_of(html: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut rest = html;
    while let Some(i) = rest.find(" id=\"") {
        rest = &rest[i + 5..];
        if let Some(end) = rest.find('"') {
            ids.insert(unescape(&rest[..end]));
            rest = &rest[end..];
        }
    }
    ids
}

/// True for links that leave the book: a scheme (`https:`, `mailto:`, `data:` …) or a
/// scheme-relative `//host/…`.
fn leaves_the_book(link: &str) -> bool {
    if link.starts_with("//") {
        return true;
    }
    let scheme_end = link.find(':');
    let path_start = link.find(['/', '?', '#']);
    match (scheme_end, path_start) {
        (Some(c), p) if p.is_none_or(|p| c < p) => {
            let scheme = &link[..c];
            scheme.starts_with(|ch: char| ch.is_ascii_alphabetic())
                && scheme.chars().all(|ch| ch.is_ascii_alphanumeric() || "+.-".contains(ch))
        }
        _ => false,
    }
}

/// The book-relative path a link on page `page` (itself book-relative) points at.
/// `base` is the page's `<base href>`, if any; mdBook gives its 404 page `<base
/// href="/">` (the site's root, which is the book's). An empty path is the page itself.
fn resolve(page: &str, base: Option<&str>, path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(page.to_string());
    }
    let path = percent_decode(path);
    let mut parts: Vec<&str> = match base {
        Some(b) if b.starts_with('/') => b.split('/').filter(|s| !s.is_empty()).collect(),
        _ => {
            page.split('/').collect::<Vec<_>>().split_last().map(|(_, dir)| dir.to_vec()).unwrap_or_default()
        }
    };
    if path.starts_with('/') {
        parts.clear();
    }
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("points outside the book".to_string());
                }
            }
            s => parts.push(s),
        }
    }
    let mut target = parts.join("/");
    if path.ends_with('/') {
        target = join(&target, "index.html");
    }
    Ok(target)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `page.md` -> `page.html`.
fn html_name(md: &str) -> String {
    format!("{}.html", md.strip_suffix(".md").unwrap_or(md))
}

/// The page as a reader of the error needs it: the built file, and the Markdown it came
/// from when there is one.
fn origin_of(src: &Path, built: &str, sources: &BTreeSet<String>) -> String {
    match source_of(src, built, sources) {
        Some(md) => format!("{built} (from {md})"),
        None => built.to_string(),
    }
}

/// The source file a built file comes from: `x.html` from `x.md`, anything else from a
/// file of the same name.
fn source_of(src: &Path, built: &str, sources: &BTreeSet<String>) -> Option<String> {
    let candidate = match built.strip_suffix(".html") {
        Some(stem) => format!("{stem}.md"),
        None => built.to_string(),
    };
    sources.contains(&candidate).then(|| src.join(candidate).display().to_string())
}

fn is_image(path: &str) -> bool {
    path.rsplit_once('.')
        .is_some_and(|(_, ext)| IMAGE_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// Every file under `root`, as `/`-separated paths relative to it.
fn files_under(root: &Path) -> io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        for entry in entries {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                stack.push(rel);
            } else {
                let parts: Vec<String> =
                    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                out.insert(parts.join("/"));
            }
        }
    }
    Ok(out)
}

/// The five entities mdBook's HTML uses in attribute values.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// `%XX` escapes decoded; anything malformed is kept as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_skip_scripts_comments_and_closing_tags() {
        let html = r#"<!DOCTYPE html><link rel="stylesheet" href="css/a.css">
            <!-- <a href="commented.html"> -->
            <script>var s = '<img src="in-script.png">';</script>
            <p><a href="x.html#y&amp;z">x</a> <img alt="" src="f.svg"/></p>
            <a data-href="not-this" href="this.html">t</a></p>"#;
        let refs: Vec<(String, String)> = references(html).into_iter().map(|r| (r.tag, r.value)).collect();
        let expected = [("link", "css/a.css"), ("a", "x.html#y&z"), ("img", "f.svg"), ("a", "this.html")];
        assert_eq!(refs, expected.map(|(t, v)| (t.to_string(), v.to_string())));
    }

    #[test]
    fn links_resolve_relative_to_their_page() {
        assert_eq!(resolve("steps/a.html", None, "../b.html"), Ok("b.html".into()));
        assert_eq!(resolve("steps/a.html", None, "c.html"), Ok("steps/c.html".into()));
        assert_eq!(resolve("steps/a.html", None, ""), Ok("steps/a.html".into()));
        assert_eq!(resolve("a.html", None, "figures/x%20y.svg"), Ok("figures/x y.svg".into()));
        assert_eq!(resolve("404.html", Some("/"), "css/a.css"), Ok("css/a.css".into()));
        assert_eq!(resolve("a.html", None, "steps/"), Ok("steps/index.html".into()));
        assert!(resolve("a.html", None, "../../etc/passwd").is_err());
    }

    #[test]
    fn only_links_with_a_scheme_leave_the_book() {
        for external in ["https://x.org/a", "mailto:a@b.c", "//cdn.x/a.js", "data:image/png;base64,AA"] {
            assert!(leaves_the_book(external), "{external}");
        }
        for internal in ["a.html", "a.html#b:c", "steps/a.html", "#x", "../c.html?q=d:e", "/css/a.css"] {
            assert!(!leaves_the_book(internal), "{internal}");
        }
    }

    #[test]
    fn the_summary_names_its_pages() {
        let summary =
            "# Summary\n\n[Intro](introduction.md)\n- [A](a.md#part)\n  - [B](./steps/b.md)\n- [Draft]()\n";
        let pages: Vec<String> = summary_pages(summary).into_iter().collect();
        assert_eq!(pages, ["a.md", "introduction.md", "steps/b.md"]);
    }
}
