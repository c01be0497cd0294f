//! The checks, one module per step. Each step's module declares what the step is, one
//! [`Step`] value: what its program gains ([`Gains`]: from it on the checker runs the
//! program otherwise), the kinds of run it adds ([`RunKind`]) and its checks, each a
//! [`Check`] (its id, a constant beside the declaration; what it observes, the run it
//! needs, the judging function and the hint). [`REGISTRY`] lists the steps' declarations
//! in order: a step's number is its place there, and [`plan`] and [`since`] read the
//! gains and runs from it. `verify`, `grade`, `list`, the guide's test and the points
//! all read the registry; adding a check is one edit of its step's module (and a bullet
//! on the guide's page).
//!
//! A judging function only reads an [`Observation`] (gathered by `observe`) and says
//! what the evidence shows: the property [`holds`](Evidence::Holds), is
//! [`broken`](Evidence::Broken), or the evidence is [`missing`](Evidence::Missing).
//! Missing evidence is a failure only when the run the check needs ended well; when
//! that run crashed, exited with an error or timed out, the verdict is "could not
//! judge", with the failing rank's last error line: the mistake is elsewhere, and the
//! report blames the first step whose own checks failed.
//!
//! So [`Evidence`] is not a verdict but what a judge saw: only [`judge`], which knows how
//! the runs ended, turns it into the [`Verdict`], the one type that `verify`'s report,
//! the progress file and `grade`'s JSON (which spells it as exercism does) all read.
use std::collections::{BTreeMap, BTreeSet};

use lab_trace::event::{ParameterSummary, ParameterValues};
use lab_trace::{EventKind, Record, Trace};

use crate::observe::{Gains, Observation, Plan, RunKind};
use collectives::{Call, Phase, Place};
use lab_trace::CollectiveOp;

mod collectives;
#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod mistakes;
pub mod step_00;
pub mod step_01;
pub mod step_02;
pub mod step_03;
pub mod step_04;
pub mod step_05;
pub mod step_06;
pub mod step_07;
pub mod step_08;
pub mod step_09;
pub mod step_10;
pub mod step_11;
pub mod step_12;
pub mod step_13;
pub mod step_14;
pub mod step_15;
pub mod step_16;

pub use step_00::build_failed;

/// What a step is to the checker: what its program gains, the runs it adds to a
/// verification and its checks. Each step's module declares its `STEP`; its number is
/// its place in [`REGISTRY`].
pub struct Step {
    /// What the program has from this step on, that the checker's runs rely on.
    pub gains: &'static [Gains],
    /// The kinds of run a verification makes from this step on.
    pub runs: &'static [RunKind],
    /// In the order reports show them.
    pub checks: &'static [Check],
}

/// One check of the lab.
pub struct Check {
    /// Its public name (reports, grades, fixtures, the guide): a constant of its step's
    /// module, beside the step's declaration.
    pub id: &'static str,
    /// What it looks at, in a few words.
    pub observes: &'static str,
    /// The run whose failure makes missing evidence "could not judge"; `None`: the
    /// program's text, or a run whose failure is the check's own property.
    pub needs: Option<RunKind>,
    pub hint: &'static str,
    /// `None`: the check does not apply to this observation (its run was not made).
    pub judge: fn(&Observation) -> Option<Finding>,
}

/// What the evidence shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Evidence {
    Holds,
    #[default]
    Broken,
    Missing,
    /// Broken as the consequence of a mistake that a later step's check of the same
    /// report names (the observed text says which): this check's own property cannot
    /// be judged, and the report sends the student to that step instead.
    Consequence,
}

/// A judging function's answer.
#[derive(Debug, Clone, Default)]
pub struct Finding {
    pub evidence: Evidence,
    pub observed: String,
    pub expected: String,
    /// The student's line the finding is about (a collective's call site), when the
    /// trace names one: the report shows it marked in their source.
    pub at: Option<At>,
    /// For [`Evidence::Consequence`]: the check whose mistake this is.
    pub blames: Option<&'static str>,
}

/// A line of the program a finding points at, and what to say beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    /// As the trace records a call site: `src/main.rs:140:13` (file, line, column).
    pub site: String,
    /// Beside the marked line, in a few words: "only rank 0 reaches this all_reduce".
    pub label: String,
}

impl Finding {
    /// Holds when `ok`, broken otherwise.
    pub fn shown(ok: bool, observed: impl Into<String>, expected: impl Into<String>) -> Option<Finding> {
        let evidence = if ok { Evidence::Holds } else { Evidence::Broken };
        Some(Finding { evidence, observed: observed.into(), expected: expected.into(), ..Finding::default() })
    }

