use std::fs;
use std::path::{Path, PathBuf};

use lab_course::{CourseError, Version};
use step_reset::{reset, ResetError, ResetOutcome};
use tempfile::TempDir;

/// The repository this crate lives in.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the crate lies in crates/")
}

/// A repository root holding just what rendering the starters needs, plus `steps/step_03`.
fn minimal_repo() -> TempDir {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    fs::create_dir_all(root.join("course/lab")).unwrap();
    for entry in fs::read_dir(repo_root().join("course/lab")).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), root.join("course/lab").join(entry.file_name())).unwrap();
    }
    fs::copy(repo_root().join("rustfmt.toml"), root.join("rustfmt.toml")).unwrap();
    for (rel, content) in lab_course::crate_files(root, Version::Starter(3)).unwrap() {
        fs::create_dir_all(root.join(&rel).parent().unwrap()).unwrap();
        fs::write(root.join(rel), content).unwrap();
    }
    scratch
}

fn main_rs() -> PathBuf {
    PathBuf::from("steps/step_03/src/main.rs")
}

/// Edits main.rs as a student would, and adds build output that backups must skip.
fn tamper(root: &Path) -> String {
    let edited = fs::read_to_string(root.join(main_rs())).unwrap() + "\n// my work in progress\n";
    fs::write(root.join(main_rs()), &edited).unwrap();
    fs::create_dir_all(root.join("steps/step_03/target/debug")).unwrap();
    fs::write(root.join("steps/step_03/target/debug/step_03"), "binary").unwrap();
    edited
}

#[test]
fn declined_changes_nothing() {
    let repo = minimal_repo();
    let root = repo.path();
    let edited = tamper(root);
    let mut questions = Vec::new();
    let outcome = reset(root, 3, &mut |q: &str| {
        questions.push(q.to_string());
        false
    })
    .unwrap();
    assert_eq!(outcome, ResetOutcome::Declined);
    assert_eq!(questions.len(), 1);
    assert!(
        questions[0].contains("steps/step_03") && questions[0].contains("src/main.rs"),
        "{}",
        questions[0]
    );
    assert!(!questions[0].contains("Cargo.toml"), "only differing files are named: {}", questions[0]);
    assert_eq!(fs::read_to_string(root.join(main_rs())).unwrap(), edited);
    assert!(!root.join(".checker").exists(), "no backup when declined");
}

#[test]
fn accepted_restores_the_starter_and_keeps_a_backup() {
    let repo = minimal_repo();
    let root = repo.path();
    let edited = tamper(root);
    let outcome = reset(root, 3, &mut |_| true).unwrap();
    let ResetOutcome::Reset { backup, files } = outcome else { panic!("expected a reset, got {outcome:?}") };
    assert_eq!(files, [main_rs()]);
    assert!(backup.starts_with(root.join(".checker/backups")), "{}", backup.display());
    let name = backup.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("step_03-"), "{name}");

    assert_eq!(fs::read_to_string(backup.join("src/main.rs")).unwrap(), edited);
    assert!(backup.join("Cargo.toml").is_file() && backup.join("build.rs").is_file());
    assert!(!backup.join("target").exists(), "build output is not backed up");
    let starter = lab_course::crate_files(root, Version::Starter(3)).unwrap();
    for (rel, content) in &starter {
        assert_eq!(&fs::read_to_string(root.join(rel)).unwrap(), content, "{}", rel.display());
    }
    let leftovers: Vec<_> =
        fs::read_dir(root.join("steps/step_03/src")).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");

    // A second reset in the same second gets its own backup.
    tamper(root);
    let ResetOutcome::Reset { backup: second, .. } = reset(root, 3, &mut |_| true).unwrap() else {
        panic!("expected a second reset")
    };
    assert_ne!(second, backup);
    assert_eq!(fs::read_to_string(backup.join("src/main.rs")).unwrap(), edited, "first backup intact");
}

#[test]
fn a_pristine_crate_asks_nothing() {
    let repo = minimal_repo();
    let outcome = reset(repo.path(), 3, &mut |q| panic!("asked {q:?}")).unwrap();
    assert_eq!(outcome, ResetOutcome::AlreadyPristine);
    assert!(!repo.path().join(".checker").exists());
}

#[test]
fn a_deleted_file_is_restored() {
    let repo = minimal_repo();
    let root = repo.path();
    fs::remove_file(root.join("steps/step_03/build.rs")).unwrap();
    let outcome = reset(root, 3, &mut |_| true).unwrap();
    let ResetOutcome::Reset { files, .. } = outcome else { panic!("expected a reset") };
    assert_eq!(files, [PathBuf::from("steps/step_03/build.rs")]);
    assert!(root.join("steps/step_03/build.rs").is_file());
}

#[test]
fn bad_steps_and_a_broken_course_are_errors() {
    let repo = minimal_repo();
    let past = lab_course::LAST_STEP + 1;
    let err = reset(repo.path(), past, &mut |_| true).unwrap_err();
    assert!(
        matches!(err, ResetError::NoSuchStep(CourseError::NoSuchStep { step }) if step == past),
        "{err:?}"
    );
    fs::remove_file(repo.path().join("course/lab/main.rs")).unwrap();
    let err = reset(repo.path(), 3, &mut |_| true).unwrap_err();
    assert!(matches!(err, ResetError::Course { step: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("course/lab"), "{err}");
}
