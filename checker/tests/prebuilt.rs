//! `--prebuilt DIR`: the checker judges binaries built elsewhere (copied into a folder,
//! as a GPU bundle carries them) exactly as it judges the ones it builds, and refuses a
//! binary of another course revision (exit 2, naming both revisions). The last step's
//! solution, every check of the course, is judged prebuilt (and sandboxed) by
//! honesty.rs's `the_last_solution_passes_sandboxed_and_prebuilt`.
mod common;

use std::path::{Path, PathBuf};

use common::checker;

/// The build's binaries: beside the checker the tests run (target/debug).
fn built(package: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_checker")).with_file_name(package)
}

/// Every check's verdict in a report: ("PASS", "step 14 fsdp-bytes") and so on, in order.
fn verdicts(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|line| {
            let (verdict, rest) = line.split_once(' ')?;
            ["PASS", "FAIL", "????", "ERR!"].contains(&verdict).then_some(())?;
            let (check, _) = rest.split_once(':')?;
            Some((verdict.to_string(), check.split_whitespace().collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// `DIR/<package>`, a copy of the build's binary (another place, as on another machine).
fn copied(dir: &Path, package: &str) -> PathBuf {
    let to = dir.join(package);
    std::fs::copy(built(package), &to).unwrap_or_else(|e| panic!("copy {package}: {e}"));
    to
}

/// The checker's own course revision, as `--version` says it.
fn own_revision() -> String {
    let version = checker(&["--version"]).stdout;
    let revision = version.split("course revision ").nth(1).unwrap_or_default();
    let revision: String = revision.chars().take_while(char::is_ascii_hexdigit).collect();
    assert_eq!(revision.len(), 16, "no course revision in `checker --version`: {version}");
    revision
}

/// The same verdicts, check by check, from the built run and from a copy of its binary.
fn same_verdicts_built_and_prebuilt(step: u8, seed: &str) {
    let target = ["verify", "step", &step.to_string(), "--solutions", "--seed", seed];
    // Built first: the checker builds solution_NN, whose binary is then copied.
    let built_run = checker(&target);
    assert_eq!(built_run.code, Some(0), "the built run failed:\n{}", built_run.output());
    let dir = tempfile::tempdir().unwrap();
    copied(dir.path(), &lab_course::Version::Solution(step).package_name());
    let prebuilt_dir = dir.path().to_str().unwrap();
    let prebuilt_run = checker(&[&target[..], &["--prebuilt", prebuilt_dir]].concat());
    assert_eq!(prebuilt_run.code, Some(0), "the prebuilt run failed:\n{}", prebuilt_run.output());
    let (a, b) = (verdicts(&built_run.stdout), verdicts(&prebuilt_run.stdout));
    assert!(
        a.iter().any(|(_, check)| check.starts_with(&format!("step {step} "))),
        "no check of step {step} in the report:\n{}",
        built_run.stdout
    );
    assert_eq!(a, b, "built:\n{}\nprebuilt:\n{}", built_run.stdout, prebuilt_run.stdout);
    let judged = format!(
        "judging {prebuilt_dir}/{}, built elsewhere",
        lab_course::Version::Solution(step).package_name()
    );
    assert!(prebuilt_run.stdout.contains(&judged), "not the copy judged:\n{}", prebuilt_run.stdout);
    assert!(!built_run.stdout.contains("built elsewhere"), "{}", built_run.stdout);
}

#[test]
fn a_cheap_step_prebuilt_is_judged_and_graded_as_built_and_another_revision_is_refused() {
    same_verdicts_built_and_prebuilt(2, "7");
    let dir = tempfile::tempdir().unwrap();
    let bin = copied(dir.path(), "solution_02");
    let prebuilt = ["--prebuilt", dir.path().to_str().unwrap()];

    // grade takes it too (unsandboxed here: the sandbox is tested elsewhere).
    let grade = checker(
        &[&["grade", "step", "2", "--solutions", "--unsandboxed", "--seed", "7"][..], &prebuilt].concat(),
    );
    assert_eq!(grade.code, Some(0), "{}", grade.output());
    assert!(grade.stdout.contains("10/10"), "step 2 not graded full marks:\n{}", grade.output());

    // Another revision: the same program with another revision in its section.
    let own = own_revision();
    let other = if own == "0123456789abcdef" { "fedcba9876543210" } else { "0123456789abcdef" };
    let bytes = std::fs::read(&bin).unwrap();
    let at: Vec<usize> =
        bytes.windows(16).enumerate().filter(|(_, w)| *w == own.as_bytes()).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "the revision {own} is not in solution_02 once, but {} times", at.len());
    let mut patched = bytes;
    patched[at[0]..at[0] + 16].copy_from_slice(other.as_bytes());
    std::fs::write(&bin, patched).unwrap();
    for args in [
        &["verify", "step", "2", "--solutions"][..],
        &["grade", "step", "2", "--solutions", "--unsandboxed"][..],
    ] {
        let refused = checker(&[args, &prebuilt].concat());
        assert_eq!(refused.code, Some(2), "{args:?}:\n{}", refused.output());
        assert!(
            refused.stderr.contains(&format!("course revision {other}"))
                && refused.stderr.contains(&format!("course revision {own}")),
            "{args:?}: both revisions must be named:\n{}",
            refused.stderr
        );
        assert!(!refused.stdout.contains("PASS"), "{args:?}: a binary of another revision was judged");
    }

    // No revision at all (not a lab program), and no binary.
    std::fs::copy("/bin/true", &bin).unwrap();
    let unknown = checker(&[&["verify", "step", "2", "--solutions"][..], &prebuilt].concat());
    assert_eq!(unknown.code, Some(2), "{}", unknown.output());
    assert!(unknown.stderr.contains("says no course revision"), "{}", unknown.stderr);
    let missing = checker(&[&["verify", "step", "2"][..], &prebuilt].concat());
    assert_eq!(missing.code, Some(2), "{}", missing.output());
    assert!(
        missing.stderr.contains("there is no step_02 in it (solution_02 is: run it with --solutions)"),
        "{}",
        missing.stderr
    );
}
