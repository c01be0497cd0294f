//! The grade: what `grade` (and `verify`, for its JUnit report) found, in one typed
//! model: the graded steps, per check its verdict, message and points, the seed and
//! the sandbox. Every report format is rendered from it by a module of its own
//! (`formats`); the points table `grade` prints is here.
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use lab_course::LAB_LAST_STEP;
use serde::Serialize;

use crate::checks::{self, CheckResult, Verdict};
use crate::report;
use crate::sandbox::{Sandbox, SandboxDescription};

/// Points a step is worth, shared equally by the checks it introduces.
pub const STEP_POINTS: f64 = 10.0;

/// One grading: every step graded, with the seed and sandbox they ran with.
#[derive(Debug, Clone, Serialize)]
pub struct Grade {
    /// The seed of the hidden variations: `--seed` repeats the runs exactly.
    pub seed: u64,
    pub confinement: Confinement,
    /// The handed-in file that was graded, as found in what was handed in (`--crate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submission: Option<String>,
    pub steps: Vec<StepGrade>,
}

/// How the graded code was confined.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confinement {
    /// In the bubblewrap sandbox, as [`Sandbox::describe`] tells it.
    Sandboxed(SandboxDescription),
    /// With the grader's rights: asked for (`--unsandboxed`), or no sandbox could be
    /// made here (`--unsandboxed-fallback`, with why).
    Unconfined { why: Option<String> },
}

/// The sandbox the runs go into (none when unconfined), resolved once from the options,
/// with the [`Confinement`] the reports state: the one value the commands pass along.
#[derive(Debug, Clone)]
pub struct Sandboxing {
    sandbox: Option<Sandbox>,
    confinement: Confinement,
}

impl Sandboxing {
    /// In `sandbox`, or unconfined (`why_none`: why no sandbox could be made, when the
    /// options allowed going without).
    pub fn new(sandbox: Option<Sandbox>, why_none: Option<String>) -> Sandboxing {
        let confinement = match &sandbox {
            Some(sandbox) => Confinement::Sandboxed(sandbox.describe()),
            None => Confinement::Unconfined { why: why_none },
        };
        Sandboxing { sandbox, confinement }
    }

    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }
}

impl Confinement {
    /// The sandbox as a report's JSON shows it: its description, or "none".
    pub fn sandbox_json(&self) -> serde_json::Value {
        match self {
            Confinement::Sandboxed(described) => {
                serde_json::to_value(described).expect("a sandbox description is plain data")
            }
            Confinement::Unconfined { .. } => serde_json::Value::from("none"),
        }
    }

    /// One line for a person: what confined the code, or why nothing did.
    pub fn describe(&self) -> String {
        match self {
            Confinement::Sandboxed(described) => {
                let memory = described.limits.memory_bytes >> 20;
                let processes = described.limits.processes;
                let capping = &described.capping;
                format!("a bubblewrap sandbox ({memory} MiB of memory, {processes} processes; {capping})")
            }
            Confinement::Unconfined { why: None } => {
                "no sandbox (--unsandboxed): the code ran with the grader's rights".into()
            }
            Confinement::Unconfined { why: Some(why) } => {
                format!(
                    "no sandbox, since none can be made here ({why}): the code ran with the grader's rights"
                )
            }
        }
    }
}

/// One graded step: every check of its run (its own and the earlier steps' it repeats).
#[derive(Debug, Clone, Serialize)]
pub struct StepGrade {
    pub step: u8,
    pub title: &'static str,
    /// Why the step's program did not run at all: the compiler's errors, or what was
    /// handed in holding no program. Every check is then an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    /// The checks of steps 0 to `step`, in the registry's order.
    pub checks: Vec<CheckGrade>,
    /// The first rank's output (stdout then stderr), whole.
    pub output: String,
    /// When the step's build began (Unix time, seconds) and how long build and runs took.
    pub started: u64,
    pub seconds: f64,
}

