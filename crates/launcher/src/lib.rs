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
use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

/// How often waits with a limit look at the child.
const POLL: Duration = Duration::from_millis(20);

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
    let mut inner =
        answer.recv().map_err(|_| io::Error::other("the launcher's spawning thread did not answer"))??;
    Ok(Child {
        stdin: inner.stdin.take(),
        stdout: inner.stdout.take(),
        stderr: inner.stderr.take(),
        inner,
        status: None,
        left_behind: false,
    })
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

/// A process started by [`spawn`]. Dropping it kills its process group and reaps it.
#[derive(Debug)]
pub struct Child {
    inner: std::process::Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    status: Option<ExitStatus>,
    left_behind: bool,
}

impl Child {
    /// Its pid, which is also its process group's id.
    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    /// Its exit status once it has ended (reaping it, and killing what it left in its
    /// group); `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if let Some(status) = self.inner.try_wait()? {
                self.ended(status);
            }
        }
        Ok(self.status)
    }

    /// Waits for it to end; see [`Child::try_wait`].
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.inner.wait()?;
        self.ended(status);
        Ok(status)
    }

    /// Waits at most `limit`; `None` if it is still running then (it is not killed).
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL to its whole process group, then reaps it.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            kill_group(self.id());
        }
        self.wait()
    }

    /// Whether processes of its group were still alive when it ended (they were
    /// killed then).
    pub fn left_behind(&self) -> bool {
        self.left_behind
    }

    /// Reads its stdout and stderr (those set to [`Stdio::piped`]) to the end while
    /// waiting for it; after `timeout` its group is killed and the output says
    /// `timed_out`.
    pub fn wait_with_output(mut self, timeout: Option<Duration>) -> io::Result<Output> {
        let start = Instant::now();
        drop(self.stdin.take());
        let out = drain(self.stdout.take());
        let err = drain(self.stderr.take());
        let (status, timed_out) = match timeout {
            None => (self.wait()?, false),
            Some(limit) => match self.wait_timeout(limit)? {
                Some(status) => (status, false),
                None => (self.kill()?, true),
            },
        };
        let text = |t: std::thread::JoinHandle<Vec<u8>>| {
            String::from_utf8_lossy(&t.join().unwrap_or_default()).into_owned()
        };
        Ok(Output {
            status,
            timed_out,
            stdout: text(out),
            stderr: text(err),
            elapsed: start.elapsed(),
            left_behind: self.left_behind,
        })
    }

    fn ended(&mut self, status: ExitStatus) {
        // The leader is gone; anything it left in its group goes too.
        self.left_behind = group_alive(self.id());
        kill_group(self.id());
        forget_group(self.id());
        self.status = Some(status);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// How a process run by [`output`] or [`Child::wait_with_output`] ended.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Processes of its group outlived it (and were killed).
    pub left_behind: bool,
}

impl Output {
    /// Exit code 0 within the time limit.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.success()
    }

    /// "exit code 1", "killed by signal 9 (SIGKILL)" or "timed out (killed)".
    pub fn describe(&self) -> String {
        if self.timed_out {
            "timed out (killed)".to_string()
        } else {
            describe(self.status)
        }
    }
}

/// "exit code 1" or "killed by signal 9 (SIGKILL)".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
        _ => status.to_string(),
    }
}

/// "SIGKILL" for 9, …; "signal 64" for a number without a usual name.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// A TCP port on loopback that nobody listens on right now (the OS picks it).
pub fn free_port() -> io::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `n` different free loopback ports (held together while picked, so they differ).
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

/// SIGKILL to the process group `pgid`.
pub fn kill_group(pgid: u32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
}

/// Whether any process of the group `pgid` still exists (zombies included).
pub fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

/// The running processes whose environment has `key=value` (zombies have none): how
/// tests see what of a run is still there, at any depth below its launcher.
pub fn processes_with_env(key: &str, value: &str) -> Vec<u32> {
    let wanted = format!("{key}={value}").into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|entry| entry == wanted.as_slice()))
        })
        .collect()
}

/// Waits up to `limit` until no running process has `key=value` in its environment;
/// returns the command lines of those still running then (empty: all gone).
pub fn wait_until_no_process_with_env(key: &str, value: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_with_env(key, value);
        if left.is_empty() || Instant::now() >= deadline {
            return left
                .iter()
                .map(|pid| {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end())
                })
                .collect();
        }
        std::thread::sleep(POLL);
    }
}

// ------------------------------------------------------------------ the registry

/// The process groups this process started that may still have members, and the
/// watchdog's pipe.
struct Groups {
    live: BTreeSet<u32>,
    watchdog: Option<ChildStdin>,
    watchdog_tried: bool,
}

static GROUPS: Mutex<Groups> =
    Mutex::new(Groups { live: BTreeSet::new(), watchdog: None, watchdog_tried: false });

