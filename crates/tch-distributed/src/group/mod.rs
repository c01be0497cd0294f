//! `ProcessGroup`: a group of processes over c10d's ProcessGroup (Gloo or NCCL), how one
//! is made and numbered, and what it is.
//!
//! What the group does is in the files beside this one: `collectives`, `p2p` (send and
//! receive), `work` (a call in flight), `checks` and `observe` (what every call does first).
mod backend;
mod checks;
mod collectives;
mod observe;
mod options;
mod p2p;
mod work;

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tch::Device;

pub use backend::{nccl_compiled_in, Backend};
pub use options::{checks_collectives, GroupOptions, CHECK_COLLECTIVES_ENV};
pub use work::Work;

use crate::c_args::{cstring, duration_ms};
use crate::error::{check, Result};
use crate::ffi;
use crate::rendezvous::validate_rank;
use crate::store::Store;

/// A group of processes that run collectives together (c10d::ProcessGroup).
pub struct ProcessGroup {
    raw: NonNull<ffi::tchd_group>,
    rank: usize,
    world_size: usize,
    backend: Backend,
    timeout: Duration,
    /// Which group of this process, in creation order: its c10d group name.
    id: u64,
    /// Where its keys live in the store, e.g. "default_pg/0/".
    store_prefix: String,
    /// Collectives issued so far, for [`crate::debug`]'s sequence numbers.
    issued: AtomicU64,
    /// Sends and receives issued so far: numbered apart from the collectives, as NCCL
    /// numbers its point-to-point calls, since only two ranks of the group take part.
    p2p_issued: AtomicU64,
}

// SAFETY: c10d process groups are thread-safe: collectives are enqueued under locks.
unsafe impl Send for ProcessGroup {}
unsafe impl Sync for ProcessGroup {}

/// Python's `_world.group_count`: the default group is "0", and every group created
/// after it on every rank takes the next number as its name, which is also its key
/// prefix in the store. A Python rank and a Rust rank that create the same groups in
/// the same order therefore meet on the same keys.
static GROUP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn next_group_number() -> u64 {
    GROUP_COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// `destroy_process_group` starts the numbering again, as PyTorch's does.
pub(crate) fn reset_group_numbers() {
    GROUP_COUNTER.store(0, Ordering::SeqCst);
}

impl ProcessGroup {
    /// Creates a group over `store` in which this process is `rank` of `world_size`.
    /// Every member calls this with the same world size and options' backend; it
    /// returns once all of them have connected (or fails on timeout). Its keys are
    /// PyTorch's for a group over this store: `<number>/<device>/...`.
    pub fn new(store: &Store, rank: usize, world_size: usize, opts: &GroupOptions) -> Result<Self> {
        validate_rank(rank, world_size)?;
        opts.backend.check_available()?;
        let group = Self::create(store, "", next_group_number(), &[], rank, world_size, opts, None)?;
        crate::debug::group_created(|| crate::debug::GroupCreation {
            group: group.id,
            ranks: (0..world_size).collect(),
            rank: Some(rank),
            mesh_dim: None,
        });
        Ok(group)
    }

    /// A group named `id` whose keys live under `store_prefix` (PyTorch's PrefixStore
    /// chain, "default_pg" for the default group and the ones made from it), with
    /// `global_ranks` as its members (empty: every rank of the store's job); an NCCL
    /// group split from `split`'s group with its color, when given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        store: &Store,
        store_prefix: &str,
        id: u64,
        global_ranks: &[usize],
        rank: usize,
        world_size: usize,
        opts: &GroupOptions,
        split: Option<(&ProcessGroup, i32)>,
    ) -> Result<Self> {
        // Nested PrefixStores join with "/": PrefixStore("1/", PrefixStore("default_pg"))
        // is PrefixStore("default_pg/1/").
        let backend = opts.backend;
        let prefix = if store_prefix.is_empty() { format!("{id}/") } else { format!("{store_prefix}/{id}/") };
        let cprefix = cstring(&prefix)?;
        let name = cstring(&id.to_string())?;
        let members: Vec<u64> = global_ranks.iter().map(|&r| r as u64).collect();
        let host = opts.gloo_hostname.as_deref().map(cstring).transpose()?;
        let iface = opts.gloo_interface.as_deref().map(cstring).transpose()?;
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_group_new(
                store.raw(),
                cprefix.as_ptr(),
                name.as_ptr(),
                members.as_ptr(),
                members.len(),
                backend.raw(),
                rank as i32,
                world_size as i32,
                host.as_ref().map_or(ptr::null(), |h| h.as_ptr()),
                iface.as_ref().map_or(ptr::null(), |i| i.as_ptr()),
                duration_ms(opts.timeout),
                match opts.device_id {
                    Some(Device::Cuda(index)) => index as i32,
                    _ => -1,
                },
                split.map_or(ptr::null_mut(), |(parent, _)| parent.raw()),
                split.map_or(-1, |(_, color)| color),
                i32::from(opts.check_collectives.unwrap_or_else(|| checks_collectives(backend))),
                &mut out,
                &mut err,
            )
        };
        check(status, err).map_err(|e| {
            e.context(format!("creating the {backend} process group (rank {rank} of {world_size})"))
        })?;
        Ok(ProcessGroup {
            raw: NonNull::new(out).expect("shim returned a null group"),
            rank,
            world_size,
            backend,
            timeout: opts.timeout,
            id,
            store_prefix: prefix,
            issued: AtomicU64::new(0),
            p2p_issued: AtomicU64::new(0),
        })
    }

    /// A rank of this (NCCL) group that is not in a group being split from it takes
    /// part in the split: `perform_nocolor_split`.
    pub(crate) fn nocolor_split(&self, cuda_device: usize) -> Result<()> {
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_group_nocolor_split(self.raw(), cuda_device as i32, &mut err) }, err)
            .map_err(|e| e.context("splitting the default group's NCCL communicator for a new group"))
    }

    /// The group's name in c10d ("0" for the default group), as `group.group_name`.
    pub fn group_name(&self) -> String {
        self.id.to_string()
    }

    /// Its number in this process, in creation order ([`crate::debug::CollectiveCall::group`]).
    pub(crate) fn number(&self) -> u64 {
        self.id
    }

    /// The store prefix of this group's keys (PyTorch's `PrefixStore` chain joined).
    pub(crate) fn store_prefix(&self) -> &str {
        &self.store_prefix
    }

    /// The shim's handle, for other shim entry points (DDP, SyncBatchNorm).
    pub(crate) fn raw(&self) -> *mut ffi::tchd_group {
        self.raw.as_ptr()
    }

    /// This process's rank in the group (0..world_size).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the group.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The backend the group's collectives run on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How long a collective may wait for the other ranks before it fails.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The GPU the group is bound to ([`GroupOptions::device_id`]), if any.
    pub fn bound_device(&self) -> Option<Device> {
        let index = unsafe { ffi::tchd_group_bound_device(self.raw.as_ptr()) };
        (index >= 0).then_some(Device::Cuda(index as usize))
    }

    /// Shuts the backend down (NCCL aborts its communicators). The group is unusable after.
    pub fn shutdown(&self) -> Result<()> {
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_group_shutdown(self.raw.as_ptr(), &mut err) }, err)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        unsafe { ffi::tchd_group_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("backend", &self.backend)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish()
    }
}
