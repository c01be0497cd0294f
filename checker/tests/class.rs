//! Grading a whole class where courses grade: a Slurm job array whose tasks each grade
//! their share and a gradebook merged after them (scripts/slurm), and GitHub
//! Classroom's workflow, each of its commands run as its actions run them.
mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{repo, sandbox_works};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn solution(step: u8) -> String {
    std::fs::read_to_string(repo().join(lab_course::Version::Solution(step).crate_dir()).join("src/main.rs"))
        .unwrap()
}

fn starter(step: u8) -> String {
    std::fs::read_to_string(repo().join(lab_course::Version::Starter(step).crate_dir()).join("src/main.rs"))
        .unwrap()
}

/// A zip holding `name/src/main.rs`, as a student's "compress folder" makes one.
fn zipped_crate(path: &Path, name: &str, source: &str) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    zip.start_file(format!("{name}/src/main.rs"), zip::write::FileOptions::default()).unwrap();
    zip.write_all(source.as_bytes()).unwrap();
    zip.finish().unwrap();
}

/// The tests of an exercism v3 report that did not pass, each with its message.
fn not_passed(report: &str) -> String {
    let Ok(report) = serde_json::from_str::<serde_json::Value>(report) else {
        return format!("not a JSON report: {report:?}");
    };
    let tests = report["tests"].as_array().cloned().unwrap_or_default();
    let lines: Vec<String> = tests
        .iter()
        .filter(|t| t["status"] != "pass")
        .map(|t| format!("{} [{}]: {}", t["name"], t["status"], t["message"].as_str().unwrap_or("")))
        .collect();
    if lines.is_empty() {
        "all passed".into()
    } else {
        lines.join("\n")
    }
}

struct Ran {
    code: Option<i32>,
    output: String,
}

/// `bash script args` from the repository, as sbatch would run it there, with `env`.
fn bash(script: &str, args: &[&Path], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new("bash");
    cmd.current_dir(repo()).arg(script).args(args);
    cmd.env("DDP_LAB_CHECKER", common::checker_binary());
    cmd.env(checker::PROGRESS_FILE_ENV, std::env::temp_dir().join("class-test-progress.json"));
    cmd.envs(env.iter().copied());
    let out = child_process::output(cmd, Some(Duration::from_secs(900))).expect("run bash");
    Ran { code: out.status.code(), output: format!("{}{}", out.stdout, out.stderr) }
}

#[test]
fn a_class_graded_by_two_slurm_tasks_makes_one_gradebook() {
    let scratch = tempfile::tempdir().unwrap();
    let (handed_in, results) = (scratch.path().join("handed-in"), scratch.path().join("results"));
    // Sorted: alice (task 0), bob (task 1), carol (task 0) with two tasks.
    let last = lab_course::LAB_LAST_STEP;
    write(&handed_in.join("alice/src/main.rs"), &solution(last));
    write(&handed_in.join("bob/src/main.rs"), "fn main() { let x: u8 = 300; }\n");
    std::fs::create_dir_all(&handed_in).unwrap();
    zipped_crate(
        &handed_in.join("carol.zip"),
        &lab_course::Version::Starter(last).package_name(),
        &starter(last),
    );
    let how = if sandbox_works() { "--sandbox" } else { "--unsandboxed" };
    let course = repo();
    let course = course.to_str().unwrap();
    let task = |id: &str| {
        let env = [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_SUBMIT_DIR", course),
        ];
        let ran = bash(
            "scripts/slurm/grade-class.sbatch",
            &[
                &handed_in,
                &results,
                Path::new(how),
                Path::new("--jobs"),
                Path::new("2"),
                Path::new("--seed"),
                Path::new("4"),
            ],
            &env,
        );
        assert_eq!(ran.code, Some(0), "task {id}:\n{}", ran.output);
        ran.output
    };
    let gradebook = || {
        let ran =
            bash("scripts/slurm/gradebook.sbatch", &[&handed_in, &results], &[("SLURM_SUBMIT_DIR", course)]);
        assert_eq!(ran.code, Some(0), "{}", ran.output);
        common::gradebook(&results.join("gradebook.csv"))
    };

    // Task 1 first: bob's program does not compile.
    let out = task("1");
    assert!(out.contains("bob  0/120  error"), "{out}");
    assert!(out.contains("shard 1 of 2"), "the task says the gradebook is not its job: {out}");
    assert!(!out.contains("alice"), "task 1 grades bob only: {out}");
    let rows = gradebook();
    let status = |rows: &[Vec<String>], name: &str| rows.iter().find(|r| r[0] == name).map(|r| r[1].clone());
    assert_eq!(status(&rows, "bob").as_deref(), Some("error"));
    assert!(rows.iter().find(|r| r[0] == "bob").unwrap().last().unwrap().starts_with("error"), "{rows:?}");
    assert_eq!(status(&rows, "alice").as_deref(), Some("missing"), "{rows:?}");
    assert_eq!(status(&rows, "carol").as_deref(), Some("missing"), "{rows:?}");

    // Task 0: alice's finished program earns every step; carol's zipped starter of
    // step 11 every step but the last, of which it earns the one check its loop
    // already passes (ranks-stop-together; it has no quick evaluation yet).
    let out = task("0");
    // On a failure, each submission's whole report (its JSON), not only the gradebook:
    // the temporary directory is gone once the test ends.
    // The checks that did not pass come last, where a truncated log keeps them.
    let reports = || {
        let names = ["alice", "carol"];
        let text =
            |name: &str| std::fs::read_to_string(results.join(format!("{name}.json"))).unwrap_or_default();
        let whole = names.map(|name| format!("--- {name}.json\n{}", text(name))).join("\n");
        let not_passed = names.map(|name| format!("--- {name}: {}", not_passed(&text(name)))).join("\n");
        format!("{whole}\n=== checks not passed\n{not_passed}")
    };
    assert!(out.contains("alice  120/120  pass"), "{out}\n{}", reports());
    assert!(out.contains("carol  113.3/120  fail"), "{out}\n{}", reports());
    let rows = gradebook();
    let header: Vec<&str> = rows[0].iter().map(String::as_str).collect();
    let steps: Vec<String> = (0..=lab_course::LAB_LAST_STEP).map(|s| format!("step {s}")).collect();
    assert_eq!(header[..4], ["submission", "status", "points", "max_points"]);
    assert_eq!(header[4..4 + steps.len()], steps.iter().map(String::as_str).collect::<Vec<_>>()[..]);
    let alice = rows.iter().find(|r| r[0] == "alice").unwrap();
    assert_eq!(alice[1..4], ["pass", "120", "120"].map(String::from));
    let carol = rows.iter().find(|r| r[0] == "carol").unwrap();
    assert_eq!(carol[1..4], ["fail", "113.33", "120"].map(String::from));
    assert_eq!(carol[15], "3.33", "carol's step 11: 1 of its 3 checks: {carol:?}");
    assert_eq!(rows.len(), 4, "{rows:?}");
}

