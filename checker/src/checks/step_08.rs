//! Step 8: the throughput reduced to rank 0, and the epoch's end at a barrier.
use std::collections::BTreeMap;

use lab_trace::event::{EpochReport, ImagesPerSec, Printed, TrainIndices, Weights};
use lab_trace::{CollectiveOp, Record, ReduceOp};

use super::collectives::{self, Call};
use super::{by_rank, events, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const THROUGHPUT_REDUCED: &str = "throughput-reduced";
pub const EPOCH_BARRIER: &str = "epoch-barrier";

pub const STEP: Step = Step {
    gains: &[Gains::ThroughputBarrier],
    runs: &[],
    checks: &[
        Check {
            id: THROUGHPUT_REDUCED,
            observes: "the collective that carried each rank's images/sec, and what rank 0 printed",
            needs: Some(RunKind::Main),
            hint: "dist::reduce the images/sec tensor to rank 0 with ReduceOp::Sum (guide: step 8)",
            judge: throughput_reduced,
        },
        Check {
            id: EPOCH_BARRIER,
            observes: "each rank's epoch time and when it stopped its clock, with one rank made late",
            needs: Some(RunKind::Main),
            hint: "dist::barrier() after training, before stopping the clock (guide: step 8)",
            judge: epoch_barrier,
        },
    ],
};

/// Why `call` does not give rank 0 the sum on every backend, if it does not.
fn wrong_throughput_call(call: &Call) -> Option<String> {
    let sum = call.reduce_op == Some(ReduceOp::Sum);
    match call.op {
        CollectiveOp::Reduce if sum && call.root == Some(0) => None,
        CollectiveOp::AllReduce if sum => None,
        CollectiveOp::Reduce if sum => Some(format!(
            "{}: the sum goes to rank {}, and only the destination is promised it (NCCL leaves rank 0's own figure in rank 0's tensor; Gloo happens to fill every rank's)",
            call.describe(),
            call.root.unwrap_or(0)
        )),
        CollectiveOp::Reduce | CollectiveOp::AllReduce => Some(format!("{}: combines with {} instead of SUM", call.describe(), call.reduce_op.map_or("?", ReduceOp::name))),
        _ => Some(format!("{}: does not sum the ranks' figures", call.describe())),
    }
}

fn throughput_reduced(obs: &Observation) -> Option<Finding> {
    let expected = "rank 0's images/sec == the sum of every rank's, reduced to rank 0 with SUM (right on NCCL as on Gloo)";
    if let Some(mine) = collectives::owned(obs, RunKind::Main, THROUGHPUT_REDUCED, expected) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let printed = events::<Printed>(trace);
    if printed.is_empty() {
        return Finding::missing("no epoch line printed", expected);
    }
    let per_rank = by_rank::<ImagesPerSec>(trace);
    let mut problems = Vec::new();
    // The call that carried a figure wrongly, with the words beside its line.
    let mut wrong: Option<(&Call, String)> = None;
    // What the program asked for: every rank's figure must go into a SUM to rank 0.
    let calls: BTreeMap<usize, Vec<Call>> = collectives::by_rank(trace);
    'ranks: for (rank, figures) in &per_rank {
        let mine = calls.get(rank).map(Vec::as_slice).unwrap_or_default();
        for (epoch, figure) in figures.iter().enumerate() {
            let value = figure.value;
            let carriers: Vec<&Call> = mine.iter().filter(|c| c.carried(value)).collect();
            if carriers.is_empty() {
                problems.push(format!("rank {rank} epoch {epoch}: its images/sec went into no collective"));
            } else if carriers.iter().all(|c| wrong_throughput_call(c).is_some()) {
                problems.push(format!(
                    "rank {rank} epoch {epoch}: {}",
                    wrong_throughput_call(carriers[0]).unwrap_or_default()
                ));
                wrong = Some((
                    carriers[0],
                    format!("rank {rank}'s images/sec goes into this {}", carriers[0].describe()),
                ));
            }
            if !problems.is_empty() {
                break 'ranks;
            }
        }
    }
    // What came out: the printed figure is the sum.
    for (e, (_, p)) in printed.iter().enumerate() {
        let shown = p.images_per_sec;
        let sum: f64 = per_rank.values().filter_map(|evs| evs.get(e)).map(|x| x.value).sum();
        // A NaN on either side is a difference too.
        let agree = (shown - sum).abs() <= 1e-6 * sum.abs().max(1.0);
        if !agree {
            problems.push(format!("epoch {e}: printed {shown:.1}, sum of ranks {sum:.1}"));
        }
    }
    let finding = Finding::shown(
        problems.is_empty(),
        if problems.is_empty() {
            "rank 0 printed the sum of the ranks' images/sec, reduced to it with SUM".into()
        } else {
            problems.join("; ")
        },
        expected,
    )?;
    Some(match wrong {
        Some((call, label)) => finding.at(call.site.as_deref(), label),
        None => finding,
    })
}

