//! GitHub Classroom: the autograding workflow of a student's repository
//! (`.github/workflows/classroom.yml`), in the form GitHub Classroom writes it itself.
//!
//! By default each step is a `run` step that writes the checker's runner result (`grade
//! --classroom`: JSON, version 1, a test per check with its score) base64-encoded to the
//! step's `result` output, as the newer grader actions do (autograding-command-grader
//! src/main.js); the reporter sums the tests' scores, so a student earns the points of
//! each check passed rather than all or nothing per step.
//!
//! With `--points-per-step`, one step per test with
//! `classroom-resources/autograding-command-grader@v1` (inputs
//! `test-name`, `setup-command`, `command`, `timeout` in minutes, `max-score`; exit 0
//! passes) and a last step, `classroom-resources/autograding-grading-reporter@v1`, that
//! sums them, reading each test's result from `<ID>_RESULTS` (the step id upper-cased)
//! and the ids from `runners` (source: both actions' action.yml and src/main.js).
//!
//! The checker and its checks come from the instructor's repository at a pinned
//! revision, checked out beside the submission: a student who edits the checker's
//! files in their own repository changes nothing that grades them.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The action that runs one test's command (GitHub Classroom's own).
pub const COMMAND_GRADER: &str = "classroom-resources/autograding-command-grader@v1";
/// The action that sums the tests and reports to GitHub Classroom.
pub const REPORTER: &str = "classroom-resources/autograding-grading-reporter@v1";
/// Where the submission (the student's repository) is checked out, in the workspace.
pub const SUBMISSION_DIR: &str = "submission";
/// Where the instructor's repository is checked out, at the pinned revision.
pub const GRADER_DIR: &str = "grader";
/// The workflow's path in the students' repository.
pub const WORKFLOW_FILE: &str = ".github/workflows/classroom.yml";
/// Points per step, as `grade` gives them.
const STEP_POINTS: u32 = 10;
/// Minutes one step's check may take on GitHub's runner (its build included).
const STEP_TIMEOUT_MINUTES: u32 = 20;

/// A GitHub Actions workflow, as much of it as this one uses.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Workflow {
    pub name: String,
    /// The events that start it (GitHub reads a bare `on` as this key, as its docs write it).
    #[serde(rename = "on")]
    pub on: Vec<String>,
    pub permissions: BTreeMap<String, String>,
    pub jobs: BTreeMap<String, Job>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Job {
    #[serde(rename = "runs-on")]
    pub runs_on: String,
    #[serde(rename = "timeout-minutes")]
    pub timeout_minutes: u32,
    /// GitHub Classroom's own guard: its bot's pushes (the starter) are not graded.
    #[serde(rename = "if")]
    pub condition: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Step {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uses: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub run: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub with: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub env: BTreeMap<String, String>,
    #[serde(rename = "timeout-minutes", skip_serializing_if = "Option::is_none", default)]
    pub timeout_minutes: Option<u32>,
}

/// The instructor's repository the checker comes from.
#[derive(Debug, Clone)]
pub struct Grader {
    /// `owner/name` on GitHub.
    pub repository: String,
    /// A full commit id: a branch or tag could move under the students.
    pub revision: String,
}

impl Grader {
    /// Checks the two values a workflow is made from; the message says what is wrong.
    pub fn new(repository: &str, revision: &str) -> Result<Grader, String> {
        let parts: Vec<&str> = repository.split('/').collect();
        let name_ok =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if parts.len() != 2 || !parts.iter().all(|p| name_ok(p)) {
            return Err(format!(
                "--repository {repository:?}: name the instructor's GitHub repository as OWNER/NAME"
            ));
        }
        if revision.len() != 40 || !revision.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "--revision {revision:?}: pin a full 40-digit commit id (`git rev-parse HEAD`); \
                 a branch or tag could change under the students"
            ));
        }
        Ok(Grader { repository: repository.into(), revision: revision.to_ascii_lowercase() })
    }
}

/// The step id of step `step`'s test: letters and digits only, which the reporter's
/// `runners` list accepts.
pub fn step_id(step: u8) -> String {
    format!("step{step:02}")
}

/// The command that grades step `step`, run from the workspace (where both checkouts
/// are) by `sh` with only PATH and HOME set, as the command grader runs it. The
/// submission is named from the workspace (`$ws`), not as `../submission`: a path the
/// kernel resolves from the grader's real directory, which need not be the workspace's
/// child (a test links it there).
///
/// Unsandboxed: GitHub's runner is a fresh virtual machine of the student's own
/// repository, which the student controls anyway (they can edit this workflow); a
/// sandbox would protect nothing there, and Ubuntu 24.04's runners refuse bubblewrap
/// the user namespaces it needs.
pub fn step_command(step: u8) -> String {
    let starter = lab_course::Version::Starter(step).crate_dir();
    format!(
        "ws=$PWD && cd {GRADER_DIR} && cargo checker verify step {step} --crate \"$ws/{SUBMISSION_DIR}/{}\" --unsandboxed",
        starter.display()
    )
}