    /// Nothing to judge from.
    pub fn missing(observed: impl Into<String>, expected: impl Into<String>) -> Option<Finding> {
        Some(Finding {
            evidence: Evidence::Missing,
            observed: observed.into(),
            expected: expected.into(),
            ..Finding::default()
        })
    }

    /// Pointing at the student's line `site` (a call site the trace recorded).
    pub fn at(mut self, site: Option<&str>, label: impl Into<String>) -> Finding {
        self.at = site.map(|site| At { site: site.to_string(), label: label.into() });
        self
    }
}

/// A verdict on a check, on a step or on a whole grade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// The run it needs failed for another reason: no verdict on its property.
    CouldNotJudge,
    /// Not graded at all: the crate did not build, or the check did not run. Only
    /// `grade` says it, of a step and its checks; [`judge`] never does.
    Error,
}

impl Verdict {
    /// The status in `grade`'s JSON and table, as exercism's test runner spells it: it
    /// has no "could not judge", so such a check is a failure, its message saying why.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail | Verdict::CouldNotJudge => "fail",
            Verdict::Error => "error",
        }
    }
}

// Written straight into the JSON, as its status string.
impl serde::Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One check's verdict, as reported.
#[derive(Debug, Clone)]
pub struct CheckResult {
    pub id: &'static str,
    pub step: u8,
    pub verdict: Verdict,
    pub observed: String,
    pub expected: String,
    pub hint: &'static str,
    /// The student's line it is about, with that part of their source: the report
    /// shows it marked, as rustc does.
    pub excerpt: Option<Excerpt>,
    /// For a check that could not be judged: the check whose mistake stopped the run
    /// it needed, when one of this report's failing checks names it. The report then
    /// says so in one line for all such checks, instead of the diagnosis again.
    pub stopped_at: Option<&'static str>,
    /// The raw text behind the verdict (the failing rank's whole last error line, as
    /// c10d wrote it): shown only with `--verbose`.
    pub raw: Option<String>,
}

impl CheckResult {
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    pub fn failed(&self) -> bool {
        self.verdict == Verdict::Fail
    }

    /// A result with nothing but its verdict and texts (a build's failure, a test's).
    pub fn new(
        id: &'static str,
        step: u8,
        verdict: Verdict,
        observed: String,
        expected: String,
        hint: &'static str,
    ) -> CheckResult {
        CheckResult {
            id,
            step,
            verdict,
            observed,
            expected,
            hint,
            excerpt: None,
            stopped_at: None,
            raw: None,
        }
    }
}

/// Part of the student's source around the line a finding points at: the marked line,
/// and above it the line that opens its block (the `if` it sits in), when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// The file, relative to the crate: `src/main.rs`.
    pub path: String,
    /// The lines, from `first_line` (1-based) to the marked one.
    pub text: String,
    pub first_line: usize,
    /// The marked line and its column (both 1-based).
    pub line: usize,
    pub column: usize,
    pub label: String,
}

