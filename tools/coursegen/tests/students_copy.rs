//! `coursegen students-copy DIR`: the repository a class gets holds no answer, except
//! what cannot be helped (the starter of step N+1 is the program after step N).
use std::path::{Path, PathBuf};
use std::process::Command;

use lab_course::students_copy::{MARK, STARTERS};
use lab_course::{answer_blocks, answer_lines, LAST_STEP, MASTER};

/// The repository this crate lives in.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the crate lies in tools/")
}

/// A fresh folder under cargo's scratch space for the tests, named `name`.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("students-copy").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    dir
}

fn coursegen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_coursegen")).arg("--root").arg(repo_root()).args(args).output().unwrap()
}

fn write_copy(dir: &Path, through: Option<u8>) {
    let mut args = vec!["students-copy", dir.to_str().unwrap()];
    let through = through.map(|n| n.to_string());
    if let Some(n) = &through {
        args.extend(["--through", n]);
    }
    let out = coursegen(&args);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file under `dir`, relative to it, with its text (binary files as lossy text).
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()));
            }
        }
    }
    out
}

/// The step whose starter `rel` belongs to (`steps/step_07/...` or its pristine copy).
fn starter_of(rel: &str) -> Option<u8> {
    let rest = rel.strip_prefix("steps/step_").or_else(|| rel.strip_prefix(&format!("{STARTERS}/step_")))?;
    rest.get(..2)?.parse().ok()
}

/// The step whose page `rel` is (`lab-guide/src/steps/step-07.md`).
fn page_of(rel: &str) -> Option<u8> {
    rel.strip_prefix("lab-guide/src/steps/step-")?.get(..2)?.parse().ok()
}

/// Where, in the copy at `dir`, step k's code appears, as (file, step, line), outside
/// what comes after step k (the starters of later steps are the programs after step k,
/// and the pages of later steps may show it too):
/// - in a step page and in a starter, any line of it;
/// - in any other file, a block of the master whole (all its telling lines, for a block
///   of two or more: a single line such as step 6's `set_epoch` call is what the
///   concepts page explains, and what a library's docs show);
/// - the libraries (`crates/`) aside: their docs and examples teach the very API the
///   steps call (`tch-distributed`'s FSDP example builds a `FullyShard` as step 14 does).
fn answers_shown(dir: &Path) -> Vec<(String, u8, String)> {
    let master = std::fs::read_to_string(repo_root().join(MASTER)).unwrap();
    let steps: Vec<(u8, Vec<Vec<String>>)> =
        (0..=LAST_STEP).map(|k| (k, answer_blocks(&master, k).unwrap())).collect();
    let mut shown = Vec::new();
    for (rel, text) in files(dir) {
        if rel.starts_with("crates/") {
            continue;
        }
        let after = starter_of(&rel).or_else(|| page_of(&rel));
        for (k, blocks) in &steps {
            if after.is_some_and(|n| n > *k) {
                continue;
            }
            for block in blocks {
                let found: Vec<&String> = block.iter().filter(|line| text.contains(line.as_str())).collect();
                let whole = block.len() >= 2 && found.len() == block.len();
                if after.is_some() || whole {
                    shown.extend(found.into_iter().map(|line| (rel.clone(), *k, line.clone())));
                }
            }
        }
    }
    shown
}

#[test]
fn the_students_copy_holds_no_answer_but_the_starters() {
    let dir = scratch("all");
    write_copy(&dir, None);
    for gone in ["solutions", "course/lab", "checker/tests"] {
        assert!(!dir.join(gone).exists(), "{gone} is in the students' copy");
    }
    for kept in [
        "steps/step_14/src/main.rs",
        "checker/src/main.rs",
        "crates/labkit/src/lib.rs",
        "lab-guide/src/SUMMARY.md",
        MARK,
    ] {
        assert!(dir.join(kept).is_file(), "{kept} is missing from the students' copy");
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("solutions/*") && !manifest.contains("course/lab"), "{manifest}");
    // The starters are the ones coursegen renders, and kept pristine for `reset`.
    for step in [0, LAST_STEP] {
        for (rel, content) in
            lab_course::crate_files(&repo_root(), lab_course::Version::Starter(step)).unwrap()
        {
            assert_eq!(std::fs::read_to_string(dir.join(&rel)).unwrap(), content, "{}", rel.display());
        }
        let from_copy = lab_course::crate_files(&dir, lab_course::Version::Starter(step)).unwrap();
        let from_master = lab_course::crate_files(&repo_root(), lab_course::Version::Starter(step)).unwrap();
        assert_eq!(from_copy, from_master, "the copy's pristine starter of step {step}");
    }
    let shown = answers_shown(&dir);
    assert!(shown.is_empty(), "answers in the students' copy (file, step, line): {shown:#?}");
    // The pages keep their lead and API; the code part says where the answers are.
    let page = std::fs::read_to_string(dir.join("lab-guide/src/steps/step-09.md")).unwrap();
    assert!(page.contains(lab_course::students_copy::WITHHELD) && page.contains("Which API"), "{page}");
}