#[test]
fn submit_sh_asks_for_an_array_of_tasks_then_the_gradebook_after_it() {
    let scratch = tempfile::tempdir().unwrap();
    let handed_in = scratch.path().join("handed-in");
    for name in ["a", "b", "c"] {
        write(&handed_in.join(name).join("src/main.rs"), "fn main() {}\n");
    }
    // A stand-in sbatch: records its arguments, answers job ids as --parsable does.
    let bin = scratch.path().join("bin");
    let log = scratch.path().join("sbatch.log");
    write(
        &bin.join("sbatch"),
        &format!(
            "#!/bin/sh\necho \"$@\" >> {log}\nn=$(wc -l < {log})\necho \"$((1000 + n));cluster\"\n",
            log = log.display()
        ),
    );
    std::fs::set_permissions(bin.join("sbatch"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let results = scratch.path().join("results");
    let ran = bash(
        "scripts/slurm/submit.sh",
        &[&handed_in, &results, Path::new("2"), Path::new("--unsandboxed")],
        &[("PATH", &path)],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.output);
    let calls: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(String::from).collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].starts_with("--parsable --array=0-1 scripts/slurm/grade-class.sbatch"), "{calls:?}");
    assert!(calls[0].ends_with("--unsandboxed"), "the checker's options reach the tasks: {calls:?}");
    assert!(calls[1].contains("--dependency=afterany:1001 "), "the gradebook waits for the array: {calls:?}");
    assert!(calls[1].contains("scripts/slurm/gradebook.sbatch"), "{calls:?}");
    assert!(ran.output.contains("gradebook.csv"), "{}", ran.output);

    // An empty folder is refused before anything is submitted.
    let empty = scratch.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let ran = bash("scripts/slurm/submit.sh", &[&empty, &results], &[("PATH", &path)]);
    assert_eq!(ran.code, Some(2), "{}", ran.output);
    assert!(ran.output.contains("holds no submission"), "{}", ran.output);
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2, "nothing more submitted");
}

