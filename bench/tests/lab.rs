//! The `lab` benchmark's command line, and its PyTorch reference's, on a machine
//! without a GPU: bad combinations exit 2 with one line saying what to do;
//! `--world-size 1` runs one configuration end to end and reports efficiency as n/a;
//! the reference parses `--compile` and `--share-gpus` and applies labkit's GPU rules.
//! (A CPU run of the compiled reference takes minutes, so only its options are tested.)
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab")).args(args).output().expect("run the lab benchmark")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn python() -> PathBuf {
    workspace().join(".venv/bin/python")
}

fn no_gpu() -> bool {
    let none = tch::Cuda::device_count() == 0;
    if !none {
        eprintln!("skipped: this machine has a GPU");
    }
    none
}

#[test]
fn cuda_without_a_gpu_exits_2_with_one_line_saying_what_to_do() {
    if !no_gpu() {
        return;
    }
    for ws in ["1", "2"] {
        let out = lab(&["--device", "cuda", "--world-size", ws]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("error: --device cuda, but libtorch sees no GPU"), "{stderr}");
        assert!(stderr.contains("--device cpu"), "{stderr}");
        assert!(stdout.is_empty(), "nothing ran: {stdout}");
    }
}

#[test]
fn bad_world_sizes_and_compile_modes_exit_2() {
    for ws in ["0", "65"] {
        let out = lab(&["--world-size", ws]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--world-size must be between 1 and 64"), "{stderr}");
    }
    let out = lab(&["--compile", "fast"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("reduce-overhead"), "names the modes: {stderr}");
}

#[test]
fn world_size_one_runs_one_configuration_and_reports_no_efficiency() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("lab.json");
    let out = lab(&[
        "--world-size",
        "1",
        "--device",
        "cpu",
        "--width",
        "4,8,8,8",
        "--train-subset",
        "256",
        "--test-subset",
        "64",
        "--epochs",
        "2",
        "--repeats",
        "1",
        "--allreduce-mb",
        "0",
        "--json",
        json_path.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // One run per side: Rust and PyTorch at 1 rank, nothing at 2.
    assert!(stderr.contains("[2/2]") && !stderr.contains("[3/"), "{stderr}");
    assert!(stdout.contains("| images/sec, 1 rank |"), "{stdout}");
    assert!(!stdout.contains("ranks (job)"), "{stdout}");
    assert!(stdout.contains("| DDP efficiency | n/a | n/a | n/a |"), "{stdout}");
    assert!(stdout.contains("not applicable at --world-size 1"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["world_size"], 1);
    for side in ["rust", "pytorch"] {
        let ips = json[side]["images_per_sec_1"].as_f64().unwrap();
        assert!(ips.is_finite() && ips > 0.0, "{json}");
        assert!(json[side]["efficiency"].is_null() && json[side]["images_per_sec_n"].is_null(), "{json}");
        assert_eq!(json[side]["runs_1"].as_array().unwrap().len(), 1);
        assert!(json[side]["runs_n"].as_array().unwrap().is_empty());
    }
    assert!(json["ratio_n"].is_null() && json["ratio_1"].as_f64().unwrap() > 0.0, "{json}");
    assert!(json["pytorch_compiled"].is_null() && json["compile"].is_null(), "{json}");
    assert!(json["machine"].as_str().unwrap().starts_with("Machine: "), "{json}");
    assert_eq!(json["placement"], "Gloo on CPU");
    if tch::Cuda::device_count() == 0 {
        assert!(json["machine"].as_str().unwrap().contains("no GPU"), "{json}");
        assert!(json["gpu_name"].is_null() && json["gpus"] == 0, "{json}");
    }
}

/// Runs `code` in the workspace's Python with bench/python importable.
fn reference_python(code: &str) -> Output {
    let prelude = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport torch\nimport lab_reference as r\n",
        workspace().join("bench/python").display().to_string()
    );
    Command::new(python())
        .args(["-c", &format!("{prelude}{code}")])
        .output()
        .expect("run the venv's python (scripts/setup.sh makes it)")
}

#[test]
fn the_reference_parses_compile_and_applies_the_shared_gpu_rules() {
    let out = reference_python(
        r#"
assert r.parse_args([]).compile is None
assert r.parse_args(["--compile"]).compile == "default"
a = r.parse_args(["--compile", "--epochs", "1"])
assert (a.compile, a.epochs) == ("default", 1), a
assert r.parse_args(["--compile", "reduce-overhead"]).compile == "reduce-overhead"
assert r.parse_args(["--compile=max-autotune"]).compile == "max-autotune"

cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
two = r.parse_args(["--device", "cuda", "--num-gpus", "2"])
try:
    r.check_gpus(two, 1)
    raise SystemExit("2 ranks on 1 GPU without --share-gpus was not refused")
except r.BadInput as e:
    assert "--share-gpus" in str(e) and "--num-gpus 1" in str(e), e
try:
    r.check_gpus(r.parse_args(["--device", "cuda", "--share-gpus"]), 0)
    raise SystemExit("no GPU was not refused")
except r.BadInput as e:
    assert "no GPU" in str(e) and "--device cpu" in str(e), e
r.check_gpus(two, 2)
assert r.backend(two, cuda, 2) == "nccl"
assert r.rank_device(two, 1, 2) == torch.device("cuda", 1)

shared = r.parse_args(["--device", "cuda", "--num-gpus", "2", "--share-gpus"])
r.check_gpus(shared, 1)
assert [r.rank_device(shared, k, 1) for k in (0, 1)] == [cuda, cuda]
assert r.backend(shared, cuda, 1) == "gloo"
# One rank with --share-gpus keeps its GPU to itself, over NCCL, as the Rust lab.
assert r.backend(r.parse_args(["--device", "cuda", "--share-gpus"]), cuda, 1) == "nccl"
assert r.backend(r.parse_args(["--device", "cpu"]), cpu, 0) == "gloo"
print("ok")
"#,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.trim() == "ok", "{stdout}\n{stderr}");
}

#[test]
fn the_reference_refuses_a_bad_compile_mode_and_cuda_without_a_gpu() {
    let script = workspace().join("bench/python/lab_reference.py");
    let out = Command::new(python()).arg(&script).args(["--compile", "fast"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid choice: 'fast'"), "{stderr}");
    if !no_gpu() {
        return;
    }
    let out = Command::new(python())
        .arg(&script)
        .args(["--device", "cuda", "--num-gpus", "2", "--share-gpus"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("torch sees no GPU") && stderr.contains("--device cpu"), "{stderr}");
}