/// `--through N`: the starters of steps 0 to N only, so no code of step N or after at all.
#[test]
fn a_copy_through_a_step_holds_nothing_of_that_step_or_after() {
    let dir = scratch("through-4");
    write_copy(&dir, Some(4));
    assert!(dir.join("steps/step_04/src/main.rs").is_file());
    assert!(!dir.join("steps/step_05").exists() && !dir.join(STARTERS).join("step_05").exists());
    assert_eq!(lab_course::students_copy::read_mark(&dir).map(|m| m.through), Some(4));
    let shown = answers_shown(&dir);
    assert!(shown.is_empty(), "{shown:#?}");
    // No line of step 4 or after in any starter or page.
    let master = std::fs::read_to_string(repo_root().join(MASTER)).unwrap();
    let all = files(&dir);
    for k in 4..=LAST_STEP {
        for line in answer_lines(&master, k).unwrap() {
            let found: Vec<&String> = all
                .iter()
                .filter(|(rel, text)| {
                    (starter_of(rel).is_some() || page_of(rel).is_some()) && text.contains(&line)
                })
                .map(|(rel, _)| rel)
                .collect();
            assert!(found.is_empty(), "step {k}'s {line:?} in {found:?}");
        }
    }
}

#[test]
fn a_folder_that_is_there_is_refused_and_nothing_is_written() {
    let dir = scratch("taken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = coursegen(&["students-copy", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not empty") && stderr.contains(dir.to_str().unwrap()), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("taken") && name != "taken")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(files(&dir), [("notes.txt".to_string(), "mine".to_string())]);

    let out = coursegen(&["students-copy", dir.join("x").to_str().unwrap(), "--through", "99"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("x").exists());
}

/// The copy builds and its checker verifies a starter there: step 2's starter fails
/// step 2 and passes steps 0 and 1, as a starter does (its fixture says so:
/// checker/fixtures/observations/starter-02). The one test that builds a copy (the
/// checker and one starter, in a target folder of its own that later runs reuse: a
/// first run builds everything, half an hour on 2 busy cores; later ones only what
/// changed, the copy keeping its files' modification times).
#[test]
fn the_students_copy_builds_and_its_checker_verifies_a_starter() {
    let root = repo_root();
    let dir = scratch("built");
    write_copy(&dir, Some(2));
    // What `bash scripts/setup.sh` links in a clone: libtorch, and the rest it installs.
    for linked in [".libtorch", ".gloo-include", ".venv"] {
        if root.join(linked).exists() {
            std::os::unix::fs::symlink(root.join(linked).canonicalize().unwrap(), dir.join(linked)).unwrap();
        }
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("students-copy-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let build = Command::new(&cargo)
        .args(["build", "--quiet", "-p", "checker", "-p", "step_02"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(build.status.success(), "the copy does not build:\n{}", String::from_utf8_lossy(&build.stderr));
    let junit = dir.join("verify.xml");
    let verify = Command::new(target.join("debug/checker"))
        .args(["verify", "step", "2", "--junit"])
        .arg(&junit)
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("DDP_LAB_ROOT")
        .output()
        .unwrap();
    let said =
        format!("{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
    assert_eq!(verify.status.code(), Some(1), "a starter fails its own step:\n{said}");
    let xml = std::fs::read_to_string(&junit).unwrap_or_else(|e| panic!("{}: {e}\n{said}", junit.display()));
    // Each testcase: its step (from the classname) and whether it failed.
    let cases: Vec<(String, bool)> = xml
        .split("<testcase ")
        .skip(1)
        .map(|case| {
            let step =
                case.split("classname=\"ddp-lab.").nth(1).and_then(|c| c.split('"').next()).unwrap_or("");
            let head = case.split("</testcase>").next().unwrap();
            (step.to_string(), head.contains("<failure") || head.contains("<error"))
        })
        .collect();
    for earlier in ["step_00", "step_01"] {
        let checks: Vec<_> = cases.iter().filter(|(s, _)| s == earlier).collect();
        assert!(!checks.is_empty() && checks.iter().all(|(_, failed)| !failed), "{earlier} passes:\n{said}");
    }
    assert!(cases.iter().any(|(s, failed)| s == "step_02" && *failed), "step 2 fails:\n{said}");
    // Its checker has no solutions to check, and no answer to give.
    let solutions = Command::new(target.join("debug/checker"))
        .args(["verify", "step", "0", "--solutions"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(solutions.status.code(), Some(2));
    let hint = Command::new(target.join("debug/checker"))
        .args(["hint", "step", "2", "--answer"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let hint = String::from_utf8_lossy(&hint.stdout);
    assert!(hint.contains("they are with your instructor"), "{hint}");

    // `reset` restores the starter from the copy's pristine one (no master there).
    let main = dir.join("steps/step_02/src/main.rs");
    let pristine = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, "fn main() {}\n").unwrap();
    let reset = Command::new(target.join("debug/checker"))
        .args(["reset", "step", "2", "--yes"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(reset.status.success(), "{}", String::from_utf8_lossy(&reset.stderr));
    assert_eq!(std::fs::read_to_string(&main).unwrap(), pristine);
}
