//! `checker`: runs a step of the DDP lab on several ranks and verifies real DDP
//! behaviour, with what it saw, what it expected, and a hint for every check.
mod checks;
mod confined;
mod grade;
mod launch;
mod observe;
mod progress;
mod sandbox;
mod spinner;
mod standalone;
mod watch;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

use checks::{CheckResult, Verdict};
use observe::{Setup, Variation};

/// Checks the steps of the DDP lab: builds your step crate, runs it on several CPU
/// ranks (Gloo) with hidden variations (world size, data sizes, seeds), and verifies
/// what the ranks really did: their shares of the data, their weights after every
/// epoch, the reduced throughput, the averaged metrics.
#[derive(Parser, Debug)]
// `cargo checker` is how students run it (the workspace alias): usage lines say so.
#[command(version, about, long_about = None, bin_name = "cargo checker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Each step: done, failing or not tried (your last `verify`), and a bar of the steps done.
    List {
        /// Instead: every check of every step, and what it looks at.
        #[arg(long)]
        checks: bool,
    },
    /// What to change in a step and the common mistakes, from the lab guide: `cargo checker hint step 7`.
    Hint {
        /// `step N` (N from 0 to 11).
        #[arg(value_name = "step N", num_args = 1..=2, required = true)]
        target: Vec<String>,
    },
    /// Restore a step's starter crate (asks first; keeps a backup in .checker/backups): `cargo checker reset step 7`.
    Reset {
        /// `step N` (N from 0 to 11).
        #[arg(value_name = "step N", num_args = 1..=2, required = true)]
        target: Vec<String>,
        /// Do not ask (the backup is still made).
        #[arg(long)]
        yes: bool,
    },
    /// Points per step and a JSON report for an autograder: `cargo checker grade --json results.json`.
    ///
    /// The report has the shape of exercism's test-runner results (version 3): a status,
    /// and per check its status, message and captured output. Each step is worth 10
    /// points, shared by the checks it introduces. Exits 0 whenever the report was made.
    Grade {
        /// `step N` or `all` (the default).
        #[arg(value_name = "step N | all", num_args = 0..=2)]
        target: Vec<String>,
        /// Grade the reference solutions (solutions/step_NN) instead of your steps.
        #[arg(long)]
        solutions: bool,
        #[command(flatten)]
        runs: RunArgs,
        /// Also write the report here, as JSON (atomically: a temporary file, then a rename).
        #[arg(long, value_name = "PATH")]
        json: Option<PathBuf>,
        /// Grade the src/main.rs of a handed-in crate as one step's program (`grade step 7
        /// --crate DIR`): only that file is taken, built with the step's own manifest, in
        /// a sandbox.
        #[arg(long = "crate", value_name = "DIR", conflicts_with = "solutions")]
        krate: Option<PathBuf>,
        /// Grade every handed-in crate in DIR (each subdirectory holding src/main.rs) as
        /// one step's program, one after the other: `grade step 7 --crates handed-in
        /// --json-dir results` writes results/<name>.json per submission.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["solutions", "krate", "json"], requires = "json_dir")]
        crates: Option<PathBuf>,
        /// With --crates: where each submission's report goes, as <name>.json.
        #[arg(long, value_name = "DIR", requires = "crates")]
        json_dir: Option<PathBuf>,
    },
    /// Verify a step (and every earlier step's checks): `cargo checker verify step 7`, or `cargo checker verify all`.
    Verify {
        /// `step N` (N from 0 to 11) or `all`.
        #[arg(value_name = "step N | all", num_args = 1..=2, required = true)]
        target: Vec<String>,
        /// Check the reference solutions (solutions/step_NN) instead of your steps.
        #[arg(long)]
        solutions: bool,
        #[command(flatten)]
        runs: RunArgs,
        /// Keep the run's files (outputs, trace) and print where they are.
        #[arg(long)]
        keep: bool,
        /// Check the src/main.rs of a crate elsewhere (a copy handed in for grading)
        /// instead of steps/step_NN; it is built with the step's own manifest.
        #[arg(long = "crate", value_name = "DIR", conflicts_with = "solutions")]
        krate: Option<PathBuf>,
    },
    /// Verify a step, then again each time you save a file of its src/: `cargo checker watch step 7`.
    ///
    /// Keep it running in a second terminal while you edit; Ctrl-C stops it. One seed
    /// serves the whole session, so a check fails or passes because of your edit, not
    /// because of a new hidden variation.
    Watch {
        /// `step N` (N from 0 to 11).
        #[arg(value_name = "step N", num_args = 1..=2, required = true)]
        target: Vec<String>,
        #[command(flatten)]
        runs: RunArgs,
        /// Watch and check the crate in DIR instead of steps/step_NN.
        #[arg(long = "crate", value_name = "DIR")]
        krate: Option<PathBuf>,
        /// Stop after this many verifications (scripts and tests); the exit status is the last one's.
        #[arg(long, value_name = "N", hide = true)]
        max_runs: Option<usize>,
    },
}

