//! `Work`: a call in flight, how a group starts one, and how a failure is explained.
use std::ptr::{self, NonNull};
use std::time::Duration;

use super::ProcessGroup;
use crate::error::{check, DistError, ErrorKind, Result};
use crate::ffi;
use crate::spans;

impl ProcessGroup {
    /// Starts a call through the shim (`call` gets the out-parameters) and hands back its `Work`.
    pub(super) fn start(
        &self,
        what: &'static str,
        span: spans::Span,
        call: impl FnOnce(*mut *mut ffi::tchd_work, *mut *mut std::ffi::c_char) -> i32,
    ) -> Result<Work> {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = call(&mut out, &mut err);
        check(status, err).map_err(|e| self.explain(e, what))?;
        Ok(Work {
            raw: NonNull::new(out).expect("shim returned a null work"),
            what,
            rank: self.rank,
            world_size: self.world_size,
            timeout: self.timeout,
            span: Some(span),
        })
    }

    /// `e`, the failure of `what` on this group, with what this rank (and, for a
    /// mismatch, every rank) was doing.
    pub(crate) fn explain(&self, e: DistError, what: &str) -> DistError {
        if e.kind() == ErrorKind::Mismatch {
            return crate::mismatch::explain(e, what, self.id, self.rank, self.world_size);
        }
        explain(e, what, self.rank, self.world_size, self.timeout)
    }
}

/// A collective in flight. `wait()` blocks until it is done on this rank.
/// Dropping it without waiting lets the collective finish in the background.
pub struct Work {
    raw: NonNull<ffi::tchd_work>,
    what: &'static str,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// The collective's span on the timeline: ends when `wait()` returns (or the work
    /// is dropped).
    span: Option<spans::Span>,
}

// SAFETY: c10d Work objects are shared with backend threads and internally locked.
unsafe impl Send for Work {}

impl Work {
    /// Blocks until the collective completed; its error (e.g. a timeout) otherwise.
    pub fn wait(mut self) -> Result<()> {
        self.wait_in_place()
    }

    fn wait_in_place(&mut self) -> Result<()> {
        let mut err = ptr::null_mut();
        let status = unsafe { ffi::tchd_work_wait(self.raw.as_ptr(), 0, &mut err) };
        if let Some(span) = self.span.take() {
            span.end();
        }
        check(status, err).map_err(|e| explain(e, self.what, self.rank, self.world_size, self.timeout))
    }

    /// Waits for a receive from any source and returns the rank it came from.
    pub(super) fn wait_for_source(mut self) -> Result<usize> {
        self.wait_in_place()?;
        let mut source = -1;
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_work_source_rank(self.raw.as_ptr(), &mut source, &mut err) }, err)
            .map_err(|e| explain(e, self.what, self.rank, self.world_size, self.timeout))?;
        Ok(source as usize)
    }

    /// Whether the collective has finished, without waiting for it.
    pub fn is_completed(&self) -> bool {
        unsafe { ffi::tchd_work_is_completed(self.raw.as_ptr()) != 0 }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        unsafe { ffi::tchd_work_free(self.raw.as_ptr()) }
    }
}

fn explain(e: DistError, what: &str, rank: usize, world_size: usize, timeout: Duration) -> DistError {
    let hint = match e.kind() {
        ErrorKind::Timeout => format!(
            " (another rank did not take part within {timeout:?}: did it crash, or take a different code path?)"
        ),
        ErrorKind::Network | ErrorKind::Backend => " (a peer may have exited: look at the other ranks' output)".to_string(),
        _ => String::new(),
    };
    e.context(format!("{what} on rank {rank} of {world_size}{hint}"))
}
