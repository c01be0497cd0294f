//! `torch.multiprocessing.spawn` for Rust programs: [`spawn`] turns one invocation into
//! `nprocs` rank processes on this machine by re-executing the binary.
use std::ffi::OsString;
use std::fmt::Display;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use child_process::{signal_name, StopSignals, Watch, WatchEnd};

use crate::error::{DistError, ErrorKind, Result};
use crate::launch_env::{spawned_rank, SPAWN_LOCAL_RANK_VAR, SPAWN_NPROCS_VAR, SPAWN_PARENT_PID_VAR};

/// How long stopped ranks get between SIGTERM and SIGKILL by default.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(5);

/// How often the parent looks at its children and at the signal flag.
const POLL: Duration = Duration::from_millis(20);

/// What a worker returns: `()` or any `Result` whose error can be displayed (the child
/// prints it and exits with 1, or with what [`set_worker_exit_code`] says).
pub trait WorkerOutcome {
    /// `Ok` for success, or how the worker failed.
    fn into_outcome(self) -> std::result::Result<(), WorkerFailure>;
}

/// How a worker failed: what the child prints, the status it exits with, and whether
/// the error was a failed collective (then the child also names the ranks that did not
/// answer a roll call).
#[derive(Debug, Clone)]
pub struct WorkerFailure {
    /// What the child prints on stderr before it exits.
    pub message: String,
    /// The status the child exits with.
    pub exit_code: i32,
    /// Whether a collective failed (the child then names the ranks that did not answer).
    pub communication: bool,
}

impl WorkerOutcome for () {
    fn into_outcome(self) -> std::result::Result<(), WorkerFailure> {
        Ok(())
    }
}

impl<T, E: Display + 'static> WorkerOutcome for std::result::Result<T, E> {
    fn into_outcome(self) -> std::result::Result<(), WorkerFailure> {
        self.map(|_| ()).map_err(|e| {
            let error = as_error(&e);
            WorkerFailure {
                // `{:#}` shows the whole cause chain of error types that have one (anyhow).
                message: format!("{e:#}"),
                exit_code: match (EXIT_CODE_OF.get(), error) {
                    (Some(map), Some(error)) => map(error),
                    _ => 1,
                },
                communication: error.is_some_and(crate::diagnostics::is_communication_failure),
            }
        })
    }
}

