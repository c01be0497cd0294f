//! The hidden variations of a verification: world, data subsets, batch, epochs and the
//! initial weights' seed, all drawn from `--seed` for each step.
use serde::{Deserialize, Serialize};

use super::placement::{describe_placement, gpus, placement};
use super::plan::{Gains, Plan};

/// The hidden variations of one verification, all drawn from the checker's `--seed`
/// (`seed`), the programs' own `--seed` among them (`program_seed`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Variation {
    pub seed: u64,
    pub nodes: usize,
    pub ranks_per_node: usize,
    pub train_subset: usize,
    pub test_subset: usize,
    pub batch_size: usize,
    pub epochs: usize,
    /// The programs' `--seed` (each rank's initial model: this plus its local rank, see
    /// `labkit::SEED_PER_RANK_ENV`). Recorded observations before it had this name call
    /// it `init_seed`.
    #[serde(alias = "init_seed")]
    pub program_seed: u64,
    /// The programs' `--momentum` from step 12 on (0: not passed, the lab's plain SGD):
    /// drawn on half the seeds, so that the checkpoints and the shards carry optimizer
    /// state too. Recorded observations before it have none: 0, which is not written,
    /// so that a plain-SGD observation records as it did before.
    #[serde(default, skip_serializing_if = "is_plain_sgd")]
    pub momentum: f64,
}

fn is_plain_sgd(momentum: &f64) -> bool {
    *momentum == 0.0
}

impl Variation {
    /// The draw of `seed` for a verification that runs as `plan` says.
    pub fn for_step(plan: &Plan, seed: u64) -> Variation {
        let step = plan.step;
        // SplitMix64: reproducible from the seed, on every machine.
        let mut d = labkit::Rng::new(seed ^ (u64::from(step) << 32));
        let worlds = worlds(step);
        let (nodes, ranks_per_node) = worlds[d.below(worlds.len() as u64) as usize];
        let world = nodes * ranks_per_node;
        // Sizes that the world size does not divide exercise the sampler's padding.
        let mut train_subset = 90 + d.below(60) as usize;
        if world > 1 && train_subset.is_multiple_of(world) {
            train_subset += 1;
        }
        let mut test_subset = 40 + d.below(30) as usize;
        if world > 1 && test_subset.is_multiple_of(world) {
            test_subset += 1;
        }
        Variation {
            seed,
            nodes,
            ranks_per_node,
            train_subset,
            test_subset,
            batch_size: 16,
            epochs: 2,
            program_seed: d.below(1_000_000),
            // Drawn last, so that the draws above stay what they were for every seed.
            momentum: if plan.has(Gains::Momentum) && d.below(2) == 1 { MOMENTUM } else { 0.0 },
        }
    }

    /// The settings of one run of the equivalence comparison: one epoch of exactly one
    /// global batch (no padding, no short batch). One step is the claim; over more
    /// steps float32 rounding (different sums, SyncBatchNorm's gathered statistics)
    /// grows until it hides what is being compared.
    pub fn for_equivalence(&self, nodes: usize, ranks_per_node: usize, batch_size: usize) -> Variation {
        let global_batch = self.batch_size * self.world_size();
        Variation {
            nodes,
            ranks_per_node,
            batch_size,
            train_subset: global_batch,
            test_subset: global_batch,
            epochs: 1,
            ..self.clone()
        }
    }

    /// The settings of one run of the step-by-step comparison on the exact-comparison
    /// model (`--model mlp`), `global_ranks` ranks of one node taking global batches of
    /// `global_ranks` times the batch size: as `ranks` ranks, or 1 rank of that whole
    /// batch (`ranks` 1). [`EXACT_EPOCHS`] epochs of whole global batches,
    /// [`EXACT_STEPS`] steps in all, every one traced.
    pub fn for_exact_steps(&self, global_ranks: usize, ranks: usize) -> Variation {
        let global_batch = self.batch_size * global_ranks;
        Variation {
            nodes: 1,
            ranks_per_node: ranks,
            batch_size: global_batch / ranks,
            train_subset: EXACT_STEPS / EXACT_EPOCHS * global_batch,
            test_subset: global_batch,
            epochs: EXACT_EPOCHS,
            ..self.clone()
        }
    }

