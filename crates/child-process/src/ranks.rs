//! Waiting for the processes of one job (its ranks) together, as every launcher of the
//! workspace does: until all have ended, until one fails (the others would only wait
//! for it until their timeout), until a time limit, or until the launcher is
//! interrupted. What still runs then is the caller's to stop, in its own way (a
//! process group killed, or SIGTERM first): [`watch`] only waits and says why it
//! stopped waiting.
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::Child;

/// How often the processes are polled.
const POLL: Duration = Duration::from_millis(20);

/// A process [`watch`] can poll: reaps it and gives its status once it has ended.
pub trait Poll {
    fn poll(&mut self) -> io::Result<Option<ExitStatus>>;
}

impl Poll for Child {
    fn poll(&mut self) -> io::Result<Option<ExitStatus>> {
        self.try_wait()
    }
}

impl Poll for std::process::Child {
    fn poll(&mut self) -> io::Result<Option<ExitStatus>> {
        self.try_wait()
    }
}

/// When to stop waiting before every process has ended.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    /// The longest the whole job may take (`None`: no limit).
    pub limit: Option<Duration>,
    /// After the first failure (an exit that is not a success), how long the others
    /// may still take to end on their own, e.g. to print why they lost their peer;
    /// `None`: a failure stops nothing, every process is waited for.
    pub after_failure: Option<Duration>,
    /// Asked between polls: `true` stops the watch (the launcher caught a signal).
    pub interrupted: &'a dyn Fn() -> bool,
}

impl Default for Watch<'_> {
    /// No limit; the first failure stops the watch at once; never interrupted.
    fn default() -> Self {
        Watch { limit: None, after_failure: Some(Duration::ZERO), interrupted: &|| false }
    }
}

/// Why [`watch`] returned.
#[derive(Debug)]
pub enum WatchEnd {
    /// Every process has ended (successfully or not, when failures stop nothing).
    AllEnded,
    /// Process `first` failed first, and the others did not all end within
    /// [`Watch::after_failure`] (those that did have their status).
    Failed { first: usize },
    /// [`Watch::limit`] passed with processes still running.
    TimedOut,
    /// [`Watch::interrupted`] said so.
    Interrupted,
    /// Process `index` could not be waited for.
    CannotWait { index: usize, error: io::Error },
}

/// What [`watch`] saw.
#[derive(Debug)]
pub struct Watched {
    /// Each process's exit status; `None`: still running (the caller stops it).
    pub statuses: Vec<Option<ExitStatus>>,
    /// When each process was seen to have ended, from the start of the watch.
    pub ended_after: Vec<Option<Duration>>,
    /// The first process that failed, if any (also when all have ended since).
    pub first_failure: Option<usize>,
    pub end: WatchEnd,
}

impl Watched {
    /// Whether every process ended with success.
    pub fn all_succeeded(&self) -> bool {
        self.statuses.iter().all(|s| s.is_some_and(|s| s.success()))
    }
}