/// The worker's error as a `std::error::Error` (boxed or not), where it is one.
fn as_error<E: 'static>(e: &E) -> Option<&(dyn std::error::Error + 'static)> {
    let any = e as &dyn std::any::Any;
    if let Some(b) = any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>() {
        return Some(b.as_ref());
    }
    if let Some(b) = any.downcast_ref::<Box<dyn std::error::Error>>() {
        return Some(b.as_ref());
    }
    any.downcast_ref::<DistError>().map(|d| d as &(dyn std::error::Error + 'static))
}

// This static and EXIT_HOOK are process-wide because a spawned rank exits inside
// `spawn(nprocs, worker)`, whose arguments are `mp.spawn`'s: what the program wants done
// on the way out is registered once in `main`, which every rank runs again.
static EXIT_CODE_OF: OnceLock<fn(&(dyn std::error::Error + 'static)) -> i32> = OnceLock::new();

/// How a spawned rank turns its worker's error into an exit status (default: 1). A
/// program that tells bad input (status 2, by convention) from other failures
/// registers its mapping once, before [`spawn`], in every process (the children run
/// `main` again, so registering in `main` does it). A rank that exits with 2 makes
/// [`spawn`] return [`ErrorKind::InvalidArgument`] instead of [`ErrorKind::RankFailed`],
/// so the whole run can end with 2 as well.
pub fn set_worker_exit_code(map: fn(&(dyn std::error::Error + 'static)) -> i32) {
    let _ = EXIT_CODE_OF.set(map);
}

/// What a spawned rank runs after its worker returned, see [`set_exit_hook`].
static EXIT_HOOK: OnceLock<fn()> = OnceLock::new();

/// Registers a function that a rank started by [`spawn`] runs after its worker
/// returned (or failed, or panicked), just before it exits: a child exits inside
/// `spawn`, so code after `spawn` in `main` never runs there (e.g. to close a file
/// the rank wrote as it went). The first registration in a process counts.
pub fn set_exit_hook(hook: fn()) {
    let _ = EXIT_HOOK.set(hook);
}

/// Runs `worker(local_rank)` in `nprocs` processes, as `torch.multiprocessing.spawn`
/// does, and waits for all of them.
///
/// In the parent: `Ok(())` once every rank exited with 0; [`ErrorKind::RankFailed`]
/// when one did not (the others are stopped first), or [`ErrorKind::InvalidArgument`]
/// when that rank exited with 2 (bad input, see [`set_worker_exit_code`]); [`ErrorKind::Interrupted`] on
/// SIGINT/SIGTERM/SIGHUP; [`ErrorKind::InvalidArgument`] for `nprocs == 0` (nothing is
/// started). In a child this function does not return.
///
/// Python hands a function to fresh worker processes. A Rust process cannot do that
/// safely once libtorch has started its thread pools (a `fork` without `exec` copies
/// locks held by threads that do not exist in the child), so the parent here
/// re-executes its own binary, with the same arguments, once per local rank. The
/// child runs `main` again, reaches the same [`spawn`] call, notices from its
/// environment that it is rank `i`, runs the worker and exits. Lab code therefore
/// reads like the Python:
///
/// ```no_run
/// use tch_distributed as dist;
///
/// fn worker(local_rank: usize, epochs: usize) -> dist::Result<()> {
///     // init_process_group, train, ...
///     Ok(())
/// }
///
/// fn main() -> dist::Result<()> {
///     let (num_gpus, epochs) = (4, 40); // from the command line
///     dist::spawn(num_gpus, |local_rank| worker(local_rank, epochs))
/// }
/// ```
///
/// What that implies for the program:
///
/// * Everything `main` does before `spawn` runs again in every child: keep it cheap
///   and deterministic (parsing arguments is fine; downloading data or picking a
///   random port is not — pass values to the children with [`SpawnOptions::env`]).
///   [`spawned_rank`] tells a process which role it plays.
/// * Nothing after `spawn` runs in a child: the child exits inside `spawn` with 0 when
///   the worker succeeded, 1 when it returned an error (printed on stderr with its
///   rank; another status if [`set_worker_exit_code`] says so), 101 when it panicked.
/// * One failing rank ends the run: the parent stops the others (SIGTERM, then
///   SIGKILL after a grace period) and returns [`ErrorKind::RankFailed`] naming the
///   rank and how it ended. Ctrl-C (SIGINT), SIGTERM or SIGHUP to the parent does the
///   same and returns [`ErrorKind::Interrupted`] (return it from `main` for a non-zero
///   exit). While `spawn` runs it owns those three signals; handlers the program had
///   come back afterwards, and a signal the program ignores stays ignored.
/// * No orphans: each child asks the kernel to SIGKILL it when the parent dies, even
///   when the parent itself is SIGKILLed and can clean nothing up (Linux).
///
/// Children inherit stdout and stderr, get `/dev/null` as stdin (several processes
/// reading one terminal is never what anyone wants), and stay in the parent's process
/// group, so a Ctrl-C typed in the terminal reaches every rank at once, as in Python.
pub fn spawn<F, R>(nprocs: usize, worker: F) -> Result<()>
where
    F: FnOnce(usize) -> R,
    R: WorkerOutcome,
{
    SpawnOptions::new(nprocs).spawn(worker)
}

/// [`spawn`] with settings: `SpawnOptions::new(n).grace_period(..).env(..).spawn(worker)`.
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    nprocs: usize,
    grace_period: Duration,
    env: Vec<(OsString, OsString)>,
}

impl SpawnOptions {
    /// Options for `nprocs` ranks, with the default grace period and no extra environment.
    pub fn new(nprocs: usize) -> Self {
        Self { nprocs, grace_period: DEFAULT_GRACE_PERIOD, env: Vec::new() }
    }

    /// How long the other ranks get to exit after SIGTERM when one rank failed or the
    /// parent was interrupted, before SIGKILL. A second Ctrl-C skips the wait.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace_period = grace;
        self
    }

    /// An environment variable for the children only: the way to hand them something
    /// the parent decided at run time (a free port, a temporary directory), since they
    /// re-run `main` instead of inheriting its memory.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// torchrun's `--standalone` for the ranks this starts: their rendezvous on this
    /// machine's loopback, at a free port the parent picks and hands to the children
    /// (`MASTER_ADDR=127.0.0.1`, `MASTER_PORT`), which then `init_process_group` with
    /// `env://`. When the environment already names both (a user who chose them), those
    /// stay. In a child it changes nothing: the parent's choice is in its environment.
    ///
    /// ```no_run
    /// use tch_distributed as dist;
    ///
    /// fn main() -> dist::Result<()> {
    ///     dist::SpawnOptions::new(2).standalone()?.spawn(|rank| {
    ///         let init = dist::InitOptions { rank: Some(rank), world_size: Some(2), ..Default::default() };
    ///         dist::init_process_group(dist::Backend::Gloo, init)
    ///     })
    /// }
    /// ```
    pub fn standalone(self) -> Result<Self> {
        let named = |key: &str| std::env::var_os(key).is_some_and(|v| !v.is_empty());
        if spawned_rank().is_some() || (named(crate::MASTER_ADDR_ENV) && named(crate::MASTER_PORT_ENV)) {
            return Ok(self);
        }
        let port = child_process::free_port().map_err(|e| {
            DistError::new(
                ErrorKind::Network,
                format!("spawn: no free loopback port for the ranks' rendezvous ({e}); set MASTER_ADDR and MASTER_PORT to choose one"),
            )
        })?;
        Ok(self.env(crate::MASTER_ADDR_ENV, "127.0.0.1").env(crate::MASTER_PORT_ENV, port.to_string()))
    }

    /// Starts the ranks (in the parent) or runs this process's rank (in a child); see
    /// [`spawn`].
    pub fn spawn<F, R>(&self, worker: F) -> Result<()>
    where
        F: FnOnce(usize) -> R,
        R: WorkerOutcome,
    {
        if IN_WORKER.load(Ordering::SeqCst) {
            // The child's own re-run of `main` already reached spawn; a worker calling it
            // again would otherwise run a different worker in place of this one.
            return Err(DistError::invalid(
                "spawn was called from inside a spawned worker: nested spawns are not supported",
            ));
        }
        if let Some(me) = spawned_rank() {
            if me.nprocs != self.nprocs {
                // The parent computed a different count: main is not deterministic.
                eprintln!(
                    "local rank {}: spawn(nprocs = {}) in this child, but the parent started {} ranks; the code before spawn must compute the same values in every process",
                    me.local_rank, self.nprocs, me.nprocs
                );
                exit_now(2);
            }
            run_worker(me.local_rank, worker);
        }
        if self.nprocs == 0 {
            return Err(DistError::invalid("spawn: nprocs must be at least 1"));
        }
        run_parent(self)
    }
}

/// True while this process runs its worker (children only).
static IN_WORKER: AtomicBool = AtomicBool::new(false);

fn run_worker<F, R>(local_rank: usize, worker: F) -> !
where
    F: FnOnce(usize) -> R,
    R: WorkerOutcome,
{
    IN_WORKER.store(true, Ordering::SeqCst);
    let code = match catch_unwind(AssertUnwindSafe(|| worker(local_rank).into_outcome())) {
        Ok(Ok(())) => 0,
        Ok(Err(WorkerFailure { message, exit_code: code, communication })) => {
            eprintln!("local rank {local_rank}: {message}");
            if crate::is_initialized() && communication {
                if let Some(note) = crate::diagnostics::roll_call_note(ROLL_CALL_WAIT) {
                    eprintln!("local rank {local_rank}: {note}");
                }
            }
            // 0 would read as success: an error is never that.
            if code == 0 {
                1
            } else {
                code
            }
        }
        Err(_) => {
            // The panic hook already printed the message and location.
            eprintln!("local rank {local_rank}: the worker panicked");
            101
        }
    };
    if let Some(hook) = EXIT_HOOK.get() {
        let _ = catch_unwind(hook);
    }
    exit_now(code)
}

/// How long a worker whose collective failed waits for the other survivors to answer
/// the roll call that names the missing ranks.
const ROLL_CALL_WAIT: Duration = Duration::from_secs(2);

/// Ends a child. The worker's values are dropped by now; what `exit` would add are the
/// static destructors of libtorch and friends, which can race with their still-running
/// threads (Gloo, NCCL, OpenMP) and turn a rank that succeeded into a crash at exit.
/// So flush what is buffered and leave.
fn exit_now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fflush(NULL) flushes every C stdio stream; _exit never returns.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(code)
    }
}

/// One spawn at a time per process: its signal handling (`StopSignals`) is process-wide.
static PARENT_ACTIVE: AtomicBool = AtomicBool::new(false);

struct ActiveGuard;

impl ActiveGuard {
    fn acquire() -> Result<ActiveGuard> {
        PARENT_ACTIVE
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ActiveGuard)
            .map_err(|_| DistError::invalid("spawn is already running in this process (on another thread)"))
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        PARENT_ACTIVE.store(false, Ordering::SeqCst);
    }
}

struct Rank {
    local_rank: usize,
    child: Child,
    status: Option<ExitStatus>,
}

impl child_process::Poll for Rank {
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.reap()
    }
}

