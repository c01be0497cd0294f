//! The run this process belongs to: the settings labkit's pieces follow (`--seed`, the
//! speed settings), how many epochs `train` has run, and whether this is rank 0.
//!
//! The step programs hand `train`, `test`, the model, the samplers and the summary
//! nothing but what the lab's Python hands them, so the settings cannot travel as
//! arguments from the program: `RunOptions::apply` records them here, once, and each
//! of those entry points reads them once and passes them on explicitly. This is the
//! one place in labkit that holds run state for the whole process.
use std::sync::{Mutex, MutexGuard};

use tch_distributed as dist;

use crate::perf::PerfSettings;
use crate::trace;

/// What `RunOptions::apply` recorded for this process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RunSettings {
    /// `--seed`; `None` outside a step program (library use, tests): nothing is seeded.
    pub seed: Option<u64>,
    /// `--amp`, `--channels-last`, `--width`, `--peak-tflops`, `--device`.
    pub perf: PerfSettings,
}

/// The settings and the epoch count, behind one lock.
struct Run {
    settings: Option<RunSettings>,
    /// The epoch the next `train` call runs (0-based).
    next_epoch: usize,
}

fn run() -> MutexGuard<'static, Run> {
    static RUN: Mutex<Run> = Mutex::new(Run { settings: None, next_epoch: 0 });
    RUN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records the settings for this process (`RunOptions::apply`; tests).
pub fn configure(settings: RunSettings) {
    run().settings = Some(settings);
}

/// The recorded settings; the defaults when nothing was recorded.
pub fn settings() -> RunSettings {
    run().settings.unwrap_or_default()
}

/// Counts the epochs `train` has run (0-based; a resumed run continues the count),
/// for the trace, the progress bar and the checker's probes.
pub(crate) fn next_epoch() -> usize {
    let mut run = run();
    run.next_epoch += 1;
    run.next_epoch - 1
}

/// A resumed run's first epoch.
pub(crate) fn continue_at(epoch: usize) {
    run().next_epoch = epoch;
}

/// Rank 0 of the job: the global rank once the process group exists, the local rank
/// before that (a single-process program is rank 0).
pub(crate) fn is_rank_zero() -> bool {
    match dist::get_rank() {
        Ok(rank) => rank == 0,
        Err(_) => trace::local_rank().unwrap_or(0) == 0,
    }
}
