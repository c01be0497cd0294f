//! `checker autograder gradescope --step N --out DIR`: what an instructor uploads to
//! Gradescope. Its "Autograder Specifications" (gradescope/autograder_samples,
//! docs/specs.md) ask for a zip with `setup.sh` (run once, as root, to build the image)
//! and `run_autograder` (run per submission) at its root; Gradescope unpacks it in
//! /autograder/source. Here the zip also holds the course, `ddp-lab/`: the repository
//! at its current commit (`git archive HEAD`), so every submission is graded by the
//! checker and checks of that commit, whatever the student hands in.
//!
//! The scripts are templates beside this crate (`checker/autograder/gradescope/`);
//! run_autograder calls `checker grade step N --crate <submission> --gradescope
//! <results.json>`, so finding the program in a submission and writing the results
//! are the checker's own, tested code.
use std::io::{Cursor, Write};
use std::path::Path;
use std::process::Command;

use crate::grade::Graded;

const SETUP: &str = include_str!("../autograder/gradescope/setup.sh");
const RUN_AUTOGRADER: &str = include_str!("../autograder/gradescope/run_autograder");
/// The course's folder inside the zip (and in /autograder/source).
pub const COURSE_DIR: &str = "ddp-lab";

/// Writes `out/autograder.zip`, with `setup.sh` and `run_autograder` beside it (to read);
/// returns what to tell the instructor.
pub fn gradescope(root: &Path, graded: Graded, out: &Path) -> Result<String, String> {
    let commit = git(root, &["rev-parse", "HEAD"]).map_err(|e| {
        format!(
            "{}: not a git checkout ({e}); the autograder carries the course at a commit \
             (`git archive HEAD`): run this in a clone of the course",
            root.display()
        )
    })?;
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let changed = git(root, &["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    if !changed.is_empty() {
        eprintln!(
            "warning: the course has uncommitted changes; the autograder holds commit {commit} without them \
             (commit them first to include them)"
        );
    }
    let course = git(root, &["archive", "--format=zip", &format!("--prefix={COURSE_DIR}/"), "HEAD"])
        .map_err(|e| format!("git archive HEAD failed in {}: {e}", root.display()))?;
    let setup = fill(SETUP, graded, &commit);
    let run = fill(RUN_AUTOGRADER, graded, &commit);
    std::fs::create_dir_all(out)
        .map_err(|e| format!("--out {}: {e}; name a folder you can write", out.display()))?;
    let zip_path = out.join("autograder.zip");
    let written = |e: &dyn std::fmt::Display, path: &Path| format!("cannot write {}: {e}", path.display());
    let executable = atomic_file::Writer::new().mode(0o755);
    let mut pending =
        atomic_file::Writer::new().mode(0o644).create(&zip_path).map_err(|e| written(&e, &zip_path))?;
    pack(pending.file(), &setup, &run, course).map_err(|e| written(&e, &zip_path))?;
    pending.commit().map_err(|e| written(&e, &zip_path))?;
    for (name, text) in [("setup.sh", &setup), ("run_autograder", &run)] {
        let path = out.join(name);
        executable.write(&path, text).map_err(|e| written(&e, &path))?;
    }
    Ok(format!(
        "wrote {zip} (course commit {commit}, {what}), and its setup.sh and run_autograder beside it\n\
         upload {zip} on the Gradescope assignment's \"Configure Autograder\" page; each step is worth 10 points \
         ({max} in all)",
        zip = zip_path.display(),
        what = graded.describe(),
        max = graded.max_points()
    ))
}

/// A template with what is graded and the commit filled in: `@GRADE@` is the words after
/// `grade` (`step 7`, `all`), `@STEP@`/`@STEP2@` the step whose reference solution setup
/// checks (the last step's for `all`, the finished lab).
fn fill(template: &str, graded: Graded, commit: &str) -> String {
    let step = graded.run_as();
    let grade = match graded {
        Graded::Step(step) => format!("step {step}"),
        Graded::Final => "all".to_string(),
    };
    template
        .replace("@GRADE@", &grade)
        .replace("@STEP2@", &format!("{step:02}"))
        .replace("@STEP@", &step.to_string())
        .replace("@COMMIT@", commit)
}

fn git(root: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(out.stdout)
}

/// The autograder zip: the two scripts (executable) at its root, then the course's
/// entries copied from git's archive as they are.
fn pack(file: &mut std::fs::File, setup: &str, run: &str, course: Vec<u8>) -> zip::result::ZipResult<()> {
    let mut zip = zip::ZipWriter::new(file);
    let script = zip::write::FileOptions::default().unix_permissions(0o755);
    for (name, text) in [("setup.sh", setup), ("run_autograder", run)] {
        zip.start_file(name, script)?;
        zip.write_all(text.as_bytes())?;
    }
    let mut archive = zip::ZipArchive::new(Cursor::new(course))?;
    for index in 0..archive.len() {
        zip.raw_copy_file(archive.by_index_raw(index)?)?;
    }
    zip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_name_the_step_and_what_a_trial_run_sets() {
        let run = fill(RUN_AUTOGRADER, Graded::Step(7), "abc123");
        assert!(run.contains("grade step 7 --crate \"$AUTOGRADER_ROOT/submission\""), "{run}");
        assert!(run.contains("course commit abc123"), "{run}");
        assert!(!run.contains('@'), "a placeholder left: {run}");
        for env in [checker::COURSE_ENV, checker::CHECKER_ENV] {
            assert!(run.contains(&format!("${{{env}:-")), "run_autograder must honour {env}");
        }
        assert!(run.contains("${AUTOGRADER_ROOT:-/autograder}"));
        assert!(run.contains(&format!("$AUTOGRADER_ROOT/source/{COURSE_DIR}")));
        let setup = fill(SETUP, Graded::Step(7), "abc123");
        assert!(setup.contains("--crate solutions/step_07 "), "{setup}");
        assert!(setup.contains(&format!("$AUTOGRADER_ROOT/source/{COURSE_DIR}")));
        assert!(!setup.contains('@'), "a placeholder left: {setup}");
    }

    #[test]
    fn the_finished_program_is_graded_on_every_step_and_setup_checks_the_last_solution() {
        let run = fill(RUN_AUTOGRADER, Graded::Final, "abc123");
        assert!(run.contains("grade all --crate \"$AUTOGRADER_ROOT/submission\""), "{run}");
        assert!(!run.contains("grade step"), "{run}");
        let setup = fill(SETUP, Graded::Final, "abc123");
        assert!(setup.contains("verify step 11 --crate solutions/step_11 "), "{setup}");
        assert!(!setup.contains('@'), "a placeholder left: {setup}");
    }
}
