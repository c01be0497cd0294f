//! The checker's probes: how it makes a rank fail, stall or run late, makes preparing
//! the data slow, gives every rank a different initial model, compares N ranks with
//! one, and crashes a checkpoint, all through environment variables. The lab's code
//! reaches them at a few named points (`at_epoch_start`, `at_epoch_end`,
//! `before_preparing_data`, `seed_before_model`, `equivalence_run`,
//! `in_checkpoint_commit`) and reads no environment itself; a student reading `train`
//! sees one line per point.
use std::time::Duration;

use crate::error::Result;
use crate::trace;

/// Environment variable the checker sets (to 1) to give every rank a different initial
/// model, seeded with the program's `--seed` plus the rank's local rank, proving that
/// DDP makes them equal.
pub const SEED_PER_RANK_ENV: &str = "DDP_LAB_SEED_PER_RANK";

/// Environment variable the checker sets to a global rank that then ends each
/// `train` call [`SLOW_RANK_DELAY`] late (a slow rank, as on a busy GPU).
pub const SLOW_RANK_ENV: &str = "DDP_LAB_SLOW_RANK";
/// How late the slow rank is.
pub const SLOW_RANK_DELAY: Duration = Duration::from_millis(1500);
/// Environment variable the checker sets to a global rank whose `train` then fails
/// (a rank that dies), to see the others end instead of hanging.
pub const FAIL_RANK_ENV: &str = "DDP_LAB_FAIL_RANK";

/// With [`FAIL_RANK_ENV`]: fail only in this epoch (0-based).
pub const FAIL_AT_EPOCH_ENV: &str = "DDP_LAB_FAIL_AT_EPOCH";
/// With [`FAIL_RANK_ENV`]: a marker file path; the rank fails only if it does not
/// exist yet, and creates it (a rank that dies once, for restart tests).
pub const FAIL_ONCE_ENV: &str = "DDP_LAB_FAIL_ONCE";
/// Environment variable naming a global rank that gets stuck (sleeps an hour) at the
/// end of its `train` call, before the epoch's next collective.
pub const STALL_RANK_ENV: &str = "DDP_LAB_STALL_RANK";

/// Environment variable the checker sets (to 1) to make every preparation of the data
/// set start [`SLOW_PREPARE_DELAY`] late, so that a rank which does not wait at the
/// barrier after it always begins reading before the data is ready (step 5).
pub const SLOW_PREPARE_ENV: &str = "DDP_LAB_SLOW_PREPARE";
/// How late preparing the data starts under [`SLOW_PREPARE_ENV`]. Ranks leave
/// `init_process_group` within milliseconds of one another; a second is far more than
/// a loaded machine's scheduling jitter and costs a correct program one second.
pub const SLOW_PREPARE_DELAY: Duration = Duration::from_secs(1);

/// At the start of `prepare_dataset`, before any file is touched: late under
/// [`SLOW_PREPARE_ENV`].
pub(crate) fn before_preparing_data() {
    if std::env::var(SLOW_PREPARE_ENV).is_ok_and(|v| v.trim() == "1") {
        let _late = crate::perfetto::span(format!("preparing late on purpose ({SLOW_PREPARE_ENV})"));
        std::thread::sleep(SLOW_PREPARE_DELAY);
    }
}

/// Environment variable: `1` makes `write_checkpoint` start a second late, so
/// a rank that loads the checkpoint without waiting for it (no barrier) always reads
/// too early (the checker's step 12).
pub const SLOW_SAVE_ENV: &str = "DDP_LAB_SLOW_SAVE";
/// How late writing a checkpoint starts under [`SLOW_SAVE_ENV`]: as for preparing the
/// data, far more than a loaded machine's scheduling jitter.
pub const SLOW_SAVE_DELAY: Duration = Duration::from_secs(1);

/// At the start of `write_checkpoint`, before any file is touched: late under
/// [`SLOW_SAVE_ENV`].
pub(crate) fn before_saving_checkpoint() {
    if std::env::var(SLOW_SAVE_ENV).is_ok_and(|v| v.trim() == "1") {
        std::thread::sleep(SLOW_SAVE_DELAY);
    }
}

/// Whether the checker hook `var` names this process's rank (the global rank once
/// the process group exists, the local rank before).
fn hook_targets_me(var: &str) -> bool {
    let Some(target) = std::env::var(var).ok().and_then(|v| v.trim().parse::<usize>().ok()) else {
        return false;
    };
    let me = trace::rank().unwrap_or(0);
    me == target
}

