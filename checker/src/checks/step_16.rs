//! Step 16 (beyond the DLI lab): DDP × TP on a 2-D mesh. Judged from the step's two
//! runs (`observe::MeshRuns`): the program with `--tensor-parallel 2 --sync-batch-norm`
//! on 4 ranks (a 2 × 2 mesh, "dp" × "tp") and without `--tensor-parallel` on 2 ranks
//! (DDP over what is the mesh's DP dimension), on the same data and seed for
//! [`MESH_STEPS`] steps, dropout off: the mesh's groups are PyTorch's, TP's collectives
//! run over "tp" and DDP's over "dp", TP peers train on the same indices and DP peers
//! on disjoint ones, and the weights equal DDP's over the DP replicas.
use std::collections::{BTreeMap, BTreeSet};

use lab_trace::event::{Collective, GroupCreated, TrainIndices, Weights};
use lab_trace::{CollectiveOp, Record, ReduceOp};

use super::collectives;
use super::step_15::step_all_reduces;
use super::{by_rank, last_error_line, last_values, malformed, weights_compared, Check, Finding, Step};
use crate::observe::{Gains, MeshRuns, Observation, RunKind, MESH_STEPS};

pub const MESH_GROUPS: &str = "mesh-groups";
pub const MESH_COLLECTIVES: &str = "mesh-collectives";
pub const MESH_BATCHES: &str = "mesh-batches";
pub const MESH_EQUALS_DDP: &str = "mesh-equals-ddp";

/// The mesh run's world and TP size: 2 DP replicas × 2 TP ranks.
const WORLD: usize = 4;
const TP: usize = 2;

pub const STEP: Step = Step {
    gains: &[Gains::Mesh],
    runs: &[RunKind::Mesh],
    checks: &[
        Check {
            id: MESH_GROUPS,
            observes: "the process groups each rank of the run with --tensor-parallel 2 on 4 ranks made, in order: their members and the mesh dimension each belongs to",
            needs: Some(RunKind::Mesh),
            hint: "lay the ranks out as dist::init_device_mesh(device, &[W / T, T], &[\"dp\", \"tp\"]): the data-parallel dimension first, TP last, so that TP peers are neighbouring ranks (guide: step 16)",
            judge: mesh_groups,
        },
        Check {
            id: MESH_COLLECTIVES,
            observes: "the group each collective of the 4 ranks goes to: the blocks' all-reduces in each training step, DDP's broadcasts and checks, against the rank's TP and DP groups",
            needs: Some(RunKind::Mesh),
            hint: "split the model over mesh.get_group(\"tp\") and wrap it in DistributedDataParallel::with_group over mesh.get_group(\"dp\"), never over the world (guide: step 16)",
            judge: mesh_collectives,
        },
        Check {
            id: MESH_BATCHES,
            observes: "the training indices each of the 4 ranks walked, against its TP peer's, its DP peer's and the training set",
            needs: Some(RunKind::Mesh),
            hint: "shard the data over the DP dimension only: a DistributedSampler of dp size replicas, at the rank's place along the mesh's \"dp\" dimension (the device mesh says it), so that TP peers see the same batches (guide: step 16)",
            judge: mesh_batches,
        },
        Check {
            id: MESH_EQUALS_DDP,
            observes: "rank 0's weights after 3 steps on the 2 × 2 mesh (gathered from its TP group's slices) against DDP's over 2 ranks on the same data: each parameter's sum and 8 of its values",
            needs: Some(RunKind::Mesh),
            hint: "the mesh must take DDP's step: gradients averaged over the \"dp\" group only, SyncBatchNorm's statistics over \"dp\" (TensorParallelNorm::SyncBatchNorm(dp)), every rank seeded alike (guide: step 16)",
            judge: mesh_equals_ddp,
        },
    ],
};

/// The runs, or the finding that stands in for a judgement: they did not run, or the
/// program refused the mesh itself (the starter, which still asks T = world size): the
/// step's work is missing, a failure, not "could not judge".
fn mesh_runs<'a>(obs: &'a Observation, expected: &str) -> Result<&'a MeshRuns, Option<Finding>> {
    let Some(runs) = obs.mesh() else {
        return Err(Finding::missing("the runs on a 2-D mesh and with DDP did not run", expected));
    };
    let refused = runs.mesh.processes.iter().map(|p| &p.ended).find(|e| {
        !e.success() && e.status.and_then(|s| s.code()) == Some(2) && e.stderr.contains("--tensor-parallel")
    });
    match refused {
        Some(e) => Err(Finding::shown(
            false,
            format!(
                "{} refused --tensor-parallel 2 on 4 ranks ({}): the program has no 2-D mesh yet",
                e.name,
                last_error_line(&e.stderr).unwrap_or("exit 2")
            ),
            expected,
        )),
        None => Ok(runs),
    }
}