/// Waits for `processes` together (see the module's documentation).
///
/// ```
/// use std::process::Command;
/// use child_process::{watch, Watch, WatchEnd};
///
/// let command = |program: &str, args: &[&str]| {
///     let mut cmd = Command::new(program);
///     cmd.args(args);
///     child_process::spawn(cmd).unwrap()
/// };
/// let mut ranks = vec![command("sleep", &["30"]), command("false", &[])];
/// let watched = watch(&mut ranks, &Watch::default());
/// assert!(matches!(watched.end, WatchEnd::Failed { first: 1 }));
/// assert!(watched.statuses[0].is_none(), "still running: the caller stops it");
/// for rank in &mut ranks {
///     rank.kill().unwrap();
/// }
/// ```
pub fn watch<P: Poll>(processes: &mut [P], how: &Watch<'_>) -> Watched {
    let start = Instant::now();
    let n = processes.len();
    let mut watched = Watched {
        statuses: vec![None; n],
        ended_after: vec![None; n],
        first_failure: None,
        end: WatchEnd::AllEnded,
    };
    let mut failed_at: Option<Instant> = None;
    loop {
        for (i, process) in processes.iter_mut().enumerate() {
            if watched.statuses[i].is_some() {
                continue;
            }
            match process.poll() {
                Ok(Some(status)) => {
                    watched.statuses[i] = Some(status);
                    watched.ended_after[i] = Some(start.elapsed());
                    if !status.success() && watched.first_failure.is_none() {
                        watched.first_failure = Some(i);
                        failed_at = Some(Instant::now());
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    watched.end = WatchEnd::CannotWait { index: i, error };
                    return watched;
                }
            }
        }
        if watched.statuses.iter().all(Option::is_some) {
            return watched;
        }
        if let (Some(first), Some(at), Some(grace)) = (watched.first_failure, failed_at, how.after_failure) {
            if at.elapsed() >= grace {
                watched.end = WatchEnd::Failed { first };
                return watched;
            }
        }
        if how.limit.is_some_and(|limit| start.elapsed() > limit) {
            watched.end = WatchEnd::TimedOut;
            return watched;
        }
        if (how.interrupted)() {
            watched.end = WatchEnd::Interrupted;
            return watched;
        }
        std::thread::sleep(POLL);
    }
}

/// [`watch`], then kills (and reaps) every process still running, as a launcher that
/// only needs its ranks' ends does: each one's exit status, in order.
pub fn watch_then_kill(processes: &mut [Child], how: &Watch<'_>) -> io::Result<Vec<ExitStatus>> {
    let watched = watch(processes, how);
    if let WatchEnd::CannotWait { error, .. } = watched.end {
        return Err(error);
    }
    processes
        .iter_mut()
        .zip(watched.statuses)
        .map(|(child, status)| status.map_or_else(|| child.kill(), Ok))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::spawn;

    fn sh(script: &str) -> Child {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        spawn(cmd).unwrap()
    }

    fn stop(ranks: &mut [Child]) {
        for rank in ranks {
            rank.kill().unwrap();
        }
    }

    #[test]
    fn all_succeeding_are_all_waited_for() {
        let mut ranks = vec![sh("exit 0"), sh("sleep 0.2")];
        let watched = watch(&mut ranks, &Watch::default());
        assert!(matches!(watched.end, WatchEnd::AllEnded), "{:?}", watched.end);
        assert!(watched.all_succeeded());
        assert_eq!(watched.first_failure, None);
        assert!(watched.ended_after[1].unwrap() >= Duration::from_millis(200));
    }

    #[test]
    fn the_first_failure_stops_the_watch_and_leaves_the_others_running() {
        let mut ranks = vec![sh("sleep 30"), sh("sleep 0.1; exit 3")];
        let watched = watch(&mut ranks, &Watch::default());
        assert!(matches!(watched.end, WatchEnd::Failed { first: 1 }), "{:?}", watched.end);
        assert_eq!(watched.statuses[1].and_then(|s| s.code()), Some(3));
        assert!(watched.statuses[0].is_none());
        assert!(!watched.all_succeeded());
        stop(&mut ranks);
    }

    #[test]
    fn the_others_get_the_grace_after_a_failure_to_end_on_their_own() {
        // The peer notices the failure (here: it ends a little later) within the grace.
        let mut ranks = vec![sh("exit 1"), sh("sleep 0.3; exit 4")];
        let how = Watch { after_failure: Some(Duration::from_secs(20)), ..Watch::default() };
        let watched = watch(&mut ranks, &how);
        assert!(matches!(watched.end, WatchEnd::AllEnded), "{:?}", watched.end);
        assert_eq!(watched.first_failure, Some(0));
        assert_eq!(watched.statuses[1].and_then(|s| s.code()), Some(4));
    }

    #[test]
    fn without_fail_fast_every_process_is_waited_for() {
        let mut ranks = vec![sh("exit 1"), sh("sleep 0.3")];
        let how = Watch { after_failure: None, ..Watch::default() };
        let watched = watch(&mut ranks, &how);
        assert!(matches!(watched.end, WatchEnd::AllEnded), "{:?}", watched.end);
        assert!(watched.statuses[1].is_some_and(|s| s.success()));
    }

    #[test]
    fn watch_then_kill_gives_every_status_the_killed_ones_included() {
        let mut ranks = vec![sh("sleep 30"), sh("exit 5")];
        let statuses = watch_then_kill(&mut ranks, &Watch::default()).unwrap();
        assert_eq!(statuses[1].code(), Some(5));
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&statuses[0]), Some(libc::SIGKILL));
    }

    #[test]
    fn the_limit_and_an_interruption_stop_the_watch() {
        let mut ranks = vec![sh("sleep 30")];
        let how = Watch { limit: Some(Duration::from_millis(100)), ..Watch::default() };
        assert!(matches!(watch(&mut ranks, &how).end, WatchEnd::TimedOut));
        let how = Watch { interrupted: &|| true, ..Watch::default() };
        assert!(matches!(watch(&mut ranks, &how).end, WatchEnd::Interrupted));
        stop(&mut ranks);
    }
}
