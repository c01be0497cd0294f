//! Ranks that fall out of step: a collective only some ranks reach, or ranks that issue
//! different collectives at the same point. Under Gloo such mismatched messages used to
//! abort the process from Gloo's own threads (`terminate called after throwing an
//! instance of 'gloo::EnforceNotMet'`, SIGABRT); with the collectives checked
//! (`GroupOptions::check_collectives`, on for Gloo by default) every rank gets a
//! `DistError` naming both calls, at once rather than at the timeout.
mod common;

use std::time::Duration;

use common::*;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

/// Far above what a check takes; the test fails, rather than waits, if a rank hangs.
const DEADLINE: Duration = Duration::from_secs(90);
/// The collectives' timeout: a mismatch must be reported long before it.
const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[
        ("reduce_against_broadcast", reduce_against_broadcast),
        ("extra_reduce_then_ddp_step", extra_reduce_then_ddp_step),
        ("one_rank_leaves", one_rank_leaves),
        ("extra_all_reduce_then_fsdp_step", extra_all_reduce_then_fsdp_step),
    ]);
}

/// Prints the outcome of a rank's collectives in one line the test reads.
fn report(result: dist::Result<()>) {
    match result {
        Ok(()) => println!("OUTCOME ok"),
        Err(e) => println!("OUTCOME kind={:?} message={e}", e.kind()),
    }
}

/// Rank 0 reduces one double (as step 8's throughput) while rank 1 broadcasts 912
/// floats: different ops and sizes at the same call.
fn reduce_against_broadcast() {
    init_env(TIMEOUT);
    let result = if test_rank() == 0 {
        let mut t = Tensor::from(652.5f64);
        dist::reduce(&mut t, 0, dist::ReduceOp::Sum)
    } else {
        let mut t = Tensor::zeros([912], (Kind::Float, Device::Cpu));
        dist::broadcast(&mut t, 0)
    };
    report(result);
}

/// Rank 0 makes a reduce the others skip (inside `if global_rank == 0`), then every
/// rank trains a DDP step: rank 0's reduce meets the others' DDP broadcast or the
/// Reducer's bucket all-reduce inside backward, which c10d issues, not this crate.
fn extra_reduce_then_ddp_step() {
    init_env(TIMEOUT);
    let result = (|| -> dist::Result<()> {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root() / "fc", 8, 2, Default::default());
        let model = dist::DistributedDataParallel::new(model, &vs, dist::DdpOptions::default())?;
        let mut opt = nn::Sgd::default().build(&vs, 0.1).map_err(dist::DistError::from)?;
        if test_rank() == 0 {
            let mut t = Tensor::from(1.0f64);
            dist::reduce(&mut t, 0, dist::ReduceOp::Sum)?;
        }
        let xs = Tensor::ones([4, 8], (Kind::Float, Device::Cpu));
        let loss = model.forward_t(&xs, true).sum(Kind::Float);
        opt.zero_grad();
        loss.f_backward().map_err(dist::DistError::from)?;
        opt.step();
        dist::barrier()
    })();
    report(result);
}

/// Rank 0 all-reduces something the others do not, then every rank trains an FSDP
/// step: rank 0's all-reduce meets rank 1's all-gather of a block's parameters, which
/// FSDP issues from its hooks; the error reaches backward() or forward, never a signal.
fn extra_all_reduce_then_fsdp_step() {
    init_env(TIMEOUT);
    let result = (|| -> dist::Result<()> {
        let vs = nn::VarStore::new(Device::Cpu);
        let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
        let block = fsdp.fully_shard(nn::linear(vs.root() / "block", 8, 8, Default::default()), "block")?;
        let model = fsdp.fully_shard(
            nn::seq_t().add(block).add(nn::linear(vs.root() / "head", 8, 2, Default::default())),
            "",
        )?;
        let mut opt = nn::Sgd::default().build(fsdp.shards()?, 0.1).map_err(dist::DistError::from)?;
        fsdp.check_optimizer(&opt)?;
        let xs = Tensor::ones([4, 8], (Kind::Float, Device::Cpu));
        let loss = model.try_forward_t(&xs, true)?.sum(Kind::Float);
        if test_rank() == 0 {
            let mut t = Tensor::from(1.0f64);
            dist::all_reduce(&mut t, dist::ReduceOp::Sum)?;
        }
        opt.zero_grad();
        loss.f_backward().map_err(dist::DistError::from)?;
        opt.step();
        Ok(())
    })();
    report(result);
}