/// The `run` of step `step`'s test with points per check: `grade --classroom` writes the
/// runner result, which goes base64-encoded to the step's `result` output. When the
/// checker could not grade, a result of its own says so (an error worth nothing), so
/// the reporter still counts the step's 10 points as possible.
pub fn runner_command(step: u8) -> String {
    let id = step_id(step);
    let starter = lab_course::Version::Starter(step).crate_dir();
    let starter = starter.display();
    format!(
        "ws=$PWD && result=\"$ws/{id}.json\" && (cd {GRADER_DIR} && cargo checker grade step {step} \
         --crate \"$ws/{SUBMISSION_DIR}/{starter}\" --unsandboxed --classroom \"$result\") || true\n\
         [ -s \"$result\" ] || printf '%s' '{{\"version\": 1, \"status\": \"error\", \"max_score\": {STEP_POINTS}, \
         \"tests\": [{{\"name\": \"step {step}\", \"status\": \"error\", \"score\": 0, \
         \"message\": \"the checker could not grade this step: its error is in this step'\"'\"'s log\"}}]}}' >\"$result\"\n\
         echo \"result=$(base64 -w0 \"$result\")\" >>\"$GITHUB_OUTPUT\"\n"
    )
}

/// The command that prepares the grader once, before the tests: setup (libtorch, the
/// gloo headers, the data set) and the checker's build, which compiles every
/// dependency the steps share.
pub fn setup_command() -> String {
    format!("cd {GRADER_DIR} && bash scripts/setup.sh && cargo build -q -p checker")
}

/// How a step's test earns its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Points {
    /// The command grader: all of the step's points when every check passes
    /// (`--points-per-step`).
    PerStep,
    /// The checker's runner result: each check's share (the default).
    PerCheck,
}

/// The workflow for steps `steps` (each worth [`STEP_POINTS`]).
pub fn workflow(grader: &Grader, steps: &[u8], points: Points) -> Workflow {
    let mut job_steps = vec![
        Step {
            name: "Check out the submission".into(),
            uses: Some("actions/checkout@v4".into()),
            with: BTreeMap::from([("path".into(), SUBMISSION_DIR.into())]),
            ..Step::default()
        },
        Step {
            name: "Check out the grader at the instructor's pinned revision".into(),
            uses: Some("actions/checkout@v4".into()),
            with: BTreeMap::from([
                ("repository".into(), grader.repository.clone()),
                ("ref".into(), grader.revision.clone()),
                ("path".into(), GRADER_DIR.into()),
                ("persist-credentials".into(), "false".into()),
            ]),
            ..Step::default()
        },
        Step {
            name: "Set up the grader (libtorch, gloo headers, data set, the checker)".into(),
            run: Some(setup_command()),
            ..Step::default()
        },
    ];
    for &step in steps {
        let title = lab_course::STEPS[usize::from(step)];
        if points == Points::PerCheck {
            job_steps.push(Step {
                name: format!("Step {step}: {title}"),
                id: Some(step_id(step)),
                run: Some(runner_command(step)),
                timeout_minutes: Some(STEP_TIMEOUT_MINUTES),
                ..Step::default()
            });
            continue;
        }
        job_steps.push(Step {
            name: format!("Step {step}: {title}"),
            id: Some(step_id(step)),
            uses: Some(COMMAND_GRADER.into()),
            with: BTreeMap::from([
                ("test-name".into(), format!("step {step}: {title}")),
                ("setup-command".into(), String::new()),
                ("command".into(), step_command(step)),
                ("timeout".into(), STEP_TIMEOUT_MINUTES.to_string()),
                ("max-score".into(), STEP_POINTS.to_string()),
            ]),
            ..Step::default()
        });
    }
    let ids: Vec<String> = steps.iter().map(|&s| step_id(s)).collect();
    job_steps.push(Step {
        name: "Autograding Reporter".into(),
        uses: Some(REPORTER.into()),
        env: ids
            .iter()
            .map(|id| {
                (format!("{}_RESULTS", id.to_uppercase()), format!("${{{{steps.{id}.outputs.result}}}}"))
            })
            .collect(),
        with: BTreeMap::from([("runners".into(), ids.join(","))]),
        ..Step::default()
    });
    Workflow {
        name: "Autograding Tests".into(),
        on: vec!["push".into(), "repository_dispatch".into(), "workflow_dispatch".into()],
        permissions: BTreeMap::from([
            ("checks".into(), "write".into()),
            ("actions".into(), "read".into()),
            ("contents".into(), "read".into()),
        ]),
        jobs: BTreeMap::from([(
            "run-autograding-tests".into(),
            Job {
                runs_on: "ubuntu-latest".into(),
                // Setup (about 10 minutes on a fresh runner) and every step's check.
                timeout_minutes: 30 + STEP_TIMEOUT_MINUTES * steps.len() as u32,
                condition: "github.actor != 'github-classroom[bot]'".into(),
                steps: job_steps,
            },
        )]),
    }
}

