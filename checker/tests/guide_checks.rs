//! The guide's table of checks ("| step | checks |" in `lab-guide/src/checker.md`, which
//! README links to) names exactly the checks of the registry, step by step and in order,
//! as `checker list --checks` prints them: adding, renaming or moving a check without the
//! guide fails here.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The guide's page for the checker, from the repository root.
const GUIDE_PAGE: &str = "lab-guide/src/checker.md";

/// The check ids per step, in order, from `checker list --checks` (`step NN  id  what`).
fn registry() -> BTreeMap<u8, Vec<String>> {
    let out = Command::new(env!("CARGO_BIN_EXE_checker"))
        .args(["list", "--checks"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .expect("run checker list --checks");
    assert!(out.status.success(), "checker list --checks failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut steps: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("step"), "not a line of the table: {line:?}");
        let step = words.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no step in {line:?}"));
        let id = words.next().unwrap_or_else(|| panic!("no id in {line:?}"));
        steps.entry(step).or_default().push(id.to_string());
    }
    steps
}

/// The rows of the guide's table: per step, the ids in backquotes outside parentheses
/// (what is in parentheses explains the check, e.g. "(`--num-gpus two` is ...)").
fn guide_table(page: &str) -> BTreeMap<u8, Vec<String>> {
    let mut lines = page.lines().skip_while(|l| l.trim() != "| step | checks |");
    assert!(lines.next().is_some(), "{GUIDE_PAGE} has no table headed `| step | checks |`");
    let mut steps = BTreeMap::new();
    for row in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let [_, step, checks, _] = cells[..] else {
            panic!("{GUIDE_PAGE}: a row of two cells expected: {row:?}")
        };
        let step: u8 = step.parse().unwrap_or_else(|_| panic!("{GUIDE_PAGE}: not a step number in {row:?}"));
        assert!(
            steps.insert(step, ids_outside_parentheses(checks)).is_none(),
            "{GUIDE_PAGE}: step {step} twice"
        );
    }
    steps
}

fn ids_outside_parentheses(cell: &str) -> Vec<String> {
    let (mut depth, mut quoted, mut ids) = (0usize, None::<String>, Vec::new());
    for c in cell.chars() {
        match (c, quoted.as_mut()) {
            ('`', Some(_)) => {
                let id = quoted.take().unwrap();
                if depth == 0 {
                    ids.push(id);
                }
            }
            (c, Some(text)) => text.push(c),
            ('`', None) => quoted = Some(String::new()),
            ('(', None) => depth += 1,
            (')', None) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    ids
}

#[test]
fn the_guide_lists_every_check_of_the_registry() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(GUIDE_PAGE)).unwrap();
    let (registry, guide) = (registry(), guide_table(&page));
    assert_eq!(
        registry.keys().copied().collect::<Vec<_>>(),
        (0..=lab_course::LAST_STEP).collect::<Vec<u8>>()
    );
    for (step, ids) in &registry {
        assert_eq!(
            guide.get(step),
            Some(ids),
            "{GUIDE_PAGE}'s table of checks, step {step}, differs from the registry (`cargo checker list --checks`)"
        );
    }
    assert_eq!(guide.len(), registry.len(), "{GUIDE_PAGE}'s table has rows for steps without checks");
}

#[test]
fn ids_in_parentheses_are_explanations() {
    let cell = "`options-listed` (in `--help`, defaults 1/1/0), `options-typed` (`--num-gpus two`)";
    assert_eq!(ids_outside_parentheses(cell), ["options-listed", "options-typed"]);
}

/// Each step's page says what each of its checks looks at: a bullet "- `id`: …" per
/// check of the registry, so that a check added or renamed without its page fails here.
#[test]
fn each_step_page_explains_each_of_its_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    for (step, ids) in registry() {
        let page = lab_course::guide_page(step).display().to_string();
        let text = std::fs::read_to_string(root.join(&page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        for id in ids {
            if !text.lines().any(|l| l.trim_start().starts_with(&format!("- `{id}`"))) {
                missing.push(format!("{page}: no bullet \"- `{id}`: …\""));
            }
        }
    }
    assert!(missing.is_empty(), "checks the step pages do not explain:\n{}", missing.join("\n"));
}
