//! Every example of this crate, run as a user runs it: its own binary, which starts its
//! own CPU ranks, with small sizes. Each must succeed and print what it promises; the
//! numbers it prints are checked here too, not only by the example itself.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Once, OnceLock};
use std::time::Duration;

/// Kills an example that hangs (a rank waiting forever), so the test fails instead.
const LIMIT: Duration = Duration::from_secs(300);

/// The example's binary, built (once per test process) as `cargo build --examples`
/// builds it: `cargo test --test examples` alone does not build examples.
fn example(name: &str) -> PathBuf {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let mut build = child_process::cargo();
        build.args(["build", "-q", "-p", "tch-distributed", "--examples"]);
        assert!(child_process::status(build).expect("cargo runs").success(), "the examples do not build");
    });
    // This test is target/<profile>/deps/examples-<hash>; examples sit in ../examples.
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(name)
}

/// Runs an example to its end and returns its output (the ranks' lines included).
fn run(name: &str, args: &[&str]) -> child_process::Output {
    let mut cmd = Command::new(example(name));
    cmd.args(args);
    child_process::output(cmd, Some(LIMIT)).expect("the example starts")
}

fn run_ok(name: &str, args: &[&str]) -> String {
    let out = run(name, args);
    assert!(
        out.success(),
        "{name} {args:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.describe(),
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// The number after `key` on the first line that starts with `prefix`.
fn number_after(output: &str, prefix: &str, key: &str) -> f64 {
    let line = output
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{output}"));
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("no {key:?} in {line:?}")) + key.len()..];
    let number: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    number.parse().unwrap_or_else(|_| panic!("no number after {key:?} in {line:?}"))
}

#[test]
fn ddp_train_lowers_the_loss_and_keeps_the_replicas_identical() {
    let out = ddp_train_spawned();
    let first = number_after(out, "epoch 0:", "mean loss");
    let second = number_after(out, "epoch 1:", "mean loss");
    assert!(second < first, "the loss rose from {first} to {second}:\n{out}");
    assert!(out.contains("2 replicas identical after 2 epochs"), "{out}");
}

/// The same small training run as [`ddp_train_lowers_the_loss_and_keeps_the_replicas_identical`].
const DDP_SMALL: [&str; 6] = ["--epochs", "2", "--samples", "512", "--batch-size", "32"];

/// The output of one small `ddp_train` run on 2 spawned ranks, shared by the tests that
/// read it. With OMP_NUM_THREADS=1, as torchrun sets it for its ranks: libtorch then
/// sums in the same order under both launchers and prints the same digits.
fn ddp_train_spawned() -> &'static str {
    static OUTPUT: OnceLock<String> = OnceLock::new();
    OUTPUT.get_or_init(|| {
        let mut cmd = Command::new(example("ddp_train"));
        cmd.args(["--world-size", "2"]).args(DDP_SMALL).env("OMP_NUM_THREADS", "1");
        let out = child_process::output(cmd, Some(LIMIT)).expect("the example starts");
        assert!(
            out.success(),
            "ddp_train: {}\nstdout:\n{}\nstderr:\n{}",
            out.describe(),
            out.stdout,
            out.stderr
        );
        out.stdout
    })
}