    /// The settings of step 14's two runs, FSDP and DDP: one node of the main run's
    /// ranks per node (2 or 3), one epoch of [`FSDP_STEPS`] full global batches (no
    /// padding, no short batch): the weights of both after K steps are compared to 1e-4,
    /// and float32 rounding (a reduce-scatter sums in another order than DDP's
    /// all-reduce) grows with every step and every rank: on the main run's 6 ranks they
    /// differed by 1.1e-5 (`--seed 1014`), and 3 ranks with momentum by 2.8e-5
    /// (`equals-ddp` allows 1e-4). The mistakes of the world are the main run's
    /// to show; what these runs compare does not depend on the nodes.
    pub fn for_fsdp(&self) -> Variation {
        let one_node = Variation { nodes: 1, ..self.clone() };
        let global_batch = one_node.batch_size * one_node.world_size();
        Variation {
            train_subset: FSDP_STEPS * global_batch,
            test_subset: global_batch,
            epochs: 1,
            ..one_node
        }
    }

    /// The settings of step 15's runs: 2 ranks of one node (the narrow model's blocks
    /// have 16, 32 and 64 channels, which 3 ranks cannot split), one epoch of
    /// [`TP_STEPS`] full batches and one validation batch. Every TP rank trains on the
    /// whole batch, so the one-rank run beside it has the same batch size.
    pub fn for_tensor_parallel(&self) -> Variation {
        Variation {
            nodes: 1,
            ranks_per_node: 2,
            train_subset: TP_STEPS * self.batch_size,
            test_subset: self.batch_size,
            epochs: 1,
            ..self.clone()
        }
    }

    /// The settings of step 16's runs: 4 ranks of one node, a 2 × 2 mesh (2 DP replicas
    /// × 2 TP ranks), batches of 8 per replica (the global batch of 16 the other steps
    /// take), one epoch of [`MESH_STEPS`] full global batches and one validation batch
    /// per replica. The DDP run beside it takes the same on 2 ranks.
    pub fn for_mesh(&self) -> Variation {
        let batch_size = MESH_BATCH;
        Variation {
            nodes: 1,
            ranks_per_node: 4,
            batch_size,
            train_subset: MESH_STEPS * batch_size * 2,
            test_subset: batch_size * 2,
            epochs: 1,
            ..self.clone()
        }
    }

    pub fn world_size(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    pub fn describe(&self) -> String {
        format!(
            "seed {}: {}, {} training and {} validation images, batch {}, {} epochs, program --seed {}{}",
            self.seed,
            describe_placement(
                placement(self.nodes, self.ranks_per_node, gpus()),
                self.nodes,
                self.ranks_per_node
            ),
            self.train_subset,
            self.test_subset,
            self.batch_size,
            self.epochs,
            self.program_seed,
            if self.momentum == 0.0 { String::new() } else { format!(" --momentum {}", self.momentum) }
        )
    }
}

/// The worlds (nodes, ranks per node) the main run of step `step` draws from.
///
/// `verify step N` judges every check of steps 0 to N on step N's runs, so each world
/// here must expose every mistake that depends on the world, whichever step made it:
/// more than one node (a rank numbered by its local rank alone, `num_gpus` taken for
/// the world size, data prepared by global rank 0 only, a sampler split by node),
/// more than one rank per node (every rank downloading, `local_rank * num_nodes +
/// node_id`), and not 2 x 2, where `num_nodes + num_gpus` and `node_id * num_nodes +
/// local_rank` give the right numbers. 2 x 3 and 3 x 2 are the smallest such worlds;
/// which of them a run gets stays hidden. Steps 0 and 1 have no ranks yet.
/// `tests::every_draw_exposes_every_mistake_of_the_world` holds every draw to this.
pub fn worlds(step: u8) -> &'static [(usize, usize)] {
    match step {
        0 | 1 => &[(1, 1)],
        _ => &[(2, 3), (3, 2)],
    }
}

