//! The judges' fixtures: what the checker observed of real runs, recorded as JSON in
//! checker/fixtures/observations/<case>/observation.json next to the verdicts a person
//! wrote down for it (`expected.json`); the checker's unit tests judge each one
//! (checks::fixtures). Cases: every reference solution (everything holds), every
//! untouched starter (its own step's checks fail) and every broken variant
//! (common/variants.rs), the mistakes of the world in the finished lab too. A variant
//! that does not compile records the compiler's errors instead of a run
//! (`observe::BuildFailureRecord`), judged as its failed `builds`.
//!
//! Re-record after a change to what the checker observes or to the lab's programs:
//!
//! ```text
//! cargo test -p checker --test record_fixtures -- --ignored
//! ```
//!
//! then review the verdicts' diff (`cargo test -p checker --bins fixtures` says which
//! case now disagrees with its `expected.json`). The whole set takes about a quarter of
//! an hour; `RECORD_STEPS` re-records the cases of some steps only, e.g. after a change
//! that steps 5 and later observe:
//!
//! ```text
//! RECORD_STEPS=5-11 cargo test -p checker --test record_fixtures -- --ignored
//! ```
//!
//! and `RECORD_CASES` names cases one by one (a new variant's, say), comma-separated:
//!
//! ```text
//! RECORD_CASES=step-08-epoch-barrier-on-rank-0-only cargo test -p checker --test record_fixtures -- --ignored
//! ```
mod common;

use std::path::{Path, PathBuf};

use common::variants::recorded;

/// The same seed for every case: its variation (world size, subsets) is in the file.
const SEED: &str = "4242";

fn fixtures() -> PathBuf {
    common::repo().join("checker/fixtures/observations")
}

/// Runs the checker on one case, recording its observation; the verdict is not
/// asserted here (that is the unit tests' job, on the recorded file).
fn record(case: &str, step: u8, how: &[&str], krate: Option<&Path>) {
    // Recorded aside and moved in whole: while a case records (minutes), or after an
    // interrupted recording, the judges' tests read no half-made case.
    let staging = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recording").join(format!("{case}.json"));
    std::fs::create_dir_all(staging.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&staging);
    let step_arg = step.to_string();
    let mut args = vec!["verify", "step", step_arg.as_str(), "--seed", SEED];
    args.extend(how);
    let paths: Vec<&Path> = krate.into_iter().collect();
    let v = common::checker_recording(&args, &paths, &staging);
    assert!(staging.is_file(), "{case}: nothing recorded:\n{}", v.output());
    let dir = fixtures().join(case);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&staging, dir.join("observation.json")).unwrap();
    std::fs::remove_file(&staging).unwrap();
    eprintln!("recorded {case}: exit {:?}, failed {:?}", v.code, v.failed());
}

/// Environment variable: the steps whose cases to record, `N` or `FIRST-LAST`
/// (default: every step).
const RECORD_STEPS_ENV: &str = "RECORD_STEPS";

/// The steps `RECORD_STEPS` names.
fn steps_to_record() -> std::ops::RangeInclusive<u8> {
    let Ok(text) = std::env::var(RECORD_STEPS_ENV) else { return 0..=lab_course::LAST_STEP };
    let parse = |s: &str| -> u8 {
        s.trim().parse().unwrap_or_else(|_| {
            panic!(
                "{RECORD_STEPS_ENV}={text:?}: a step (0-{}) or a range of steps (5-11) expected",
                lab_course::LAST_STEP
            )
        })
    };
    match text.split_once('-') {
        Some((first, last)) => parse(first)..=parse(last),
        None => parse(&text)..=parse(&text),
    }
}

/// Environment variable: the cases to record, by name, comma-separated (default: the
/// cases of [`RECORD_STEPS_ENV`]'s steps).
const RECORD_CASES_ENV: &str = "RECORD_CASES";

/// Whether `case` of `step` is to be recorded.
fn wanted(case: &str, step: u8) -> bool {
    match std::env::var(RECORD_CASES_ENV) {
        Ok(names) => names.split(',').any(|n| n.trim() == case),
        Err(_) => steps_to_record().contains(&step),
    }
}

#[test]
#[ignore = "re-records the fixtures (minutes): cargo test -p checker --test record_fixtures -- --ignored"]
fn record_every_case() {
    for step in 0..=lab_course::LAST_STEP {
        let (solution, starter) = (format!("solution-{step:02}"), format!("starter-{step:02}"));
        if wanted(&solution, step) {
            record(&solution, step, &["--solutions"], None);
        }
        if wanted(&starter, step) {
            record(&starter, step, &[], None);
        }
    }
    for v in recorded().iter().filter(|v| wanted(&v.case(), v.step)) {
        // Unconfined, as the solutions' own runs: the sandbox changes nothing observed.
        record(&v.case(), v.step, &["--unsandboxed", "--crate"], Some(&v.crate_dir()));
    }
}

/// The recorded runs are of today's programs: each case's recorded program text is
/// the crate's `src/main.rs` as it is now (a variant's: its solution with the edit).
/// A change to the lab's programs (course/lab/main.rs) means re-recording.
#[test]
fn every_case_recorded_todays_program() {
    let read = |version: lab_course::Version| {
        std::fs::read_to_string(common::repo().join(version.crate_dir()).join("src/main.rs")).unwrap()
    };
    let mut programs: Vec<(String, String)> = (0..=lab_course::LAST_STEP)
        .flat_map(|s| {
            [
                (format!("solution-{s:02}"), read(lab_course::Version::Solution(s))),
                (format!("starter-{s:02}"), read(lab_course::Version::Starter(s))),
            ]
        })
        .collect();
    for v in recorded() {
        programs.push((v.case(), v.program()));
    }
    let stale: Vec<&str> = programs
        .iter()
        .filter(|(case, program)| {
            let file = fixtures().join(case).join("observation.json");
            let recorded: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            recorded["source"].as_str() != Some(program.as_str())
        })
        .map(|(case, _)| case.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "recorded of another program than today's: {stale:?}; re-record them: \
         cargo test -p checker --test record_fixtures -- --ignored"
    );
}

/// Each variant's edit still applies to its solution (the recorded run was of that
/// edit), and every case has both its files.
#[test]
fn every_case_is_recorded_and_every_variant_still_applies() {
    for v in recorded() {
        let _ = v.program();
    }
    let mut cases: Vec<String> = (0..=lab_course::LAST_STEP)
        .flat_map(|s| [format!("solution-{s:02}"), format!("starter-{s:02}")])
        .chain(recorded().iter().map(|v| v.case()))
        .collect();
    cases.sort();
    let mut found: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, cases, "checker/fixtures/observations must hold exactly the recorded cases");
    for case in &cases {
        for file in ["observation.json", "expected.json"] {
            assert!(fixtures().join(case).join(file).is_file(), "{case}/{file} is missing");
        }
    }
}
