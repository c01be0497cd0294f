//! The command line: its subcommands and options (clap), and reading what they name
//! (`step N`, `all`, the repository).
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use lab_course::{LAB_LAST_STEP, LAST_STEP};

use crate::formats::Reports;
use crate::grade::{Graded, Sandboxing};
use crate::verify::Subject;
use crate::{sandbox, Failure};

/// Checks the steps of the DDP lab: builds your step crate, runs it on several CPU
/// ranks (Gloo) with hidden variations (world size, data sizes, seeds), and verifies
/// what the ranks really did: their shares of the data, their weights after every
/// epoch, the reduced throughput, the averaged metrics.
/// `--version`: the checker's, and the course revision of the programs it judges
/// (`--prebuilt` takes only binaries of that revision).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("{} (course revision {})", env!("CARGO_PKG_VERSION"), labkit::revision::COURSE_REVISION)
});

#[derive(Parser, Debug)]
// `cargo checker` is how students run it (the workspace alias): usage lines say so.
#[command(version = VERSION.as_str(), about, long_about = None, bin_name = "cargo checker")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour the report: `auto` on a terminal unless NO_COLOR is set (no-color.org),
    /// `always` (also into a pipe or a file), or `never`.
    // Listed last in every subcommand's help, after its own options.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = clap::ColorChoice::Auto, global = true, display_order = 900)]
    pub color: clap::ColorChoice,
}