/// Rank 1 leaves the job (as a rank that stops training early) while rank 0 still
/// all-reduces: rank 0 learns it from the closed connection, not from the timeout.
fn one_rank_leaves() {
    init_env(TIMEOUT);
    if test_rank() == 1 {
        report(dist::destroy_process_group());
        return;
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut t = Tensor::from(1.0f64);
    report(dist::all_reduce(&mut t, dist::ReduceOp::Sum));
}

fn outcome(o: &RankOutcome) -> &str {
    // The test harness may print its own words before ours on the same line.
    o.output.lines().find_map(|l| l.split_once("OUTCOME ").map(|(_, said)| said)).unwrap_or_else(|| {
        panic!("rank {} reported nothing (exit {:?}): a crash or a hang?\n{}", o.rank, o.code, o.output)
    })
}

fn run(scenario: &str, env: &[(&str, &str)]) -> Vec<RankOutcome> {
    let port = child_process::free_port().unwrap();
    // Said outright: `the_check_follows_the_backend_and_the_environment` sets and unsets
    // the variable in this process while other tests start ranks, which inherit it.
    let mut env = env.to_vec();
    env.push((dist::CHECK_COLLECTIVES_ENV, "1"));
    let outcomes = run_ranks(scenario, env_ranks(0..2, 2, port), &env, DEADLINE);
    // Every rank returned from its scenario: no signal, no hang.
    assert_all_ok(&outcomes);
    for o in &outcomes {
        // Liveness, not speed: far below the collectives' 60 s timeout.
        assert!(
            o.elapsed < TIMEOUT / 2,
            "rank {} took {:?}: the mismatch waited for the timeout",
            o.rank,
            o.elapsed
        );
    }
    outcomes
}

#[test]
fn a_reduce_against_a_broadcast_is_an_error_on_every_rank_not_an_abort() {
    let outcomes = run("reduce_against_broadcast", &[]);
    for o in &outcomes {
        let said = outcome(o);
        assert!(said.starts_with("kind=Mismatch "), "rank {} must fail with a mismatch: {said}", o.rank);
        // Both calls, in this crate's words, each with the line that issued it.
        for call in [
            "rank 0 called reduce(op=SUM, root=0) Double[1] at ",
            "rank 1 called broadcast(root=0) Float[912] at ",
        ] {
            let at = said.find(call).unwrap_or_else(|| panic!("rank {} must say `{call}`: {said}", o.rank));
            assert!(
                said[at + call.len()..].starts_with("crates/tch-distributed/tests/mismatch.rs:"),
                "{said}"
            );
        }
    }
}

#[test]
fn an_extra_reduce_before_a_ddp_step_is_an_error_on_every_rank() {
    let outcomes = run("extra_reduce_then_ddp_step", &[]);
    for o in &outcomes {
        let said = outcome(o);
        assert!(said.starts_with("kind="), "rank {} must fail: {said}", o.rank);
        // Both ranks say both calls: rank 0's reduce with its line, rank 1's bucket.
        assert!(said.starts_with("kind=Mismatch "), "{said}");
        assert!(
            said.contains(
                "rank 0 called reduce(op=SUM, root=0) Double[1] at crates/tch-distributed/tests/mismatch.rs:"
            ),
            "{said}"
        );
        assert!(
            said.contains("rank 1 called DDP's all-reduce of a bucket of gradients inside backward()"),
            "{said}"
        );
        assert!(!said.contains("frame #"), "no C++ backtrace: {said}");
    }
}

#[test]
fn an_extra_all_reduce_before_an_fsdp_step_is_an_error_on_every_rank() {
    let outcomes = run("extra_all_reduce_then_fsdp_step", &[]);
    for o in &outcomes {
        let said = outcome(o);
        assert!(said.starts_with("kind=Mismatch "), "rank {} must fail with a mismatch: {said}", o.rank);
        assert!(
            said.contains(
                "rank 0 called all_reduce(op=SUM) Double[1] at crates/tch-distributed/tests/mismatch.rs:"
            ),
            "rank {} must name rank 0's all_reduce and its line: {said}",
            o.rank
        );
        // FSDP's all-gather before the block's backward, issued from its hook.
        assert!(said.contains("rank 1 called all_gather_into_tensor("), "{said}");
    }
}

#[test]
fn a_rank_that_leaves_fails_the_others_collective_at_once() {
    let outcomes = run("one_rank_leaves", &[]);
    assert_eq!(outcome(&outcomes[1]), "ok");
    let said = outcome(&outcomes[0]);
    assert!(said.starts_with("kind="), "rank 0's all_reduce must fail: {said}");
}

#[test]
fn the_check_follows_the_backend_and_the_environment() {
    // Read in one test: the environment is process-wide.
    std::env::remove_var(dist::CHECK_COLLECTIVES_ENV);
    assert!(dist::checks_collectives(dist::Backend::Gloo), "Gloo aborts on a mismatch: checked by default");
    std::env::set_var(dist::CHECK_COLLECTIVES_ENV, "0");
    assert!(!dist::checks_collectives(dist::Backend::Gloo));
    std::env::set_var(dist::CHECK_COLLECTIVES_ENV, "1");
    assert!(dist::checks_collectives(dist::Backend::Nccl));
    std::env::remove_var(dist::CHECK_COLLECTIVES_ENV);
    assert_eq!(dist::GroupOptions::default().check_collectives, None, "the rule decides by default");
}