/// How the programs are run: shared by `verify`, `watch` and `grade`.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The seed of the hidden variations (default: a new one, printed, so that a run can
    /// be repeated exactly; `watch` keeps one for its session).
    #[arg(long)]
    seed: Option<u64>,
    /// Longest time one run of the program may take, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Build and run the program in a sandbox (bubblewrap: no network beyond its own
    /// loopback, nothing of yours visible or writable, limits on memory, processes, files
    /// and output). Always on for `grade` and `--crate`, which run handed-in code.
    #[arg(long, conflicts_with = "unsandboxed")]
    sandbox: bool,
    /// Run handed-in code with all of your rights, no sandbox (where bubblewrap cannot
    /// work); the report then says "sandbox": "none".
    #[arg(long)]
    unsandboxed: bool,
    /// Memory a sandboxed run may use, all its processes together, in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 6144, value_parser = clap::value_parser!(u64).range(64..))]
    memory_limit: u64,
}

impl RunArgs {
    fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(new_seed)
    }

    fn limit(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// The sandbox the runs go into: required for handed-in code (`untrusted`) unless
    /// `--unsandboxed`, asked for with `--sandbox`; an error (exit 2) when wanted and
    /// impossible here.
    fn sandbox(&self, untrusted: bool) -> Result<Option<sandbox::Sandbox>, Failure> {
        if self.unsandboxed {
            if untrusted {
                eprintln!(
                    "warning: --unsandboxed: the handed-in code runs with all of your rights \
                     (your files, your network, your environment)"
                );
            }
            return Ok(None);
        }
        if !(self.sandbox || untrusted) {
            return Ok(None);
        }
        let limits = sandbox::Limits { memory: self.memory_limit << 20, ..Default::default() };
        sandbox::Sandbox::probe(limits).map(Some).map_err(|why| Failure::CannotRun(why.to_string()))
    }
}

/// Why a command did not succeed. [`Failure::exit_code`] is the checker's one table of
/// exit codes, so the same failure ends every subcommand the same way.
#[derive(Debug)]
enum Failure {
    /// The checks ran and some did not pass (exit 1); the report already says which.
    ChecksFailed,
    /// `reset` was answered no (exit 1); nothing changed.
    Declined,
    /// The command could not do its work (exit 2): bad input (a usage error, a missing
    /// crate or file) or something it needs that is not there (a sandbox, a writable
    /// report path, the lab guide). The message says what to do.
    CannotRun(String),
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::ChecksFailed | Failure::Declined => 1,
            Failure::CannotRun(_) => 2,
        }
    }

    /// `Ok` when every check passed, else [`Failure::ChecksFailed`].
    fn unless_passed(passed: bool) -> Result<(), Failure> {
        if passed {
            Ok(())
        } else {
            Err(Failure::ChecksFailed)
        }
    }
}

// Messages of the verification pipeline (`run_step`, `standalone`, ...) say why it cannot run.
impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::CannotRun(message)
    }
}

/// Whose program a verification checks.
#[derive(Clone, Copy)]
enum Subject<'a> {
    /// steps/step_NN: the student's own crate.
    Step,
    /// solutions/step_NN.
    Solution,
    /// `--crate DIR`.
    Elsewhere(&'a Path),
}

fn repo_root() -> PathBuf {
    // The checker runs from the repository (cargo run -p checker), or names it.
    if let Ok(dir) = std::env::var("DDP_LAB_ROOT") {
        return PathBuf::from(dir);
    }
    let mut dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    loop {
        if dir.join("course/lab/main.rs").is_file() {
            return dir;
        }
        if !dir.pop() {
            return PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        }
    }
}

