//! Opening rank 0's store and making the default group from a resolved rendezvous:
//! PyTorch's key prefix, Gloo's address, the GPU an NCCL rank binds to.
use std::time::Duration;

use crate::error::{DistError, Result};
use crate::group::{next_group_number, Backend, GroupOptions, ProcessGroup};
use crate::launch_env::{local_rank, restart_attempt, spawned_rank};
use crate::rendezvous::Rendezvous;
use crate::store::{Store, TcpStoreOptions};

/// Opens the store and creates a group from a resolved rendezvous.
pub fn connect(rdzv: &Rendezvous, backend: Backend, timeout: Duration) -> Result<ProcessGroup> {
    connect_with_store(rdzv, backend, timeout).map(|(group, _, _)| group)
}

pub(crate) fn connect_with_store(
    rdzv: &Rendezvous,
    backend: Backend,
    timeout: Duration,
) -> Result<(ProcessGroup, Store, GroupOptions)> {
    // Fail before the network: a store that others wait on would otherwise be opened.
    backend.check_available()?;
    let store = Store::tcp(&TcpStoreOptions {
        host: rdzv.host.clone(),
        port: rdzv.port,
        is_server: rdzv.hosts_store(),
        world_size: Some(rdzv.world_size),
        wait_for_workers: true,
        timeout,
    })?;
    check_same_world_size(&store, rdzv)?;
    let mut opts = GroupOptions { backend, timeout, ..GroupOptions::default() };
    if let Ok(iface) = std::env::var("GLOO_SOCKET_IFNAME") {
        opts.gloo_interface = Some(iface);
    } else if rdzv.is_loopback() {
        // A single-machine run stays on loopback instead of this host's public name.
        opts.gloo_hostname = Some("127.0.0.1".to_string());
    }
    if backend == Backend::Nccl {
        opts.device_id = nccl_device_of_this_rank();
    }
    // PyTorch's init_process_group wraps the rendezvous store in PrefixStore("default_pg").
    // One deviation: torchrun's agent keeps its store across restarts, and a restarted
    // rank could read the previous attempt's Gloo addresses (refused connections); each
    // restart gets keys of its own. Python ranks only meet Rust ranks on the first
    // attempt.
    let prefix = match restart_attempt().as_str() {
        "" | "0" => DEFAULT_PG_PREFIX.to_string(),
        n => format!("tchd/attempt{n}/{DEFAULT_PG_PREFIX}"),
    };
    let group = ProcessGroup::create(
        &store,
        &prefix,
        next_group_number(),
        &[],
        rdzv.rank,
        rdzv.world_size,
        &opts,
        None,
    )?;
    crate::debug::group_created(|| crate::debug::GroupCreation {
        group: group.number(),
        ranks: (0..rdzv.world_size).collect(),
        rank: Some(rdzv.rank),
        mesh_dim: None,
    });
    Ok((group, store, opts))
}

/// The GPU an NCCL rank binds its default group to: `cuda:<local rank>`, the one-GPU-
/// per-rank placement of torchrun, `spawn` and the lab (PyTorch programs pass the same
/// as `init_process_group(device_id=torch.device("cuda", local_rank))`). Without a
/// known local rank the group stays unbound and c10d picks, as PyTorch does.
pub(crate) fn nccl_device_of_this_rank() -> Option<tch::Device> {
    let local_rank = match spawned_rank() {
        Some(me) => Some(me.local_rank),
        None => local_rank().ok().flatten(),
    };
    local_rank.map(tch::Device::Cuda)
}

/// The key prefix of PyTorch's default group and of the groups made from it.
const DEFAULT_PG_PREFIX: &str = "default_pg";

/// Ranks of one job started with different world sizes would wait on each other until
/// the timeout. The first rank to get here records its world size in the store
/// (compare-and-set, so no rank waits for another: a Python rank in the job never
/// writes this key); every later rank compares its own with it.
fn check_same_world_size(store: &Store, rdzv: &Rendezvous) -> Result<()> {
    let key = format!("tchd/world_size/{}", restart_attempt());
    let mine = format!("{} {}", rdzv.world_size, rdzv.rank);
    let first = store.compare_set(&key, b"", mine.as_bytes())?;
    let first = String::from_utf8_lossy(&first).to_string();
    let (their_size, their_rank) = first.split_once(' ').unwrap_or((first.as_str(), "?"));
    if their_size != rdzv.world_size.to_string() {
        let note = format!(
            "rank {} has world size {}, rank {their_rank} has {their_size}",
            rdzv.rank, rdzv.world_size
        );
        return Err(DistError::invalid(format!(
            "ranks of one job were started with different world sizes: {note}; start every rank with the same WORLD_SIZE (--num-nodes and --num-gpus)"
        )));
    }
    Ok(())
}
