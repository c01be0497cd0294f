//! Step 11: the quick evaluation's summary, the target reached, and every rank leaving
//! the training loop together.
use std::collections::BTreeMap;

use lab_trace::event::{StopDecision, TrainIndices, Weights};
use lab_trace::Record;

use super::collectives::{self, ranks_words};
use super::{all_stdout, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const SUMMARY: &str = "summary";
pub const TARGET_REACHED: &str = "target-reached";
pub const RANKS_STOP_TOGETHER: &str = "ranks-stop-together";

pub const STEP: Step = Step {
    gains: &[Gains::EarlyStop],
    runs: &[RunKind::QuickEvaluation],
    checks: &[
        Check {
            id: SUMMARY,
            observes: "rank 0's `Quick evaluation:` line",
            needs: Some(RunKind::Main),
            hint: "labkit::print_summary on rank 0 after the loop, then dist::destroy_process_group() (guide: step 11)",
            judge: summary,
        },
        Check {
            id: TARGET_REACHED,
            observes: "a quick evaluation on the generated stand-in (8,000 training images, until the first epoch that reaches the target, at most 6)",
            needs: Some(RunKind::QuickEvaluation),
            hint: "check the learning rate and batch size against the lab's defaults (guide: step 11)",
            judge: target_reached,
        },
        Check {
            id: RANKS_STOP_TOGETHER,
            observes: "the epochs and steps each rank trained before it left the loop, in a run asked to stop early (--target-accuracy 0, --patience as many epochs as it should train, one epoch more allowed)",
            needs: Some(RunKind::Main),
            hint: "every rank records the same all-reduced accuracy in its own EarlyStopping and breaks out of the loop on it; no rank decides alone (no `global_rank == 0 &&` in the stop) (guide: step 11)",
            judge: ranks_stop_together,
        },
    ],
};

fn summary(obs: &Observation) -> Option<Finding> {
    let ws = obs.variation.world_size();
    let expected =
        format!("rank 0 prints the quick evaluation's summary for {ws} ranks, once, after the loop");
    let stdout = all_stdout(obs);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("Quick evaluation:")).collect();
    let Some(line) = lines.first() else {
        return Finding::missing("no `Quick evaluation:` line", expected);
    };
    // Each rank's line, or each epoch's, says the same: only their number tells.
    if lines.len() > 1 {
        let observed = format!(
            "{} `Quick evaluation:` lines: print_summary ran {} times (on every rank, or in the epoch loop), \
             the first: {line}",
            lines.len(),
            lines.len()
        );
        return Finding::shown(false, observed, expected);
    }
    Finding::shown(line.contains(&format!("{ws} rank")), line.to_string(), expected)
}

fn target_reached(obs: &Observation) -> Option<Finding> {
    let q = obs.single(RunKind::QuickEvaluation)?;
    let expected = "the quick evaluation reaches the target validation accuracy";
    let line = q.stdout.lines().find(|l| l.starts_with("Quick evaluation:")).unwrap_or("");
    let observed = format!(
        "{} on the generated stand-in: {}",
        q.describe(),
        if line.is_empty() { "no summary" } else { line }
    );
    if !q.success() || line.is_empty() {
        return Finding::missing(observed, expected);
    }
    Finding::shown(line.contains("reached at epoch"), observed, expected)
}

/// How one rank's training loop ended, from its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct End {
    /// The last epoch it began (its `train_indices`).
    epoch: usize,
    /// Whether it finished that epoch's training (its `weights`).
    finished: bool,
    /// The training steps of the epochs it finished.
    steps: usize,
}

impl End {
    fn words(&self) -> String {
        if self.finished {
            format!("left the training loop after epoch {}, {} steps", self.epoch, self.steps)
        } else {
            format!("began epoch {} after {} steps and did not finish it", self.epoch, self.steps)
        }
    }
}

/// Each rank's end: the epochs it began and finished, the steps of those it finished
/// (a batch is a step, the last one partial, as labkit's loader gives them).
fn ends(trace: &[Record], batch_size: usize) -> BTreeMap<usize, End> {
    let mut out: BTreeMap<usize, End> = BTreeMap::new();
    let mut begun: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for record in trace {
        let Some(rank) = record.rank else { continue };
        if let Some(t) = record.get::<TrainIndices>() {
            let steps = out.get(&rank).map_or(0, |e| e.steps);
            begun.insert((rank, t.epoch), t.indices.len().div_ceil(batch_size.max(1)));
            out.insert(rank, End { epoch: t.epoch, finished: false, steps });
        } else if let Some(w) = record.get::<Weights>() {
            if let Some(end) = out.get_mut(&rank).filter(|e| e.epoch == w.epoch && !e.finished) {
                end.finished = true;
                end.steps += begun.get(&(rank, w.epoch)).copied().unwrap_or(0);
            }
        }
    }
    out
}

