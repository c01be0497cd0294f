//! Tensor parallelism in the lab (steps 15 and 16): what `--tensor-parallel T` cannot
//! run with, refused before any rank starts (the split model itself: `split_model`).
//! Step 15 splits over the whole world ([`check_tensor_parallel`]); step 16 lays the
//! ranks out on a 2-D mesh, DDP over "dp" × TP over "tp" ([`check_device_mesh`]).
use crate::options::RunOptions;
use crate::widths::Architecture;

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
    refusal(request, run, Layout::WholeWorld)
}

/// Why the model cannot be split over `--tensor-parallel` ranks on a 2-D mesh (step
/// 16), or `None` when it can: the world laid out as `[W/T, T]`, "dp" × "tp", so T
/// need only divide the world size, and `--sync-batch-norm` is SyncBatchNorm over
/// the "dp" dimension, which needs one (T below the world size).
///
/// ```
/// use clap::Parser;
/// use labkit::{device_mesh_refusal, RunOptions, TensorParallelRequest};
///
/// #[derive(Parser)]
/// struct Args {
///     #[command(flatten)]
///     run: RunOptions,
/// }
/// let run = Args::parse_from(["lab", "--width", "narrow"]).run;
/// let on_four = TensorParallelRequest { tp_size: 2, world_size: 4, pipeline: false, fsdp: false, sync_batch_norm: true };
/// assert_eq!(device_mesh_refusal(on_four, &run), None);
/// let on_six = TensorParallelRequest { tp_size: 4, world_size: 6, ..on_four };
/// assert!(device_mesh_refusal(on_six, &run).unwrap().contains("does not divide"));
/// ```
pub fn device_mesh_refusal(request: TensorParallelRequest, run: &RunOptions) -> Option<String> {
    refusal(request, run, Layout::Mesh)
}

/// How the ranks are laid out for tensor parallelism.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Step 15: one TP group of every rank.
    WholeWorld,
    /// Step 16: a `[W/T, T]` mesh, TP groups of T ranks, DP groups across them.
    Mesh,
}

fn refusal(request: TensorParallelRequest, run: &RunOptions, layout: Layout) -> Option<String> {
    let TensorParallelRequest { tp_size, world_size, pipeline, fsdp, sync_batch_norm } = request;
    if tp_size < 2 {
        return Some(format!(
            "--tensor-parallel {tp_size}: a layer split over fewer than 2 ranks is not split; run --tensor-parallel 2 (or more) on as many ranks"
        ));
    }
    if layout == Layout::WholeWorld && tp_size != world_size {
        return Some(format!(
            "--tensor-parallel {tp_size} on {world_size} ranks: every rank of the job is one TP group, so T must be the world size; run --tensor-parallel {world_size}, or {tp_size} ranks (--num-gpus {tp_size})"
        ));
    }
    if layout == Layout::Mesh && (tp_size > world_size || !world_size.is_multiple_of(tp_size)) {
        return Some(format!(
            "--tensor-parallel {tp_size} on {world_size} ranks: {tp_size} does not divide the world size, so the ranks cannot be laid out as a mesh of data-parallel replicas × {tp_size} TP ranks; use a T that divides {world_size}, or a world size that is a multiple of {tp_size}"
        ));
    }
    if pipeline || fsdp {
        let other = if pipeline { "--pipeline" } else { "--fsdp" };
        return Some(format!(
            "--tensor-parallel with {other}: each splits the model its own way over the same ranks; choose one"
        ));
    }
    if sync_batch_norm && layout == Layout::Mesh && tp_size == world_size {
        return Some(format!(
            "--sync-batch-norm with --tensor-parallel {tp_size} on {world_size} ranks: SyncBatchNorm runs over the mesh's \"dp\" dimension, and with T = the world size there is none (each TP rank already normalises the whole batch); leave --sync-batch-norm out, or run more ranks than T"
        ));
    }
    if sync_batch_norm && layout == Layout::WholeWorld {
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
    if run.model == Architecture::Mlp {
        return Some(
            "--model mlp with --tensor-parallel: the plan splits the WideResNet's blocks, and the perceptron has none; leave --model out with --tensor-parallel"
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

/// Ends the program with exit code 2 when the model cannot be split on a 2-D mesh as
/// asked ([`device_mesh_refusal`] says why): call it in `main`, before any rank starts.
pub fn check_device_mesh(request: TensorParallelRequest, run: &RunOptions) {
    if let Some(why) = device_mesh_refusal(request, run) {
        eprintln!("error: {why}");
        std::process::exit(2);
    }
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
        let perceptron = run(&["--width", "narrow", "--model", "mlp"]);
        assert!(refusal(TWO, &perceptron).contains("--model mlp with --tensor-parallel"));
        // The narrow model's blocks have 16, 32 and 64 channels; the lab's 160, 320, 640.
        let three = TensorParallelRequest { tp_size: 3, world_size: 3, ..TWO };
        assert!(refusal(three, &narrow).contains("cannot split a block of 16 channels"));
        let five = TensorParallelRequest { tp_size: 5, world_size: 5, ..TWO };
        assert_eq!(tensor_parallel_refusal(five, &run(&["--width", "lab"])), None);
        assert!(refusal(five, &narrow).contains("divides 16, 32 and 64"));
    }

    /// Step 16's mesh needs only T dividing the world, and takes --sync-batch-norm
    /// (over "dp") where there is a "dp" dimension; step 15's refusals stay as they were.
    #[test]
    fn the_mesh_needs_t_to_divide_the_world_and_takes_sync_batch_norm_over_dp() {
        let narrow = run(&["--width", "narrow"]);
        let four = TensorParallelRequest { world_size: 4, ..TWO };
        assert_eq!(device_mesh_refusal(four, &narrow), None);
        assert_eq!(
            device_mesh_refusal(TensorParallelRequest { sync_batch_norm: true, ..four }, &narrow),
            None
        );
        // T = W is still a mesh (one DP replica), without SyncBatchNorm: no "dp" to sync over.
        assert_eq!(device_mesh_refusal(TWO, &narrow), None);
        assert!(device_mesh_refusal(TensorParallelRequest { sync_batch_norm: true, ..TWO }, &narrow)
            .unwrap()
            .contains("there is none"));
        let six = TensorParallelRequest { tp_size: 4, world_size: 6, ..TWO };
        assert!(device_mesh_refusal(six, &narrow).unwrap().contains("4 does not divide the world size"));
        let more_than_world = TensorParallelRequest { tp_size: 4, world_size: 2, ..TWO };
        assert!(device_mesh_refusal(more_than_world, &narrow).unwrap().contains("does not divide"));
        // What no layout can run is refused on the mesh too.
        let mesh = |request| device_mesh_refusal(request, &narrow).unwrap();
        assert!(mesh(TensorParallelRequest { fsdp: true, ..four }).contains("--fsdp"));
        assert!(mesh(TensorParallelRequest { tp_size: 1, ..four }).contains("fewer than 2"));
        // Step 15 on the same requests: T must be the world, SyncBatchNorm refused.
        assert!(tensor_parallel_refusal(four, &narrow).unwrap().contains("T must be the world size"));
        assert!(tensor_parallel_refusal(TensorParallelRequest { sync_batch_norm: true, ..TWO }, &narrow)
            .unwrap()
            .contains("--sync-batch-norm with --tensor-parallel"));
    }
}
