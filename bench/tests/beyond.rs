//! The `beyond` benchmark in a tiny configuration: both sides run all three modes on 2
//! CPU ranks, and what each rank holds is what the mode promises, on both sides alike
//! (FSDP: half the parameters; the pipeline: its stage's, the two stages together the
//! whole model). Bad options exit 2 before any rank starts. Nothing here looks at
//! timings.
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
    let run = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mode"] == mode && r["side"] == side)
        .unwrap_or_else(|| panic!("no {mode} run of {side}: {json}"));
    run["ranks"].as_array().unwrap().iter().map(|r| r["param_bytes"].as_i64().unwrap()).collect()
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
    for row in ["| DDP |", "| FSDP (per block) |", "| pipeline (2 stages, 4 micro-batches) |"] {
        assert!(stdout.contains(row), "{row} missing: {stdout}");
    }
    assert!(stdout.contains("the generated stand-in"), "the table says which data: {stdout}");

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 6, "3 modes x 2 sides: {json}");
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
fn micro_batches_that_do_not_divide_the_batch_exit_2_before_any_rank_starts() {
    let out = beyond(&["--batch-size", "5", "--micro-batches", "4"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("--micro-batches 4 does not divide the pipeline's batch of 10"), "{stderr}");
    assert!(stdout.is_empty() && !stderr.contains("repeat 1"), "nothing ran: {stdout}{stderr}");
}