/// The ranks started by torchrun (as the README shows) train exactly as the ranks the
/// example spawns itself: same seeds, same shards, so the same losses to the digit.
#[test]
fn ddp_train_under_torchrun_trains_as_under_spawn() {
    let torchrun = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/torchrun");
    if !torchrun.exists() {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
            "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
            torchrun.display()
        );
        eprintln!("skipped: {} is missing (scripts/setup.sh installs it)", torchrun.display());
        return;
    }
    let port = child_process::free_port().unwrap().to_string();
    let mut cmd = Command::new(&torchrun);
    cmd.args(["--no-python", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", &port]);
    cmd.arg(example("ddp_train")).args(DDP_SMALL).env("OMP_NUM_THREADS", "1");
    let out = child_process::output(cmd, Some(LIMIT)).expect("torchrun starts");
    assert!(out.success(), "torchrun: {}\nstdout:\n{}\nstderr:\n{}", out.describe(), out.stdout, out.stderr);
    let spawned = ddp_train_spawned();
    let losses = |out: &str| -> Vec<String> {
        out.lines().filter(|l| l.starts_with("epoch ")).map(str::to_string).collect()
    };
    assert_eq!(losses(&out.stdout).len(), 2, "{}", out.stdout);
    assert_eq!(losses(&out.stdout), losses(spawned), "torchrun:\n{}\nspawn:\n{spawned}", out.stdout);
    assert!(out.stdout.contains("2 replicas identical after 2 epochs"), "{}", out.stdout);
    assert!(
        !out.stdout.contains("starting 2 ranks"),
        "under torchrun the example starts no ranks itself:\n{}",
        out.stdout
    );
}

#[test]
fn fsdp_train_shards_the_model_and_gathers_it_whole() {
    let out = run_ok("fsdp_train", &["--world-size", "2", "--steps", "8", "--batch-size", "32"]);
    for rank in 0..2 {
        let held = number_after(&out, &format!("rank {rank}: holds"), "holds");
        let model = number_after(&out, &format!("rank {rank}: holds"), "the model's");
        // Half each, and no less: padding may add a few rows.
        assert!(held < model && 2.0 * held >= model, "rank {rank} holds {held} of {model}:\n{out}");
    }
    let model = number_after(&out, "rank 0: holds", "the model's");
    assert_eq!(number_after(&out, "rank 0: gathered the full model", "tensors,"), model, "{out}");
}

#[test]
fn pipeline_train_lowers_the_loss_on_the_last_stage() {
    let out = run_ok(
        "pipeline_train",
        &["--stages", "2", "--micro-batches", "4", "--steps", "12", "--batch-size", "32"],
    );
    let early = number_after(&out, "2 stages trained", "loss");
    let late = number_after(&out, "2 stages trained", "early,");
    assert!(late < early, "{out}");
    // Only the last stage knows the loss.
    assert!(out.lines().filter(|l| l.starts_with("step ")).count() >= 2, "{out}");
}

#[test]
fn collective_tour_gets_every_result_on_three_ranks() {
    let out = run_ok("collective_tour", &["--world-size", "3"]);
    for rank in 0..3 {
        assert!(
            out.contains(&format!("rank {rank}: all_reduce(sum of [rank+1, 10*rank]) = [6, 30]")),
            "{out}"
        );
        assert!(out.contains(&format!("rank {rank}: all_gather(10*rank) = [0, 10, 20]")), "{out}");
    }
    assert!(out.contains("rank 2: reduce_scatter_tensor(sum of [0..n]) = [6]"), "{out}");
    assert!(out.contains("rank 0: not in new_group([1, 2])"), "{out}");
    assert!(out.contains("rank 1: all_reduce(sum of rank) in new_group([1, 2]) = [3]"), "{out}");
    assert!(out.contains("all 3 ranks got what every collective promises"), "{out}");
}

#[test]
fn collective_tour_refuses_a_single_rank() {
    let out = run("collective_tour", &["--world-size", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("--world-size must be at least 2"), "{}", out.stderr);
}

#[test]
fn hello_ranks_agree_on_every_collective() {
    let out = run_ok("hello_ranks", &["--world-size", "2"]);
    for rank in 0..2 {
        let line = format!("rank {rank}/2: all_reduce(sum of rank+1) = 3 (expect 3), max rank = 1, broadcast from 0 = 42, all_gather(rank*10) = [0, 10]");
        assert!(out.contains(&line), "{out}");
    }
    assert!(out.contains("all 2 ranks agree"), "{out}");
}

#[test]
fn spawn_ranks_all_reduce_and_a_failing_rank_fails_the_run() {
    let out = run_ok("spawn_ranks", &["--nprocs", "2"]);
    for rank in 0..2 {
        assert!(out.contains(&format!("rank {rank}/2 (local rank {rank}, pid ")), "{out}");
    }
    assert_eq!(out.matches("sum of rank+1 = 3 (expect 3)").count(), 2, "{out}");
    let failed = run("spawn_ranks", &["--nprocs", "2", "--fail-rank", "1"]);
    assert!(!failed.status.success(), "{}\n{}", failed.stdout, failed.stderr);
    assert!(failed.stderr.contains("rank 1: failing on purpose"), "{}", failed.stderr);
}

#[test]
fn tp_train_splits_the_model_and_its_slices_equal_the_whole_one() {
    let out = run_ok("tp_train", &["--world-size", "2", "--steps", "12", "--batch-size", "16"]);
    assert!(out.contains("2 ranks' slices equal the whole model after 12 steps"), "{out}");
    let bad = run("tp_train", &["--world-size", "5"]);
    assert_eq!(bad.status.code(), Some(2), "a TP size that does not divide the hidden width: {}", bad.stderr);
    assert!(bad.stderr.contains("--world-size must divide the hidden width 64"), "{}", bad.stderr);
}

#[test]
fn bucketed_ddp_overlaps_backward_and_equals_one_process() {
    let out = run_ok("bucketed_ddp", &["--world-size", "2", "--steps", "3", "--bucket-cap-kb", "8"]);
    assert!(out.contains("6 parameters in 4 buckets of at most 8 KiB"), "{out}");
    let ready = number_after(&out, "6 parameters", "started with");
    assert!(ready < 6.0, "bucket 0 waited for every gradient:\n{out}");
    assert!(
        out.contains("overlap: the first all-reduce was in flight while backward went on in 3 of 3 steps"),
        "{out}"
    );
    // Printed as 1.2e-7: number_after reads plain decimals only.
    let line = out.lines().find(|l| l.starts_with("2 ranks equal one process")).expect(&out);
    let diff: f64 =
        line.split("max |diff| ").nth(1).and_then(|r| r.split(' ').next()).expect(line).parse().expect(line);
    assert!(diff <= 1e-5, "{out}");
    let bad = run("bucketed_ddp", &["--bucket-cap-kb", "0"]);
    assert_eq!(bad.status.code(), Some(2), "a bucket of 0 KiB: {}", bad.stderr);
    assert!(bad.stderr.contains("--bucket-cap-kb must be at least 1"), "{}", bad.stderr);
}

/// The README's list of examples names every file of `examples/` (and nothing else), and
/// no example picks its rendezvous port by hand: each starts its ranks as the README's
/// first program does, with `SpawnOptions::standalone`.
#[test]
fn the_readme_lists_every_example_and_each_starts_its_ranks_alike() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    let listed: std::collections::BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("cargo run -p tch-distributed --example "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_string())
        .collect();
    let mut files = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(crate_dir.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            !source.contains("TcpListener::bind"),
            "{name} picks a port by hand instead of `standalone()`"
        );
        if source.contains("SpawnOptions") {
            assert!(source.contains(".standalone()"), "{name} spawns ranks without `standalone()`");
        }
        files.insert(name);
    }
    assert_eq!(listed, files, "the README's `cargo run -p tch-distributed --example` lines and examples/");
}