/// Ranks that stop apart: one rank decides alone to stop (its own accuracy, or
/// `global_rank == 0 && ...`), and the others begin an epoch without it, waiting at
/// their first collective for a rank that has gone.
///
/// The evidence is the main run's trace, which from step 11 on is asked to stop early
/// on every rank: `--target-accuracy 0 --patience E --epochs E+1` for the variation's
/// E epochs (every accuracy reaches 0, so a right program stops after its E-th epoch,
/// as the other checks expect, and never begins the one more allowed). The main run was
/// chosen over the quick evaluation (which stops early at the first epoch reaching
/// 0.85) because it stops early whatever the accuracy, costs no extra run, and has a
/// trace (`train_indices` per epoch for the epochs and steps begun, `weights` for those
/// finished); the quick evaluation's stop depends on how the model learns.
fn ranks_stop_together(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let expected = format!(
        "every rank leaves the training loop after the same epoch, having run the same number of steps (asked to stop early: after epoch {})",
        v.epochs.saturating_sub(1)
    );
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let ends = ends(trace, v.batch_size);
    if ends.is_empty() {
        return Finding::missing("no rank began an epoch of training", expected);
    }
    // Ranks with the same end, in words: "rank 0 left ...; ranks 1–2 began ...".
    let mut grouped: Vec<(Vec<usize>, &End)> = Vec::new();
    for (&rank, end) in &ends {
        match grouped.iter_mut().find(|(_, e)| *e == end) {
            Some((ranks, _)) => ranks.push(rank),
            None => grouped.push((vec![rank], end)),
        }
    }
    let described: Vec<String> =
        grouped.iter().map(|(ranks, end)| format!("{} {}", ranks_words(ranks), end.words())).collect();
    let latest = ends.values().map(|e| e.epoch).max().unwrap_or(0);
    // A rank that finished its last epoch and went no further while another went on
    // left the loop early; ranks that left after one epoch with other step counts ran
    // other batches.
    let left_early = ends.values().any(|e| e.finished && e.epoch < latest);
    let left: Vec<&End> = ends.values().filter(|e| e.finished).collect();
    let steps_apart = left.windows(2).any(|w| w[0].epoch == w[1].epoch && w[0].steps != w[1].steps);
    if left_early || steps_apart {
        let mut observed = described.join("; ");
        match collectives::divergence(obs, RunKind::Main) {
            // Another step's mistake made the ranks part ways (and so stop apart): that
            // step's check fails for it, not this one.
            Some(d) if d.owner.is_some_and(|(_, c)| c != RANKS_STOP_TOGETHER) => {
                return Some(Finding {
                    evidence: super::Evidence::Consequence,
                    observed: format!(
                        "the ranks stopped apart because their collectives part ways ({}): {}\n{observed}",
                        d.owner_words().unwrap_or_default(),
                        d.sentence
                    ),
                    expected,
                    blames: d.owner.map(|(_, id)| id),
                    at: None,
                });
            }
            Some(d) if d.owner.is_some() => {
                observed.push_str(&format!("\nthe ranks' collectives part ways: {}", d.sentence));
            }
            _ => {}
        }
        return Finding::shown(false, observed, expected);
    }
    if let Some(apart) = decided_apart(trace) {
        return Finding::shown(false, format!("{}; {apart}", described.join("; ")), expected);
    }
    let together = ends.len() == ws && grouped.len() == 1 && grouped[0].1.finished;
    let succeeded = obs.main.processes.iter().all(|p| p.ended.success());
    if !(together && succeeded) {
        // A rank that crashed (its peers then killed or stuck) is no decision to stop.
        return Finding::missing(format!("{} (of {ws} ranks)", described.join("; ")), expected);
    }
    Finding::shown(true, format!("every rank {}", grouped[0].1.words()), expected)
}

