//! `--device cuda` with fewer GPUs than a node's ranks is bad input, refused before any
//! rank starts: exit 2 and one line naming the GPUs found and what to do. (On a machine
//! without a GPU every count is too many; the wording for 1 GPU and 2 ranks is
//! checked in labkit's unit tests.)
use std::path::{Path, PathBuf};
use std::process::Command;

use child_process::Output;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn built(package: &str) -> PathBuf {
    // As a plain `cargo build` runs: the build `cargo test` made is reused, not redone.
    let mut build = child_process::cargo();
    build.current_dir(root()).args(["build", "-q", "-p", package]);
    let status = child_process::status(build).unwrap();
    assert!(status.success(), "building {package} failed");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    target.join("debug").join(package)
}

/// More ranks than any machine here has GPUs.
const RANKS: &str = "64";

fn assert_refused(out: &Output, what: &str) {
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {stdout}{stderr}");
    assert!(!stdout.contains("Worker started"), "{what}: a rank started: {stdout}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{what}: one error line expected: {stderr}");
    assert!(errors[0].contains("--device"), "{what}: {stderr}");
    let names_gpus =
        errors[0].contains("no GPU") || regex::Regex::new(r"\d+ GPU").unwrap().is_match(errors[0]);
    assert!(names_gpus, "{what}: the line must name the GPUs found: {stderr}");
}

#[test]
fn too_few_gpus_is_refused_before_the_ranks_of_a_spawning_program_start() {
    let lab = built("solution_11");
    let ranks = RANKS;
    let mut cmd = Command::new(&lab);
    cmd.args(["--device", "cuda", "--num-gpus", ranks, "--width", "narrow", "--dataset", "generated"])
        .env_remove("LOCAL_RANK")
        .env_remove("LOCAL_WORLD_SIZE");
    let out = child_process::output(cmd, None).unwrap();
    assert_refused(&out, "solution_11 --device cuda");
}

#[test]
fn too_few_gpus_is_refused_in_a_launched_rank() {
    let step = built("solution_03");
    let ranks = RANKS;
    let mut cmd = Command::new(&step);
    cmd.args(["--device", "cuda", "--num-gpus", ranks, "--width", "narrow", "--dataset", "generated"])
        .env("LOCAL_RANK", "0")
        .env("LOCAL_WORLD_SIZE", ranks);
    let out = child_process::output(cmd, None).unwrap();
    assert_refused(&out, "solution_03 launched with --device cuda");
}

#[test]
fn sharing_needs_a_gpu_to_share() {
    let mut cmd = Command::new(built("solution_11"));
    cmd.args([
        "--device",
        "cuda",
        "--share-gpus",
        "--num-gpus",
        "2",
        "--width",
        "narrow",
        "--dataset",
        "generated",
    ])
    .args(["--epochs", "1", "--train-subset", "64", "--test-subset", "64"]);
    let out = child_process::output(cmd, None).unwrap();
    if out.status.success() {
        eprintln!("SKIPPED: this machine has a GPU, and two ranks shared it");
        return;
    }
    assert_refused(&out, "solution_11 --device cuda --share-gpus");
    assert!(out.stderr.contains("no GPU"));
}
