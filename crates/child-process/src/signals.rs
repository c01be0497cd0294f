//! Stop signals (SIGINT, SIGTERM, SIGHUP) for the workspace's launchers, over nix's
//! typed `sigaction` (tch-distributed's `spawn`, published on its own, records them with
//! its own copy of [`StopSignals`] over libc). Two ways to catch them:
//!
//! * [`stop_children_on_signals`], for launcher binaries: a stop signal kills every
//!   process group this process started, then ends it with 128 + the signal;
//! * [`StopSignals`], for a supervisor that must stop its children itself and report:
//!   while it lives a stop signal is only recorded.
//!
//! Either way a signal that was ignored stays ignored: under `nohup`, or in a
//! background job, the user asked for exactly that.
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Once;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::groups::kill_all_and_exit;

/// SIGINT, SIGTERM and SIGHUP: the signals that ask a launcher to stop.
pub const STOP_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The write end of the pipe the signal handler wakes the stopping thread through.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// From now on SIGINT, SIGTERM and SIGHUP kill every process group this process
/// started with [`spawn`](crate::spawn), then end this process with 128 + the signal (130 for
/// Ctrl-C, 143 for SIGTERM). A signal that was ignored (e.g. SIGHUP under `nohup`)
/// stays ignored. For launcher binaries, first thing in `main`; calling it again does
/// nothing.
///
/// ```no_run
/// child_process::stop_children_on_signals();
/// // Ctrl-C from here on also stops every child started with child_process::spawn.
/// ```
pub fn stop_children_on_signals() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // The handler may only make async-signal-safe calls: it writes the signal's
        // number to a pipe, and a thread does the rest (kill the groups, exit).
        let Ok((read_end, write_end)) = nix::unistd::pipe2(OFlag::O_CLOEXEC) else { return };
        SIGNAL_PIPE.store(write_end.into_raw_fd(), Ordering::SeqCst);
        let started = std::thread::Builder::new().name("launcher-signals".into()).spawn(move || loop {
            let mut signal = [0u8];
            match nix::unistd::read(&read_end, &mut signal) {
                Ok(1) => kill_all_and_exit(128 + i32::from(signal[0])),
                Err(Errno::EINTR) => {}
                _ => return,
            }
        });
        if started.is_ok() {
            // Never restored: this process stops this way until it exits.
            catch(on_signal_wake_the_stopper);
        }
    });
}

extern "C" fn on_signal_wake_the_stopper(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    // SAFETY: the write end stays open for the life of the process (never closed).
    let pipe = unsafe { BorrowedFd::borrow_raw(fd) };
    let _ = nix::unistd::write(pipe, &[signal as u8]);
}

/// The last stop signal received while a [`StopSignals`] lived (0: none) and how many.
static CAUGHT_SIGNAL: AtomicI32 = AtomicI32::new(0);
static CAUGHT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// While it lives, SIGINT, SIGTERM and SIGHUP are recorded instead of ending this
/// process, so that a supervisor can stop its children and report; the previous
/// dispositions come back when it is dropped. A signal that was ignored stays ignored.
///
/// Signal dispositions belong to the whole process: hold one at a time (the caller
/// makes sure of it, as `tch_distributed::spawn` does).
///
/// ```no_run
/// let signals = child_process::StopSignals::catch();
/// // ... supervise children, looking at signals.caught() between polls ...
/// if let Some(signal) = signals.caught() {
///     eprintln!("interrupted by {}", child_process::signal_name(signal));
/// }
/// ```
pub struct StopSignals {
    previous: Vec<(Signal, SigAction)>,
}

impl StopSignals {
    /// Starts recording stop signals (none recorded yet).
    pub fn catch() -> StopSignals {
        CAUGHT_SIGNAL.store(0, Ordering::SeqCst);
        CAUGHT_COUNT.store(0, Ordering::SeqCst);
        StopSignals { previous: catch(on_signal_record) }
    }

    /// The last stop signal received, if any.
    pub fn caught(&self) -> Option<i32> {
        match CAUGHT_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// How many stop signals were received (a second one can mean "hurry").
    pub fn count(&self) -> usize {
        CAUGHT_COUNT.load(Ordering::SeqCst)
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for (signal, old) in &self.previous {
            // SAFETY: puts back a disposition that sigaction itself returned.
            let _ = unsafe { sigaction(*signal, old) };
        }
    }
}

extern "C" fn on_signal_record(signal: libc::c_int) {
    // Only lock-free atomics here: this runs inside a signal handler.
    CAUGHT_SIGNAL.store(signal, Ordering::SeqCst);
    CAUGHT_COUNT.fetch_add(1, Ordering::SeqCst);
}

/// Installs `handler` for each of [`STOP_SIGNALS`] that is not ignored, and returns the
/// dispositions it replaced.
fn catch(handler: extern "C" fn(libc::c_int)) -> Vec<(Signal, SigAction)> {
    let action = SigAction::new(SigHandler::Handler(handler), SaFlags::SA_RESTART, SigSet::empty());
    let mut previous = Vec::new();
    for signal in STOP_SIGNALS {
        // SAFETY: both handlers only touch atomics and write(2), which are
        // async-signal-safe.
        let Ok(old) = (unsafe { sigaction(signal, &action) }) else { continue };
        if old.handler() == SigHandler::SigIgn {
            // sigaction cannot ask without setting: put "ignored" back at once.
            // SAFETY: restores the disposition just returned.
            let _ = unsafe { sigaction(signal, &old) };
            continue;
        }
        previous.push((signal, old));
    }
    previous
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The disposition of `signal` now, without changing it for longer than the call.
    fn handler_of(signal: Signal) -> SigHandler {
        let probe = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
        // SAFETY: sets and at once restores a disposition.
        let old = unsafe { sigaction(signal, &probe) }.unwrap();
        unsafe { sigaction(signal, &old) }.unwrap();
        old.handler()
    }

    // One test, not several: dispositions are process-wide and tests run in threads.
    #[test]
    fn stop_signals_are_recorded_then_restored_and_ignored_ones_stay_ignored() {
        let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
        // SAFETY: plain dispositions, no handler.
        let before_hup = unsafe { sigaction(Signal::SIGHUP, &ignore) }.unwrap();
        let before_term = handler_of(Signal::SIGTERM);
        {
            let signals = StopSignals::catch();
            assert_eq!((signals.caught(), signals.count()), (None, 0));
            assert_eq!(handler_of(Signal::SIGHUP), SigHandler::SigIgn, "an ignored signal stays ignored");
            nix::sys::signal::raise(Signal::SIGTERM).unwrap();
            nix::sys::signal::raise(Signal::SIGHUP).unwrap();
            nix::sys::signal::raise(Signal::SIGTERM).unwrap();
            assert_eq!((signals.caught(), signals.count()), (Some(libc::SIGTERM), 2));
        }
        assert_eq!(handler_of(Signal::SIGTERM), before_term, "the disposition is back");
        let again = StopSignals::catch();
        assert_eq!((again.caught(), again.count()), (None, 0), "a new catch starts from nothing");
        drop(again);
        // SAFETY: restores SIGHUP as it was.
        unsafe { sigaction(Signal::SIGHUP, &before_hup) }.unwrap();
    }
}