impl Excerpt {
    /// The excerpt of `source` (the program's `src/main.rs`) at `at`; `None` when the
    /// site is not in that file or past its end (a trace of another revision).
    pub fn of(source: &str, at: &At) -> Option<Excerpt> {
        let mut parts = at.site.rsplitn(3, ':');
        let (column, line, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (line, column): (usize, usize) = (line.parse().ok()?, column.parse().ok()?);
        if path != "src/main.rs" || line == 0 {
            return None;
        }
        let lines: Vec<&str> = source.lines().collect();
        let marked = *lines.get(line - 1)?;
        let indent = |l: &str| l.len() - l.trim_start().len();
        // The nearest line above with less indentation opens the marked line's block;
        // shown when it is close (a few lines up), as the condition the call sits in.
        let opener = (line.saturating_sub(6)..line - 1)
            .rev()
            .find(|&i| !lines[i].trim().is_empty() && indent(lines[i]) < indent(marked))
            .filter(|&i| {
                lines[i].trim_start().starts_with("if ") || lines[i].trim_start().starts_with("} else")
            });
        let first = opener.map_or(line, |i| i + 1);
        Some(Excerpt {
            path: path.to_string(),
            text: lines[first - 1..line].join("\n"),
            first_line: first,
            line,
            column,
            label: at.label.clone(),
        })
    }
}

/// Every step, in order: a step's number is its place here.
pub static REGISTRY: [&Step; lab_course::STEPS.len()] = [
    &step_00::STEP,
    &step_01::STEP,
    &step_02::STEP,
    &step_03::STEP,
    &step_04::STEP,
    &step_05::STEP,
    &step_06::STEP,
    &step_07::STEP,
    &step_08::STEP,
    &step_09::STEP,
    &step_10::STEP,
    &step_11::STEP,
    &step_12::STEP,
    &step_13::STEP,
    &step_14::STEP,
    &step_15::STEP,
    &step_16::STEP,
];

/// Every check with its step, in the order reports show them.
pub fn all_checks() -> impl Iterator<Item = (u8, &'static Check)> {
    (0u8..).zip(REGISTRY).flat_map(|(step, declared)| declared.checks.iter().map(move |check| (step, check)))
}

/// The step whose check `id` is (ids are unique: a test says so).
pub fn step_of(id: &str) -> u8 {
    all_checks().find(|(_, c)| c.id == id).map(|(step, _)| step).unwrap_or_else(|| panic!("no check `{id}`"))
}

/// The step and check a diverging collective belongs to: `call` (the program's, or the
/// library's on its behalf) at `place`, in a run of kind `run` of step `step`'s
/// verification. The one table that names checks of several steps, kept here beside
/// the registry so that no step's module depends on another's (collectives.rs, which
/// the steps' checks use, asks it).
fn owner_of(call: &Call, place: Place, step: u8, run: RunKind) -> Option<(u8, &'static str)> {
    owning_check(call, place, step, run).map(|id| (step_of(id), id))
}

/// The check a mistaken call belongs to, in the run it was found in.
fn owning_check(call: &Call, place: Place, step: u8, run: RunKind) -> Option<&'static str> {
    use CollectiveOp as Op;
    // In the run split over the TP group, every call a library makes (the blocks'
    // all-reduces, the gathers of the slices, DDP's if it was wrapped) is step 15's.
    if run == RunKind::TensorParallel && !call.by_program() {
        return Some(step_15::TP_COLLECTIVES);
    }
    // On the 2-D mesh, likewise step 16's: the blocks' all-reduces over "tp", DDP's
    // calls over "dp".
    if run == RunKind::Mesh && !call.by_program() {
        return Some(step_16::MESH_COLLECTIVES);
    }
    if !call.by_program() {
        return match call.op {
            Op::BroadcastCoalesced | Op::VerifyParamsAcrossProcesses => Some(step_07::WEIGHTS_SYNCHRONIZED),
            Op::AllGatherIntoTensor | Op::ReduceScatterTensor => Some(step_14::FSDP_COLLECTIVES),
            _ => None,
        };
    }
    match (run, call.op) {
        // The pipeline's metrics go from the last stage to every rank.
        (RunKind::Pipeline, Op::Broadcast | Op::AllReduce | Op::Reduce | Op::AllGather) => {
            Some(step_13::METRICS_FROM_LAST_STAGE)
        }
        (RunKind::Fsdp, Op::AllGatherIntoTensor | Op::ReduceScatterTensor) => Some(step_14::FSDP_COLLECTIVES),
        (RunKind::TensorParallel, Op::AllReduce | Op::Broadcast | Op::Reduce | Op::AllGather) => {
            Some(step_15::TP_COLLECTIVES)
        }
        (RunKind::Mesh, Op::AllReduce | Op::Broadcast | Op::Reduce | Op::AllGather) => {
            Some(step_16::MESH_COLLECTIVES)
        }
        (_, Op::Barrier) => match place {
            Place::BeforeTraining => Some(step_05::DATA_BARRIER),
            // After the epoch's report, from step 12 on: the barrier between rank 0's
            // checkpoint and every rank's load.
            Place::Epoch { phase: Phase::Reported, .. } if step >= since(Gains::Checkpoints) => {
                Some(step_12::READ_AFTER_WHOLE)
            }
            Place::Epoch { .. } => Some(step_08::EPOCH_BARRIER),
        },
        (RunKind::Main, Op::Reduce) => Some(step_08::THROUGHPUT_REDUCED),
        (RunKind::Main, Op::AllReduce | Op::AllGather) => Some(step_09::METRICS_AVERAGED),
        _ => None,
    }
}

/// The step and check of a rank that left the training loop early, after reporting an
/// epoch that another rank went on from (step 11's: the ranks stop together).
fn owner_of_early_leaver() -> (u8, &'static str) {
    (step_of(step_11::RANKS_STOP_TOGETHER), step_11::RANKS_STOP_TOGETHER)
}

/// The first step whose program has `gains`.
pub fn since(gains: Gains) -> u8 {
    (0u8..)
        .zip(REGISTRY)
        .find(|(_, declared)| declared.gains.contains(&gains))
        .map(|(step, _)| step)
        .unwrap_or_else(|| panic!("no step declares {gains:?}"))
}

/// What a verification of step `step` runs: the gains and runs of steps 0..=`step`.
pub fn plan(step: u8) -> Plan {
    let declared = &REGISTRY[..=usize::from(step)];
    Plan {
        step,
        gains: declared.iter().flat_map(|d| d.gains.iter().copied()).collect(),
        runs: declared.iter().flat_map(|d| d.runs.iter().copied()).collect(),
    }
}

