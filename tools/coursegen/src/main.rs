//! `coursegen`: renders steps/step_NN and solutions/step_NN from course/lab.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgGroup, Args, Parser, Subcommand};
use lab_course::{CourseError, Version, MASTER};

const FIX: &str = "run `cargo run -p coursegen -- write`";

#[derive(Parser)]
#[command(
    name = "coursegen",
    about = "Renders the lab's step and solution crates (steps/step_NN and solutions/step_NN, two per step) from course/lab/main.rs",
    long_about = "Renders the lab's step and solution crates (two per step) from one annotated master program.\n\n\
        course/lab/main.rs is the finished lab, a program that compiles; `//@ step N` ... `//@ end` \
        blocks mark each step's change (optional `//@ todo` and `//@ old` sections, commented out \
        with `//|`, give the starter's TODO and the code before the step). course/lab/Cargo.toml.in and course/lab/build.rs complete each \
        crate. Edit those, never the generated crates, then run `coursegen write`."
)]
struct Cli {
    /// The repository root [default: the nearest directory up from here that holds course/lab/main.rs]
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render all the step and solution crates and write the files whose content changed
    Write,
    /// Exit 1 if a generated file is missing or differs, or a generated crate holds other files
    Check,
    /// Print one version's src/main.rs
    Render(RenderArgs),
    /// Scaffold the step after the last: its title in STEPS, a block in the master, a
    /// checks module whose check is not judged yet, the registry line, a guide page, the
    /// SUMMARY line and the checker page's row (exit 2, nothing written, if it cannot)
    NewStep(NewStepArgs),
    /// Write the repository a class gets into DIR: the starters, the libraries, the
    /// checker, the guide and the scripts students run, without solutions/, the master
    /// (course/lab) or the step pages' code (exit 2, nothing written, if it cannot)
    #[command(
        long_about = "Write the repository a class gets into DIR (a new folder): the starters of the \
        steps released, the libraries, the checker, the guide and the scripts students run. Left out: \
        solutions/, the master course/lab (which holds every answer), the tests run on them, the demo \
        and benchmarks, and the step pages' folded part \"The code\" (so `cargo checker hint step N \
        --answer` there says the answers are with you). The starters are kept pristine under \
        course/starters for `cargo checker reset`.\n\n\
        The starter of step N+1 is the program after step N: a copy that holds the starters of steps \
        0 to N holds the answers of steps 0 to N-1 there. --through N releases steps 0 to N only, as \
        you release them over the term.\n\n\
        It is written to a temporary folder beside DIR, then renamed: an error leaves nothing behind."
    )]
    StudentsCopy(StudentsCopyArgs),
}

#[derive(Args)]
struct StudentsCopyArgs {
    /// The folder to write the copy into: a new one (or an empty one)
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Release steps 0 to N only [default: every step]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=i64::from(lab_course::LAST_STEP)))]
    through: Option<u8>,
}

#[derive(Args)]
struct NewStepArgs {
    /// The step's title, as the crates' headers and the guide show it
    title: String,
    /// The id of the step's first check [default: the title's words, joined by `-`]
    #[arg(long, value_name = "ID")]
    check: Option<String>,
    /// Print the files it would create and edit, and write nothing
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("version").required(true).args(["starter", "solution"])))]
struct RenderArgs {
    /// The student's starter for step N (steps/step_NN)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=i64::from(lab_course::LAST_STEP)))]
    starter: Option<u8>,
    /// The solution of step N (solutions/step_NN)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=i64::from(lab_course::LAST_STEP)))]
    solution: Option<u8>,
    /// Skip rustfmt: the text whose line numbers rustfmt's errors refer to
    #[arg(long)]
    raw: bool,
}

