//! The number of steps is written once, as `lab_course::STEPS` (whose last is
//! `lab_course::LAST_STEP`): the places that once wrote 12 or 11 for it read the
//! constant, and this test fails if such a literal comes back there.
use std::path::Path;

use regex::Regex;

/// Where the lab's step count was once spelled out (paths from the repository root).
const READ_THE_CONSTANT: &[&str] = &[
    "checker/src/checks/mod.rs",
    "checker/src/observe.rs",
    "checker/src/cli.rs",
    "checker/src/commands.rs",
    "checker/src/progress.rs",
    "checker/tests/class.rs",
    "checker/tests/guide_checks.rs",
    "checker/tests/record_fixtures.rs",
    "crates/lab-course/src/lib.rs",
    "tools/coursegen/src/main.rs",
    "crates/lab-course/src/markers.rs",
    "crates/lab-course/src/students_copy.rs",
    "tools/coursegen/src/new_step.rs",
    "tools/coursegen/tests/new_step.rs",
    "tools/coursegen/tests/solutions.rs",
    "crates/guide-hints/src/lib.rs",
    "crates/guide-hints/tests/hint.rs",
];

/// How a step count or last step is written as a literal: a range `0..12`, `0..=11`,
/// a bound `<= 11`, an array `[_; 12]`, a typed `12u8`/`11u8`, or prose `0 to 11`,
/// `0-11`, `steps 0-11`.
fn literal() -> Regex {
    Regex::new(
        r"\b0\s*\.\.\s*12\b|\.\.=\s*11\b|<=\s*11\b|;\s*12\s*\]|\b1[12]u8\b|\b0 to 11\b|\b0-11\b|\(1[12]\)",
    )
    .unwrap()
}

#[test]
fn the_step_count_is_not_written_out_where_the_constant_is_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let literal = literal();
    let mut found = Vec::new();
    for file in READ_THE_CONSTANT {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (i, line) in text.lines().enumerate() {
            if let Some(m) = literal.find(line) {
                found.push(format!("{file}:{}: `{}` in {:?}", i + 1, m.as_str(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the number of steps is lab_course::STEPS.len() (the last step lab_course::LAST_STEP): \
         read it instead of writing it out:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_pattern_finds_the_literals_it_is_for() {
    let literal = literal();
    for written in [
        "(0..12).collect()",
        "for step in 0..=11u8 {",
        "Ok(n) if n <= 11 =>",
        "pub const STEPS: [&str; 12] = [",
        "range(0..=11))]",
        "the steps are 0 to 11",
        "every check of steps 0-11.",
        "Solution(12)",
    ] {
        assert!(literal.is_match(written), "{written}");
    }
    for fine in ["0..=LAST_STEP", "(0..2)", "step 1", "120/120", "--seed 11", "0..=lab_course::LAST_STEP"] {
        assert!(!literal.is_match(fine), "{fine}");
    }
}

#[test]
fn the_constant_is_the_last_of_the_steps() {
    assert_eq!(usize::from(lab_course::LAST_STEP) + 1, lab_course::STEPS.len());
    assert_eq!(lab_course::Version::all().count(), 2 * lab_course::STEPS.len());
}

/// The words for the numbers the prose uses.
fn in_words(n: usize) -> &'static str {
    [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ]
    .get(n)
    .copied()
    .unwrap_or("?")
}

/// The counts README.md and the guide write out in prose (a paragraph reads better with
/// "twelve steps" than with a reference) agree with coursegen's constants: the DLI lab's
/// steps, the steps beyond it, the generated crates, `grade all`'s points.
#[test]
fn the_counts_in_readme_and_the_guide_are_coursegens() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lab_steps = usize::from(lab_course::LAB_LAST_STEP) + 1;
    let beyond = lab_course::STEPS.len() - lab_steps;
    let crates = lab_course::Version::all().count();
    let count = Regex::new(
        r"\b(\w+) steps \(0-(\d+)\)|\b(\w+) more (?:beyond|\()|\b(\d+) (?:step and solution )?crates\b|\b(\d+) points in all|last step \(step (\d+); step (\d+)'s is the finished DLI lab",
    )
    .unwrap();
    // The master's header and the workspace manifest's comments count too.
    let mut pages = vec![root.join("README.md"), root.join("course/lab/main.rs"), root.join("Cargo.toml")];
    let mut dirs = vec![root.join("lab-guide/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") && !path.ends_with("figures.md") {
                // figures.md records what was measured then, counts of that day included.
                pages.push(path);
            }
        }
    }
    let (mut seen, mut wrong) = (0, Vec::new());
    for page in &pages {
        // One line of prose, without the comment markers of the Rust and TOML files.
        let file = std::fs::read_to_string(page).unwrap();
        let text: Vec<&str> = file
            .lines()
            .map(|line| {
                let line = line.trim_start();
                ["//!", "//", "#"].iter().find_map(|m| line.strip_prefix(m)).unwrap_or(line).trim()
            })
            .collect();
        let text = text.join(" ");
        for c in count.captures_iter(&text) {
            seen += 1;
            let right = if let (Some(word), Some(last)) = (c.get(1), c.get(2)) {
                word.as_str() == in_words(lab_steps) && last.as_str() == lab_course::LAB_LAST_STEP.to_string()
            } else if let Some(word) = c.get(3) {
                word.as_str() == in_words(beyond)
            } else if let Some(n) = c.get(4) {
                n.as_str() == crates.to_string()
            } else if let Some(n) = c.get(5) {
                n.as_str() == (10 * lab_steps).to_string()
            } else {
                c[6] == lab_course::LAST_STEP.to_string() && c[7] == lab_course::LAB_LAST_STEP.to_string()
            };
            if !right {
                wrong.push(format!("{}: {:?}", page.display(), &c[0]));
            }
        }
    }
    assert!(wrong.is_empty(), "counts that are no longer coursegen's:\n{}", wrong.join("\n"));
    assert!(seen >= 7, "the pattern still finds the counts ({seen} found)");
}