/// One check's outcome in a step's run.
#[derive(Debug, Clone, Serialize)]
pub struct CheckGrade {
    pub id: &'static str,
    /// The step that introduced the check.
    pub step: u8,
    /// What it looks at, from the registry.
    pub observes: &'static str,
    pub verdict: Verdict,
    /// What the check saw (for a passed check, the evidence).
    pub observed: String,
    /// Why it did not pass: observed, expected and a hint; `None` when it passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub points: f64,
    /// A share of [`STEP_POINTS`] for the step's own checks, 0 for an earlier step's.
    pub max_points: f64,
    /// Not judged because the run stopped at the mistake this failing check reports:
    /// an earlier step's such check is named in that check's message, not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<&'static str>,
}

impl CheckGrade {
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }
}

/// The checks `step` introduces: how many share its points.
fn own_count(step: u8) -> usize {
    checks::ids(step).len()
}

fn share(step: u8) -> f64 {
    STEP_POINTS / own_count(step) as f64
}

impl StepGrade {
    /// A step whose run was judged (or whose crate did not build: the run's results
    /// are then the single `builds` check).
    pub fn judged(
        root: &Path,
        step: u8,
        results: &[CheckResult],
        output: String,
        started: u64,
        seconds: f64,
    ) -> StepGrade {
        if let Some(build) = results.iter().find(|r| r.id == checks::step_00::BUILDS) {
            let why = format!("{}\nhint: {}", build.observed, build.hint);
            // The compiler's output is the message; the run's output is the program's.
            return StepGrade { started, seconds, ..StepGrade::not_run(step, why) };
        }
        let mut checks = Vec::new();
        for (check_step, check) in checks::all_checks().take_while(|(s, _)| *s <= step) {
            let own = check_step == step;
            let max_points = if own { share(step) } else { 0.0 };
            let grade = match results.iter().find(|r| r.id == check.id) {
                Some(r) => CheckGrade {
                    id: check.id,
                    step: check_step,
                    observes: check.observes,
                    verdict: r.verdict,
                    observed: r.observed.clone(),
                    message: message(root, step, r, results, report::verbose()),
                    points: if r.passed() { max_points } else { 0.0 },
                    max_points,
                    stopped_at: r.stopped_at,
                },
                // A check of its own that did not apply to the run earns nothing.
                None if own => CheckGrade {
                    id: check.id,
                    step: check_step,
                    observes: check.observes,
                    verdict: Verdict::Error,
                    observed: "the check did not run".into(),
                    message: Some("the check did not run".into()),
                    points: 0.0,
                    max_points,
                    stopped_at: None,
                },
                None => continue,
            };
            checks.push(grade);
        }
        let output = report::without_raw(&output, report::verbose());
        StepGrade { step, title: title(step), not_run: None, checks, output, started, seconds }
    }

    /// A step whose program did not run (`why`): every check of it is an error.
    pub fn not_run(step: u8, why: String) -> StepGrade {
        let checks = checks::all_checks()
            .take_while(|(s, _)| *s <= step)
            .map(|(check_step, check)| CheckGrade {
                id: check.id,
                step: check_step,
                observes: check.observes,
                verdict: Verdict::Error,
                observed: why.clone(),
                message: Some(why.clone()),
                points: 0.0,
                max_points: if check_step == step { share(step) } else { 0.0 },
                stopped_at: None,
            })
            .collect();
        StepGrade {
            step,
            title: title(step),
            not_run: Some(why),
            checks,
            output: String::new(),
            started: unix_now(),
            seconds: 0.0,
        }
    }

    pub fn points(&self) -> f64 {
        self.checks.iter().map(|c| c.points).sum()
    }

    /// The run's images/sec over every rank, from rank 0's epoch lines: the mean of the
    /// epochs after the first (as the benchmarks measure it), else the only epoch's.
    pub fn images_per_sec(&self) -> Option<f64> {
        let epochs: Vec<labkit::EpochReport> =
            self.output.lines().filter_map(labkit::EpochReport::parse).collect();
        lab_program::steady_images_per_sec(&epochs).or_else(|| epochs.first().map(|e| e.images_per_sec))
    }

