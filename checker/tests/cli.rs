//! The checker's command line: help texts (snapshots), usage errors, and what it says
//! about a crate that is missing, does not compile, or hangs.
mod common;

use std::path::Path;

use assert_cmd::Command;
use checker::{BWRAP_ENV, PROGRESS_FILE_ENV};
use common::{checker, checker_with, repo, sandbox_works, variant};
use predicates::str::contains;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("checker").unwrap();
    c.current_dir(repo());
    c
}

#[test]
fn help_texts() {
    for (name, args) in [
        ("help", &["--help"][..]),
        ("verify_help", &["verify", "--help"]),
        ("grade_help", &["grade", "--help"]),
        ("list_help", &["list", "--help"]),
        ("watch_help", &["watch", "--help"]),
        ("autograder_gradescope_help", &["autograder", "gradescope", "--help"]),
        // The registry of checks, as `list --checks` shows it.
        ("list_checks", &["list", "--checks"]),
    ] {
        let out = cmd().args(args).assert().success().get_output().stdout.clone();
        insta::assert_snapshot!(name, String::from_utf8_lossy(&out));
    }
}

#[test]
fn completions_name_every_subcommand() {
    let out = cmd().args(["completions", "bash"]).assert().success().get_output().stdout.clone();
    let script = String::from_utf8(out).unwrap();
    assert!(script.contains("complete -F _checker"), "{script}");
    for subcommand in
        ["list", "hint", "reset", "grade", "gradebook", "autograder", "verify", "watch", "completions"]
    {
        assert!(script.contains(&format!("checker,{subcommand})")), "no `{subcommand}` in:\n{script}");
    }
    assert!(script.contains("--color"), "{script}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        cmd().args(["completions", shell]).assert().success().stdout(contains("verify"));
    }
    cmd().args(["completions", "tcsh"]).assert().code(2).stderr(contains("invalid value 'tcsh'"));
}

/// `hint` gives a level at a time, each saying how to ask for the next; the code only
/// with `--answer`.
#[test]
fn hint_goes_a_level_at_a_time() {
    let out = |args: &[&str]| {
        let out = cmd().args(args).assert().success().get_output().stdout.clone();
        String::from_utf8(out).unwrap()
    };
    let first = out(&["hint", "step", "9"]);
    assert!(first.starts_with("Step 9, hint 1 of 3: what to look at"), "{first}");
    assert!(
        first.contains("cargo checker hint step 9 --level 2") && !first.contains("### Which API"),
        "{first}"
    );
    assert!(!first.contains("dist::all_reduce(&mut metrics"), "{first}");
    let second = out(&["hint", "step", "9", "--level", "2"]);
    assert!(second.contains("### Which API") && second.contains("--answer"), "{second}");
    assert!(!second.contains("### The code"), "{second}");
    let answer = out(&["hint", "step", "9", "--answer"]);
    assert!(answer.contains("### The code") && answer.contains("dist::all_reduce(&mut metrics"), "{answer}");
    assert_eq!(out(&["hint", "step", "9", "--level", "3"]), answer);
    cmd().args(["hint", "step", "9", "--level", "4"]).assert().code(2).stderr(contains("4 is not in 1..=3"));
}

/// In a students' copy (its mark at the root) there are no solutions to check: a clear
/// refusal, not a missing crate.
#[test]
fn a_students_copy_has_no_solutions_to_check() {
    let copy = tempfile::tempdir().unwrap();
    std::fs::write(copy.path().join(lab_course::students_copy::MARK), "through = 3\n").unwrap();
    for command in [&["verify", "step", "0", "--solutions"][..], &["grade", "step", "0", "--solutions"]] {
        cmd()
            .args(command)
            .env(checker::ROOT_ENV, copy.path())
            .assert()
            .code(2)
            .stderr(contains("students' copy of the lab: it holds no solutions"));
    }
    // Nor are the autograders, which check the solutions as they are set up, made there.
    let out = copy.path().join("autograder");
    for platform in ["gradescope", "prairielearn"] {
        cmd()
            .args(["autograder", platform, "--step", "0", "--out"])
            .arg(&out)
            .env(checker::ROOT_ENV, copy.path())
            .assert()
            .code(2)
            .stderr(contains("make the autograder from your full repository"));
    }
    assert!(!out.exists());
}

