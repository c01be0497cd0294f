//! The reports of real gradings, in every format at once (one run each): a solution,
//! an untouched starter and a submission that does not compile, graded as handed-in
//! crates of step 0 (the cheapest step), each report checked against its published
//! format (tests/common/formats.rs) and for the verdicts it must carry.
mod common;

use std::path::{Path, PathBuf};

use common::formats::{self, Suite};
use common::{checker_with, repo, sandbox_works, variant};
use serde_json::Value;

/// The reports of one `grade step 0 --crate`, every format at once.
struct Reports {
    exercism: Value,
    junit: Vec<Suite>,
    gradescope: Value,
    prairielearn: Value,
    /// What Autolab's driver prints last: the autoresult line.
    autolab: Value,
    coderunner: Value,
    classroom: Value,
    codegrade: Vec<Suite>,
}

/// A copy of the untouched starter of step 0, in a stable place (its build is reused).
fn starter() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("formats-starter");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::copy(repo().join("steps/step_00/src/main.rs"), dir.join("src/main.rs")).unwrap();
    dir
}

fn grade(krate: &Path, seed: &str) -> Reports {
    let out = tempfile::tempdir().unwrap();
    let path = |name: &str| out.path().join(name);
    let how = if sandbox_works() { "--sandbox" } else { "--unsandboxed" };
    let formats = [
        ("--json", "e.json"),
        ("--junit", "j.xml"),
        ("--gradescope", "g.json"),
        ("--prairielearn", "pl.json"),
        ("--autolab", "autolab.txt"),
        ("--coderunner", "cr.json"),
        ("--classroom", "gc.json"),
        ("--codegrade", "cg.xml"),
    ];
    let mut args: Vec<PathBuf> = vec![krate.to_path_buf()];
    for (flag, file) in formats {
        args.extend([PathBuf::from(flag), path(file)]);
    }
    let paths: Vec<&Path> = args.iter().map(PathBuf::as_path).collect();
    let v = checker_with(&["grade", "step", "0", "--seed", seed, how, "--crate"], &paths);
    assert_eq!(v.code, Some(0), "grade exits 0 once its reports are made:\n{}", v.output());
    let read = |p: &str| std::fs::read_to_string(path(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let json = |p: &str| -> Value { serde_json::from_str(&read(p)).unwrap() };
    let (exercism, gradescope) = (json("e.json"), json("g.json"));
    let problems = formats::exercism_v3(&exercism);
    assert!(problems.is_empty(), "not exercism v3: {problems:#?}\n{exercism:#}");
    let problems = formats::gradescope(&gradescope);
    assert!(problems.is_empty(), "not Gradescope's results.json: {problems:#?}\n{gradescope:#}");
    let xml = read("j.xml");
    let junit = formats::junit(&xml).unwrap_or_else(|p| panic!("not JUnit XML: {p:#?}\n{xml}"));
    let text = read("pl.json");
    let problems = formats::prairielearn(&text);
    assert!(problems.is_empty(), "not PrairieLearn's results.json: {problems:#?}\n{text}");
    let printed = read("autolab.txt");
    let problems = formats::autolab(&printed);
    assert!(problems.is_empty(), "not Autolab's autoresult: {problems:#?}\n{printed}");
    let coderunner = json("cr.json");
    let problems = formats::coderunner(&coderunner);
    assert!(problems.is_empty(), "not CodeRunner's outcome: {problems:#?}\n{coderunner:#}");
    let classroom = json("gc.json");
    let problems = formats::classroom_runner(&classroom);
    assert!(problems.is_empty(), "not a GitHub Classroom runner result: {problems:#?}\n{classroom:#}");
    let xml = read("cg.xml");
    let codegrade =
        formats::codegrade_junit(&xml).unwrap_or_else(|p| panic!("not CodeGrade's JUnit: {p:#?}\n{xml}"));
    Reports {
        exercism,
        junit,
        gradescope,
        prairielearn: serde_json::from_str(&text).unwrap(),
        autolab: serde_json::from_str(printed.lines().last().unwrap()).unwrap(),
        coderunner,
        classroom,
        codegrade,
    }
}

/// The CodeRunner table's rows, less the header: (iscorrect, the check's name).
fn coderunner_rows(outcome: &Value) -> Vec<(i64, String)> {
    let rows = outcome["testresults"].as_array().unwrap();
    let header = rows[0].as_array().unwrap();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (correct, check) = (column("iscorrect"), column("Check"));
    rows[1..].iter().map(|r| (r[correct].as_i64().unwrap(), r[check].as_str().unwrap().to_string())).collect()
}

fn statuses(report: &Value, key: &str) -> Vec<(String, String)> {
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t[key].as_str().unwrap().to_string()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn property<'a>(suite: &'a Suite, name: &str) -> &'a str {
    suite.properties.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("")
}

#[test]
fn a_solution_passes_in_every_format() {
    let krate = variant(0, "formats-solution", "fn main", "fn main");
    let r = grade(&krate, "21");
    assert_eq!(r.exercism["status"], "pass");
    assert_eq!(
        statuses(&r.exercism, "status"),
        pairs(&[("step 0: imports-dist", "pass"), ("step 0: trains", "pass")])
    );
    let tests = r.exercism["tests"].as_array().unwrap();
    assert!(tests[1]["output"].as_str().unwrap().contains("Epoch ="), "{}", tests[1]["output"]);
    assert_eq!(
        tests[1]["test_code"].as_str().unwrap().lines().next(),
        Some("cargo checker verify step 0 --seed 21")
    );
    assert_eq!(tests[1]["task_id"], 1);

    assert_eq!(r.gradescope["score"], 10.0);
    assert_eq!(
        statuses(&r.gradescope, "status"),
        pairs(&[("step 0: imports-dist", "passed"), ("step 0: trains", "passed")])
    );
    assert!(r.gradescope["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["score"] == 5.0 && t["max_score"] == 5.0));
    assert_eq!(r.gradescope["extra_data"]["seed"], 21);
    if sandbox_works() {
        assert_eq!(r.gradescope["extra_data"]["sandbox"]["tool"], "bubblewrap", "{}", r.gradescope);
        assert_eq!(r.gradescope["extra_data"]["sandbox"]["limits"]["memory_bytes"], 6u64 << 30);
    }

    let [suite] = &r.junit[..] else { panic!("one testsuite per step: {:?}", r.junit) };
    assert_eq!(suite.name, "step 0");
    let cases: Vec<(&str, &str, bool)> =
        suite.cases.iter().map(|c| (c.classname.as_str(), c.name.as_str(), c.outcome.is_none())).collect();
    assert_eq!(cases, [("ddp-lab.step_00", "imports-dist", true), ("ddp-lab.step_00", "trains", true)]);
    assert_eq!(property(suite, "seed"), "21");
    assert!(suite.system_out.contains("Epoch ="), "{}", suite.system_out);

    assert_eq!((&r.prairielearn["gradable"], &r.prairielearn["score"]), (&true.into(), &1.0.into()));
    let points: Vec<(&str, f64, f64)> = r.prairielearn["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (t["name"].as_str().unwrap(), t["points"].as_f64().unwrap(), t["max_points"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(points, [("step 0: imports-dist", 5.0, 5.0), ("step 0: trains", 5.0, 5.0)]);
    // The run's figure, as a data URI (the validator decoded it).
    let url = r.prairielearn["images"][0]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/svg+xml;base64,"), "{url}");
    assert_eq!(r.autolab, serde_json::json!({"scores": {"step 0": 10.0}, "scoreboard": [10.0]}));
    assert_eq!(r.coderunner["fraction"], 1.0);
    assert_eq!(
        coderunner_rows(&r.coderunner),
        [(1, "step 0: imports-dist".to_string()), (1, "step 0: trains".to_string())]
    );
    assert_eq!((&r.classroom["status"], &r.classroom["max_score"]), (&"pass".into(), &10.0.into()));
    assert_eq!(
        statuses(&r.classroom, "status"),
        pairs(&[("step 0: imports-dist", "pass"), ("step 0: trains", "pass")])
    );
    let [suite] = &r.codegrade[..] else { panic!("one testsuite per step: {:?}", r.codegrade) };
    assert!(suite.properties.is_empty() && suite.cases.iter().all(|c| c.outcome.is_none()));
}

#[test]
fn an_untouched_starter_fails_its_own_check_in_every_format() {
    let r = grade(&starter(), "22");
    assert_eq!(r.exercism["status"], "fail");
    assert_eq!(
        statuses(&r.exercism, "status"),
        pairs(&[("step 0: imports-dist", "fail"), ("step 0: trains", "pass")])
    );
    let failed = &r.exercism["tests"][0];
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("no `use ... as dist;` line") && message.contains("hint:"), "{message}");

    assert_eq!(r.gradescope["score"], 5.0);
    assert_eq!(
        statuses(&r.gradescope, "status"),
        pairs(&[("step 0: imports-dist", "failed"), ("step 0: trains", "passed")])
    );
    let output = r.gradescope["tests"][0]["output"].as_str().unwrap();
    assert!(output.starts_with(message), "a failed test shows the check's message:\n{output}");
    assert!(
        r.gradescope["output"].as_str().unwrap().contains(": 5 of 10 points."),
        "{}",
        r.gradescope["output"]
    );

    let [suite] = &r.junit[..] else { panic!("one testsuite per step: {:?}", r.junit) };
    let (kind, type_, summary, text) = suite.cases[0].outcome.clone().expect("imports-dist failed");
    assert_eq!((kind.as_str(), type_.as_str()), ("failure", "check failed"));
    assert_eq!(
        summary.as_deref(),
        message.lines().next(),
        "the message attribute is the report's first line"
    );
    assert_eq!(text, message, "the failure holds the report's message");
    assert!(suite.cases[1].outcome.is_none());

    // Half the points everywhere: a fraction of 0.5, 5 of 10 points, one check of two.
    assert_eq!((&r.prairielearn["gradable"], &r.prairielearn["score"]), (&true.into(), &0.5.into()));
    assert_eq!(r.prairielearn["tests"][0]["points"], 0.0);
    assert!(r.prairielearn["tests"][0]["message"].as_str().unwrap().starts_with(message));
    assert_eq!(r.autolab["scores"]["step 0"], 5.0);
    assert_eq!(r.coderunner["fraction"], 0.5);
    assert_eq!(
        coderunner_rows(&r.coderunner),
        [(0, "step 0: imports-dist".to_string()), (1, "step 0: trains".to_string())]
    );
    assert_eq!(r.classroom["status"], "fail");
    let scores: Vec<f64> =
        r.classroom["tests"].as_array().unwrap().iter().map(|t| t["score"].as_f64().unwrap()).collect();
    assert_eq!(scores, [0.0, 5.0], "the reporter sums 5 of 10");
    let outcomes: Vec<bool> = r.codegrade[0].cases.iter().map(|c| c.outcome.is_none()).collect();
    assert_eq!(outcomes, [false, true], "one test case of two passed: half the step's weight");
}

#[test]
fn a_submission_that_does_not_compile_is_an_error_in_every_format() {
    let krate = variant(
        0,
        "formats-does-not-compile",
        "fn main() -> ExitCode {",
        "fn main() -> ExitCode {\n    undefined_name;",
    );
    let r = grade(&krate, "23");
    // exercism: "error" only when every test errored, with the compiler's error.
    assert_eq!(r.exercism["status"], "error");
    let message = r.exercism["message"].as_str().unwrap();
    assert!(message.contains("cannot find value `undefined_name` in this scope"), "{message}");
    assert!(statuses(&r.exercism, "status").iter().all(|(_, s)| s == "error"));

    assert_eq!(r.gradescope["score"], 0.0);
    let output = r.gradescope["output"].as_str().unwrap();
    assert!(output.contains("cannot find value `undefined_name`"), "the compiler's error, shown:\n{output}");
    assert!(statuses(&r.gradescope, "status").iter().all(|(_, s)| s == "failed"));

    // PrairieLearn: not gradable, so the student keeps the attempt; the compiler says why.
    assert_eq!(r.prairielearn["gradable"], false);
    assert!(r.prairielearn.get("score").is_none());
    let why = r.prairielearn["format_errors"][0].as_str().unwrap();
    assert!(why.contains("cannot find value `undefined_name`"), "{why}");
    assert_eq!(r.autolab["scores"]["step 0"], 0.0);
    assert_eq!(r.coderunner["fraction"], 0.0);
    assert!(r.coderunner["prologuehtml"].as_str().unwrap().contains("cannot find value `undefined_name`"));
    assert_eq!(r.classroom["status"], "error");
    assert!(statuses(&r.classroom, "status").iter().all(|(_, s)| s == "error"));
    assert!(r.codegrade[0].cases.iter().all(|c| c.outcome.as_ref().is_some_and(|o| o.0 == "error")));

    let [suite] = &r.junit[..] else { panic!("one testsuite per step: {:?}", r.junit) };
    assert_eq!(suite.cases.len(), 2);
    for case in &suite.cases {
        let (kind, type_, _, text) = case.outcome.clone().expect("an error");
        assert_eq!((kind.as_str(), type_.as_str()), ("error", "did not run"));
        assert!(text.contains("cannot find value `undefined_name`"), "{text}");
    }

    // `verify --junit` lists every check of the run, here errors as well, and exits 1.
    let out = tempfile::tempdir().unwrap();
    let junit = out.path().join("verify.xml");
    let how = if sandbox_works() { "--sandbox" } else { "--unsandboxed" };
    let v = checker_with(
        &["verify", "step", "0", "--seed", "23", how, "--crate"],
        &[&krate, Path::new("--junit"), &junit],
    );
    assert_eq!(v.code, Some(1), "{}", v.output());
    let xml = std::fs::read_to_string(&junit).unwrap();
    let suites = formats::junit(&xml).unwrap_or_else(|p| panic!("not JUnit XML: {p:#?}\n{xml}"));
    assert!(suites[0].cases.iter().all(|c| c.outcome.as_ref().is_some_and(|o| o.0 == "error")), "{xml}");
}

#[test]
fn a_submission_without_a_program_gets_reports_that_say_so() {
    // Nothing to build: no run at all, so this costs nothing.
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("notes.txt"), "my answer is in my head").unwrap();
    let r = grade(empty.path(), "24");
    assert_eq!(r.exercism["status"], "error");
    let message = r.exercism["message"].as_str().unwrap();
    assert!(message.contains("no main.rs in it") && message.contains("It holds: notes.txt"), "{message}");
    assert_eq!(r.gradescope["score"], 0.0);
    assert!(r.gradescope["output"].as_str().unwrap().contains("no main.rs in it"));
    assert!(r.junit[0].cases.iter().all(|c| c.outcome.as_ref().is_some_and(|o| o.0 == "error")));
    // A report that cannot be written: exit 2, and no report at all, not some of them.
    let out = tempfile::tempdir().unwrap();
    let written = out.path().join("e.json");
    let v = checker_with(
        &["grade", "step", "0", "--unsandboxed", "--crate"],
        &[empty.path(), Path::new("--json"), &written, Path::new("--junit"), Path::new("/nonexistent/j.xml")],
    );
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("cannot write the report /nonexistent/j.xml"), "{}", v.stderr);
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0, "nothing written, not even e.json");
    // Without a report to carry it, that is bad input: exit 2.
    let v = checker_with(&["grade", "step", "0", "--unsandboxed", "--crate"], &[empty.path()]);
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("no main.rs in it"), "{}", v.stderr);
}

