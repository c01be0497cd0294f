//! Tensor parallelism in the lab (step 15): what `--tensor-parallel T` cannot run with,
//! refused before any rank starts, and what the trace records of a model split over a
//! TP group after each epoch.
use std::collections::BTreeMap;
use std::sync::Arc;

use lab_trace::event;
use tch::{nn, Tensor};
use tch_distributed as dist;

use crate::options::RunOptions;
use crate::trace;

/// What a tensor-parallel run asks for, for [`check_tensor_parallel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorParallelRequest {
    /// `--tensor-parallel T`: the ranks each layer is split over.
    pub tp_size: usize,
    /// The job's world size.
    pub world_size: usize,
    /// `--pipeline`.
    pub pipeline: bool,
    /// `--fsdp`.
    pub fsdp: bool,
    /// `--sync-batch-norm`.
    pub sync_batch_norm: bool,
}

/// Why the model cannot be split over `--tensor-parallel` ranks with these options, or
/// `None` when it can. Step 15's whole world is one TP group, so T must be the world
/// size.
///
/// ```
/// use clap::Parser;
/// use labkit::{tensor_parallel_refusal, RunOptions, TensorParallelRequest};
///
/// #[derive(Parser)]
/// struct Args {
///     #[command(flatten)]
///     run: RunOptions,
/// }
/// let run = Args::parse_from(["lab", "--width", "narrow"]).run;
/// let request = TensorParallelRequest { tp_size: 2, world_size: 2, pipeline: false, fsdp: false, sync_batch_norm: false };
/// assert_eq!(tensor_parallel_refusal(request, &run), None);
/// let on_three = TensorParallelRequest { world_size: 3, ..request };
/// assert!(tensor_parallel_refusal(on_three, &run).unwrap().contains("--tensor-parallel 3"));
/// ```
pub fn tensor_parallel_refusal(request: TensorParallelRequest, run: &RunOptions) -> Option<String> {
    let TensorParallelRequest { tp_size, world_size, pipeline, fsdp, sync_batch_norm } = request;
    if tp_size < 2 {
        return Some(format!(
            "--tensor-parallel {tp_size}: a layer split over fewer than 2 ranks is not split; run --tensor-parallel 2 (or more) on as many ranks"
        ));
    }
    if tp_size != world_size {
        return Some(format!(
            "--tensor-parallel {tp_size} on {world_size} ranks: every rank of the job is one TP group, so T must be the world size; run --tensor-parallel {world_size}, or {tp_size} ranks (--num-gpus {tp_size})"
        ));
    }
    if pipeline || fsdp {
        let other = if pipeline { "--pipeline" } else { "--fsdp" };
        return Some(format!(
            "--tensor-parallel with {other}: each splits the model its own way over the same ranks; choose one"
        ));
    }
    if sync_batch_norm {
        return Some(
            "--sync-batch-norm with --tensor-parallel: SyncBatchNorm over the world would average TP peers' different channels; each TP rank already normalises the whole batch, leave --sync-batch-norm out"
                .into(),
        );
    }
    if run.checkpoint.save_every.is_some() || run.checkpoint.resume {
        return Some(
            "--save-every and --resume with --tensor-parallel: a checkpoint is one whole model written by rank 0, but each TP rank holds a slice of every block; train without checkpoints"
                .into(),
        );
    }
    let widths = run.width.0;
    // Each block's first conv (and its BatchNorm) is split by output channel: the widths
    // of stages 1 to 3.
    if let Some(width) = widths[1..].iter().find(|w| **w % tp_size as i64 != 0) {
        return Some(format!(
            "--tensor-parallel {tp_size} cannot split a block of {width} channels (--width {}) into equal slices: use a T that divides {}, {} and {}",
            run.width, widths[1], widths[2], widths[3]
        ));
    }
    None
}

/// Ends the program with exit code 2 when the model cannot be split as asked
/// ([`tensor_parallel_refusal`] says why): call it in `main`, before any rank starts.
pub fn check_tensor_parallel(request: TensorParallelRequest, run: &RunOptions) {
    if let Some(why) = tensor_parallel_refusal(request, run) {
        eprintln!("error: {why}");
        std::process::exit(2);
    }
}

/// Every variable's shape in `vs`, before the model is split.
pub(crate) fn shapes(vs: &nn::VarStore) -> BTreeMap<String, Vec<i64>> {
    vs.variables().into_iter().map(|(name, t)| (name, t.size())).collect()
}

/// A model split over a TP group: its variables (as split) and their unsplit shapes.
#[derive(Debug)]
pub(crate) struct SplitModel {
    group: Arc<dist::ProcessGroup>,
    variables: BTreeMap<String, Tensor>,
    whole: BTreeMap<String, Vec<i64>>,
}

impl SplitModel {
    pub(crate) fn new(
        vs: &nn::VarStore,
        group: &Arc<dist::ProcessGroup>,
        whole: BTreeMap<String, Vec<i64>>,
    ) -> SplitModel {
        SplitModel { group: group.clone(), variables: vs.variables().into_iter().collect(), whole }
    }

