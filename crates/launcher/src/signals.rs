//! Stop signals: SIGINT, SIGTERM and SIGHUP kill every process group this process
//! started, then end it with 128 + the signal.
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

use crate::groups::kill_all_and_exit;

/// The write end of the pipe the signal handler wakes the stopping thread through.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// From now on SIGINT, SIGTERM and SIGHUP kill every process group this process
/// started with [`spawn`](crate::spawn), then end this process with 128 + the signal (130 for
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
    kill_all_and_exit(128 + signal)
}
