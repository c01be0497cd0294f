//! What each subcommand does, from parsed options to its outcome: `verify`, `watch`,
//! `grade` (one crate or a folder of them), `reset` and `autograder`. The checking
//! itself is the pipeline's; the points are the grade model's, the reports are
//! `formats`'; the exit codes are `Failure`'s.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cli::{parse_target, repo_root};
use crate::formats::{junit::Listing, Reports};
use crate::grade::{Confinement, Grade, StepGrade};
use crate::handed_in::{self, Refusal};
use crate::pipeline::{build_all, run_step, StepRun, StepRunOptions, Subject};
use crate::report::print_run;
use crate::{autograder, grade, sandbox, watch, Failure};

/// `checker verify`: each step's report in turn, and with `--junit` its verdicts as
/// JUnit XML; fails when a check of any failed.
pub fn verify(
    steps: Vec<u8>,
    subject: Subject,
    seed: u64,
    limit: Duration,
    keep: bool,
    (sandbox, why_none): (Option<&sandbox::Sandbox>, Option<String>),
    junit: Option<PathBuf>,
) -> Result<(), Failure> {
    let root = repo_root();
    let mut all_passed = true;
    let submission = steps.first().and_then(|&step| found_in(subject, step));
    let built = build_all(&root, &steps, subject, sandbox);
    let mut graded = Vec::new();
    for step in steps {
        let (run, grade) =
            timed_run(&root, step, subject, StepRunOptions { seed, limit, keep, built, sandbox })?;
        all_passed &= print_run(&root, step, seed, &run);
        graded.push(grade);
    }
    if let Some(path) = junit {
        let grade =
            Grade { seed, confinement: Confinement::of(sandbox, why_none), submission, steps: graded };
        let reports = Reports { junit: Some(path), ..Reports::default() };
        for path in reports.write(&grade, Listing::EveryCheck)? {
            println!("JUnit report written to {}", path.display());
        }
    }
    Failure::unless_passed(all_passed)
}

/// Runs and judges one step, timed, and grades what it found.
fn timed_run(
    root: &Path,
    step: u8,
    subject: Subject,
    options: StepRunOptions,
) -> Result<(StepRun, StepGrade), String> {
    let started = grade::unix_now();
    let clock = Instant::now();
    let run = run_step(root, step, subject, options)?;
    let grade =
        StepGrade::judged(step, &run.results, run.output.clone(), started, clock.elapsed().as_secs_f64());
    Ok((run, grade))
}

/// Where a handed-in program was found (`--crate`), for the reports.
fn found_in(subject: Subject, step: u8) -> Option<String> {
    match subject {
        Subject::Elsewhere(given) => handed_in::find(given, step).ok().map(|h| h.found),
        Subject::Step | Subject::Solution => None,
    }
}

/// `checker watch`: verify, wait for a saved change under the crate's src/, repeat.
pub fn watch_step(
    step: u8,
    krate: Option<&Path>,
    seed: u64,
    limit: Duration,
    max_runs: Option<usize>,
    sandbox: Option<&sandbox::Sandbox>,
) -> Result<(), Failure> {
    let root = repo_root();
    let crate_dir = match krate {
        Some(dir) => dir.to_path_buf(),
        None => root.join(format!("steps/step_{step:02}")),
    };
    let src = crate_dir.join("src");
    if !src.join("main.rs").is_file() {
        return Err(Failure::CannotRun(format!(
            "{} has no src/main.rs to watch{}",
            crate_dir.display(),
            if krate.is_none() {
                format!("; restore it with `cargo checker reset step {step}`")
            } else {
                String::new()
            }
        )));
    }
    let subject = match krate {
        Some(dir) => Subject::Elsewhere(dir),
        None => Subject::Step,
    };
    let clear = std::io::stdout().is_terminal();
    let mut snapshot = watch::Snapshot::of(&src);
    let mut done = 0usize;
    loop {
        let options = StepRunOptions { seed, limit, keep: false, built: false, sandbox };
        let verified = run_step(&root, step, subject, options).map(|run| print_run(&root, step, seed, &run));
        done += 1;
        if max_runs.is_some_and(|n| done >= n) {
            // The last verification's outcome, as `verify` would end with it.
            return Failure::unless_passed(verified?);
        }
        let passed = verified.unwrap_or_else(|msg| {
            // A file mid-rename, a manifest being edited: say so and wait for the next save.
            eprintln!("error: {msg}");
            false
        });
        println!(
            "== {}; watching {} (seed {seed}): save a file to verify again, Ctrl-C to stop",
            if passed { "all checks pass" } else { "some checks fail" },
            src.display()
        );
        snapshot = watch::wait_for_change(&src, &snapshot);
        if clear {
            // Each run on a clean screen, as `cargo watch -c` does.
            print!("\x1b[2J\x1b[H");
        }
        println!("== change in {}: verifying step {step} again", src.display());
    }
}

