//! Step 14 (beyond the DLI lab): fully sharded data parallel (FSDP). Judged from the
//! step's two runs, the program with `--fsdp` and without it (DDP), on the same world,
//! data and seeds for [`FSDP_STEPS`] steps: each rank holds about 1/N of the model,
//! the weights gathered from the shards equal DDP's, and the collectives are FSDP's.
use std::collections::BTreeMap;

use lab_trace::event::{Collective, ShardsHeld, TrainIndices, Weights};
use lab_trace::{CollectiveOp, Record};

use super::collectives;
use super::{by_rank, last_values, malformed, weights_compared, Check, Finding, Step};
use labkit::report::grouped;

use crate::observe::{FsdpRuns, Gains, Observation, RunKind, FSDP_STEPS};

pub const SHARDED_MEMORY: &str = "sharded-memory";
pub const EQUALS_DDP: &str = "equals-ddp";
pub const FSDP_COLLECTIVES: &str = "fsdp-collectives";

pub const STEP: Step = Step {
    gains: &[Gains::Fsdp],
    runs: &[RunKind::Fsdp],
    checks: &[
        Check {
            id: SHARDED_MEMORY,
            observes: "what each rank of the --fsdp run holds, measured from its tensors: parameters, gradients, what the optimizer steps on, the most full parameters at once",
            needs: Some(RunKind::Fsdp),
            hint: "shard each block as it is built (fsdp.fully_shard(block, name)), then the root; keep FsdpOptions' reshard_after_forward; build the optimizer on fsdp.shards(), not on vs (guide: step 14)",
            judge: sharded_memory,
        },
        Check {
            id: EQUALS_DDP,
            observes: "rank 0's weights after 3 steps with --fsdp (gathered from the shards) against the same run with DDP: each parameter's sum and 8 of its values",
            needs: Some(RunKind::Fsdp),
            hint: "FSDP must take DDP's step: gradients averaged over the ranks (leave FsdpOptions' gradient_divide_factor at None), the optimizer on fsdp.shards() (guide: step 14)",
            judge: equals_ddp,
        },
        Check {
            id: FSDP_COLLECTIVES,
            observes: "the collectives each rank of the --fsdp run issues while training, against the sizes of its shards: all-gathers, reduce-scatters, all-reduces",
            needs: Some(RunKind::Fsdp),
            hint: "with --fsdp build no DistributedDataParallel: shard each block, then the root, and keep FsdpOptions' reshard_after_forward, so that a block is gathered before its forward and again before its backward (guide: step 14)",
            judge: fsdp_collectives,
        },
    ],
};

/// The runs, or the finding that they did not run.
fn fsdp_runs<'a>(obs: &'a Observation, expected: &str) -> Result<&'a FsdpRuns, Option<Finding>> {
    obs.fsdp().ok_or_else(|| Finding::missing("the runs with --fsdp and with DDP did not run", expected))
}

/// Each rank's last record of what it holds.
fn last_held(trace: &[Record]) -> BTreeMap<usize, &ShardsHeld> {
    by_rank::<ShardsHeld>(trace).into_iter().filter_map(|(rank, all)| Some((rank, *all.last()?))).collect()
}

/// How far above P/N a rank's shards may be: each parameter's padding to equal shards
/// (at most world size - 1 rows of it; the narrow model's 8- and 10-row tensors on 3
/// ranks are the worst, a few percent of the whole).
const PADDING_ALLOWANCE: f64 = 1.25;

const SHARDED_MEMORY_EXPECTED: &str = "every rank holds about 1/N of the parameters, of their gradients and of what the optimizer steps on (padding aside), each block sharded on its own, and never more full parameters at once than the root's and one block's";

