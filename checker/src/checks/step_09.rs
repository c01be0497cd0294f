//! Step 9: the validation metrics averaged over ranks.
use std::collections::BTreeMap;

use lab_trace::event::{EpochReport, Validation};
use lab_trace::{CollectiveOp, ReduceOp};

use super::collectives::{self, Call, Run};
use super::{by_rank, id, malformed, Check, Finding, Needs};
use crate::observe::Observation;

pub const CHECKS: &[Check] = &[Check {
    id: id::METRICS_AVERAGED,
    step: 9,
    observes: "the collective that carried each rank's metrics, and every rank's reported metrics",
    needs: Needs::Main,
    hint: "all_reduce a tensor of [accuracy, loss] with ReduceOp::Sum and divide by the world size (guide: step 9)",
    judge: metrics_averaged,
}];

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
    if let Some(mine) = collectives::owned(obs, Run::Main, id::METRICS_AVERAGED, expected) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let raw = by_rank::<Validation>(trace);
    let reports = by_rank::<EpochReport>(trace);
    let mut off = Vec::new();
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
                    break 'ranks;
                }
            }
        }
    }
    // What came out: every rank reports the mean.
    for e in 0..v.epochs {
        let accs: Vec<f64> = raw.values().filter_map(|evs| evs.get(e)).map(|x| x.accuracy).collect();
        let losses: Vec<f64> = raw.values().filter_map(|evs| evs.get(e)).map(|x| x.loss).collect();
        if accs.len() != ws {
            continue;
        }
        let (ma, ml) = (accs.iter().sum::<f64>() / ws as f64, losses.iter().sum::<f64>() / ws as f64);
        for (r, evs) in &reports {
            if let Some(rep) = evs.get(e) {
                let (a, l) = (rep.validation_accuracy, rep.validation_loss);
                // A NaN on either side is a difference too.
                let agree = (a - ma).abs() <= 1e-9 && (l - ml).abs() <= 1e-9;
                if !agree {
                    off.push(format!(
                        "rank {r} epoch {e}: accuracy {a:.4}, loss {l:.4}; mean {ma:.4}, {ml:.4}"
                    ));
                }
            }
        }
    }
    if off.is_empty() && reports.len() != ws {
        return Finding::missing(format!("epoch reports from {} of {ws} ranks", reports.len()), expected);
    }
    Finding::shown(
        off.is_empty(),
        if off.is_empty() {
            "every rank holds the mean of the ranks' metrics, all-reduced".into()
        } else {
            off.join("; ")
        },
        expected,
    )
}