/// With the barrier every rank's clock stops when the late rank arrives, so an
/// epoch's times agree across ranks; without it the others stop about the delay
/// earlier. Comparing ranks (not a fixed time) holds however slow the machine is.
///
/// A time alone can also be short because its rank started the epoch late (a rank the
/// machine starved before its clock started waits less for the others), so a rank
/// counts as early only when, besides, its clock provably stopped before the late rank
/// had finished training (recorded as it leaves `train`, before it reaches the
/// barrier): behind a barrier that cannot happen. When its clock stopped is bounded
/// from above twice, by what the rank recorded: its images/sec record (written after
/// the clock stopped) and the start of its epoch's training plus the epoch time it
/// measured (the clock started before `train` began). The second bound is what shows a
/// barrier placed after `t0.elapsed()`, whose images/sec come after the barrier.
fn epoch_barrier(obs: &Observation) -> Option<Finding> {
    let ws = obs.variation.world_size();
    let delay = labkit::SLOW_RANK_DELAY.as_secs_f64();
    let expected = format!(
        "with one rank {delay:.1} s late, every rank's epoch time within {:.2} s of the late rank's",
        delay / 2.0
    );
    if let Some(mine) = collectives::owned(obs, RunKind::Main, EPOCH_BARRIER, &expected) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let mut per_epoch: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
    for (r, evs) in by_rank::<EpochReport>(trace) {
        for e in evs {
            per_epoch.entry(e.epoch).or_default().push((r, e.epoch_time));
        }
    }
    let done_before_the_late_rank = done_before_the_late_rank(trace, ws - 1, delay / 4.0);
    let early: Vec<String> = per_epoch
        .iter()
        .filter_map(|(epoch, times)| {
            let latest = times.iter().map(|t| t.1).fold(0.0, f64::max);
            let before: Vec<String> = times
                .iter()
                .filter(|(r, t)| *t < latest - delay / 2.0 && done_before_the_late_rank(*r, *epoch))
                .map(|(r, t)| format!("rank {r} {t:.2} s"))
                .collect();
            (!before.is_empty()).then(|| {
                format!("epoch {epoch}: {} while the late rank took {latest:.2} s", before.join(", "))
            })
        })
        .collect();
    if !early.is_empty() {
        return Finding::shown(
            false,
            format!("epochs ended before the late rank: {}", early.join("; ")),
            expected,
        );
    }
    let complete = !per_epoch.is_empty() && per_epoch.values().all(|t| t.len() == ws);
    if !complete {
        return Finding::missing(
            format!("epoch times of {} epoch(s) from fewer than {ws} ranks", per_epoch.len()),
            expected,
        );
    }
    Finding::shown(true, "every rank's epoch ends with the late rank", expected)
}

/// Whether `rank` stopped its clock of `epoch` at least `margin` seconds before the
/// `late` rank left `train` ([`epoch_barrier`]); `true` where the trace lacks either
/// time (then the epoch times alone judge).
fn done_before_the_late_rank(trace: &[Record], late: usize, margin: f64) -> impl Fn(usize, usize) -> bool {
    let stopped = clocks_stopped_by(trace);
    let mut late_done: BTreeMap<usize, f64> = BTreeMap::new();
    for (record, weights) in events::<Weights>(trace) {
        if record.rank == Some(late) {
            late_done.entry(weights.epoch).or_insert(record.time);
        }
    }
    move |rank, epoch| match (stopped.get(&(rank, epoch)), late_done.get(&epoch)) {
        (Some(stopped), Some(late_done)) => *stopped < late_done - margin,
        _ => true,
    }
}

