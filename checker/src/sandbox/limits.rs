//! How much a job may use, and how that is enforced: a cgroup per job where the
//! checker may make one (root), a systemd user scope per job where a user manager
//! delegates the memory and pids controllers (an ordinary login, no root), per-process
//! rlimits otherwise. File size, core dumps and open files are always rlimits.
use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What one job may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of memory for the whole job (all its processes together where a cgroup
    /// or scope is available, each process otherwise).
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
    /// A transient scope of the user's systemd per job (`systemd-run --user --scope`):
    /// a cgroup v2 the user manager makes and caps, no root needed.
    UserScope,
    /// Per-process rlimits: `RLIMIT_DATA` and `RLIMIT_NPROC` (the latter does not bind
    /// root).
    Rlimits,
}

impl Capping {
    /// The one this machine allows, best first. `scope` probes the systemd user scope
    /// (only asked where no cgroup is writable).
    pub fn choose(scope: impl FnOnce() -> bool) -> Capping {
        if cgroup_v1_writable() {
            Capping::CgroupV1
        } else if cgroup_v2_writable() {
            Capping::CgroupV2
        } else if scope() {
            Capping::UserScope
        } else {
            Capping::Rlimits
        }
    }

    /// Whether the job's memory is capped as a whole (its tmpfs pages included: the
    /// kernel charges them to the cgroup of the process that wrote them).
    pub fn whole_job(self) -> bool {
        self != Capping::Rlimits
    }

    pub fn describe(self) -> &'static str {
        match self {
            Capping::CgroupV1 => "cgroup v1 (memory, pids)",
            Capping::CgroupV2 => "cgroup v2 (memory, pids)",
            Capping::UserScope => "systemd user scope (MemoryMax, TasksMax for the whole job)",
            Capping::Rlimits => "rlimits (RLIMIT_DATA, RLIMIT_NPROC per process)",
        }
    }
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

/// `systemd-run --user --scope` with the job's limits, up to the command: the whole
/// job (bwrap and everything in it) shares `MemoryMax` and `TasksMax`, without swap.
/// `Delegate=yes` keeps systemd from stopping the scope when the kernel kills one of
/// its processes for memory (its `OOMPolicy=` defaults to `continue` for delegated
/// units, systemd.scope(5)), so the job's supervisor still reports and the wrapper
/// still reads the scope's counters; the job cannot see the cgroup tree to use it.
pub fn scope_args(limits: &Limits) -> Vec<String> {
    let mut args: Vec<String> = ["--user", "--scope", "--quiet", "--collect"].map(String::from).to_vec();
    for property in [
        format!("MemoryMax={}", limits.memory),
        "MemorySwapMax=0".into(),
        format!("TasksMax={}", limits.processes),
        "Delegate=yes".into(),
    ] {
        args.push("-p".into());
        args.push(property);
    }
    args
}

/// The shell inside the scope: runs bwrap (`$2…`) with an empty environment, then,
/// the scope still alive, copies its memory and pids counters from the cgroup tree
/// mounted at `cgroupfs` to the file `$1` (each line prefixed with the file it came
/// from) and exits as bwrap did.
pub fn scope_wrapper(cgroupfs: &str) -> String {
    format!(
        r#"events=$1; shift
env -i "$@"; status=$?
cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
for f in memory.events pids.events; do sed "s/^/$f /" "{cgroupfs}$cg/$f"; done >"$events" 2>/dev/null
exit $status"#
    )
}

/// The shell the probe runs in a scope: prints the scope's own caps.
const SCOPE_PROBE: &str = r#"cg=$(sed -n 's/^0:://p' /proc/self/cgroup); cat "/sys/fs/cgroup$cg/memory.max" "/sys/fs/cgroup$cg/pids.max""#;

