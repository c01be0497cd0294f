//! The hidden variations of a verification: world, data subsets, batch, epochs and the
//! initial weights' seed, all drawn from `--seed` for each step.
use serde::{Deserialize, Serialize};

use super::placement::{describe_placement, gpus, placement};

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
}

impl Variation {
    pub fn for_step(step: u8, seed: u64) -> Variation {
        // SplitMix64: reproducible from the seed, on every machine.
        let mut d = labkit::Rng::new(seed ^ (u64::from(step) << 32));
        let (nodes, ranks_per_node) = match step {
            0 | 1 => (1, 1),
            // Step 4 is about ranks across nodes: two simulated nodes.
            4 => (2, 2),
            2 | 3 | 5..=9 => [(1, 2), (1, 3), (2, 2)][d.below(3) as usize],
            _ => [(1, 2), (1, 3)][d.below(2) as usize],
        };
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

    /// The settings of step 14's two runs, FSDP and DDP: the main run's world, one
    /// epoch of [`FSDP_STEPS`] full global batches (no padding, no short batch): the
    /// weights of both after K steps are compared to 1e-5, and float32 rounding (a
    /// reduce-scatter sums in another order than DDP's all-reduce) grows with every step.
    pub fn for_fsdp(&self) -> Variation {
        let global_batch = self.batch_size * self.world_size();
        Variation {
            train_subset: FSDP_STEPS * global_batch,
            test_subset: global_batch,
            epochs: 1,
            ..self.clone()
        }
    }

    pub fn world_size(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    pub fn describe(&self) -> String {
        format!(
            "seed {}: {}, {} training and {} validation images, batch {}, {} epochs, program --seed {}",
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
            self.program_seed
        )
    }
}

/// The training steps (K) of step 14's FSDP and DDP runs.
pub const FSDP_STEPS: usize = 3;

#[cfg(test)]
mod tests {
    use super::Variation;

    /// An observation recorded before `program_seed` had its name still reads (the
    /// fixtures are all re-written with the new name).
    #[test]
    fn an_init_seed_reads_as_the_program_seed() {
        let mut recorded = serde_json::to_value(Variation::for_step(3, 7)).unwrap();
        let map = recorded.as_object_mut().unwrap();
        let seed = map.remove("program_seed").unwrap();
        map.insert("init_seed".into(), seed.clone());
        let read: Variation = serde_json::from_value(recorded).unwrap();
        assert_eq!(serde_json::json!(read.program_seed), seed);
    }
}