// Parsed once per run: a larger variant (grade's many report paths) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Each step: done, failing or not tried (your last `verify`), and a bar of the steps done.
    List {
        /// Instead: every check of every step, and what it looks at.
        #[arg(long)]
        checks: bool,
    },
    /// Help with a step from the lab guide, a level at a time: `cargo checker hint step 7`, then `--level 2`, `--answer`.
    ///
    /// Level 1 (the default): where to look, the idea and the common mistakes. Level 2:
    /// also which functions and types to use, PyTorch's names beside. `--answer` (level
    /// 3): also the code.
    Hint {
        #[arg(value_name = "step N", num_args = 1..=2, required = true, help = step_n_help(""))]
        target: Vec<String>,
        /// How much to show: 1 where to look and the idea, 2 also which functions and
        /// types to use (PyTorch's names beside), 3 also the code (the answer).
        #[arg(long, value_name = "1|2|3", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=i64::from(guide_hints::LEVELS)))]
        level: u8,
        /// Show the code: the step's answer (`--level 3`).
        #[arg(long, conflicts_with = "level")]
        answer: bool,
    },
    /// Restore a step's starter crate (asks first; keeps a backup in .checker/backups): `cargo checker reset step 7`.
    Reset {
        #[arg(value_name = "step N", num_args = 1..=2, required = true, help = step_n_help(""))]
        target: Vec<String>,
        /// Do not ask (the backup is still made).
        #[arg(long)]
        yes: bool,
    },
    /// Points per step, and reports for autograders: `cargo checker grade --json results.json`.
    ///
    /// Each step is worth 10 points, shared by the checks it introduces. Reports, each in
    /// a published format and written atomically: --json (exercism's test-runner results,
    /// version 3), --junit (JUnit XML, for a CI), --gradescope (Gradescope's
    /// results.json), and one per grading platform: --prairielearn, --autolab,
    /// --coderunner, --classroom (GitHub Classroom) and --codegrade. Exits 0 whenever the
    /// reports were made.
    Grade {
        /// `step N` or `all` (the default).
        #[arg(value_name = "step N | all", num_args = 0..=2)]
        target: Vec<String>,
        /// Grade the reference solutions (solutions/step_NN) instead of your steps.
        #[arg(long)]
        solutions: bool,
        #[command(flatten)]
        runs: RunArgs,
        #[command(flatten)]
        reports: Reports,
        /// Grade a handed-in program as one step's (`grade step 7 --crate PATH`): a crate
        /// folder (src/main.rs), a main.rs, a folder holding one crate, or a .zip of any;
        /// only the main.rs is taken, built with the step's own manifest, in a sandbox.
        #[arg(long = "crate", value_name = "PATH", conflicts_with = "solutions")]
        krate: Option<PathBuf>,
        #[arg(
            long,
            value_name = "DIR",
            // Each submission gets its exercism report in --json-dir: no other report.
            conflicts_with_all = ["solutions", "krate", "hidden_until_due"]
                .into_iter()
                .chain(crate::formats::Format::ALL.map(crate::formats::Format::arg)),
            requires = "json_dir",
            help = format!(
                "Grade every submission in DIR (a folder per student holding its program, or a .zip), \
                 each in its own sandbox: `grade step 7 --crates handed-in --json-dir results` writes \
                 results/<name>.json (exercism's format) per submission and results/gradebook.csv (a \
                 row each, points per step). `grade all --crates` grades finished programs on every \
                 check of the DLI lab's steps 0-{LAB_LAST_STEP} (the steps after it are graded one by one)"
            )
        )]
        crates: Option<PathBuf>,
        /// With --crates: where each submission's report goes, as <name>.json.
        #[arg(long, value_name = "DIR", requires = "crates")]
        json_dir: Option<PathBuf>,
        /// With --crates: grade this many submissions side by side (fewer when the
        /// machine's memory does not hold that many runs at --memory-limit each). Each
        /// run uses about 2 cores' worth of processes; on 2 cores, 2 jobs fill the gaps
        /// where a run waits.
        #[arg(long, value_name = "N", default_value_t = 1, requires = "crates", value_parser = clap::value_parser!(u64).range(1..=64))]
        jobs: u64,
        /// With --crates: grade only task I's share of N (every N-th submission, from the
        /// I-th), as one task of a Slurm job array; `cargo checker gradebook` then
        /// merges the tasks' reports (scripts/slurm/submit.sh does both).
        #[arg(long, value_name = "I/N", requires = "crates")]
        shard: Option<Shard>,
        /// Judge the binaries in DIR (DIR/step_NN, or DIR/solution_NN with --solutions)
        /// instead of building: programs built on another machine, e.g. a GPU node without
        /// Rust (scripts/gpu-bundle.sh). Each must be of this checker's course revision
        /// (`checker --version` shows it); one of another is refused (exit 2).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["krate", "crates"])]
        prebuilt: Option<PathBuf>,
    },
    /// The gradebook (CSV, a row per submission) of the reports in a --json-dir:
    /// `cargo checker gradebook results --crates handed-in`, after graded shards.
    Gradebook {
        /// The folder the reports were written to (--json-dir).
        #[arg(value_name = "RESULTS")]
        results: PathBuf,
        /// The folder of submissions: each without a report shows as missing.
        #[arg(long, value_name = "DIR")]
        crates: Option<PathBuf>,
    },
    /// Write what a grading platform needs: `cargo checker autograder gradescope|prairielearn|autolab|coderunner|codegrade --step 7 --out DIR`,
    /// `cargo checker autograder github-classroom --repository OWNER/NAME --out DIR`.
    Autograder {
        #[command(subcommand)]
        platform: AutograderFor,
    },
    /// Verify a step (and every earlier step's checks): `cargo checker verify step 7`, or `cargo checker verify all`.
    Verify {
        #[arg(value_name = "step N | all", num_args = 1..=2, required = true, help = step_n_help(" or `all`"))]
        target: Vec<String>,
        /// Check the reference solutions (solutions/step_NN) instead of your steps.
        #[arg(long)]
        solutions: bool,
        #[command(flatten)]
        runs: RunArgs,
        /// Keep the run's files (outputs, trace) and print where they are.
        #[arg(long)]
        keep: bool,
        /// Check a program elsewhere (a copy handed in for grading: a crate folder, a
        /// main.rs, or a .zip of one) instead of steps/step_NN; it is built with the
        /// step's own manifest.
        #[arg(long = "crate", value_name = "PATH", conflicts_with = "solutions")]
        krate: Option<PathBuf>,
        /// Also write the verdicts as JUnit XML here (one testsuite per step, one
        /// testcase per check), for a CI.
        #[arg(long, value_name = "PATH")]
        junit: Option<PathBuf>,
        /// Judge the binaries in DIR (DIR/step_NN, or DIR/solution_NN with --solutions)
        /// instead of building: programs built on another machine, e.g. a GPU node without
        /// Rust (scripts/gpu-bundle.sh). Each must be of this checker's course revision
        /// (`checker --version` shows it); one of another is refused (exit 2).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["krate"])]
        prebuilt: Option<PathBuf>,
    },
    /// Verify a step, then again each time you save a file of its src/: `cargo checker watch step 7`.
    ///
    /// Keep it running in a second terminal while you edit; Ctrl-C stops it. One seed
    /// serves the whole session, so a check fails or passes because of your edit, not
    /// because of a new hidden variation.
    Watch {
        #[arg(value_name = "step N", num_args = 1..=2, required = true, help = step_n_help(""))]
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
    /// Print a tab-completion script for the `checker` binary: `cargo checker completions bash`.
    ///
    /// For bash: `cargo checker completions bash > ~/.local/share/bash-completion/completions/checker`;
    /// it completes `target/debug/checker` run by that name (on PATH), subcommands and options.
    Completions {
        /// The shell to write the script for.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

/// What `autograder` writes, a subcommand per grading platform, with its options (the
/// platforms themselves are [`crate::autograder::Platform`], Gradescope and GitHub
/// Classroom aside, whose files are made their own way).
#[derive(Subcommand, Debug)]
pub enum AutograderFor {
    /// Gradescope's autograder: setup.sh, run_autograder and the course, zipped as
    /// DIR/autograder.zip to upload on the assignment's "Configure Autograder" page.
    ///
    /// run_autograder grades the student's submission (a crate folder, a main.rs, a
    /// folder holding one crate, or a .zip of any) as step N's program and writes
    /// results/results.json; in a sandbox where bubblewrap can make one, else
    /// unsandboxed, which the results say.
    Gradescope {
        #[command(flatten)]
        graded: GradedStep,
        /// Checks whose tests students see only after the due date: their ids,
        /// e.g. `--hidden-until-due epoch-barrier,trains`.
        #[arg(long, value_name = "CHECK,...", value_delimiter = ',', value_parser = crate::checks::check_id)]
        hidden_until_due: Vec<String>,
    },
    /// PrairieLearn's external grader: DIR/Dockerfile (the grading image: the course
    /// built in /opt/ddp-lab), DIR/entrypoint (grades /grade/student into
    /// /grade/results/results.json), and the question, DIR/question (info.json with
    /// externalGradingOptions, question.html).
    Prairielearn(PlatformArgs),
    /// Autolab's autograder: DIR/autograde-Makefile and DIR/autograde.tar (its driver
    /// prints the autoresult, a problem per step), and DIR/Dockerfile for Tango's image.
    Autolab(PlatformArgs),
    /// Moodle CodeRunner: DIR/template.py, a combinator template grader for the question,
    /// and DIR/setup.sh with the course for the Jobe server.
    Coderunner(PlatformArgs),
    /// CodeGrade's AutoTest: DIR/setup.sh (global setup) and DIR/run.sh (a Unit Test
    /// step writing JUnit XML to $CG_JUNIT_XML_LOCATION), with the course as fixtures.
    Codegrade(PlatformArgs),
    /// GitHub Classroom's autograding workflow for the students' repositories,
    /// DIR/.github/workflows/classroom.yml: a test per step (GitHub Classroom's command
    /// grader, 10 points each), graded by the checker of OWNER/NAME at a pinned commit
    /// that the students cannot edit.
    ///
    /// Put the file in the assignment's template repository (a copy of this course).
    /// The repository must be readable by the students' workflows (public, or in the
    /// same organisation with Actions access).
    GithubClassroom {
        /// The instructor's repository on GitHub that holds this course: OWNER/NAME.
        #[arg(long, value_name = "OWNER/NAME")]
        repository: String,
        /// The commit the checker comes from (default: this checkout's HEAD, which must
        /// be pushed to the repository).
        #[arg(long, value_name = "COMMIT")]
        revision: Option<String>,
        /// A step earns its points only when every check passes: each step is a command
        /// grader's all-or-nothing test. By default each check passed earns its share:
        /// each step writes the checker's runner result for the grading reporter to sum.
        #[arg(long)]
        points_per_step: bool,
        /// Where to write .github/workflows/classroom.yml.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Every platform's `autograder`: the step graded and where its files go.
#[derive(clap::Args, Debug)]
pub struct GradedStep {
    #[arg(
        long,
        value_name = "N|all",
        value_parser = graded_program,
        help = format!(
            "The step whose program students hand in (0 to {LAST_STEP}), graded on that step's \
             checks; or `all`: the finished program, graded on every check of the DLI lab's steps \
             0-{LAB_LAST_STEP} (a step after it is graded on its own)"
        )
    )]
    pub step: Graded,
    /// Where to write the platform's files (Gradescope's: autograder.zip, with its
    /// setup.sh and run_autograder beside it to read).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// What `autograder prairielearn|autolab|coderunner|codegrade` are told.
#[derive(clap::Args, Debug)]
pub struct PlatformArgs {
    #[command(flatten)]
    pub graded: GradedStep,
    /// The grading image's name, as the platform pulls it (default ddp-lab-grader:step-NN).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,
}

/// `completions SHELL`: the script that makes SHELL complete the checker's subcommands
/// and options, written to stdout.
pub fn write_completions(shell: clap_complete::Shell) {
    let mut cli = <Cli as clap::CommandFactory>::command();
    // The binary's own name: a shell completes a command word, and `cargo checker` is two.
    clap_complete::generate(shell, &mut cli, "checker", &mut std::io::stdout());
}

/// Task `index` of `count` (`--shard I/N`): it grades the submissions whose place in
/// the sorted list is `index` modulo `count`, as one task of a Slurm job array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let parsed = text.split_once('/').and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
        match parsed {
            Some((index, count)) if index < count => Ok(Shard { index, count }),
            _ => Err(format!(
                "`{text}` is not a shard: write I/N, task I (from 0) of N, e.g. \
                 --shard \"$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT\""
            )),
        }
    }
}

/// How the programs are run: shared by `verify`, `watch` and `grade`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The seed of the hidden variations, the programs' own --seed among them (default: a
    /// new one, printed, so that a run can be repeated exactly; `watch` keeps one for its
    /// session).
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
    /// work); the reports then say so.
    #[arg(long)]
    unsandboxed: bool,
    /// Where no sandbox can be made here, run handed-in code unsandboxed instead of
    /// refusing, and say so in the reports: for a grading container that is itself the
    /// isolation (Gradescope's: a fresh container per submission).
    #[arg(long, conflicts_with = "unsandboxed")]
    unsandboxed_fallback: bool,
    /// Memory a sandboxed run may use, all its processes together, in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 6144, value_parser = clap::value_parser!(u64).range(64..))]
    memory_limit: u64,
    /// Also show the raw text behind a verdict: a failing rank's whole error as c10d
    /// wrote it (its `CollectiveFingerPrint(...)` dumps), which reports otherwise cut to
    /// its first sentence once they have named the mistake.
    #[arg(long, short)]
    pub verbose: bool,
}

