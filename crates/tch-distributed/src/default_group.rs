//! The default group: `init_process_group` makes it, `destroy_process_group` ends it,
//! and `get_rank`, `get_world_size` and the collectives without a group use it.
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::connect::connect_with_store;
use crate::error::{DistError, ErrorKind, Result};
use crate::group::{reset_group_numbers, Backend, GroupOptions, ProcessGroup};
use crate::rendezvous::{Init, Rendezvous};
use crate::store::Store;

/// The default group, and the store that groups made from it share.
pub(crate) struct World {
    pub(crate) group: Arc<ProcessGroup>,
    pub(crate) store: Arc<Store>,
    /// How the default group was made (timeout, Gloo's address, bound GPU): new groups
    /// are made the same way.
    pub(crate) opts: GroupOptions,
}

pub(crate) static DEFAULT_GROUP: RwLock<Option<World>> = RwLock::new(None);

/// `init_process_group`'s keyword arguments, with PyTorch's defaults: `env://`, the
/// world size and rank from the environment, a 30-minute timeout.
///
/// ```
/// use tch_distributed::{InitOptions, Init};
/// let options = InitOptions::default();
/// assert_eq!(options.init_method, Init::Env);
/// assert_eq!((options.world_size, options.rank), (None, None));
/// assert_eq!(options.timeout, tch_distributed::DEFAULT_TIMEOUT);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// Where the ranks meet: [`Init::Env`] (torchrun, or the lab's `MASTER_ADDR` /
    /// `MASTER_PORT`; PyTorch's default) or [`Init::Tcp`].
    pub init_method: Init,
    /// How many ranks the job has; `None` (PyTorch's -1) reads `WORLD_SIZE`.
    pub world_size: Option<usize>,
    /// This process's global rank; `None` (PyTorch's -1) reads `RANK`.
    pub rank: Option<usize>,
    /// The rendezvous and every collective fail after this instead of hanging.
    pub timeout: Duration,
}

impl Default for InitOptions {
    fn default() -> Self {
        Self { init_method: Init::Env, world_size: None, rank: None, timeout: crate::DEFAULT_TIMEOUT }
    }
}

/// Joins this process to the default group, as `dist.init_process_group` does:
/// `backend` is [`Backend::Gloo`] for CPU ranks, [`Backend::Nccl`] for GPU ranks;
/// `options` are PyTorch's keyword arguments ([`InitOptions`]).
///
/// ```no_run
/// use std::time::Duration;
/// use tch_distributed as dist;
///
/// // dist.init_process_group("gloo", init_method="tcp://localhost:9956", world_size=2, rank=0)
/// dist::init_process_group(
///     dist::Backend::Gloo,
///     dist::InitOptions {
///         init_method: "tcp://localhost:9956".parse()?,
///         world_size: Some(2),
///         rank: Some(0),
///         timeout: Duration::from_secs(60),
///     },
/// )?;
/// # Ok::<(), dist::DistError>(())
/// ```
///
/// An NCCL group is bound to `cuda:<local rank>` (`LOCAL_RANK`, or the rank [`crate::spawn`]
/// started), as PyTorch's `device_id=` argument binds it; [`ProcessGroup::new`] with
/// [`GroupOptions::device_id`] binds any other placement.
///
/// Returns once all `world_size` ranks have joined. Bad arguments fail before any
/// network activity with [`ErrorKind::InvalidArgument`].
pub fn init_process_group(backend: Backend, options: InitOptions) -> Result<()> {
    let InitOptions { init_method, world_size, rank, timeout } = options;
    if is_initialized() {
        return Err(DistError::new(
            ErrorKind::AlreadyInitialized,
            "the default process group is already initialized: call init_process_group once per process (or destroy_process_group first)",
        ));
    }
    let rdzv = Rendezvous::resolve(&init_method, world_size, rank)?;
    let (group, store, opts) = connect_with_store(&rdzv, backend, timeout)?;
    let store = Arc::new(store);
    crate::diagnostics::keep_for_roll_call(store.clone(), rdzv.rank, rdzv.world_size, rdzv.hosts_store());
    let mut slot = DEFAULT_GROUP.write().unwrap_or_else(|p| p.into_inner());
    if slot.is_some() {
        return Err(DistError::new(
            ErrorKind::AlreadyInitialized,
            "the default process group was initialized concurrently",
        ));
    }
    *slot = Some(World { group: Arc::new(group), store, opts });
    Ok(())
}

/// Whether [`init_process_group`] has run (and not been undone).
pub fn is_initialized() -> bool {
    DEFAULT_GROUP.read().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// Leaves the default group. Collectives still in flight elsewhere keep their handle.
pub fn destroy_process_group() -> Result<()> {
    crate::diagnostics::forget_roll_call();
    let world = DEFAULT_GROUP.write().unwrap_or_else(|p| p.into_inner()).take();
    match world {
        Some(World { group, .. }) => {
            reset_group_numbers();
            group.shutdown()
        }
        None => Err(not_initialized()),
    }
}

/// The default group (for APIs that take an explicit group).
pub fn default_group() -> Result<Arc<ProcessGroup>> {
    DEFAULT_GROUP
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|w| w.group.clone())
        .ok_or_else(not_initialized)
}

pub(crate) fn not_initialized() -> DistError {
    DistError::new(
        ErrorKind::NotInitialized,
        "the default process group is not initialized: call dist::init_process_group(...) first",
    )
}

/// This process's global rank in the default group.
pub fn get_rank() -> Result<usize> {
    Ok(default_group()?.rank())
}

/// The number of processes in the default group.
pub fn get_world_size() -> Result<usize> {
    Ok(default_group()?.world_size())
}

/// The default group's backend.
pub fn get_backend() -> Result<Backend> {
    Ok(default_group()?.backend())
}
