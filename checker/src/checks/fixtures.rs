//! The judges tested on recorded runs, as exercism tests its runner against expected
//! results: each case in checker/fixtures/observations is an `observation.json` the
//! checker recorded of a real run (tests/record_fixtures.rs re-records them) and an
//! `expected.json` a person wrote: which checks fail, which cannot be judged, and
//! words a report must contain. Every other check of the run must pass. No build, no
//! rank: the whole set is judged in well under a second, so a judge that goes wrong
//! is caught here first; tests/broken.rs keeps a few end-to-end runs as the proof
//! that the recorded observations are what real runs show.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{judge, CheckResult};
use crate::observe::Observation;

/// What a person expects of one recorded case.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    /// What was run, in words (shown when the case is judged otherwise).
    about: String,
    /// The checks that fail; every other check of the run passes.
    #[serde(default)]
    fail: BTreeSet<String>,
    /// The checks left unjudged because the run they need failed for another reason.
    #[serde(default)]
    could_not_judge: BTreeSet<String>,
    /// A check's id and words its report (observed value) must contain.
    #[serde(default)]
    says: BTreeMap<String, String>,
    /// The step the report sends the student to first (its first failing step): for a
    /// mistake that makes the ranks fall out of step, the step whose code it is, which
    /// fails a check of its own, never step 0's `trains` (or "could not judge") in its
    /// place.
    #[serde(default)]
    blames: Option<u8>,
}

/// What a case's `observation.json` holds: a run's observation, or (a mistake that does
/// not compile) the compiler's errors.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Recorded {
    BuildFailed(crate::observe::BuildFailureRecord),
    // Boxed: an observation is far larger than a build failure.
    Ran(Box<Observation>),
}

impl Recorded {
    /// Every check's verdict, as `verify` reports them: a crate that did not build has
    /// only its failed `builds`.
    pub(super) fn judge(&self) -> Vec<CheckResult> {
        match self {
            Recorded::Ran(obs) => judge(obs),
            Recorded::BuildFailed(failed) => {
                let errors = crate::observe::BuildFailure::Errors(failed.build_errors.clone());
                vec![super::build_failed(&failed.package, &errors)]
            }
        }
    }

    /// The observation of a run; none for a crate that did not build.
    fn ran(&self) -> Option<&Observation> {
        match self {
            Recorded::Ran(obs) => Some(obs),
            Recorded::BuildFailed(_) => None,
        }
    }
}

pub(super) struct Case {
    pub(super) name: String,
    pub(super) recorded: Recorded,
    expected: Expected,
}

pub(super) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/observations")
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(super) fn cases() -> Vec<Case> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("checker/fixtures/observations")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().map(case).collect()
}

/// The recorded case `name` (`solution-09`, `step-08-reduce-max`).
pub(super) fn case(name: String) -> Case {
    let dir = fixtures().join(&name);
    Case { recorded: read(&dir.join("observation.json")), expected: read(&dir.join("expected.json")), name }
}

/// How a judged case differs from what is expected of it; empty when it does not.
fn differences(case: &Case, results: &[CheckResult]) -> Vec<String> {
    let mut out = Vec::new();
    let ids = |keep: fn(&CheckResult) -> bool| -> BTreeSet<String> {
        results.iter().filter(|r| keep(r)).map(|r| r.id.to_string()).collect()
    };
    let failed = ids(CheckResult::failed);
    let unjudged = ids(|r| !r.passed() && !r.failed());
    let expected = &case.expected;
    if failed != expected.fail {
        out.push(format!("failed {failed:?}, expected {:?}", expected.fail));
    }
    if unjudged != expected.could_not_judge {
        out.push(format!("could not judge {unjudged:?}, expected {:?}", expected.could_not_judge));
    }
    if let Some(step) = expected.blames {
        let first = super::first_failing_step(results);
        if first != Some(step) {
            out.push(format!("the report starts at step {first:?}, expected step {step}"));
        }
    }
    for (id, words) in &expected.says {
        match results.iter().find(|r| r.id == id) {
            Some(r) if r.observed.contains(words.as_str()) => {}
            Some(r) => out.push(format!("{id} says {:?}, expected it to contain {words:?}", r.observed)),
            None => out.push(format!("{id} was not judged")),
        }
    }
    out
}

