//! The signals [`spawn`](crate::spawn) deals in: the stop signals (SIGINT, SIGTERM,
//! SIGHUP) it records while it supervises ranks, the death signal its ranks get when it
//! dies, and signal names for its messages.
//!
//! The workspace's child-process crate does the same for the lab's launchers; this
//! crate has its own, over libc, so that it depends on nothing unpublished.
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The signals that ask a supervisor to stop.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The last stop signal received while a [`StopSignals`] lived (0: none) and how many.
static CAUGHT_SIGNAL: AtomicI32 = AtomicI32::new(0);
static CAUGHT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// While it lives, SIGINT, SIGTERM and SIGHUP are recorded instead of ending this
/// process, so that `spawn` can stop its ranks and report; the previous dispositions
/// come back when it is dropped. A signal that was ignored (SIGHUP under `nohup`) stays
/// ignored: the user asked for that. Dispositions are process-wide: one at a time
/// (`spawn` makes sure of it).
pub(crate) struct StopSignals {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl StopSignals {
    /// Starts recording stop signals (none recorded yet).
    pub(crate) fn catch() -> StopSignals {
        CAUGHT_SIGNAL.store(0, Ordering::SeqCst);
        CAUGHT_COUNT.store(0, Ordering::SeqCst);
        let mut previous = Vec::new();
        for signal in STOP_SIGNALS {
            // SAFETY: a zeroed sigaction is a valid value to fill in; the handler only
            // touches lock-free atomics, which is async-signal-safe.
            let (mut action, mut old): (libc::sigaction, libc::sigaction) = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_signal_record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            if unsafe { libc::sigaction(signal, &action, &mut old) } != 0 {
                continue;
            }
            if old.sa_sigaction == libc::SIG_IGN {
                // sigaction cannot ask without setting: put "ignored" back at once.
                // SAFETY: restores the disposition sigaction just returned.
                unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
                continue;
            }
            previous.push((signal, old));
        }
        StopSignals { previous }
    }

    /// The last stop signal received, if any.
    pub(crate) fn caught(&self) -> Option<i32> {
        match CAUGHT_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// How many stop signals were received (a second one means "hurry").
    pub(crate) fn count(&self) -> usize {
        CAUGHT_COUNT.load(Ordering::SeqCst)
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for (signal, old) in &self.previous {
            // SAFETY: puts back a disposition that sigaction itself returned.
            unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
        }
    }
}

extern "C" fn on_signal_record(signal: libc::c_int) {
    // Only lock-free atomics here: this runs inside a signal handler.
    CAUGHT_SIGNAL.store(signal, Ordering::SeqCst);
    CAUGHT_COUNT.fetch_add(1, Ordering::SeqCst);
}

/// Makes the child `cmd` starts receive SIGKILL when the thread that forked it ends
/// (`PR_SET_PDEATHSIG`), which covers a parent killed by SIGKILL; the spawn fails if
/// the parent is already gone by then. Linux only; elsewhere nothing is changed.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: runs between fork and exec; prctl and getppid are async-signal-safe
        // and nothing here allocates.
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
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// "SIGKILL" for 9, ...; "signal 64" for a number without a usual name.
pub(crate) fn signal_name(signal: i32) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The handler of `signal` now, without changing it for longer than the call.
    fn handler_of(signal: libc::c_int) -> libc::sighandler_t {
        // SAFETY: reads the disposition (a null new action changes nothing).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) }, 0);
        old.sa_sigaction
    }

    fn set_handler(signal: libc::c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
        // SAFETY: a plain disposition (default or ignore), no handler function.
        let (mut action, mut old): (libc::sigaction, libc::sigaction) = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        assert_eq!(unsafe { libc::sigaction(signal, &action, &mut old) }, 0);
        old.sa_sigaction
    }

    // One test, not several: dispositions are process-wide and tests run in threads.
    // No other unit test of this crate catches signals (spawn's own reject their
    // arguments before they would).
    #[test]
    fn stop_signals_are_recorded_then_restored_and_ignored_ones_stay_ignored() {
        let before_hup = set_handler(libc::SIGHUP, libc::SIG_IGN);
        let before_term = handler_of(libc::SIGTERM);
        {
            let signals = StopSignals::catch();
            assert_eq!((signals.caught(), signals.count()), (None, 0));
            assert_eq!(handler_of(libc::SIGHUP), libc::SIG_IGN, "an ignored signal stays ignored");
            // SAFETY: raise is safe to call; SIGTERM is caught and SIGHUP ignored now.
            unsafe {
                libc::raise(libc::SIGTERM);
                libc::raise(libc::SIGHUP);
                libc::raise(libc::SIGTERM);
            }
            assert_eq!((signals.caught(), signals.count()), (Some(libc::SIGTERM), 2));
        }
        assert_eq!(handler_of(libc::SIGTERM), before_term, "the disposition is back");
        let again = StopSignals::catch();
        assert_eq!((again.caught(), again.count()), (None, 0), "a new catch starts from nothing");
        drop(again);
        set_handler(libc::SIGHUP, before_hup);
    }

    #[test]
    fn signals_have_their_names() {
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(64), "signal 64");
    }
}