/// A check's id as the command line names it (`--hidden-until-due`): one of the registry's.
pub fn check_id(value: &str) -> Result<String, String> {
    let value = value.trim();
    if all_checks().any(|(_, c)| c.id == value) {
        Ok(value.to_string())
    } else {
        Err(format!("there is no check `{value}`: `cargo checker list --checks` lists every check's id"))
    }
}

/// The ids of the checks step `step` introduces.
pub fn ids(step: u8) -> Vec<&'static str> {
    REGISTRY[usize::from(step)].checks.iter().map(|c| c.id).collect()
}

/// `checker list --checks`: every check, its step and what it looks at.
pub fn table() -> String {
    let width = all_checks().map(|(_, c)| c.id.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (step, check) in all_checks() {
        out.push_str(&format!("step {step:>2}  {:<width$}  {}\n", check.id, check.observes));
    }
    out
}

/// The first step with a check that failed (not "could not judge"): where to look first.
pub fn first_failing_step(results: &[CheckResult]) -> Option<u8> {
    results.iter().filter(|r| r.failed()).map(|r| r.step).min()
}

/// Every check of steps 0..=`obs.step`, in step order.
pub fn judge(obs: &Observation) -> Vec<CheckResult> {
    let mut out = Vec::new();
    for (step, check) in all_checks().take_while(|(step, _)| *step <= obs.step) {
        let Some(finding) = (check.judge)(obs) else { continue };
        let (mut stopped_at, mut raw) = (None, None);
        let (verdict, observed) = match finding.evidence {
            Evidence::Holds => (Verdict::Pass, finding.observed),
            Evidence::Broken => (Verdict::Fail, finding.observed),
            Evidence::Consequence => {
                stopped_at = finding.blames;
                (Verdict::CouldNotJudge, format!("could not judge: {}", finding.observed))
            }
            Evidence::Missing => match run_failure(obs, check.needs) {
                Some(failure) => {
                    (stopped_at, raw) = (failure.blames, failure.raw);
                    (
                        Verdict::CouldNotJudge,
                        format!("could not judge: {}\n{}", failure.why, finding.observed),
                    )
                }
                None => (Verdict::Fail, finding.observed),
            },
        };
        let excerpt = finding.at.as_ref().and_then(|at| Excerpt::of(&obs.source, at));
        out.push(CheckResult {
            excerpt: excerpt.filter(|_| verdict == Verdict::Fail),
            stopped_at,
            raw,
            ..CheckResult::new(check.id, step, verdict, observed, finding.expected, check.hint)
        });
    }
    // A check stopped at a mistake that no failing check of this report names is
    // reported on its own line, with its reason.
    let failing: Vec<&'static str> = out.iter().filter(|r| r.failed()).map(|r| r.id).collect();
    for r in &mut out {
        r.stopped_at = r.stopped_at.filter(|id| failing.contains(id));
    }
    out
}

/// Why the run a check needs did not end well.
struct RunFailure {
    /// The first failing process and how it ended, with its last error line when that
    /// is short, and where the ranks' collectives parted ways.
    why: String,
    /// The check whose mistake made the ranks part ways, when a step owns it.
    blames: Option<&'static str>,
    /// The failing process's last error line, whole, when `why` leaves it out or
    /// names only its start (c10d's `CollectiveFingerPrint(...)` dumps).
    raw: Option<String>,
}

/// The longest error line a report shows in full without `--verbose`.
const ERROR_LINE_SHOWN: usize = 200;

/// Why the run a check needs did not end well, if it did not: the first failing
/// process and its last error line, and any collective the ranks disagreed on.
fn run_failure(obs: &Observation, needs: Option<RunKind>) -> Option<RunFailure> {
    let needs = needs?;
    let Some(processes) = obs.processes(needs) else {
        return Some(RunFailure::plain(match needs {
            RunKind::Equivalence => "the comparison did not run",
            RunKind::Resume => "the stopped and resumed runs did not run",
            RunKind::Pipeline => "the pipeline's runs did not run",
            RunKind::Fsdp => "the runs with --fsdp and with DDP did not run",
            RunKind::TensorParallel => "the runs with --tensor-parallel and on one rank did not run",
            RunKind::Mesh => "the runs on a 2-D mesh and with DDP did not run",
            // Checks of these runs report their absence as their own finding.
            RunKind::Main | RunKind::Options | RunKind::FailingRank | RunKind::QuickEvaluation => {
                return None
            }
        }));
    };
    let failed = processes.into_iter().find(|e| !e.success())?;
    let mut why = format!("{} ended with {}", failed.name, failed.describe());
    let mut raw = None;
    if let Some(line) = last_error_line(&failed.stderr) {
        // The error from that line on: c10d's description of collectives that differ
        // follows it, in lines of hundreds of characters of tensor options.
        let from = failed.stderr.rfind(line).map_or(line, |at| failed.stderr[at..].trim_end());
        if from == line && line.chars().count() <= ERROR_LINE_SHOWN {
            why.push_str(&format!(": {line}"));
        } else {
            if let Some(gist) = crate::cut::first_sentence(line, ERROR_LINE_SHOWN) {
                why.push_str(&format!(": {gist}"));
            }
            why.push_str(" (its whole error with --verbose)");
            raw = Some(format!("{}: {from}", failed.name));
        }
    }
    let mut blames = None;
    // The runs of the program as the step is (the comparison's N ranks run it too).
    let trace = match needs {
        RunKind::Main => Some(&obs.main.trace),
        RunKind::Equivalence => obs.equivalence().map(|eq| &eq.many.trace),
        _ => None,
    };
    if let Some(trace) = trace {
        // The step that owns the mistake, when one does; else the two calls as logged.
        let divergence = collectives::Divergence::find(&trace.records, obs.step, RunKind::Main);
        match divergence.as_ref().and_then(|d| Some((d.owner_words()?, &d.sentence, d.owner?.1))) {
            Some((owner, sentence, id)) => {
                blames = Some(id);
                why.push_str(&format!("\nthe ranks' collectives part ways ({owner}): {sentence}"))
            }
            None => {
                if let Some(desync) = collectives::desync(&trace.records) {
                    why.push_str(&format!("\n{desync}"));
                }
            }
        }
    }
    Some(RunFailure { why, blames, raw })
}

impl RunFailure {
    fn plain(why: &str) -> RunFailure {
        RunFailure { why: why.to_string(), blames: None, raw: None }
    }
}

/// The last line that reads like an error (`error: ...`, a panic), else the last one.
pub fn last_error_line(stderr: &str) -> Option<&str> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("error") || l.contains("panicked") || l.starts_with("Error"))
        .or(lines.last())
        .copied()
}

