//! The program's command line and environment for a run: the lab's options for a
//! variation, checkpoints, a rendezvous of its own.
use super::placement::{gpus, placement};
use super::{Gains, Plan, Setup, Variation};

/// A free port for a run's rendezvous; the lab's default port if none can be found.
pub(super) fn rendezvous_port() -> u16 {
    child_process::free_port().unwrap_or(29_500)
}

/// How a run's training loop ends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// After the variation's epochs, no early stop (`--patience 0`).
    AtTheLastEpoch,
    /// By the early stop, after the variation's epochs, on every rank: the target is 0
    /// (every epoch reaches it) and the patience is the variation's epochs, with one
    /// epoch more allowed. A rank that decides to stop alone leaves the others to begin
    /// that epoch without it: step 11's `ranks-stop-together` sees it in the trace.
    Early,
}

pub(super) fn common_args(plan: &Plan, v: &Variation, node: usize, stop: Stop) -> Vec<String> {
    let (epochs, patience) = match stop {
        Stop::AtTheLastEpoch => (v.epochs, 0),
        Stop::Early => (v.epochs + 1, v.epochs),
    };
    let mut args: Vec<String> = vec![
        "--width".into(),
        "narrow".into(),
        "--batch-size".into(),
        v.batch_size.to_string(),
        "--epochs".into(),
        epochs.to_string(),
        "--patience".into(),
        patience.to_string(),
        "--train-subset".into(),
        v.train_subset.to_string(),
        "--test-subset".into(),
        v.test_subset.to_string(),
        "--threads".into(),
        "1".into(),
        "--timeout".into(),
        // Generous: on a loaded 2-core machine a rank can start seconds after another.
        "60".into(),
    ];
    if stop == Stop::Early {
        args.extend(["--target-accuracy".into(), "0".into()]);
    }
    args.extend(placement(v.nodes, v.ranks_per_node, gpus()).options());
    // The draw is 0 before step 12, whose program is the first with --momentum.
    if v.momentum != 0.0 {
        args.extend(["--momentum".into(), v.momentum.to_string()]);
    }
    if plan.has(Gains::NodeOptions) {
        args.extend([
            "--num-nodes".into(),
            v.nodes.to_string(),
            "--num-gpus".into(),
            v.ranks_per_node.to_string(),
            "--node-id".into(),
            node.to_string(),
        ]);
    }
    args
}

/// `--save-every 1` into a fresh checkpoint directory of the verification, and `more`.
pub(super) fn checkpoint_args(setup: &Setup, dir: &str, more: &[&str]) -> Vec<String> {
    let dir = setup.work.join(dir);
    let mut args =
        vec!["--save-every".into(), "1".into(), "--checkpoint-dir".into(), dir.display().to_string()];
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// MASTER_ADDR and MASTER_PORT for a run of its own on this machine.
pub(super) fn rendezvous_env() -> Vec<(String, String)> {
    vec![
        (tch_distributed::MASTER_ADDR_ENV.into(), "127.0.0.1".into()),
        (tch_distributed::MASTER_PORT_ENV.into(), rendezvous_port().to_string()),
    ]
}