#[test]
fn every_recorded_case_is_judged_as_expected() {
    let cases = cases();
    assert!(cases.len() >= 24, "only {} recorded cases", cases.len());
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let found = differences(case, &case.recorded.judge());
            (!found.is_empty())
                .then(|| format!("{} ({}):\n  {}", case.name, case.expected.about, found.join("\n  ")))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "judged unlike checker/fixtures/observations/*/expected.json:\n{}",
        wrong.join("\n")
    );
}

/// Every trace line of the recordings, wherever an observation keeps one.
fn recorded_lines(value: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) if map.contains_key("event") && map.contains_key("pid") => {
            out.push(value.clone())
        }
        serde_json::Value::Object(map) => map.values().for_each(|v| recorded_lines(v, out)),
        serde_json::Value::Array(items) => items.iter().for_each(|v| recorded_lines(v, out)),
        _ => {}
    }
}

/// The typed values of the trace (the collective, its reduce op and dtype, the data set's
/// kind and action) read from the recordings and are written back as recorded: runs
/// recorded before they were typed stay readable, and what is recorded now is the same.
#[test]
fn recorded_trace_values_read_typed_and_write_back_the_same() {
    const TYPED: &[&str] = &["op", "reduce_op", "dtype", "kind", "kind_used", "action"];
    let mut lines = Vec::new();
    for case in cases() {
        recorded_lines(&read(&fixtures().join(&case.name).join("observation.json")), &mut lines);
    }
    let mut typed = 0;
    for line in &lines {
        let record = lab_trace::Record::from_value(line.clone()).unwrap_or_else(|e| panic!("{e}: {line}"));
        let written = record.to_value();
        for field in TYPED.iter().filter(|f| line.get(**f).is_some()) {
            assert_eq!(written.get(*field), line.get(*field), "{field} of {line}");
            typed += 1;
        }
    }
    assert!(typed > 10_000, "only {typed} typed values in {} recorded lines", lines.len());
}

/// Each recording reads as an [`Observation`] and writes back as the same JSON: the
/// fixtures are what the checker records now (`RECORD_OBSERVATION_ENV`), every run a
/// `{"processes", "trace"}` pair, and no field is dropped or added on the way.
#[test]
fn recorded_observations_write_back_as_recorded() {
    for case in cases() {
        let Some(obs) = case.recorded.ran() else { continue };
        let path = fixtures().join(&case.name).join("observation.json");
        let recorded = std::fs::read_to_string(&path).unwrap();
        // Values, not text: serde_json's default parser may round a float's last digit
        // otherwise than the recording wrote it, on both sides alike.
        let value: serde_json::Value = serde_json::from_str(&recorded).unwrap();
        let written = serde_json::to_value(obs).unwrap();
        assert!(written == value, "{}: written back otherwise than recorded", case.name);
        let runs = 1
            + 2 * usize::from(obs.equivalence().is_some())
            + 2 * usize::from(obs.equivalence().is_some_and(|eq| eq.exact.is_some()))
            + 3 * usize::from(obs.resume().is_some())
            + 3 * usize::from(obs.pipeline().is_some())
            + 2 * usize::from(obs.fsdp().is_some())
            + 2 * usize::from(obs.tensor_parallel().is_some())
            + 2 * usize::from(obs.mesh().is_some());
        assert_eq!(run_count(&value), runs, "{}: runs recorded as a processes/trace pair", case.name);
    }
}