fn sharded_memory(obs: &Observation) -> Option<Finding> {
    let runs = match fsdp_runs(obs, SHARDED_MEMORY_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let Ok(trace) = runs.fsdp.trace.checked() else { return malformed(&runs.fsdp.trace) };
    let world = runs.settings.world_size();
    let held = last_held(trace);
    if held.is_empty() {
        return Finding::missing(
            "no rank of the --fsdp run held shards: the model was not sharded (no dist::FullyShard, or no labkit::ShardedModel handed to the loop)",
            SHARDED_MEMORY_EXPECTED,
        );
    }
    let mut lines = Vec::new();
    let mut ok = held.len() == world;
    if held.len() != world {
        lines.push(format!("only rank(s) {:?} of {world} held shards", held.keys().collect::<Vec<_>>()));
    }
    for (rank, h) in &held {
        let fair = h.model_numel as f64 / world as f64;
        let bound = (fair * PADDING_ALLOWANCE).ceil() as i64;
        let share = |n: i64| 100.0 * n as f64 / h.model_numel.max(1) as f64;
        let blocks: Vec<&str> =
            h.units.iter().filter(|u| !u.prefix.is_empty()).map(|u| u.prefix.as_str()).collect();
        let root = h.units.iter().filter(|u| u.prefix.is_empty()).map(|u| u.numel).sum::<i64>();
        let largest_block =
            h.units.iter().filter(|u| !u.prefix.is_empty()).map(|u| u.numel).max().unwrap_or(0);
        let peak_bound = root + largest_block;
        // --momentum's buffers, where the run keeps any (plain SGD keeps none).
        let state = match h.optimizer_state_numel {
            0 => String::new(),
            n => format!(" (momentum for {})", grouped(n)),
        };
        let mut line = format!(
            "rank {rank}: {} of {} parameters ({:.1}%; 1/{world} is {:.1}%), gradients {}, optimizer {}{state}, at most {} full at once ({:.1}%; the root and the largest block: {})",
            grouped(h.shard_numel),
            grouped(h.model_numel),
            share(h.shard_numel),
            100.0 / world as f64,
            grouped(h.grad_numel),
            grouped(h.optimizer_numel),
            grouped(h.peak_unsharded_numel),
            share(h.peak_unsharded_numel),
            grouped(peak_bound)
        );
        let mut wrong = Vec::new();
        if h.shard_numel > bound {
            wrong.push(format!("its shards hold more than 1/{world} of the parameters"));
        }
        if h.grad_numel > bound {
            wrong.push("it holds gradients of more than its shards".to_string());
        }
        if h.optimizer_numel > bound {
            wrong.push(
                "the optimizer steps on more than this rank's shards (built on vs, not fsdp.shards()?)"
                    .into(),
            );
        }
        if h.optimizer_state_numel > bound {
            wrong.push("the optimizer keeps momentum for more than this rank's shards".into());
        }
        let every_block = labkit::model::BLOCKS.iter().all(|b| blocks.contains(b));
        if !every_block {
            wrong.push(format!(
                "blocks sharded on their own: {blocks:?}, not every one of {:?} (the model gathered whole, at once)",
                labkit::model::BLOCKS
            ));
        }
        if h.peak_unsharded_numel > peak_bound {
            wrong.push(
                "more full parameters at once than the root and one block: shards kept after forward".into(),
            );
        }
        if !wrong.is_empty() {
            ok = false;
            line.push_str(&format!(": {}", wrong.join("; ")));
        }
        lines.push(line);
    }
    Finding::shown(ok, lines.join("\n"), SHARDED_MEMORY_EXPECTED)
}

/// Allowed difference between FSDP's and DDP's weights, per value: float32
/// reassociation (a reduce-scatter sums the ranks' gradients in another order than
/// DDP's all-reduce), grown by each step and by momentum's buffers. Measured on one
/// node of 3 ranks, `--momentum 0.9`, 3 steps: 2.8e-5 (stem.conv.weight, `verify step
/// 15 --seed 4242`'s draw, 2026-11-29), above the 1e-5 this check once allowed; a
/// mistake (gradients summed, not averaged) moves weights N times as far, 1e-3 and more.
const TOLERANCE: f64 = 1e-4;

const EQUALS_DDP_EXPECTED: &str =
    "after the same steps on the same data, rank 0's weights gathered from the --fsdp run's shards equal the DDP run's to 1e-4";

fn equals_ddp(obs: &Observation) -> Option<Finding> {
    let runs = match fsdp_runs(obs, EQUALS_DDP_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let (Ok(fsdp), Ok(ddp)) = (runs.fsdp.trace.checked(), runs.ddp.trace.checked()) else {
        let bad = if runs.fsdp.trace.checked().is_err() { &runs.fsdp.trace } else { &runs.ddp.trace };
        return malformed(bad);
    };
    let Some(reference) = last_values(ddp) else {
        return Finding::missing(
            "rank 0 of the DDP run recorded no weights after training",
            EQUALS_DDP_EXPECTED,
        );
    };
    let Some(sharded) = last_values(fsdp) else {
        return Finding::missing(
            "rank 0 of the --fsdp run recorded no weights after training",
            EQUALS_DDP_EXPECTED,
        );
    };
    if !sharded.sharded {
        return Finding::shown(
            false,
            "the --fsdp run's weights come from a whole replica on rank 0, not from shards: --fsdp did not shard the model",
            EQUALS_DDP_EXPECTED,
        );
    }
    let world = runs.settings.world_size();
    weights_compared(
        reference,
        sharded,
        ("DDP", "the --fsdp run's model"),
        format!("after {FSDP_STEPS} steps on {world} ranks, FSDP's weights differ from DDP's by at most"),
        TOLERANCE,
        EQUALS_DDP_EXPECTED,
    )
}

const FSDP_COLLECTIVES_EXPECTED: &str = "while training, for each block and step: an all-gather of its shards before its forward, another before its backward, then one reduce-scatter of its gradients (the root: one all-gather, one reduce-scatter); no all-reduce";

/// What one unit did in a training window: `G` an all-gather, `S` a reduce-scatter.
fn pattern(per_step: &str, steps: usize) -> String {
    per_step.repeat(steps)
}

fn fsdp_collectives(obs: &Observation) -> Option<Finding> {
    if let Some(mine) = collectives::owned(obs, RunKind::Fsdp, FSDP_COLLECTIVES, FSDP_COLLECTIVES_EXPECTED) {
        return Some(mine);
    }
    let runs = match fsdp_runs(obs, FSDP_COLLECTIVES_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let Ok(trace) = runs.fsdp.trace.checked() else { return malformed(&runs.fsdp.trace) };
    let world = runs.settings.world_size() as i64;
    let held = last_held(trace);
    let mut ranks: Vec<usize> = trace.iter().filter_map(|r| r.rank).collect();
    ranks.sort();
    ranks.dedup();
    if ranks.is_empty() {
        return Finding::missing("the --fsdp run left no trace of any rank", FSDP_COLLECTIVES_EXPECTED);
    }
    let mut lines = Vec::new();
    let mut ok = true;
    for rank in ranks {
        let records: Vec<&Record> = trace.iter().filter(|r| r.rank == Some(rank)).collect();
        // The training windows: from an epoch's indices to its weights.
        let mut windows: Vec<(usize, Vec<&Collective>)> = Vec::new();
        let mut open: Option<(usize, Vec<&Collective>)> = None;
        for record in &records {
            if let Some(t) = record.get::<TrainIndices>() {
                let steps = t.indices.len().div_ceil(runs.settings.batch_size.max(1));
                open = Some((steps, Vec::new()));
            } else if let Some(c) = record.get::<Collective>() {
                if let Some((_, calls)) = open.as_mut() {
                    calls.push(c);
                }
            } else if record.get::<Weights>().is_some() {
                windows.extend(open.take());
            }
        }
        if windows.is_empty() {
            lines.push(format!("rank {rank}: no epoch of training in the trace"));
            ok = false;
            continue;
        }
        let all_reduces: Vec<i64> = windows
            .iter()
            .flat_map(|(_, calls)| calls.iter().filter(|c| c.op == CollectiveOp::AllReduce).map(|c| c.numel))
            .collect();
        let gathers = windows
            .iter()
            .flat_map(|(_, c)| c.iter())
            .filter(|c| c.op == CollectiveOp::AllGatherIntoTensor)
            .count();
        let scatters = windows
            .iter()
            .flat_map(|(_, c)| c.iter())
            .filter(|c| c.op == CollectiveOp::ReduceScatterTensor)
            .count();
        let mut wrong = Vec::new();
        if !all_reduces.is_empty() {
            wrong.push(format!(
                "{} all-reduce(s) while training, the largest of {} values (DDP's gradient buckets?)",
                all_reduces.len(),
                grouped(*all_reduces.iter().max().unwrap_or(&0))
            ));
        }
        let Some(h) = held.get(&rank) else {
            wrong.push("no sharded units recorded: the model was not sharded".into());
            lines.push(format!(
                "rank {rank}: {gathers} all-gather(s), {scatters} reduce-scatter(s); {}",
                wrong.join("; ")
            ));
            ok = false;
            continue;
        };
        for unit in &h.units {
            let name = if unit.prefix.is_empty() { "the root" } else { unit.prefix.as_str() };
            // Units of one size cannot be told apart by their calls: judged together.
            let twins = h.units.iter().filter(|u| u.shard_numel == unit.shard_numel).count();
            let per_step = if unit.prefix.is_empty() { "GS" } else { "GGS" };
            for (steps, calls) in &windows {
                let seen: String = calls
                    .iter()
                    .filter_map(|c| match c.op {
                        CollectiveOp::AllGatherIntoTensor if c.numel == unit.shard_numel => Some('G'),
                        CollectiveOp::ReduceScatterTensor if c.numel == world * unit.shard_numel => Some('S'),
                        _ => None,
                    })
                    .collect();
                let expected = pattern(per_step, *steps);
                let fine = if twins == 1 { seen == expected } else { seen.len() == expected.len() * twins };
                if !fine {
                    wrong.push(format!(
                        "{name} ({} values per shard): {} in {steps} step(s), expected {}",
                        grouped(unit.shard_numel),
                        spell(&seen),
                        spell(&expected)
                    ));
                    break;
                }
            }
        }
        let steps: usize = windows.iter().map(|(s, _)| s).sum();
        let mut line = format!(
            "rank {rank}: {gathers} all-gather(s) and {scatters} reduce-scatter(s) over {} unit(s) in {steps} training step(s), {} all-reduce(s)",
            h.units.len(),
            all_reduces.len()
        );
        if !wrong.is_empty() {
            ok = false;
            line.push_str(&format!(": {}", wrong.join("; ")));
        }
        lines.push(line);
    }
    Finding::shown(ok, lines.join("\n"), FSDP_COLLECTIVES_EXPECTED)
}

/// "GGS" as "all-gather, all-gather, reduce-scatter"; long ones cut.
fn spell(calls: &str) -> String {
    if calls.is_empty() {
        return "nothing".into();
    }
    let words: Vec<&str> =
        calls.chars().map(|c| if c == 'G' { "all-gather" } else { "reduce-scatter" }).collect();
    if words.len() > 9 {
        format!("{} ... ({} calls)", words[..9].join(", "), words.len())
    } else {
        words.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::difference;
    use lab_trace::event::ParameterSummary;

    fn summary(name: &str, sum: f64, sample: Vec<f64>) -> ParameterSummary {
        ParameterSummary { name: name.into(), numel: 100, sum, sample }
    }

    #[test]
    fn differences_are_per_value_and_a_nan_is_one() {
        let a = summary("w", 1.0, vec![0.5, 0.25]);
        assert_eq!(difference(&a, &a), 0.0);
        // The sums differ by 1e-5 over 100 values: 1e-7 per value, below the samples' 2e-7.
        let near = summary("w", 1.0 + 1e-5, vec![0.5 + 2e-7, 0.25]);
        let d = difference(&a, &near);
        assert!((d - 2e-7).abs() < 1e-12, "{d}");
        let far = summary("w", 1.0, vec![0.5, 0.26]);
        assert!((difference(&a, &far) - 0.01).abs() < 1e-12);
        // A difference the samples miss shows in the sum.
        let elsewhere = summary("w", 1.1, vec![0.5, 0.25]);
        assert!((difference(&a, &elsewhere) - 1e-3).abs() < 1e-12);
        let nan = summary("w", f64::NAN, vec![f64::NAN, 0.25]);
        assert_eq!(difference(&a, &nan), f64::INFINITY);
        let shorter = summary("w", 1.0, vec![0.5]);
        assert_eq!(difference(&a, &shorter), f64::INFINITY);
    }

    #[test]
    fn patterns_read_as_calls() {
        assert_eq!(pattern("GGS", 2), "GGSGGS");
        assert_eq!(spell("GGS"), "all-gather, all-gather, reduce-scatter");
        assert_eq!(spell(""), "nothing");
        assert!(spell(&"GS".repeat(10)).ends_with("(20 calls)"));
    }
}
