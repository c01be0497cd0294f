//! Step 7: the model wrapped in DDP: synchronized weights, the same step as one rank.
use std::collections::{BTreeMap, BTreeSet};

use lab_trace::event::{InitialWeights, Weights};
use lab_trace::{EventKind, Record};

use super::collectives;
use super::{events, malformed, Check, Finding, Step};
use crate::observe::{Equivalence, Gains, Observation, RunKind};

pub const WEIGHTS_SYNCHRONIZED: &str = "weights-synchronized";
pub const MATCHES_SINGLE_RANK: &str = "matches-single-rank";

pub const STEP: Step = Step {
    gains: &[Gains::Ddp],
    runs: &[RunKind::Equivalence],
    checks: &[
        Check {
            id: WEIGHTS_SYNCHRONIZED,
            observes: "each rank's weight digest after every epoch",
            needs: Some(RunKind::Main),
            hint: "wrap the model in dist::DistributedDataParallel::new(model, &vs, ...) (guide: step 7)",
            judge: weights_synchronized,
        },
        Check {
            id: MATCHES_SINGLE_RANK,
            observes: "rank 0's weights after one epoch, N ranks x batch B against 1 rank x batch N*B",
            needs: Some(RunKind::Equivalence),
            hint: "DDP averages the gradients of the ranks' batches: with the DistributedSampler, one step of N ranks is one step on the N batches together (guide: step 7)",
            judge: matches_single_rank,
        },
    ],
};

/// How far the two runs' weights may drift apart, relative to the step's change.
/// Measured on the solutions: 2e-5 to 3e-3. Beyond summation order, rounding flips a
/// few max-pool and ReLU decisions, whose gradients then differ outright. A model not
/// wrapped in DDP is off by 0.5 to 1.3.
pub const EQUIVALENCE_TOLERANCE: f64 = 0.05;

fn weights_synchronized(obs: &Observation) -> Option<Finding> {
    let ws = obs.variation.world_size();
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let weights = events::<Weights>(trace);
    let mut per_epoch: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
    for (_, w) in &weights {
        per_epoch.entry(w.epoch).or_default().insert(w.digest.as_str());
    }
    let expected =
        "identical weights on every rank after every epoch (ranks started from different random weights)";
    if let Some(mine) = collectives::owned(obs, RunKind::Main, WEIGHTS_SYNCHRONIZED, expected) {
        return Some(mine);
    }
    let differing: Vec<usize> = per_epoch.iter().filter(|(_, d)| d.len() != 1).map(|(e, _)| *e).collect();
    if differing.is_empty() && (per_epoch.is_empty() || weights.len() != ws * per_epoch.len()) {
        return Finding::missing(
            format!("{} weight digest(s) from {} epoch(s) for {ws} ranks", weights.len(), per_epoch.len()),
            expected,
        );
    }
    Finding::shown(
        differing.is_empty(),
        if differing.is_empty() {
            format!("identical on all ranks after {} epoch(s)", per_epoch.len())
        } else {
            format!("ranks' weights differ after epoch(s) {differing:?}")
        },
        expected,
    )
}

fn matches_single_rank(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let expected = format!(
        "{ws} ranks x batch {b} end the epoch with the weights of 1 rank x batch {} (differences <= {EQUIVALENCE_TOLERANCE} of the epoch's change)",
        ws * v.batch_size,
        b = v.batch_size
    );
    let Some(eq) = obs.equivalence() else { return Finding::missing("the comparison did not run", expected) };
    let failed: Vec<String> = eq
        .processes()
        .filter(|p| !p.ended.success())
        .map(|p| format!("{}: {}", p.ended.name, p.ended.describe()))
        .collect();
    if !failed.is_empty() {
        return Finding::missing(format!("a run of the comparison failed: {}", failed.join(", ")), expected);
    }
    for trace in [&eq.many.trace, &eq.one.trace] {
        if trace.checked().is_err() {
            return malformed(trace);
        }
    }
    let Some((ok, observed)) = judge_equivalence(eq) else {
        return Finding::missing("no weights traced before or after the epoch in one of the runs", expected);
    };
    Finding::shown(ok, observed, expected)
}

/// Rank 0's weights after the epoch, N ranks against 1 rank: the largest difference
/// of the weight projections relative to their size. `None` without the weights.
fn judge_equivalence(eq: &Equivalence) -> Option<(bool, String)> {
    /// Rank 0's first event of kind `E`.
    fn rank0<E: EventKind>(trace: &[Record]) -> Option<&E> {
        trace.iter().filter(|r| r.rank == Some(0)).find_map(Record::get::<E>)
    }
    let first_epoch = |trace: &[Record]| -> Option<[f64; 8]> {
        let w = trace
            .iter()
            .filter(|r| r.rank == Some(0))
            .filter_map(Record::get::<Weights>)
            .find(|w| w.epoch == 0)?;
        Some(w.projection)
    };
    let many = first_epoch(&eq.many.trace.records)?;
    let one = first_epoch(&eq.one.trace.records)?;
    let start = rank0::<InitialWeights>(&eq.one.trace.records)?.projection;
    // Relative to how far one epoch moved the weights: the starting point is shared,
    // so only the updates can differ.
    let moved = one.iter().zip(&start).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    let n = eq.settings.world_size();
    // Runs that train nothing agree trivially: an epoch that moves no weight is no
    // evidence, but a mistake of its own (an optimizer over another VarStore).
    if moved == 0.0 {
        return Some((
            false,
            format!(
                "1 rank x batch {}: the weights the optimizer steps did not change in the epoch; \
                 an optimizer over another VarStore than the model's steps none of the model's",
                eq.settings.batch_size * n
            ),
        ));
    }
    let moved = moved.max(1e-12);
    let diff = many.iter().zip(&one).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / moved;
    Some((
        diff <= EQUIVALENCE_TOLERANCE,
        format!(
            "{n} ranks x batch {} against 1 rank x batch {}: difference {diff:.1e} of the epoch's change",
            eq.settings.batch_size,
            eq.settings.batch_size * n
        ),
    ))
}
