//! Deliberately broken programs fail the check that names their mistake. Each variant
//! is a reference solution with one edit a student could make, checked with
//! `checker verify step N --crate DIR`.
mod common;

use common::{checker_with, variant};

/// The variant fails with exit 1, on `check` among others only from `allowed`.
fn fails_on(step: u8, name: &str, from: &str, to: &str, check: &str, allowed: &[&str]) {
    let dir = variant(step, name, from, to);
    let v = checker_with(&["verify", "step", &step.to_string(), "--seed", "4242", "--crate"], &[&dir]);
    assert_eq!(v.code, Some(1), "{name} must fail step {step}:\n{}", v.output());
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
}

#[test]
fn no_set_epoch_fails_sampler_set_epoch() {
    fails_on(
        6,
        "no-set-epoch",
        "train_loader.sampler.set_epoch(epoch as u64);",
        "",
        "sampler-set-epoch",
        &["sampler-shares"],
    );
}

#[test]
fn an_unwrapped_model_fails_weights_synchronized() {
    fails_on(
        7,
        "model-not-wrapped",
        "let model = dist::DistributedDataParallel::new(model, &vs, dist::DdpOptions::default())?;",
        "",
        "weights-synchronized",
        &["matches-single-rank"],
    );
}

#[test]
fn rank_as_local_rank_fails_global_rank() {
    fails_on(
        4,
        "rank-is-local-rank",
        "let global_rank = args.node_id * args.num_gpus + local_rank;",
        "let global_rank = local_rank;",
        "global-rank",
        &["trains", "rank0-prints", "worker-per-rank", "world-size", "rendezvous"],
    );
}

#[test]
fn reducing_with_max_fails_throughput_reduced() {
    fails_on(
        8,
        "reduce-max",
        "dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;",
        "dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Max)?;",
        "throughput-reduced",
        &[],
    );
}

#[test]
fn no_barrier_fails_epoch_barrier() {
    fails_on(
        8,
        "no-epoch-barrier",
        "        // The epoch ends when the slowest rank is done.\n        dist::barrier()?;\n",
        "",
        "epoch-barrier",
        &[],
    );
}

#[test]
fn summed_metrics_fail_metrics_averaged() {
    fails_on(
        9,
        "metrics-summed",
        "let metrics = metrics / args.world_size as f64;",
        "let metrics = metrics * 1.0;",
        "metrics-averaged",
        &[],
    );
}

#[test]
fn every_rank_downloading_fails_prepare_once_per_node() {
    fails_on(
        5,
        "every-rank-downloads",
        "if local_rank == 0 {\n        labkit::prepare_dataset(&data)?;",
        "if local_rank < usize::MAX {\n        labkit::prepare_dataset(&data)?;",
        "prepare-once-per-node",
        &["downloads-per-node", "trains"],
    );
}

#[test]
fn no_spawn_fails_self_spawn() {
    fails_on(
        10,
        "no-spawn",
        "let result = dist::spawn(args.num_gpus, |local_rank| worker(local_rank, args));",
        "let result = worker(0, args);",
        "self-spawn",
        // One rank alone never forms the job: every check of what the ranks did fails
        // too (after the rendezvous timeout); the checks of the program text, options
        // and world do not.
        &[
            "trains",
            "worker-per-rank",
            "rank0-prints",
            "prepare-once-per-node",
            "downloads-per-node",
            "sampler-shares",
            "sampler-set-epoch",
            "weights-synchronized",
            "matches-single-rank",
            "throughput-reduced",
            "epoch-barrier",
            "metrics-averaged",
            "failing-rank-ends-run",
        ],
    );
}

/// Gloo's reduce happens to leave the sum on every rank, so the printed figure is right
/// here; on NCCL rank 0 would print its own figure. The checker judges the call.
/// Rank 1 does not exist in the 1-rank comparison run, which therefore fails: that is
/// "could not judge" for step 7, not a failure of step 7.
#[test]
fn reducing_to_rank_1_fails_throughput_reduced_and_blames_step_8() {
    let dir = variant(
        8,
        "reduce-to-rank-1",
        "dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;",
        "dist::reduce(&mut images_per_sec_total, 1, dist::ReduceOp::Sum)?;",
    );
    let v = checker_with(&["verify", "step", "8", "--seed", "4242", "--crate"], &[&dir]);
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert_eq!(v.failed(), ["throughput-reduced"], "{}", v.output());
    assert!(v.stdout.contains("reduce(op=SUM, root=1)"), "the report names the call:\n{}", v.output());
    let step7 =
        v.stdout.lines().find(|l| l.contains(" matches-single-rank: ")).unwrap_or_default().to_string();
    assert!(step7.starts_with("???? step  7 matches-single-rank: could not judge: "), "{}", v.output());
    assert!(v.stdout.contains("1 of step 8's own failed (throughput-reduced)"), "{}", v.output());
}

#[test]
fn reducing_the_metrics_to_rank_0_fails_metrics_averaged() {
    fails_on(
        9,
        "metrics-reduced",
        "dist::all_reduce(&mut metrics, dist::ReduceOp::Sum)?;",
        "dist::reduce(&mut metrics, 0, dist::ReduceOp::Sum)?;",
        "metrics-averaged",
        &[],
    );
}

/// Only rank 0 reduces: the ranks' collectives part ways (rank 0's reduce meets the
/// others' next barrier), the run fails, and the report names both calls as
/// PyTorch's DETAIL desync check would.
#[test]
fn a_reduce_on_rank_0_only_is_reported_as_a_desync() {
    let dir = variant(
        8,
        "reduce-on-rank-0-only",
        "dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;",
        "if global_rank == 0 {\n            dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;\n        }",
    );
    let v = checker_with(&["verify", "step", "8", "--seed", "4242", "--crate"], &[&dir]);
    assert_eq!(v.code, Some(1), "{}", v.output());
    assert!(v.failed().contains(&"trains".to_string()), "{}", v.output());
    let desync = regex::Regex::new(
        r"the ranks' collectives differ at call #\d+ of group \d+: rank 0 issued reduce\(op=SUM, root=0\) Double\[1\], rank 1 issued \w+\(",
    )
    .unwrap();
    assert!(desync.is_match(&v.stdout), "the report must name both calls:\n{}", v.output());
}