fn main() -> ExitCode {
    // Ctrl-C or SIGTERM stops every rank and build this run started, then exits 130/143.
    launcher::stop_children_on_signals();
    // Inside a sandbox: run the job handed over on stdin (see `confined`).
    if std::env::args().nth(1).as_deref() == Some(confined::SUPERVISOR) {
        return confined::supervise();
    }
    match try_main(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Failure::CannotRun(message) = &failure {
                eprintln!("error: {message}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

fn try_main(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::List { checks: false } => {
            print!("{}", progress::render(&progress::load(&repo_root()), &coursegen::STEPS));
            Ok(())
        }
        Command::List { checks: true } => {
            print!("{}", checks::table());
            Ok(())
        }
        Command::Hint { target } => {
            let step = one_step(&target)?;
            let text = checker_aux::hint(&repo_root(), step).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Reset { target, yes } => reset(one_step(&target)?, yes),
        Command::Grade { target, runs, crates: Some(crates), json_dir, .. } => {
            let step = match one_step(&target) {
                Ok(step) if !target.is_empty() => step,
                _ => {
                    return Err(Failure::CannotRun(
                        "--crates grades one step's programs: `grade step N --crates DIR --json-dir OUT`"
                            .into(),
                    ))
                }
            };
            let sandbox = runs.sandbox(true)?;
            let out = json_dir.unwrap_or_else(|| PathBuf::from("."));
            grade_batch(step, &crates, &out, runs.seed(), runs.limit(), sandbox.as_ref())
        }
        Command::Grade { target, solutions, runs, json, krate, crates: None, .. } => {
            let subject = match (&krate, solutions) {
                (Some(dir), _) => Subject::Elsewhere(dir),
                (None, true) => Subject::Solution,
                (None, false) => Subject::Step,
            };
            if krate.is_some() && (target.is_empty() || parse_target(&target).is_ok_and(|s| s.len() > 1)) {
                return Err(Failure::CannotRun(
                    "--crate grades one step's program: `grade step N --crate DIR`".into(),
                ));
            }
            // Grading is for handed-in work: sandboxed unless told otherwise.
            let sandbox = runs.sandbox(true)?;
            grade(&target, subject, runs.seed(), runs.limit(), json, sandbox.as_ref())
        }
        Command::Watch { target, runs, krate, max_runs } => {
            let step = one_step(&target)?;
            let sandbox = runs.sandbox(krate.is_some())?;
            watch_step(step, krate.as_deref(), runs.seed(), runs.limit(), max_runs, sandbox.as_ref())
        }
        Command::Verify { target, solutions, runs, keep, krate } => {
            let steps = parse_target(&target)?;
            if krate.is_some() && steps.len() > 1 {
                return Err(Failure::CannotRun(
                    "--crate checks one step: `verify step N --crate DIR`".into(),
                ));
            }
            let subject = match (&krate, solutions) {
                (Some(dir), _) => Subject::Elsewhere(dir),
                (None, true) => Subject::Solution,
                (None, false) => Subject::Step,
            };
            // A handed-in crate is sandboxed; your own steps only with --sandbox.
            let sandbox = runs.sandbox(krate.is_some())?;
            let seed = runs.seed();
            let root = repo_root();
            let mut all_passed = true;
            let built = build_all(&root, &steps, subject, sandbox.as_ref());
            for step in steps {
                let options =
                    StepRunOptions { seed, limit: runs.limit(), keep, built, sandbox: sandbox.as_ref() };
                let run = run_step(&root, step, subject, options)?;
                all_passed &= print_run(&root, step, seed, &run);
            }
            Failure::unless_passed(all_passed)
        }
    }
}

/// `checker watch`: verify, wait for a saved change under the crate's src/, repeat.
fn watch_step(
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

fn new_seed() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64 % 1_000_000).unwrap_or(1)
}

fn grade(
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
fn grade_batch(
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
                let status = grade::Status::Error;
                (serde_json::json!({"version": 3, "status": status.as_str(), "message": msg}), 0.0, status)
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

/// `["step", "7"]` or `["7"]`.
fn one_step(target: &[String]) -> Result<u8, String> {
    if target.len() == 1 && target[0] == "all" {
        return Err("name one step: `step N` (N from 0 to 11)".into());
    }
    parse_target(target).map(|steps| steps[0])
}

fn reset(step: u8, yes: bool) -> Result<(), Failure> {
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
    match checker_aux::reset(&root, step, &mut confirm).map_err(|e| e.to_string())? {
        checker_aux::ResetOutcome::AlreadyPristine => {
            println!("steps/step_{step:02} is already the untouched starter; nothing to do");
            Ok(())
        }
        checker_aux::ResetOutcome::Declined => {
            println!("nothing changed");
            Err(Failure::Declined)
        }
        checker_aux::ResetOutcome::Reset { backup, files } => {
            println!(
                "restored {} file(s) of steps/step_{step:02}; your version is in {}",
                files.len(),
                backup.display()
            );
            Ok(())
        }
    }
}

/// `["step", "7"]`, `["7"]` or `["all"]`.
fn parse_target(target: &[String]) -> Result<Vec<u8>, String> {
    let words: Vec<&str> = target.iter().map(String::as_str).collect();
    let number = match words.as_slice() {
        ["all"] => return Ok((0..12).collect()),
        ["step", n] | [n] => n,
        _ => {
            return Err(format!(
                "`verify {}`: write `verify step N` (N from 0 to 11) or `verify all`",
                words.join(" ")
            ))
        }
    };
    match number.parse::<u8>() {
        Ok(n) if n <= 11 => Ok(vec![n]),
        _ => Err(format!("there is no step {number}: the steps are 0 to 11")),
    }
}

/// What one step's verification gave.
struct StepRun {
    package: String,
    variation: Variation,
    results: Vec<CheckResult>,
    /// The first rank's output (stdout then stderr), for a grader to show.
    output: String,
    /// Where the run's files were kept (`--keep`).
    kept: Option<PathBuf>,
}

/// Builds and runs one step and judges it; prints nothing but progress.
/// Several steps: their crates built in one cargo run first. True when that built
/// them all (each step then skips its own build).
fn build_all(root: &Path, steps: &[u8], subject: Subject, sandbox: Option<&sandbox::Sandbox>) -> bool {
    if sandbox.is_some() {
        // Each step is built in a sandbox of its own.
        return false;
    }
    let prefix = match subject {
        Subject::Step => "step",
        Subject::Solution => "solution",
        Subject::Elsewhere(_) => return false,
    };
    if steps.len() < 2 {
        return false;
    }
    let spinner = spinner::Spinner::new(false);
    spinner.phase(&format!("building {} crates", steps.len()));
    let packages: Vec<String> = steps.iter().map(|s| format!("{prefix}_{s:02}")).collect();
    let built = launch::build_all(root, &packages);
    spinner.clear();
    built
}

/// How one step is run: the same for every step of a `verify`, `watch` or `grade`.
#[derive(Clone, Copy)]
struct StepRunOptions<'a> {
    seed: u64,
    limit: Duration,
    /// Keep the run's files (`--keep`).
    keep: bool,
    /// Its crate is built already (by [`build_all`]).
    built: bool,
    sandbox: Option<&'a sandbox::Sandbox>,
}

fn run_step(root: &Path, step: u8, subject: Subject, options: StepRunOptions) -> Result<StepRun, String> {
    let StepRunOptions { seed, limit, keep, built, sandbox } = options;
    let read = |dir: PathBuf| -> Result<String, String> {
        let main_rs = dir.join("src/main.rs");
        std::fs::read_to_string(&main_rs).map_err(|e| {
            format!(
                "cannot read {}: {e}; restore it with `cargo checker reset step {step}`",
                main_rs.display()
            )
        })
    };
    let (package, source, manifest_dir) = match subject {
        Subject::Step => (format!("step_{step:02}"), read(root.join(format!("steps/step_{step:02}")))?, None),
        Subject::Solution => {
            (format!("solution_{step:02}"), read(root.join(format!("solutions/step_{step:02}")))?, None)
        }
        Subject::Elsewhere(dir) => {
            let crate_ = standalone::prepare(root, step, dir)?;
            (crate_.package, crate_.source, Some(crate_.dir))
        }
    };
    let variation = Variation::for_step(step, seed);
    let spinner = spinner::Spinner::new(false);
    spinner.step(step);
    spinner.phase(&format!("building {package}"));

    let binary = if built {
        Ok(launch::binary_path(root, &package))
    } else {
        observe::build_or_fail(root, &package, manifest_dir.as_deref(), sandbox)
    };
    let (results, output, kept) = match binary {
        Err(failed) => {
            let output = failed.observed.clone();
            (vec![failed], output, None)
        }
        Ok(bin) => {
            let work = work_dir(root, &package)?;
            spinner.phase("preparing the data");
            let shared_data = prepare_shared_data(root)?;
            // From step 5 the ranks download from this local mirror, which counts the
            // downloads, into a fresh data directory per node.
            let served = shared_data.join(labkit::GenerateOptions::default().dir_name());
            let mirror = checker_aux::Mirror::serve(&served)
                .map_err(|e| format!("cannot start the local mirror for {}: {e}", served.display()))?;
            let manifest = served.join(labkit::data::MANIFEST_FILE);
            let confine = sandbox.map(|sandbox| {
                let mut confine = confined::Confinement::new(sandbox.clone(), root, &shared_data);
                confine.mirror_port = Some(mirror.port());
                confine
            });
            let setup = Setup {
                work: work.clone(),
                shared_data,
                mirror: Some((mirror.url(), manifest)),
                limit,
                confine,
            };
            let mut obs = observe::observe(step, &bin, source, &variation, &setup, &|p| spinner.phase(p));
            if step >= 5 {
                obs.downloads = Some(mirror.downloads());
            }
            let results = checks::judge(&obs);
            let output = obs.first_output();
            let kept = if keep {
                Some(work)
            } else {
                let _ = std::fs::remove_dir_all(&work);
                None
            };
            (results, output, kept)
        }
    };
    spinner.clear();
    if let Subject::Step = subject {
        // Progress is about the student's own crates, not the reference solutions.
        let passed = results.iter().all(CheckResult::passed);
        if let Err(e) = progress::record(root, step, passed) {
            eprintln!("warning: cannot record progress in .checker/progress.json: {e}");
        }
    }
    Ok(StepRun { package, variation, results, output, kept })
}

/// `verify`: one step's full report; true when every check passed.
fn print_run(root: &Path, step: u8, seed: u64, run: &StepRun) -> bool {
    println!("== step {step} ({}): {}", run.package, run.variation.describe());
    println!("   (repeat exactly with --seed {seed})");
    if let Some(dir) = &run.kept {
        println!("   run files kept in {}", dir.display());
    }
    report(root, step, &run.results)
}

/// Prints every check; true when all passed.
fn report(root: &Path, step: u8, results: &[CheckResult]) -> bool {
    let color = std::io::stdout().is_terminal();
    let paint = |verdict: Verdict| match (verdict, color) {
        (Verdict::Pass, true) => "\x1b[32mPASS\x1b[0m",
        (Verdict::Fail, true) => "\x1b[31mFAIL\x1b[0m",
        (Verdict::CouldNotJudge, true) => "\x1b[33m????\x1b[0m",
        (Verdict::Pass, false) => "PASS",
        (Verdict::Fail, false) => "FAIL",
        (Verdict::CouldNotJudge, false) => "????",
    };
    for r in results {
        println!("{} step {:>2} {}: {}", paint(r.verdict), r.step, r.id, first_line(&r.observed));
        if !r.passed() {
            for line in r.observed.lines().skip(1) {
                println!("         {line}");
            }
            println!("         expected: {}", r.expected);
        }
        if r.failed() {
            println!("         hint: {}", r.hint);
            // What the guide says this check is about, when a step's page names it, and
            // that page in the guide built as a book; for a check no page describes
            // (`builds`), the page of the step being checked.
            let about = checker_aux::check_hint_for(root, r.step, r.id);
            if let Some(about) = &about {
                let about = about.strip_prefix(&format!("`{}`: ", r.id)).unwrap_or(about).to_string();
                println!("         guide: {about}");
            }
            let page_step = if about.is_some() { r.step } else { step };
            println!("         page: {}", checker_aux::book_location(root, page_step));
        }
    }
    let passed = results.iter().filter(|r| r.passed()).count();
    let unjudged = results.iter().filter(|r| r.verdict == Verdict::CouldNotJudge).count();
    let mut summary = format!("   {passed}/{} checks passed", results.len());
    if unjudged > 0 {
        summary.push_str(&format!(", {unjudged} could not be judged"));
    }
    if let Some(first) = checks::first_failing_step(results) {
        let ids: Vec<&str> = results.iter().filter(|r| r.failed() && r.step == first).map(|r| r.id).collect();
        summary.push_str(&format!(
            "; {} of step {first}'s own failed ({}){}",
            ids.len(),
            ids.join(", "),
            if first < step { ": start there" } else { "" }
        ));
    }
    println!("{summary}");
    passed == results.len()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn work_dir(root: &Path, package: &str) -> Result<PathBuf, String> {
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let dir = root.join(".checker").join("runs").join(format!("{package}-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The generated stand-in, made once per repository and reused by every run.
fn prepare_shared_data(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join(".checker").join("data");
    let options = labkit::DatasetOptions {
        dir: dir.clone(),
        kind: labkit::DatasetKind::Generated,
        ..Default::default()
    };
    labkit::ensure_dataset(&options).map_err(|e| format!("cannot prepare the generated data set: {e}"))?;
    Ok(dir)
}
