//! `autograder gradescope`: the zip an instructor uploads, and its run_autograder run
//! here as Gradescope runs it (AUTOGRADER_ROOT in a folder of the test's, with the
//! course and the checker of this build) on submissions as students hand them in: a
//! .zip of a crate, and a crate folder one level down.
mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use checker::{BWRAP_ENV, CHECKER_ENV, COURSE_ENV, PROGRESS_FILE_ENV};
use common::{checker_with, formats, repo, sandbox_works};
use serde_json::Value;

/// Writes the step 0 autograder into `out`.
fn make_autograder(out: &Path) {
    make_autograder_for("0", out);
}

#[test]
fn checks_hidden_until_due_are_named_in_run_autograder_and_unknown_ones_refused() {
    let out = tempfile::tempdir().unwrap();
    let v = checker_with(
        &["autograder", "gradescope", "--step", "0", "--hidden-until-due", "trains", "--out"],
        &[out.path()],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    let run = std::fs::read_to_string(out.path().join("run_autograder")).unwrap();
    assert!(run.contains("--gradescope \"$RESULTS\" \\\n    --hidden-until-due trains\n"), "{run}");
    let v = checker_with(
        &["autograder", "gradescope", "--step", "0", "--hidden-until-due", "no-such-check", "--out"],
        &[out.path()],
    );
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("there is no check `no-such-check`") && v.stderr.contains("list --checks"));
}

/// Writes the autograder for `--step step` into `out`.
fn make_autograder_for(step: &str, out: &Path) {
    let v = checker_with(&["autograder", "gradescope", "--step", step, "--out"], &[out]);
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(v.stdout.contains("autograder.zip"), "{}", v.stdout);
}

#[test]
fn the_zip_holds_the_scripts_at_its_root_and_the_course() {
    let out = tempfile::tempdir().unwrap();
    make_autograder(out.path());
    let mut zip =
        zip::ZipArchive::new(std::fs::File::open(out.path().join("autograder.zip")).unwrap()).unwrap();
    let names: Vec<String> = zip.file_names().map(String::from).collect();
    for needed in [
        "setup.sh",
        "run_autograder",
        "ddp-lab/Cargo.toml",
        "ddp-lab/course/lab/main.rs",
        "ddp-lab/checker/src/main.rs",
        "ddp-lab/scripts/setup.sh",
    ] {
        assert!(names.iter().any(|n| n == needed), "{needed} missing from the zip: {names:?}");
    }
    // The course as committed: no build output, runs, or links to this machine's caches.
    for name in &names {
        assert!(
            !["ddp-lab/target/", "ddp-lab/.checker/", "ddp-lab/.libtorch", "ddp-lab/.venv"]
                .iter()
                .any(|p| name.starts_with(p)),
            "{name} should not be in the zip"
        );
    }
    for script in ["setup.sh", "run_autograder"] {
        let mut entry = zip.by_name(script).unwrap();
        assert_eq!(entry.unix_mode().map(|m| m & 0o777), Some(0o755), "{script} must be executable");
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("#!/usr/bin/env bash\n"), "{script}");
        // The same script beside the zip, to read.
        let beside = out.path().join(script);
        assert_eq!(std::fs::read_to_string(&beside).unwrap(), text);
        assert_eq!(std::fs::metadata(&beside).unwrap().permissions().mode() & 0o777, 0o755);
    }
    let run = std::fs::read_to_string(out.path().join("run_autograder")).unwrap();
    assert!(run.contains("grade step 0 --crate \"$AUTOGRADER_ROOT/submission\""), "{run}");
    let setup = std::fs::read_to_string(out.path().join("setup.sh")).unwrap();
    assert!(
        setup.contains("bash scripts/setup.sh") && setup.contains("--crate solutions/step_00"),
        "{setup}"
    );
}

/// A fresh AUTOGRADER_ROOT in a stable place (the submission's build is reused).
fn autograder_root(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("submission")).unwrap();
    root
}

/// run_autograder on `root`'s submission, as Gradescope runs it; its results.json.
fn run_autograder(script: &Path, root: &Path, env: &[(&str, &str)]) -> Value {
    let progress = root.join("progress.json");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("AUTOGRADER_ROOT", root)
        .env(COURSE_ENV, repo())
        .env(CHECKER_ENV, env!("CARGO_BIN_EXE_checker"))
        .env(PROGRESS_FILE_ENV, &progress)
        .envs(env.iter().copied());
    let out = child_process::output(cmd, None).expect("run run_autograder");
    assert_eq!(
        out.status.code(),
        Some(0),
        "run_autograder exits 0 once results.json is made:\n{}{}",
        out.stdout,
        out.stderr
    );
    let results = root.join("results/results.json");
    let text = std::fs::read_to_string(&results)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}{}", results.display(), out.stdout, out.stderr));
    let report: Value = serde_json::from_str(&text).unwrap();
    let problems = formats::gradescope(&report);
    assert!(problems.is_empty(), "not Gradescope's results.json: {problems:#?}\n{report:#}");
    report
}

