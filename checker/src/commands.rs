//! What each subcommand does, from parsed options to its outcome: `verify`, `watch`,
//! `grade` (one crate or a folder of them), `reset` and `autograder`. The checking
//! itself is the pipeline's; the points are the grade model's, the reports are
//! `formats`'; the exit codes are `Failure`'s.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab_course::{LAB_LAST_STEP, LAST_STEP};

use crate::cli::{parse_target, repo_root, Shard};
use crate::formats::{junit::Listing, Reports};
use crate::grade::{Grade, Graded, Sandboxing, StepGrade};
use crate::handed_in::{self, Refusal};
use crate::report::print_run;
use crate::verify::{build_all, run_step, StepRun, StepRunOptions, Subject};
use crate::{autograder, classroom, grade, gradebook, watch, Failure};

/// What `checker verify` was asked.
pub struct Verify<'a> {
    pub steps: Vec<u8>,
    pub subject: Subject<'a>,
    pub seed: u64,
    pub limit: Duration,
    /// `--keep`.
    pub keep: bool,
    /// `--junit PATH`.
    pub junit: Option<PathBuf>,
    /// `--prebuilt DIR`: the binaries to judge, not built here.
    pub prebuilt: Option<&'a Path>,
}

/// `checker verify`: each step's report in turn, and with `--junit` its verdicts as
/// JUnit XML; fails when a check of any failed.
pub fn verify(asked: Verify, sandboxing: &Sandboxing) -> Result<(), Failure> {
    let Verify { steps, subject, seed, limit, keep, junit, prebuilt } = asked;
    let sandbox = sandboxing.sandbox();
    let root = repo_root();
    let mut all_passed = true;
    let submission = steps.first().and_then(|&step| found_in(subject, step));
    let built = prebuilt.is_none() && build_all(&root, &steps, subject, sandbox);
    let mut graded = Vec::new();
    for step in steps {
        let (run, grade) = timed_run(
            &root,
            step,
            subject,
            StepRunOptions { seed, limit, keep, built, sandbox, quiet: false, prebuilt },
        )?;
        all_passed &= print_run(&root, step, seed, &run);
        graded.push(grade);
    }
    if let Some(path) = junit {
        let grade = Grade { seed, confinement: sandboxing.confinement().clone(), submission, steps: graded };
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
    let grade = StepGrade::judged(
        root,
        step,
        &run.results,
        run.output.clone(),
        started,
        clock.elapsed().as_secs_f64(),
    );
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
    subject: Subject,
    seed: u64,
    limit: Duration,
    max_runs: Option<usize>,
    sandboxing: &Sandboxing,
) -> Result<(), Failure> {
    let root = repo_root();
    let sandbox = sandboxing.sandbox();
    let crate_dir = match (subject, subject.version(step)) {
        (Subject::Elsewhere(dir), _) => dir.to_path_buf(),
        (_, version) => root.join(version.expect("a crate of the course").crate_dir()),
    };
    let src = crate_dir.join("src");
    if !src.join("main.rs").is_file() {
        return Err(Failure::CannotRun(format!(
            "{} has no src/main.rs to watch{}",
            crate_dir.display(),
            match subject {
                Subject::Elsewhere(_) => String::new(),
                _ => format!("; restore it with `cargo checker reset step {step}`"),
            }
        )));
    }
    let clear = std::io::stdout().is_terminal();
    let mut snapshot = watch::Snapshot::of(&src);
    let mut done = 0usize;
    loop {
        let options =
            StepRunOptions { seed, limit, keep: false, built: false, sandbox, quiet: false, prebuilt: None };
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

/// Runs a program once as `graded` needs, and grades every step it earns points for.
fn grade_program(
    root: &Path,
    graded: Graded,
    subject: Subject,
    options: StepRunOptions,
) -> Result<Vec<StepGrade>, String> {
    let (run, own) = timed_run(root, graded.run_as(), subject, options)?;
    // The run's time is its own step's; the others were judged from the same run.
    let of = |step: u8| StepGrade::judged(root, step, &run.results, run.output.clone(), own.started, 0.0);
    Ok(graded
        .steps()
        .into_iter()
        .map(|step| if step == graded.run_as() { own.clone() } else { of(step) })
        .collect())
}

/// `checker grade`: the points table, and the reports asked for. `--crate` with `all`
/// grades the handed-in program as the finished lab, on every check of every step.
pub fn grade(
    target: &[String],
    (subject, prebuilt): (Subject, Option<&Path>),
    seed: u64,
    limit: Duration,
    reports: &Reports,
    sandboxing: &Sandboxing,
) -> Result<(), Failure> {
    let sandbox = sandboxing.sandbox();
    // `all` is the DLI lab's steps; a step beyond it is graded on its own (`grade step 12`).
    let steps = if target.is_empty() || target == ["all"] {
        (0..=LAB_LAST_STEP).collect()
    } else {
        parse_target(target)?
    };
    let confinement = sandboxing.confinement().clone();
    let mut submission = None;
    let handed_in = matches!(subject, Subject::Elsewhere(_));
    let graded = if steps.len() > 1 { Graded::Final } else { Graded::Step(steps[0]) };
    if let Subject::Elsewhere(given) = subject {
        match handed_in::find(given, graded.run_as()) {
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
    let options = |built| StepRunOptions { seed, limit, keep: false, built, sandbox, quiet: false, prebuilt };
    let graded_steps = if handed_in {
        grade_program(&root, graded, subject, options(false))?
    } else {
        let built = prebuilt.is_none() && build_all(&root, &steps, subject, sandbox);
        let mut graded = Vec::new();
        for step in steps {
            graded.push(timed_run(&root, step, subject, options(built))?.1);
        }
        graded
    };
    finish_grade(Grade { seed, confinement, submission, steps: graded_steps }, reports)
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

/// How a folder of submissions is graded.
pub struct Batch<'a> {
    pub dir: &'a Path,
    pub out: &'a Path,
    pub graded: Graded,
    pub seed: u64,
    pub limit: Duration,
    /// Submissions graded side by side.
    pub jobs: usize,
    /// Memory one job may use (its sandbox's limit), to fit the jobs in the machine's.
    pub memory_per_job: u64,
    pub shard: Option<Shard>,
}

/// The submissions in `dir`, sorted: each folder holding a program (a crate, a
/// `main.rs`, a nested crate or a clone of the lab) and each `.zip`; other files and
/// folders (notes, hidden ones) are not submissions. Returns (name, path) pairs.
pub fn submissions_in(dir: &Path, step: u8) -> Result<Vec<(String, PathBuf)>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("--crates {}: {e}; name the folder of handed-in crates", dir.display()))?;
    let mut found = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let zipped = path.is_file() && name.to_ascii_lowercase().ends_with(".zip");
        if zipped {
            found.push((name[..name.len() - 4].to_string(), path));
        } else if path.is_dir() && handed_in::find(&path, step).is_ok() {
            found.push((name, path));
        }
    }
    found.sort();
    Ok(found)
}

/// `grade step N --crates DIR --json-dir OUT` (or `grade all ...`): every submission
/// in DIR, `--jobs` side by side; a report and a gradebook entry each, and the class's
/// gradebook at the end (unless this is one shard of several).
pub fn grade_batch(batch: &Batch, sandboxing: &Sandboxing) -> Result<(), Failure> {
    let sandbox = sandboxing.sandbox();
    let Batch { dir, out, graded, seed, limit, shard, .. } = *batch;
    let everyone = submissions_in(dir, graded.run_as())?;
    if everyone.is_empty() {
        return Err(Failure::CannotRun(format!(
            "--crates {}: no submission in it (a folder per student holding its program, or a .zip)",
            dir.display()
        )));
    }
    let mine: Vec<&(String, PathBuf)> = everyone
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| i % s.count == s.index))
        .map(|(_, submission)| submission)
        .collect();
    std::fs::create_dir_all(out).map_err(|e| format!("--json-dir {}: {e}", out.display()))?;
    let jobs = jobs_that_fit(batch.jobs, batch.memory_per_job, available_memory(), mine.len());
    let root = repo_root();
    let confinement = sandboxing.confinement();
    let max = grade::fmt_points(graded.max_points());
    println!("submission  points  status");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failure: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let grade_one = |name: &str, path: &Path| -> Result<(), String> {
        let options = StepRunOptions {
            seed,
            limit,
            keep: false,
            built: false,
            sandbox,
            quiet: jobs > 1,
            prebuilt: None,
        };
        let submission = handed_in::find(path, graded.run_as()).ok().map(|h| h.found);
        let steps = match grade_program(&root, graded, Subject::Elsewhere(path), options) {
            Ok(steps) => steps,
            // One submission that cannot be graded does not stop the others.
            Err(why) => {
                graded.steps().into_iter().map(|step| StepGrade::not_run(step, why.clone())).collect()
            }
        };
        let grade = Grade { seed, confinement: confinement.clone(), submission, steps };
        let reports = Reports { json: Some(out.join(format!("{name}.json"))), ..Reports::default() };
        reports.write(&grade, Listing::Graded)?;
        gradebook::Entry::of(name, &grade).write(out)?;
        println!("{name}  {}/{max}  {}", grade::fmt_points(grade.points()), grade.status());
        Ok(())
    };
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, path)) = mine.get(i) else { break };
                if let Err(why) = grade_one(name, path) {
                    // A report that cannot be written stops the batch: later ones would fail alike.
                    failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(why);
                    next.store(mine.len(), std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    if let Some(why) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(Failure::CannotRun(why));
    }
    println!("(seed {seed}; a report per submission in {})", out.display());
    match shard {
        Some(Shard { index, count }) if count > 1 => println!(
            "(shard {index} of {count}: once every shard has run, `cargo checker gradebook {} --crates {}` makes the gradebook)",
            out.display(),
            dir.display()
        ),
        _ => {
            let names: Vec<String> = everyone.into_iter().map(|(name, _)| name).collect();
            let (path, _) = gradebook::write(out, &names)?;
            println!("gradebook written to {}", path.display());
        }
    }
    Ok(())
}

