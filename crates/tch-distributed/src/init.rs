//! `init_process_group` and the default group, as in `torch.distributed`.
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tch::{Device, Tensor};

use crate::error::{DistError, ErrorKind, Result};
use crate::group::{
    next_group_number, reset_group_numbers, validate_rank, Backend, GroupOptions, ProcessGroup, ReduceOp,
    Work,
};
use crate::launch::{MASTER_ADDR_ENV, MASTER_PORT_ENV, RANK_ENV, WORLD_SIZE_ENV};
use crate::store::{Store, TcpStoreOptions};

/// Where the ranks meet (PyTorch's `init_method`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// `env://`: `MASTER_ADDR` and `MASTER_PORT`, and `RANK` / `WORLD_SIZE` when the
    /// caller does not pass them.
    Env,
    /// `tcp://host:port`: an explicit address of rank 0's store.
    Tcp {
        /// The host of rank 0's store.
        host: String,
        /// Its port.
        port: u16,
    },
}

impl FromStr for Init {
    type Err = DistError;
    /// Parses `env://` or `tcp://host:port`.
    fn from_str(s: &str) -> Result<Init> {
        if s == "env://" {
            return Ok(Init::Env);
        }
        let Some(rest) = s.strip_prefix("tcp://") else {
            return Err(DistError::invalid(format!(
                "init method {s:?} is not \"env://\" or \"tcp://HOST:PORT\""
            )));
        };
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
            DistError::invalid(format!("init method {s:?} has no port: write tcp://HOST:PORT"))
        })?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = parse_port(port, &format!("the port of {s:?}"))?;
        if host.is_empty() {
            return Err(DistError::invalid(format!("init method {s:?} has no host: write tcp://HOST:PORT")));
        }
        Ok(Init::Tcp { host, port })
    }
}

impl Init {
    /// The lab's rendezvous: `env://` when the environment names one (`MASTER_ADDR` and
    /// `MASTER_PORT` set, as torchrun and Slurm scripts do), otherwise
    /// `tcp://host:port` with the program's own default, such as the lab's
    /// `localhost:9956`. Nothing is validated here; [`init_process_group`] does that
    /// before touching the network.
    pub fn env_or(host: &str, port: u16) -> Init {
        let set = |name| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        if set(MASTER_ADDR_ENV) && set(MASTER_PORT_ENV) {
            Init::Env
        } else {
            Init::Tcp { host: host.to_string(), port }
        }
    }

    /// Where rank 0's store is, for messages: `host:port`, read from the environment
    /// for `env://` (`?` for a missing part).
    pub fn address(&self) -> String {
        match self {
            Init::Tcp { host, port } => format!("{host}:{port}"),
            Init::Env => {
                let get = |name| std::env::var(name).unwrap_or_else(|_| "?".to_string());
                format!("{}:{} (env://)", get(MASTER_ADDR_ENV), get(MASTER_PORT_ENV))
            }
        }
    }
}

/// The rendezvous and identity a process resolved before touching the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// The address of rank 0's store.
    pub host: String,
    /// The port of rank 0's store.
    pub port: u16,
    /// How many ranks the job has.
    pub world_size: usize,
    /// This process's global rank.
    pub rank: usize,
    /// torchrun's agent already hosts the store: every rank connects as a client.
    pub agent_store: bool,
}

impl Rendezvous {
    /// Resolves `init` (reading the environment for `Init::Env`) and validates the
    /// result, so that bad input fails here and never on the network.
    pub fn resolve(init: &Init, world_size: Option<usize>, rank: Option<usize>) -> Result<Rendezvous> {
        let (host, port) = match init {
            Init::Tcp { host, port } => (host.clone(), *port),
            Init::Env => {
                let host = required_env(MASTER_ADDR_ENV, "the address of rank 0's machine, e.g. localhost")?;
                let port = parse_port(
                    &required_env(MASTER_PORT_ENV, "a free TCP port on rank 0's machine, e.g. 29500")?,
                    MASTER_PORT_ENV,
                )?;
                (host, port)
            }
        };
        if port == 0 {
            return Err(DistError::invalid(
                "the rendezvous port is 0: choose a real port (e.g. MASTER_PORT=29500)",
            ));
        }
        let world_size = match world_size {
            Some(w) => w,
            None => {
                parse_count(&required_env(WORLD_SIZE_ENV, "the total number of processes")?, WORLD_SIZE_ENV)?
            }
        };
        let rank = match rank {
            Some(r) => r,
            None => {
                parse_count(&required_env(RANK_ENV, "this process's global rank, 0..WORLD_SIZE")?, RANK_ENV)?
            }
        };
        validate_rank(rank, world_size)?;
        let agent_store = std::env::var("TORCHELASTIC_USE_AGENT_STORE").is_ok_and(|v| v == "True");
        Ok(Rendezvous { host, port, world_size, rank, agent_store })
    }

