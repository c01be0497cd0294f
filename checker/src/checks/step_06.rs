//! Step 6: each rank its DistributedSampler share, reshuffled every epoch.
use serde_json::Value;
use tch_distributed::DistributedSampler;

use super::{by_rank, id, Check, Finding, Needs};
use crate::observe::Observation;

pub const CHECKS: &[Check] = &[
    Check {
        id: id::SAMPLER_SHARES,
        step: 6,
        observes: "the indices each rank trained and validated on",
        needs: Needs::Main,
        hint: "DistributedSampler::with_defaults(len, world_size, global_rank) for training and validation (guide: step 6)",
        judge: sampler_shares,
    },
    Check {
        id: id::SAMPLER_SET_EPOCH,
        step: 6,
        observes: "rank 0's training order in successive epochs",
        needs: Needs::Main,
        hint: "call train_loader.sampler.set_epoch(epoch) at the start of every epoch (guide: step 6.5)",
        judge: sampler_set_epoch,
    },
];

fn indices(event: &Value) -> Vec<u64> {
    event["indices"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
}

fn sampler_shares(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let expected = "each rank iterates DistributedSampler(len, world size, rank)'s indices (PyTorch's), disjoint shares covering the set";
    let train = by_rank(obs, "train_indices");
    let (mut problems, mut absent) = (Vec::new(), Vec::new());
    for rank in 0..ws as u64 {
        let Some(epochs) = train.get(&rank) else {
            absent.push(format!("rank {rank}: no training epoch traced"));
            continue;
        };
        for (e, event) in epochs.iter().enumerate() {
            let got = indices(event);
            let want = expected_indices(v.train_subset, ws, rank as usize, e as u64);
            if got != want {
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
    for (rank, events) in &by_rank(obs, "validation") {
        if indices(events[0]) != expected_indices(v.test_subset, ws, *rank as usize, 0) {
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
    let rank0 = by_rank(obs, "train_indices").remove(&0).unwrap_or_default();
    let expected = "a different order in every epoch";
    if rank0.len() < 2 {
        return Finding::missing(format!("rank 0 traced {} training epoch(s)", rank0.len()), expected);
    }
    let reshuffled = rank0[0]["indices"] != rank0[1]["indices"];
    Finding::shown(
        reshuffled,
        if reshuffled { "a new order each epoch" } else { "the same order every epoch" },
        expected,
    )
}

/// PyTorch's DistributedSampler indices (shuffle, seed 0, no drop_last).
pub fn expected_indices(len: usize, world: usize, rank: usize, epoch: u64) -> Vec<u64> {
    match DistributedSampler::with_defaults(len, world, rank) {
        Ok(mut s) => {
            s.set_epoch(epoch);
            s.indices().into_iter().map(|i| i as u64).collect()
        }
        Err(_) => Vec::new(),
    }
}
