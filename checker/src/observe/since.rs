//! From which step a program has what the checker's runs rely on, in the lab's words:
//! one table, read wherever a verification plans its runs (what to run, with which
//! options and environment) and wherever a check asks what the program already does.
//! A step that changes how its program is run adds its line here; the test below ties
//! each line to the step's title in `lab_course::STEPS`, so that a step inserted before
//! them cannot leave the numbers behind.

/// Step 1: `--num-nodes`, `--num-gpus`, `--node-id` (and so `--help` and a bad value).
pub const NODE_OPTIONS: u8 = 1;
/// Step 4: the process group, over the rendezvous address the program reads
/// (`MASTER_ADDR`, `MASTER_PORT`).
pub const PROCESS_GROUP: u8 = 4;
/// Step 5: the data set downloaded once per node, then a barrier (the mirror that
/// counts downloads, a slow preparation).
pub const DATA_ONCE_PER_NODE: u8 = 5;
/// Step 7: DDP, so N ranks × batch B must train as 1 rank × N·B.
pub const DDP: u8 = 7;
/// Step 8: throughput measured behind a barrier (a slow rank shows a missing one).
pub const THROUGHPUT_BARRIER: u8 = 8;
/// Step 10: the program spawns its node's ranks (one launch per node; a failing rank
/// must bring the others down).
pub const SPAWNS_ITS_RANKS: u8 = 10;
/// Step 11: the quick evaluation and its early stop.
pub const QUICK_EVALUATION: u8 = 11;
/// Step 12: checkpoints and `--resume` (a slow save shows a missing barrier).
pub const CHECKPOINTS: u8 = 12;
/// Step 13: the model cut into pipeline stages.
pub const PIPELINE: u8 = 13;
/// Step 14: FSDP.
pub const FSDP: u8 = 14;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_the_step_whose_title_says_so() {
        for (step, words) in [
            (NODE_OPTIONS, "--num-nodes"),
            (PROCESS_GROUP, "process group"),
            (DATA_ONCE_PER_NODE, "once per node"),
            (DDP, "DDP"),
            (THROUGHPUT_BARRIER, "throughput"),
            (SPAWNS_ITS_RANKS, "spawns its own ranks"),
            (QUICK_EVALUATION, "quick evaluation"),
            (CHECKPOINTS, "checkpoint"),
            (PIPELINE, "pipeline"),
            (FSDP, "FSDP"),
        ] {
            let title = lab_course::STEPS[usize::from(step)];
            assert!(title.contains(words), "step {step} is {title:?}, not the one about {words:?}");
        }
    }
}