/// For each (rank, epoch) of its epoch reports, a time by which that rank's clock of
/// the epoch had stopped, from its own records: the earlier of its images/sec record
/// (taken after the clock stopped) and the start of its training that epoch plus the
/// epoch time it measured (its clock started before `train` began).
fn clocks_stopped_by(trace: &[Record]) -> BTreeMap<(usize, usize), f64> {
    // A rank's n-th images/sec belongs to its n-th epoch report (the figure has no epoch).
    let mut figures: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (record, _) in events::<ImagesPerSec>(trace) {
        if let Some(r) = record.rank {
            figures.entry(r).or_default().push(record.time);
        }
    }
    let mut began: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (record, indices) in events::<TrainIndices>(trace) {
        if let Some(r) = record.rank {
            began.entry((r, indices.epoch)).or_insert(record.time);
        }
    }
    let mut stopped: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (r, reports) in by_rank::<EpochReport>(trace) {
        let mut figure = figures.get(&r).into_iter().flatten();
        for report in reports {
            let measured = began.get(&(r, report.epoch)).map(|start| start + report.epoch_time);
            let bound = match (figure.next(), measured) {
                (Some(f), Some(m)) => f.min(m),
                (Some(f), None) => *f,
                (None, Some(m)) => m,
                (None, None) => continue,
            };
            stopped.insert((r, report.epoch), bound);
        }
    }
    stopped
}

#[cfg(test)]
mod tests {
    use lab_trace::{Event, Trace};

    use super::*;
    use crate::checks::tests::nothing;
    use crate::checks::Evidence;

    fn at(rank: usize, time: f64, event: impl Into<Event>) -> Record {
        let mut record = Record::now(event);
        record.rank = Some(rank);
        record.time = time;
        record
    }

    /// Rank `rank`'s epoch 0 as its trace shows it: training began at `began`, left
    /// `train` at `trained`, measured `epoch_time`, and recorded its images/sec at `figure`.
    fn epoch(rank: usize, began: f64, trained: f64, epoch_time: f64, figure: f64) -> Vec<Record> {
        let report = EpochReport {
            epoch: 0,
            cumulative_time: epoch_time,
            epoch_time,
            images_per_sec: 100.0,
            validation_loss: 1.0,
            validation_accuracy: 0.5,
        };
        vec![
            at(rank, began, TrainIndices { epoch: 0, indices: vec![0; 16] }),
            at(rank, trained, Weights { epoch: 0, digest: "d".into(), projection: [0.0; 8] }),
            at(rank, figure, ImagesPerSec { value: 100.0, batches: 1, batch_size: 16 }),
            at(rank, figure, report),
        ]
    }

    /// Two ranks; rank 1 is the late one: it trains from 0 to 2.0 s and reaches the
    /// barrier then.
    fn judged(rank0: Vec<Record>) -> (Evidence, String) {
        let mut obs = nothing(8);
        obs.variation.nodes = 1;
        obs.variation.ranks_per_node = 2;
        let mut records = rank0;
        records.extend(epoch(1, 0.0, 2.0, 2.05, 2.1));
        records.sort_by(|a, b| a.time.total_cmp(&b.time));
        obs.main.trace = Trace { records, malformed: vec![] };
        let finding = epoch_barrier(&obs).unwrap();
        (finding.evidence, finding.observed)
    }

    #[test]
    fn a_clock_stopped_before_the_barrier_is_early_though_the_figure_comes_after_it() {
        // The barrier: rank 0 trains 0.5 s and waits; its clock stops with the late rank.
        assert_eq!(judged(epoch(0, 0.0, 0.5, 2.05, 2.1)).0, Evidence::Holds);
        // The barrier after `t0.elapsed()`: the clock stopped at 0.5 s, but the figure
        // is taken after the barrier, once the late rank is done.
        let (evidence, observed) = judged(epoch(0, 0.0, 0.5, 0.5, 2.1));
        assert_eq!(evidence, Evidence::Broken, "{observed}");
        assert!(observed.contains("epoch 0: rank 0 0.50 s while the late rank took 2.05 s"), "{observed}");
        // No barrier at all: the figure comes before the late rank is done too.
        assert_eq!(judged(epoch(0, 0.0, 0.5, 0.5, 0.6)).0, Evidence::Broken);
    }

    #[test]
    fn a_rank_that_began_its_epoch_late_is_not_early() {
        // Starved before its clock started: it began at 1.6 s, trained to 1.9 s, waited at
        // the barrier until 2.05 s. Its time is short, but its clock ran past the late
        // rank's training (the guard of step-12-no-barrier-before-load's fixture).
        assert_eq!(judged(epoch(0, 1.6, 1.9, 0.45, 2.1)).0, Evidence::Holds);
    }
}