    /// Pass when every check of its run passed, error when it did not run.
    pub fn status(&self) -> Verdict {
        if self.not_run.is_some() {
            Verdict::Error
        } else if self.checks.iter().all(CheckGrade::passed) {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }

    /// The checks a grade reports: the step's own (with points), then the earlier
    /// steps' that this run did not pass (without points), except those that could not
    /// be judged because the run stopped at a mistake a listed check reports (its
    /// message names them): no test without points repeats a diagnosis. So the step
    /// passes exactly when every check listed passed.
    pub fn graded(&self) -> impl Iterator<Item = &CheckGrade> {
        let own = self.checks.iter().filter(move |c| c.step == self.step);
        let earlier =
            self.checks.iter().filter(move |c| c.step < self.step && !c.passed() && c.stopped_at.is_none());
        own.chain(earlier)
    }

    /// A graded check's name in the reports: `step 7: weights-synchronized`, and for an
    /// earlier step's check `step 7: trains (from step 0, broken again)`.
    pub fn test_name(&self, check: &CheckGrade) -> String {
        if check.step == self.step {
            format!("step {}: {}", self.step, check.id)
        } else if check.verdict == Verdict::Fail {
            format!("step {}: {} (from step {}, broken again)", self.step, check.id, check.step)
        } else {
            format!("step {}: {} (from step {}, not judged)", self.step, check.id, check.step)
        }
    }

    /// What a student runs to see this step's full report on their own copy.
    pub fn repeat_command(&self, seed: u64) -> String {
        format!("cargo checker verify step {} --seed {seed}", self.step)
    }
}

impl Grade {
    pub fn points(&self) -> f64 {
        self.steps.iter().map(StepGrade::points).sum()
    }

    pub fn max_points(&self) -> f64 {
        STEP_POINTS * self.steps.len() as f64
    }

    /// The finished lab's images/sec, when the finished program was graded and ran: a
    /// class's leaderboard. (Its DDP efficiency needs a run on one rank to compare with,
    /// which grading does not make.)
    pub fn finished_images_per_sec(&self) -> Option<f64> {
        let last = self.steps.iter().find(|s| s.step == LAB_LAST_STEP && s.not_run.is_none())?;
        last.images_per_sec()
    }

    /// Pass when every step passed; error when no step's program ran at all (it does
    /// not compile, or nothing to compile was handed in); fail otherwise.
    pub fn status(&self) -> Verdict {
        if !self.steps.is_empty() && self.steps.iter().all(|s| s.status() == Verdict::Error) {
            Verdict::Error
        } else if self.steps.iter().all(|s| s.status() == Verdict::Pass) {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }

    /// Why nothing could be graded, when nothing ran: each step's reason (usually
    /// the compiler's errors), once.
    pub fn error(&self) -> Option<String> {
        if self.status() != Verdict::Error {
            return None;
        }
        let mut reasons: Vec<&str> = Vec::new();
        for why in self.steps.iter().filter_map(|s| s.not_run.as_deref()) {
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        }
        Some(reasons.join("\n\n"))
    }
}

/// Now, in Unix seconds: when a step's grading began.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn title(step: u8) -> &'static str {
    lab_course::STEPS[usize::from(step)]
}

/// Why a check did not pass, as every report says it; `None` when it passed. A failure
/// reads as the terminal's report shows it (`report::failure`, without colour); a check
/// the run stopped before names the failing one instead of repeating its diagnosis.
/// With `--verbose`, the raw error text follows.
fn message(root: &Path, step: u8, r: &CheckResult, results: &[CheckResult], verbose: bool) -> Option<String> {
    let mut message = match (r.verdict, r.stopped_at) {
        (Verdict::Pass, _) => return None,
        (Verdict::CouldNotJudge, Some(at)) => {
            format!("could not be judged: the run stopped at the mistake that `{at}` reports")
        }
        // Its observation already begins "could not judge: <why>".
        (Verdict::CouldNotJudge, None) => format!("{}\nexpected: {}", r.observed, r.expected),
        (Verdict::Fail | Verdict::Error, _) => report::failure(root, step, r, results, false, verbose),
    };
    if verbose {
        let raws = results.iter().filter(|s| s.id == r.id || s.stopped_at == Some(r.id));
        let mut seen: Vec<&str> = Vec::new();
        for raw in raws.filter_map(|s| s.raw.as_deref()) {
            if !seen.contains(&raw) {
                seen.push(raw);
                message.push_str(&format!("\nraw error (--verbose): {raw}"));
            }
        }
    }
    Some(message)
}

/// The table printed on stdout.
pub fn table(steps: &[StepGrade]) -> String {
    let mut out = String::from("step  points  status  title\n");
    for s in steps {
        out.push_str(&format!(
            "{:>4}  {:>6}  {:<6}  {}\n",
            s.step,
            format!("{}/{}", fmt_points(s.points()), fmt_points(STEP_POINTS)),
            s.status(),
            s.title
        ));
    }
    let points: f64 = steps.iter().map(StepGrade::points).sum();
    out.push_str(&format!("total {}/{}\n", fmt_points(points), fmt_points(STEP_POINTS * steps.len() as f64)));
    out
}

/// "10", "3.3": points as the table shows them.
pub fn fmt_points(p: f64) -> String {
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// What a handed-in program is graded on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Graded {
    /// One step's program, on that step's checks (`grade step N --crate`).
    Step(u8),
    /// The finished lab's program on every check of every step (`grade all --crate`):
    /// one run as the last step judges them all, and each step gets its points from it.
    Final,
}

impl Graded {
    /// The step its program is run as.
    pub fn run_as(self) -> u8 {
        match self {
            Graded::Step(step) => step,
            Graded::Final => LAB_LAST_STEP,
        }
    }