impl RunArgs {
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(new_seed)
    }

    /// `--memory-limit` in bytes: what one sandboxed run may use.
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit << 20
    }

    pub fn limit(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// The sandbox the runs go into: required for handed-in code (`untrusted`) unless
    /// `--unsandboxed`, asked for with `--sandbox`; an error (exit 2) when wanted and
    /// impossible here, unless `--unsandboxed-fallback` (then the reports say why there
    /// is none).
    pub fn sandboxing(&self, untrusted: bool) -> Result<Sandboxing, Failure> {
        let (sandbox, why_none) = self.sandbox_or_why(untrusted)?;
        Ok(Sandboxing::new(sandbox, why_none))
    }

    fn sandbox_or_why(&self, untrusted: bool) -> Result<(Option<sandbox::Sandbox>, Option<String>), Failure> {
        if self.unsandboxed {
            if untrusted {
                eprintln!(
                    "warning: --unsandboxed: the handed-in code runs with all of your rights \
                     (your files, your network, your environment)"
                );
            }
            return Ok((None, None));
        }
        if !(self.sandbox || untrusted || self.unsandboxed_fallback) {
            return Ok((None, None));
        }
        let limits = sandbox::Limits { memory: self.memory_limit << 20, ..Default::default() };
        match sandbox::Sandbox::probe(limits) {
            Ok(sandbox) => Ok((Some(sandbox), None)),
            Err(why) if self.unsandboxed_fallback => {
                let cause = why.cause.clone();
                eprintln!(
                    "warning: --unsandboxed-fallback: no sandbox can be made here ({cause}); the \
                     handed-in code runs with all of your rights, and the reports say so"
                );
                Ok((None, Some(cause)))
            }
            Err(why) => Err(Failure::CannotRun(why.to_string())),
        }
    }
}

