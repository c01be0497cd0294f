//! `autograder prairielearn|autolab|coderunner|codegrade`: each platform's files, run
//! here as the platform runs them (its folders, its environment variables, its way of
//! reading the result), with the course and the checker of this build, on step 0's
//! solution, its untouched starter and a program that does not compile. Step 0 is the
//! cheapest step; the reports' formats themselves are checked in tests/formats.rs.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use checker::{BWRAP_ENV, CHECKER_ENV, COURSE_ENV, PROGRESS_FILE_ENV};
use common::{checker_with, formats, repo};
use serde_json::Value;

/// The three programs every platform grades: (what, main.rs, points of step 0's 10).
fn programs() -> [(&'static str, String, f64); 3] {
    let solution = std::fs::read_to_string(repo().join("solutions/step_00/src/main.rs")).unwrap();
    let starter = std::fs::read_to_string(repo().join("steps/step_00/src/main.rs")).unwrap();
    let broken =
        common::variant_source(0, "fn main() -> ExitCode {", "fn main() -> ExitCode {\n    undefined_name;");
    [("solution", solution, 10.0), ("starter", starter, 5.0), ("does not compile", broken, 0.0)]
}

/// `autograder PLATFORM --step 0` into a fresh folder; the folder and what it printed.
fn autograder(platform: &str) -> (tempfile::TempDir, String) {
    let out = tempfile::tempdir().unwrap();
    let v = checker_with(&["autograder", platform, "--step", "0", "--out"], &[out.path()]);
    assert_eq!(v.code, Some(0), "{}", v.output());
    // What runs unconfined there is said.
    assert!(v.stdout.contains("sandbox: ") && v.stdout.contains("unconfined"), "{}", v.stdout);
    (out, v.stdout)
}

/// A fresh folder in a stable place (the submission's build is reused between runs).
fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("platforms").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A platform's script, with this build's course and checker (as its image holds them).
fn script(program: &str, args: &[&Path], dir: &Path, env: &[(&str, &Path)]) -> String {
    let progress = dir.join("progress.json");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env(COURSE_ENV, repo())
        .env(CHECKER_ENV, common::checker_binary())
        .env(PROGRESS_FILE_ENV, &progress)
        .envs(env.iter().copied());
    let out = child_process::output(cmd, None).unwrap_or_else(|e| {
        panic!("cannot start {program} ({e}): 'bash scripts/setup.sh --for-tests' installs it")
    });
    assert_eq!(out.status.code(), Some(0), "{program} {args:?} exits 0:\n{}{}", out.stdout, out.stderr);
    out.stdout
}

#[test]
fn prairielearn_grades_grade_student_into_results_json() {
    let (out, said) = autograder("prairielearn");
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("question/info.json")).unwrap())
            .unwrap();
    // docs.prairielearn.com/externalGrading: image, entrypoint, timeout of at most 600 s.
    let options = &info["externalGradingOptions"];
    assert_eq!(options["enabled"], true);
    assert!(options["timeout"].as_u64().is_some_and(|t| t <= 600), "{info:#}");
    assert_eq!(options["enableNetworking"], false);
    let entrypoint = options["entrypoint"].as_str().unwrap();
    let dockerfile = std::fs::read_to_string(out.path().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("COPY entrypoint {entrypoint}")), "{dockerfile}");
    assert!(said.contains(options["image"].as_str().unwrap()), "{said}");
    let html = std::fs::read_to_string(out.path().join("question/question.html")).unwrap();
    assert!(html.contains("<pl-external-grader-results>") && html.contains("file-names=\"main.rs\""));
    for (what, main_rs, points) in programs() {
        let root = fresh(&format!("prairielearn-{}", what.replace(' ', "-")));
        std::fs::create_dir_all(root.join("student")).unwrap();
        std::fs::write(root.join("student/main.rs"), &main_rs).unwrap();
        // The starter as in a container that forbids bubblewrap's namespaces.
        let nowhere = Path::new("/nonexistent/bwrap");
        let env: &[(&str, &Path)] = if what == "starter" {
            &[("GRADE_ROOT", &root), (BWRAP_ENV, nowhere)]
        } else {
            &[("GRADE_ROOT", &root)]
        };
        script("bash", &[&out.path().join("entrypoint")], &root, env);
        let text = std::fs::read_to_string(root.join("results/results.json")).unwrap();
        let problems = formats::prairielearn(&text);
        assert!(problems.is_empty(), "{what}: {problems:#?}\n{text}");
        let results: Value = serde_json::from_str(&text).unwrap();
        if points == 0.0 {
            // Not gradable: the student keeps the attempt.
            assert_eq!(results["gradable"], false, "{what}: {results:#}");
            assert!(results["format_errors"][0].as_str().unwrap().contains("undefined_name"), "{results:#}");
        } else {
            assert_eq!(results["score"], points / 10.0, "{what}: {results:#}");
        }
        if what == "starter" {
            assert!(results["output"].as_str().unwrap().contains("Ran in no sandbox"), "{results:#}");
        }
    }
}

