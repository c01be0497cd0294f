//! DDP_LAB_PYTHON: a torch 2.11.x already installed (a course's conda env or
//! container) is used instead of a new 4.6 GB venv, and anything else is refused,
//! exit 2, before setup changes anything.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use setup_tests::{fake_program, installed_python, on_path, path_with, run, torch_version, Run, Scratch};

const LIMIT: Duration = Duration::from_secs(300);

/// What `python` reports as torch's directory and its environment, asked as setup
/// does not (importing nothing but importlib).
fn torch_dir_and_prefix(python: &Path) -> (PathBuf, PathBuf) {
    let out = Command::new(python)
        .args(["-c", "import importlib.util, os, sys; print(os.path.dirname(importlib.util.find_spec('torch').origin)); print(sys.prefix)"])
        .output()
        .expect("run the installed python");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(|l| PathBuf::from(l).canonicalize().expect("an existing directory"));
    (lines.next().expect("torch's directory"), lines.next().expect("sys.prefix"))
}

/// Refuses package installs whoever runs the test: `apt-get` and `sudo` that fail
/// come first on PATH (the data set step would otherwise install as root).
fn no_installs(scratch: &Scratch, cmd: &mut Command) {
    let bin = scratch.path("refusing-bin");
    fake_program(&bin, "apt-get", "echo 'E: package installs are refused in this test' >&2; exit 100");
    fake_program(&bin, "sudo", "echo 'sudo: refused in this test' >&2; exit 1");
    cmd.env("PATH", path_with(&bin));
}

/// gloo headers the setup step accepts without looking further (any content: the
/// build is not run here).
fn gloo_headers(scratch: &Scratch) -> PathBuf {
    let dir = scratch.path("gloo-include");
    std::fs::create_dir_all(dir.join("gloo")).unwrap();
    std::fs::write(dir.join("gloo/algorithm.h"), "// stands for gloo's headers\n").unwrap();
    dir
}

fn link(scratch: &Scratch, name: &str) -> PathBuf {
    scratch.root.join(name).canonicalize().unwrap_or_else(|e| panic!("the link {name} in the copy: {e}"))
}

#[test]
fn a_matching_python_is_used_and_no_venv_is_made() {
    let Some(python) = installed_python("a course's own torch") else { return };
    let (torch_dir, prefix) = torch_dir_and_prefix(&python);
    let scratch = Scratch::scripts_only();
    let headers = gloo_headers(&scratch);

    let mut cmd = scratch.setup(&[]);
    no_installs(&scratch, &mut cmd);
    cmd.env("DDP_LAB_PYTHON", &python).env("DDP_LAB_GLOO_INCLUDE", &headers);
    let first = run(cmd, LIMIT);
    assert_eq!(first.code, Some(0), "{}", first.shown());
    no_venv(&scratch, &first);
    assert_eq!(link(&scratch, ".libtorch"), torch_dir, "{}", first.shown());
    assert_eq!(link(&scratch, ".venv"), prefix, "{}", first.shown());

    // Run again without the variable, as scripts/main.sh does: the choice holds.
    let mut cmd = scratch.setup(&[]);
    no_installs(&scratch, &mut cmd);
    let again = run(cmd, LIMIT);
    assert_eq!(again.code, Some(0), "{}", again.shown());
    no_venv(&scratch, &again);
    assert_eq!(link(&scratch, ".libtorch"), torch_dir, "{}", again.shown());
}

fn no_venv(scratch: &Scratch, run: &Run) {
    assert!(!scratch.cache.join("venv").exists(), "setup made a venv in the cache\n{}", run.shown());
}

/// A real python that finds a fake torch of `version` first (or, with None, no torch
/// at all: `-S` leaves site-packages out).
fn python_with_torch(scratch: &Scratch, version: Option<&str>) -> PathBuf {
    let python3 = on_path("python3").expect("python3 on PATH (setup needs one too)");
    let site = scratch.path("fake-site");
    if let Some(version) = version {
        std::fs::create_dir_all(site.join("torch/lib")).unwrap();
        std::fs::write(site.join("torch/__init__.py"), "").unwrap();
        std::fs::write(site.join("torch/version.py"), format!("__version__ = '{version}'\n")).unwrap();
        std::fs::write(site.join("torch/lib/libtorch_cpu.so"), "").unwrap();
    }
    let script = format!("PYTHONPATH='{}' exec '{}' -S \"$@\"", site.display(), python3.display());
    fake_program(&scratch.path("fake-python"), "python", &script)
}

fn refused_before_anything(scratch: &Scratch, run: &Run) {
    assert_eq!(run.code, Some(2), "{}", run.shown());
    assert!(!scratch.cache.exists(), "the refusal made the cache\n{}", run.shown());
    assert!(
        scratch.root.join(".libtorch").symlink_metadata().is_err(),
        "the refusal made .libtorch\n{}",
        run.shown()
    );
}

#[test]
fn a_python_with_another_torch_is_refused_naming_both_versions() {
    let scratch = Scratch::scripts_only();
    let python = python_with_torch(&scratch, Some("2.10.1+cpu"));
    let mut cmd = scratch.setup(&[]);
    no_installs(&scratch, &mut cmd);
    cmd.env("DDP_LAB_PYTHON", &python).env("DDP_LAB_GLOO_INCLUDE", gloo_headers(&scratch));
    let run = run(cmd, LIMIT);
    refused_before_anything(&scratch, &run);
    let needed = torch_version();
    let series = needed.rsplit_once('.').unwrap().0;
    for words in
        ["torch 2.10.1+cpu".to_string(), format!("needs torch {series}.x"), format!("libtorch {needed}")]
    {
        assert!(run.stderr.contains(&words), "the refusal should say {words:?}\n{}", run.shown());
    }
}

#[test]
fn a_python_without_torch_is_refused() {
    let scratch = Scratch::scripts_only();
    let python = python_with_torch(&scratch, None);
    let mut cmd = scratch.setup(&[]);
    no_installs(&scratch, &mut cmd);
    cmd.env("DDP_LAB_PYTHON", &python).env("DDP_LAB_GLOO_INCLUDE", gloo_headers(&scratch));
    let run = run(cmd, LIMIT);
    refused_before_anything(&scratch, &run);
    let words = format!("DDP_LAB_PYTHON={} has no torch", python.display());
    assert!(run.stderr.contains(&words), "the refusal should say {words:?}\n{}", run.shown());
    assert!(run.stderr.contains("pip install torch=="), "it says how to install it\n{}", run.shown());
}

#[test]
fn a_patch_release_of_the_same_torch_is_accepted() {
    // 2.11.x shares libtorch 2.11.0's interface: a (fake) 2.11.1 passes the check
    // and becomes .libtorch.
    let scratch = Scratch::scripts_only();
    let needed = torch_version();
    let patch = format!("{}.9", needed.rsplit_once('.').unwrap().0);
    let python = python_with_torch(&scratch, Some(&patch));
    let mut cmd = scratch.setup(&[]);
    no_installs(&scratch, &mut cmd);
    cmd.env("DDP_LAB_PYTHON", &python).env("DDP_LAB_GLOO_INCLUDE", gloo_headers(&scratch));
    let run = run(cmd, LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.shown());
    assert_eq!(link(&scratch, ".libtorch"), scratch.path("fake-site/torch").canonicalize().unwrap());
    assert!(!scratch.cache.join("venv").exists(), "{}", run.shown());
}
