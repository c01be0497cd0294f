//! Step 9: the validation metrics averaged over ranks.
use std::collections::BTreeMap;

use lab_trace::event::{EpochReport, Validation};
use lab_trace::{CollectiveOp, ReduceOp};

use super::collectives::{self, Call};
use super::{by_rank, malformed, Check, Finding, Step};
use crate::observe::{Observation, RunKind};

pub const METRICS_AVERAGED: &str = "metrics-averaged";

pub const STEP: Step = Step {
    gains: &[],
    runs: &[],
    checks: &[
        Check {
            id: METRICS_AVERAGED,
            observes: "the collective that carried each rank's metrics, and every rank's reported metrics",
            needs: Some(RunKind::Main),
            hint: "all_reduce a tensor of [accuracy, loss] with ReduceOp::Sum and divide by the world size (guide: step 9)",
            judge: metrics_averaged,
        },
    ],
};

/// Why `call` does not give every rank the ranks' combined metrics, if it does not.
fn wrong_metrics_call(call: &Call) -> Option<String> {
    match (call.op, call.reduce_op) {
        (CollectiveOp::AllReduce, Some(ReduceOp::Sum | ReduceOp::Avg)) | (CollectiveOp::AllGather, _) => None,
        (CollectiveOp::Reduce, _) => Some(format!(
            "{}: only the destination is promised the result (NCCL leaves the other ranks' tensors as they were; Gloo happens to fill them)",
            call.describe()
        )),
        (CollectiveOp::AllReduce, op) => Some(format!("{}: combines with {} instead of SUM (or AVG)", call.describe(), op.map_or("?", ReduceOp::name))),
        _ => Some(format!("{}: does not combine every rank's metrics", call.describe())),
    }
}

fn metrics_averaged(obs: &Observation) -> Option<Finding> {
    let v = &obs.variation;
    let ws = v.world_size();
    let expected = "every rank's validation accuracy and loss == the mean over ranks, all-reduced (right on NCCL as on Gloo)";
    if let Some(mine) = collectives::owned(obs, RunKind::Main, METRICS_AVERAGED, expected) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let raw = by_rank::<Validation>(trace);
    let reports = by_rank::<EpochReport>(trace);
    let mut off = Vec::new();
    // The call that carried metrics wrongly, with the words beside its line.
    let mut wrong: Option<(&Call, String)> = None;
    // What the program asked for: each rank's metrics go into an all-reduce.
    let calls: BTreeMap<usize, Vec<Call>> = collectives::by_rank(trace);
    'ranks: for (rank, validations) in &raw {
        let mine = calls.get(rank).map(Vec::as_slice).unwrap_or_default();
        for (epoch, validation) in validations.iter().enumerate() {
            for (name, value) in [("accuracy", validation.accuracy), ("loss", validation.loss)] {
                let carriers: Vec<&Call> = mine.iter().filter(|c| c.carried(value)).collect();
                if carriers.is_empty() {
                    off.push(format!(
                        "rank {rank} epoch {epoch}: its validation {name} went into no collective"
                    ));
                    break 'ranks;
                } else if carriers.iter().all(|c| wrong_metrics_call(c).is_some()) {
                    off.push(format!(
                        "rank {rank} epoch {epoch}: {}",
                        wrong_metrics_call(carriers[0]).unwrap_or_default()
                    ));
                    let label =
                        format!("rank {rank}'s validation {name} goes into this {}", carriers[0].describe());
                    wrong = Some((carriers[0], label));
                    break 'ranks;
                }
            }
        }
    }
    // What came out: every rank reports the mean.
    let mut reported: Vec<Reported> = Vec::new();
    for e in 0..v.epochs {
        let accs: Vec<f64> = raw.values().filter_map(|evs| evs.get(e)).map(|x| x.accuracy).collect();
        let losses: Vec<f64> = raw.values().filter_map(|evs| evs.get(e)).map(|x| x.loss).collect();
        if accs.len() != ws {
            continue;
        }
        let mean = (accs.iter().sum::<f64>() / ws as f64, losses.iter().sum::<f64>() / ws as f64);
        for (r, evs) in &reports {
            if let Some(rep) = evs.get(e) {
                let held = (rep.validation_accuracy, rep.validation_loss);
                // A NaN on either side is a difference too.
                let agree = (held.0 - mean.0).abs() <= 1e-9 && (held.1 - mean.1).abs() <= 1e-9;
                if !agree {
                    reported.push(Reported { rank: *r, epoch: e, held, mean });
                }
            }
        }
    }
    if off.is_empty() && reported.is_empty() && reports.len() != ws {
        return Finding::missing(format!("epoch reports from {} of {ws} ranks", reports.len()), expected);
    }
    if off.is_empty() && reported.is_empty() {
        return Finding::shown(
            true,
            "every rank holds the mean of the ranks' metrics, all-reduced",
            expected,
        );
    }
    let mut observed = off;
    if !reported.is_empty() {
        observed.push(not_the_mean(&reported, ws));
    }
    // The line that combined rank 0's metrics, marked: where the division belongs.
    let combined = raw.get(&0).and_then(|validations| validations.first()).and_then(|first| {
        calls.get(&0)?.iter().find(|c| c.carried(first.accuracy) && wrong_metrics_call(c).is_none())
    });
    let finding = Finding::shown(false, observed.join("\n"), expected)?;
    Some(match (wrong, combined, uniform_ratio(&reported)) {
        (Some((call, label)), _, _) => finding.at(call.site.as_deref(), label),
        (None, Some(call), Some(ratio)) => finding.at(
            call.site.as_deref(),
            format!("the {}; {} × the mean after it", call.what(), fmt_ratio(ratio)),
        ),
        (None, Some(call), None) if swapped(&reported) => finding.at(
            call.site.as_deref(),
            format!("the {}; accuracy and loss read back swapped after it", call.what()),
        ),
        _ => finding,
    })
}