    /// The steps it earns points for.
    pub fn steps(self) -> Vec<u8> {
        match self {
            Graded::Step(step) => vec![step],
            Graded::Final => (0..=LAB_LAST_STEP).collect(),
        }
    }

    pub fn max_points(self) -> f64 {
        STEP_POINTS * self.steps().len() as f64
    }

    /// "step 7's program", "the finished program on steps 0-11".
    pub fn describe(self) -> String {
        match self {
            Graded::Step(step) => format!("step {step}'s program"),
            Graded::Final => format!("the finished program on steps 0-{LAB_LAST_STEP}"),
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn check(id: &'static str, step: u8, passed: bool) -> CheckResult {
        let verdict = if passed { Verdict::Pass } else { Verdict::Fail };
        CheckResult::new(id, step, verdict, format!("saw {id}"), "want".into(), "do it")
    }

    pub fn step_run(step: u8, results: Vec<CheckResult>) -> StepGrade {
        StepGrade::judged(&repo(), step, &results, "Epoch = 0 ...".into(), 1_700_000_000, 12.5)
    }

    /// The repository, whose guide the messages quote.
    pub fn repo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    pub fn grade_of(steps: Vec<StepGrade>) -> Grade {
        Grade { seed: 7, confinement: Confinement::Unconfined { why: None }, submission: None, steps }
    }

    #[test]
    fn points_are_the_share_of_own_checks_passed() {
        // Step 8 introduces two checks: one passing earns half the step.
        let s = step_run(
            8,
            vec![
                check(checks::step_00::TRAINS, 0, true),
                check(checks::step_08::THROUGHPUT_REDUCED, 8, true),
                check(checks::step_08::EPOCH_BARRIER, 8, false),
            ],
        );
        assert_eq!(checks::ids(8), [checks::step_08::THROUGHPUT_REDUCED, checks::step_08::EPOCH_BARRIER]);
        assert_eq!(s.points(), 5.0);
        assert_eq!(s.status(), Verdict::Fail);
        let graded: Vec<(&str, f64, f64)> = s.graded().map(|c| (c.id, c.points, c.max_points)).collect();
        assert_eq!(
            graded,
            [(checks::step_08::THROUGHPUT_REDUCED, 5.0, 5.0), (checks::step_08::EPOCH_BARRIER, 0.0, 5.0)]
        );
        assert!(s.graded().all(|c| c.passed() == c.message.is_none()));
        let epoch_barrier = s.graded().nth(1).unwrap();
        assert!(epoch_barrier.message.as_deref().unwrap().contains("hint: do it"));
        let g = grade_of(vec![s]);
        assert_eq!((g.points(), g.max_points(), g.status()), (5.0, 10.0, Verdict::Fail));
        assert_eq!(g.error(), None);
    }

    /// A check the run stopped before names the failing one in a line, not its
    /// diagnosis again; the failing check's message names it; `--verbose` adds the raw
    /// error to both.
    #[test]
    fn a_check_the_run_stopped_before_names_the_mistake_in_one_line() {
        let failing = CheckResult::new(
            checks::step_09::METRICS_AVERAGED,
            9,
            Verdict::Fail,
            "rank 0 alone called all_reduce".into(),
            "want".into(),
            "do it",
        );
        let stopped = CheckResult {
            stopped_at: Some(checks::step_09::METRICS_AVERAGED),
            raw: Some("node0-rank0: error: CollectiveFingerPrint(...)".into()),
            ..CheckResult::new(
                checks::step_00::TRAINS,
                0,
                Verdict::CouldNotJudge,
                "could not judge: node0-rank0 ended with exit code 1\nrank 0 alone called all_reduce".into(),
                "want".into(),
                "do it",
            )
        };
        let results = [failing.clone(), stopped.clone()];
        let quiet = message(&repo(), 9, &stopped, &results, false).unwrap();
        assert_eq!(
            quiet,
            "could not be judged: the run stopped at the mistake that `metrics-averaged` reports"
        );
        let own = message(&repo(), 9, &failing, &results, false).unwrap();
        assert!(
            own.starts_with("error[metrics-averaged]: step 9: rank 0 alone called all_reduce\n"),
            "{own}"
        );
        assert!(
            own.contains("= note: 1 check could not be judged: the run stopped at this mistake (trains)"),
            "{own}"
        );
        assert!(!own.contains("CollectiveFingerPrint"), "{own}");
        let verbose = message(&repo(), 9, &failing, &results, true).unwrap();
        assert!(
            verbose.ends_with("\nraw error (--verbose): node0-rank0: error: CollectiveFingerPrint(...)"),
            "{verbose}"
        );
        // The stopped check is no test of its own in step 9's grade: only the failing one.
        let s = step_run(9, results.to_vec());
        let graded: Vec<&str> = s.graded().map(|c| c.id).collect();
        assert_eq!(graded, [checks::step_09::METRICS_AVERAGED]);
    }

    #[test]
    fn a_failed_build_is_an_error_worth_nothing() {
        let mut build = check(checks::step_00::BUILDS, 0, false);
        build.observed = "cargo build -p x failed:\nerror[E0425]: cannot find value `y`".into();
        let s = step_run(6, vec![build]);
        assert_eq!(s.points(), 0.0);
        assert_eq!(s.status(), Verdict::Error);
        // Every check of the run is an error, and says why.
        assert_eq!(s.checks.len(), (0..=6).map(|s| checks::ids(s).len()).sum::<usize>());
        assert!(s
            .checks
            .iter()
            .all(|c| c.verdict == Verdict::Error && c.message.as_deref().unwrap().contains("error[E0425]")));
        assert_eq!(s.graded().count(), s.checks.len());
        let g = grade_of(vec![s]);
        assert_eq!(g.status(), Verdict::Error);
        let error = g.error().unwrap();
        assert!(error.starts_with("cargo build -p x failed:\nerror[E0425]"), "{error}");
        assert!(error.contains("hint: do it"), "{error}");
    }

    #[test]
    fn a_grade_errs_only_when_no_step_ran() {
        let ran = step_run(
            0,
            vec![check(checks::step_00::IMPORTS_DIST, 0, true), check(checks::step_00::TRAINS, 0, true)],
        );
        let g = grade_of(vec![ran.clone(), StepGrade::not_run(1, "no main.rs".into())]);
        assert_eq!((g.status(), g.error()), (Verdict::Fail, None));
        let g = grade_of(vec![
            StepGrade::not_run(0, "no main.rs".into()),
            StepGrade::not_run(1, "no main.rs".into()),
        ]);
        assert_eq!((g.status(), g.error().as_deref()), (Verdict::Error, Some("no main.rs")));
        assert_eq!(grade_of(vec![ran]).status(), Verdict::Pass);
    }

    #[test]
    fn broken_earlier_checks_are_listed_without_points() {
        let mut unjudged = check(checks::step_00::IMPORTS_DIST, 0, false);
        unjudged.verdict = Verdict::CouldNotJudge;
        let s = step_run(
            6,
            vec![
                unjudged,
                check(checks::step_00::TRAINS, 0, false),
                check(checks::step_02::WORLD_SIZE, 2, true),
                check(checks::step_06::SAMPLER_SHARES, 6, true),
                check(checks::step_06::SAMPLER_SET_EPOCH, 6, true),
            ],
        );
        assert_eq!(s.points(), 10.0);
        assert_eq!(s.status(), Verdict::Fail);
        let names: Vec<String> = s.graded().map(|c| s.test_name(c)).collect();
        assert_eq!(
            names,
            [
                "step 6: sampler-shares",
                "step 6: sampler-set-epoch",
                "step 6: imports-dist (from step 0, not judged)",
                "step 6: trains (from step 0, broken again)",
            ]
        );
        assert!(s.graded().all(|c| c.step == 6 || c.max_points == 0.0));
    }

    #[test]
    fn verdicts_keep_exercisms_spelling() {
        assert_eq!(
            serde_json::json!([Verdict::Pass, Verdict::Fail, Verdict::CouldNotJudge, Verdict::Error]),
            serde_json::json!(["pass", "fail", "fail", "error"])
        );
    }

    #[test]
    fn the_finished_labs_throughput_is_its_steady_epochs_mean() {
        let lines = "Epoch =  0: Cumulative Time = 2.000, Epoch Time = 2.000, Images/sec = 100, Validation Loss = 0.500, Validation Accuracy = 0.800\n\
                     noise\n\
                     Epoch =  1: Cumulative Time = 3.000, Epoch Time = 1.000, Images/sec = 300, Validation Loss = 0.400, Validation Accuracy = 0.850\n\
                     Epoch =  2: Cumulative Time = 4.000, Epoch Time = 1.000, Images/sec = 500, Validation Loss = 0.300, Validation Accuracy = 0.900\n";
        let mut last = step_run(LAB_LAST_STEP, vec![]);
        last.output = lines.into();
        assert_eq!(last.images_per_sec(), Some(400.0), "the first epoch is warm-up");
        let mut early = step_run(8, vec![]);
        early.output = lines.into();
        assert_eq!(grade_of(vec![early]).finished_images_per_sec(), None, "not the finished lab");
        assert_eq!(grade_of(vec![last]).finished_images_per_sec(), Some(400.0));
        let mut one = step_run(LAB_LAST_STEP, vec![]);
        one.output = lines.lines().next().unwrap().into();
        assert_eq!(one.images_per_sec(), Some(100.0));
        assert_eq!(step_run(LAB_LAST_STEP, vec![]).images_per_sec(), None, "no epoch line");
    }

    #[test]
    fn the_table_totals_the_points() {
        let steps = [
            step_run(
                0,
                vec![check(checks::step_00::IMPORTS_DIST, 0, true), check(checks::step_00::TRAINS, 0, true)],
            ),
            step_run(
                8,
                vec![
                    check(checks::step_08::THROUGHPUT_REDUCED, 8, true),
                    check(checks::step_08::EPOCH_BARRIER, 8, false),
                ],
            ),
        ];
        let t = table(&steps);
        assert!(t.contains("   0   10/10  pass"), "{t}");
        assert!(t.contains("   8    5/10  fail"), "{t}");
        assert!(t.ends_with("total 15/20\n"), "{t}");
    }
}