/// `checker gradebook OUT [--crates DIR]`: the gradebook of OUT's entries, a missing
/// row for each submission of DIR without one.
pub fn gradebook(out: &Path, handed_in: Option<&Path>) -> Result<(), Failure> {
    let expected = match handed_in {
        Some(dir) => submissions_in(dir, LAB_LAST_STEP)?.into_iter().map(|(name, _)| name).collect(),
        None => Vec::new(),
    };
    let (path, rows) = gradebook::write(out, &expected)?;
    let missing = rows.iter().filter(|r| matches!(r, gradebook::Row::Missing(_))).count();
    println!("gradebook written to {} ({} submission(s), {missing} missing)", path.display(), rows.len());
    Ok(())
}

/// How many jobs fit: at most `asked`, at most one per submission, and no more than
/// the memory available holds at `per_job` each (at least one). Says so when fewer.
fn jobs_that_fit(asked: usize, per_job: u64, available: Option<u64>, submissions: usize) -> usize {
    let mut jobs = asked.clamp(1, submissions.max(1));
    if let Some(available) = available {
        let fit = usize::try_from(available / per_job.max(1)).unwrap_or(usize::MAX).max(1);
        if fit < jobs {
            eprintln!(
                "warning: --jobs {asked} would need {} MiB ({} MiB per job, --memory-limit); {} MiB are \
                 available here: grading {fit} at a time",
                (per_job >> 20) * asked as u64,
                per_job >> 20,
                available >> 20
            );
            jobs = fit;
        }
    }
    jobs
}