/// Whether a systemd user scope caps a job here: `systemd-run` reaches a user manager,
/// and the scope it makes really has the memory and process limits asked for (they
/// are silently absent where the controllers are not delegated to the user).
pub fn scope_works(systemd_run: &Path, limits: &Limits) -> bool {
    let mut cmd = Command::new(systemd_run);
    cmd.args(scope_args(limits)).args(["--", "/bin/sh", "-c", SCOPE_PROBE]);
    let Ok(out) = child_process::output(cmd, Some(Duration::from_secs(20))) else { return false };
    let caps: Vec<&str> = out.stdout.split_whitespace().collect();
    out.success() && caps == [limits.memory.to_string(), limits.processes.to_string()]
}

/// The cgroup(s) of one job: made before it starts, read and removed after it ends.
pub enum JobCgroup {
    V1 {
        memory: PathBuf,
        pids: PathBuf,
    },
    V2 {
        dir: PathBuf,
    },
    /// A systemd scope: the counters come back in this file, written by
    /// [`scope_wrapper`] as the job ends.
    Scope {
        events: PathBuf,
    },
}

/// What the kernel did to a job at its limits.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LimitsHit {
    pub out_of_memory: bool,
    pub process_limit: bool,
}

impl JobCgroup {
    /// A cgroup with `limits` for `capping`; `None` where the sandbox caps by rlimits.
    pub fn create(capping: Capping, limits: &Limits) -> std::io::Result<Option<JobCgroup>> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("ddp-lab-job-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let group = match capping {
            Capping::Rlimits => return Ok(None),
            Capping::UserScope => {
                let events = std::env::temp_dir().join(format!("{name}.events"));
                // Made here, new and the checker's own, so that the wrapper's `>` writes
                // into it and never through a link someone else left in /tmp.
                let _ = std::fs::remove_file(&events);
                std::fs::OpenOptions::new().write(true).create_new(true).open(&events)?;
                JobCgroup::Scope { events }
            }
            Capping::CgroupV1 => {
                let memory = Path::new(CGROUP_V1).join("memory").join(&name);
                let pids = Path::new(CGROUP_V1).join("pids").join(&name);
                std::fs::create_dir(&memory)?;
                let group = JobCgroup::V1 { memory: memory.clone(), pids: pids.clone() };
                std::fs::create_dir(&pids)?;
                std::fs::write(memory.join("memory.limit_in_bytes"), limits.memory.to_string())?;
                // Swap would only slow a runaway job down; where the kernel accounts it, cap it too.
                let _ = std::fs::write(memory.join("memory.memsw.limit_in_bytes"), limits.memory.to_string());
                std::fs::write(pids.join("pids.max"), limits.processes.to_string())?;
                group
            }
            Capping::CgroupV2 => {
                let dir = Path::new(CGROUP_V2).join(&name);
                std::fs::create_dir(&dir)?;
                let group = JobCgroup::V2 { dir: dir.clone() };
                std::fs::write(dir.join("memory.max"), limits.memory.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
                group
            }
        };
        Ok(Some(group))
    }

    fn dirs(&self) -> Vec<&Path> {
        match self {
            JobCgroup::V1 { memory, pids } => vec![memory, pids],
            JobCgroup::V2 { dir } => vec![dir],
            JobCgroup::Scope { .. } => vec![],
        }
    }

