//! Errors: every failure of c10d arrives here with c10d's own message, plus what we
//! were doing and, where we can tell, what to do about it.
use std::ffi::{c_char, c_int, CStr};
use std::fmt;

use crate::ffi;

/// What went wrong, coarsely: enough for callers (and the checker) to react.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input, rejected before any network activity.
    InvalidArgument,
    /// The backend cannot do this (e.g. `ReduceOp::Avg` on Gloo).
    Unsupported,
    /// A collective or the rendezvous did not complete in time (a rank is missing or stuck).
    Timeout,
    /// The rendezvous port is taken by another process.
    AddressInUse,
    /// Sockets: connect, bind, a peer that went away.
    Network,
    /// The key-value store (TCPStore).
    Store,
    /// Gloo or NCCL failed.
    Backend,
    /// The ranks issued different collectives at the same point (one reached a
    /// collective the others did not, or called another op or another shape): a
    /// mistake in the program, found before the collective ran (see
    /// [`GroupOptions::check_collectives`](crate::GroupOptions::check_collectives)).
    Mismatch,
    /// No default process group: `init_process_group` was not called.
    NotInitialized,
    /// `init_process_group` was called twice.
    AlreadyInitialized,
    /// A process started by [`spawn`](crate::spawn) failed (non-zero exit or a signal);
    /// the others were stopped.
    RankFailed,
    /// [`spawn`](crate::spawn)'s parent was asked to stop (SIGINT, SIGTERM, SIGHUP);
    /// its ranks were stopped.
    Interrupted,
    /// Anything else libtorch threw.
    Other,
}

/// The error type of this crate.
#[derive(Debug, Clone)]
pub struct DistError {
    kind: ErrorKind,
    message: String,
}

/// What every fallible function of this crate returns.
pub type Result<T> = std::result::Result<T, DistError>;

impl DistError {
    /// An error of `kind` saying `message` (what went wrong and what to do about it).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message alone, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The exit code a program that ends with this error should return: 2 for bad input
    /// ([`ErrorKind::InvalidArgument`], the user has to fix an argument or the
    /// environment), 1 for every other failure.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::InvalidArgument => 2,
            _ => 1,
        }
    }

    /// Whether a collective or the rendezvous ran out of time.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// A collective or the rendezvous failed (a timeout, the network, the backend, the
    /// store): usually another rank gone or stuck, not this rank's own mistake.
    pub fn is_communication_failure(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout | ErrorKind::Network | ErrorKind::Backend | ErrorKind::Store)
    }

    /// Prefixes the message with what we were doing.
    pub(crate) fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DistError {}

/// Whether c10d's message is its ProcessGroupWrapper's report of mismatched
/// collectives (see [`crate::GroupOptions::check_collectives`]).
pub(crate) fn is_mismatch(message: &str) -> bool {
    message.contains("Detected mismatch between collectives")
}

/// Turns a shim status + message into a `Result`, classifying c10d's message.
pub(crate) fn check(status: c_int, err: *mut c_char) -> Result<()> {
    if status == ffi::TCHD_OK {
        return Ok(());
    }
    let message = if err.is_null() {
        "unknown error".to_string()
    } else {
        // SAFETY: the shim returns a malloc'ed NUL-terminated string we now own.
        let text = unsafe { CStr::from_ptr(err) }.to_string_lossy().trim().to_string();
        unsafe { ffi::tchd_free_string(err) };
        text
    };
    Err(DistError::new(classify(status, &message), message))
}

pub(crate) fn classify(status: c_int, message: &str) -> ErrorKind {
    let lower = message.to_ascii_lowercase();
    if is_mismatch(message) {
        ErrorKind::Mismatch
    } else if lower.contains("eaddrinuse") || lower.contains("address already in use") {
        ErrorKind::AddressInUse
    } else if lower.contains("timed out")
        || lower.contains("timeout")
        || lower.contains("failed to pass monitoredbarrier")
    {
        // The last: the collectives' check found a rank that never arrived (gone, or
        // stuck elsewhere) within the timeout.
        ErrorKind::Timeout
    } else if ["connection reset", "connection closed", "broken pipe", "read error", "write error"]
        .iter()
        .any(|s| lower.contains(s))
    {
        // Gloo reports a peer that went away as a plain I/O exception.
        ErrorKind::Network
    } else if status == ffi::TCHD_ERR_OTHER && (lower.contains("gloo") || lower.contains("nccl")) {
        // An exception thrown inside a backend (its source path names it).
        ErrorKind::Backend
    } else {
        match status {
            ffi::TCHD_ERR_NETWORK => ErrorKind::Network,
            ffi::TCHD_ERR_STORE => ErrorKind::Store,
            ffi::TCHD_ERR_BACKEND => ErrorKind::Backend,
            ffi::TCHD_ERR_VALUE => ErrorKind::InvalidArgument,
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_exits_with_2_and_every_other_failure_with_1() {
        assert_eq!(DistError::invalid("rank 2 of 2").exit_code(), 2);
        for kind in [ErrorKind::Timeout, ErrorKind::Network, ErrorKind::RankFailed, ErrorKind::NotInitialized]
        {
            assert_eq!(DistError::new(kind, "x").exit_code(), 1, "{kind:?}");
        }
    }

    #[test]
    fn classifies_c10d_messages() {
        let inuse = "The server socket has failed to listen on any local network address. port: 1, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use";
        assert_eq!(classify(ffi::TCHD_ERR_NETWORK, inuse), ErrorKind::AddressInUse);
        assert_eq!(classify(ffi::TCHD_ERR_STORE, "wait timeout after 5000ms, keys: /x"), ErrorKind::Timeout);
        assert_eq!(classify(ffi::TCHD_ERR_BACKEND, "NCCL error: unhandled cuda error"), ErrorKind::Backend);
        assert_eq!(classify(1, "something else"), ErrorKind::Other);
        let absent = "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 10000 ms";
        assert_eq!(classify(1, absent), ErrorKind::Timeout);
        let gone = "[gloo/transport/tcp/pair.cc:538] Read error [127.0.0.1]:22736: Connection reset by peer";
        assert_eq!(classify(1, gone), ErrorKind::Network);
    }

    #[test]
    fn libtorch_exceptions_from_a_backend_are_backend_failures() {
        // What DDP's Reducer throws through backward() when Gloo fails.
        let reducer = tch::TchError::Torch(
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out".into(),
        );
        assert_eq!(DistError::from(reducer).kind(), ErrorKind::Timeout);
        let nccl = tch::TchError::Torch("NCCL communicator was aborted on rank 1".into());
        assert!(DistError::from(nccl).is_communication_failure());
        let shape = tch::TchError::Torch("shape '[2, 3]' is invalid for input of size 7".into());
        assert!(!DistError::from(shape).is_communication_failure());
    }
}