    /// The trainable values this rank holds, and the unsplit model's.
    pub(crate) fn held(&self) -> (i64, i64) {
        let trainable = self.variables.iter().filter(|(_, t)| t.requires_grad());
        trainable.fold((0, 0), |(held, whole), (name, t)| {
            let full = self.whole.get(name).map_or(t.numel() as i64, |s| s.iter().product());
            (held + t.numel() as i64, whole + full)
        })
    }

    /// What TP rank 0 prints once the model is split.
    pub(crate) fn describe(&self) -> String {
        let (held, whole) = self.held();
        describe(self.group.rank(), self.group.world_size(), held, whole)
    }

    /// Records this rank's slices ([`event::TensorSlices`]) and, on TP rank 0, the
    /// trainable parameters gathered whole from every rank's slice
    /// ([`event::ParameterValues`], `sharded`). Collective: every TP rank calls it,
    /// the variables in name order.
    pub(crate) fn record(&self, epoch: usize) -> dist::Result<()> {
        let (rank, size) = (self.group.rank(), self.group.world_size());
        let mut slices = Vec::new();
        let mut gathered = Vec::new();
        let _no_grad = tch::no_grad_guard();
        for (name, tensor) in &self.variables {
            let shape = tensor.size();
            let whole = self.whole.get(name).cloned().unwrap_or_else(|| shape.clone());
            // The split dimension is the one this rank holds less of.
            let dim = (0..shape.len()).find(|&d| shape.get(d) != whole.get(d));
            let (offset, length) = match dim {
                Some(d) => (rank as i64 * shape[d], shape[d]),
                None => (0, shape.first().copied().unwrap_or(1)),
            };
            let digest = trace::fingerprint(&[tensor.shallow_clone()]).digest;
            slices.push(event::ParameterSlice {
                name: name.clone(),
                shape,
                whole,
                dim,
                offset,
                length,
                digest,
            });
            if tensor.requires_grad() {
                let value = match dim {
                    Some(d) => dist::gather_from_region(tensor, d as i64, &self.group)?,
                    None => tensor.shallow_clone(),
                };
                gathered.push((name.clone(), value));
            }
        }
        trace::record(event::TensorSlices { epoch, tp_rank: rank, tp_size: size, parameters: slices });
        if rank == 0 {
            trace::record_parameter_values(epoch, true, &gathered);
        }
        Ok(())
    }
}

/// "tensor parallel over 2 ranks: rank 0 holds 91,234 of the model's 173,778 parameters
/// (52.5%; the split layers' 1/2 and the replicated ones whole)".
fn describe(rank: usize, size: usize, held: i64, whole: i64) -> String {
    format!(
        "tensor parallel over {size} ranks: rank {rank} holds {} of the model's {} parameters ({:.1}%; the split layers' 1/{size} and the replicated ones whole)",
        crate::report::grouped(held),
        crate::report::grouped(whole),
        100.0 * held as f64 / whole.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        run: RunOptions,
    }

    fn run(options: &[&str]) -> RunOptions {
        Args::parse_from(std::iter::once("lab").chain(options.iter().copied())).run
    }

    const TWO: TensorParallelRequest = TensorParallelRequest {
        tp_size: 2,
        world_size: 2,
        pipeline: false,
        fsdp: false,
        sync_batch_norm: false,
    };

    #[test]
    fn each_option_that_cannot_combine_is_refused_by_name() {
        let narrow = run(&["--width", "narrow"]);
        assert_eq!(tensor_parallel_refusal(TWO, &narrow), None);
        let refusal = |request, run: &RunOptions| tensor_parallel_refusal(request, run).unwrap();
        assert!(refusal(TensorParallelRequest { tp_size: 1, world_size: 1, ..TWO }, &narrow)
            .contains("fewer than 2"));
        assert!(refusal(TensorParallelRequest { world_size: 4, ..TWO }, &narrow)
            .contains("run --tensor-parallel 4"));
        assert!(refusal(TensorParallelRequest { pipeline: true, ..TWO }, &narrow).contains("--pipeline"));
        assert!(refusal(TensorParallelRequest { fsdp: true, ..TWO }, &narrow).contains("--fsdp"));
        assert!(refusal(TensorParallelRequest { sync_batch_norm: true, ..TWO }, &narrow)
            .contains("--sync-batch-norm"));
        let saving = run(&["--width", "narrow", "--save-every", "1"]);
        assert!(refusal(TWO, &saving).contains("--save-every and --resume"));
        // The narrow model's blocks have 16, 32 and 64 channels; the lab's 160, 320, 640.
        let three = TensorParallelRequest { tp_size: 3, world_size: 3, ..TWO };
        assert!(refusal(three, &narrow).contains("cannot split a block of 16 channels"));
        let five = TensorParallelRequest { tp_size: 5, world_size: 5, ..TWO };
        assert_eq!(tensor_parallel_refusal(five, &run(&["--width", "lab"])), None);
        assert!(refusal(five, &narrow).contains("divides 16, 32 and 64"));
    }

    #[test]
    fn rank_0_says_what_it_holds_of_the_whole_model() {
        assert_eq!(
            describe(0, 2, 88_000, 176_000),
            "tensor parallel over 2 ranks: rank 0 holds 88,000 of the model's 176,000 parameters (50.0%; the split layers' 1/2 and the replicated ones whole)"
        );
    }
}