/// The `--momentum` a draw with momentum passes (PyTorch's usual 0.9).
pub const MOMENTUM: f64 = 0.9;

/// The training steps (K) of step 7's step-by-step comparison on the exact-comparison
/// model, over [`EXACT_EPOCHS`] epochs: a mistake that shows only after the first step
/// or the first epoch (a learning rate the program changes between epochs) shows
/// there, and the tiny model's steps add well under a second to its start-up.
pub const EXACT_STEPS: usize = 6;

/// The epochs [`EXACT_STEPS`] are shared over, equally.
pub const EXACT_EPOCHS: usize = 2;

/// The training steps (K) of step 14's FSDP and DDP runs.
pub const FSDP_STEPS: usize = 3;

/// The training steps of step 15's runs.
pub const TP_STEPS: usize = 3;

/// The training steps of step 16's runs.
pub const MESH_STEPS: usize = 3;

/// Images per DP replica and step in step 16's runs.
pub const MESH_BATCH: usize = 8;

#[cfg(test)]
mod tests {
    use tch_distributed::DistributedSampler;

    use super::{worlds, Gains, Plan, Variation};

    /// The exact comparison's two runs take the same global batches, EXACT_STEPS of them
    /// over EXACT_EPOCHS epochs, on one node of the main run's ranks per node.
    #[test]
    fn the_exact_runs_take_the_same_steps_on_one_node() {
        let plan = drawn_for(7);
        for seed in 0..8 {
            let v = Variation::for_step(&plan, seed);
            let (many, one) = (
                v.for_exact_steps(v.ranks_per_node, v.ranks_per_node),
                v.for_exact_steps(v.ranks_per_node, 1),
            );
            assert_eq!(
                (many.nodes, many.ranks_per_node, many.batch_size),
                (1, v.ranks_per_node, v.batch_size)
            );
            assert_eq!(
                (one.nodes, one.world_size(), one.batch_size),
                (1, 1, v.batch_size * v.ranks_per_node)
            );
            for run in [&many, &one] {
                let global_batch = run.batch_size * run.world_size();
                assert_eq!(run.train_subset % global_batch, 0, "whole batches only");
                assert_eq!(run.train_subset / global_batch * run.epochs, super::EXACT_STEPS);
                assert_eq!(run.epochs, super::EXACT_EPOCHS);
            }
        }
    }

    /// A global rank as a program computes it from (node, local rank, nodes, ranks per node).
    type RankFormula = fn(usize, usize, usize, usize) -> usize;
    /// The rank a sampler is given, from (node, local rank, global rank).
    type SamplerRank = fn(usize, usize, usize) -> usize;

    /// Each rank's (node, local rank, global rank) in a world of `nodes` x `per_node`.
    fn ranks(nodes: usize, per_node: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        (0..nodes)
            .flat_map(move |node| (0..per_node).map(move |local| (node, local, node * per_node + local)))
    }

    /// Each rank's training indices for a sampler built as `(replicas, rank)` says from
    /// (node, local rank, global rank); `None` where the sampler refuses (a rank beyond
    /// its replicas).
    fn shares(v: &Variation, replicas: usize, rank: SamplerRank) -> Vec<Option<Vec<usize>>> {
        ranks(v.nodes, v.ranks_per_node)
            .map(|(node, local, global)| {
                DistributedSampler::with_defaults(v.train_subset, replicas, rank(node, local, global))
                    .ok()
                    .map(|s| s.indices())
            })
            .collect()
    }