/// `checker grade`: the points table, and the reports asked for.
pub fn grade(
    target: &[String],
    subject: Subject,
    seed: u64,
    limit: Duration,
    reports: &Reports,
    (sandbox, why_none): (Option<&sandbox::Sandbox>, Option<String>),
) -> Result<(), Failure> {
    let steps = if target.is_empty() { (0..12).collect() } else { parse_target(target)? };
    let confinement = Confinement::of(sandbox, why_none);
    let mut submission = None;
    if let Subject::Elsewhere(given) = subject {
        match handed_in::find(given, steps[0]) {
            Ok(found) => submission = Some(found.found),
            // What was handed in holds no program: a grade of nothing, which the
            // reports say (Gradescope shows it to the student), made like any other.
            Err(Refusal::Unusable(why)) if reports.any() => {
                eprintln!("error: {why}");
                let steps = steps.iter().map(|&step| StepGrade::not_run(step, why.clone())).collect();
                return finish_grade(Grade { seed, confinement, submission, steps }, reports);
            }
            Err(refusal) => return Err(Failure::CannotRun(refusal.message().to_string())),
        }
    }
    let root = repo_root();
    let built = build_all(&root, &steps, subject, sandbox);
    let mut graded = Vec::new();
    for step in steps {
        let options = StepRunOptions { seed, limit, keep: false, built, sandbox };
        graded.push(timed_run(&root, step, subject, options)?.1);
    }
    finish_grade(Grade { seed, confinement, submission, steps: graded }, reports)
}

/// The points table, then the reports.
fn finish_grade(grade: Grade, reports: &Reports) -> Result<(), Failure> {
    print!("{}", grade::table(&grade.steps));
    let seed = grade.seed;
    println!("(seed {seed}; repeat with --seed {seed}; details: cargo checker verify step N --seed {seed})");
    for path in reports.write(&grade, Listing::Graded)? {
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// `grade step N --crates DIR --json-dir OUT`: every submission in DIR, one report each.
pub fn grade_batch(
    step: u8,
    dir: &Path,
    out: &Path,
    seed: u64,
    limit: Duration,
    (sandbox, why_none): (Option<&sandbox::Sandbox>, Option<String>),
) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("--crates {}: {e}; name the folder of handed-in crates", dir.display()))?;
    let mut submissions: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.join("src/main.rs").is_file()).collect();
    submissions.sort();
    if submissions.is_empty() {
        return Err(Failure::CannotRun(format!(
            "--crates {}: no submission in it (a subdirectory holding src/main.rs)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("--json-dir {}: {e}", out.display()))?;
    let root = repo_root();
    let confinement = Confinement::of(sandbox, why_none);
    println!("submission  points  status");
    for krate in &submissions {
        let name = krate.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let options = StepRunOptions { seed, limit, keep: false, built: false, sandbox };
        let graded = match timed_run(&root, step, Subject::Elsewhere(krate), options) {
            Ok((_, graded)) => graded,
            // One submission that cannot be graded does not stop the others.
            Err(why) => StepGrade::not_run(step, why),
        };
        let (points, status) = (graded.points(), graded.status());
        let grade = Grade {
            seed,
            confinement: confinement.clone(),
            submission: Some(name.clone()),
            steps: vec![graded],
        };
        let reports = Reports { json: Some(out.join(format!("{name}.json"))), ..Reports::default() };
        reports.write(&grade, Listing::Graded)?;
        println!("{name}  {}/10  {status}", grade::fmt_points(points));
    }
    println!("(seed {seed}; one report per submission in {})", out.display());
    Ok(())
}

/// `checker autograder gradescope --step N --out DIR`.
pub fn autograder_gradescope(step: u8, out: &Path) -> Result<(), Failure> {
    let written = autograder::gradescope(&repo_root(), step, out)?;
    println!("{written}");
    Ok(())
}

/// `checker reset`: the starter back, after asking (unless `--yes`).
pub fn reset(step: u8, yes: bool) -> Result<(), Failure> {
    let root = repo_root();
    let mut confirm = |question: &str| -> bool {
        if yes {
            return true;
        }
        if !std::io::stdin().is_terminal() {
            eprintln!("{question}\n(not a terminal: pass --yes to reset without asking)");
            return false;
        }
        eprint!("{question} [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).is_ok() && matches!(answer.trim(), "y" | "Y" | "yes")
    };
    match step_reset::reset(&root, step, &mut confirm).map_err(|e| e.to_string())? {
        step_reset::ResetOutcome::AlreadyPristine => {
            println!("steps/step_{step:02} is already the untouched starter; nothing to do");
            Ok(())
        }
        step_reset::ResetOutcome::Declined => {
            println!("nothing changed");
            Err(Failure::Declined)
        }
        step_reset::ResetOutcome::Reset { backup, files } => {
            println!(
                "restored {} file(s) of steps/step_{step:02}; your version is in {}",
                files.len(),
                backup.display()
            );
            Ok(())
        }
    }
}
