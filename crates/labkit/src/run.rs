//! What this process has run: how many epochs `train` has run (the trace, the progress
//! bar and the checker's probes number epochs by it), and whether this is rank 0.
//!
//! The run's *settings* are not here: they travel with the model
//! (`WideResNet::new(&vs.root(), &args.run, norm)`, read by `train` and `test`) and to
//! `print_summary(&args.run, …)`. The lab's `train(model, optimizer, loader)` has no
//! epoch argument, so the count is kept here, the one piece of run state labkit holds
//! for the whole process (besides the report's epoch history).
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::trace;

/// The epoch the next `train` call runs (0-based). Process-wide because the lab's
/// `train(model, optimizer, loader)` has no epoch argument (the DLI lab's has none).
static NEXT_EPOCH: AtomicUsize = AtomicUsize::new(0);

/// The training steps `train` has run in this process, over its epochs (a resumed run
/// counts from its resumption): the step numbers of the traced steps.
static STEPS_RUN: AtomicUsize = AtomicUsize::new(0);

/// Counts the training steps `train` has run (0-based).
pub(crate) fn next_step() -> usize {
    STEPS_RUN.fetch_add(1, Ordering::SeqCst)
}

/// The number `next_step` gives the step now running.
pub(crate) fn this_step() -> usize {
    STEPS_RUN.load(Ordering::SeqCst)
}

/// Counts the epochs `train` has run (0-based; a resumed run continues the count).
pub(crate) fn next_epoch() -> usize {
    NEXT_EPOCH.fetch_add(1, Ordering::SeqCst)
}

/// A resumed run's first epoch.
pub(crate) fn continue_at(epoch: usize) {
    NEXT_EPOCH.store(epoch, Ordering::SeqCst);
}

/// Rank 0 of the job: the global rank once the process group exists, the local rank
/// before that (a single-process program is rank 0).
pub(crate) fn is_rank_zero() -> bool {
    trace::rank().unwrap_or(0) == 0
}