/// The mesh run's checked trace, or the finding that stands in for a judgement.
fn mesh_trace<'a>(
    obs: &'a Observation,
    expected: &str,
) -> Result<(&'a MeshRuns, &'a [Record]), Option<Finding>> {
    let runs = mesh_runs(obs, expected)?;
    match runs.mesh.trace.checked() {
        Ok(trace) => Ok((runs, trace)),
        Err(_) => Err(malformed(&runs.mesh.trace)),
    }
}

/// PyTorch's groups of a `[WORLD / TP, TP]` mesh named `["dp", "tp"]`, in the order
/// every rank makes them after the world's: each column of the grid (a DP group), then
/// each row (a TP group).
pub fn mesh_groups_expected() -> Vec<(Vec<usize>, &'static str)> {
    let rows = WORLD / TP;
    let dp = (0..TP).map(|col| ((0..rows).map(|row| row * TP + col).collect(), "dp"));
    let tp = (0..rows).map(|row| ((row * TP..(row + 1) * TP).collect(), "tp"));
    dp.chain(tp).collect()
}

/// Rank `rank`'s TP peers and DP peers in PyTorch's layout (itself included).
fn peers(rank: usize) -> (Vec<usize>, Vec<usize>) {
    let groups = mesh_groups_expected();
    let find = |dim: &str| {
        groups
            .iter()
            .find(|(ranks, d)| *d == dim && ranks.contains(&rank))
            .map(|(r, _)| r.clone())
            .unwrap_or_default()
    };
    (find("tp"), find("dp"))
}

const MESH_GROUPS_EXPECTED: &str = "on every rank, after the world (group 0): the DP groups {0,2} then {1,3} (mesh dimension \"dp\"), then the TP groups {0,1} then {2,3} (\"tp\"), PyTorch's init_device_mesh of shape [2, 2] named [\"dp\", \"tp\"]";

fn mesh_groups(obs: &Observation) -> Option<Finding> {
    let (_, trace) = match mesh_trace(obs, MESH_GROUPS_EXPECTED) {
        Ok(found) => found,
        Err(finding) => return finding,
    };
    let made = by_rank::<GroupCreated>(trace);
    if made.len() != WORLD {
        return Finding::missing(
            format!(
                "only rank(s) {:?} of {WORLD} recorded the groups they made",
                made.keys().collect::<Vec<_>>()
            ),
            MESH_GROUPS_EXPECTED,
        );
    }
    let expected = mesh_groups_expected();
    let said =
        |ranks: &[usize], dim: Option<&str>| format!("{ranks:?} ({})", dim.unwrap_or("no mesh dimension"));
    let mut wrong = Vec::new();
    for (rank, groups) in &made {
        // The world's group comes first; it is the default group, not the mesh's.
        let mesh: Vec<&&GroupCreated> = groups.iter().filter(|g| g.group != 0).collect();
        let seen: Vec<String> = mesh.iter().map(|g| said(&g.ranks, g.mesh_dim.as_deref())).collect();
        let want: Vec<String> = expected.iter().map(|(ranks, dim)| said(ranks, Some(dim))).collect();
        if seen != want {
            wrong.push(format!(
                "rank {rank} made {}",
                if seen.is_empty() { "no group".into() } else { seen.join(", ") }
            ));
        }
    }
    let ok = wrong.is_empty();
    let observed = if ok {
        format!(
            "every rank of {WORLD} made {}",
            expected.iter().map(|(r, d)| said(r, Some(d))).collect::<Vec<_>>().join(", ")
        )
    } else {
        wrong.join("; ")
    };
    Finding::shown(ok, observed, MESH_GROUPS_EXPECTED)
}

const MESH_COLLECTIVES_EXPECTED: &str = "in each training step the 12 all-reduces of the split blocks on the rank's TP group ({0,1} or {2,3}) and nothing else; DDP's check and broadcasts of the replicas on the rank's DP group ({0,2} or {1,3}), never on the world";

/// The number each rank gave the group of `ranks`, if it made one.
fn group_number(trace: &[Record], rank: usize, ranks: &[usize]) -> Option<u64> {
    by_rank::<GroupCreated>(trace).get(&rank)?.iter().find(|g| g.ranks == ranks).map(|g| g.group)
}