/// Whose program a command checks, from `--crate` and `--solutions` (worked out here
/// once, for verify, grade and watch): `--solutions` fails in a students' copy, which
/// holds none.
pub fn subject(krate: Option<&Path>, solutions: bool) -> Result<Subject<'_>, Failure> {
    match (krate, solutions) {
        (Some(dir), _) => Ok(Subject::Elsewhere(dir)),
        (None, false) => Ok(Subject::Step),
        (None, true) => match lab_course::students_copy::read_mark(&repo_root()) {
            None => Ok(Subject::Solution),
            Some(_) => Err(Failure::CannotRun(
                "this is the students' copy of the lab: it holds no solutions (they are with your \
                 instructor); drop --solutions to check your own steps"
                    .into(),
            )),
        },
    }
}

pub fn repo_root() -> PathBuf {
    // The checker runs from the repository (cargo run -p checker), or names it.
    if let Ok(dir) = std::env::var(checker::ROOT_ENV) {
        return PathBuf::from(dir);
    }
    let mut dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    loop {
        // The instructor's repository has the master; a students' copy, its mark.
        if dir.join(lab_course::MASTER).is_file() || dir.join(lab_course::students_copy::MARK).is_file() {
            return dir;
        }
        if !dir.pop() {
            return PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        }
    }
}