#[test]
fn autolab_prints_the_autoresult_last() {
    let (out, said) = autograder("autolab");
    assert!(said.contains("the assessment's problems, each worth 10 points: step 0"), "{said}");
    for (what, main_rs, points) in programs() {
        // Tango's job folder: the Makefile, autograde.tar and the handin.
        let job = fresh(&format!("autolab-{}", what.replace(' ', "-")));
        std::fs::copy(out.path().join("autograde-Makefile"), job.join("Makefile")).unwrap();
        std::fs::copy(out.path().join("autograde.tar"), job.join("autograde.tar")).unwrap();
        std::fs::write(job.join("main.rs"), &main_rs).unwrap();
        let printed = script("make", &[], &job, &[]);
        let problems = formats::autolab(&printed);
        assert!(problems.is_empty(), "{what}: {problems:#?}\n{printed}");
        let result: Value = serde_json::from_str(printed.lines().last().unwrap()).unwrap();
        assert_eq!(result["scores"]["step 0"], points, "{what}: {printed}");
        // The checker's report comes first, as the student's feedback.
        assert!(printed.contains("total "), "{printed}");
    }
}

#[test]
fn coderunners_template_prints_the_combinator_outcome() {
    let (out, _) = autograder("coderunner");
    let template = std::fs::read_to_string(out.path().join("template.py")).unwrap();
    let placeholder = "{{ STUDENT_ANSWER | e('py') }}";
    assert_eq!(template.matches(placeholder).count(), 1, "{template}");
    for (what, main_rs, points) in programs() {
        let dir = fresh(&format!("coderunner-{}", what.replace(' ', "-")));
        // What Twig's e('py') does: the answer escaped for a Python string literal.
        let escaped = main_rs.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        std::fs::write(dir.join("prog.py"), template.replace(placeholder, &escaped)).unwrap();
        let printed = script("python3", &[Path::new("prog.py")], &dir, &[]);
        let outcome: Value = serde_json::from_str(printed.trim())
            .unwrap_or_else(|e| panic!("{what}: one JSON object ({e}):\n{printed}"));
        let problems = formats::coderunner(&outcome);
        assert!(problems.is_empty(), "{what}: {problems:#?}\n{outcome:#}");
        assert_eq!(outcome["fraction"], points / 10.0, "{what}: {outcome:#}");
    }
}

#[test]
fn codegrades_unit_test_step_writes_junit_where_it_is_told() {
    let (out, said) = autograder("codegrade");
    assert!(said.contains("bash $FIXTURES/run.sh"), "{said}");
    for (what, main_rs, points) in programs() {
        // AutoTest runs the step in the student's folder.
        let student = fresh(&format!("codegrade-{}", what.replace(' ', "-")));
        std::fs::write(student.join("main.rs"), &main_rs).unwrap();
        // Outside the student's folder, as CodeGrade's randomized location is.
        let report = fresh(&format!("codegrade-{}-report", what.replace(' ', "-"))).join("report.xml");
        script("bash", &[&out.path().join("run.sh")], &student, &[("CG_JUNIT_XML_LOCATION", &report)]);
        let xml = std::fs::read_to_string(&report).unwrap();
        let suites = formats::codegrade_junit(&xml).unwrap_or_else(|p| panic!("{what}: {p:#?}\n{xml}"));
        // CodeGrade's score: the fraction of test cases passed.
        let cases: Vec<bool> = suites.iter().flat_map(|s| &s.cases).map(|c| c.outcome.is_none()).collect();
        let passed = cases.iter().filter(|p| **p).count() as f64 / cases.len() as f64;
        assert_eq!(passed * 10.0, points, "{what}: {xml}");
    }
}

