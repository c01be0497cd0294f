//! The sandbox untrusted code runs in: bubblewrap, one per job, with the kernel's own
//! limits around it.
//!
//! A job (the ranks of one run, or one `cargo build`) gets fresh namespaces: its own
//! network (loopback only, so its ranks still meet on 127.0.0.1 and nothing else is
//! reachable), its own pids (when the job ends every process in it is gone, `setsid`
//! or not), its own user (no capabilities, no new privileges, no user namespaces of its
//! own) and mounts: the host's system directories and what the job needs read-only,
//! its work directory a size-capped tmpfs, a private `/tmp`, and a cleared environment.
//!
//! One job per module: `bubblewrap` finds the bwrap of this machine and what it knows,
//! `host` says why namespaces are refused and the distribution's fix, `command` builds
//! the command line, `limits` caps memory and processes (cgroup, systemd user scope or
//! rlimits), `seccomp` stands in for `--disable-userns` on an older bubblewrap.
//! [`crate::confined`] runs jobs in it.
use std::path::{Path, PathBuf};

use checker::BWRAP_ENV;
use serde::Serialize;

mod bubblewrap;
mod command;
mod host;
mod limits;
mod seccomp;

pub use limits::{Capping, JobCgroup, Limits};

/// A sandbox that works on this machine.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    /// As `bwrap --version` gave it.
    version: Option<String>,
    pub limits: Limits,
    pub capping: Capping,
    /// Where [`Capping::UserScope`] caps.
    systemd_run: Option<PathBuf>,
    /// bubblewrap caps each tmpfs (`--size`); else only the job's cgroup does.
    tmpfs_size: bool,
    nested_userns: NestedUserns,
}

/// How a job is kept from making user namespaces of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NestedUserns {
    /// bubblewrap's `--disable-userns`.
    Disabled,
    /// A seccomp filter ([`seccomp`]), where bubblewrap has no `--disable-userns`.
    Filtered(Vec<seccomp::Insn>),
    /// Not kept from it: only while probing what bubblewrap can do, never in a sandbox
    /// that runs a job.
    Allowed,
}

/// Why no sandbox can be made here, and what to do.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub cause: String,
    pub fix: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot sandbox the submitted code: {}\n  fix: {}", self.cause, self.fix)
    }
}

/// A path made visible inside the sandbox, at the same place as outside.
#[derive(Debug, Clone)]
pub enum Mount {
    /// Read-only; skipped when missing.
    ReadOnly(PathBuf),
    /// Read-write (the build's own target directory).
    Writable(PathBuf),
    /// A device node (a GPU's), passed in when the job uses GPUs.
    Device(PathBuf),
    /// A fresh tmpfs of at most this many bytes.
    Scratch(PathBuf, u64),
}

impl Sandbox {
    /// Finds bubblewrap, checks that it can make the namespaces a job needs and knows
    /// the options the sandbox uses (or that each one it lacks is made up for), and
    /// picks how memory and processes are capped.
    pub fn probe(limits: Limits) -> Result<Sandbox, Unavailable> {
        let named = std::env::var_os(BWRAP_ENV).filter(|p| !p.is_empty()).map(PathBuf::from);
        let bwrap = match named {
            Some(path) => path,
            None => find_on_path("bwrap").ok_or_else(|| Unavailable {
                cause: "bubblewrap (`bwrap`) is not installed".into(),
                fix: "run `bash scripts/setup.sh --for-tests` (it installs Debian's `bubblewrap`), or \
                      `sudo apt-get install bubblewrap`; or pass --unsandboxed to run the \
                      submitted code with all of your rights"
                    .into(),
            })?,
        };
        let systemd_run = find_on_path("systemd-run");
        let scope = systemd_run.clone();
        let capping = move |limits: &Limits| {
            Capping::choose(|| scope.as_deref().is_some_and(|s| limits::scope_works(s, limits)))
        };
        Sandbox::probe_at(&bwrap, &host::Host::this_machine(), limits, capping, systemd_run)
    }