/// The help of a `step N` argument: which N there are.
fn step_n_help(or: &str) -> String {
    format!("`step N` (N from 0 to {LAST_STEP}){or}")
}

fn new_seed() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64 % 1_000_000).unwrap_or(1)
}

/// `--step`'s value: a step of the lab, or `all` for the finished program.
fn graded_program(value: &str) -> Result<Graded, String> {
    if value == "all" {
        return Ok(Graded::Final);
    }
    match value.parse::<u8>() {
        Ok(step) if step <= LAST_STEP => Ok(Graded::Step(step)),
        _ => Err(format!(
            "{value:?} is not a step: write a step from 0 to {LAST_STEP}, or `all` for the finished program"
        )),
    }
}

/// `["step", "7"]` or `["7"]`.
pub fn one_step(target: &[String]) -> Result<u8, String> {
    if target.len() == 1 && target[0] == "all" {
        return Err(format!("name one step: `step N` (N from 0 to {LAST_STEP})"));
    }
    parse_target(target).map(|steps| steps[0])
}

/// `["step", "7"]`, `["7"]` or `["all"]`.
pub fn parse_target(target: &[String]) -> Result<Vec<u8>, String> {
    let words: Vec<&str> = target.iter().map(String::as_str).collect();
    let number = match words.as_slice() {
        ["all"] => return Ok((0..=LAST_STEP).collect()),
        ["step", n] | [n] => n,
        _ => {
            return Err(format!(
                "`verify {}`: write `verify step N` (N from 0 to {LAST_STEP}) or `verify all`",
                words.join(" ")
            ))
        }
    };
    match number.parse::<u8>() {
        Ok(n) if n <= LAST_STEP => Ok(vec![n]),
        _ => Err(format!("there is no step {number}: the steps are 0 to {LAST_STEP}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_task_i_of_n() {
        assert_eq!("0/3".parse::<Shard>(), Ok(Shard { index: 0, count: 3 }));
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["3/3", "1", "a/b", "-1/2", "1/0"] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains("SLURM_ARRAY_TASK_ID"), "{bad}: {err}");
        }
    }

    /// Each format of the one list is an option of `grade` that lands in its own field
    /// of `Reports`, and one that `--crates` refuses (the list is what it conflicts with).
    #[test]
    fn every_format_is_a_grade_option_that_crates_refuses() {
        use crate::formats::Format;
        assert!(!Reports::default().any());
        for format in Format::ALL {
            let option = format!("--{}", format.arg());
            let cli = Cli::try_parse_from(["checker", "grade", "step", "1", &option, "out.x"])
                .unwrap_or_else(|e| panic!("{option}: {e}"));
            let Command::Grade { reports, .. } = cli.command else { panic!("{option}: not grade") };
            for other in Format::ALL {
                let expected = (other == format).then_some(std::path::Path::new("out.x"));
                assert_eq!(reports.path(other), expected, "{option} set {other:?}'s path");
            }
            assert!(reports.any(), "{option}");
            let batch =
                ["checker", "grade", "step", "1", "--crates", "in", "--json-dir", "o", &option, "out.x"];
            let err = Cli::try_parse_from(batch).err().unwrap_or_else(|| panic!("--crates took {option}"));
            assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict, "{option}: {err}");
        }
    }
}