/// MemAvailable of /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `checker autograder gradescope --step N --out DIR`.
pub fn autograder_gradescope(graded: Graded, hidden_until_due: &[String], out: &Path) -> Result<(), Failure> {
    instructors_repository()?;
    let written = autograder::gradescope(&repo_root(), graded, hidden_until_due, out)?;
    println!("{written}");
    Ok(())
}

/// An autograder is the instructor's: it carries the course and checks the reference
/// solutions as it is set up, which a students' copy does not hold.
fn instructors_repository() -> Result<(), Failure> {
    match lab_course::students_copy::read_mark(&repo_root()) {
        None => Ok(()),
        Some(_) => Err(Failure::CannotRun(
            "this is the students' copy of the lab: make the autograder from your full repository, \
             whose image carries the solutions it checks itself with"
                .into(),
        )),
    }
}

/// `checker autograder prairielearn|autolab|coderunner|codegrade`: what the platform needs.
pub fn autograder_platform(
    platform: autograder::Platform,
    args: &crate::cli::PlatformArgs,
) -> Result<(), Failure> {
    instructors_repository()?;
    let written = autograder::platform(
        &repo_root(),
        args.graded.step,
        platform,
        args.image.as_deref(),
        &args.graded.out,
    )?;
    println!("{written}");
    Ok(())
}

