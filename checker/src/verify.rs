//! One verification: build a step's crate, run it on several ranks (`observe`),
//! judge what happened (`checks`) and record the student's progress. It prints nothing
//! but progress; the report is `report`'s job.
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lab_course::Version;

use crate::checks::{self, CheckResult};
use crate::observe::{self, Setup, Variation};
use crate::{cargo_build, confined, prebuilt, progress, sandbox, spinner, standalone};

/// Whose program a verification checks.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// steps/step_NN: the student's own crate.
    Step,
    /// solutions/step_NN.
    Solution,
    /// `--crate DIR`.
    Elsewhere(&'a Path),
}

impl Subject<'_> {
    /// The course's crate of `step` this subject names: none for `--crate DIR`.
    pub fn version(self, step: u8) -> Option<Version> {
        match self {
            Subject::Step => Some(Version::Starter(step)),
            Subject::Solution => Some(Version::Solution(step)),
            Subject::Elsewhere(_) => None,
        }
    }
}

/// What one step's verification gave.
pub struct StepRun {
    pub package: String,
    pub variation: Variation,
    pub results: Vec<CheckResult>,
    /// The first rank's output (stdout then stderr), for a grader to show.
    pub output: String,
    /// Where the run's files were kept (`--keep`).
    pub kept: Option<PathBuf>,
    /// The binary judged, when it was not built here (`--prebuilt`).
    pub prebuilt: Option<PathBuf>,
}

/// Several steps: their crates built in one cargo run first. True when that built
/// them all (each step then skips its own build).
pub fn build_all(root: &Path, steps: &[u8], subject: Subject, sandbox: Option<&sandbox::Sandbox>) -> bool {
    if sandbox.is_some() {
        // Each step is built in a sandbox of its own.
        return false;
    }
    let Some(packages) =
        steps.iter().map(|s| subject.version(*s).map(Version::package_name)).collect::<Option<Vec<String>>>()
    else {
        return false;
    };
    if steps.len() < 2 {
        return false;
    }
    let spinner = spinner::Spinner::new(false);
    let first = if cargo_build::first_build(root) {
        ": the first build compiles tch and the lab's libraries, several minutes; later builds take seconds"
    } else {
        ""
    };
    spinner.phase(&format!("building {} crates{first}", steps.len()));
    let built = cargo_build::build_all(root, &packages);
    spinner.clear();
    built
}

/// How one step is run: the same for every step of a `verify`, `watch` or `grade`.
#[derive(Clone, Copy)]
pub struct StepRunOptions<'a> {
    pub seed: u64,
    pub limit: Duration,
    /// Keep the run's files (`--keep`).
    pub keep: bool,
    /// Its crate is built already (by [`build_all`]).
    pub built: bool,
    pub sandbox: Option<&'a sandbox::Sandbox>,
    /// No spinner: several steps are run side by side (`grade --crates --jobs`).
    pub quiet: bool,
    /// `--prebuilt DIR`: run DIR's binary of the step's package instead of building it,
    /// if it is of this course revision ([`prebuilt::binary`]).
    pub prebuilt: Option<&'a Path>,
}

/// Builds and runs one step and judges it; prints nothing but progress.
pub fn run_step(root: &Path, step: u8, subject: Subject, options: StepRunOptions) -> Result<StepRun, String> {
    let StepRunOptions { seed, limit, keep, built, sandbox, quiet, prebuilt } = options;
    let read = |dir: PathBuf| -> Result<String, String> {
        let main_rs = dir.join("src/main.rs");
        std::fs::read_to_string(&main_rs).map_err(|e| {
            format!(
                "cannot read {}: {e}; restore it with `cargo checker reset step {step}`",
                main_rs.display()
            )
        })
    };
    let version = subject.version(step);
    let (package, source, manifest_dir) = match (subject, version) {
        (_, Some(version)) => (version.package_name(), read(root.join(version.crate_dir()))?, None),
        (Subject::Elsewhere(dir), None) => {
            let crate_ = standalone::prepare(root, step, dir)?;
            (crate_.package, crate_.source, Some(crate_.dir))
        }
        (_, None) => unreachable!("only --crate DIR names no crate of the course"),
    };
    let plan = checks::plan(step);
    let variation = Variation::for_step(&plan, seed);
    // A binary of another revision is not judged at all: the command cannot run (exit 2).
    let prebuilt = match (prebuilt, version) {
        (Some(dir), Some(version)) => Some(prebuilt::binary(dir, version)?),
        (Some(_), None) => {
            return Err("--prebuilt runs the steps' or the solutions' binaries, not --crate's".into())
        }
        (None, _) => None,
    };
    let spinner = spinner::Spinner::new(quiet);
    spinner.step(step);
    match &prebuilt {
        Some(bin) => spinner.phase(&format!("taking {}", bin.display())),
        None if !built && cargo_build::first_build(root) => spinner.phase(&format!(
            "building {package}: the first build compiles tch and the lab's libraries, several minutes; later builds take seconds"
        )),
        None => spinner.phase(&format!("building {package}")),
    }

    let binary = if let Some(bin) = &prebuilt {
        Ok(bin.clone())
    } else if built {
        Ok(cargo_build::binary_path(root, &package))
    } else {
        observe::build(root, &package, manifest_dir.as_deref(), sandbox).map_err(|failure| {
            observe::BuildFailureRecord::record_if_asked(step, &package, &source, &failure);
            checks::build_failed(&package, &failure)
        })
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
            let mirror = fashion_mirror::Mirror::serve(&served)
                .map_err(|e| format!("cannot start the local mirror for {}: {e}", served.display()))?;
            let manifest = served.join(labkit::data::MANIFEST_FILE);
            let confine = sandbox.map(|sandbox| {
                let mut confine = confined::JobSandbox::new(sandbox.clone(), root, &shared_data);
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
            let mut obs = observe::observe(&plan, &bin, source, &variation, &setup, &|p| spinner.phase(p));
            if plan.has(observe::Gains::DataOncePerNode) {
                obs.downloads = Some(mirror.downloads());
            }
            obs.record_if_asked();
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
        if let Err(e) = progress::record_run(root, step, &results) {
            eprintln!("warning: the verdict is not recorded for `checker list`: {e}");
        }
    }
    Ok(StepRun { package, variation, results, output, kept, prebuilt })
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