#[test]
fn the_validators_refuse_what_the_specs_forbid() {
    // The spec's own v3 example is valid; each departure from the spec is caught.
    let example = serde_json::json!({"version": 3, "status": "fail", "message": null, "tests": [{
        "name": "Test that the thing works", "status": "fail", "message": "Expected 42 but got 123123",
        "output": "Debugging information output by the user",
        "test_code": "assert_equal 42, answerToTheUltimateQuestion()", "task_id": 1}]});
    assert_eq!(formats::exercism_v3(&example), Vec::<String>::new());
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut report = example.clone();
        edit(&mut report);
        formats::exercism_v3(&report)
    };
    assert!(!broken(&|r| r["tests"][0]["output"] = "x".repeat(501).into()).is_empty());
    assert!(
        !broken(&|r| r["status"] = "error".into()).is_empty(),
        "error needs a message and all tests errored"
    );
    assert!(!broken(&|r| r["points"] = 3.into()).is_empty(), "no key outside the spec");
    assert!(!broken(&|r| r["tests"][0]["message"] = Value::Null).is_empty(), "a failed test says why");
    assert!(!broken(&|r| r["status"] = "pass".into()).is_empty(), "pass with a failed test");

    let results = serde_json::json!({"score": 5.0, "output_format": "text", "tests": [
        {"name": "t", "score": 5.0, "max_score": 10.0, "status": "failed", "visibility": "visible"}]});
    assert_eq!(formats::gradescope(&results), Vec::<String>::new());
    let mut bad = results.clone();
    bad["tests"][0]["status"] = "fail".into();
    bad["max_score"] = 10.into();
    assert_eq!(formats::gradescope(&bad).len(), 2, "{:?}", formats::gradescope(&bad));

    let suite = |counts: &str, case: &str| {
        format!(
            "<testsuites><testsuite name=\"s\" package=\"p\" id=\"0\" timestamp=\"2026-01-02T03:04:05\" \
             hostname=\"h\" {counts} time=\"1.5\"><properties/>{case}<system-out/><system-err/></testsuite></testsuites>"
        )
    };
    let failed = "<testcase name=\"c\" classname=\"k\" time=\"0\"><failure type=\"t\" message=\"m\">x</failure></testcase>";
    assert!(formats::junit(&suite("tests=\"1\" failures=\"1\" errors=\"0\"", failed)).is_ok());
    assert!(
        formats::junit(&suite("tests=\"1\" failures=\"0\" errors=\"1\"", failed)).is_err(),
        "wrong counts"
    );
    let untyped = failed.replace(" type=\"t\"", "");
    assert!(
        formats::junit(&suite("tests=\"1\" failures=\"1\" errors=\"0\"", &untyped)).is_err(),
        "type is required"
    );
    let timeless = failed.replace(" time=\"0\"", "");
    assert!(
        formats::junit(&suite("tests=\"1\" failures=\"1\" errors=\"0\"", &timeless)).is_err(),
        "time is required"
    );
    let zoned = suite("tests=\"1\" failures=\"1\" errors=\"0\"", failed).replace("03:04:05", "03:04:05Z");
    assert!(formats::junit(&zoned).is_err(), "the schema's timestamp has no zone");
    let bare = suite("tests=\"1\" failures=\"1\" errors=\"0\"", failed).replace("<properties/>", "");
    assert!(formats::codegrade_junit(&bare).is_ok() && formats::junit(&bare).is_err());
    let with = suite("tests=\"1\" failures=\"1\" errors=\"0\"", failed);
    assert!(formats::codegrade_junit(&with).is_err(), "CodeGrade takes no <properties>");

    // PrairieLearn's own example (trimmed) is valid; departures are caught.
    let pl = serde_json::json!({"gradable": true, "score": 0.25, "message": "m", "output": "o",
        "tests": [{"name": "Test 1", "description": "d", "points": 1, "max_points": 1, "message": "",
        "output": ""}]});
    assert_eq!(formats::prairielearn(&pl.to_string()), Vec::<String>::new());
    let mut bad = pl.clone();
    bad["score"] = 25.into();
    assert!(!formats::prairielearn(&bad.to_string()).is_empty(), "score is a fraction");
    let invalid = serde_json::json!({"gradable": false, "format_errors": ["syntax error"]});
    assert_eq!(formats::prairielearn(&invalid.to_string()), Vec::<String>::new());
    assert!(!formats::prairielearn(r#"{"gradable": false}"#).is_empty(), "says why");
    let mut pictured = pl.clone();
    pictured["images"] =
        serde_json::json!([{"label": "First Image", "url": "data:image/png;base64,iVBORw0KGgo="}]);
    assert_eq!(formats::prairielearn(&pictured.to_string()), Vec::<String>::new());
    pictured["images"][0]["url"] = "https://example.org/a.png".into();
    assert!(!formats::prairielearn(&pictured.to_string()).is_empty(), "a data URI");
    assert!(
        !formats::prairielearn(&format!(r#"{{"score": 1, "output": "{}"}}"#, "x".repeat(1 << 20))).is_empty()
    );

    // Autolab's example line is valid; the autoresult must be the last line.
    assert!(formats::autolab(
        "log\n{\"scores\": {\"Prob1\": 10, \"Prob2\": 5}, \"scoreboard\": [10, 5, 15]}"
    )
    .is_empty());
    assert!(!formats::autolab("{\"scores\": {\"Prob1\": 10}}\ndone").is_empty());
    assert!(!formats::autolab("{\"scores\": {}}").is_empty());

    let outcome = serde_json::json!({"fraction": 0.5, "prologuehtml": "<p/>",
        "testresults": [["iscorrect", "Test", "ishidden"], [1, "a", 0], [0, "b", 1]]});
    assert_eq!(formats::coderunner(&outcome), Vec::<String>::new());
    let mut bad = outcome.clone();
    bad["testresults"][1][0] = 2.into();
    bad["fraction"] = 1.5.into();
    assert_eq!(formats::coderunner(&bad).len(), 2, "{:?}", formats::coderunner(&bad));

    let runner = serde_json::json!({"version": 1, "status": "fail", "max_score": 10, "tests": [
        {"name": "t", "status": "fail", "score": 0, "message": "m"}]});
    assert_eq!(formats::classroom_runner(&runner), Vec::<String>::new());
    let mut bad = runner.clone();
    bad["tests"][0]["score"] = 11.into();
    bad["version"] = 3.into();
    assert_eq!(formats::classroom_runner(&bad).len(), 2, "{:?}", formats::classroom_runner(&bad));
}
