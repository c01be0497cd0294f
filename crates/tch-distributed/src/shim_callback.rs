//! The Rust side of the shim's callbacks (autograd nodes' backward: FSDP's and tensor
//! parallelism's; the gradient hooks of crate::grad_hooks): nothing may unwind into
//! C++, and an error goes back as a status and a message the shim frees with `free`.
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Result;
use crate::ffi;

/// An error for the shim, which frees it with `free`.
fn report(err: *mut *mut c_char, message: &str) -> c_int {
    if !err.is_null() {
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        unsafe { *err = libc::strdup(text.as_ptr()) };
    }
    ffi::TCHD_ERR_OTHER
}

/// Runs `body` for the shim: errors and panics become a status and a message that
/// starts with `what` (nothing may unwind into C++).
pub(crate) fn for_shim(err: *mut *mut c_char, what: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ffi::TCHD_OK,
        Ok(Err(e)) => report(err, &format!("{what}: {e}")),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            report(err, &format!("{what}: {text}"))
        }
    }
}