/// `checker autograder github-classroom`: the workflow file of the students' repositories.
pub fn autograder_github_classroom(
    repository: &str,
    revision: Option<&str>,
    points: classroom::Points,
    out: &Path,
) -> Result<(), Failure> {
    let root = repo_root();
    let revision = match revision {
        Some(revision) => revision.to_string(),
        None => {
            let head =
                std::process::Command::new("git").current_dir(&root).args(["rev-parse", "HEAD"]).output();
            match head {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
                _ => {
                    return Err(Failure::CannotRun(format!(
                        "{} is not a git checkout: name the commit to grade with, --revision COMMIT",
                        root.display()
                    )))
                }
            }
        }
    };
    let grader = classroom::Grader::new(repository, &revision)?;
    let steps: Vec<u8> = (0..=LAB_LAST_STEP).collect();
    let text = classroom::workflow_file(&grader, &steps, points)?;
    // What students receive is the template repository: a students' copy, never this
    // repository with its solutions. A new folder gets one; a copy made before (with
    // `coursegen students-copy --through N`, say) gets the workflow only.
    let made_copy = match lab_course::students_copy::read_mark(out) {
        Some(_) => false,
        None => {
            let empty = std::fs::read_dir(out).map_or(true, |mut d| d.next().is_none());
            if !empty {
                return Err(Failure::CannotRun(format!(
                    "--out {}: not a students' copy of the lab: name a new folder (the template \
                     repository is written there as a students' copy, without the solutions), or a \
                     copy made by `cargo run -p coursegen -- students-copy DIR`",
                    out.display()
                )));
            }
            lab_course::students_copy::write(&root, out, LAST_STEP).map_err(|e| e.to_string())?;
            true
        }
    };
    let path = out.join(classroom::WORKFLOW_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("--out {}: {e}; name a folder you can write", out.display()))?;
    }
    atomic_file::write_atomically(&path, text)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!(
        "wrote {} ({} test(s), 10 points each, {}; the checker of {} at {})",
        path.display(),
        steps.len(),
        match points {
            classroom::Points::PerStep => "all or nothing per step",
            classroom::Points::PerCheck => "each check passed earns its share",
        },
        grader.repository,
        grader.revision
    );
    if made_copy {
        println!(
            "{} is the assignment's template repository: the students' copy of the lab (no solutions, \
             no master), with the workflow; push it as the template",
            out.display()
        );
    } else {
        println!(
            "commit it in the assignment's template repository (the students' copy in {})",
            out.display()
        );
    }
    println!(
        "the workflow checks out the checker from {} at {}: that commit must be pushed there, and \
         the students' workflows can read it (it holds the solutions unless it is a students' copy too)",
        grader.repository, grader.revision
    );
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
            let dir = lab_course::Version::Starter(step).crate_dir();
            println!("{} is already the untouched starter; nothing to do", dir.display());
            Ok(())
        }
        step_reset::ResetOutcome::Declined => {
            println!("nothing changed");
            Err(Failure::Declined)
        }
        step_reset::ResetOutcome::Reset { backup, files } => {
            println!(
                "restored {} file(s) of {}; your version is in {}",
                files.len(),
                lab_course::Version::Starter(step).crate_dir().display(),
                backup.display()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_jobs_than_the_memory_holds_or_the_submissions_need() {
        const GIB: u64 = 1 << 30;
        assert_eq!(jobs_that_fit(2, 6 * GIB, Some(20 * GIB), 10), 2);
        // 4 runs of 6 GiB do not fit in 20 GiB: 3 do.
        assert_eq!(jobs_that_fit(4, 6 * GIB, Some(20 * GIB), 10), 3);
        // Always at least one, and never more than there are submissions.
        assert_eq!(jobs_that_fit(4, 6 * GIB, Some(GIB), 10), 1);
        assert_eq!(jobs_that_fit(8, 6 * GIB, None, 3), 3);
    }

    #[test]
    fn submissions_are_folders_holding_a_program_and_zips() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "fn main() {}").unwrap();
        };
        write("bob/src/main.rs");
        write("alice/step_07/src/main.rs");
        write("carol.zip");
        write("notes/readme.txt");
        write(".git/config");
        let found: Vec<String> = submissions_in(dir.path(), 7).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(found, ["alice", "bob", "carol"]);
        assert!(submissions_in(&dir.path().join("nope"), 7).unwrap_err().contains("--crates"));
    }
}