impl Rank {
    fn running(&self) -> bool {
        self.status.is_none()
    }

    /// Reaps the child if it has ended.
    fn reap(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    fn describe(&self, status: ExitStatus) -> String {
        format!("local rank {} (pid {}) {}", self.local_rank, self.child.id(), describe_status(status))
    }
}

fn run_parent(opts: &SpawnOptions) -> Result<()> {
    let _active = ActiveGuard::acquire()?;
    // While the parent supervises, SIGINT, SIGTERM and SIGHUP are recorded instead of
    // killing it, so that it can stop its ranks and report; the previous dispositions
    // come back when spawn returns.
    let signals = StopSignals::catch();
    let mut ranks: Vec<Rank> = Vec::with_capacity(opts.nprocs);
    // What ends the run early, unless a signal does.
    let mut problem: Option<(ErrorKind, String)> = None;
    for local_rank in 0..opts.nprocs {
        if signals.caught().is_some() {
            break;
        }
        match start_rank(local_rank, opts) {
            Ok(child) => ranks.push(Rank { local_rank, child, status: None }),
            Err(e) => {
                problem = Some((ErrorKind::Other, format!("could not start local rank {local_rank}: {e}")));
                break;
            }
        }
    }
    // Supervise: the first rank that fails ends the run, as does a stop signal.
    if problem.is_none() {
        let interrupted = || signals.caught().is_some();
        let how = Watch { limit: None, after_failure: Some(Duration::ZERO), interrupted: &interrupted };
        let watched = child_process::watch(&mut ranks, &how);
        if let Some(first) = watched.first_failure {
            let status = ranks[first].status.expect("a failed rank has its status");
            // 2 is how a rank says "bad input" (see set_worker_exit_code).
            let kind =
                if status.code() == Some(2) { ErrorKind::InvalidArgument } else { ErrorKind::RankFailed };
            problem = Some((kind, ranks[first].describe(status)));
        } else {
            match watched.end {
                WatchEnd::AllEnded => return Ok(()),
                WatchEnd::CannotWait { index, error } => {
                    let local_rank = ranks[index].local_rank;
                    problem =
                        Some((ErrorKind::Other, format!("waiting for local rank {local_rank}: {error}")));
                }
                // A signal: said below.
                WatchEnd::Interrupted | WatchEnd::TimedOut | WatchEnd::Failed { .. } => {}
            }
        }
    }
    let still_running = ranks.iter().filter(|r| r.running()).count();
    stop_all(&mut ranks, opts.grace_period, &signals);
    let stopped = match still_running {
        0 => String::new(),
        1 => "; stopped the 1 rank still running".to_string(),
        n => format!("; stopped the {n} ranks still running"),
    };
    if let Some(signal) = signals.caught() {
        // Ctrl-C in a terminal also reaches the ranks, which may die of it first: the
        // signal is the cause, their deaths only a consequence.
        let seen = problem.map(|(_, what)| format!(" ({what})")).unwrap_or_default();
        return Err(DistError::new(
            ErrorKind::Interrupted,
            format!("spawn: interrupted by {}{seen}{stopped}", signal_name(signal)),
        ));
    }
    let (kind, what) = problem.expect("the supervision ends on success, a problem or a signal");
    Err(DistError::new(kind, format!("spawn: {what}{stopped}")))
}

/// Starts one child: this binary again, same arguments, its rank in the environment.
fn start_rank(local_rank: usize, opts: &SpawnOptions) -> std::io::Result<Child> {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    // /proc/self/exe is this very binary even if the file was replaced or deleted since
    // (a rebuild during a run), which current_exe()'s path would not guarantee.
    let exe = if cfg!(target_os = "linux") {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe()?
    };
    let mut cmd = Command::new(exe);
    if let Some(argv0) = argv0 {
        cmd.arg0(argv0);
    }
    cmd.args(args)
        .env(SPAWN_LOCAL_RANK_VAR, local_rank.to_string())
        .env(SPAWN_NPROCS_VAR, opts.nprocs.to_string())
        .env(SPAWN_PARENT_PID_VAR, std::process::id().to_string())
        .stdin(Stdio::null());
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    // The kernel SIGKILLs this child when the thread that forks it ends, which also
    // covers a parent killed by SIGKILL. That thread is the one blocked in spawn, so it
    // lives as long as the run. The ranks stay in the parent's process group (see spawn).
    child_process::die_with_parent(&mut cmd);
    cmd.spawn()
}

/// SIGTERM to every running rank, SIGKILL to those still there after `grace` (or at
/// once on a further signal to the parent), and reaps them all.
fn stop_all(ranks: &mut [Rank], grace: Duration, signals: &StopSignals) {
    for rank in ranks.iter_mut() {
        if rank.reap().ok().flatten().is_none() {
            // SAFETY: kill(2) on our own unreaped child: the pid cannot have been reused.
            unsafe { libc::kill(rank.child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + grace;
    let signals_seen = signals.count();
    loop {
        let running = ranks.iter_mut().filter_map(|r| r.reap().ok()).filter(Option::is_none).count();
        if running == 0 {
            return;
        }
        if Instant::now() >= deadline || signals.count() > signals_seen {
            break;
        }
        std::thread::sleep(POLL);
    }
    for rank in ranks.iter_mut().filter(|r| r.running()) {
        let _ = rank.child.kill();
        rank.status = rank.child.wait().ok();
    }
}

fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with code {code}")
    } else if let Some(signal) = status.signal() {
        let core = if status.core_dumped() { ", core dumped" } else { "" };
        format!("was killed by signal {signal} ({}{core})", signal_name(signal))
    } else {
        format!("ended with {status}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parent picks the loopback rendezvous for its children, unless the environment
    /// already names one (read, not changed: tests share the process's environment).
    #[test]
    fn standalone_hands_the_children_a_loopback_rendezvous() {
        let options = SpawnOptions::new(2).standalone().unwrap();
        let given = |key: &str| {
            options.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let named = |key: &str| std::env::var_os(key).is_some_and(|v| !v.is_empty());
        if named(crate::MASTER_ADDR_ENV) && named(crate::MASTER_PORT_ENV) {
            assert!(options.env.is_empty(), "the user's rendezvous stays: {:?}", options.env);
        } else {
            assert_eq!(given(crate::MASTER_ADDR_ENV).as_deref(), Some("127.0.0.1"));
            let port: u16 = given(crate::MASTER_PORT_ENV).unwrap().parse().unwrap();
            assert_ne!(port, 0);
        }
    }

    #[test]
    fn describes_exit_statuses() {
        assert_eq!(describe_status(ExitStatus::from_raw(3 << 8)), "exited with code 3");
        assert_eq!(describe_status(ExitStatus::from_raw(9)), "was killed by signal 9 (SIGKILL)");
        assert_eq!(
            describe_status(ExitStatus::from_raw(11 | 0x80)),
            "was killed by signal 11 (SIGSEGV, core dumped)"
        );
        assert_eq!(signal_name(64), "signal 64");
    }

    /// (message, exit code, communication failure) of a worker's result.
    fn outcome(r: impl WorkerOutcome) -> Option<(String, i32, bool)> {
        r.into_outcome().err().map(|f| (f.message, f.exit_code, f.communication))
    }

    #[test]
    fn worker_outcomes() {
        assert!(().into_outcome().is_ok());
        assert!(Ok::<u8, String>(1).into_outcome().is_ok());
        // No mapping registered yet: every error exits with 1.
        assert_eq!(outcome(Err::<(), _>(DistError::invalid("bad"))), Some(("bad".into(), 1, false)));
        // The only test in this binary that registers one (it is process-wide).
        set_worker_exit_code(|e| if e.to_string().contains("bad input") { 2 } else { 3 });
        let boxed: Box<dyn std::error::Error + Send + Sync> = "bad input".into();
        assert_eq!(outcome(Err::<(), _>(boxed)), Some(("bad input".into(), 2, false)));
        assert_eq!(outcome(Err::<(), _>(DistError::invalid("other"))), Some(("other".into(), 3, false)));
        // An error type the mapping cannot see (not a std Error) keeps 1.
        assert_eq!(outcome(Err::<(), _>("bad input".to_string())), Some(("bad input".into(), 1, false)));
        // A failed collective is told by its kind, boxed or not; text never decides.
        let gone = DistError::new(ErrorKind::Network, "a peer went away");
        assert_eq!(outcome(Err::<(), _>(gone.clone())), Some(("a peer went away".into(), 3, true)));
        let boxed: Box<dyn std::error::Error> = Box::new(gone);
        assert!(outcome(Err::<(), _>(boxed)).unwrap().2);
        let looks_like_one: Box<dyn std::error::Error> = "gloo: connection closed by peer".into();
        assert!(!outcome(Err::<(), _>(looks_like_one)).unwrap().2);
    }

    #[test]
    fn zero_processes_is_rejected_before_anything_starts() {
        let e = spawn(0, |_| ()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("nprocs"), "{e}");
    }
}
