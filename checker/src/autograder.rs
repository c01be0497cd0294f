//! `checker autograder gradescope --step N --out DIR`: what an instructor uploads to
//! Gradescope. Its "Autograder Specifications" (gradescope/autograder_samples,
//! docs/specs.md) ask for a zip with `setup.sh` (run once, as root, to build the image)
//! and `run_autograder` (run per submission) at its root; Gradescope unpacks it in
//! /autograder/source. Here the zip also holds the course, `ddp-lab/`: the repository
//! at its current commit (`git archive HEAD`), so every submission is graded by the
//! checker and checks of that commit, whatever the student hands in.
//!
//! The scripts are templates beside this crate (`checker/autograder/gradescope/`);
//! run_autograder calls `checker grade step N --crate <submission> --gradescope
//! <results.json>`, so finding the program in a submission and writing the results
//! are the checker's own, tested code.
use std::io::{Cursor, Write};
use std::path::Path;
use std::process::Command;

use crate::grade::Graded;

const SETUP: &str = include_str!("../autograder/gradescope/setup.sh");
const RUN_AUTOGRADER: &str = include_str!("../autograder/gradescope/run_autograder");
/// The course's folder inside the zip (and in /autograder/source).
pub const COURSE_DIR: &str = "ddp-lab";

/// Writes `out/autograder.zip`, with `setup.sh` and `run_autograder` beside it (to read);
/// returns what to tell the instructor.
/// `hidden_until_due`: checks whose tests students see after the due date.
pub fn gradescope(
    root: &Path,
    graded: Graded,
    hidden_until_due: &[String],
    out: &Path,
) -> Result<String, String> {
    let commit = course_commit(root)?;
    let course = git(root, &["archive", "--format=zip", &format!("--prefix={COURSE_DIR}/"), "HEAD"])
        .map_err(|e| format!("git archive HEAD failed in {}: {e}", root.display()))?;
    let setup = fill(SETUP, graded, &commit);
    let hidden = if hidden_until_due.is_empty() {
        String::new()
    } else {
        format!(" \\\n    --hidden-until-due {}", hidden_until_due.join(","))
    };
    let run = fill(RUN_AUTOGRADER, graded, &commit).replace("@HIDDEN@", &hidden);
    std::fs::create_dir_all(out)
        .map_err(|e| format!("--out {}: {e}; name a folder you can write", out.display()))?;
    let zip_path = out.join("autograder.zip");
    let written = |e: &dyn std::fmt::Display, path: &Path| format!("cannot write {}: {e}", path.display());
    let executable = atomic_file::Writer::new().mode(0o755);
    let mut pending =
        atomic_file::Writer::new().mode(0o644).create(&zip_path).map_err(|e| written(&e, &zip_path))?;
    pack(pending.file(), &setup, &run, course).map_err(|e| written(&e, &zip_path))?;
    pending.commit().map_err(|e| written(&e, &zip_path))?;
    for (name, text) in [("setup.sh", &setup), ("run_autograder", &run)] {
        let path = out.join(name);
        executable.write(&path, text).map_err(|e| written(&e, &path))?;
    }
    Ok(format!(
        "wrote {zip} (course commit {commit}, {what}), and its setup.sh and run_autograder beside it\n\
         upload {zip} on the Gradescope assignment's \"Configure Autograder\" page; each step is worth 10 points \
         ({max} in all)",
        zip = zip_path.display(),
        what = graded.describe(),
        max = graded.max_points()
    ))
}

/// The platforms graded from a grading image or server that holds the course built
/// (`autograder prairielearn|autolab|coderunner|codegrade`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    Prairielearn,
    Autolab,
    Coderunner,
    Codegrade,
}

impl Platform {
    pub fn name(self) -> &'static str {
        match self {
            Platform::Prairielearn => "prairielearn",
            Platform::Autolab => "autolab",
            Platform::Coderunner => "coderunner",
            Platform::Codegrade => "codegrade",
        }
    }

    /// Where the handed-in code runs there, and why not in the sandbox: said in the
    /// command's output and the guide, since the reports only say it per submission.
    pub fn unconfined(self) -> &'static str {
        match self {
            Platform::Prairielearn => {
                "PrairieLearn runs the entrypoint in a fresh container per submission, without \
                 network; that container usually forbids the namespaces bubblewrap needs, so the \
                 program runs unconfined inside it (results.json says so)"
            }
            Platform::Autolab => {
                "Tango runs each job in a fresh container of the grading image; it usually forbids \
                 the namespaces bubblewrap needs, so the program runs unconfined inside it (the \
                 feedback says so)"
            }
            Platform::Coderunner => {
                "Jobe's runguard allows no namespaces: the program runs unconfined on the Jobe \
                 server, under Jobe's own limits only (the prologue says so); give the server to \
                 this course alone"
            }
            Platform::Codegrade => {
                "CodeGrade's AutoTest runner usually forbids the namespaces bubblewrap needs, so \
                 the program runs unconfined on that runner, a fresh one per submission (the \
                 report's output says so)"
            }
        }
    }
}

