//! `new_group`: a group of some of the default group's ranks, made from the default
//! group's store under PyTorch's keys, split from it when the default group is bound
//! to a GPU (NCCL).
use std::sync::Arc;

use tch::Device;

use crate::color::process_group_color;
use crate::default_group::{not_initialized, DEFAULT_GROUP};
use crate::error::{DistError, Result};
use crate::group::{next_group_number, Backend, ProcessGroup};

/// A group of some of the default group's ranks, as `dist.new_group(ranks)`: every
/// rank of the default group calls it with the same `ranks` (`None`: all of them), in
/// the same order as its other groups, members or not. Members get the group (their
/// rank in it is their place in the sorted `ranks`), the others `None`. `backend`
/// `None` keeps the default group's. Its keys are PyTorch's, so Python ranks that call
/// `new_group` at the same point join the same group.
pub fn new_group(ranks: Option<&[usize]>, backend: Option<Backend>) -> Result<Option<Arc<ProcessGroup>>> {
    new_group_of(ranks, backend, None)
}

/// [`new_group`], reported to [`crate::debug::set_group_observer`] as the group of the
/// mesh dimension `mesh_dim` when one is named.
pub(crate) fn new_group_of(
    ranks: Option<&[usize]>,
    backend: Option<Backend>,
    mesh_dim: Option<&str>,
) -> Result<Option<Arc<ProcessGroup>>> {
    let (default, store, mut opts) = {
        let world = DEFAULT_GROUP.read().unwrap_or_else(|p| p.into_inner());
        let world = world.as_ref().ok_or_else(not_initialized)?;
        (world.group.clone(), world.store.clone(), world.opts.clone())
    };
    let world_size = default.world_size();
    let mut members: Vec<usize> = ranks.map(<[usize]>::to_vec).unwrap_or_else(|| (0..world_size).collect());
    members.sort_unstable();
    if members.is_empty() {
        return Err(DistError::invalid("new_group: the list of ranks is empty; pass None for every rank"));
    }
    if let Some(bad) = members.iter().find(|&&r| r >= world_size) {
        return Err(DistError::invalid(format!(
            "new_group: rank {bad} is outside the default group's ranks 0..{world_size}"
        )));
    }
    if members.windows(2).any(|w| w[0] == w[1]) {
        return Err(DistError::invalid(format!("new_group: ranks {members:?} name a rank twice")));
    }
    let backend = backend.unwrap_or(default.backend());
    backend.check_available()?;
    // Every rank numbers the group, members or not, as Python's _process_group_name does.
    let id = next_group_number();
    // A default group bound to a GPU (NCCL) is split for new groups, as in Python: its
    // members split with the new group's color, the other ranks without one.
    let split_source = match (default.backend(), default.bound_device()) {
        (Backend::Nccl, Some(Device::Cuda(device))) => Some(device),
        _ => None,
    };
    let me = members.iter().position(|&r| r == default.rank());
    let report = || crate::debug::GroupCreation {
        group: id,
        ranks: members.clone(),
        rank: me,
        mesh_dim: mesh_dim.map(str::to_string),
    };
    let Some(rank) = me else {
        if let Some(device) = split_source {
            default.nocolor_split(device)?;
        }
        crate::debug::group_created(report);
        return Ok(None);
    };
    let split = match (backend, split_source) {
        (Backend::Nccl, Some(_)) => Some((default.as_ref(), process_group_color(&members))),
        _ => None,
    };
    // As Python's new_group without device_id: the new group is not bound to a GPU.
    opts.device_id = None;
    opts.backend = backend;
    // Made from the default group: its keys nest under the default group's prefix.
    let group = ProcessGroup::create(
        &store,
        default.store_prefix(),
        id,
        &members,
        rank,
        members.len(),
        &opts,
        split,
    )?;
    crate::debug::group_created(report);
    Ok(Some(Arc::new(group)))
}
