//! A tiny book, sound, then broken one way at a time: each way must be reported.
use std::fs;
use std::path::Path;

use bookcheck::check;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// `src/` and `html/` of a two-page book with one figure, as mdBook would build it.
fn sound_book() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (src, html) = (dir.path().join("src"), dir.path().join("html"));
    write(&src.join("SUMMARY.md"), "# Summary\n\n- [Intro](intro.md)\n- [Step](steps/step.md)\n");
    write(&src.join("intro.md"), "# Intro\n\nSee [the step](steps/step.md#goal).\n");
    write(&src.join("steps/step.md"), "# Step\n\n## Goal\n\n![figure](../figures/f.svg)\n");
    write(&src.join("figures/f.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
    write(&html.join("figures/f.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
    write(&html.join("searchindex.js"), "Object.assign(window.search, {});");
    write(&html.join("css/book.css"), "");
    write(
        &html.join("intro.html"),
        r##"<html><head><link rel="stylesheet" href="css/book.css"></head><body>
        <h1 id="intro"><a class="header" href="#intro">Intro</a></h1>
        <p>See <a href="steps/step.html#goal">the step</a>, or <a href="https://pytorch.org">PyTorch</a>.</p>
        </body></html>"##,
    );
    write(
        &html.join("steps/step.html"),
        r##"<html><head><link rel="stylesheet" href="../css/book.css"></head><body>
        <h1 id="step">Step</h1><h2 id="goal">Goal</h2>
        <p><img src="../figures/f.svg" alt="figure" /></p><a href="../intro.html">back</a>
        </body></html>"##,
    );
    dir
}

fn problems(dir: &Path) -> Vec<String> {
    check(&dir.join("src"), &dir.join("html")).unwrap().problems
}

/// The one problem the book has, which must mention every `needle`.
fn the_problem(dir: &Path, needles: &[&str]) {
    let found = problems(dir);
    assert_eq!(found.len(), 1, "{found:#?}");
    for needle in needles {
        assert!(found[0].contains(needle), "{needle:?} not in {:?}", found[0]);
    }
}

#[test]
fn a_sound_book_has_no_problem() {
    let book = sound_book();
    let report = check(&book.path().join("src"), &book.path().join("html")).unwrap();
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert_eq!((report.pages, report.images), (2, 1));
    // Two stylesheets, the heading's own anchor, the step, back: PyTorch is not followed.
    assert_eq!(report.links, 5);
}

#[test]
fn a_page_missing_from_the_summary() {
    let book = sound_book();
    write(&book.path().join("src/steps/orphan.md"), "# Orphan\n");
    the_problem(book.path(), &["src/steps/orphan.md: not in SUMMARY.md", "[Title](steps/orphan.md)"]);
}

#[test]
fn a_summary_entry_without_its_page() {
    let book = sound_book();
    let summary = book.path().join("src/SUMMARY.md");
    let text = fs::read_to_string(&summary).unwrap() + "- [Gone](gone.md)\n";
    write(&summary, &text);
    the_problem(book.path(), &["SUMMARY.md lists gone.md, which does not exist"]);
}

#[test]
fn a_broken_link() {
    let book = sound_book();
    let page = book.path().join("html/intro.html");
    let text = fs::read_to_string(&page).unwrap().replace("steps/step.html#goal", "steps/stpe.html#goal");
    write(&page, &text);
    the_problem(
        book.path(),
        &["intro.html (from ", "intro.md)", "link \"steps/stpe.html#goal\"", "does not have"],
    );
}

#[test]
fn a_link_to_a_heading_that_is_not_there() {
    let book = sound_book();
    let page = book.path().join("html/intro.html");
    let text = fs::read_to_string(&page).unwrap().replace("#goal", "#gaol");
    write(&page, &text);
    the_problem(book.path(), &["no heading or anchor with id \"gaol\""]);
}

#[test]
fn a_missing_image() {
    let book = sound_book();
    fs::remove_file(book.path().join("html/figures/f.svg")).unwrap();
    fs::remove_file(book.path().join("src/figures/f.svg")).unwrap();
    the_problem(book.path(), &["image \"../figures/f.svg\"", "add ", "src/figures/f.svg to the repository"]);
}

#[test]
fn an_image_no_page_shows() {
    let book = sound_book();
    write(&book.path().join("src/figures/unused.svg"), "<svg/>");
    write(&book.path().join("html/figures/unused.svg"), "<svg/>");
    the_problem(book.path(), &["src/figures/unused.svg: no page shows this image"]);
}

#[test]
fn a_book_without_search() {
    let book = sound_book();
    fs::remove_file(book.path().join("html/searchindex.js")).unwrap();
    the_problem(book.path(), &["no search index"]);
}

#[test]
fn a_link_out_of_the_book() {
    let book = sound_book();
    let page = book.path().join("html/intro.html");
    let text = fs::read_to_string(&page).unwrap().replace("steps/step.html#goal", "../../README.md");
    write(&page, &text);
    the_problem(book.path(), &["link \"../../README.md\" points outside the book"]);
}

/// The sound book with a README beside it, at the root of the "repository", linking a
/// file, a folder, a book page's heading, one of its own headings and the web.
fn book_with_readme() -> tempfile::TempDir {
    let book = sound_book();
    write(&book.path().join("data/README.md"), "# Data\n\n## The stand-in\n");
    write(
        &book.path().join("README.md"),
        "# Project\n\n## For students\n\nRead [the step](src/steps/step.md#goal), \
         [the data](data/README.md#the-stand-in) in [its folder](data/), go back to\n\
         [the top](#for-students) or [PyTorch](https://pytorch.org). `[not](a-link.md)`\n\n\
         ```sh\n[not](either.md)\n```\n",
    );
    book
}

fn readme_problems(dir: &Path) -> Vec<String> {
    bookcheck::check_repository_file(&dir.join("README.md"), dir, &dir.join("src"), &dir.join("html"))
        .unwrap()
}

/// The one problem the README has, which must mention every `needle`.
fn the_readme_problem(dir: &Path, needles: &[&str]) {
    let found = readme_problems(dir);
    assert_eq!(found.len(), 1, "{found:#?}");
    for needle in needles {
        assert!(found[0].contains(needle), "{needle:?} not in {:?}", found[0]);
    }
}

fn edit_readme(dir: &Path, from: &str, to: &str) {
    let readme = dir.join("README.md");
    let text = fs::read_to_string(&readme).unwrap();
    assert!(text.contains(from), "{from:?} not in the README");
    write(&readme, &text.replace(from, to));
}

#[test]
fn a_readme_whose_links_resolve_has_no_problem() {
    let book = book_with_readme();
    assert_eq!(readme_problems(book.path()), Vec::<String>::new());
}

#[test]
fn a_readme_link_to_a_missing_file() {
    let book = book_with_readme();
    edit_readme(book.path(), "data/README.md#the-stand-in", "data/READ.md#the-stand-in");
    the_readme_problem(
        book.path(),
        &["README.md:5: link \"data/READ.md#the-stand-in\"", "data/READ.md does not exist"],
    );
}

#[test]
fn a_readme_link_to_a_book_heading_that_is_not_there() {
    let book = book_with_readme();
    edit_readme(book.path(), "step.md#goal", "step.md#gaol");
    the_readme_problem(book.path(), &["step.html has no heading or anchor with id \"gaol\""]);
}

#[test]
fn a_readme_link_to_a_page_the_book_did_not_build() {
    let book = book_with_readme();
    write(&book.path().join("src/steps/draft.md"), "# Draft\n");
    edit_readme(book.path(), "src/steps/step.md#goal", "src/steps/draft.md");
    the_readme_problem(
        book.path(),
        &["the book has no page", "draft.html", "list steps/draft.md in SUMMARY.md"],
    );
}

#[test]
fn a_readme_link_to_a_heading_of_its_own_or_of_another_file_that_is_not_there() {
    let book = book_with_readme();
    edit_readme(book.path(), "(#for-students)", "(#for-student)");
    the_readme_problem(book.path(), &["README.md has no heading whose anchor is \"#for-student\""]);
    let book = book_with_readme();
    edit_readme(book.path(), "#the-stand-in", "#the-standin");
    the_readme_problem(book.path(), &["data/README.md has no heading whose anchor is \"#the-standin\""]);
}

#[test]
fn a_readme_link_out_of_the_repository() {
    let book = book_with_readme();
    edit_readme(book.path(), "(data/)", "(../elsewhere/)");
    the_readme_problem(book.path(), &["link \"../elsewhere/\" points outside the repository"]);
}

/// The repository's own README, against the book `scripts/book.sh build` made (which
/// scripts/test.sh builds before the tests, and says so with DDP_LAB_REQUIRE_BOOK).
#[test]
fn the_repository_readme_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let html = root.join("target/book");
    if !html.join("index.html").is_file() {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_BOOK").is_none(),
            "{} has no built book although DDP_LAB_REQUIRE_BOOK is set: run bash scripts/book.sh build",
            html.display()
        );
        eprintln!("skipped: no book built in {} (bash scripts/book.sh build)", html.display());
        return;
    }
    let problems =
        bookcheck::check_repository_file(&root.join("README.md"), &root, &root.join("lab-guide/src"), &html)
            .unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every repository path the README, the crates' READMEs and the guide name in a code span
/// is there (`crates/lab-course/src/markers.rs`, not where it was before a move), or is
/// one git ignores, made at run time.
#[test]
fn the_paths_the_readmes_and_the_guide_name_are_there() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("lab-guide/src"), root.join("crates"), root.join("tools")];
    for dir in ["bench", "data", "checker", "demo"] {
        pages.push(root.join(dir).join("README.md"));
    }
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.retain(|p| p.is_file());
    // What git ignores is made at run time (the generated data set, .checker/): named
    // where it will be, not where it is in a fresh clone.
    let made_at_run_time = |problem: &String| {
        let path = problem.split('`').nth(1).unwrap_or_default();
        let mut git = std::process::Command::new("git");
        git.current_dir(&root).args(["check-ignore", "-q", "--no-index", path]);
        git.status().expect("git runs").success()
    };
    let mut problems = Vec::new();
    for page in &pages {
        let missing = bookcheck::missing_paths_in_code_spans(page, &root).unwrap();
        problems.extend(missing.into_iter().filter(|p| !made_at_run_time(p)));
    }
    assert!(pages.len() > 40, "the pages are found ({})", pages.len());
    assert!(problems.is_empty(), "{problems:#?}");
}