/// A rank's reported metrics in an epoch that are not the mean over ranks.
struct Reported {
    rank: usize,
    epoch: usize,
    /// Accuracy and loss, as the rank reported them and as their mean over ranks is.
    held: (f64, f64),
    mean: (f64, f64),
}

/// The one factor between every reported figure and its mean, when there is one:
/// 4 for metrics summed over 4 ranks and never divided.
fn uniform_ratio(reported: &[Reported]) -> Option<f64> {
    let first = reported.first()?;
    let ratio = first.held.0 / first.mean.0;
    let same = |held: f64, mean: f64| (held - ratio * mean).abs() <= 1e-6 * held.abs().max(1e-12);
    (ratio.is_finite() && reported.iter().all(|r| same(r.held.0, r.mean.0) && same(r.held.1, r.mean.1)))
        .then_some(ratio)
}

/// Whether every rank reported the mean's accuracy and loss the other way round.
fn swapped(reported: &[Reported]) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9;
    !reported.is_empty() && reported.iter().all(|r| close(r.held.0, r.mean.1) && close(r.held.1, r.mean.0))
}

/// "4", "1.5": a factor as the report names it.
fn fmt_ratio(ratio: f64) -> String {
    if (ratio - ratio.round()).abs() < 1e-3 {
        format!("{}", ratio.round())
    } else {
        format!("{ratio:.3}")
    }
}

