//! How this process was launched, from its environment: torchrun's variables, so that
//! a program runs unchanged under `torchrun --no-python ./program ARGS` as well as on
//! its own, and those [`spawn`](crate::spawn) gives the ranks it starts.
use std::sync::OnceLock;

use crate::error::{DistError, Result};

/// torchrun's variable: the global rank, `0..WORLD_SIZE`.
pub const RANK_ENV: &str = "RANK";
/// torchrun's variable: the processes in the whole job.
pub const WORLD_SIZE_ENV: &str = "WORLD_SIZE";
/// torchrun's variable: the rank on this node (which GPU to use); its presence means
/// a torchrun launch.
pub const LOCAL_RANK_ENV: &str = "LOCAL_RANK";
/// torchrun's variable: the processes on this node (`--nproc-per-node`).
pub const LOCAL_WORLD_SIZE_ENV: &str = "LOCAL_WORLD_SIZE";
/// torchrun's variable: this node's rank.
pub const GROUP_RANK_ENV: &str = "GROUP_RANK";
/// torchrun's variable: the number of nodes.
pub const GROUP_WORLD_SIZE_ENV: &str = "GROUP_WORLD_SIZE";
/// `env://`'s variable: the address of rank 0's store.
pub const MASTER_ADDR_ENV: &str = "MASTER_ADDR";
/// `env://`'s variable: the port of rank 0's store.
pub const MASTER_PORT_ENV: &str = "MASTER_PORT";

/// Set in a child: its local rank.
pub(crate) const SPAWN_LOCAL_RANK_VAR: &str = "TCHD_SPAWN_LOCAL_RANK";
/// Set in a child: how many ranks its parent started.
pub(crate) const SPAWN_NPROCS_VAR: &str = "TCHD_SPAWN_NPROCS";
/// Set in a child: its parent's pid. A process whose parent is someone else (a program
/// a worker started, which inherited the environment) is not a spawned rank.
pub(crate) const SPAWN_PARENT_PID_VAR: &str = "TCHD_SPAWN_PARENT_PID";

/// A process started by [`spawn`](crate::spawn): which rank it is and of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnedRank {
    /// This process's rank on its node, from 0.
    pub local_rank: usize,
    /// How many ranks [`spawn`](crate::spawn) started on this node.
    pub nprocs: usize,
}

/// `Some` when this process is a rank started by [`spawn`](crate::spawn) (its parent is alive and is
/// the process that started it), `None` in the parent and in any unrelated process.
pub fn spawned_rank() -> Option<SpawnedRank> {
    static ROLE: OnceLock<Option<SpawnedRank>> = OnceLock::new();
    *ROLE.get_or_init(|| {
        let read = |name: &str| std::env::var(name).ok()?.trim().parse::<usize>().ok();
        let parent = read(SPAWN_PARENT_PID_VAR)?;
        if parent != std::os::unix::process::parent_id() as usize {
            return None;
        }
        Some(SpawnedRank { local_rank: read(SPAWN_LOCAL_RANK_VAR)?, nprocs: read(SPAWN_NPROCS_VAR)? })
    })
}

/// What torchrun set for this process, read by [`LaunchEnv::from_env`].
///
/// The contract (torchrun, i.e. torchelastic): each process it starts gets
///
/// | variable | meaning |
/// |---|---|
/// | `RANK` | global rank, `0..WORLD_SIZE` |
/// | `LOCAL_RANK` | rank on this node, `0..LOCAL_WORLD_SIZE` (which GPU to use) |
/// | `WORLD_SIZE` | processes in the whole job |
/// | `LOCAL_WORLD_SIZE` | processes on this node (`--nproc-per-node`) |
/// | `GROUP_RANK`, `GROUP_WORLD_SIZE` | this node's rank and the number of nodes |
/// | `MASTER_ADDR`, `MASTER_PORT` | where the job's TCPStore listens |
/// | `TORCHELASTIC_USE_AGENT_STORE` | `True`: the agent already hosts that store, so every rank (rank 0 too) connects as a client |
/// | `TORCHELASTIC_RESTART_COUNT`, `TORCHELASTIC_MAX_RESTARTS`, `TORCHELASTIC_RUN_ID` | elastic bookkeeping |
///
/// plus `ROLE_*`, `TORCHELASTIC_ERROR_FILE`, `OMP_NUM_THREADS=1` (unless set) and
/// `TORCH_NCCL_ASYNC_ERROR_HANDLING`. A non-Python program needs `--no-python`, or
/// torchrun tries to run it with the Python interpreter.
///
/// `init_process_group(backend, Init::Env, None, None, timeout)` already consumes the
/// rendezvous part; [`LaunchEnv`] is for the program's own decisions (which rank it is,
/// whether to spawn its own ranks) and validates everything up front, naming the
/// variable that is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `RANK`
    pub rank: usize,
    /// `LOCAL_RANK`
    pub local_rank: usize,
    /// `WORLD_SIZE`
    pub world_size: usize,
    /// `LOCAL_WORLD_SIZE`
    pub local_world_size: usize,
    /// `MASTER_ADDR`
    pub master_addr: String,
    /// `MASTER_PORT`
    pub master_port: u16,
    /// `GROUP_RANK`: this node's rank, when set.
    pub node_rank: Option<usize>,
    /// `GROUP_WORLD_SIZE`: the number of nodes, when set.
    pub num_nodes: Option<usize>,
    /// `TORCHELASTIC_RESTART_COUNT`: how many times the job was restarted, when set.
    pub restart_count: Option<usize>,
    /// `TORCHELASTIC_MAX_RESTARTS`, when set.
    pub max_restarts: Option<usize>,
    /// `TORCHELASTIC_RUN_ID`, when set.
    pub run_id: Option<String>,
    /// `TORCHELASTIC_USE_AGENT_STORE=True`: the agent hosts the store.
    pub agent_store: bool,
}

