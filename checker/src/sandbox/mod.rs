//! The sandbox untrusted code runs in: bubblewrap (Debian's `bubblewrap`), one per
//! job, with the kernel's own limits around it.
//!
//! A job (the ranks of one run, or one `cargo build`) gets fresh namespaces: its own
//! network (loopback only, so its ranks still meet on 127.0.0.1 and nothing else is
//! reachable), its own pids (when the job ends every process in it is gone, `setsid`
//! or not), its own user (no capabilities, no new privileges) and mounts: the host's
//! system directories and what the job needs read-only, its work directory a size-capped
//! tmpfs, a private `/tmp`, and a cleared environment. Memory and process count are
//! capped by a cgroup where the checker may make one (root), by rlimits otherwise;
//! file size, core dumps and open files always by rlimits.
//!
//! This module only says *how* to confine (the policy and the `bwrap` command line);
//! [`crate::confined`] runs jobs in it.
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use checker::BWRAP_ENV;
use serde_json::{json, Value};

/// What one job may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of memory for the whole job (all its processes together where a cgroup
    /// is available, each process otherwise).
    pub memory: u64,
    /// Processes (and threads) of the job at once.
    pub processes: u64,
    /// Bytes of any one file a process writes.
    pub file_size: u64,
    /// Bytes the job's work directory may hold (its output and trace included).
    pub work_space: u64,
    /// Bytes of a process's output the checker reads back; the rest is cut.
    pub output: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        const MIB: u64 = 1 << 20;
        Limits {
            memory: 6 * 1024 * MIB,
            // libtorch starts a thread pool per rank and Gloo a few threads per peer.
            processes: 512,
            file_size: 256 * MIB,
            work_space: 512 * MIB,
            output: 4 * MIB,
        }
    }
}

/// How memory and processes are capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capping {
    /// A cgroup (v1 hierarchy) per job: the whole job shares the limits, and the kernel
    /// says when it killed for memory.
    CgroupV1,
    /// A cgroup (v2) per job.
    CgroupV2,
    /// Per-process rlimits: `RLIMIT_DATA` and `RLIMIT_NPROC` (the latter does not bind
    /// root).
    Rlimits,
}