fn mesh_collectives(obs: &Observation) -> Option<Finding> {
    if let Some(mine) = collectives::owned(obs, RunKind::Mesh, MESH_COLLECTIVES, MESH_COLLECTIVES_EXPECTED) {
        return Some(mine);
    }
    let (runs, trace) = match mesh_trace(obs, MESH_COLLECTIVES_EXPECTED) {
        Ok(found) => found,
        Err(finding) => return finding,
    };
    let batch = runs.settings.batch_size.max(1);
    let mut lines = Vec::new();
    let mut ok = true;
    for rank in 0..WORLD {
        let (tp_ranks, dp_ranks) = peers(rank);
        let (tp, dp) = (group_number(trace, rank, &tp_ranks), group_number(trace, rank, &dp_ranks));
        let name = |group: u64| match group {
            g if Some(g) == tp => format!("its TP group {tp_ranks:?}"),
            g if Some(g) == dp => format!("its DP group {dp_ranks:?}"),
            0 => "the world".to_string(),
            g => format!("group {g}"),
        };
        let mut wrong = Vec::new();
        let (mut in_steps, mut ddp_calls, mut expected) = (Vec::new(), 0, Vec::new());
        let mut training = false;
        for record in trace.iter().filter(|r| r.rank == Some(rank)) {
            if let Some(t) = record.get::<TrainIndices>() {
                training = true;
                expected.extend(t.indices.chunks(batch).flat_map(|b| step_all_reduces(b.len() as i64)));
            } else if record.get::<Weights>().is_some() {
                training = false;
            } else if let Some(c) = record.get::<Collective>() {
                let ddp = matches!(
                    c.op,
                    CollectiveOp::BroadcastCoalesced | CollectiveOp::VerifyParamsAcrossProcesses
                );
                if ddp {
                    ddp_calls += 1;
                    if Some(c.group) != dp {
                        wrong.push(format!("DDP's {} on {}", c.op, name(c.group)));
                    }
                } else if training && c.op == CollectiveOp::AllReduce && c.reduce_op == Some(ReduceOp::Sum) {
                    in_steps.push(c);
                } else if training && c.op != CollectiveOp::Barrier {
                    wrong.push(format!(
                        "a {} of {} values on {} during training",
                        c.op,
                        c.numel,
                        name(c.group)
                    ));
                }
            }
        }
        if ddp_calls == 0 {
            wrong.push(
                "no call of DDP at all: the split model is not wrapped in DDP over the DP group".into(),
            );
        }
        let off_tp: Vec<String> = in_steps
            .iter()
            .filter(|c| Some(c.group) != tp)
            .map(|c| name(c.group))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !off_tp.is_empty() {
            wrong.push(format!("the blocks' all-reduces on {}", off_tp.join(" and ")));
        }
        let sizes: Vec<i64> = in_steps.iter().map(|c| c.numel).collect();
        if sizes != expected {
            wrong.push(format!(
                "{} all-reduce(s) in training where the {MESH_STEPS} steps make {}",
                sizes.len(),
                expected.len()
            ));
        }
        let mut line =
            format!("rank {rank}: {} all-reduce(s) in training, {ddp_calls} call(s) of DDP", in_steps.len());
        if !wrong.is_empty() {
            ok = false;
            wrong.dedup();
            let shown = wrong.len().min(4);
            line.push_str(&format!(": {}", wrong[..shown].join("; ")));
            if wrong.len() > shown {
                line.push_str(&format!(" (and {} more)", wrong.len() - shown));
            }
        }
        lines.push(line);
    }
    Finding::shown(ok, lines.join("\n"), MESH_COLLECTIVES_EXPECTED)
}

const MESH_BATCHES_EXPECTED: &str = "TP peers ({0,1}, {2,3}) train on the same indices in the same order; DP peers ({0,2}, {1,3}) on disjoint halves of the training set, which together cover it";