impl LaunchEnv {
    /// Reads this process's environment: `Ok(None)` when not started by torchrun (no
    /// `LOCAL_RANK`), `Err` naming the variable when one is missing, malformed or
    /// inconsistent with the others.
    pub fn from_env() -> Result<Option<LaunchEnv>> {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`from_env`](Self::from_env) over any source of variables (tests, a saved
    /// environment): `lookup(name)` returns the value of `name` if it is set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchEnv>> {
        let get = |name: &str| lookup(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let Some(local_rank) = get(LOCAL_RANK_ENV) else {
            return Ok(None);
        };
        let local_rank = count(LOCAL_RANK_ENV, &local_rank)?;
        let required = |name: &str| {
            get(name).ok_or_else(|| {
                DistError::invalid(format!(
                    "LOCAL_RANK is set, as torchrun does, but {name} is not: a torchrun launch sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT"
                ))
            })
        };
        let optional = |name: &str| get(name).map(|v| count(name, &v)).transpose();
        let rank = count(RANK_ENV, &required(RANK_ENV)?)?;
        let world_size = size(WORLD_SIZE_ENV, &required(WORLD_SIZE_ENV)?)?;
        let local_world_size = size(LOCAL_WORLD_SIZE_ENV, &required(LOCAL_WORLD_SIZE_ENV)?)?;
        let master_addr = required(MASTER_ADDR_ENV)?;
        let port_text = required(MASTER_PORT_ENV)?;
        let master_port = port_text.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            DistError::invalid(format!(
                "MASTER_PORT = {port_text:?} is not a TCP port (a whole number 1..65535)"
            ))
        })?;
        below(RANK_ENV, rank, WORLD_SIZE_ENV, world_size)?;
        below(LOCAL_RANK_ENV, local_rank, LOCAL_WORLD_SIZE_ENV, local_world_size)?;
        if local_world_size > world_size {
            return Err(DistError::invalid(format!(
                "LOCAL_WORLD_SIZE = {local_world_size} is larger than WORLD_SIZE = {world_size}"
            )));
        }
        let node_rank = optional(GROUP_RANK_ENV)?;
        let num_nodes = match get(GROUP_WORLD_SIZE_ENV) {
            Some(v) => Some(size(GROUP_WORLD_SIZE_ENV, &v)?),
            None => None,
        };
        if let (Some(node), Some(nodes)) = (node_rank, num_nodes) {
            below(GROUP_RANK_ENV, node, GROUP_WORLD_SIZE_ENV, nodes)?;
        }
        Ok(Some(LaunchEnv {
            rank,
            local_rank,
            world_size,
            local_world_size,
            master_addr,
            master_port,
            node_rank,
            num_nodes,
            restart_count: optional("TORCHELASTIC_RESTART_COUNT")?,
            max_restarts: optional("TORCHELASTIC_MAX_RESTARTS")?,
            run_id: get("TORCHELASTIC_RUN_ID"),
            agent_store: get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v == "True"),
        }))
    }

    /// Rank 0 of the whole job (the one that prints and saves).
    pub fn is_rank_zero(&self) -> bool {
        self.rank == 0
    }
}

/// `LOCAL_RANK` alone: `Ok(None)` when unset, `Err` when it is not a whole number.
///
/// Unlike [`LaunchEnv::from_env`] this needs nothing else, for launchers that set only
/// `LOCAL_RANK` and leave the rendezvous to the program's own options.
pub fn local_rank() -> Result<Option<usize>> {
    match std::env::var_os(LOCAL_RANK_ENV).map(|v| v.to_string_lossy().trim().to_string()) {
        Some(v) if !v.is_empty() => count(LOCAL_RANK_ENV, &v).map(Some),
        _ => Ok(None),
    }
}

/// `TORCHELASTIC_RESTART_COUNT` as torchrun set it (trimmed; empty when unset). The
/// store keys of one restart attempt carry it: torchrun's agent keeps its store across
/// restarts, and a restarted rank must not read the previous attempt's keys.
pub(crate) fn restart_attempt() -> String {
    std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_default().trim().to_string()
}

/// `TORCHELASTIC_USE_AGENT_STORE=True`: torchrun's agent hosts the rendezvous store, so
/// every rank, rank 0 too, connects to it as a client.
pub(crate) fn agent_hosts_store() -> bool {
    std::env::var("TORCHELASTIC_USE_AGENT_STORE").is_ok_and(|v| v == "True")
}

fn count(name: &str, text: &str) -> Result<usize> {
    text.parse::<usize>()
        .map_err(|_| DistError::invalid(format!("{name} = {text:?} is not a whole number >= 0")))
}

fn size(name: &str, text: &str) -> Result<usize> {
    match count(name, text)? {
        0 => Err(DistError::invalid(format!("{name} = 0: there must be at least one"))),
        n => Ok(n),
    }
}

fn below(name: &str, value: usize, limit_name: &str, limit: usize) -> Result<()> {
    if value < limit {
        Ok(())
    } else {
        Err(DistError::invalid(format!("{name} = {value} is not below {limit_name} = {limit}")))
    }
}
