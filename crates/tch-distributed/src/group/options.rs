//! `GroupOptions`: how a group is made (backend, timeout, Gloo's address, the GPU), and
//! whether its collectives are checked across ranks.
use std::time::Duration;

use tch::Device;

use super::backend::Backend;

/// Options for [`ProcessGroup::new`](super::ProcessGroup::new): everything but the store, the rank and the
/// world size, which every group needs.
///
/// ```
/// let options = tch_distributed::GroupOptions::default();
/// assert_eq!(options.backend, tch_distributed::Backend::Gloo);
/// assert_eq!(options.timeout, tch_distributed::DEFAULT_TIMEOUT);
/// ```
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Gloo (the default: it runs on every machine) or NCCL. Every member passes the same.
    pub backend: Backend,
    /// Collectives that do not finish within this fail instead of hanging.
    pub timeout: Duration,
    /// Where Gloo binds its sockets: an address or host name of this machine.
    /// `None`: c10d's default (this host's name, else loopback).
    pub gloo_hostname: Option<String>,
    /// Network interface for Gloo (as `GLOO_SOCKET_IFNAME`); wins over the host name.
    pub gloo_interface: Option<String>,
    /// The GPU this rank computes on, as `init_process_group(device_id=...)`: NCCL then
    /// uses it instead of guessing one from the global rank (c10d's "Guessing device ID
    /// based on global rank" warning). `None`, or a CPU device: not bound.
    pub device_id: Option<Device>,
    /// Whether the ranks compare each collective before running it (c10d's
    /// ProcessGroupWrapper, which PyTorch puts in under `TORCH_DISTRIBUTED_DEBUG=DETAIL`):
    /// a collective that only some ranks reach, or that ranks issue with other ops or
    /// shapes, then fails on every rank with an error naming both calls, instead of
    /// hanging or, under Gloo, aborting the process from Gloo's own threads. It costs
    /// a small barrier and all-gather on a helper Gloo group per collective.
    /// `None`: [`checks_collectives`]'s rule (on for Gloo, on for NCCL under `DETAIL`).
    pub check_collectives: Option<bool>,
}

/// Environment variable: `1` checks every group's collectives, `0` none (see
/// [`GroupOptions::check_collectives`]); unset, the backend decides.
pub const CHECK_COLLECTIVES_ENV: &str = "TCHD_CHECK_COLLECTIVES";

/// Whether a group of `backend` compares its collectives across ranks when its options
/// leave it to the rule ([`GroupOptions::check_collectives`] `None`):
/// [`CHECK_COLLECTIVES_ENV`] when set to `0` or `1`; else yes for Gloo, whose threads
/// abort the process on mismatched messages (a misuse must be an error, never a
/// signal), and for NCCL only under `TORCH_DISTRIBUTED_DEBUG=DETAIL`, as PyTorch does
/// (NCCL does not abort on a mismatch, and the check's host round trip would stall the
/// GPU's stream of collectives).
///
/// Ranks of one group must agree: a Python rank shares a Gloo group with Rust ranks
/// only when it checks too (`TORCH_DISTRIBUTED_DEBUG=DETAIL`, whose keys these are) or
/// the Rust ranks do not (`TCHD_CHECK_COLLECTIVES=0`).
pub fn checks_collectives(backend: Backend) -> bool {
    match std::env::var(CHECK_COLLECTIVES_ENV).ok().as_deref().map(str::trim) {
        Some("1") => return true,
        Some("0") => return false,
        _ => {}
    }
    match backend {
        Backend::Gloo => true,
        Backend::Nccl => crate::debug::detail_logging(),
    }
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            backend: Backend::Gloo,
            timeout: crate::DEFAULT_TIMEOUT,
            gloo_hostname: None,
            gloo_interface: None,
            device_id: None,
            check_collectives: None,
        }
    }
}