#[test]
fn a_step_out_of_range_is_a_usage_error() {
    cmd().args(["verify", "step", &(lab_course::LAST_STEP + 1).to_string()]).assert().code(2).stderr(
        contains(format!(
            "there is no step {}: the steps are 0 to {}",
            lab_course::LAST_STEP + 1,
            lab_course::LAST_STEP
        )),
    );
    cmd().args(["grade", "step", "x"]).assert().code(2).stderr(contains("there is no step x"));
    cmd().args(["verify", "twelve", "steps", "please"]).assert().code(2);
}

#[test]
fn a_missing_crate_is_a_usage_error() {
    cmd()
        .args(["verify", "step", "3", "--crate", "/nonexistent/crate"])
        .assert()
        .code(2)
        .stderr(contains("--crate /nonexistent/crate: no such file or directory"));
    // Removed when the test ends, passed or not.
    let scratch = tempfile::tempdir().unwrap();
    let empty = scratch.path();
    cmd()
        .args(["verify", "step", "3", "--crate"])
        .arg(empty)
        .assert()
        .code(2)
        .stderr(contains("no main.rs in it; looked for src/main.rs, main.rs"));
    cmd()
        .args(["verify", "all", "--crate"])
        .arg(empty)
        .assert()
        .code(2)
        .stderr(contains("--crate checks one step"));
}

#[test]
fn verify_and_grade_end_alike_when_a_step_cannot_run() {
    // The same failure of the same step's run (a handed-in crate that is not there) is
    // bad input in every subcommand: exit 2, with the same message.
    for subcommand in ["verify", "grade"] {
        cmd()
            .args([subcommand, "step", "3", "--unsandboxed", "--crate", "/nonexistent/crate"])
            .assert()
            .code(2)
            .stderr(contains("--crate /nonexistent/crate: no such file or directory"));
    }
}

#[test]
fn a_step_manifest_that_is_not_toml_is_refused_before_anything_is_built() {
    // A repository whose steps/step_03/Cargo.toml a student broke: the handed-in
    // program is built with that manifest, so the checker stops there (exit 2), says
    // where and how to restore it, and writes no crate.
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("repo");
    let step = root.join("steps/step_03");
    std::fs::create_dir_all(&step).unwrap();
    std::fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = [\"steps/*\"]\n").unwrap();
    std::fs::write(step.join("Cargo.toml"), "[package]\nname = \"step_03\"\nedition.workspace = \n").unwrap();
    std::fs::write(step.join("build.rs"), "fn main() {}\n").unwrap();
    let handed_in = scratch.path().join("main.rs");
    std::fs::write(&handed_in, "fn main() {}\n").unwrap();
    cmd()
        .env(checker::ROOT_ENV, &root)
        .args(["verify", "step", "3", "--unsandboxed", "--crate"])
        .arg(&handed_in)
        .assert()
        .code(2)
        .stderr(contains(format!("{}/Cargo.toml is not valid TOML", step.display())))
        .stderr(contains("line 3"))
        .stderr(contains("cargo checker reset step 3"));
    assert!(!root.join("target/checker-crates").exists(), "a crate was written");
}

