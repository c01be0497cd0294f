//! One way to start processes for every launcher of the workspace (the checker, the
//! scaling demo, the benchmarks, the multi-process tests), so that no process outlives
//! the one that started it (Linux).
//!
//! [`spawn`] starts a command that
//! * leads its own process group: [`Child::kill`], a timeout ([`Child::wait_timeout`],
//!   [`Child::wait_with_output`]) or dropping the [`Child`] kills everything it started,
//!   grandchildren included, and when it exits whatever it left in its group goes too;
//! * dies with its launcher, however the launcher dies, SIGKILL included: the kernel
//!   kills the child (`PR_SET_PDEATHSIG`), and a watchdog process (a tiny `sh` that
//!   reads the launcher's live process groups from a pipe) kills every group once that
//!   pipe closes, which the kernel does when the launcher dies. The watchdog is what
//!   reaches grandchildren: the death signal is not inherited.
//!
//! Launcher binaries call [`stop_children_on_signals`] first thing in `main`: SIGINT,
//! SIGTERM or SIGHUP then kill every group this process started before it exits with
//! 128 + the signal (130 for Ctrl-C).
//!
//! One job per module: `spawn` starts children, `child` waits for and kills them,
//! `ranks` waits for a job's processes together (fail fast, a limit, an interruption),
//! `groups` keeps the live process groups and the watchdog that kills them if this
//! process dies, `signals` stops them on Ctrl-C and friends (the one place stop
//! signals are handled: [`StopSignals`] records them for a supervisor instead),
//! `describe` words an exit status, `ports` picks free ports, `procs` finds processes
//! by their environment, `cargo` starts cargo from a program cargo runs (a test) as a
//! plain `cargo build` would run.
mod cargo;
mod child;
mod describe;
mod groups;
mod ports;
mod procs;
mod ranks;
mod signals;
mod spawn;

pub use cargo::{cargo, set_by_cargo_for_its_program};
pub use child::{Child, Output};
pub use describe::{describe, signal_name};
pub use groups::{group_alive, kill_group};
pub use ports::{free_port, free_ports};
pub use procs::{processes_with_env, wait_until_no_process_with_env};
pub use ranks::{watch, watch_then_kill, Poll, Watch, WatchEnd, Watched};
pub use signals::{stop_children_on_signals, StopSignals, STOP_SIGNALS};
pub use spawn::{die_with_parent, output, spawn, status};