// ---------------------------------------------------------------- shared readings

/// The finding for a trace with a line labkit's trace types cannot read: the judge
/// says so instead of judging without the event that line held. A judge that reads
/// the trace starts `let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };`.
fn malformed(trace: &Trace) -> Option<Finding> {
    let first = trace.malformed.first()?;
    let more = match trace.malformed.len() {
        1 => String::new(),
        n => format!(" (and {} more line(s))", n - 1),
    };
    Finding::missing(
        format!("the trace is malformed: {first}{more}"),
        "every trace line as labkit writes it (lab-trace's events): rebuild the step with this checker's labkit",
    )
}

/// Trace events of one kind, with their records, in time order.
fn events<E: EventKind>(trace: &[Record]) -> Vec<(&Record, &E)> {
    lab_trace::events(trace).collect()
}

/// Rank 0's last recorded parameter values (steps 14 and 15 compare them).
fn last_values(trace: &[Record]) -> Option<&ParameterValues> {
    events::<ParameterValues>(trace).into_iter().rev().find(|(r, _)| r.rank == Some(0)).map(|(_, v)| v)
}

/// The largest difference between two summaries of one parameter, per value (the
/// sums' difference spread over the parameter's values).
fn difference(a: &ParameterSummary, b: &ParameterSummary) -> f64 {
    let sampled = a.sample.iter().zip(&b.sample).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let mean = (a.sum - b.sum).abs() / a.numel.max(1) as f64;
    if a.sample.len() != b.sample.len() || a.numel != b.numel {
        return f64::INFINITY;
    }
    // A NaN anywhere is a difference (f64::max would drop it).
    if sampled.is_nan() || mean.is_nan() || a.sum.is_nan() != b.sum.is_nan() {
        return f64::INFINITY;
    }
    sampled.max(mean)
}

/// Two runs' weights, parameter by parameter (steps 14 and 15): rank 0's of the run
/// judged (`ours`, called `ours_are`) against the reference run's (`theirs`, called
/// `theirs_are`). Fails when a model lacks a parameter of the other; else reports the
/// largest [`difference`] after `saying` ("after 3 steps ... by at most") and fails
/// above `tolerance`.
fn weights_compared(
    theirs: &ParameterValues,
    ours: &ParameterValues,
    (theirs_are, ours_are): (&str, &str),
    saying: String,
    tolerance: f64,
    expected: &str,
) -> Option<Finding> {
    let by_name: BTreeMap<&str, &ParameterSummary> =
        ours.parameters.iter().map(|p| (p.name.as_str(), p)).collect();
    let missing: Vec<&str> =
        theirs.parameters.iter().map(|p| p.name.as_str()).filter(|n| !by_name.contains_key(n)).collect();
    if !missing.is_empty() || by_name.len() != theirs.parameters.len() {
        return Finding::shown(
            false,
            format!(
                "{ours_are} has {} parameters, {theirs_are}'s {}; {theirs_are}'s not in it: {missing:?}",
                by_name.len(),
                theirs.parameters.len()
            ),
            expected,
        );
    }
    let (worst, name) = theirs
        .parameters
        .iter()
        .map(|p| (difference(p, by_name[p.name.as_str()]), p.name.as_str()))
        .fold((0.0, ""), |best, next| if next.0 > best.0 { next } else { best });
    let mut observed = format!("{saying} {worst:.1e}");
    if !name.is_empty() {
        observed.push_str(&format!(" ({name})"));
    }
    if worst > tolerance {
        observed.push_str(&format!(": more than {tolerance:e}"));
    }
    Finding::shown(worst <= tolerance, observed, expected)
}