fn groups() -> MutexGuard<'static, Groups> {
    // A panic elsewhere while holding the lock leaves the set itself consistent.
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells the watchdog that a group is done with, so that it never kills a later group
/// that happens to get the same id.
fn forget_group(pgid: u32) {
    let mut groups = groups();
    if groups.live.remove(&pgid) {
        tell_watchdog(&mut groups, &format!("- {pgid}"));
    }
}

fn tell_watchdog(groups: &mut Groups, line: &str) {
    if let Some(pipe) = groups.watchdog.as_mut() {
        if writeln!(pipe, "{line}").is_err() {
            groups.watchdog = None;
        }
    }
}

/// The watchdog: `+ PGID` and `- PGID` lines keep its list; end of input (this process
/// died, however) makes it kill every group still listed. It has a group of its own,
/// so a Ctrl-C typed in the terminal does not end it before it can act.
const WATCHDOG: &str = r#"trap '' INT HUP
groups=
while read -r op pgid; do
    case $op in
        +) groups="$groups $pgid" ;;
        -) kept=; for g in $groups; do [ "$g" = "$pgid" ] || kept="$kept $g"; done; groups=$kept ;;
    esac
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
"#;

fn start_watchdog() -> Option<ChildStdin> {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", WATCHDOG, "launcher-watchdog"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // Without it the death signal still ends direct children; only grandchildren lose.
    cmd.spawn().ok()?.stdin.take()
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
    // Registered under the same lock a stop signal takes: no child slips between.
    let mut groups = groups();
    if !groups.watchdog_tried {
        groups.watchdog_tried = true;
        groups.watchdog = start_watchdog();
    }
    let child = cmd.spawn()?;
    groups.live.insert(child.id());
    tell_watchdog(&mut groups, &format!("+ {}", child.id()));
    Ok(child)
}

// ------------------------------------------------------------------ stop signals

/// The write end of the pipe the signal handler wakes the stopping thread through.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// From now on SIGINT, SIGTERM and SIGHUP kill every process group this process
/// started with [`spawn`], then end this process with 128 + the signal (130 for
/// Ctrl-C, 143 for SIGTERM). A signal that was ignored (e.g. SIGHUP under `nohup`)
/// stays ignored. For launcher binaries, first thing in `main`; calling it again does
/// nothing.
pub fn stop_children_on_signals() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two descriptors it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return;
        }
        let [read_end, write_end] = fds;
        SIGNAL_PIPE.store(write_end, Ordering::SeqCst);
        let started = std::thread::Builder::new().name("launcher-signals".into()).spawn(move || loop {
            let mut signal = 0u8;
            // SAFETY: reads one byte into a local.
            let n = unsafe { libc::read(read_end, (&mut signal as *mut u8).cast(), 1) };
            if n == 1 {
                stop_and_exit(i32::from(signal));
            }
            if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        });
        if started.is_err() {
            return;
        }
        catch_stop_signals(on_stop_signal);
    });
}

/// SIGINT, SIGTERM and SIGHUP: the signals that ask a launcher to stop.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Installs `handler` for each of [`STOP_SIGNALS`] that is not ignored, and returns the
/// dispositions it replaced, for [`restore_signals`]. A signal that was ignored stays
/// ignored: under `nohup`, or in a background job, the user asked for exactly that.
pub fn catch_stop_signals(handler: extern "C" fn(libc::c_int)) -> Vec<(libc::c_int, libc::sigaction)> {
    let mut previous = Vec::new();
    for signal in STOP_SIGNALS {
        // SAFETY: plain sigaction calls with zero-initialized, then filled, structs.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 || old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler as libc::sighandler_t;
            new.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(signal, &new, &mut old) == 0 {
                previous.push((signal, old));
            }
        }
    }
    previous
}

/// Puts back the dispositions [`catch_stop_signals`] replaced.
pub fn restore_signals(previous: &[(libc::c_int, libc::sigaction)]) {
    for (signal, old) in previous {
        // SAFETY: restores a disposition saved by catch_stop_signals.
        unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
    }
}

extern "C" fn on_stop_signal(signal: libc::c_int) {
    // Only async-signal-safe calls here: hand the signal to the stopping thread.
    let byte = signal as u8;
    // SAFETY: write(2) of one byte from a local.
    unsafe { libc::write(SIGNAL_PIPE.load(Ordering::SeqCst), (&byte as *const u8).cast(), 1) };
}

fn stop_and_exit(signal: i32) -> ! {
    // The lock stays held until the exit, so nothing new starts meanwhile.
    let groups = groups();
    for &pgid in &groups.live {
        kill_group(pgid);
    }
    // _exit, not exit: libtorch's static destructors can race with its running threads.
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(128 + signal) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_exit_statuses() {
        assert_eq!(describe(ExitStatus::from_raw(3 << 8)), "exit code 3");
        assert_eq!(describe(ExitStatus::from_raw(9)), "killed by signal 9 (SIGKILL)");
        assert_eq!(signal_name(64), "signal 64");
    }

    #[test]
    fn free_ports_differ() {
        let ports = free_ports(3).unwrap();
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2], "{ports:?}");
    }
}
