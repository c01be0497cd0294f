//! Step 6: each rank its DistributedSampler share, reshuffled every epoch.
use lab_trace::event::{TrainIndices, Validation};
use tch_distributed::DistributedSampler;

use super::{by_rank, malformed, Check, Finding, Step};
use crate::observe::{Observation, RunKind};

pub const SAMPLER_SHARES: &str = "sampler-shares";
pub const SAMPLER_SET_EPOCH: &str = "sampler-set-epoch";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[
        Check {
            id: SAMPLER_SHARES,
            observes: "the indices each rank trained and validated on",
            needs: Some(RunKind::Main),
            hint: "DistributedSampler::with_defaults(len, world_size, global_rank) for training and validation (guide: step 6)",
            judge: sampler_shares,
        },
        Check {
            id: SAMPLER_SET_EPOCH,
            observes: "rank 0's training order in successive epochs",
            needs: Some(RunKind::Main),
            hint: "call train_loader.sampler.set_epoch(epoch) at the start of every epoch (guide: step 6.5)",
            judge: sampler_set_epoch,
        },
    ],
};

fn sampler_shares(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let expected = "each rank iterates DistributedSampler(len, world size, rank)'s indices (PyTorch's), disjoint shares covering the set";
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let train = by_rank::<TrainIndices>(trace);
    let (mut problems, mut absent) = (Vec::new(), Vec::new());
    for rank in 0..ws {
        let Some(epochs) = train.get(&rank) else {
            absent.push(format!("rank {rank}: no training epoch traced"));
            continue;
        };
        for (e, event) in epochs.iter().enumerate() {
            let got = &event.indices;
            let want = expected_indices(v.train_subset, ws, rank, e as u64);
            if *got != want {
                problems.push(format!(
                    "rank {rank} epoch {e}: {} indices starting {:?}, expected {} starting {:?}",
                    got.len(),
                    &got[..got.len().min(5)],
                    want.len(),
                    &want[..want.len().min(5)]
                ));
                break;
            }
        }
    }
    for (rank, events) in &by_rank::<Validation>(trace) {
        if events[0].indices != expected_indices(v.test_subset, ws, *rank, 0) {
            problems.push(format!("rank {rank}: validation indices are not its DistributedSampler share"));
        }
    }
    if problems.is_empty() && !absent.is_empty() {
        return Finding::missing(absent.join("; "), expected);
    }
    problems.extend(absent);
    Finding::shown(
        problems.is_empty(),
        if problems.is_empty() {
            "every rank iterated exactly its share".into()
        } else {
            problems.join("; ")
        },
        expected,
    )
}

fn sampler_set_epoch(obs: &Observation) -> Option<Finding> {
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let rank0 = by_rank::<TrainIndices>(trace).remove(&0).unwrap_or_default();
    let expected = "a different order in every epoch";
    if rank0.len() < 2 {
        return Finding::missing(format!("rank 0 traced {} training epoch(s)", rank0.len()), expected);
    }
    let reshuffled = rank0[0].indices != rank0[1].indices;
    Finding::shown(
        reshuffled,
        if reshuffled { "a new order each epoch" } else { "the same order every epoch" },
        expected,
    )
}

/// PyTorch's DistributedSampler indices (shuffle, seed 0, no drop_last).
pub fn expected_indices(len: usize, world: usize, rank: usize, epoch: u64) -> Vec<usize> {
    match DistributedSampler::with_defaults(len, world, rank) {
        Ok(mut s) => {
            s.set_epoch(epoch);
            s.indices()
        }
        Err(_) => Vec::new(),
    }
}