/// Events of one kind per global rank (the records' `rank`), in order.
fn by_rank<E: EventKind>(trace: &[Record]) -> BTreeMap<usize, Vec<&E>> {
    let mut out: BTreeMap<usize, Vec<&E>> = BTreeMap::new();
    for (record, e) in lab_trace::events::<E>(trace) {
        if let Some(r) = record.rank {
            out.entry(r).or_default().push(e);
        }
    }
    out
}

fn all_stdout(obs: &Observation) -> String {
    obs.main.processes.iter().map(|p| p.ended.stdout.as_str()).collect::<Vec<_>>().join("\n")
}

/// The epoch lines every process printed.
fn epoch_lines(obs: &Observation) -> Vec<String> {
    all_stdout(obs).lines().filter(|l| l.starts_with("Epoch = ")).map(String::from).collect()
}

/// Sets print as `{1, 2}`.
fn set<T: std::fmt::Debug>(s: &BTreeSet<T>) -> String {
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A check's hint nudges: no line of its step's answer (as coursegen picks them for
    /// the hint levels and the students' copy) is in it. The report shows it to a
    /// student who has not asked for the answer.
    #[test]
    fn no_checks_hint_gives_its_steps_answer_away() {
        let master = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(lab_course::MASTER);
        let master = std::fs::read_to_string(&master).unwrap();
        // Compared without spaces, `args.` and a `let name =`: a hint that writes the
        // line a little otherwise still gives it away.
        let bare = |text: &str| -> String {
            let text = text
                .strip_prefix("let mut ")
                .or_else(|| text.strip_prefix("let "))
                .map_or(text, |rest| rest.split_once(" = ").map_or(rest, |(_, value)| value));
            text.replace("args.", "").chars().filter(|c| !c.is_whitespace()).collect()
        };
        for (step, check) in all_checks() {
            let hint = bare(check.hint);
            for line in lab_course::answer_lines(&master, step).unwrap() {
                let line = bare(&line);
                assert!(
                    line.len() < 12 || !hint.contains(&line),
                    "`{}`'s hint gives step {}'s line `{line}`",
                    check.id,
                    step
                );
            }
        }
    }
    use crate::job::Ended;
    use crate::observe::{Run, Runs, Variation};

    fn not_started() -> Ended {
        Ended::not_started("nothing", "")
    }

    /// An observation of a run that produced nothing at all.
    pub(super) fn nothing(step: u8) -> Observation {
        let main = Run { processes: Vec::new(), trace: Trace::default() };
        let mut obs =
            Observation::of_main(step, Variation::for_step(&plan(step), 1), String::new(), main, None);
        let plan = plan(step);
        obs.downloads = plan.has(Gains::DataOncePerNode).then(BTreeMap::new);
        if plan.makes(RunKind::Options) {
            obs.insert(Runs::Options { help: not_started(), bad_value: not_started() });
        }
        if plan.makes(RunKind::FailingRank) {
            obs.insert(Runs::FailingRank(not_started()));
        }
        if plan.makes(RunKind::QuickEvaluation) {
            obs.insert(Runs::QuickEvaluation(not_started()));
        }
        obs
    }

    #[test]
    fn the_registry_is_what_judge_reports() {
        for step in 0..=lab_course::LAST_STEP {
            let results = judge(&nothing(step));
            for s in 0..=step {
                let reported: Vec<&str> = results.iter().filter(|r| r.step == s).map(|r| r.id).collect();
                // device-mapping applies only where ranks compute on GPUs (checks/step_12.rs).
                let expected: Vec<&str> =
                    ids(s).into_iter().filter(|id| *id != step_12::DEVICE_MAPPING).collect();
                assert_eq!(reported, expected, "checks of step {s} in a step {step} run");
            }
        }
        // A step's place in the registry is its module's number: each check's id is a
        // constant of the module `step_NN.rs` of its place.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/checks");
        for (step, check) in all_checks() {
            let module = std::fs::read_to_string(dir.join(format!("step_{step:02}.rs"))).unwrap();
            assert!(
                module.contains(&format!("&str = {:?};", check.id)),
                "a check of step {step} is filed elsewhere: `{}` is not step_{step:02}.rs's",
                check.id
            );
        }
        let all: Vec<&str> = all_checks().map(|(_, c)| c.id).collect();
        let unique: BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(all.len(), unique.len(), "check ids must be unique");
    }

    /// Each gain is declared by one step, the one whose title says so: a step inserted
    /// before it, or a gain filed with another step, would run the program as it is not.
    #[test]
    fn each_gain_is_the_step_whose_title_says_so() {
        for (gains, words) in [
            (Gains::NodeOptions, "--num-nodes"),
            (Gains::ProcessGroup, "process group"),
            (Gains::DataOncePerNode, "once per node"),
            (Gains::Ddp, "DDP"),
            (Gains::ThroughputBarrier, "throughput"),
            (Gains::SpawnsItsRanks, "spawns its own ranks"),
            (Gains::EarlyStop, "quick evaluation"),
            (Gains::Checkpoints, "checkpoint"),
            // The optimizer's state arrives with the checkpoint that must carry it.
            (Gains::Momentum, "checkpoint"),
            (Gains::Pipeline, "pipeline"),
            (Gains::Fsdp, "FSDP"),
            (Gains::TensorParallel, "Tensor parallelism"),
            (Gains::Mesh, "2-D mesh"),
        ] {
            let declaring = REGISTRY.iter().filter(|d| d.gains.contains(&gains)).count();
            assert_eq!(declaring, 1, "{gains:?} is declared by {declaring} steps");
            let step = since(gains);
            let title = lab_course::STEPS[usize::from(step)];
            assert!(title.contains(words), "step {step} is {title:?}, not the one about {words:?}");
        }
    }

    #[test]
    fn the_guide_describes_every_check() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        for (step, check) in all_checks() {
            let bullet = guide_hints::check_hint_for(root, step, check.id);
            assert!(
                bullet.as_deref().is_some_and(|b| b.starts_with(&format!("`{}`: ", check.id))),
                "lab-guide/src/steps/step-{step:02}.md: no bullet `{}`: ... under \"What the checker will test\"",
                check.id
            );
        }
    }

    #[test]
    fn a_run_that_produced_nothing_passes_nothing() {
        let results = judge(&nothing(lab_course::LAB_LAST_STEP));
        let passed: Vec<&str> = results.iter().filter(|r| r.passed()).map(|r| r.id).collect();
        assert!(passed.is_empty(), "passed with no run at all: {passed:?}");
        // No rank failed either, so missing evidence is a failure, not "could not judge";
        // only the runs that never started (the comparison, the quick evaluation) leave
        // their checks unjudged.
        let unjudged: Vec<&str> = results.iter().filter(|r| !r.failed()).map(|r| r.id).collect();
        assert_eq!(unjudged, [step_07::MATCHES_SINGLE_RANK, step_11::TARGET_REACHED], "{results:?}");
    }

    /// The string literals of Rust source `text` with their lines, comments and char
    /// literals left out (enough of Rust's lexing for the checks' own files).
    fn string_literals(text: &str) -> Vec<(usize, String)> {
        let chars: Vec<char> = text.chars().collect();
        let (mut i, mut line, mut out) = (0, 1, Vec::new());
        let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
        while i < chars.len() {
            let c = chars[i];
            if c == '/' && at(i + 1) == '/' {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            } else if c == '/' && at(i + 1) == '*' {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && at(i + 1) == '/') {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                i += 2;
            } else if c == '\'' {
                // A char literal ('"', '\'', 'x'); otherwise a lifetime or a label.
                i += match (at(i + 1), at(i + 2), at(i + 3)) {
                    ('\\', _, '\'') => 4,
                    ('\\', _, _) => 2 + chars[i + 2..].iter().position(|&c| c == '\'').unwrap_or(0) + 1,
                    (_, '\'', _) => 3,
                    _ => 1,
                };
            } else if c == '"'
                || (c == 'r' && matches!(at(i + 1), '"' | '#') && !is_ident(at(i.wrapping_sub(1))))
            {
                let raw = c == 'r';
                let hashes = if raw { chars[i + 1..].iter().take_while(|&&c| c == '#').count() } else { 0 };
                if raw && at(i + 1 + hashes) != '"' {
                    i += 1;
                    continue;
                }
                let start = line;
                i += if raw { hashes + 2 } else { 1 };
                let mut literal = String::new();
                while let Some(&c) = chars.get(i) {
                    if !raw && c == '\\' {
                        literal.push(c);
                        literal.push(at(i + 1));
                        line += usize::from(at(i + 1) == '\n');
                        i += 2;
                        continue;
                    }
                    if c == '"' && chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes
                    {
                        i += 1 + hashes;
                        break;
                    }
                    line += usize::from(c == '\n');
                    literal.push(c);
                    i += 1;
                }
                out.push((start, literal));
            } else {
                line += usize::from(c == '\n');
                i += 1;
            }
        }
        out
    }

    fn is_ident(c: char) -> bool {
        c.is_alphanumeric() || c == '_'
    }

    #[test]
    fn string_literals_are_found_outside_comments_and_chars() {
        let source = "// \"reduce\" in a comment\nlet q = '\"'; let e = '\\''; fn f<'a>(x: &'a str) {}\nmatch op { \"reduce\" => r#\"SUM \"x\"\"#, _ => \"a\\\"b\" } /* \"MAX\" */";
        let found: Vec<(usize, String)> = string_literals(source);
        assert_eq!(
            found,
            [
                (3, lab_trace::CollectiveOp::Reduce.to_string()),
                (3, "SUM \"x\"".to_string()),
                (3, "a\\\"b".to_string())
            ]
        );
    }

    /// The checks match the trace's collectives, reduce ops, dtypes and data sets as
    /// enums (lab_trace's names): a check that matched a literal spelling again would
    /// silently stop matching when the name changed, and would read past a typo.
    #[test]
    fn no_check_matches_a_trace_value_by_its_spelling() {
        let names: BTreeSet<&str> = [
            lab_trace::CollectiveOp::NAMES,
            lab_trace::ReduceOp::NAMES,
            lab_trace::Dtype::NAMES,
            lab_trace::DatasetKind::NAMES,
            lab_trace::DatasetAction::NAMES,
        ]
        .concat()
        .into_iter()
        .collect();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/checks");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect();
        files.sort();
        let (mut literals, mut spelled) = (0, Vec::new());
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (line, literal) in string_literals(&text) {
                literals += 1;
                if names.contains(literal.as_str()) {
                    spelled.push(format!("{}:{line}: \"{literal}\"", file.display()));
                }
            }
        }
        assert!(files.len() > 10 && literals > 500, "read {} files, {literals} literals", files.len());
        assert!(
            spelled.is_empty(),
            "trace values spelled out instead of matched as enums:\n{}",
            spelled.join("\n")
        );
    }

    /// A trace value this checker does not know (a trace of another revision's labkit)
    /// makes its line malformed, reported with the names the checker knows: a check never
    /// judges a call it cannot name.
    #[test]
    fn an_unknown_trace_value_is_reported_as_a_malformed_line() {
        let mut obs = nothing(8);
        let line = serde_json::json!({
            "event": "collective", "pid": 7, "ppid": 1, "local_rank": 0, "rank": 0, "world_size": 2,
            "time": 1.0, "op": "all_to_all", "reduce_op": null, "root": null, "dtype": null,
            "numel": 4, "seq": 0, "group": 0, "values": null,
        });
        obs.main.trace = serde_json::from_value(serde_json::json!([line])).unwrap();
        let results = judge(&obs);
        let reduced = results.iter().find(|r| r.id == step_08::THROUGHPUT_REDUCED).unwrap();
        assert!(reduced.failed(), "{reduced:?}");
        assert!(
            reduced.observed.contains(
                "the trace is malformed: line 1: event `collective`: unknown variant `all_to_all`, expected one of `all_reduce`, "
            ),
            "{}",
            reduced.observed
        );
    }

    #[test]
    fn missing_evidence_after_a_crash_is_not_judged_and_names_the_error() {
        let mut obs = nothing(9);
        let mut crashed = not_started();
        crashed.name = "node0-rank1".into();
        crashed.status = Some(std::os::unix::process::ExitStatusExt::from_raw(2 << 8));
        crashed.stderr = "loading...\nerror: reduce destination rank 3 is out of range\n".into();
        obs.main.processes.push(crate::observe::RankProcess { node: 0, local_rank: Some(1), ended: crashed });
        let results = judge(&obs);
        let metrics = results.iter().find(|r| r.id == step_09::METRICS_AVERAGED).unwrap();
        assert_eq!(metrics.verdict, Verdict::CouldNotJudge, "{metrics:?}");
        assert!(
            metrics.observed.starts_with(
                "could not judge: node0-rank1 ended with exit code 2: error: reduce destination rank 3 is out of range"
            ),
            "{}",
            metrics.observed
        );
        let trains = results.iter().find(|r| r.id == step_00::TRAINS).unwrap();
        assert_eq!(trains.verdict, Verdict::Fail, "a crash is `trains`' own property");
        assert_eq!(first_failing_step(&results), Some(0));
    }
}
