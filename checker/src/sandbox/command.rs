//! The command line that runs a program in a fresh sandbox: bwrap's options, the
//! seccomp filter where it stands in for `--disable-userns`, the rlimits, and, where a
//! systemd user scope caps the job, `systemd-run` around it all.
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::limits::{self, Capping, JobCgroup};
use super::{seccomp, Mount, NestedUserns, Sandbox};

/// The tmpfs at `/tmp` of every job.
const TMP_BYTES: u64 = 64 << 20;

impl Sandbox {
    /// The command that runs `program args` in a fresh sandbox, `workdir` its current
    /// directory, `env` its whole environment, `mounts` what it sees beyond the system.
    /// Capped as [`Sandbox::capping`] says, but for a cgroup, which only a job made with
    /// [`Sandbox::job_command`] joins.
    pub fn command(
        &self,
        program: &Path,
        args: &[OsString],
        workdir: &Path,
        env: &[(String, String)],
        mounts: &[Mount],
    ) -> Command {
        let bwrap = self.bwrap_args(program, args, workdir, env, mounts);
        self.wrap(bwrap, None)
    }

    /// [`Sandbox::command`] for a job with its own cgroup or scope (`cgroup`, from
    /// [`JobCgroup::create`]), whose limits the checker reads when it has ended.
    pub fn job_command(
        &self,
        cgroup: Option<&JobCgroup>,
        program: &Path,
        args: &[OsString],
        workdir: &Path,
        env: &[(String, String)],
        mounts: &[Mount],
    ) -> std::io::Result<Command> {
        let bwrap = self.bwrap_args(program, args, workdir, env, mounts);
        let events = match cgroup {
            Some(JobCgroup::Scope { events }) => Some(events.as_path()),
            _ => None,
        };
        let mut cmd = self.wrap(bwrap, events);
        if let Some(cgroup) = cgroup {
            cgroup.enter(&mut cmd)?;
        }
        Ok(cmd)
    }

    /// bwrap with `bwrap_args`, in a scope of its own where the sandbox caps by scopes
    /// (its counters copied to `events`, or dropped), with the rlimits and the seccomp
    /// descriptor it reads.
    fn wrap(&self, mut bwrap_args: Vec<OsString>, events: Option<&Path>) -> Command {
        let filter = match &self.nested_userns {
            NestedUserns::Filtered(program) => Some(seccomp::descriptor(program)),
            _ => None,
        };
        if let Some(Ok(fd)) = &filter {
            // Among the options, before `--` and the program.
            let at = bwrap_args.iter().position(|a| a == "--").unwrap_or(0);
            bwrap_args.splice(at..at, [OsString::from("--seccomp"), fd.as_raw_fd().to_string().into()]);
        }
        let mut cmd = match (self.capping, &self.systemd_run) {
            (Capping::UserScope, Some(systemd_run)) => {
                let mut cmd = Command::new(systemd_run);
                let wrapper = limits::scope_wrapper("/sys/fs/cgroup");
                cmd.args(limits::scope_args(&self.limits)).args(["--", "/bin/sh", "-c", &wrapper, "sh"]);
                cmd.arg(events.unwrap_or(Path::new("/dev/null"))).arg(&self.bwrap).args(bwrap_args);
                // systemd-run needs the session's variables to reach the user manager; the
                // wrapper starts bwrap with none.
                cmd
            }
            _ => {
                let mut cmd = Command::new(&self.bwrap);
                // bwrap hands its environment to the program: it gets none but `--setenv`'s.
                cmd.args(bwrap_args).env_clear();
                cmd
            }
        };
        limits::set_rlimits(&mut cmd, &self.limits, self.capping);
        match filter {
            Some(Ok(fd)) => {
                // SAFETY: between fork and exec; fcntl and lseek only. The descriptor lives
                // in the closure, as long as the command.
                unsafe {
                    cmd.pre_exec(move || seccomp::keep_open_in_child(fd.as_raw_fd()));
                }
            }
            Some(Err(e)) => {
                // Without its filter the job must not start at all.
                let code = e.raw_os_error().unwrap_or(libc::EIO);
                // SAFETY: only builds an error value from a number.
                unsafe {
                    cmd.pre_exec(move || Err(std::io::Error::from_raw_os_error(code)));
                }
            }
            None => {}
        }
        cmd
    }

    /// bwrap's options and the program, for this machine's bubblewrap.
    pub(super) fn bwrap_args(
        &self,
        program: &Path,
        args: &[OsString],
        workdir: &Path,
        env: &[(String, String)],
        mounts: &[Mount],
    ) -> Vec<OsString> {
        let mut cmd: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| cmd.extend(items.iter().map(OsString::from));
        push(&["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"]);
        push(&["--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
        if self.nested_userns == NestedUserns::Disabled {
            push(&["--disable-userns"]);
        }
        for (key, value) in env {
            push(&["--setenv", key, value]);
        }
        // The system, read-only: programs, libraries, and the few files of /etc that
        // name resolution and the dynamic loader read. Not /home, /root, /work: a job
        // sees of those only what `mounts` names.
        push(&["--ro-bind", "/usr", "/usr"]);
        for dir in ["/bin", "/sbin", "/lib", "/lib64", "/lib32"] {
            match std::fs::read_link(dir) {
                Ok(target) => {
                    cmd.push("--symlink".into());
                    cmd.push(target.into());
                    cmd.push(dir.into());
                }
                Err(_) => cmd.extend(["--ro-bind-try", dir, dir].map(OsString::from)),
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
            cmd.extend(["--ro-bind-try", file, file].map(OsString::from));
        }
        cmd.extend(["--proc", "/proc", "--dev", "/dev"].map(OsString::from));
        self.tmpfs(&mut cmd, Path::new("/tmp"), TMP_BYTES);
        for mount in mounts {
            let (flag, path) = match mount {
                Mount::ReadOnly(path) => ("--ro-bind-try", path),
                Mount::Writable(path) => ("--bind", path),
                Mount::Device(path) => ("--dev-bind-try", path),
                Mount::Scratch(path, bytes) => {
                    self.tmpfs(&mut cmd, path, *bytes);
                    continue;
                }
            };
            cmd.extend([flag.into(), path.into(), path.into()]);
        }
        cmd.extend(["--chdir".into(), workdir.into(), "--".into(), program.into()]);
        cmd.extend(args.iter().cloned());
        cmd
    }

    /// A tmpfs at `path`, of `bytes` where bubblewrap can cap it (`--size`, 0.7.0);
    /// elsewhere the job's cgroup caps it with the rest of the job's memory (the probe
    /// refuses a bubblewrap without `--size` where nothing would).
    fn tmpfs(&self, cmd: &mut Vec<OsString>, path: &Path, bytes: u64) {
        if self.tmpfs_size {
            cmd.extend(["--size".into(), bytes.to_string().into()]);
        }
        cmd.extend(["--tmpfs".into(), path.into()]);
    }
}