/// Environment variable the checker sets (to 1) for its "N ranks × batch B train
/// like 1 rank × batch N·B" comparison: the model then has no dropout and uses
/// SyncBatchNorm, the two things that legitimately differ between those runs.
pub const EQUIVALENCE_ENV: &str = "DDP_LAB_EQUIVALENCE";

pub(crate) fn equivalence_run() -> bool {
    std::env::var(EQUIVALENCE_ENV).is_ok_and(|v| v.trim() == "1")
}

/// Environment variable the checker sets to a number of steps K: `train` then traces
/// the weights after each of the run's first K steps (`training_step` events), which
/// its step-by-step comparison of N ranks with one reads.
pub const TRACE_STEPS_ENV: &str = "DDP_LAB_TRACE_STEPS";

/// How many of the run's first steps [`TRACE_STEPS_ENV`] asks `train` to trace (0: none).
pub(crate) fn traced_steps() -> usize {
    std::env::var(TRACE_STEPS_ENV).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Environment variable naming an epoch: `save_checkpoint` of that epoch
/// SIGKILLs its own process after writing the temporary checkpoint, before the
/// commit (the reliability tests resume from what is left).
pub const CRASH_IN_SAVE_ENV: &str = "DDP_LAB_CRASH_IN_SAVE";

/// At the start of each epoch of `train`: the [`FAIL_RANK_ENV`] rank fails here.
pub(crate) fn at_epoch_start(epoch: usize) -> Result<()> {
    if hook_targets_me(FAIL_RANK_ENV) && fail_now(epoch) {
        return Err(format!(
            "rank failed on purpose ({FAIL_RANK_ENV} is set: the checker tests how the others react)"
        )
        .into());
    }
    Ok(())
}

/// At the end of each epoch of `train`: the [`STALL_RANK_ENV`] rank gets stuck here,
/// the [`SLOW_RANK_ENV`] rank arrives [`SLOW_RANK_DELAY`] late.
pub(crate) fn at_epoch_end(epoch: usize) {
    if hook_targets_me(STALL_RANK_ENV) {
        // A rank stuck before the next collective (a deadlock, a hung GPU): the others
        // must give up at their timeout, naming the collective they waited in.
        eprintln!("{STALL_RANK_ENV}: this rank is stuck on purpose after epoch {epoch}");
        std::thread::sleep(Duration::from_secs(3600));
    }
    if hook_targets_me(SLOW_RANK_ENV) {
        // One rank finishing late makes a missing barrier visible in the epoch times.
        let _late = crate::perfetto::span(format!("late on purpose ({SLOW_RANK_ENV})"));
        std::thread::sleep(SLOW_RANK_DELAY);
    }
}

/// Whether the [`FAIL_RANK_ENV`] rank fails in this epoch: in every epoch, or only in
/// [`FAIL_AT_EPOCH_ENV`]'s; with [`FAIL_ONCE_ENV`], only while its marker file does
/// not exist yet (the failure creates it), so that a restarted run gets through.
fn fail_now(epoch: usize) -> bool {
    if let Some(at) = std::env::var(FAIL_AT_EPOCH_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        if at != epoch {
            return false;
        }
    }
    match std::env::var_os(FAIL_ONCE_ENV) {
        Some(marker) => std::fs::OpenOptions::new().write(true).create_new(true).open(marker).is_ok(),
        None => true,
    }
}

/// Seeds libtorch's generators just before a model is built, so that its initial
/// weights and the dropout draws after them depend on the seed alone, not on what
/// was drawn before: the run's `--seed` (the same on every rank, as
/// `torch.manual_seed(seed)` at the top of a PyTorch script), plus the local rank when
/// the checker sets [`SEED_PER_RANK_ENV`] (a different model on every rank). No seed:
/// untouched.
pub(crate) fn seed_before_model(run_seed: Option<u64>) {
    let Some(seed) = run_seed else { return };
    let per_rank = std::env::var_os(SEED_PER_RANK_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    let offset = if per_rank { trace::local_rank().unwrap_or(0) as u64 } else { 0 };
    tch::manual_seed(seed.wrapping_add(offset) as i64);
}

/// Just before a checkpoint's commit: with [`CRASH_IN_SAVE_ENV`] naming `epoch`, this
/// process dies as a `kill -9` would (no destructor runs, the temporary file stays).
pub(crate) fn in_checkpoint_commit(epoch: usize) {
    if std::env::var(CRASH_IN_SAVE_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()) == Some(epoch) {
        eprintln!("{CRASH_IN_SAVE_ENV}: crashing while saving epoch {epoch} (before the commit)");
        // SAFETY: signalling this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
