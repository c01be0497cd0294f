//! scripts/gpu-bundle.sh and scripts/gpu-check.sh, end to end on CPU: a bundle of debug
//! builds, then every part of the GPU check with `--device cpu` (small sizes), so that
//! the script a GPU node runs in one call cannot rot on machines without a GPU.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{checker, repo};

/// The parts gpu-check.sh runs, in order (its summary has a row for each).
const PARTS: [&str; 13] = [
    "environment",
    "finished-lab",
    "verify",
    "step-12-checkpoint",
    "step-13-pipeline",
    "step-14-fsdp",
    "step-15-tp",
    "step-16-mesh",
    "demo",
    "demo-predict",
    "bench-b512-fp32",
    "bench-b512-bf16-cl",
    "bench-b32-fp32",
];

/// `bash scripts/NAME args…` from the repository, as a plain shell would run it: without
/// what cargo set for this test (a build the script starts is then the workspace's own).
fn script(name: &str, args: &[&str], limit: Duration) -> child_process::Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts").join(name)).args(args).current_dir(repo());
    for (var, _) in std::env::vars_os() {
        if child_process::set_by_cargo_for_its_program(&var.to_string_lossy()) {
            cmd.env_remove(var);
        }
    }
    child_process::output(cmd, Some(limit)).unwrap_or_else(|e| panic!("run {name}: {e}"))
}

/// The workspace's Python with torch (setup makes it), or None: then the test says
/// SKIPPED, unless DDP_LAB_REQUIRE_TORCH is set (scripts/test.sh sets it).
fn python() -> Option<PathBuf> {
    let python = repo().join(".venv/bin/python");
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
        "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
        python.display()
    );
    eprintln!("SKIPPED the GPU check on CPU: no {} (run scripts/setup.sh)", python.display());
    None
}

/// A summary row's cells: `| part | result | time | figures |`.
fn rows(summary: &str) -> Vec<Vec<String>> {
    summary
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| part ") && !l.starts_with("|---"))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect())
        .collect()
}

#[test]
fn the_gpu_check_runs_every_part_on_cpu_from_a_bundle() {
    let Some(python) = python() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let bundle = scratch.path().join("bundle");
    let report = scratch.path().join("report");
    let (bundle_s, report_s) = (bundle.to_str().unwrap(), report.to_str().unwrap());

    let made =
        script("gpu-bundle.sh", &["--debug", "--solutions", "2,11,15", bundle_s], Duration::from_secs(900));
    assert!(made.success(), "gpu-bundle.sh failed:\n{}\n{}", made.stdout, made.stderr);
    let manifest = std::fs::read_to_string(bundle.join("manifest.txt")).unwrap();
    let version = checker(&["--version"]).stdout;
    let revision = manifest.lines().find_map(|l| l.strip_prefix("course_revision: ")).unwrap_or_default();
    assert!(revision.len() == 16 && version.contains(revision), "manifest {revision:?}, checker {version}");
    for file in [
        "bin/checker",
        "bin/solution_02",
        "bin/solution_11",
        "bin/solution_15",
        "bin/solution_16",
        "bin/demo",
        "bin/lab",
    ] {
        assert!(bundle.join(file).is_file(), "no {file} in the bundle");
        assert!(manifest.contains(&format!(" {file}\n")), "the manifest does not list {file}:\n{manifest}");
    }
    for file in ["bench/python/lab_reference.py", "course/lab/main.rs", "gpu-check.sh"] {
        assert!(bundle.join(file).is_file(), "no {file} in the bundle");
    }
    assert!(manifest.contains("libtorch: 2.11.0"), "{manifest}");

    // Bad input: exit 2, and nothing run.
    let not_a_bundle =
        script("gpu-check.sh", &["--device", "cpu", report_s, report_s], Duration::from_secs(60));
    assert_eq!(not_a_bundle.status.code(), Some(2), "{}", not_a_bundle.stderr);
    assert!(not_a_bundle.stderr.contains("is not a bundle"), "{}", not_a_bundle.stderr);
    let bad_device =
        script("gpu-check.sh", &["--device", "tpu", bundle_s, report_s], Duration::from_secs(60));
    assert_eq!(bad_device.status.code(), Some(2), "{}", bad_device.stderr);
    let other = scratch.path().join("other");
    let bad_step =
        script("gpu-bundle.sh", &["--solutions", "16", other.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(bad_step.status.code(), Some(2), "{}", bad_step.stderr);
    assert!(
        bad_step.stderr.contains("'16' is not a step from 0 to 15") && !other.exists(),
        "{}",
        bad_step.stderr
    );

    let python = python.to_str().unwrap();
    let args = ["--device", "cpu", "--verify-step", "2", "--python", python, bundle_s, report_s];
    let checked = script("gpu-check.sh", &args, Duration::from_secs(900));
    let summary = std::fs::read_to_string(report.join("summary.md"))
        .unwrap_or_else(|e| panic!("no summary.md ({e}):\n{}", checked.stderr));
    assert!(checked.success(), "gpu-check.sh --device cpu failed:\n{summary}\n{}", checked.stderr);
    let rows = rows(&summary);
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, PARTS, "{summary}");
    for row in &rows {
        assert_eq!(row[1], "pass", "{}: {}\n{summary}", row[0], row[3]);
        assert!(row[2].ends_with(" s"), "{row:?}");
        assert!(!row[3].is_empty(), "{}: no key figures\n{summary}", row[0]);
        let log = report.join(format!("{}.log", row[0]));
        assert!(log.is_file(), "no {}", log.display());
    }
    let figures = |part: &str| rows.iter().find(|r| r[0] == part).map(|r| r[3].clone()).unwrap();
    // What each part saw, not only its exit status.
    assert!(figures("verify").contains("6/6 checks passed"), "{summary}");
    let verify_log = std::fs::read_to_string(report.join("verify.log")).unwrap();
    assert!(
        verify_log.contains(&format!("judging {bundle_s}/bin/solution_02, built elsewhere")),
        "verify did not judge the bundle's binary:\n{verify_log}"
    );
    assert!(figures("step-12-checkpoint").contains("resumed at epoch 1"), "{summary}");
    assert!(figures("step-13-pipeline").contains("4 micro-batches"), "{summary}");
    assert!(figures("step-14-fsdp").contains("(50.0%)"), "{summary}");
    assert!(figures("step-15-tp").contains("rank 0 holds"), "{summary}");
    assert!(figures("step-16-mesh").contains("2 DP replicas x 2 TP ranks"), "{summary}");
    assert!(figures("demo-predict").contains("DDP efficiency"), "{summary}");
    for file in ["scaling.json", "scaling.svg", "scaling.png"] {
        assert!(report.join("demo").join(file).is_file(), "no demo/{file}");
    }
    for bench in ["bench-b512-fp32", "bench-b512-bf16-cl", "bench-b32-fp32"] {
        assert!(figures(bench).contains("Rust/PyTorch"), "{summary}");
        assert!(Path::new(&report.join(format!("{bench}.json"))).is_file(), "no {bench}.json");
    }
}