#[test]
fn a_zipped_crate_is_graded_into_results_json() {
    let out = tempfile::tempdir().unwrap();
    make_autograder(out.path());
    let root = autograder_root("autograder-zip");
    // What a student zips: their crate folder, with its manifest.
    let mut zip = zip::ZipWriter::new(std::fs::File::create(root.join("submission/step_00.zip")).unwrap());
    for (name, from) in [
        ("step_00/src/main.rs", "solutions/step_00/src/main.rs"),
        ("step_00/Cargo.toml", "solutions/step_00/Cargo.toml"),
    ] {
        zip.start_file(name, zip::write::FileOptions::default()).unwrap();
        zip.write_all(&std::fs::read(repo().join(from)).unwrap()).unwrap();
    }
    zip.finish().unwrap();
    let report = run_autograder(&out.path().join("run_autograder"), &root, &[]);
    assert_eq!(report["score"], 10.0, "{report:#}");
    let output = report["output"].as_str().unwrap();
    assert!(output.contains("Graded: step_00.zip: step_00/src/main.rs"), "{output}");
    assert!(report["tests"].as_array().unwrap().iter().all(|t| t["status"] == "passed"), "{report:#}");
    if sandbox_works() {
        assert_eq!(report["extra_data"]["sandbox"]["tool"], "bubblewrap", "{report:#}");
    }
}

#[test]
fn a_nested_crate_is_graded_unsandboxed_where_no_sandbox_can_be_made() {
    let out = tempfile::tempdir().unwrap();
    make_autograder(out.path());
    let root = autograder_root("autograder-nested");
    // The untouched starter, in a folder of its own, as a student's upload may hold it.
    let krate = root.join("submission/my-step-00");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::copy(repo().join("steps/step_00/src/main.rs"), krate.join("src/main.rs")).unwrap();
    // As in a container that forbids the namespaces bubblewrap needs.
    let report =
        run_autograder(&out.path().join("run_autograder"), &root, &[(BWRAP_ENV, "/nonexistent/bwrap")]);
    assert_eq!(report["score"], 5.0, "the starter passes trains, not imports-dist: {report:#}");
    let status: Vec<(&str, &str)> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(status, [("step 0: imports-dist", "failed"), ("step 0: trains", "passed")]);
    let output = report["output"].as_str().unwrap();
    assert!(output.contains("Graded: my-step-00/src/main.rs"), "{output}");
    // Said where the student reads it, and recorded.
    assert!(output.contains("Ran in no sandbox, since none can be made here"), "{output}");
    assert_eq!(report["extra_data"]["sandbox"], "none");
    let why = report["extra_data"]["unsandboxed_because"].as_str().unwrap();
    assert!(why.contains("/nonexistent/bwrap"), "{why}");
}

#[test]
fn the_finished_programs_autograder_grades_a_main_rs_on_every_step() {
    let out = tempfile::tempdir().unwrap();
    make_autograder_for("all", out.path());
    let setup = std::fs::read_to_string(out.path().join("setup.sh")).unwrap();
    assert!(setup.contains("verify step 11 --crate solutions/step_11 "), "{setup}");
    let root = autograder_root("autograder-all");
    // A bare main.rs, the finished lab's.
    std::fs::copy(repo().join("solutions/step_11/src/main.rs"), root.join("submission/main.rs")).unwrap();
    let report = run_autograder(&out.path().join("run_autograder"), &root, &[]);
    assert_eq!(report["score"], 120.0, "{report:#}");
    let tests = report["tests"].as_array().unwrap();
    for step in 0..=11 {
        let prefix = format!("step {step}: ");
        let of_step: Vec<&Value> =
            tests.iter().filter(|t| t["name"].as_str().unwrap().starts_with(&prefix)).collect();
        assert!(!of_step.is_empty(), "no test of step {step}: {report:#}");
        assert!(of_step.iter().all(|t| t["status"] == "passed"), "{report:#}");
    }
    // Graded in the sandbox where one can be made: honesty.rs leaves the finished lab's
    // live, sandboxed verification to this test.
    if sandbox_works() {
        assert_eq!(report["extra_data"]["sandbox"]["tool"], "bubblewrap", "{report:#}");
    }
    // The finished lab's throughput, for the class's leaderboard.
    let board = &report["leaderboard"][0];
    assert_eq!(board["name"], "Images/sec", "{report:#}");
    assert!(board["value"].as_f64().is_some_and(|v| v > 0.0), "{report:#}");
}