    /// [`Sandbox::probe`] of the bubblewrap at `bwrap` on `host`, `capping` deciding how
    /// jobs are capped (asked once bubblewrap works).
    fn probe_at(
        bwrap: &Path,
        host: &host::Host,
        limits: Limits,
        capping: impl FnOnce(&Limits) -> Capping,
        systemd_run: Option<PathBuf>,
    ) -> Result<Sandbox, Unavailable> {
        let version = bubblewrap::version(bwrap).map_err(|e| Unavailable {
            cause: format!("cannot run {}: {e}", bwrap.display()),
            fix: "install Debian's `bubblewrap` (`bash scripts/setup.sh --for-tests`), or pass --unsandboxed"
                .into(),
        })?;
        let mut sandbox = Sandbox {
            bwrap: bwrap.to_path_buf(),
            version,
            limits,
            capping: Capping::Rlimits,
            systemd_run: None,
            tmpfs_size: false,
            nested_userns: NestedUserns::Allowed,
        };
        // The sandbox's own command line without the options that came late: what fails
        // here is the namespaces, or an option older still.
        let said = sandbox.try_line()?;
        if !said.ok {
            return Err(match bubblewrap::unknown_option(&said.said) {
                Some(option) => bubblewrap::too_old(bwrap, sandbox.version.as_deref(), &option),
                None => host.no_namespaces(bwrap, &said.said),
            });
        }
        let knows = |option: &[&str]| -> Result<Result<(), String>, Unavailable> {
            let mut cmd = std::process::Command::new(bwrap);
            cmd.args(bubblewrap::trying(option));
            let ran = bubblewrap::run(cmd).map_err(|e| Unavailable {
                cause: format!("cannot run {}: {e}", bwrap.display()),
                fix: "pass --unsandboxed".into(),
            })?;
            Ok(if ran.ok { Ok(()) } else { Err(ran.said) })
        };
        sandbox.tmpfs_size = knows(&["--size", "1048576", "--tmpfs", "/tmp"])?.is_ok();
        sandbox.nested_userns = match knows(&["--disable-userns"])? {
            Ok(()) => NestedUserns::Disabled,
            // Unknown to it (before 0.8.0), or failing here (it writes a sysctl of the
            // job's namespace): the filter stands in, or nothing does and it is refused.
            Err(said) => match seccomp::filter() {
                Some(filter) => NestedUserns::Filtered(filter),
                None => {
                    return Err(match bubblewrap::unknown_option(&said) {
                        Some(option) => bubblewrap::too_old(bwrap, sandbox.version.as_deref(), &option),
                        None => Unavailable {
                            cause: format!("bubblewrap's --disable-userns fails here: {said}"),
                            fix: "pass --unsandboxed to run the submitted code with all of your rights"
                                .into(),
                        },
                    })
                }
            },
        };
        sandbox.capping = match (capping(&sandbox.limits), systemd_run) {
            (Capping::UserScope, Some(systemd_run)) => {
                sandbox.systemd_run = Some(systemd_run);
                Capping::UserScope
            }
            // No scope without systemd-run to make it.
            (Capping::UserScope, None) => Capping::Rlimits,
            (capping, _) => capping,
        };
        if !sandbox.tmpfs_size && !sandbox.capping.whole_job() {
            return Err(sandbox.uncapped_tmpfs());
        }
        // The real line, as a job gets it (filter, scope and all).
        let said = sandbox.try_line()?;
        if !said.ok {
            return Err(Unavailable {
                cause: format!(
                    "{} cannot run the sandbox's command line here: {}",
                    bubblewrap::named(sandbox.version.as_deref()),
                    said.said
                ),
                fix: "pass --unsandboxed to run the submitted code with all of your rights".into(),
            });
        }
        Ok(sandbox)
    }

    /// Runs `true` in a sandbox as this one makes them.
    fn try_line(&self) -> Result<bubblewrap::Ran, Unavailable> {
        let program = ["/usr/bin/true", "/bin/true"].into_iter().map(Path::new).find(|p| p.exists());
        let program = program.unwrap_or(Path::new("/usr/bin/true"));
        let workdir = Path::new("/ddp-lab-probe");
        let mounts = [Mount::Scratch(workdir.to_path_buf(), 1 << 20)];
        let cmd = self.command(program, &[], workdir, &[], &mounts);
        bubblewrap::run(cmd).map_err(|e| Unavailable {
            cause: format!("cannot run {}: {e}", self.bwrap.display()),
            fix: "install Debian's `bubblewrap` (`bash scripts/setup.sh --for-tests`), or pass --unsandboxed"
                .into(),
        })
    }

