//! The guide's tables of options (`lab-guide/src/introduction.md`, the tables headed
//! `| option | default | meaning |`) are the finished lab's `--help`: the same options in
//! the same order, each with the default clap shows, as the checker's table of checks is
//! the checker's registry. An option added, renamed or given a new default in
//! `course/lab/main.rs` or `labkit::RunOptions` without the guide fails here.
use std::path::{Path, PathBuf};
use std::process::Command;

const GUIDE_PAGE: &str = "lab-guide/src/introduction.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// One option as `--help` shows it or as the guide lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OptionRow {
    /// The long name without its dashes: `batch-size`.
    name: String,
    /// The value's name (`WIDTHS` in `--width <WIDTHS>`); `None` for a flag.
    value: Option<String>,
    /// What `[default: …]` says in `--help`; in the guide, the default cell without its
    /// backquotes.
    default: Option<String>,
}

/// The finished lab's options from its `--help`, `--help` and `--version` left out.
fn help_options(help: &str) -> Vec<OptionRow> {
    let option_line = regex::Regex::new(r"^\s+(?:-\w, )?--([a-z0-9-]+)(?: <([A-Z_]+)>)?\s*$").unwrap();
    let default = regex::Regex::new(r"\[default: ([^\]]*)\]").unwrap();
    let mut options: Vec<OptionRow> = Vec::new();
    for line in help.lines() {
        if let Some(c) = option_line.captures(line) {
            options.push(OptionRow {
                name: c[1].to_string(),
                value: c.get(2).map(|v| v.as_str().to_string()),
                default: None,
            });
        } else if let (Some(last), Some(d)) = (options.last_mut(), default.captures(line)) {
            last.default = Some(d[1].to_string());
        }
    }
    options.retain(|o| o.name != "help" && o.name != "version");
    options
}

/// The rows of every table of options in the guide's page, in order.
fn guide_options(page: &str) -> Vec<OptionRow> {
    let mut options = Vec::new();
    let mut lines = page.lines();
    while lines.by_ref().any(|l| l.trim() == "| option | default | meaning |") {
        for row in lines.by_ref().skip(1).take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let [_, option, default, _meaning, _] = cells[..] else {
                panic!("{GUIDE_PAGE}: a row of three cells expected: {row:?}")
            };
            let option = option.trim_matches('`');
            let mut words = option.split_whitespace();
            let name = words.next().and_then(|n| n.strip_prefix("--"));
            let name = name.unwrap_or_else(|| panic!("{GUIDE_PAGE}: not an option in {row:?}"));
            options.push(OptionRow {
                name: name.to_string(),
                value: words.next().map(str::to_string),
                default: Some(default.trim_matches('`').to_string()),
            });
        }
    }
    options
}

/// The guide's rows agree with `--help`: same names in the same order; a default clap
/// shows is the guide's default; a flag's default is "off"; a value name the guide
/// gives is clap's.
fn differences(help: &[OptionRow], guide: &[OptionRow]) -> Vec<String> {
    let names = |o: &[OptionRow]| o.iter().map(|o| format!("--{}", o.name)).collect::<Vec<_>>();
    if names(help) != names(guide) {
        return vec![format!(
            "the guide lists {:?}\nbut the finished lab has {:?}",
            names(guide),
            names(help)
        )];
    }
    let mut found = Vec::new();
    for (h, g) in help.iter().zip(guide) {
        let expected = match (&h.value, &h.default) {
            (_, Some(d)) => Some(d.as_str()),
            (None, None) => Some("off"),
            (Some(_), None) => None, // no default: the guide says in words what happens
        };
        if let Some(expected) = expected {
            if g.default.as_deref() != Some(expected) {
                found.push(format!(
                    "--{}: default {:?} in the guide, {expected:?} in --help",
                    h.name, g.default
                ));
            }
        }
        if g.value.is_some() && g.value != h.value {
            found.push(format!("--{}: value {:?} in the guide, {:?} in --help", h.name, g.value, h.value));
        }
    }
    found
}

#[test]
fn the_guide_lists_every_option_of_the_finished_lab() {
    // As a plain `cargo build` runs: the build `cargo test` made is reused, not redone.
    let mut build = child_process::cargo();
    build.current_dir(root()).args(["build", "-q", "-p", "solution_11"]);
    assert!(child_process::status(build).expect("run cargo build").success(), "building solution_11 failed");
    let out =
        Command::new(target_dir().join("debug/solution_11")).arg("--help").output().expect("run solution_11");
    assert!(out.status.success(), "solution_11 --help: {}", String::from_utf8_lossy(&out.stderr));
    let help = help_options(&String::from_utf8(out.stdout).unwrap());
    assert!(help.len() > 20, "too few options read from --help: {help:?}");
    let page = std::fs::read_to_string(root().join(GUIDE_PAGE)).unwrap();
    let problems = differences(&help, &guide_options(&page));
    assert!(
        problems.is_empty(),
        "{GUIDE_PAGE}'s tables of options differ from solution_11 --help:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_wrong_default_a_missing_option_and_a_wrong_value_name_are_found() {
    let help = "Options:\n      --batch-size <BATCH_SIZE>\n          Images [default: 32]\n      \
                --sync-batch-norm\n          Sync\n      --mirror <URL>\n          Where from\n  \
                -h, --help\n          Print help\n";
    let help = help_options(help);
    let table = |rows: &str| format!("| option | default | meaning |\n|---|---|---|\n{rows}\n\nText.\n");
    let sound = table("| `--batch-size` | 32 | a |\n| `--sync-batch-norm` | off | b |\n| `--mirror URL` | public mirrors | c |");
    assert_eq!(differences(&help, &guide_options(&sound)), Vec::<String>::new());

    let wrong_default = sound.replace("| 32 |", "| 64 |");
    assert_eq!(
        differences(&help, &guide_options(&wrong_default)),
        ["--batch-size: default Some(\"64\") in the guide, \"32\" in --help"]
    );
    let missing = sound.replace("| `--sync-batch-norm` | off | b |\n", "");
    assert!(differences(&help, &guide_options(&missing))[0].contains("\"--sync-batch-norm\""));
    let value = sound.replace("`--mirror URL`", "`--mirror ADDRESS`");
    assert_eq!(
        differences(&help, &guide_options(&value)),
        ["--mirror: value Some(\"ADDRESS\") in the guide, Some(\"URL\") in --help"]
    );
}
