//! Starting a child: in its own process group, registered with the watchdog, forked by
//! one long-lived thread so that the kernel's death signal waits for this process.
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

use crate::child::{Child, Output};
use crate::groups;

/// Starts `cmd` in its own process group, to die with this process (see the crate docs).
/// The caller sets stdio and environment as for [`Command::spawn`].
///
/// The kernel's death signal fires when the *thread* that forked the child ends, not
/// only the process; so every child is forked by one long-lived thread of this crate,
/// and a child started from a short-lived thread (the checker runs independent jobs
/// on scoped threads) lives on until its launcher process ends.
pub fn spawn(cmd: Command) -> io::Result<Child> {
    let (reply, answer) = mpsc::channel();
    spawner().send((cmd, reply)).map_err(|_| io::Error::other("the launcher's spawning thread is gone"))?;
    let inner =
        answer.recv().map_err(|_| io::Error::other("the launcher's spawning thread did not answer"))??;
    Ok(Child::new(inner))
}

/// Runs `cmd` to its end (stdin null, stdout and stderr captured), killing its group
/// after `timeout` if one is given.
pub fn output(mut cmd: Command, timeout: Option<Duration>) -> io::Result<Output> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    spawn(cmd)?.wait_with_output(timeout)
}

/// Runs `cmd` to its end with the caller's stdio, as [`Command::status`] does, but in
/// its own process group and dying with this process.
pub fn status(cmd: Command) -> io::Result<ExitStatus> {
    spawn(cmd)?.wait()
}

/// Asks the kernel to SIGKILL the child `cmd` starts when the thread that starts it
/// ends (the process dying included), and refuses to start it if this process is
/// already gone. [`spawn`] does this itself; this is for a caller that keeps its
/// children in its own process group, as `tch_distributed::spawn` does so that a
/// Ctrl-C in the terminal reaches every rank. Call it from a thread that lives as long
/// as the child should.
pub fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: runs between fork and exec; prctl and getppid are async-signal-safe and
        // nothing here allocates.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before the request above took effect.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

/// The long-lived thread that forks every child (see [`spawn`] for why).
type SpawnRequest = (Command, mpsc::Sender<io::Result<std::process::Child>>);

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("launcher-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(start(&mut cmd));
                }
            })
            .expect("start the launcher's spawning thread");
        tx
    })
}

fn start(cmd: &mut Command) -> io::Result<std::process::Child> {
    cmd.process_group(0);
    die_with_parent(cmd);
    groups::spawn_registered(cmd)
}
