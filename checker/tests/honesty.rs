//! The checker proves it can fail: every solution passes its step (and all earlier
//! steps' checks), and untouched starters fail their own step, on a check that step
//! introduces. Runs the real `checker` binary on the repository's crates
//! (the drift test keeps those equal to what course/lab renders).
mod common;

use std::process::Command;

use common::sandbox_works;

struct Verdict {
    code: Option<i32>,
    output: String,
}

fn verify(step: u8, solutions: bool) -> Verdict {
    verify_with(step, solutions, &[])
}

fn verify_with(step: u8, solutions: bool, more: &[&str]) -> Verdict {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_checker"));
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).args(["verify", "step", &step.to_string()]);
    cmd.args(more);
    // A fixed seed per step: reproducible here, and different variations across steps.
    cmd.args(["--seed", &(1000 + u64::from(step)).to_string()]);
    if solutions {
        cmd.arg("--solutions");
        // The solutions are checked in the sandbox that grading uses: honest programs
        // must pass every check inside it. (The starters run unconfined, the default
        // for a student's own steps, so both ways stay proven.)
        if sandbox_works() {
            cmd.arg("--sandbox");
        }
    }
    // Keep the starters' verdicts out of the repository's own progress file.
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let progress = scratch.path().join("progress.json");
    cmd.env(checker::PROGRESS_FILE_ENV, &progress);
    // Through the launcher: a test binary that dies takes the checker and its ranks along.
    let out = child_process::output(cmd, None).expect("run the checker");
    Verdict { code: out.status.code(), output: format!("{}{}", out.stdout, out.stderr) }
}

fn solution_passes(step: u8) {
    let v = verify(step, true);
    assert_eq!(v.code, Some(0), "solution {step} must pass every check:\n{}", v.output);
    assert!(!v.output.contains("error["), "{}", v.output);
}

fn starter_fails_its_own_step(step: u8) {
    let v = verify(step, false);
    assert_eq!(v.code, Some(1), "the untouched starter of step {step} must fail:\n{}", v.output);
    // A failing check's report begins as rustc's errors do: `error[id]: step N: ...`.
    let own = format!("]: step {step}: ");
    assert!(
        v.output.lines().any(|l| l.starts_with("error[") && l.contains(&own)),
        "the starter of step {step} must fail a check of step {step}:\n{}",
        v.output
    );
}

macro_rules! solutions_pass {
    ($($step:literal: $name:ident;)*) => {$(
        #[test]
        fn $name() {
            solution_passes($step);
        }
    )*};
}

// Every solution's verdicts are judged from a recorded run of today's solution as well
// (checks::fixtures, the `solution-NN` cases; tests/record_fixtures.rs fails when a
// solution changed since). These run live, in the grading sandbox, one per kind of run
// the checker makes: a single process (step 0); one process per rank with the help and
// bad-value runs (step 1); and the last step, whose verification runs every check of the
// course. The finished lab (step 11: ranks on simulated nodes, the local mirror, a late
// rank, the collectives traced, self-spawning ranks, the comparison with one rank, a
// failing rank, the quick evaluation) is verified live and sandboxed by autograder.rs's
// `the_finished_programs_autograder_grades_a_main_rs_on_every_step`, which grades that
// program on every step: not twice.
solutions_pass! {
    0: solution_00_passes;
    1: solution_01_passes;
}

/// The last step's solution passes every check of the course, live, in the grading
/// sandbox, judged as a binary built elsewhere (`--prebuilt`, as a GPU bundle carries
/// it): step 12's resumed job starts from the stopped job's checkpoint, carried between
/// sandboxed jobs; the pipeline's, FSDP's, tensor parallelism's and every later step's
/// runs. One run for both ways of judging (prebuilt.rs proves a prebuilt binary gets the
/// verdicts of a built one on a cheap step).
#[test]
fn the_last_solution_passes_sandboxed_and_prebuilt() {
    let step = lab_course::LAST_STEP;
    let package = lab_course::Version::Solution(step).package_name();
    let mut build = child_process::cargo();
    build.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).args(["build", "-q", "-p", &package]);
    assert!(child_process::status(build).expect("run cargo build").success(), "building {package}");
    let dir = tempfile::tempdir().unwrap();
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_checker")).with_file_name(&package);
    std::fs::copy(&built, dir.path().join(&package)).unwrap_or_else(|e| panic!("copy {package}: {e}"));
    let prebuilt = dir.path().to_str().unwrap();
    let v = verify_with(step, true, &["--prebuilt", prebuilt]);
    assert_eq!(v.code, Some(0), "solution {step} must pass every check:\n{}", v.output);
    assert!(!v.output.contains("error["), "{}", v.output);
    let judged = format!("judging {prebuilt}/{package}, built elsewhere");
    assert!(v.output.contains(&judged), "not the copy judged:\n{}", v.output);
}

// Every starter's verdicts are judged from a recorded run of today's starter in the
// checker's unit tests (checks::fixtures, the `starter-NN` cases; tests/record_fixtures.rs
// fails when a starter changed since). Three still run live, one per kind of run the
// checker makes: one process per rank with the help and bad-value runs (step 1), the
// ranks downloading from the local mirror (step 5), a late rank and the collectives
// traced (step 8). (Step 10's starter, one process per node that never spawns, waits out
// the rendezvous timeout: a minute of CI for what its fixture says as well.)

#[test]
fn starter_01_fails() {
    starter_fails_its_own_step(1);
}

#[test]
fn starter_05_fails() {
    starter_fails_its_own_step(5);
}

#[test]
fn starter_08_fails() {
    starter_fails_its_own_step(8);
}

#[test]
fn list_shows_the_verdicts_of_verify() {
    let progress = std::env::temp_dir().join(format!("checker-list-{}.json", std::process::id()));
    std::fs::write(&progress, "{\"step_00\": \"done\", \"step_01\": \"failing\"}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_checker"))
        .arg("list")
        .env(checker::PROGRESS_FILE_ENV, &progress)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("step  0  done"), "{text}");
    assert!(text.contains("step  1  failing"), "{text}");
    assert!(text.contains("step  2  not tried"), "{text}");
    assert!(text.contains(&format!("1/{} steps done", lab_course::STEPS.len())), "{text}");
    let _ = std::fs::remove_file(&progress);
}
