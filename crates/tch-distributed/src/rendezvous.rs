//! Where the ranks meet: parsing `init_method` (`env://`, `tcp://host:port`) and
//! resolving it, with world size and global rank, from the arguments or torchrun's
//! environment, all checked before any network activity.
use std::str::FromStr;

use crate::error::{DistError, Result};
use crate::launch_env::{agent_hosts_store, MASTER_ADDR_ENV, MASTER_PORT_ENV, RANK_ENV, WORLD_SIZE_ENV};
use crate::store::is_loopback;

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
    /// `localhost:9956`. Nothing is validated here; [`init_process_group`](crate::init_process_group) does that
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
        let agent_store = agent_hosts_store();
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

/// A rank and world size every group and rendezvous accepts.
pub(crate) fn validate_rank(rank: usize, world_size: usize) -> Result<()> {
    if world_size == 0 {
        return Err(DistError::invalid("world size must be at least 1"));
    }
    if world_size > i32::MAX as usize {
        return Err(DistError::invalid(format!("world size {world_size} is absurdly large")));
    }
    if rank >= world_size {
        return Err(DistError::invalid(format!(
            "rank {rank} is not below the world size {world_size}: ranks are 0..{world_size}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
}