/// A sandbox that works on this machine.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    pub limits: Limits,
    pub capping: Capping,
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
    /// Finds bubblewrap and checks that it can make the namespaces a job needs.
    pub fn probe(limits: Limits) -> Result<Sandbox, Unavailable> {
        let named = std::env::var_os(BWRAP_ENV).filter(|p| !p.is_empty()).map(PathBuf::from);
        Sandbox::probe_at(named, limits)
    }

    /// [`Sandbox::probe`] with bubblewrap at `bwrap` (`None`: found on PATH).
    fn probe_at(bwrap: Option<PathBuf>, limits: Limits) -> Result<Sandbox, Unavailable> {
        let bwrap = match bwrap {
            Some(path) => path,
            None => find_on_path("bwrap").ok_or_else(|| Unavailable {
                cause: "bubblewrap (`bwrap`) is not installed".into(),
                fix: "run `bash scripts/setup.sh` (it installs Debian's `bubblewrap`), or \
                      `sudo apt-get install bubblewrap`; or pass --unsandboxed to run the \
                      submitted code with all of your rights"
                    .into(),
            })?,
        };
        let out = Command::new(&bwrap)
            .args(["--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "true"])
            .output()
            .map_err(|e| Unavailable {
                cause: format!("cannot run {}: {e}", bwrap.display()),
                fix: "install Debian's `bubblewrap` (`bash scripts/setup.sh`), or pass --unsandboxed".into(),
            })?;
        if !out.status.success() {
            return Err(Unavailable {
                cause: format!(
                    "bubblewrap cannot make namespaces here: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                fix: "allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`, \
                      or in a container run it with user namespaces allowed), or pass --unsandboxed"
                    .into(),
            });
        }
        let capping = if cgroup_v1_writable() {
            Capping::CgroupV1
        } else if cgroup_v2_writable() {
            Capping::CgroupV2
        } else {
            Capping::Rlimits
        };
        Ok(Sandbox { bwrap, limits, capping })
    }

    /// The command that runs `program args` in a fresh sandbox, `workdir` its current
    /// directory, `env` its whole environment, `mounts` what it sees beyond the system.
    pub fn command(
        &self,
        program: &Path,
        args: &[OsString],
        workdir: &Path,
        env: &[(String, String)],
        mounts: &[Mount],
    ) -> Command {
        let mut cmd = Command::new(&self.bwrap);
        cmd.args(["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"]);
        cmd.args(["--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
        cmd.args(["--disable-userns", "--clearenv"]);
        for (key, value) in env {
            cmd.arg("--setenv").arg(key).arg(value);
        }
        // The system, read-only: programs, libraries, and the few files of /etc that
        // name resolution and the dynamic loader read. Not /home, /root, /work: a job
        // sees of those only what `mounts` names.
        cmd.args(["--ro-bind", "/usr", "/usr"]);
        for dir in ["/bin", "/sbin", "/lib", "/lib64", "/lib32"] {
            match std::fs::read_link(dir) {
                Ok(target) => {
                    cmd.arg("--symlink").arg(target).arg(dir);
                }
                Err(_) => {
                    cmd.args(["--ro-bind-try", dir, dir]);
                }
            }
        }
        for file in [
            "/etc/hosts",
            "/etc/nsswitch.conf",
            "/etc/ld.so.cache",
            "/etc/ld.so.conf",
            "/etc/ld.so.conf.d",
            // Debian's `cc` (the linker rustc calls) is a link through here.
            "/etc/alternatives",
        ] {
            cmd.args(["--ro-bind-try", file, file]);
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev"]);
        cmd.args(["--size", "67108864", "--tmpfs", "/tmp"]);
        for mount in mounts {
            match mount {
                Mount::ReadOnly(path) => {
                    cmd.arg("--ro-bind-try").arg(path).arg(path);
                }
                Mount::Writable(path) => {
                    cmd.arg("--bind").arg(path).arg(path);
                }
                Mount::Device(path) => {
                    cmd.arg("--dev-bind-try").arg(path).arg(path);
                }
                Mount::Scratch(path, bytes) => {
                    cmd.arg("--size").arg(bytes.to_string()).arg("--tmpfs").arg(path);
                }
            }
        }
        cmd.arg("--chdir").arg(workdir).arg("--").arg(program).args(args);
        self.set_rlimits(&mut cmd);
        cmd
    }

    /// rlimits for bwrap and so for everything in the sandbox.
    fn set_rlimits(&self, cmd: &mut Command) {
        let limits = self.limits.clone();
        let per_process = self.capping == Capping::Rlimits;
        // SAFETY: runs between fork and exec; setrlimit is async-signal-safe and nothing
        // here allocates.
        unsafe {
            cmd.pre_exec(move || {
                let set = |resource, value: u64| {
                    let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
                    libc::setrlimit(resource, &limit);
                };
                set(libc::RLIMIT_FSIZE, limits.file_size);
                set(libc::RLIMIT_CORE, 0);
                set(libc::RLIMIT_NOFILE, 4096);
                if per_process {
                    set(libc::RLIMIT_DATA, limits.memory);
                    set(libc::RLIMIT_NPROC, limits.processes);
                }
                Ok(())
            });
        }
    }

    /// The sandbox as the results JSON records it.
    pub fn describe(&self) -> Value {
        json!({
            "tool": "bubblewrap",
            "namespaces": ["user", "pid", "network (loopback only)", "mount", "ipc", "uts", "cgroup"],
            "capping": match self.capping {
                Capping::CgroupV1 => "cgroup v1 (memory, pids)",
                Capping::CgroupV2 => "cgroup v2 (memory, pids)",
                Capping::Rlimits => "rlimits (RLIMIT_DATA, RLIMIT_NPROC per process)",
            },
            "limits": {
                "memory_bytes": self.limits.memory,
                "processes": self.limits.processes,
                "file_size_bytes": self.limits.file_size,
                "work_space_bytes": self.limits.work_space,
                "output_bytes": self.limits.output,
            },
        })
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

const CGROUP_V1: &str = "/sys/fs/cgroup";
const CGROUP_V2: &str = "/sys/fs/cgroup";

fn cgroup_v1_writable() -> bool {
    ["memory", "pids"].iter().all(|c| probe_dir(&Path::new(CGROUP_V1).join(c)))
}

fn cgroup_v2_writable() -> bool {
    let root = Path::new(CGROUP_V2);
    root.join("cgroup.controllers").is_file() && probe_dir(root)
}

/// Whether a child cgroup can be made under `dir`.
fn probe_dir(dir: &Path) -> bool {
    let probe = dir.join(format!("ddp-lab-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    if made {
        let _ = std::fs::remove_dir(&probe);
    }
    made
}

/// The cgroup(s) of one job: made before it starts, read and removed after it ends.
pub struct JobCgroup {
    dirs: Vec<PathBuf>,
    version: Capping,
}

/// What the kernel did to a job at its limits.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LimitsHit {
    pub out_of_memory: bool,
    pub process_limit: bool,
}

impl JobCgroup {
    /// A cgroup with the sandbox's limits; `None` where the sandbox caps by rlimits.
    pub fn create(sandbox: &Sandbox) -> std::io::Result<Option<JobCgroup>> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("ddp-lab-job-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let limits = &sandbox.limits;
        let group = match sandbox.capping {
            Capping::Rlimits => return Ok(None),
            Capping::CgroupV1 => {
                let memory = Path::new(CGROUP_V1).join("memory").join(&name);
                let pids = Path::new(CGROUP_V1).join("pids").join(&name);
                std::fs::create_dir(&memory)?;
                std::fs::create_dir(&pids)?;
                let group =
                    JobCgroup { dirs: vec![memory.clone(), pids.clone()], version: Capping::CgroupV1 };
                std::fs::write(memory.join("memory.limit_in_bytes"), limits.memory.to_string())?;
                // Swap would only slow a runaway job down; where the kernel accounts it, cap it too.
                let _ = std::fs::write(memory.join("memory.memsw.limit_in_bytes"), limits.memory.to_string());
                std::fs::write(pids.join("pids.max"), limits.processes.to_string())?;
                group
            }
            Capping::CgroupV2 => {
                let dir = Path::new(CGROUP_V2).join(&name);
                std::fs::create_dir(&dir)?;
                let group = JobCgroup { dirs: vec![dir.clone()], version: Capping::CgroupV2 };
                std::fs::write(dir.join("memory.max"), limits.memory.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
                group
            }
        };
        Ok(Some(group))
    }

    /// Makes `cmd`'s process join the cgroup before it runs anything.
    pub fn enter(&self, cmd: &mut Command) -> std::io::Result<()> {
        let mut files = Vec::new();
        for dir in &self.dirs {
            files.push(std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"))?);
        }
        // SAFETY: between fork and exec; write(2) on descriptors opened before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for file in &files {
                    // "0" is the writing process itself.
                    let mut file: &File = file;
                    file.write_all(b"0")?;
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// What the kernel recorded: a kill for memory, a refused fork.
    pub fn limits_hit(&self) -> LimitsHit {
        let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let count = |text: &str, key: &str| {
            text.lines()
                .filter_map(|l| l.strip_prefix(key))
                .filter_map(|rest| rest.trim().parse::<u64>().ok())
                .next()
                .unwrap_or(0)
        };
        match self.version {
            Capping::CgroupV1 => LimitsHit {
                out_of_memory: count(&read(&self.dirs[0], "memory.oom_control"), "oom_kill ") > 0,
                process_limit: count(&read(&self.dirs[1], "pids.events"), "max ") > 0,
            },
            _ => LimitsHit {
                out_of_memory: count(&read(&self.dirs[0], "memory.events"), "oom_kill ") > 0,
                process_limit: count(&read(&self.dirs[0], "pids.events"), "max ") > 0,
            },
        }
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            // Empty once the job's pid namespace is gone; a moment's retry for the
            // kernel to finish tearing it down.
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Sandbox {
        Sandbox {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            limits: Limits::default(),
            capping: Capping::Rlimits,
        }
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_job_gets_every_namespace_no_capabilities_and_a_cleared_environment() {
        let cmd = sandbox().command(Path::new("/bin/true"), &[], Path::new("/tmp"), &[], &[]);
        let args = args(&cmd);
        for flag in ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv"] {
            assert!(args.iter().any(|a| a == flag), "{flag} missing from {args:?}");
        }
        assert!(!args.iter().any(|a| a == "--share-net"), "the network must stay unshared");
        assert!(args.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        // Nothing of the grader's home or the repository unless named.
        assert!(!args.iter().any(|a| a == "/root" || a == "/home" || a == "/work"), "{args:?}");
    }

    #[test]
    fn only_the_named_paths_are_writable_and_gpus_are_passed_as_devices() {
        let mounts = [
            Mount::ReadOnly("/data".into()),
            Mount::Writable("/target".into()),
            Mount::Device("/dev/nvidia0".into()),
            Mount::Scratch("/job".into(), 1024),
        ];
        let cmd = sandbox().command(Path::new("/bin/true"), &[], Path::new("/job"), &[], &mounts);
        let args = args(&cmd);
        assert!(args.windows(3).any(|w| w == ["--ro-bind-try", "/data", "/data"]));
        assert!(args.windows(3).any(|w| w == ["--bind", "/target", "/target"]));
        assert!(args.windows(3).any(|w| w == ["--dev-bind-try", "/dev/nvidia0", "/dev/nvidia0"]));
        assert!(args.windows(4).any(|w| w == ["--size", "1024", "--tmpfs", "/job"]));
        let binds = args.windows(3).filter(|w| w[0] == "--bind").count();
        assert_eq!(binds, 1, "one writable bind, the one named: {args:?}");
    }

    #[test]
    fn a_missing_bwrap_is_refused_with_the_fix() {
        let err = Sandbox::probe_at(Some("/nonexistent/bwrap".into()), Limits::default()).unwrap_err();
        assert!(err.cause.contains("/nonexistent/bwrap"), "{}", err.cause);
        assert!(err.fix.contains("--unsandboxed"), "{}", err.fix);
    }
}