fn main() -> ExitCode {
    // clap exits 2 on usage errors by itself.
    let cli = Cli::parse();
    let root = cli.root.unwrap_or_else(find_root);
    if let Command::NewStep(args) = cli.command {
        return new_step(&root, &args);
    }
    if let Command::StudentsCopy(args) = cli.command {
        return students_copy(&root, &args);
    }
    match run(&root, cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coursegen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(root: &Path, command: Command) -> Result<ExitCode, CourseError> {
    match command {
        Command::Write => {
            let changed = lab_course::write_all(root)?;
            for path in &changed {
                println!("wrote {}", path.display());
            }
            match changed.len() {
                0 => println!("all {} crates up to date", Version::all().count()),
                n => println!("{n} file(s) changed"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            let drift = lab_course::check_all(root)?;
            if drift.is_empty() {
                println!("all {} crates match {MASTER}", Version::all().count());
                return Ok(ExitCode::SUCCESS);
            }
            for d in &drift {
                println!("{d}");
            }
            println!("{} file(s) drifted from course/lab: {FIX}", drift.len());
            Ok(ExitCode::FAILURE)
        }
        Command::Render(args) => {
            let version = match (args.starter, args.solution) {
                (Some(n), _) => Version::Starter(n),
                (None, Some(n)) => Version::Solution(n),
                (None, None) => unreachable!("clap requires one of them"),
            };
            if args.raw {
                let master = std::fs::read_to_string(root.join(MASTER))
                    .map_err(|source| CourseError::Io { path: root.join(MASTER), source })?;
                print!("{}", lab_course::render_main(&master, version)?);
            } else {
                let files = lab_course::crate_files(root, version)?;
                let main = files.iter().find(|(rel, _)| rel.ends_with("src/main.rs")).expect("a main.rs");
                print!("{}", main.1);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::NewStep(_) => unreachable!("main runs new-step itself"),
        Command::StudentsCopy(_) => unreachable!("main runs students-copy itself"),
    }
}

/// `new-step`: exit 2 when it refuses (the step is there, an anchor is not), as for a
/// usage error, since nothing was done.
fn new_step(root: &Path, args: &NewStepArgs) -> ExitCode {
    use coursegen::new_step;
    let step = new_step::next_step();
    let changes = match new_step::plan(root, &args.title, args.check.as_deref()) {
        Ok(changes) => changes,
        Err(e) => {
            eprintln!("coursegen new-step: {e}");
            return ExitCode::from(2);
        }
    };
    let verb = |created: bool| match (args.dry_run, created) {
        (true, true) => "would create",
        (true, false) => "would edit",
        (false, true) => "created",
        (false, false) => "edited",
    };
    if !args.dry_run {
        if let Err(e) = new_step::write(root, &changes) {
            eprintln!("coursegen new-step: {e}");
            return ExitCode::FAILURE;
        }
    }
    for change in &changes {
        println!("{} {}", verb(change.created), change.path.display());
    }
    if !args.dry_run {
        println!(
            "step {step} scaffolded: write its blocks in {MASTER}, its checks and its page, then \
             `cargo run -p coursegen -- write` (see lab-guide/src/maintainers/coursegen.md)"
        );
    }
    ExitCode::SUCCESS
}

/// `students-copy`: exit 2 when it refuses (DIR not new, no master), as for a usage error.
fn students_copy(root: &Path, args: &StudentsCopyArgs) -> ExitCode {
    let through = args.through.unwrap_or(lab_course::LAST_STEP);
    match lab_course::students_copy::write(root, &args.dir, through) {
        Ok(written) => {
            println!(
                "wrote the students' copy in {} ({} files; steps 0 to {}; no solutions, no master, no code in the step pages)",
                args.dir.display(),
                written.files,
                written.through
            );
            if written.through > 0 {
                println!(
                    "note: the starter of each step is the program after the step before: it holds the \
                     answers of steps 0 to {} (release steps over the term with --through N)",
                    written.through - 1
                );
            }
            ExitCode::SUCCESS
        }
        Err(e @ CourseError::CopyRefused { .. }) => {
            eprintln!("coursegen {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("coursegen students-copy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The nearest ancestor of the working directory holding the master, else the
/// repository this binary was built from.
fn find_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    cwd.ancestors().find(|dir| dir.join(MASTER).is_file()).map_or(built_from, Path::to_path_buf)
}
