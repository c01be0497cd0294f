//! `checker`: runs a step of the DDP lab on several ranks and verifies real DDP
//! behaviour, with what it saw, what it expected, and a hint for every check.
//!
//! `cli` parses the command line, `commands` carries out each subcommand, `pipeline`
//! builds, runs and judges one step, `report` prints the verdicts; this file maps every
//! outcome to an exit code, in one place.
mod autograder;
mod cargo_build;
mod checks;
mod classroom;
mod cli;
mod color;
mod commands;
mod confined;
mod cut;
mod formats;
mod grade;
mod gradebook;
mod handed_in;
mod job;
mod observe;
mod prebuilt;
mod progress;
mod report;
mod sandbox;
mod spinner;
mod standalone;
mod verify;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use cli::{one_step, parse_target, repo_root, AutograderFor, Cli, Command};

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

// Messages of a verification (`run_step`, `standalone`, ...) say why it cannot run.
impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::CannotRun(message)
    }
}

fn main() -> ExitCode {
    // Ctrl-C or SIGTERM stops every rank and build this run started, then exits 130/143.
    child_process::stop_children_on_signals();
    // Inside a sandbox: run the job handed over on stdin (see `confined`).
    if std::env::args().nth(1).as_deref() == Some(confined::SUPERVISOR) {
        return confined::supervise();
    }
    let cli = Cli::parse();
    color::apply(cli.color);
    if let Command::Verify { runs, .. } | Command::Watch { runs, .. } | Command::Grade { runs, .. } =
        &cli.command
    {
        report::set_verbose(runs.verbose);
    }
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Failure::CannotRun(message) = &failure {
                eprintln!("error: {message}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

/// The `--level` of `hint`, which clap keeps within 1 to [`guide_hints::LEVELS`].
fn hint_level(n: u8) -> guide_hints::Level {
    guide_hints::Level::from_number(n).unwrap_or(guide_hints::Level::Look)
}

fn try_main(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::List { checks: false } => {
            print!("{}", progress::render(&progress::load(&repo_root())?, lab_course::STEPS));
            Ok(())
        }
        Command::List { checks: true } => {
            print!("{}", checks::table());
            Ok(())
        }
        Command::Hint { target, level, answer } => {
            let step = one_step(&target)?;
            let level = if answer { guide_hints::Level::Answer } else { hint_level(level) };
            let text = guide_hints::hint(&repo_root(), step, level).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Reset { target, yes } => commands::reset(one_step(&target)?, yes),
        Command::Grade { target, runs, crates: Some(crates), json_dir, jobs, shard, .. } => {
            if target.is_empty() {
                return Err(Failure::CannotRun(
                    "--crates grades one step's programs, or finished ones on every check: \
                     `grade step N --crates DIR --json-dir OUT` or `grade all --crates DIR --json-dir OUT`"
                        .into(),
                ));
            }
            let graded = match parse_target(&target)?.as_slice() {
                [step] => grade::Graded::Step(*step),
                _ => grade::Graded::Final,
            };
            let sandboxing = runs.sandboxing(true)?;
            let out = json_dir.unwrap_or_else(|| PathBuf::from("."));
            let batch = commands::Batch {
                dir: &crates,
                out: &out,
                graded,
                seed: runs.seed(),
                limit: runs.limit(),
                jobs: usize::try_from(jobs).unwrap_or(1),
                memory_per_job: runs.memory_limit_bytes(),
                shard,
            };
            commands::grade_batch(&batch, &sandboxing)
        }
        Command::Gradebook { results, crates } => commands::gradebook(&results, crates.as_deref()),
        Command::Grade { target, solutions, runs, reports, krate, crates: None, prebuilt, .. } => {
            let subject = cli::subject(krate.as_deref(), solutions)?;
            if krate.is_some() && target.is_empty() {
                return Err(Failure::CannotRun(
                    "--crate grades one step's program, or a finished one on every check: \
                     `grade step N --crate PATH` or `grade all --crate PATH`"
                        .into(),
                ));
            }
            // Grading is for handed-in work: sandboxed unless told otherwise.
            let sandboxing = runs.sandboxing(true)?;
            let program = (subject, prebuilt.as_deref());
            commands::grade(&target, program, runs.seed(), runs.limit(), &reports, &sandboxing)
        }
        Command::Autograder { platform: AutograderFor::Gradescope { graded, hidden_until_due } } => {
            commands::autograder_gradescope(graded.step, &hidden_until_due, &graded.out)
        }
        Command::Autograder { platform: AutograderFor::Prairielearn(args) } => {
            commands::autograder_platform(autograder::Platform::Prairielearn, &args)
        }
        Command::Autograder { platform: AutograderFor::Autolab(args) } => {
            commands::autograder_platform(autograder::Platform::Autolab, &args)
        }
        Command::Autograder { platform: AutograderFor::Coderunner(args) } => {
            commands::autograder_platform(autograder::Platform::Coderunner, &args)
        }
        Command::Autograder { platform: AutograderFor::Codegrade(args) } => {
            commands::autograder_platform(autograder::Platform::Codegrade, &args)
        }
        Command::Autograder {
            platform: AutograderFor::GithubClassroom { repository, revision, points_per_step, out },
        } => {
            let points =
                if points_per_step { classroom::Points::PerStep } else { classroom::Points::PerCheck };
            commands::autograder_github_classroom(&repository, revision.as_deref(), points, &out)
        }
        Command::Completions { shell } => {
            cli::write_completions(shell);
            Ok(())
        }
        Command::Watch { target, runs, krate, max_runs } => {
            let step = one_step(&target)?;
            let subject = cli::subject(krate.as_deref(), false)?;
            let sandboxing = runs.sandboxing(krate.is_some())?;
            commands::watch_step(step, subject, runs.seed(), runs.limit(), max_runs, &sandboxing)
        }
        Command::Verify { target, solutions, runs, keep, krate, junit, prebuilt } => {
            let steps = parse_target(&target)?;
            if krate.is_some() && steps.len() > 1 {
                return Err(Failure::CannotRun(
                    "--crate checks one step: `verify step N --crate PATH`".into(),
                ));
            }
            let subject = cli::subject(krate.as_deref(), solutions)?;
            // A handed-in crate is sandboxed; your own steps only with --sandbox.
            let sandboxing = runs.sandboxing(krate.is_some())?;
            let asked = commands::Verify {
                steps,
                subject,
                seed: runs.seed(),
                limit: runs.limit(),
                keep,
                junit,
                prebuilt: prebuilt.as_deref(),
            };
            commands::verify(asked, &sandboxing)
        }
    }
}