#[test]
fn a_compile_error_is_shown_readably() {
    let dir = variant(2, "does-not-compile", "args.world_size = ", "args.world_size = undefined_name + ");
    let v = checker_with(&["verify", "step", "2", "--seed", "1", "--crate"], &[&dir]);
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["builds"], "{}", v.output());
    assert!(v.stdout.contains("cannot find value `undefined_name`"), "{}", v.stdout);
    assert!(v.stdout.contains("= hint: fix the first compiler error first"), "{}", v.stdout);
    // The step's page: in the guide built as a book, else its Markdown source at a
    // line; either way a file that exists.
    let page = v.stdout.lines().find_map(|l| l.trim().strip_prefix("= page: ")).expect("a page line");
    let file = page.split(['#', ':']).next().unwrap();
    assert!(file == "target/book/steps/step-02.html" || file == "lab-guide/src/steps/step-02.md", "{page}");
    assert!(repo().join(file).is_file(), "{page} does not exist");
}

#[test]
fn colour_follows_color_and_no_color_also_into_a_pipe() {
    // A program that does not compile: its report (FAIL builds) comes quickly.
    let dir =
        variant(2, "colour-does-not-compile", "args.world_size = ", "args.world_size = undefined_name + ");
    let title = "error[builds]: step 0: cargo build -p ";
    // (options, environment, coloured): stdout is a pipe here, so `auto` colours only
    // when CLICOLOR_FORCE says so, and NO_COLOR (set, not empty) overrides that.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], bool);
    let cases: [Case; 7] = [
        (&[], &[], false),
        (&["--color", "always"], &[], true),
        (&["--color", "never"], &[("CLICOLOR_FORCE", "1")], false),
        (&[], &[("CLICOLOR_FORCE", "1")], true),
        (&[], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")], false),
        (&[], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "")], true),
        // What the command line asks for wins over the environment (no-color.org).
        (&["--color=always"], &[("NO_COLOR", "1")], true),
    ];
    for (options, env, coloured) in cases {
        let mut c = cmd();
        for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"] {
            c.env_remove(var);
        }
        c.envs(env.iter().copied())
            .args(["verify", "step", "2", "--seed", "1", "--unsandboxed"])
            .args(options);
        let out = c.arg("--crate").arg(&dir).assert().code(1).get_output().stdout.clone();
        let stdout = String::from_utf8_lossy(&out);
        let case = format!("{options:?} {env:?}:\n{stdout}");
        // Coloured as rustc colours an error: the word `error` in bold red.
        let plain = anstream::adapter::strip_str(&stdout).to_string();
        if coloured {
            let red = annotate_snippets::renderer::DEFAULT_ERROR_STYLE.render();
            assert!(stdout.contains(&format!("{red}error")) && plain.contains(title), "{case}");
        } else {
            assert!(stdout.contains(title) && !stdout.contains('\x1b'), "{case}");
        }
    }
}

