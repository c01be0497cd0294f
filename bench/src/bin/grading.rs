//! Grading throughput: how many handed-in final programs the checker grades per hour on
//! this machine, each on every check of steps 0–11 (`grade all --crates`), sandboxed as
//! grading is, with 1 and 2 submissions side by side (`--jobs`). A measurement for
//! people: nothing asserts on it.
//!
//!     cargo run -p ddp-bench --release --bin grading
//!     cargo run -p ddp-bench --release --bin grading -- --submissions 6 --jobs 1,2 --json grading.json
//!
//! Every submission is the finished lab's program with a line of its own, in a folder of
//! its own, so each is built from its source as a class's programs are (a copy graded
//! twice would reuse its build). One submission is graded first, unmeasured, so that
//! the sandboxed build's shared dependencies are compiled before the clock starts, as
//! they are once a course is set up. Where the time goes comes from the checker's own
//! phase timings (`DDP_LAB_TIMINGS`): the build, each run of the program.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Final programs graded per hour (every check of steps 0-11, sandboxed), with 1 and 2 jobs")]
struct Args {
    /// Submissions graded per measurement.
    #[arg(long, default_value_t = 4)]
    submissions: usize,
    /// The --jobs values to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    jobs: Vec<usize>,
    /// The hidden variations' seed (the same for every measurement).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Grade without the sandbox (where bubblewrap cannot work); the table says so.
    #[arg(long)]
    unsandboxed: bool,
    /// Also write every measurement here, as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

struct Measurement {
    jobs: usize,
    seconds: f64,
    passed: usize,
    /// Seconds per phase, summed over the submissions.
    phases: BTreeMap<String, f64>,
}

fn main() {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if let Err(why) = run(&root, &args) {
        eprintln!("error: {why}");
        std::process::exit(2);
    }
}

fn run(root: &Path, args: &Args) -> Result<(), String> {
    if args.submissions == 0 || args.jobs.contains(&0) {
        return Err("--submissions and every --jobs value must be at least 1".into());
    }
    eprintln!("== building the checker (cargo build -p checker)");
    // As a plain `cargo build` runs, also under `cargo run`: the workspace's build is reused.
    let built = child_process::cargo()
        .current_dir(root)
        .args(["build", "-q", "-p", "checker"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.success() {
        return Err("cargo build -p checker failed; run scripts/setup.sh first".into());
    }
    let checker = root.join("target/debug/checker");
    let source = std::fs::read_to_string(root.join("solutions/step_11/src/main.rs"))
        .map_err(|e| format!("cannot read the finished lab's program: {e}"))?;
    let scratch = tempfile::Builder::new()
        .prefix("ddp-lab-grading-bench-")
        .tempdir()
        .map_err(|e| format!("cannot make a scratch folder: {e}"))?;

    eprintln!("== warming up: one submission, unmeasured");
    let warm = class(scratch.path(), "warm-up", 1, &source)?;
    grade(&checker, root, args, &warm.0, &warm.1, 1)?;

    let mut measurements = Vec::new();
    for &jobs in &args.jobs {
        eprintln!("== {} submissions, --jobs {jobs}", args.submissions);
        let (dir, out) = class(scratch.path(), &format!("jobs-{jobs}"), args.submissions, &source)?;
        measurements.push(grade(&checker, root, args, &dir, &out, jobs)?);
    }

    let how = if args.unsandboxed { "unsandboxed" } else { "sandboxed" };
    println!(
        "{} final programs, every check of steps 0-11, {how}, {} core(s):",
        args.submissions,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:>5} {:>10} {:>14} {:>16} {:>8}",
        "jobs", "seconds", "s / program", "programs / hour", "passed"
    );
    for m in &measurements {
        let per = m.seconds / args.submissions as f64;
        println!("{:>5} {:>10.1} {:>14.1} {:>16.0} {:>8}", m.jobs, m.seconds, per, 3600.0 / per, m.passed);
    }
    println!("where the time goes (seconds per program, each phase's wall time, averaged):");
    for m in &measurements {
        let phases: Vec<String> =
            m.phases.iter().map(|(phase, s)| format!("{phase} {:.1}", s / args.submissions as f64)).collect();
        println!("  --jobs {}: {}", m.jobs, phases.join("; "));
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "submissions": args.submissions,
            "seed": args.seed,
            "sandboxed": !args.unsandboxed,
            "measurements": measurements.iter().map(|m| serde_json::json!({
                "jobs": m.jobs,
                "seconds": m.seconds,
                "seconds_per_program": m.seconds / args.submissions as f64,
                "passed": m.passed,
                "phases": m.phases,
            })).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&json).unwrap_or_default() + "\n";
        atomic_file::write_atomically(path, text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `count` submissions under `scratch/name/`, each the finished program with a line of
/// its own; and where their reports go.
fn class(scratch: &Path, name: &str, count: usize, source: &str) -> Result<(PathBuf, PathBuf), String> {
    let dir = scratch.join(name).join("handed-in");
    for i in 0..count {
        let krate = dir.join(format!("student-{i:03}"));
        std::fs::create_dir_all(krate.join("src"))
            .map_err(|e| format!("cannot write {}: {e}", krate.display()))?;
        let text = format!("// handed in by student {i:03} ({name})\n{source}");
        std::fs::write(krate.join("src/main.rs"), text)
            .map_err(|e| format!("cannot write {}: {e}", krate.display()))?;
    }
    Ok((dir, scratch.join(name).join("results")))
}

/// Grades the class in `dir` with `jobs` side by side: wall time, passes, phase times.
fn grade(
    checker: &Path,
    root: &Path,
    args: &Args,
    dir: &Path,
    out: &Path,
    jobs: usize,
) -> Result<Measurement, String> {
    let mut cmd = Command::new(checker);
    cmd.current_dir(root).env("DDP_LAB_TIMINGS", "1").args(["grade", "all", "--crates"]).arg(dir);
    cmd.arg("--json-dir").arg(out).args(["--jobs", &jobs.to_string(), "--seed", &args.seed.to_string()]);
    if args.unsandboxed {
        cmd.arg("--unsandboxed");
    }
    let started = Instant::now();
    let output = child_process::output(cmd, None).map_err(|e| format!("cannot run the checker: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!("the checker failed ({}):\n{}{}", output.status, output.stdout, output.stderr));
    }
    let mut phases = BTreeMap::new();
    for line in output.stderr.lines() {
        // "[timing] 6.4 s  running 3 rank(s)", "[timing] 3.0 s  finishing the quick evaluation (it started …)"
        let Some(rest) = line.strip_prefix("[timing] ") else { continue };
        let Some((secs, phase)) = rest.split_once(" s  ") else { continue };
        let Ok(secs) = secs.parse::<f64>() else { continue };
        // One name per kind of phase: the build's names the crate.
        let phase = if phase.starts_with("building") { "build" } else { phase };
        let phase = phase.split(" (").next().unwrap_or(phase).to_string();
        *phases.entry(phase).or_insert(0.0) += secs;
    }
    let passed = output.stdout.lines().filter(|l| l.contains(" 120/120 ")).count();
    Ok(Measurement { jobs, seconds, passed, phases })
}