    /// Makes `cmd`'s process join the cgroup before it runs anything (a scope is
    /// joined by the command line instead: [`super::Sandbox::job_command`]).
    pub fn enter(&self, cmd: &mut Command) -> std::io::Result<()> {
        let mut files = Vec::new();
        for dir in self.dirs() {
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
        let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
        match self {
            JobCgroup::V1 { memory, pids } => LimitsHit {
                out_of_memory: count(&read(memory.join("memory.oom_control")), "oom_kill ") > 0,
                process_limit: count(&read(pids.join("pids.events")), "max ") > 0,
            },
            JobCgroup::V2 { dir } => LimitsHit {
                out_of_memory: count(&read(dir.join("memory.events")), "oom_kill ") > 0,
                process_limit: count(&read(dir.join("pids.events")), "max ") > 0,
            },
            JobCgroup::Scope { events } => scope_hit(&read(events.clone())),
        }
    }
}

/// The limits hit, from what [`scope_wrapper`] copied out of the scope.
pub fn scope_hit(events: &str) -> LimitsHit {
    LimitsHit {
        out_of_memory: count(events, "memory.events oom_kill ") > 0,
        process_limit: count(events, "pids.events max ") > 0,
    }
}

/// The number after `key` on the first line that starts with it.
fn count(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(key))
        .filter_map(|rest| rest.trim().parse().ok())
        .next()
        .unwrap_or(0)
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        if let JobCgroup::Scope { events } = self {
            let _ = std::fs::remove_file(events);
        }
        for dir in self.dirs() {
            // Empty once the job's pid namespace is gone; a moment's retry for the
            // kernel to finish tearing it down.
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// rlimits for bwrap and so for everything in the sandbox.
pub fn set_rlimits(cmd: &mut Command, limits: &Limits, capping: Capping) {
    let limits = limits.clone();
    let per_process = !capping.whole_job();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_caps_memory_and_tasks_of_the_whole_job_and_survives_an_oom_kill() {
        let limits = Limits { memory: 6 << 30, processes: 512, ..Limits::default() };
        let args = scope_args(&limits);
        for expected in [
            ["--user", "--scope"].as_slice(),
            &["-p", "MemoryMax=6442450944"],
            &["-p", "TasksMax=512"],
            &["-p", "MemorySwapMax=0"],
            // OOMPolicy= of a delegated unit defaults to continue: the scope is not stopped
            // at the first kill, so the job's verdict can still say "out of memory".
            &["-p", "Delegate=yes"],
        ] {
            assert!(
                args.windows(expected.len()).any(|w| w == expected),
                "{expected:?} missing from {args:?}"
            );
        }
    }

    #[test]
    fn the_scopes_counters_say_which_limit_was_hit() {
        // memory.events has its own "max" line (times memory reached its cap): it must
        // not read as the process limit.
        let oom = "memory.events low 0\nmemory.events high 0\nmemory.events max 41\nmemory.events oom 2\n\
                   memory.events oom_kill 1\npids.events max 0\n";
        assert_eq!(scope_hit(oom), LimitsHit { out_of_memory: true, process_limit: false });
        let forks = "memory.events max 0\nmemory.events oom_kill 0\npids.events max 12\n";
        assert_eq!(scope_hit(forks), LimitsHit { out_of_memory: false, process_limit: true });
        assert_eq!(scope_hit(""), LimitsHit::default());
    }

    /// The wrapper, run with a stand-in bwrap and a stand-in cgroup tree: it clears the
    /// environment, passes the exit status through, and copies the counters out.
    #[test]
    fn the_scope_wrapper_reports_the_counters_and_the_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        // The cgroup this test (and so the wrapper it starts) is in, under a fake tree.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(cg) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            eprintln!("skipped: no cgroup v2 line in /proc/self/cgroup");
            return;
        };
        let tree = dir.path().join("cgroupfs");
        let scope = PathBuf::from(format!("{}{cg}", tree.display()));
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::write(scope.join("memory.events"), "max 41\noom 2\noom_kill 1\n").unwrap();
        std::fs::write(scope.join("pids.events"), "max 0\n").unwrap();
        let events = dir.path().join("job.events");
        let fake_bwrap = dir.path().join("bwrap");
        std::fs::write(&fake_bwrap, "#!/bin/sh\nenv > \"$1\"\nexit 3\n").unwrap();
        std::fs::set_permissions(&fake_bwrap, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let seen_env = dir.path().join("env");
        let out = Command::new("/bin/sh")
            .args(["-c", &scope_wrapper(&tree.display().to_string()), "sh"])
            .arg(&events)
            .arg(&fake_bwrap)
            .arg(&seen_env)
            .env("DDP_LAB_GRADER_SECRET", "x")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "bwrap's status passes through");
        let env = std::fs::read_to_string(&seen_env).unwrap();
        assert!(!env.contains("DDP_LAB_GRADER_SECRET"), "bwrap must start with an empty environment: {env}");
        let copied = std::fs::read_to_string(&events).unwrap();
        assert_eq!(scope_hit(&copied), LimitsHit { out_of_memory: true, process_limit: false }, "{copied}");
    }
}
