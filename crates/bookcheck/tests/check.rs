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
