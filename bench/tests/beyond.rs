//! The `beyond` benchmark in a tiny configuration: both sides run all four modes on 2
//! CPU ranks, and what each rank holds is what the mode promises, on both sides alike
//! (FSDP: half the parameters; the pipeline: its stage's, the two stages together the
//! whole model; TP: half of each block's split convs and BatchNorm, the rest whole). The
//! bytes sent per step are the modes' own: DDP its gradients, FSDP its parameters
//! gathered twice and its gradients reduce-scattered, TP the blocks' activations (its
//! two all-reduces per block), the latter counted alike by both sides. Bad options exit
//! 2 before any rank starts. Nothing here looks at timings.
use std::process::{Command, Output};

use serde_json::Value;

fn beyond(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_beyond")).args(args).output().expect("run the beyond benchmark")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Bytes of parameters each rank of (mode, side) held, in rank order.
fn held(json: &Value, mode: &str, side: &str) -> Vec<i64> {
    field(json, mode, side, "param_bytes").iter().map(|v| v.as_i64().unwrap()).collect()
}

/// Bytes each rank of (mode, side) sent per step, in rank order.
fn sent(json: &Value, mode: &str, side: &str) -> Vec<f64> {
    field(json, mode, side, "sent_bytes_per_step").iter().map(|v| v.as_f64().unwrap()).collect()
}

/// `name` of each rank of (mode, side)'s run, in rank order.
fn field(json: &Value, mode: &str, side: &str, name: &str) -> Vec<Value> {
    let run = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mode"] == mode && r["side"] == side)
        .unwrap_or_else(|| panic!("no {mode} run of {side}: {json}"));
    run["ranks"].as_array().unwrap().iter().map(|r| r[name].clone()).collect()
}

/// What 2-way TP's all-reduces carry per step at widths 4,8,8,8 on the job's batch of
/// 16 (float32): per block, g's sum of the second conv's output forward and f's of the
/// block's input gradient backward; a ring all-reduce on 2 ranks sends the tensor once.
fn tp_bytes_per_step() -> f64 {
    let batch = 16 * 4;
    // (input channels, output channels, side) of block1 .. block6.
    let blocks = [(4, 8, 28), (8, 8, 28), (8, 8, 14), (8, 8, 14), (8, 8, 7), (8, 8, 7)];
    blocks.iter().map(|&(cin, cout, side)| (batch * (cin + cout) * side * side) as f64).sum()
}

#[test]
fn every_mode_runs_on_both_sides_and_each_rank_holds_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("beyond.json");
    let out = beyond(&[
        "--width",
        "4,8,8,8",
        "--batch-size",
        "8",
        "--warmup",
        "1",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--dataset",
        "generated",
        "--json",
        json_path.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in [
        "| DDP |",
        "| FSDP (per block) |",
        "| pipeline (2 stages, 4 micro-batches) |",
        "| TP (2-way, block convs' channels) |",
    ] {
        assert!(stdout.contains(row), "{row} missing: {stdout}");
    }
    assert!(stdout.contains("the generated stand-in"), "the table says which data: {stdout}");

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 8, "4 modes x 2 sides: {json}");
    // 7,134 float32 parameters at these widths; every dim 0 is even, so FSDP's shards
    // are exactly half, unpadded.
    let model = 7_134 * 4;
    for side in ["Rust", "PyTorch"] {
        assert_eq!(held(&json, "ddp", side), [model, model], "{side}: DDP holds a replica per rank");
        assert_eq!(held(&json, "fsdp", side), [model / 2, model / 2], "{side}: FSDP holds half per rank");
        let stages = held(&json, "pipeline", side);
        assert_eq!(stages.iter().sum::<i64>(), model, "{side}: the stages together are the model");
        assert!(stages.iter().all(|&b| b > 0 && b < model), "{side}: each stage a part: {stages:?}");
    }
    // The same cut on both sides.
    assert_eq!(held(&json, "pipeline", "Rust"), held(&json, "pipeline", "PyTorch"));
    // TP splits 6,720 of the parameters (the blocks' first convs and BatchNorms, second
    // convs), each rank holding half of them.
    let tp = (7_134 - 6_720 / 2) * 4;
    for side in ["Rust", "PyTorch"] {
        assert_eq!(held(&json, "tp", side), [tp, tp], "{side}: TP holds its slices and the rest whole");
        // Plain SGD: a gradient per parameter held, no optimizer state.
        let grads: Vec<i64> =
            field(&json, "tp", side, "grad_bytes").iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(grads, [tp, tp], "{side}: TP's gradients are its parameters' size");
        assert_eq!(sent(&json, "tp", side), [tp_bytes_per_step(); 2], "{side}: TP's activation traffic");
    }
    // Rust's timeline: DDP sends its gradients (and its BatchNorm buffers' broadcast).
    let ddp = sent(&json, "ddp", "Rust");
    assert!(
        ddp.iter().all(|&b| b >= model as f64 && b < 1.1 * model as f64),
        "DDP sends its gradients: {ddp:?}"
    );
    // FSDP gathers each block's parameters twice (forward, backward: half the model
    // each time on 2 ranks) and reduce-scatters the gradients (half again): 1.5 x the
    // model; the root's 134 parameters (stem, head) stay gathered after the forward
    // (FSDP2's root does not reshard), so they are gathered once.
    let root = 134 * 4;
    assert_eq!(sent(&json, "fsdp", "Rust"), [1.5 * model as f64 - root as f64 / 2.0; 2], "FSDP's traffic");
    for run in json["runs"].as_array().unwrap() {
        for rank in run["ranks"].as_array().unwrap() {
            assert!(rank["step_seconds"].as_f64().unwrap() > 0.0, "{run}");
            assert!(
                rank["training_peak_rss"].as_f64().unwrap() >= rank["rss_start"].as_f64().unwrap(),
                "{run}"
            );
            assert_eq!(rank["threads"], 1, "one thread per rank on both sides: {run}");
        }
    }
}

#[test]
fn widths_tensor_parallelism_cannot_split_exit_2_before_any_rank_starts() {
    let out = beyond(&["--width", "4,8,9,8", "--modes", "ddp,tp"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("--width 4,8,9,8: tensor parallelism splits each block's channels over 2 ranks, and [9] do not split evenly"), "{stderr}");
    assert!(stdout.is_empty() && !stderr.contains("repeat 1"), "nothing ran: {stdout}{stderr}");
    // Without tp the same widths pass the check (and stop at the next: no Python here).
    let out = beyond(&["--width", "4,8,9,8", "--modes", "ddp", "--python", "/nonexistent/python"]);
    let stderr = text(&out).1;
    assert!(stderr.contains("cannot run the Python interpreter /nonexistent/python"), "{stderr}");
}

#[test]
fn micro_batches_that_do_not_divide_the_batch_exit_2_before_any_rank_starts() {
    let out = beyond(&["--batch-size", "5", "--micro-batches", "4"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("--micro-batches 4 does not divide the pipeline's batch of 10"), "{stderr}");
    assert!(stdout.is_empty() && !stderr.contains("repeat 1"), "nothing ran: {stdout}{stderr}");
}
