use std::path::{Path, PathBuf};

use guide_hints::{book_location, book_page, check_hint_for, hint, HintError, Level, BOOK_DIR, LEVELS};
use lab_course::CourseError;
use tempfile::tempdir;

/// The repository this crate lives in.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the crate lies in crates/")
}

#[test]
fn every_step_of_the_real_guide_has_a_hint_at_every_level() {
    for step in 0..=lab_course::LAST_STEP {
        for level in [Level::Look, Level::Api, Level::Answer] {
            let text = hint(&repo_root(), step, level).unwrap_or_else(|e| panic!("step {step}: {e}"));
            let first = format!("Step {step}, hint {} of {LEVELS}: ", level as u8);
            assert!(text.starts_with(&first), "step {step}: {text}");
            let change = text.find("## What to change").expect("the first section");
            let mistakes = text.find("## Common mistakes").expect("the last section");
            assert!(change < mistakes, "step {step}: sections in order:\n{text}");
            assert!(!text.contains("## Why") && !text.contains("## Goal"), "step {step}: only two sections");
            assert!(!text.contains("<details>") && !text.contains("<summary>"), "step {step}: {text}");
            // The mistakes' ties to their variants are for the tests, not the student.
            assert!(!text.contains("<!--") && !text.contains("variant:"), "step {step}: {text}");
            assert_eq!(text.contains("### Which API"), level >= Level::Api, "step {step} {level:?}");
            assert_eq!(text.contains("### The code"), level == Level::Answer, "step {step} {level:?}");
            // Each level says how to ask for the next.
            let next = match level {
                Level::Look => Some(format!("cargo checker hint step {step} --level 2")),
                Level::Api => Some(format!("cargo checker hint step {step} --answer")),
                Level::Answer => None,
            };
            if let Some(next) = next {
                assert!(text.contains(&next), "step {step} {level:?} names `{next}`:\n{text}");
            }
            let last = text.lines().last().unwrap();
            assert_eq!(last, format!("Full page: lab-guide/src/steps/step-{step:02}.md"));
        }
    }
}

/// The hint gives the code only when asked: below `--answer` no line of the step's code
/// (its blocks in the master, as coursegen renders its solution) appears, at any level;
/// with `--answer` the step's code does.
#[test]
fn no_hint_below_the_answer_shows_a_line_of_the_steps_code() {
    let root = repo_root();
    let master = std::fs::read_to_string(root.join(lab_course::MASTER)).unwrap();
    let mut steps_with_code = 0;
    for step in 0..=lab_course::LAST_STEP {
        let answers = lab_course::answer_lines(&master, step).unwrap();
        // Step 5's code is a condition and two calls, none telling on its own.
        if answers.is_empty() {
            continue;
        }
        steps_with_code += 1;
        for level in [Level::Look, Level::Api] {
            let text = hint(&root, step, level).unwrap();
            let shown: Vec<&String> = answers.iter().filter(|line| text.contains(line.as_str())).collect();
            assert!(
                shown.is_empty(),
                "step {step}, hint {level:?} shows step {step}'s code: {shown:?}\n{text}"
            );
        }
        let text = hint(&root, step, Level::Answer).unwrap();
        assert!(
            answers.iter().any(|line| text.contains(line.as_str())),
            "step {step}: `--answer` shows none of its code {answers:?}:\n{text}"
        );
    }
    assert!(steps_with_code >= usize::from(lab_course::LAST_STEP), "{steps_with_code} steps with code");
}