/// Processes whose command line names `needle`.
fn processes_named(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn a_hanging_rank_is_killed_at_the_timeout_and_reported() {
    let dir = variant(
        3,
        "hangs",
        "labkit::worker_started(local_rank);",
        "labkit::worker_started(local_rank);\n    std::thread::sleep(std::time::Duration::from_secs(3600));",
    );
    let v = checker_with(&["verify", "step", "3", "--seed", "2", "--timeout", "20", "--crate"], &[&dir]);
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert!(v.failed().contains(&"trains".to_string()), "{}", v.output());
    assert!(v.stdout.contains("timed out (killed)"), "{}", v.stdout);
    // Every rank of it is gone: the checker killed their process groups.
    let left = processes_named("target/debug/checked_step_03_");
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn handed_in_code_is_refused_where_no_sandbox_can_be_made() {
    let krate = variant(0, "refused-without-sandbox", "fn main", "fn main");
    for args in [
        vec!["grade", "step", "0", "--solutions"],
        vec!["verify", "step", "0", "--crate", krate.to_str().unwrap()],
    ] {
        cmd()
            .env(BWRAP_ENV, "/nonexistent/bwrap")
            .args(&args)
            .assert()
            .code(2)
            .stderr(contains("cannot sandbox the submitted code: cannot run /nonexistent/bwrap"))
            .stderr(contains("fix: install Debian's `bubblewrap`"))
            .stderr(contains("--unsandboxed"));
    }
    // Checking one's own step needs no sandbox: it runs, and passes, without one.
    let progress = std::env::temp_dir().join(format!("checker-refused-progress-{}.json", std::process::id()));
    cmd()
        .env(BWRAP_ENV, "/nonexistent/bwrap")
        .env(PROGRESS_FILE_ENV, &progress)
        .args(["verify", "step", "0", "--solutions", "--seed", "2"])
        .assert()
        .success();
}

#[test]
fn grade_crates_writes_one_report_per_submission_and_the_gradebook() {
    let scratch = tempfile::tempdir().unwrap();
    let (handed_in, results) = (scratch.path().join("handed-in"), scratch.path().join("results"));
    for (name, from) in [("alice", "solutions/step_00"), ("bob", "steps/step_00")] {
        std::fs::create_dir_all(handed_in.join(name).join("src")).unwrap();
        std::fs::copy(repo().join(from).join("src/main.rs"), handed_in.join(name).join("src/main.rs"))
            .unwrap();
    }
    std::fs::create_dir_all(handed_in.join("notes")).unwrap(); // no program: not a submission
    let how = if sandbox_works() { "--sandbox" } else { "--unsandboxed" };
    // Two side by side.
    let v = checker_with(
        &["grade", "step", "0", "--seed", "3", how, "--jobs", "2", "--crates"],
        &[&handed_in, Path::new("--json-dir"), &results],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(v.stdout.contains("alice  10/10  pass"), "{}", v.stdout);
    assert!(v.stdout.contains("bob  "), "{}", v.stdout);
    let report = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(results.join(format!("{name}.json"))).unwrap()).unwrap()
    };
    for name in ["alice", "bob"] {
        let problems = common::formats::exercism_v3(&report(name));
        assert!(problems.is_empty(), "{name}.json is not exercism v3: {problems:#?}");
    }
    assert_eq!(report("alice")["status"], "pass");
    assert_eq!(report("bob")["status"], "fail", "the untouched starter fails step 0");
    assert!(!results.join("notes.json").exists());
    // The gradebook: a row per submission, the step's points, read back as CSV.
    let rows = common::gradebook(&results.join("gradebook.csv"));
    assert_eq!(rows[0], ["submission", "status", "points", "max_points", "step 0", "error"]);
    assert_eq!(rows[1][..5], ["alice", "pass", "10", "10", "10"].map(String::from));
    assert_eq!(rows[2][..2], ["bob", "fail"].map(String::from));
    assert_eq!(rows.len(), 3, "{rows:?}");
}

#[test]
fn grade_reports_the_solutions_and_says_when_it_ran_unsandboxed() {
    let scratch = tempfile::tempdir().unwrap();
    let (json, gradescope) = (scratch.path().join("grade.json"), scratch.path().join("results.json"));
    let sandboxed = sandbox_works();
    let how = if sandboxed { "--sandbox" } else { "--unsandboxed" };
    let v = checker_with(
        &["grade", "step", "0", "--solutions", "--seed", "5", how, "--json"],
        &[&json, Path::new("--gradescope"), &gradescope],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(v.stdout.contains("   0   10/10  pass"), "{}", v.stdout);
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let report = read(&json);
    assert_eq!(report["version"], 3);
    assert_eq!(report["status"], "pass");
    let names: Vec<&str> =
        report["tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["step 0: imports-dist", "step 0: trains"]);
    let results = read(&gradescope);
    assert_eq!(results["score"], 10.0);
    if sandboxed {
        // The report says how the code was confined.
        assert_eq!(results["extra_data"]["sandbox"]["tool"], "bubblewrap", "{results}");
    }

    // The untouched starter of step 1 earns nothing for step 1, and still exits 0; run
    // without the sandbox, which a warning and the reports say.
    let v = checker_with(
        &["grade", "step", "1", "--seed", "5", "--unsandboxed", "--json"],
        &[&json, Path::new("--gradescope"), &gradescope],
    );
    assert_eq!(v.code, Some(0), "{}", v.output());
    assert!(v.stderr.contains("warning: --unsandboxed"), "{}", v.stderr);
    let results = read(&gradescope);
    assert_eq!(results["extra_data"]["sandbox"], "none");
    assert!(results["output"].as_str().unwrap().contains("no sandbox (--unsandboxed)"), "{results}");
    assert_eq!(results["score"], 0.0);
    let report = read(&json);
    assert_eq!(report["status"], "fail");
    assert!(report["tests"][0]["message"].as_str().unwrap().contains("hint:"));
}

#[test]
fn the_report_of_a_passing_step() {
    let v = checker(&["verify", "step", "2", "--solutions", "--seed", "11"]);
    assert_eq!(v.code, Some(0), "{}", v.output());
    // Into a pipe, as here: a line per phase on stderr (a spinner only on a terminal),
    // so that a log shows what the checker is doing during a first build's minutes.
    for phase in ["building solution_02", "preparing the data", "running "] {
        let line = format!("checker: step 2: {phase}");
        assert!(v.stderr.lines().any(|l| l.starts_with(&line)), "no line {line:?} in:\n{}", v.stderr);
    }
    // Ports and pids change from run to run.
    let masked = regex::Regex::new(r"127\.0\.0\.1:\d+").unwrap().replace_all(&v.stdout, "127.0.0.1:[port]");
    // CPU ranks over Gloo here; GPU ranks (NCCL, or sharing a GPU over Gloo) on a GPU machine.
    let masked = regex::Regex::new(r" (CPU|GPU) rank\(s\)( sharing \d+ GPU\(s\))?, (Gloo|NCCL)")
        .unwrap()
        .replace_all(&masked, " [device] rank(s), [backend]");
    insta::assert_snapshot!("report_step_2", masked);
}

#[test]
fn watch_verifies_again_after_a_save() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = variant(2, "watched", "args.world_size = ", "args.world_size = ");
    let progress =
        std::env::temp_dir().join(format!("checker-test-watch-progress-{}.json", std::process::id()));
    let mut watch = Command::new(env!("CARGO_BIN_EXE_checker"));
    watch
        .current_dir(repo())
        .args(["watch", "step", "2", "--seed", "1", "--max-runs", "2", "--crate"])
        .arg(&dir)
        .env(PROGRESS_FILE_ENV, &progress)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = child_process::spawn(watch).unwrap();
    let (lines, received) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut output = Vec::new();
    let next_line = |output: &mut Vec<String>| -> Option<String> {
        let line = received.recv_timeout(Duration::from_secs(300)).ok()?;
        output.push(line.clone());
        Some(line)
    };
    // The first run passes, then the checker waits for a save.
    while let Some(line) = next_line(&mut output) {
        if line.contains("watching") {
            break;
        }
    }
    if !output.last().is_some_and(|l| l.starts_with("== all checks pass; watching")) {
        let _ = child.kill();
        panic!("the first run did not pass and wait:\n{}", output.join("\n"));
    }
    // A save that breaks the build: the second run fails on `builds`, and the checker stops
    // (--max-runs 2) with the second run's status.
    let main_rs = dir.join("src/main.rs");
    let source = std::fs::read_to_string(&main_rs).unwrap();
    std::fs::write(&main_rs, source.replace("args.world_size = ", "args.world_size = undefined_name + "))
        .unwrap();
    while next_line(&mut output).is_some() {}
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let text = output.join("\n");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("== change in") && text.contains("verifying step 2 again"), "{text}");
    let after = text.split("== change in").nth(1).unwrap();
    assert!(after.contains("error[builds]: step 0:"), "{text}");
    assert!(after.contains("cannot find value `undefined_name`"), "{text}");
}