/// The workflow file's text: a comment saying where it comes from, then the YAML.
pub fn workflow_file(grader: &Grader, steps: &[u8], points: Points) -> Result<String, String> {
    let yaml = serde_norway::to_string(&workflow(grader, steps, points))
        .map_err(|e| format!("cannot write the workflow as YAML: {e}"))?;
    Ok(format!(
        "# GitHub Classroom autograding for the DDP lab, written by\n\
         # `cargo checker autograder github-classroom`. The checker and its checks come from\n\
         # {} at commit {}, checked out beside the submission;\n\
         # regenerate this file to move to another revision.\n{yaml}",
        grader.repository, grader.revision
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grader() -> Grader {
        Grader::new("teacher/ddp-lab", &"a".repeat(40)).unwrap()
    }

    #[test]
    fn every_step_is_one_command_grader_test_and_the_reporter_reads_them_all() {
        let text = workflow_file(&grader(), &[0, 7, 11], Points::PerStep).unwrap();
        // Read back as GitHub reads it: untyped YAML.
        let yaml: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        assert!(yaml.get("on").is_some(), "the trigger key must read as the string `on`: {text}");
        let steps = yaml["jobs"]["run-autograding-tests"]["steps"].as_sequence().unwrap();
        let tests: Vec<_> = steps.iter().filter(|s| s["uses"].as_str() == Some(COMMAND_GRADER)).collect();
        assert_eq!(tests.len(), 3);
        for (test, step) in tests.iter().zip([0u8, 7, 11]) {
            // The command grader's inputs, as its action.yml names them.
            let with = &test["with"];
            for input in ["test-name", "command", "timeout", "max-score"] {
                assert!(with.get(input).is_some(), "{input} missing in {test:?}");
            }
            assert_eq!(test["id"].as_str(), Some(step_id(step).as_str()));
            assert_eq!(with["max-score"].as_str(), Some("10"));
            assert!(with["command"].as_str().unwrap().contains(&format!("verify step {step} --crate")));
        }
        let reporter = steps.last().unwrap();
        assert_eq!(reporter["uses"].as_str(), Some(REPORTER));
        assert_eq!(reporter["with"]["runners"].as_str(), Some("step00,step07,step11"));
        // The reporter reads `<RUNNER upper-cased>_RESULTS`: one per runner, from its step.
        assert_eq!(reporter["env"]["STEP07_RESULTS"].as_str(), Some("${{steps.step07.outputs.result}}"));
        assert_eq!(reporter["env"].as_mapping().unwrap().len(), 3);
    }

    #[test]
    fn the_grader_is_pinned_to_a_commit() {
        let text = workflow_file(&grader(), &[0], Points::PerStep).unwrap();
        let wf: Workflow = serde_norway::from_str(&text).unwrap();
        let steps = &wf.jobs["run-autograding-tests"].steps;
        let checkout =
            steps.iter().find(|s| s.with.get("path").map(String::as_str) == Some(GRADER_DIR)).unwrap();
        assert_eq!(checkout.with["repository"], "teacher/ddp-lab");
        assert_eq!(checkout.with["ref"], "a".repeat(40));
        // Grading commands run in the grader's checkout, on the submission's file only.
        assert!(step_command(3).contains("cd grader && "));
        assert!(step_command(3).contains("--crate \"$ws/submission/steps/step_03\""));
    }

    #[test]
    fn with_points_per_check_each_step_hands_its_runner_result_to_the_reporter() {
        let text = workflow_file(&grader(), &[0, 7], Points::PerCheck).unwrap();
        let yaml: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        let steps = yaml["jobs"]["run-autograding-tests"]["steps"].as_sequence().unwrap();
        assert!(steps.iter().all(|s| s["uses"].as_str() != Some(COMMAND_GRADER)), "{text}");
        let step7 = steps.iter().find(|s| s["id"].as_str() == Some("step07")).unwrap();
        let run = step7["run"].as_str().unwrap();
        assert!(
            run.contains("grade step 7 --crate \"$ws/submission/steps/step_07\" --unsandboxed --classroom")
        );
        assert!(run.contains("echo \"result=$(base64 -w0 \"$result\")\" >>\"$GITHUB_OUTPUT\""), "{run}");
        assert_eq!(step7["timeout-minutes"].as_u64(), Some(u64::from(STEP_TIMEOUT_MINUTES)));
        let reporter = steps.last().unwrap();
        assert_eq!(reporter["with"]["runners"].as_str(), Some("step00,step07"));
        assert_eq!(reporter["env"]["STEP07_RESULTS"].as_str(), Some("${{steps.step07.outputs.result}}"));
    }

    #[test]
    fn a_moving_revision_or_a_bad_repository_is_refused() {
        assert!(Grader::new("teacher/ddp-lab", "main").unwrap_err().contains("40-digit"));
        assert!(Grader::new("ddp-lab", &"0".repeat(40)).unwrap_err().contains("OWNER/NAME"));
        assert!(Grader::new("a/b;rm -rf", &"0".repeat(40)).is_err());
    }
}