/// Ranks that decided on different accuracies, or decided otherwise, at the same
/// decision (their n-th `EarlyStopping::record`), in words; `None` when every rank that
/// decided decided alike. The main run's early stop is reached on every accuracy, so
/// ranks deciding on their own accuracy still stop together there; what they decided on
/// shows it, as it would show on a run where they stop apart. (Only the ranks that
/// recorded are compared: one rank deciding and telling the others is no mistake.)
fn decided_apart(trace: &[Record]) -> Option<String> {
    let mut decisions: BTreeMap<usize, BTreeMap<usize, &StopDecision>> = BTreeMap::new();
    for (record, decision) in super::events::<StopDecision>(trace) {
        if let Some(rank) = record.rank {
            decisions.entry(decision.recorded).or_default().entry(rank).or_insert(decision);
        }
    }
    decisions.values().find_map(|by_rank| {
        let (first_rank, first) = by_rank.iter().next()?;
        let (other_rank, other) = by_rank
            .iter()
            .find(|(_, d)| d.accuracy.to_bits() != first.accuracy.to_bits() || d.stop != first.stop)?;
        let words = |rank: &usize, d: &StopDecision| {
            format!(
                "rank {rank} recorded accuracy {} and decided to {}",
                d.accuracy,
                if d.stop { "stop" } else { "go on" }
            )
        };
        Some(format!(
            "at decision {}: {}, {} (every rank must decide on the same all-reduced accuracy)",
            first.recorded,
            words(first_rank, first),
            words(other_rank, other)
        ))
    })
}

#[cfg(test)]
mod tests {
    use lab_trace::{Event, Trace};

    use super::*;
    use crate::checks::tests::nothing;
    use crate::checks::Evidence;

    fn at(rank: usize, event: impl Into<Event>) -> Record {
        let mut record = Record::now(event);
        record.rank = Some(rank);
        record
    }

    fn epoch(rank: usize, epoch: usize, images: usize, finished: bool) -> Vec<Record> {
        let mut out = vec![at(rank, TrainIndices { epoch, indices: vec![0; images] })];
        if finished {
            out.push(at(rank, Weights { epoch, digest: "d".into(), projection: [0.0; 8] }));
        }
        out
    }

    fn judged(records: Vec<Record>) -> (Evidence, String) {
        let mut obs = nothing(11);
        obs.variation.nodes = 1;
        obs.variation.ranks_per_node = 2;
        obs.variation.batch_size = 16;
        obs.main.trace = Trace { records, malformed: vec![] };
        let finding = ranks_stop_together(&obs).unwrap();
        (finding.evidence, finding.observed)
    }

    #[test]
    fn ranks_that_stop_after_the_same_epoch_hold_and_one_that_stops_alone_breaks() {
        let together: Vec<Record> =
            (0..2).flat_map(|r| [epoch(r, 0, 40, true), epoch(r, 1, 40, true)]).flatten().collect();
        assert_eq!(
            judged(together),
            (Evidence::Holds, "every rank left the training loop after epoch 1, 6 steps".into())
        );
        let mut apart: Vec<Record> = (0..2).flat_map(|r| epoch(r, 0, 40, true)).collect();
        apart.extend(epoch(1, 1, 40, false));
        assert_eq!(
            judged(apart),
            (
                Evidence::Broken,
                "rank 0 left the training loop after epoch 0, 3 steps; rank 1 began epoch 1 after 3 steps and did not finish it"
                    .into()
            )
        );
    }

    fn decided(rank: usize, recorded: usize, accuracy: f64, stop: bool) -> Record {
        at(rank, StopDecision { recorded, accuracy, stop })
    }

    #[test]
    fn ranks_that_stop_together_but_decided_on_their_own_accuracies_break() {
        let run = |accuracies: [f64; 2]| -> Vec<Record> {
            (0..2)
                .flat_map(|r| {
                    let mut records = epoch(r, 0, 40, true);
                    records.push(decided(r, 1, accuracies[r], false));
                    records.extend(epoch(r, 1, 40, true));
                    records.push(decided(r, 2, accuracies[r], true));
                    records
                })
                .collect()
        };
        assert_eq!(judged(run([0.5, 0.5])).0, Evidence::Holds);
        let (evidence, observed) = judged(run([0.5, 0.625]));
        assert_eq!(evidence, Evidence::Broken);
        assert_eq!(
            observed,
            "ranks 0–1 left the training loop after epoch 1, 6 steps; at decision 1: rank 0 recorded accuracy 0.5 and decided to go on, rank 1 recorded accuracy 0.625 and decided to go on (every rank must decide on the same all-reduced accuracy)"
        );
    }

    #[test]
    fn ranks_with_other_step_counts_break_and_a_rank_that_died_training_is_no_evidence() {
        let steps: Vec<Record> = epoch(0, 0, 40, true).into_iter().chain(epoch(1, 0, 20, true)).collect();
        let (evidence, observed) = judged(steps);
        assert_eq!(evidence, Evidence::Broken);
        assert_eq!(observed, "rank 0 left the training loop after epoch 0, 3 steps; rank 1 left the training loop after epoch 0, 2 steps");
        // Both ranks stuck in epoch 0 (one died, the other waits for it): nothing decided.
        let died: Vec<Record> = (0..2).flat_map(|r| epoch(r, 0, 40, r == 0)).collect();
        assert_eq!(judged(died).0, Evidence::Missing);
    }
}
