//! Deliberately broken programs fail the check that names their mistake, end to end:
//! each variant (common/variants.rs) is a reference solution with one edit a student
//! could make, built and checked with `checker verify step N --crate DIR`.
//!
//! Every variant's recorded observation is also a fixture the judges are unit-tested
//! on (checker/fixtures/observations, judged in checks::fixtures in well under a
//! second). The few kept here, one per way the checker observes (the ranks' traced
//! collectives and the report built on them, where they part ways, a rank that stops
//! alone, the N-rank against 1-rank comparison,
//! the local mirror's download counts, the times in the trace, step 14's runs with
//! `--fsdp` and with DDP, which come after step 13's pipeline runs), are the proof that
//! live runs still show what the fixtures recorded. (Step 13's `whole-model-beside-stage`
//! is judged from its fixture only: its runs are the pipeline's, which the live step-14
//! variant here and honesty.rs's last solution both make; step 16's mesh mistakes are
//! judged from their fixtures too: honesty.rs's last solution makes the mesh's runs live,
//! with the group of every collective.)
mod common;

use common::checker_with;
use common::variants::{named, Variant};

/// Checks `variant` as handed in (sandboxed where a sandbox can be made).
fn verify(variant: &Variant) -> common::Verdict {
    let sandbox: &[&str] = if common::sandbox_works() { &[] } else { &["--unsandboxed"] };
    let step = variant.step.to_string();
    let mut args = vec!["verify", "step", step.as_str(), "--seed", "4242"];
    args.extend(sandbox);
    args.push("--crate");
    checker_with(&args, &[&variant.crate_dir()])
}

/// The variant fails with exit 1, on `check` among others only from `allowed`; its verdict.
fn fails_on(name: &str, check: &str, allowed: &[&str]) -> common::Verdict {
    let variant = named(name);
    let v = verify(variant);
    assert_eq!(v.code, Some(1), "{name} must fail step {}:\n{}", variant.step, v.output());
    let failed = v.failed();
    assert!(
        failed.iter().any(|f| f == check),
        "{name} must fail `{check}`; failed {failed:?}:\n{}",
        v.output()
    );
    for f in &failed {
        assert!(
            f == check || allowed.contains(&f.as_str()),
            "{name} failed `{f}`, which its mistake does not explain:\n{}",
            v.output()
        );
    }
    v
}

/// Its ranks never average a gradient: the exact-comparison model's runs (`--model mlp`)
/// show it live at the first step, as the recorded fixtures do.
#[test]
fn an_unwrapped_model_fails_weights_synchronized() {
    let v = fails_on("model-not-wrapped", "weights-synchronized", &["matches-single-rank"]);
    let step7 = v.stdout.lines().find(|l| l.starts_with("error[matches-single-rank]")).unwrap_or_default();
    assert!(
        step7.contains("exact-comparison model (--model mlp)")
            && step7.contains("part after step 1 of 6 (epoch 0)"),
        "{}",
        v.output()
    );
}

#[test]
fn every_rank_downloading_fails_prepare_once_per_node() {
    fails_on("every-rank-downloads", "prepare-once-per-node", &["downloads-per-node", "trains"]);
}

/// Without the barrier after local rank 0 prepares the data, the other ranks begin
/// reading before it is ready (the checker makes preparing a second late) and die of
/// the missing files. The report blames step 5's barrier, not step 0's `trains`.
#[test]
fn no_barrier_after_preparing_fails_data_barrier_and_blames_step_5() {
    let v = verify(named("no-barrier-after-prepare"));
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["data-barrier"], "{}", v.output());
    assert!(v.stdout.contains("before its preparation finished"), "the report says when:\n{}", v.output());
    // `trains` could not be judged for it: named in the one line of such checks, the
    // diagnosis not repeated.
    assert!(stopped_line(&v).contains("trains"), "{}", v.output());
    let diagnosed = v.stdout.lines().filter(|l| l.contains("before its preparation finished")).count();
    assert_eq!(diagnosed, 1, "the diagnosis once:\n{}", v.output());
    assert!(v.stdout.contains("1 of step 5's own failed (data-barrier)"), "{}", v.output());
}

/// Gloo's reduce happens to leave the sum on every rank, so the printed figure is right
/// here; on NCCL rank 0 would print its own figure. The checker judges the call.
/// Rank 1 does not exist in the 1-rank comparison run, which therefore fails: that is
/// "could not judge" for step 7, not a failure of step 7.
#[test]
fn reducing_to_rank_1_fails_throughput_reduced_and_blames_step_8() {
    let v = verify(named("reduce-to-rank-1"));
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["throughput-reduced"], "{}", v.output());
    assert!(v.stdout.contains("reduce(op=SUM, root=1)"), "the report names the call:\n{}", v.output());
    let step7 =
        v.stdout.lines().find(|l| l.contains(" matches-single-rank: ")).unwrap_or_default().to_string();
    assert!(step7.starts_with("???? step  7 matches-single-rank: could not judge: "), "{}", v.output());
    assert!(v.stdout.contains("1 of step 8's own failed (throughput-reduced)"), "{}", v.output());
}

/// A reduce that rank 0 alone reaches: the ranks' collectives part ways at once (the
/// library's check across ranks), and the report blames step 8, naming what each rank
/// did and the line, with step 0's `trains` pointing there.
#[test]
fn a_reduce_on_rank_0_alone_fails_throughput_reduced_and_names_each_ranks_call() {
    let v = verify(named("reduce-on-rank-0-only"));
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["throughput-reduced"], "{}", v.output());
    assert!(
        v.stdout.contains("in epoch 0 rank 0 called reduce (1 value) at src/main.rs:"),
        "the report names the call and its line:\n{}",
        v.output()
    );
    assert!(stopped_line(&v).contains("trains"), "{}", v.output());
    assert_eq!(v.stdout.matches("a collective only rank 0 reaches").count(), 1, "{}", v.output());
    assert!(v.stdout.contains("1 of step 8's own failed (throughput-reduced)"), "{}", v.output());
}

/// Rank 0 deciding alone to stop: in the main run, asked to stop after its last epoch,
/// rank 0 leaves the loop and the other ranks begin one more epoch without it.
#[test]
fn a_rank_that_stops_alone_fails_ranks_stop_together() {
    let v = verify(named("rank-0-stops-alone"));
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["ranks-stop-together"], "{}", v.output());
    assert!(
        v.stdout.contains("rank 0 left the training loop after epoch 1"),
        "the report says where each rank left:\n{}",
        v.output()
    );
    assert!(v.stdout.contains("1 of step 11's own failed (ranks-stop-together)"), "{}", v.output());
}

/// FSDP whose reduce-scatter is not divided by the world size: each step is N times
/// DDP's. The checker's runs with `--fsdp` and with DDP, on the same data and seeds,
/// tell them apart by the weights; what each rank holds and the collectives are right.
#[test]
fn gradients_not_averaged_fail_equals_ddp() {
    fails_on("gradients-not-averaged", "equals-ddp", &[]);
}

/// The one line naming the checks that could not be judged because the run stopped at
/// the mistake the report shows first.
fn stopped_line(v: &common::Verdict) -> String {
    let line =
        v.stdout.lines().find(|l| l.contains("could not be judged: the run stopped at the mistake above"));
    line.unwrap_or_default().to_string()
}