/// The page itself keeps the code out of the first read: outside its folded part "The
/// code", no line of the step's code.
#[test]
fn the_step_pages_fold_their_code_away() {
    let root = repo_root();
    let master = std::fs::read_to_string(root.join(lab_course::MASTER)).unwrap();
    for step in 0..=lab_course::LAST_STEP {
        let page = std::fs::read_to_string(root.join(lab_course::guide_page(step))).unwrap();
        let unfolded = lab_course::students_copy::withhold_code(&page);
        assert_ne!(unfolded, page, "step {step}'s page has a folded part \"The code\"");
        let shown: Vec<String> = lab_course::answer_lines(&master, step)
            .unwrap()
            .into_iter()
            .filter(|line| unfolded.contains(line.as_str()))
            .collect();
        assert!(
            shown.is_empty(),
            "step-{step:02}.md shows step {step}'s code outside \"The code\": {shown:?}"
        );
    }
}

#[test]
fn the_guide_has_a_page_for_each_step_and_no_other() {
    // The guide's step pages follow coursegen's list of steps: adding a step to it
    // without a page (or leaving a page behind) fails here.
    let dir = lab_course::guide_page(0).parent().unwrap().to_path_buf();
    let mut pages: Vec<String> = std::fs::read_dir(repo_root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("step-") && name.ends_with(".md"))
        .collect();
    pages.sort();
    let expected: Vec<String> = (0..=lab_course::LAST_STEP)
        .map(|s| lab_course::guide_page(s).file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(pages, expected);
}

/// A page with the folded parts, as the step pages have them.
const PAGE: &str =
    "# Step 2\n\n## What to change\n\n\nEdit `main`.\n\n<details>\n<summary>Which API</summary>\n\n\
                    - `f`: PyTorch's `g`.\n\n</details>\n\n<details>\n<summary>The code</summary>\n\n\
                    ```rust\nlet x = f();\n```\n\n</details>\n\n## Why\n\nBecause.\n\n\
                    ## Common mistakes\n\n- Forgetting it.\n\n";

fn guide_with(page: &str) -> tempfile::TempDir {
    let root = tempdir().unwrap();
    let steps = root.path().join("lab-guide/src/steps");
    std::fs::create_dir_all(&steps).unwrap();
    std::fs::write(steps.join("step-02.md"), page).unwrap();
    root
}

#[test]
fn each_level_quotes_one_more_part() {
    let root = guide_with(PAGE);
    assert_eq!(
        hint(root.path(), 2, Level::Look).unwrap(),
        "Step 2, hint 1 of 3: what to look at\n\n## What to change\n\nEdit `main`.\n\n\
         ## Common mistakes\n\n- Forgetting it.\n\n\
         Still stuck? `cargo checker hint step 2 --level 2` names the functions to use; `--answer` shows the code.\n\
         Full page: lab-guide/src/steps/step-02.md"
    );
    assert_eq!(
        hint(root.path(), 2, Level::Api).unwrap(),
        "Step 2, hint 2 of 3: which API\n\n## What to change\n\nEdit `main`.\n\n\
         ### Which API\n\n- `f`: PyTorch's `g`.\n\n## Common mistakes\n\n- Forgetting it.\n\n\
         Still stuck? `cargo checker hint step 2 --answer` shows the code (the answer).\n\
         Full page: lab-guide/src/steps/step-02.md"
    );
    assert_eq!(
        hint(root.path(), 2, Level::Answer).unwrap(),
        "Step 2, hint 3 of 3: the answer\n\n## What to change\n\nEdit `main`.\n\n\
         ### Which API\n\n- `f`: PyTorch's `g`.\n\n### The code\n\n```rust\nlet x = f();\n```\n\n\
         ## Common mistakes\n\n- Forgetting it.\n\nFull page: lab-guide/src/steps/step-02.md"
    );
}

/// In a students' copy the page has no code part (coursegen leaves it out): the answer
/// level says where the answers are; the other levels are as before.
#[test]
fn in_a_students_copy_the_answer_is_with_the_instructor() {
    let root = guide_with(&lab_course::students_copy::withhold_code(PAGE));
    let err = hint(root.path(), 2, Level::Answer).unwrap_err();
    assert!(matches!(err, HintError::PartMissing { summary: guide_hints::CODE_SUMMARY, .. }), "{err:?}");
    std::fs::write(root.path().join(lab_course::students_copy::MARK), "through = 2\n").unwrap();
    let text = hint(root.path(), 2, Level::Answer).unwrap();
    assert!(text.contains("they are with your instructor") && !text.contains("let x = f()"), "{text}");
    assert!(hint(root.path(), 2, Level::Api).unwrap().contains("PyTorch's `g`"));
}

#[test]
fn levels_are_numbered_one_to_three() {
    assert_eq!(Level::from_number(1), Some(Level::Look));
    assert_eq!(Level::from_number(3), Some(Level::Answer));
    assert_eq!(Level::from_number(0), None);
    assert_eq!(Level::from_number(4), None);
}

#[test]
fn hint_errors_name_the_problem() {
    let root = tempdir().unwrap();
    let after_the_last = lab_course::LAST_STEP + 1;
    let err = hint(root.path(), after_the_last, Level::Look).unwrap_err();
    assert!(matches!(err, HintError::NoSuchStep(CourseError::NoSuchStep { step }) if step == after_the_last));
    assert!(err.to_string().contains(&format!("0 to {}", lab_course::LAST_STEP)), "{err}");

    let err = hint(root.path(), 4, Level::Look).unwrap_err();
    assert!(matches!(err, HintError::GuideMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("lab-guide/src/steps/step-04.md"), "{err}");

    let steps = root.path().join("lab-guide/src/steps");
    std::fs::create_dir_all(&steps).unwrap();
    std::fs::write(steps.join("step-04.md"), "## What to change\n\nThis.\n").unwrap();
    let err = hint(root.path(), 4, Level::Look).unwrap_err();
    assert!(matches!(err, HintError::SectionMissing { section: "## Common mistakes", .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("step-04.md") && message.contains("Common mistakes"), "{message}");

    // Level 1 needs no folded part; level 2 needs "Which API".
    std::fs::write(steps.join("step-04.md"), "## What to change\n\nThis.\n\n## Common mistakes\n\n- x\n")
        .unwrap();
    assert!(hint(root.path(), 4, Level::Look).is_ok());
    let err = hint(root.path(), 4, Level::Api).unwrap_err();
    assert!(matches!(err, HintError::PartMissing { summary: guide_hints::API_SUMMARY, .. }), "{err:?}");
    assert!(err.to_string().contains("<summary>Which API</summary>"), "{err}");
}

#[test]
fn check_hints_come_from_the_bullet_naming_the_check() {
    let root = tempdir().unwrap();
    let steps = root.path().join("lab-guide/src/steps");
    std::fs::create_dir_all(&steps).unwrap();
    let page = "## What to change\n\nSee `sampler-order` below.\n\n## What the checker will test\n\n\
                - Per rank, the indices (`sampler-disjoint`): disjoint between\n  ranks.\n\
                - The order changes each epoch (`sampler-order`).\n\n## Common mistakes\n\n- `x-y`.\n";
    std::fs::write(steps.join("step-06.md"), page).unwrap();
    let root = root.path();
    assert_eq!(
        check_hint_for(root, 6, "sampler-disjoint").as_deref(),
        Some("Per rank, the indices (`sampler-disjoint`): disjoint between ranks.")
    );
    assert_eq!(
        check_hint_for(root, 6, "sampler-order").as_deref(),
        Some("The order changes each epoch (`sampler-order`).")
    );
    // Only whole backticked ids, and only in that section.
    assert_eq!(check_hint_for(root, 6, "sampler"), None);
    assert_eq!(check_hint_for(root, 6, "x-y"), None);
    assert_eq!(check_hint_for(root, 5, "sampler-order"), None);
    assert_eq!(check_hint_for(root, 40, "sampler-order"), None);
}

#[test]
fn the_real_guide_has_no_check_ids_yet_and_that_is_fine() {
    assert_eq!(check_hint_for(&repo_root(), 6, "no-such-check"), None);
}

#[test]
fn a_failed_check_points_into_the_built_book_or_else_the_pages_source() {
    let root = tempdir().unwrap();
    assert_eq!(book_page(7), "target/book/steps/step-07.html#what-the-checker-will-test");
    // No book built: the page's Markdown source, at the line of the check's bullet.
    let pages = root.path().join("lab-guide/src/steps");
    std::fs::create_dir_all(&pages).unwrap();
    std::fs::write(
        pages.join("step-07.md"),
        "# Step 7\n\n## What the checker will test\n\n- `weights-synchronized`: the same\n  weights.\n- `matches-single-rank`: one\n  rank's losses.\n\n## Common mistakes\n",
    )
    .unwrap();
    let location = book_location(root.path(), 7, Some("matches-single-rank"));
    assert_eq!(location, "lab-guide/src/steps/step-07.md:7");
    let (file, line) = location.rsplit_once(':').unwrap();
    let text = std::fs::read_to_string(root.path().join(file)).unwrap();
    let named = text.lines().nth(line.parse::<usize>().unwrap() - 1).unwrap();
    assert!(named.contains("`matches-single-rank`"), "{named}");
    // A check no bullet names: the section's heading.
    assert_eq!(book_location(root.path(), 7, Some("builds")), "lab-guide/src/steps/step-07.md:3");
    // Built: the book's page, at the section.
    let steps = root.path().join("target/book/steps");
    std::fs::create_dir_all(&steps).unwrap();
    std::fs::write(steps.join("step-07.html"), "<h2 id=\"what-the-checker-will-test\">").unwrap();
    assert_eq!(book_location(root.path(), 7, Some("matches-single-rank")), book_page(7));
}

/// Without a built book, every step's location names a line of the real guide that
/// exists and names the check.
#[test]
fn every_check_without_a_book_points_at_its_line_of_the_real_guide() {
    let root = repo_root();
    let no_book = tempdir().unwrap();
    copy_dir(&root.join("lab-guide/src/steps"), &no_book.path().join("lab-guide/src/steps"));
    for step in 0..lab_course::STEPS.len() as u8 {
        let page = std::fs::read_to_string(root.join(lab_course::guide_page(step))).unwrap();
        // Each check's id as its bullet spells it: "- `id`: ...".
        let ids: Vec<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("- `")?.split_once("`:").map(|(id, _)| id))
            .filter(|id| id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .collect();
        assert!(!ids.is_empty(), "step {step}: no check bullets");
        for id in ids {
            let location = book_location(no_book.path(), step, Some(id));
            let (file, line) = location.rsplit_once(':').unwrap();
            let line: usize = line.parse().unwrap();
            let text = std::fs::read_to_string(no_book.path().join(file)).unwrap();
            assert!(text.lines().nth(line - 1).unwrap().contains(&format!("`{id}`")), "{location}");
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The real book, as `scripts/book.sh build` made it, has every page and section a
/// report points at. Skipped without a built book, except under scripts/test.sh, which
/// builds it first and sets DDP_LAB_REQUIRE_BOOK.
#[test]
fn the_built_book_has_every_page_a_report_points_at() {
    let root = repo_root();
    let book = root.join(BOOK_DIR);
    if !book.join("index.html").is_file() {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_BOOK").is_none(),
            "{} has no built book although DDP_LAB_REQUIRE_BOOK is set: run bash scripts/book.sh build",
            book.display()
        );
        eprintln!("SKIPPED: no book built in {} (bash scripts/book.sh build)", book.display());
        return;
    }
    for step in 0..lab_course::STEPS.len() as u8 {
        let link = book_page(step);
        let (file, id) = link.split_once('#').unwrap();
        let html = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(html.contains(&format!(" id=\"{id}\"")), "{file} has no section with id {id}");
        assert_eq!(book_location(&root, step, None), link);
    }
}