/// GitHub Classroom's default workflow (points per check): a step's `run` as GitHub runs it (`bash -e`,
/// from the workspace with the submission and the grader side by side), its `result`
/// output decoded as the grading reporter decodes it, on step 0's solution, its starter
/// and a program that does not compile.
#[test]
fn github_classrooms_runner_results_earn_the_points_of_each_check() {
    use base64::Engine;
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("template");
    let v = checker_with(
        &["autograder", "github-classroom", "--repository", "teacher/ddp-lab", "--out"],
        &[&out],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    let text = std::fs::read_to_string(out.join(".github/workflows/classroom.yml")).unwrap();
    let workflow: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let steps = workflow["jobs"]["run-autograding-tests"]["steps"].as_sequence().unwrap().clone();
    let step = steps.iter().find(|s| s["id"].as_str() == Some("step00")).unwrap();
    for ((what, source, points), status) in programs().into_iter().zip(["pass", "fail", "error"]) {
        // A workspace per program: the submission and the grader side by side.
        let ws = fresh(&format!("classroom-workspace-{}", what.replace(' ', "-")));
        std::os::unix::fs::symlink(repo().canonicalize().unwrap(), ws.join("grader")).unwrap();
        let dir = ws.join("submission/steps/step_00/src");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.rs"), source).unwrap();
        let id = what;
        let output = ws.join("step00.output");
        std::fs::write(ws.join("run.sh"), step["run"].as_str().unwrap()).unwrap();
        // Only what a runner's shell has (a toolchain, a home), not cargo test's own
        // variables. Its `cargo checker` builds the checker as `-p checker` builds it,
        // which replaces the test build's binary: the other tests run a copy
        // (`common::checker_binary`).
        let mut cmd = Command::new("bash");
        cmd.args(["-e", "run.sh"]).current_dir(&ws).env_clear();
        for key in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "CARGO_TARGET_DIR"] {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        cmd.env("GITHUB_OUTPUT", &output).env(PROGRESS_FILE_ENV, ws.join("progress.json"));
        let ran = child_process::output(cmd, None).expect("run the step");
        assert_eq!(ran.status.code(), Some(0), "{id}:\n{}{}", ran.stdout, ran.stderr);
        let written = std::fs::read_to_string(&output).unwrap();
        let encoded = written.trim().strip_prefix("result=").unwrap_or_else(|| panic!("{written}"));
        let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
        let result: Value = serde_json::from_slice(&decoded).unwrap();
        let problems = formats::classroom_runner(&result);
        assert!(problems.is_empty(), "{id}: {problems:#?}\n{result:#}");
        // What the reporter adds up for GitHub Classroom: the tests' scores of max_score.
        let earned: f64 =
            result["tests"].as_array().unwrap().iter().map(|t| t["score"].as_f64().unwrap()).sum();
        assert_eq!(
            (earned, &result["max_score"], &result["status"]),
            (points, &10.0.into(), &status.into()),
            "{id}: {result:#}"
        );
    }
}

/// Where the checker cannot grade at all, each script still leaves what its platform
/// reads (PrairieLearn: not gradable, the attempt kept; Autolab: an autoresult of
/// zeroes); and bad input to `autograder` is refused, exit 2. Nothing is graded here.
#[test]
fn the_scripts_leave_a_result_when_the_checker_cannot_grade_and_bad_input_is_refused() {
    let nowhere = Path::new("/nonexistent/checker");
    let (pl, _) = autograder("prairielearn");
    let root = fresh("prairielearn-no-checker");
    std::fs::create_dir_all(root.join("student")).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(pl.path().join("entrypoint"))
        .env("GRADE_ROOT", &root)
        .env(COURSE_ENV, repo())
        .env(CHECKER_ENV, nowhere);
    assert_eq!(child_process::output(cmd, None).unwrap().status.code(), Some(0));
    let text = std::fs::read_to_string(root.join("results/results.json")).unwrap();
    assert!(formats::prairielearn(&text).is_empty(), "{text}");
    let results: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(results["gradable"], false, "{results:#}");

    let (autolab, _) = autograder("autolab");
    let job = fresh("autolab-no-checker");
    std::fs::copy(autolab.path().join("autograde-Makefile"), job.join("Makefile")).unwrap();
    std::fs::copy(autolab.path().join("autograde.tar"), job.join("autograde.tar")).unwrap();
    std::fs::write(job.join("main.rs"), "fn main() {}\n").unwrap();
    let mut cmd = Command::new("make");
    cmd.current_dir(&job).env(COURSE_ENV, repo()).env(CHECKER_ENV, nowhere);
    let out = child_process::output(cmd, None).unwrap_or_else(|e| {
        panic!("cannot start make ({e}): 'bash scripts/setup.sh --for-tests' installs it")
    });
    assert!(formats::autolab(&out.stdout).is_empty(), "{}", out.stdout);
    assert!(out.stdout.ends_with("{\"scores\": {\"step 0\": 0}}\n"), "{}", out.stdout);

    let v = checker_with(&["autograder", "codegrade", "--step", "99", "--out"], &[job.as_path()]);
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("is not a step"), "{}", v.stderr);
    let file = job.join("main.rs");
    let v = checker_with(&["autograder", "coderunner", "--step", "0", "--out"], &[file.as_path()]);
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("name a folder you can write"), "{}", v.stderr);
}