    /// Every world a verification of any step can draw shows every mistake that depends
    /// on the world, written as the mistake computes: a world hiding one would let a
    /// program with it earn full marks on that draw (issue 48). The comparison's N ranks
    /// and step 13's stages take the main run's world and must be able to (at most one
    /// stage per layer of the model); step 14's runs take one node of it.
    #[test]
    fn every_draw_exposes_every_mistake_of_the_world() {
        let mut seen = std::collections::BTreeSet::new();
        for step in 0..=lab_course::LAST_STEP {
            for seed in 0..500 {
                let v = Variation::for_step(&drawn_for(step), seed);
                let (nodes, per_node, world) = (v.nodes, v.ranks_per_node, v.world_size());
                let what = format!("step {step} seed {seed}: {nodes} node(s) x {per_node}");
                assert!(worlds(step).contains(&(nodes, per_node)), "{what}: not a world of the step");
                seen.insert((step, nodes, per_node));
                if step < 2 {
                    // No ranks yet: one process, and no mistake of the world to show.
                    assert_eq!(world, 1, "{what}");
                    continue;
                }
                // The world size (step 2), the group's size (step 4), the divisor of
                // the metrics (step 9), the ranks a node spawns (step 10).
                for (mistake, wrong) in [
                    ("num_nodes + num_gpus", nodes + per_node),
                    ("num_gpus alone", per_node),
                    ("num_nodes alone", nodes),
                ] {
                    assert_ne!(wrong, world, "{what}: `{mistake}` for the world size passes");
                }
                // The global rank (step 4).
                let formulas: [(&str, RankFormula); 4] = [
                    ("local_rank", |_, local, _, _| local),
                    ("local_rank * num_nodes + node_id", |node, local, nodes, _| local * nodes + node),
                    ("node_id * num_nodes + local_rank", |node, local, nodes, _| node * nodes + local),
                    ("node_id + local_rank", |node, local, _, _| node + local),
                ];
                for (mistake, rank) in formulas {
                    assert!(
                        ranks(nodes, per_node).any(|(n, l, g)| rank(n, l, nodes, per_node) != g),
                        "{what}: a global rank of `{mistake}` numbers every rank right"
                    );
                }
                // Who prepares the data (step 5) and who prints (step 4): once per node
                // by local rank 0, and only global rank 0 prints.
                let nodes_with_data = |prepares: fn(usize, usize) -> bool| -> Vec<usize> {
                    let mut out: Vec<usize> = ranks(nodes, per_node)
                        .filter(|&(_, l, g)| prepares(l, g))
                        .map(|(n, _, _)| n)
                        .collect();
                    out.dedup();
                    out
                };
                let once_per_node: Vec<usize> = (0..nodes).collect();
                assert_eq!(nodes_with_data(|local, _| local == 0), once_per_node, "{what}");
                assert_ne!(
                    nodes_with_data(|_, global| global == 0),
                    once_per_node,
                    "{what}: preparing on global rank 0 alone reaches every node"
                );
                let preparations = ranks(nodes, per_node).count();
                assert_ne!(preparations, nodes, "{what}: every rank preparing is once per node");
                let printers = ranks(nodes, per_node).filter(|&(_, local, _)| local == 0).count();
                assert_ne!(printers, 1, "{what}: printing on each local rank 0 prints once");
                // The sampler (step 6): every rank must get another share than the right one.
                let right = shares(&v, world, |_, _, global| global);
                assert!(right.iter().all(Option::is_some), "{what}");
                let samplers: [(&str, usize, SamplerRank); 3] = [
                    ("num_replicas = num_gpus", per_node, |_, _, global| global),
                    ("rank = local rank", world, |_, local, _| local),
                    ("num_replicas = num_gpus, rank = local rank", per_node, |_, local, _| local),
                ];
                for (mistake, replicas, rank) in samplers {
                    assert_ne!(
                        shares(&v, replicas, rank),
                        right,
                        "{what}: a sampler with {mistake} shares right"
                    );
                }
                // Padding (step 6): sizes the world does not divide.
                assert!(
                    !v.train_subset.is_multiple_of(world) && !v.test_subset.is_multiple_of(world),
                    "{what}"
                );
                // Step 14's FSDP and DDP runs: one node of them, at least 2 shards.
                let fsdp = v.for_fsdp();
                assert_eq!((fsdp.nodes, fsdp.ranks_per_node), (1, per_node), "{what}");
                // Step 13 cuts the model into one stage per rank.
                assert!((2..=labkit::model::LAYERS.len()).contains(&world), "{what}: {world} stages");
            }
        }
        // Both worlds are drawn (the draw stays hidden), for every step with ranks.
        for step in 2..=lab_course::LAST_STEP {
            for &(nodes, per_node) in worlds(step) {
                assert!(
                    seen.contains(&(step, nodes, per_node)),
                    "step {step} never draws {nodes} x {per_node}"
                );
            }
        }
    }

