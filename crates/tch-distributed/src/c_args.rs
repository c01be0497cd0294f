//! Rust values as the C shim's arguments: strings as NUL-terminated C strings, timeouts
//! as milliseconds. Shared by the store and the groups, which both hand them to c10d.
use std::ffi::CString;
use std::time::Duration;

use crate::error::{DistError, Result};

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| DistError::invalid(format!("{s:?} contains a NUL byte")))
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}