    /// Rank 0 hosts the store, unless torchrun's agent does.
    pub fn hosts_store(&self) -> bool {
        self.rank == 0 && !self.agent_store
    }

    /// Whether the rendezvous address is this machine's loopback.
    pub fn is_loopback(&self) -> bool {
        is_loopback(&self.host)
    }
}

/// Whether `host` names the loopback interface.
pub(crate) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.eq_ignore_ascii_case("ip6-localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Opens the store and creates a group from a resolved rendezvous.
pub fn connect(rdzv: &Rendezvous, backend: Backend, timeout: Duration) -> Result<ProcessGroup> {
    connect_with_store(rdzv, backend, timeout).map(|(group, _, _)| group)
}

fn connect_with_store(
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
    let mut opts = GroupOptions { timeout, ..GroupOptions::default() };
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
    let attempt = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_default();
    let prefix = match attempt.trim() {
        "" | "0" => DEFAULT_PG_PREFIX.to_string(),
        n => format!("tchd/attempt{n}/{DEFAULT_PG_PREFIX}"),
    };
    let group = ProcessGroup::create(
        &store,
        &prefix,
        next_group_number(),
        &[],
        backend,
        rdzv.rank,
        rdzv.world_size,
        &opts,
        None,
    )?;
    Ok((group, store, opts))
}

/// The GPU an NCCL rank binds its default group to: `cuda:<local rank>`, the one-GPU-
/// per-rank placement of torchrun, `spawn` and the lab (PyTorch programs pass the same
/// as `init_process_group(device_id=torch.device("cuda", local_rank))`). Without a
/// known local rank the group stays unbound and c10d picks, as PyTorch does.
pub(crate) fn nccl_device_of_this_rank() -> Option<tch::Device> {
    let local_rank = match crate::spawned_rank() {
        Some(me) => Some(me.local_rank),
        None => crate::local_rank().ok().flatten(),
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
    let attempt = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_default();
    let key = format!("tchd/world_size/{}", attempt.trim());
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

/// The default group, and the store that groups made from it share.
struct World {
    group: Arc<ProcessGroup>,
    store: Arc<Store>,
    /// How the default group was made (timeout, Gloo's address, bound GPU): new groups
    /// are made the same way.
    opts: GroupOptions,
}

static DEFAULT_GROUP: RwLock<Option<World>> = RwLock::new(None);

/// Joins this process to the default group, as `dist.init_process_group` does.
///
/// * `backend`: [`Backend::Gloo`] for CPU ranks, [`Backend::Nccl`] for GPU ranks;
/// * `init`: [`Init::Env`] (torchrun, or the lab's MASTER_ADDR/MASTER_PORT) or [`Init::Tcp`];
/// * `world_size`, `rank`: `None` reads `WORLD_SIZE` / `RANK` from the environment;
/// * `timeout`: the rendezvous and every collective fail after this instead of hanging.
///
/// An NCCL group is bound to `cuda:<local rank>` (`LOCAL_RANK`, or the rank [`crate::spawn`]
/// started), as PyTorch's `device_id=` argument binds it; [`ProcessGroup::new`] with
/// [`GroupOptions::device_id`] binds any other placement.
///
/// Returns once all `world_size` ranks have joined. Bad arguments fail before any
/// network activity with [`ErrorKind::InvalidArgument`].
pub fn init_process_group(
    backend: Backend,
    init: Init,
    world_size: Option<usize>,
    rank: Option<usize>,
    timeout: Duration,
) -> Result<()> {
    if is_initialized() {
        return Err(DistError::new(
            ErrorKind::AlreadyInitialized,
            "the default process group is already initialized: call init_process_group once per process (or destroy_process_group first)",
        ));
    }
    let rdzv = Rendezvous::resolve(&init, world_size, rank)?;
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

/// A group of some of the default group's ranks, as `dist.new_group(ranks)`: every
/// rank of the default group calls it with the same `ranks` (`None`: all of them), in
/// the same order as its other groups, members or not. Members get the group (their
/// rank in it is their place in the sorted `ranks`), the others `None`. `backend`
/// `None` keeps the default group's. Its keys are PyTorch's, so Python ranks that call
/// `new_group` at the same point join the same group.
pub fn new_group(ranks: Option<&[usize]>, backend: Option<Backend>) -> Result<Option<Arc<ProcessGroup>>> {
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
    let Some(rank) = members.iter().position(|&r| r == default.rank()) else {
        if let Some(device) = split_source {
            default.nocolor_split(device)?;
        }
        return Ok(None);
    };
    let split = match (backend, split_source) {
        (Backend::Nccl, Some(_)) => Some((default.as_ref(), process_group_color(&members))),
        _ => None,
    };
    // As Python's new_group without device_id: the new group is not bound to a GPU.
    opts.device_id = None;
    // Made from the default group: its keys nest under the default group's prefix.
    let group = ProcessGroup::create(
        &store,
        default.store_prefix(),
        id,
        &members,
        backend,
        rank,
        members.len(),
        &opts,
        split,
    )?;
    Ok(Some(Arc::new(group)))
}

/// PyTorch's `_process_group_color(ranks)`: `abs(hash(tuple(ranks))) % 2**31`, with
/// CPython's tuple hash (xxHash-based since 3.8; a small int hashes to itself), so that
/// Rust and Python ranks split a communicator with the same color.
pub(crate) fn process_group_color(ranks: &[usize]) -> i32 {
    const PRIME_1: u64 = 11_400_714_785_074_694_791;
    const PRIME_2: u64 = 14_029_467_366_897_019_727;
    const PRIME_5: u64 = 2_870_177_450_012_600_261;
    let mut acc = PRIME_5;
    for &rank in ranks {
        // CPython hashes an int modulo the Mersenne prime 2^61 - 1.
        let lane = (rank as u64) % ((1u64 << 61) - 1);
        acc = acc.wrapping_add(lane.wrapping_mul(PRIME_2));
        acc = acc.rotate_left(31);
        acc = acc.wrapping_mul(PRIME_1);
    }
    acc = acc.wrapping_add((ranks.len() as u64) ^ (PRIME_5 ^ 3_527_539));
    let hash = if acc == u64::MAX { 1_546_275_796 } else { acc as i64 };
    (hash.unsigned_abs() % (1u64 << 31)) as i32
}

fn not_initialized() -> DistError {
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

/// [`ProcessGroup::all_reduce`] on the default group.
pub fn all_reduce(tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
    default_group()?.all_reduce(tensor, op)
}

/// [`ProcessGroup::all_reduce_async`] on the default group.
pub fn all_reduce_async(tensor: &mut Tensor, op: ReduceOp) -> Result<Work> {
    default_group()?.all_reduce_async(tensor, op)
}

/// [`ProcessGroup::reduce`] on the default group.
pub fn reduce(tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<()> {
    default_group()?.reduce(tensor, dst, op)
}

/// [`ProcessGroup::reduce_async`] on the default group.
pub fn reduce_async(tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<Work> {
    default_group()?.reduce_async(tensor, dst, op)
}

/// [`ProcessGroup::broadcast`] on the default group.
pub fn broadcast(tensor: &mut Tensor, src: usize) -> Result<()> {
    default_group()?.broadcast(tensor, src)
}

/// [`ProcessGroup::broadcast_async`] on the default group.
pub fn broadcast_async(tensor: &mut Tensor, src: usize) -> Result<Work> {
    default_group()?.broadcast_async(tensor, src)
}

/// [`ProcessGroup::all_gather`] on the default group.
pub fn all_gather(outputs: &mut [Tensor], input: &Tensor) -> Result<()> {
    default_group()?.all_gather(outputs, input)
}

/// [`ProcessGroup::all_gather_async`] on the default group.
pub fn all_gather_async(outputs: &mut [Tensor], input: &Tensor) -> Result<Work> {
    default_group()?.all_gather_async(outputs, input)
}

/// [`ProcessGroup::barrier`] on the default group.
pub fn barrier() -> Result<()> {
    default_group()?.barrier()
}

/// [`ProcessGroup::barrier_async`] on the default group.
pub fn barrier_async() -> Result<Work> {
    default_group()?.barrier_async()
}

fn required_env(name: &str, what: &str) -> Result<String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(DistError::invalid(format!(
            "env:// rendezvous: the environment variable {name} ({what}) is not set"
        ))),
    }
}

fn parse_port(text: &str, what: &str) -> Result<u16> {
    text.trim().parse::<u16>().map_err(|_| {
        DistError::invalid(format!("{what} = {text:?} is not a TCP port (a whole number 1..65535)"))
    })
}

fn parse_count(text: &str, what: &str) -> Result<usize> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| DistError::invalid(format!("{what} = {text:?} is not a whole number >= 0")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The colors CPython 3.11's `abs(hash(tuple(ranks))) % 2**31` gives (PyTorch's
    /// `_process_group_color`), and, with the workspace's venv, Python's own answer.
    #[test]
    fn group_colors_are_pythons() {
        let known: [(&[usize], i32); 6] = [
            (&[0, 1], 2_130_503_744),
            (&[0, 3], 843_572_245),
            (&[1, 2, 5], 869_323_030),
            (&[0, 1, 2, 3, 4, 5, 6, 7], 1_266_629_538),
            (&[0], 59_908_776),
            (&[7], 874_688_206),
        ];
        for (ranks, color) in known {
            assert_eq!(process_group_color(ranks), color, "{ranks:?}");
        }
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        if !python.exists() {
            return;
        }
        let lists: Vec<Vec<usize>> =
            vec![(0..64).collect(), vec![3, 9, 12], vec![0, 2, 4, 6], (5..37).collect()];
        for ranks in lists {
            let code = format!("print(abs(hash(tuple({ranks:?}))) % 2**31)");
            let out = std::process::Command::new(&python).args(["-c", &code]).output().expect("run python");
            let theirs: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("python's color");
            assert_eq!(process_group_color(&ranks), theirs, "{ranks:?}");
        }
    }

    #[test]
    fn parses_init_methods() {
        assert_eq!("env://".parse::<Init>().unwrap(), Init::Env);
        assert_eq!(
            "tcp://10.0.0.1:9956".parse::<Init>().unwrap(),
            Init::Tcp { host: "10.0.0.1".into(), port: 9956 }
        );
        assert_eq!("tcp://[::1]:80".parse::<Init>().unwrap(), Init::Tcp { host: "::1".into(), port: 80 });
        for bad in ["file:///tmp/x", "tcp://host", "tcp://:80", "tcp://h:99999", "tcp://h:x"] {
            let e = bad.parse::<Init>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn rejects_bad_ranks_before_any_network() {
        let tcp = Init::Tcp { host: "localhost".into(), port: 1 };
        let e = Rendezvous::resolve(&tcp, Some(2), Some(2)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("rank 2 is not below the world size 2"), "{e}");
        let e = Rendezvous::resolve(&tcp, Some(0), Some(0)).unwrap_err();
        assert!(e.message().contains("world size must be at least 1"), "{e}");
        let zero = Init::Tcp { host: "localhost".into(), port: 0 };
        assert_eq!(
            Rendezvous::resolve(&zero, Some(1), Some(0)).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let ok = Rendezvous::resolve(&tcp, Some(3), Some(2)).unwrap();
        assert!(!ok.hosts_store() && ok.is_loopback());
    }

    #[test]
    fn loopback_names() {
        for h in ["localhost", "127.0.0.1", "127.1.2.3", "::1"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["10.0.0.1", "node0", "0.0.0.0"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