const IMAGE_SETUP: &str = include_str!("../autograder/image/setup.sh");
const IMAGE_DOCKERFILE: &str = include_str!("../autograder/image/Dockerfile");
const PL_ENTRYPOINT: &str = include_str!("../autograder/prairielearn/entrypoint");
const PL_QUESTION: &str = include_str!("../autograder/prairielearn/question.html");
const AUTOLAB_MAKEFILE: &str = include_str!("../autograder/autolab/autograde-Makefile");
const AUTOLAB_GRADE: &str = include_str!("../autograder/autolab/grade.sh");
const CODERUNNER_TEMPLATE: &str = include_str!("../autograder/coderunner/template.py");
const CODEGRADE_RUN: &str = include_str!("../autograder/codegrade/run.sh");
/// Where the PrairieLearn entrypoint lives in the image (outside /grade, which is mounted).
pub const PL_ENTRYPOINT_PATH: &str = "/opt/ddp-lab-grader/entrypoint";
/// The folder autograde.tar unpacks to in Autolab's job folder.
pub const AUTOLAB_DIR: &str = "ddp-lab-autograde";
/// PrairieLearn's limit on an external grader's timeout, in seconds.
pub const PL_TIMEOUT_LIMIT: u32 = 600;

/// Writes what `platform` needs into `out`; returns what to tell the instructor.
pub fn platform(
    root: &Path,
    graded: Graded,
    platform: Platform,
    image: Option<&str>,
    out: &Path,
) -> Result<String, String> {
    let commit = course_commit(root)?;
    let course = git(root, &["archive", "--format=tar", "HEAD"])
        .map_err(|e| format!("git archive HEAD failed in {}: {e}", root.display()))?;
    let step = graded.run_as();
    let image = image.map(String::from).unwrap_or_else(|| format!("ddp-lab-grader:step-{step:02}"));
    let filled = |template: &str| {
        fill(template, graded, &commit).replace("@PLATFORM@", platform.name()).replace("@IMAGE@", &image)
    };
    let copy = match platform {
        Platform::Prairielearn => format!("COPY entrypoint {PL_ENTRYPOINT_PATH}"),
        _ => String::new(),
    };
    let mut files: Vec<(String, Vec<u8>, u32)> = vec![
        ("ddp-lab.tar".into(), course, 0o644),
        ("setup.sh".into(), filled(IMAGE_SETUP).into_bytes(), 0o755),
    ];
    let dockerfile = filled(IMAGE_DOCKERFILE).replace("@COPY@", &copy).into_bytes();
    let how = match platform {
        Platform::Prairielearn => {
            files.push(("Dockerfile".into(), dockerfile, 0o644));
            files.push(("entrypoint".into(), filled(PL_ENTRYPOINT).into_bytes(), 0o755));
            let info = question_info(graded, &commit, &image);
            files.push(("question/info.json".into(), info.into_bytes(), 0o644));
            files.push(("question/question.html".into(), filled(PL_QUESTION).into_bytes(), 0o644));
            format!(
                "build and push the grading image in {out}: docker build -t {image} {out} && docker push {image}\n\
                 copy {out}/question into your course's questions/ (info.json names the image, the \
                 entrypoint {PL_ENTRYPOINT_PATH} and a timeout of {PL_TIMEOUT_LIMIT} s, networking off)",
                out = out.display()
            )
        }
        Platform::Autolab => {
            files.push(("Dockerfile".into(), dockerfile, 0o644));
            files.push(("autograde-Makefile".into(), filled(AUTOLAB_MAKEFILE).into_bytes(), 0o644));
            let zeroes = graded
                .steps()
                .iter()
                .map(|&s| format!("\"{}\": 0", crate::formats::autolab::problem(s)))
                .collect::<Vec<_>>()
                .join(", ");
            let grade = filled(AUTOLAB_GRADE).replace("@ZEROES@", &zeroes);
            files.push((format!("{AUTOLAB_DIR}/grade.sh"), grade.into_bytes(), 0o755));
            let problems =
                graded.steps().iter().map(|&s| crate::formats::autolab::problem(s)).collect::<Vec<_>>();
            format!(
                "build the grading image in {out} (docker build -t {image} {out}) on the Tango host, and \
                 name it as the assessment's autograding image\n\
                 upload {out}/autograde-Makefile and {out}/autograde.tar (made with: tar -cf autograde.tar \
                 -C {out} {AUTOLAB_DIR}); the handin file is main.rs\n\
                 the assessment's problems, each worth 10 points: {problems}\n\
                 its scoreboard's column specification: {spec}",
                out = out.display(),
                problems = problems.join(", "),
                spec = crate::formats::autolab::scoreboard_spec(graded)
            )
        }
        Platform::Coderunner => {
            let words = match graded {
                Graded::Step(step) => format!("\"step\", \"{step}\""),
                Graded::Final => "\"all\"".into(),
            };
            let template = filled(CODERUNNER_TEMPLATE).replace("@GRADE_WORDS@", &words);
            files.push(("template.py".into(), template.into_bytes(), 0o644));
            format!(
                "on the Jobe server: sudo bash {out}/setup.sh {out}/ddp-lab.tar (the course in /opt/ddp-lab)\n\
                 in the CodeRunner question: type python3, Template grader, \"Is combinator\" ticked, the \
                 template {out}/template.py, one test case (its fields unused), and Jobe's limits raised \
                 (CPU time and wall time {PL_TIMEOUT_LIMIT} s, memory 8000 MB)",
                out = out.display()
            )
        }
        Platform::Codegrade => {
            files.push(("run.sh".into(), filled(CODEGRADE_RUN).into_bytes(), 0o755));
            format!(
                "upload {out}/ddp-lab.tar, {out}/setup.sh and {out}/run.sh as AutoTest fixtures\n\
                 global setup script: DDP_LAB_COURSE=$HOME/ddp-lab bash $FIXTURES/setup.sh $FIXTURES/ddp-lab.tar\n\
                 a Unit Test step (custom), its command: bash $FIXTURES/run.sh",
                out = out.display()
            )
        }
    };
    std::fs::create_dir_all(out)
        .map_err(|e| format!("--out {}: {e}; name a folder you can write", out.display()))?;
    for (name, bytes, mode) in &files {
        let path = out.join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        }
        atomic_file::Writer::new()
            .mode(*mode)
            .write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if platform == Platform::Autolab {
        tar(out, &out.join("autograde.tar"), AUTOLAB_DIR)?;
    }
    let mut written: Vec<&str> = files.iter().map(|(name, _, _)| name.as_str()).collect();
    if platform == Platform::Autolab {
        written.push("autograde.tar");
    }
    Ok(format!(
        "wrote {} in {} (course commit {commit}, {})\n{how}\nsandbox: {}",
        written.join(", "),
        out.display(),
        graded.describe(),
        platform.unconfined()
    ))
}