    /// An observation recorded before `program_seed` had its name still reads (the
    /// fixtures are all re-written with the new name).
    #[test]
    fn an_init_seed_reads_as_the_program_seed() {
        let mut recorded = serde_json::to_value(Variation::for_step(&drawn_for(3), 7)).unwrap();
        let map = recorded.as_object_mut().unwrap();
        let seed = map.remove("program_seed").unwrap();
        map.insert("init_seed".into(), seed.clone());
        let read: Variation = serde_json::from_value(recorded).unwrap();
        assert_eq!(serde_json::json!(read.program_seed), seed);
    }

    /// A plan of step `step` without the gains that change a draw (momentum).
    fn drawn_for(step: u8) -> Plan {
        Plan { step, gains: vec![], runs: vec![] }
    }

    /// Momentum where the program has `--momentum` (the step that declares
    /// [`Gains::Momentum`] and after: checks' `each_gain_is_the_step_whose_title_says_so`),
    /// on some seeds and not others, passed to the programs exactly then; never where the
    /// program has no `--momentum`.
    #[test]
    fn momentum_is_drawn_where_the_program_has_it_and_passed_when_drawn() {
        use super::super::command_line::{common_args, Stop};
        let with = Plan { step: 12, gains: vec![Gains::NodeOptions, Gains::Momentum], runs: vec![] };
        let without = Plan { step: 12, gains: vec![Gains::NodeOptions], runs: vec![] };
        let drawn: Vec<f64> = (0..40).map(|seed| Variation::for_step(&with, seed).momentum).collect();
        assert!(drawn.contains(&0.0) && drawn.contains(&super::MOMENTUM), "{drawn:?}");
        assert!((0..40).all(|seed| Variation::for_step(&without, seed).momentum == 0.0));
        for plan in [&with, &without] {
            for seed in 0..40 {
                let v = Variation::for_step(plan, seed);
                let args = common_args(plan, &v, 0, Stop::AtTheLastEpoch);
                let passed = args.iter().position(|a| a == "--momentum").map(|i| args[i + 1].clone());
                let expected = (v.momentum != 0.0).then(|| "0.9".to_string());
                assert_eq!(passed, expected, "{:?} seed {seed}", plan.gains);
            }
        }
        // Momentum is drawn last: every other draw is the same with it or without.
        for seed in 0..40 {
            let (a, b) = (Variation::for_step(&with, seed), Variation::for_step(&without, seed));
            assert_eq!(
                (a.nodes, a.ranks_per_node, a.train_subset, a.program_seed),
                (b.nodes, b.ranks_per_node, b.train_subset, b.program_seed)
            );
        }
        // Plain SGD is recorded as before the draw (no field), and reads back as such.
        let plain_seed = (0..40).find(|&s| Variation::for_step(&with, s).momentum == 0.0).unwrap();
        let drawn_seed = (0..40).find(|&s| Variation::for_step(&with, s).momentum != 0.0).unwrap();
        let plain = serde_json::to_value(Variation::for_step(&with, plain_seed)).unwrap();
        assert!(plain.get("momentum").is_none(), "{plain}");
        assert_eq!(serde_json::from_value::<Variation>(plain).unwrap().momentum, 0.0);
        let drawn = serde_json::to_value(Variation::for_step(&with, drawn_seed)).unwrap();
        assert_eq!(serde_json::from_value::<Variation>(drawn).unwrap().momentum, super::MOMENTUM);
    }
}