/// GitHub Classroom's workflow, generated, then each of its steps' commands run as the
/// command grader runs them (`sh -c`, from the workspace, with only PATH and HOME), on a
/// submission whose step 0 is done and whose other steps do not compile.
#[test]
fn every_command_of_the_classroom_workflow_runs_as_the_command_grader_runs_it() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("template");
    let v = common::checker_with(
        &["autograder", "github-classroom", "--repository", "teacher/ddp-lab", "--points-per-step", "--out"],
        &[&out],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    let text = std::fs::read_to_string(out.join(".github/workflows/classroom.yml")).unwrap();
    let workflow: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let steps = workflow["jobs"]["run-autograding-tests"]["steps"].as_sequence().unwrap().clone();
    let head = Command::new("git").current_dir(repo()).args(["rev-parse", "HEAD"]).output().unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let grader_checkout =
        steps.iter().find(|s| s["with"]["path"].as_str() == Some("grader")).expect("the grader's checkout");
    assert_eq!(grader_checkout["with"]["ref"].as_str(), Some(head.as_str()), "pinned to this commit");

    // The workspace as actions/checkout leaves it: the submission and the grader side by side.
    let ws = scratch.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink(repo().canonicalize().unwrap(), ws.join("grader")).unwrap();
    for step in 0..=lab_course::LAST_STEP {
        let source = if step == 0 { solution(0) } else { "fn main() { undefined_in_this_step() }\n".into() };
        write(
            &ws.join("submission").join(lab_course::Version::Starter(step).crate_dir()).join("src/main.rs"),
            &source,
        );
    }
    let run = |command: &str| -> Ran {
        let mut cmd = Command::new("sh");
        cmd.current_dir(&ws).args(["-c", command]).env_clear();
        // What the command grader passes on (its src/main.js), and where this machine's
        // toolchain and build are (a runner has them at its defaults).
        for key in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "CARGO_TARGET_DIR"] {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        cmd.env(checker::PROGRESS_FILE_ENV, scratch.path().join("progress.json"));
        let out = child_process::output(cmd, Some(Duration::from_secs(600))).expect("run sh");
        Ran { code: out.status.code(), output: format!("{}{}", out.stdout, out.stderr) }
    };
    let setup = steps.iter().find_map(|s| s["run"].as_str()).expect("the setup step");
    let ran = run(setup);
    assert_eq!(ran.code, Some(0), "{setup}:\n{}", ran.output);

    let graders: Vec<_> = steps
        .iter()
        .filter(|s| s["uses"].as_str() == Some("classroom-resources/autograding-command-grader@v1"))
        .collect();
    assert_eq!(graders.len(), 12);
    let mut runners = Vec::new();
    for (step, grader) in graders.iter().enumerate() {
        let with = &grader["with"];
        assert_eq!(with["setup-command"].as_str(), Some(""));
        let command = with["command"].as_str().unwrap();
        let ran = run(command);
        if step == 0 {
            assert_eq!(ran.code, Some(0), "step 0 is done, its test passes: {command}\n{}", ran.output);
        } else {
            assert_eq!(
                ran.code,
                Some(1),
                "step {step} does not compile, its test fails: {command}\n{}",
                ran.output
            );
            assert!(
                ran.output.contains("undefined_in_this_step"),
                "the compiler's error is shown: {}",
                ran.output
            );
        }
        runners.push(grader["id"].as_str().unwrap().to_string());
    }
    let reporter = steps.last().unwrap();
    assert_eq!(reporter["with"]["runners"].as_str(), Some(runners.join(",").as_str()));
    for id in &runners {
        let key = format!("{}_RESULTS", id.to_uppercase());
        assert_eq!(
            reporter["env"][key.as_str()].as_str(),
            Some(format!("${{{{steps.{id}.outputs.result}}}}").as_str())
        );
    }
}

/// What students receive is the template repository: a students' copy (no solutions,
/// no master), with the workflow; a copy made before gets the workflow only; any other
/// folder that is not empty is refused.
#[test]
fn the_classroom_template_is_a_students_copy() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("template");
    let args = ["autograder", "github-classroom", "--repository", "teacher/ddp-lab", "--out"];
    let v = common::checker_with(&args, &[&out]);
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(out.join(".github/workflows/classroom.yml").is_file());
    assert!(
        out.join(lab_course::students_copy::MARK).is_file()
            && out.join("steps/step_07/src/main.rs").is_file()
    );
    assert!(!out.join("solutions").exists() && !out.join(lab_course::MASTER).exists());
    // Again on the copy: the workflow only, the copy as it was.
    std::fs::remove_file(out.join(".github/workflows/classroom.yml")).unwrap();
    std::fs::write(out.join("steps/step_07/notes.md"), "mine").unwrap();
    let v = common::checker_with(&args, &[&out]);
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(out.join(".github/workflows/classroom.yml").is_file());
    assert_eq!(std::fs::read_to_string(out.join("steps/step_07/notes.md")).unwrap(), "mine");
    // A folder that is not a copy: refused, nothing written.
    let other = scratch.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("README.md"), "not a copy").unwrap();
    let v = common::checker_with(&args, &[&other]);
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("not a students' copy"), "{}", v.stderr);
    assert!(!other.join(".github").exists());
}

#[test]
fn a_moving_revision_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let v = common::checker_with(
        &["autograder", "github-classroom", "--repository", "teacher/ddp-lab", "--revision", "main", "--out"],
        &[scratch.path()],
    );
    assert_eq!(v.code, Some(2), "{}", v.output());
    assert!(v.stderr.contains("40-digit commit"), "{}", v.stderr);
    assert!(!scratch.path().join(".github").exists(), "nothing written");
}
