//! What a rank can say after a collective failed: which ranks are gone or stuck (a roll
//! call through the rendezvous store), and whether an error was a communication
//! failure at all. The lab prints these under a failed rank's error; they are not
//! part of torch.distributed's surface.
use std::error::Error;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::launch_env::{agent_hosts_store, restart_attempt};
use crate::{DistError, Store};

/// The default group's store, kept for [`unresponsive_ranks`].
struct RollCall {
    store: Arc<Store>,
    rank: usize,
    world_size: usize,
    hosts_store: bool,
}

static DEFAULT_STORE: RwLock<Option<RollCall>> = RwLock::new(None);

/// `init_process_group` keeps its store here for the roll call.
pub(crate) fn keep_for_roll_call(store: Arc<Store>, rank: usize, world_size: usize, hosts_store: bool) {
    *DEFAULT_STORE.write().unwrap_or_else(|p| p.into_inner()) =
        Some(RollCall { store, rank, world_size, hosts_store });
}

/// Runs `f` on the default group's store; `None` when there is no default group.
pub(crate) fn with_default_store<T>(f: impl FnOnce(&Store) -> T) -> Option<T> {
    DEFAULT_STORE.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|call| f(&call.store))
}

/// This process's rank and the world size of the default group, while it exists.
pub(crate) fn default_rank_and_size() -> Option<(usize, usize)> {
    DEFAULT_STORE.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|call| (call.rank, call.world_size))
}

/// `destroy_process_group` forgets it.
pub(crate) fn forget_roll_call() {
    DEFAULT_STORE.write().unwrap_or_else(|p| p.into_inner()).take();
}

/// Whether `error`, or an error in its chain of sources, is a [`DistError`] of a
/// communication kind (a timeout, the network, the backend, the store): a peer gone
/// or stuck rather than a mistake of this rank's own, and what [`roll_call_note`] is
/// for. Classified by [`ErrorKind`](crate::ErrorKind), never by the message.
pub fn is_communication_failure(error: &(dyn Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(d) = e.downcast_ref::<DistError>() {
            return d.is_communication_failure();
        }
        next = e.source();
    }
    false
}

/// After a communication failure of the default group: a line naming the ranks that
/// did not answer [`unresponsive_ranks`] (waiting `wait`), or `None`.
pub fn roll_call_note(wait: Duration) -> Option<String> {
    let missing = unresponsive_ranks(wait)?;
    // The default group's rank, as kept with its store (this module stays below the
    // default group's).
    let me = DEFAULT_STORE.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|call| call.rank);
    let me = me.map(|r| r.to_string()).unwrap_or_else(|| "?".into());
    match missing.as_slice() {
        [] => None,
        [rank] => Some(format!(
            "rank {rank} failed, was killed or is stuck (it did not answer rank {me}'s roll call after the failure); its own output, or its launcher's, says why"
        )),
        ranks => Some(format!(
            "ranks {ranks:?} failed, were killed or are stuck (they did not answer rank {me}'s roll call after the failure); their own output, or their launcher's, says why"
        )),
    }
}

/// After a collective of the default group failed: which ranks are gone or stuck?
///
/// A roll call through the rendezvous store: this rank answers, waits `wait` for the
/// other survivors to answer too (each calls this after its own failure), and returns
/// the ranks that did not. When the store itself is unreachable, its host, rank 0,
/// is the one gone. `None` when there is no default group, or nothing can be said.
/// Callable once per process (a second call would count old answers).
pub fn unresponsive_ranks(wait: Duration) -> Option<Vec<usize>> {
    let guard = DEFAULT_STORE.read().unwrap_or_else(|p| p.into_inner());
    let call = guard.as_ref()?;
    let attempt = restart_attempt();
    let key = |rank: usize| format!("tchd/roll_call/{attempt}/{rank}");
    if call.store.add(&key(call.rank), 1).is_err() {
        // The store lives in rank 0's process, unless torchrun's agent hosts it.
        return (!call.hosts_store && !agent_hosts_store()).then(|| vec![0]);
    }
    std::thread::sleep(wait);
    let mut missing = Vec::new();
    for rank in 0..call.world_size {
        match call.store.add(&key(rank), 0) {
            Ok(0) => missing.push(rank),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    Some(missing)
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;
    use crate::ErrorKind;

    /// An error of the program's own that wraps another, as labkit's do.
    #[derive(Debug)]
    struct Wrapped(DistError);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "training failed: {}", self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn communication_failures_are_told_by_kind_through_the_chain() {
        let timeout = DistError::new(ErrorKind::Timeout, "a rank did not take part");
        assert!(is_communication_failure(&timeout));
        assert!(is_communication_failure(&Wrapped(timeout)));
        let own = DistError::new(ErrorKind::InvalidArgument, "gloo cannot do this: nccl only");
        assert!(!is_communication_failure(&Wrapped(own)), "the message must not decide");
        let download: Box<dyn Error> = "cannot download: connection reset by peer".into();
        assert!(!is_communication_failure(download.as_ref()));
    }
}