    /// The refusal where nothing would cap a job's tmpfs.
    fn uncapped_tmpfs(&self) -> Unavailable {
        Unavailable {
            cause: format!(
                "{} has no --size (added in bubblewrap 0.7.0): a job's work directory and /tmp \
                 would be tmpfs without a cap, able to fill this machine's memory, and nothing \
                 else caps a job's memory here (no writable cgroup, and no systemd user manager \
                 that caps a scope's memory and tasks)",
                bubblewrap::named(self.version.as_deref())
            ),
            fix: format!(
                "{}; or grade as root (a cgroup per job caps it), or from a login session whose \
                 systemd user manager has the memory and pids controllers (`systemd-run --user \
                 --scope -p MemoryMax=1G true` works); or pass --unsandboxed to run the submitted \
                 code with all of your rights",
                bubblewrap::newer()
            ),
        }
    }

    /// The sandbox as the reports record it.
    pub fn describe(&self) -> SandboxDescription {
        let version = bubblewrap::named(self.version.as_deref());
        SandboxDescription {
            tool: "bubblewrap".into(),
            bubblewrap: BubblewrapDescription { path: self.bwrap.clone(), version: self.version.clone() },
            namespaces: ["user", "pid", "network (loopback only)", "mount", "ipc", "uts", "cgroup"]
                .map(String::from)
                .to_vec(),
            nested_user_namespaces: match &self.nested_userns {
                NestedUserns::Disabled => "refused (bubblewrap --disable-userns)".to_string(),
                NestedUserns::Filtered(_) => format!(
                    "refused by a seccomp filter (unshare/clone with CLONE_NEWUSER: EPERM; clone3: ENOSYS): \
                     {version} has no working --disable-userns"
                ),
                NestedUserns::Allowed => "allowed".to_string(),
            },
            capping: self.capping.describe().into(),
            work_space: if self.tmpfs_size {
                "tmpfs capped at limits.work_space_bytes (bubblewrap --size)".to_string()
            } else {
                format!("tmpfs capped only by the job's memory limit: {version} has no --size")
            },
            limits: LimitsDescription {
                memory_bytes: self.limits.memory,
                processes: self.limits.processes,
                file_size_bytes: self.limits.file_size,
                work_space_bytes: self.limits.work_space,
                output_bytes: self.limits.output,
            },
        }
    }
}

/// The sandbox as the grade reports record it (Gradescope's `extra_data.sandbox`,
/// exercism's and JUnit's properties), and the line `grade` prints from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxDescription {
    pub tool: String,
    pub bubblewrap: BubblewrapDescription,
    pub namespaces: Vec<String>,
    /// Whether the job may make user namespaces of its own, and what refuses them.
    pub nested_user_namespaces: String,
    /// What caps the job's memory and processes.
    pub capping: String,
    /// The job's work directory and what caps it.
    pub work_space: String,
    pub limits: LimitsDescription,
}

/// Which bubblewrap ran the jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BubblewrapDescription {
    pub path: PathBuf,
    /// `bwrap --version`'s number, when it said one.
    pub version: Option<String>,
}

/// A job's limits, as the sandbox enforces them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitsDescription {
    pub memory_bytes: u64,
    pub processes: u64,
    pub file_size_bytes: u64,
    pub work_space_bytes: u64,
    pub output_bytes: u64,
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// A sandbox as probed on a machine with bubblewrap 0.8 and rlimits, for tests of the
/// command lines made with it.
#[cfg(test)]
pub(crate) fn stand_in() -> Sandbox {
    Sandbox {
        bwrap: PathBuf::from("/usr/bin/bwrap"),
        version: Some("0.8.0".into()),
        limits: Limits::default(),
        capping: Capping::Rlimits,
        systemd_run: None,
        tmpfs_size: true,
        nested_userns: NestedUserns::Disabled,
    }
}

#[cfg(test)]
mod tests;