fn mesh_batches(obs: &Observation) -> Option<Finding> {
    let (runs, trace) = match mesh_trace(obs, MESH_BATCHES_EXPECTED) {
        Ok(found) => found,
        Err(finding) => return finding,
    };
    let walked: BTreeMap<usize, &Vec<usize>> =
        by_rank::<TrainIndices>(trace).into_iter().map(|(rank, epochs)| (rank, &epochs[0].indices)).collect();
    if walked.len() != WORLD {
        return Finding::missing(
            format!(
                "only rank(s) {:?} of {WORLD} trained (recorded their indices)",
                walked.keys().collect::<Vec<_>>()
            ),
            MESH_BATCHES_EXPECTED,
        );
    }
    let subset = runs.settings.train_subset;
    let mut wrong = Vec::new();
    for row in 0..WORLD / TP {
        let (a, b) = (row * TP, row * TP + 1);
        if walked[&a] != walked[&b] {
            wrong.push(format!("TP peers {a} and {b} trained on different indices"));
        }
    }
    for col in 0..TP {
        let (a, b) = (col, col + TP);
        let (first, second): (BTreeSet<usize>, BTreeSet<usize>) =
            (walked[&a].iter().copied().collect(), walked[&b].iter().copied().collect());
        let shared = first.intersection(&second).count();
        if shared > 0 {
            wrong.push(format!("DP peers {a} and {b} share {shared} of their indices"));
        }
    }
    let covered: BTreeSet<usize> = walked.values().flat_map(|i| i.iter().copied()).collect();
    if covered != (0..subset).collect() {
        wrong.push(format!("the ranks trained on {} distinct images of the {subset}", covered.len()));
    }
    let ok = wrong.is_empty();
    let observed = if ok {
        format!("TP peers on the same indices, DP peers on disjoint halves of the {subset} images")
    } else {
        wrong.join("; ")
    };
    Finding::shown(ok, observed, MESH_BATCHES_EXPECTED)
}

/// Allowed difference between the mesh's weights (gathered over TP) and DDP's over
/// the DP replicas, per value. Both runs average the same gradients over the same 2 DP
/// ranks and normalise over the same global batch (SyncBatchNorm); the mesh's split
/// convolutions add their partial sums after an all-reduce, DDP's whole conv all at
/// once: float32 reassociation, which now and then moves a value across a ReLU's zero
/// or a max-pool's choice (step 15's caveat), grown by 3 steps of BatchNorm. Measured
/// 2026-11-29, these runs by hand (program `--seed` 1, 2, 3, 7, momentum 0 and 0.9)
/// and the checker's seed 4242: 7.5e-9 and 3e-8 on some draws, 1.1e-6, 2.7e-5, 7.4e-5,
/// 1.0e-4, 1.6e-4 and 1.7e-4 (`--seed 2`, momentum 0.9) on others, nearly all in the
/// stem's conv. The mistakes recorded move weights by 5.6e-3 (SyncBatchNorm over the
/// world), 6.5e-3 (data sharded over the world) and 0.12 (DDP over the world); the
/// mesh's dimensions swapped is a consistent layout and moves them by none (its
/// checks are `mesh-groups` and `mesh-collectives`). 1e-3 sits between, 6 times the worst flip measured and 5 times
/// below the closest mistake: step 15's bound, for the same reason.
const TOLERANCE: f64 = 1e-3;

const MESH_EQUALS_DDP_EXPECTED: &str = "after the same steps on the same data, rank 0's weights gathered from its TP group's slices equal DDP's over 2 ranks to 1e-3";

fn mesh_equals_ddp(obs: &Observation) -> Option<Finding> {
    let runs = match mesh_runs(obs, MESH_EQUALS_DDP_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let (Ok(mesh), Ok(ddp)) = (runs.mesh.trace.checked(), runs.ddp.trace.checked()) else {
        let bad = if runs.mesh.trace.checked().is_err() { &runs.mesh.trace } else { &runs.ddp.trace };
        return malformed(bad);
    };
    let Some(reference) = last_values(ddp) else {
        return Finding::missing(
            "the DDP run on 2 ranks recorded no weights after training",
            MESH_EQUALS_DDP_EXPECTED,
        );
    };
    let Some(gathered) = last_values(mesh).filter(|v| v.sharded) else {
        return Finding::missing(
            "rank 0 of the mesh run recorded no weights gathered from slices: the model was not split over the TP group (labkit::WideResNet::tensor_parallel_with not used?)",
            MESH_EQUALS_DDP_EXPECTED,
        );
    };
    weights_compared(
        reference,
        gathered,
        ("DDP over 2 ranks", "the 2 × 2 mesh"),
        format!("after {MESH_STEPS} steps on the 2 × 2 mesh, the weights differ from DDP's by at most"),
        TOLERANCE,
        MESH_EQUALS_DDP_EXPECTED,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mesh_groups_are_pytorchs_dp_columns_then_tp_rows() {
        let groups = mesh_groups_expected();
        assert_eq!(groups, [(vec![0, 2], "dp"), (vec![1, 3], "dp"), (vec![0, 1], "tp"), (vec![2, 3], "tp")]);
        assert_eq!(peers(3), (vec![2, 3], vec![1, 3]));
        assert_eq!(peers(0), (vec![0, 1], vec![0, 2]));
    }
}