/// The reported metrics that are not the mean, in the lab's words: a factor named
/// when every figure is one multiple of its mean ("3 × the mean: summed over 3 ranks,
/// not divided"), then a line per epoch with the ranks that reported alike grouped.
fn not_the_mean(reported: &[Reported], world_size: usize) -> String {
    let mut out = match uniform_ratio(reported) {
        Some(k) if (k - world_size as f64).abs() < 1e-3 => format!(
            "every rank reports {} × the mean: summed over {world_size} ranks, not divided by the world size",
            fmt_ratio(k)
        ),
        Some(k) if (world_size as f64 / k - (world_size as f64 / k).round()).abs() < 1e-3 && k > 1.0 => format!(
            "every rank reports {} × the mean: summed over {world_size} ranks, divided by {} instead of the world size {world_size}",
            fmt_ratio(k),
            fmt_ratio(world_size as f64 / k)
        ),
        Some(k) => format!("every rank reports {} × the mean of the ranks' metrics", fmt_ratio(k)),
        None if swapped(reported) => {
            "every rank reports the mean loss as its accuracy and the mean accuracy as its loss: the two read back in the other order".to_string()
        }
        None => "ranks report metrics that are not the mean over ranks".to_string(),
    };
    // Per epoch, the ranks that reported the same figures, together.
    let mut lines: Vec<(usize, Vec<usize>, String)> = Vec::new();
    for r in reported {
        let figures = format!(
            "accuracy {:.4}, loss {:.4}; the mean {:.4}, {:.4}",
            r.held.0, r.held.1, r.mean.0, r.mean.1
        );
        match lines.iter_mut().find(|(e, _, f)| *e == r.epoch && *f == figures) {
            Some((_, ranks, _)) => ranks.push(r.rank),
            None => lines.push((r.epoch, vec![r.rank], figures)),
        }
    }
    const SHOWN: usize = 6;
    for (epoch, ranks, figures) in lines.iter().take(SHOWN) {
        out.push_str(&format!("\nepoch {epoch}, {}: {figures}", collectives::ranks_words(ranks)));
    }
    if lines.len() > SHOWN {
        out.push_str(&format!("\n(and {} more rank(s) and epoch(s) like these)", lines.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(world_size: usize, factor: f64) -> Vec<Reported> {
        let mut out = Vec::new();
        for epoch in 0..2 {
            let mean = (0.25 + 0.01 * epoch as f64, 2.0 - 0.1 * epoch as f64);
            for rank in 0..world_size {
                out.push(Reported { rank, epoch, held: (mean.0 * factor, mean.1 * factor), mean });
            }
        }
        out
    }

    #[test]
    fn a_sum_not_divided_is_named_as_a_multiple_of_the_mean() {
        let words = not_the_mean(&reported(4, 4.0), 4);
        assert_eq!(
            words,
            "every rank reports 4 × the mean: summed over 4 ranks, not divided by the world size\n\
             epoch 0, ranks 0–3: accuracy 1.0000, loss 8.0000; the mean 0.2500, 2.0000\n\
             epoch 1, ranks 0–3: accuracy 1.0400, loss 7.6000; the mean 0.2600, 1.9000"
        );
        // Divided by the GPUs of one node (2) on 2 nodes of 2: twice the mean.
        let words = not_the_mean(&reported(4, 2.0), 4);
        assert!(
            words.starts_with(
                "every rank reports 2 × the mean: summed over 4 ranks, divided by 2 instead of the world size 4\n"
            ),
            "{words}"
        );
    }

    #[test]
    fn accuracy_and_loss_read_back_swapped_are_named() {
        let mut swapped = reported(2, 1.0);
        for r in &mut swapped {
            r.held = (r.mean.1, r.mean.0);
        }
        let words = not_the_mean(&swapped, 2);
        assert!(
            words.starts_with(
                "every rank reports the mean loss as its accuracy and the mean accuracy as its loss"
            ),
            "{words}"
        );
        assert!(
            words.contains("\nepoch 0, ranks 0–1: accuracy 2.0000, loss 0.2500; the mean 0.2500, 2.0000"),
            "{words}"
        );
    }

    #[test]
    fn figures_without_one_factor_are_grouped_per_epoch() {
        let mut off = reported(3, 3.0);
        off[0].held.0 = 0.9;
        let words = not_the_mean(&off, 3);
        let lines: Vec<&str> = words.lines().collect();
        assert_eq!(lines[0], "ranks report metrics that are not the mean over ranks");
        assert_eq!(lines[1], "epoch 0, rank 0: accuracy 0.9000, loss 6.0000; the mean 0.2500, 2.0000");
        assert_eq!(lines[2], "epoch 0, ranks 1–2: accuracy 0.7500, loss 6.0000; the mean 0.2500, 2.0000");
        assert_eq!(lines.len(), 4, "{words}");
    }
}
