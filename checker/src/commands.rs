//! What each subcommand does, from parsed options to its outcome: `verify`, `watch`,
//! `grade` (one crate or a folder of them) and `reset`. The checking itself is the
//! pipeline's; the points and JSON are `grade`'s; the exit codes are `Failure`'s.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::checks::Verdict;
use crate::cli::{parse_target, repo_root};
use crate::pipeline::{build_all, run_step, StepRunOptions, Subject};
use crate::report::print_run;
use crate::{grade, sandbox, watch, Failure};

/// `checker verify`: each step's report in turn; fails when a check of any failed.
pub fn verify(
    steps: Vec<u8>,
    subject: Subject,
    seed: u64,
    limit: Duration,
    keep: bool,
    sandbox: Option<&sandbox::Sandbox>,
) -> Result<(), Failure> {
    let root = repo_root();
    let mut all_passed = true;
    let built = build_all(&root, &steps, subject, sandbox);
    for step in steps {
        let run = run_step(&root, step, subject, StepRunOptions { seed, limit, keep, built, sandbox })?;
        all_passed &= print_run(&root, step, seed, &run);
    }
    Failure::unless_passed(all_passed)
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

/// `checker grade`: the points table, and the JSON report with `--json`.
pub fn grade(
    target: &[String],
    subject: Subject,
    seed: u64,
    limit: Duration,
    json: Option<PathBuf>,
    sandbox: Option<&sandbox::Sandbox>,
) -> Result<(), Failure> {
    let steps = if target.is_empty() { (0..12).collect() } else { parse_target(target)? };
    let root = repo_root();
    let mut graded = Vec::new();
    let built = build_all(&root, &steps, subject, sandbox);
    for step in steps {
        let run =
            run_step(&root, step, subject, StepRunOptions { seed, limit, keep: false, built, sandbox })?;
        graded.push(grade::GradedStep {
            step,
            title: coursegen::STEPS[usize::from(step)],
            results: run.results,
            output: run.output,
        });
    }
    print!("{}", grade::table(&graded));
    println!("(seed {seed}; repeat with --seed {seed}; details: cargo checker verify step N --seed {seed})");
    if let Some(path) = json {
        write_report(&path, grade::report(&graded, seed), sandbox)?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// The JSON report at `path` (atomically), with the sandbox it was made in.
fn write_report(
    path: &Path,
    mut report: serde_json::Value,
    sandbox: Option<&sandbox::Sandbox>,
) -> Result<(), String> {
    report["sandbox"] = sandbox.map_or_else(|| serde_json::json!("none"), sandbox::Sandbox::describe);
    let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    atomic_file::write_atomically(path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `grade step N --crates DIR --json-dir OUT`: every submission in DIR, one report each.
pub fn grade_batch(
    step: u8,
    dir: &Path,
    out: &Path,
    seed: u64,
    limit: Duration,
    sandbox: Option<&sandbox::Sandbox>,
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
    println!("submission  points  status");
    for krate in &submissions {
        let name = krate.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let options = StepRunOptions { seed, limit, keep: false, built: false, sandbox };
        let (report, points, status) = match run_step(&root, step, Subject::Elsewhere(krate), options) {
            Ok(run) => {
                let graded = [grade::GradedStep {
                    step,
                    title: coursegen::STEPS[usize::from(step)],
                    results: run.results,
                    output: run.output,
                }];
                (grade::report(&graded, seed), graded[0].points(), graded[0].status())
            }
            // One submission that cannot be graded does not stop the others.
            Err(msg) => {
                let status = Verdict::Error;
                (serde_json::json!({"version": 3, "status": status, "message": msg}), 0.0, status)
            }
        };
        let mut report = report;
        report["submission"] = serde_json::json!(name);
        write_report(&out.join(format!("{name}.json")), report, sandbox)?;
        println!("{name}  {}/10  {status}", grade::fmt_points(points));
    }
    println!("(seed {seed}; one report per submission in {})", out.display());
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