/// The question's info.json: external grading by the image, at most PrairieLearn's
/// longest timeout, networking off.
fn question_info(graded: Graded, commit: &str, image: &str) -> String {
    let info = serde_json::json!({
        "uuid": uuid_of(&format!("{commit} {}", graded.describe())),
        "title": format!("DDP lab: {}", graded.describe()),
        "topic": "Distributed data parallel",
        "tags": ["ddp-lab"],
        "type": "v3",
        "singleVariant": true,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "enabled": true,
            "image": image,
            "entrypoint": PL_ENTRYPOINT_PATH,
            "timeout": PL_TIMEOUT_LIMIT,
            "enableNetworking": false
        }
    });
    serde_json::to_string_pretty(&info).expect("plain JSON") + "\n"
}

/// A version-4-shaped UUID made from `seed`, so the same course commit and step give
/// the same question (PrairieLearn keys a question's history on its uuid).
fn uuid_of(seed: &str) -> String {
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in seed.bytes() {
        hash ^= u128::from(b);
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    let hex = format!("{hash:032x}");
    let variant = ["8", "9", "a", "b"][usize::from(hex.as_bytes()[16] % 4)];
    format!("{}-{}-4{}-{}{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], variant, &hex[17..20], &hex[20..32])
}

/// `tar -cf archive -C dir name`: autograde.tar, as the instructor would make it.
fn tar(dir: &Path, archive: &Path, name: &str) -> Result<(), String> {
    let out = Command::new("tar")
        .arg("-cf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .arg(name)
        .output()
        .map_err(|e| format!("cannot run tar to make {}: {e}; install tar", archive.display()))?;
    if !out.status.success() {
        return Err(format!(
            "tar could not make {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A template with what is graded and the commit filled in: `@GRADE@` is the words after
/// `grade` (`step 7`, `all`), `@STEP@`/`@STEP2@` the step whose reference solution setup
/// checks (the last step's for `all`, the finished lab).
fn fill(template: &str, graded: Graded, commit: &str) -> String {
    let step = graded.run_as();
    let grade = match graded {
        Graded::Step(step) => format!("step {step}"),
        Graded::Final => "all".to_string(),
    };
    template
        .replace("@GRADE@", &grade)
        .replace("@STEP2@", &format!("{step:02}"))
        .replace("@STEP@", &step.to_string())
        .replace("@COMMIT@", commit)
}

/// The commit the course is at (HEAD), warning when the checkout has changes it lacks.
fn course_commit(root: &Path) -> Result<String, String> {
    let commit = git(root, &["rev-parse", "HEAD"]).map_err(|e| {
        format!(
            "{}: not a git checkout ({e}); the autograder carries the course at a commit \
             (`git archive HEAD`): run this in a clone of the course",
            root.display()
        )
    })?;
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let changed = git(root, &["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    if !changed.is_empty() {
        eprintln!(
            "warning: the course has uncommitted changes; the autograder holds commit {commit} without them \
             (commit them first to include them)"
        );
    }
    Ok(commit)
}

fn git(root: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(out.stdout)
}

/// The autograder zip: the two scripts (executable) at its root, then the course's
/// entries copied from git's archive as they are.
fn pack(file: &mut std::fs::File, setup: &str, run: &str, course: Vec<u8>) -> zip::result::ZipResult<()> {
    let mut zip = zip::ZipWriter::new(file);
    let script = zip::write::FileOptions::default().unix_permissions(0o755);
    for (name, text) in [("setup.sh", setup), ("run_autograder", run)] {
        zip.start_file(name, script)?;
        zip.write_all(text.as_bytes())?;
    }
    let mut archive = zip::ZipArchive::new(Cursor::new(course))?;
    for index in 0..archive.len() {
        zip.raw_copy_file(archive.by_index_raw(index)?)?;
    }
    zip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_name_the_step_and_what_a_trial_run_sets() {
        let run = fill(RUN_AUTOGRADER, Graded::Step(7), "abc123").replace("@HIDDEN@", "");
        assert!(run.contains("grade step 7 --crate \"$AUTOGRADER_ROOT/submission\""), "{run}");
        assert!(run.contains("course commit abc123"), "{run}");
        assert!(!run.contains('@'), "a placeholder left: {run}");
        for env in [checker::COURSE_ENV, checker::CHECKER_ENV] {
            assert!(run.contains(&format!("${{{env}:-")), "run_autograder must honour {env}");
        }
        assert!(run.contains("${AUTOGRADER_ROOT:-/autograder}"));
        assert!(run.contains(&format!("$AUTOGRADER_ROOT/source/{COURSE_DIR}")));
        let setup = fill(SETUP, Graded::Step(7), "abc123");
        assert!(setup.contains("--crate solutions/step_07 "), "{setup}");
        assert!(setup.contains(&format!("$AUTOGRADER_ROOT/source/{COURSE_DIR}")));
        assert!(!setup.contains('@'), "a placeholder left: {setup}");
    }

    #[test]
    fn the_finished_program_is_graded_on_every_step_and_setup_checks_the_last_solution() {
        let run = fill(RUN_AUTOGRADER, Graded::Final, "abc123").replace("@HIDDEN@", "");
        assert!(run.contains("grade all --crate \"$AUTOGRADER_ROOT/submission\""), "{run}");
        assert!(!run.contains("grade step"), "{run}");
        let setup = fill(SETUP, Graded::Final, "abc123");
        assert!(setup.contains("verify step 11 --crate solutions/step_11 "), "{setup}");
        assert!(!setup.contains('@'), "a placeholder left: {setup}");
    }
}