/// The objects that are a run (exactly `processes` and `trace`) in a recording.
fn run_count(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(map) => {
            let is_run = map.len() == 2 && map.contains_key("processes") && map.contains_key("trace");
            usize::from(is_run) + map.values().map(run_count).sum::<usize>()
        }
        serde_json::Value::Array(items) => items.iter().map(run_count).sum(),
        _ => 0,
    }
}

/// How the processes of a recorded observation ended by a crash: a signal (SIGSEGV,
/// SIGABRT, ...) or, for ranks `dist::spawn` started, their launcher's or libtorch's
/// words for one. The fail run's rank is killed on purpose and is left out.
fn crashes(obs: &Observation) -> Vec<String> {
    use crate::observe::RunKind;
    use std::os::unix::process::ExitStatusExt;
    let kinds = [
        RunKind::Main,
        RunKind::QuickEvaluation,
        RunKind::Equivalence,
        RunKind::Resume,
        RunKind::Pipeline,
        RunKind::Fsdp,
        RunKind::TensorParallel,
        RunKind::Mesh,
    ];
    let ended: Vec<&crate::job::Ended> =
        kinds.into_iter().flat_map(|kind| obs.processes(kind).unwrap_or_default()).collect();
    let said = ["killed by signal", "terminate called", "Segmentation fault", "core dumped"];
    ended
        .into_iter()
        .filter(|e| !e.timed_out)
        .filter(|e| e.status.and_then(|s| s.signal()).is_some() || said.iter().any(|w| e.stderr.contains(w)))
        .map(|e| format!("{}: {}", e.name, e.describe()))
        .collect()
}

/// No recorded run of a mistake crashed: a student's mistake is an error with a message,
/// never a signal (issue 40: Gloo's abort on mismatched collectives, FSDP's SIGSEGV on an
/// optimizer over the full parameters).
#[test]
fn no_recorded_process_crashed() {
    let crashed: Vec<String> = cases()
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.recorded.ran()?)))
        .flat_map(|(name, obs)| crashes(obs).into_iter().map(move |why| format!("{name}: {why}")))
        .collect();
    assert!(
        crashed.is_empty(),
        "processes that crashed instead of failing with an error:\n{}",
        crashed.join("\n")
    );
}

/// The mistakes of ranks falling out of step are blamed on their own step, at least one
/// for each of steps 4 to 14 (issue 40's suite).
#[test]
fn every_step_from_4_has_an_out_of_step_mistake_blamed_on_it() {
    let blamed: BTreeSet<u8> = cases().iter().filter_map(|c| c.expected.blames).collect();
    for step in 4..=lab_course::LAST_STEP {
        assert!(
            blamed.contains(&step),
            "no recorded mistake blamed on step {step} (expected.json's `blames`)"
        );
    }
    assert!(cases().iter().filter(|c| c.expected.blames.is_some()).count() >= 12);
}

/// Every check is seen holding and seen broken (not merely unjudged) in some case.
#[test]
fn every_check_has_a_holding_and_a_broken_case() {
    let cases = cases();
    let mut held = BTreeSet::new();
    let mut broke = BTreeSet::new();
    for case in &cases {
        for r in case.recorded.judge() {
            if r.passed() {
                held.insert(r.id);
            }
            if r.failed() {
                broke.insert(r.id);
            }
        }
    }
    // Judged only where ranks compute on GPUs, which no machine that records these has
    // had yet: unit-tested on synthetic traces in its module (checks/step_12.rs).
    const GPU_ONLY: &[&str] = &[super::step_12::DEVICE_MAPPING];
    for (_, check) in super::all_checks().filter(|(_, c)| !GPU_ONLY.contains(&c.id)) {
        assert!(held.contains(check.id), "no recorded case where `{}` holds", check.id);
        assert!(broke.contains(check.id), "no recorded case where `{}` is broken", check.id);
    }
}

/// The unjudged verdict is exercised too: a run that failed for another reason.
#[test]
fn some_case_leaves_a_check_unjudged() {
    assert!(cases().iter().any(|c| !c.expected.could_not_judge.is_empty()));
}
