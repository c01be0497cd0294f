//! A full parameter's storage through the shim: measured, freed, allocated again and
//! filled without autograd seeing a write.
use std::ffi::c_void;
use std::ptr;

use tch::Tensor;

use crate::error::{check, Result};
use crate::ffi;

pub(super) fn bytes_of(t: &Tensor) -> i64 {
    t.numel() as i64 * t.kind().elt_size_in_bytes() as i64
}

pub(super) fn storage_bytes(t: &Tensor) -> Result<i64> {
    let mut out = 0;
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_nbytes(t.as_ptr() as *const c_void, &mut out, &mut err) }, err)?;
    Ok(out)
}

pub(super) fn storage_free(t: &mut Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_free(t.as_mut_ptr() as *mut c_void, &mut err) }, err)
}

pub(super) fn storage_alloc(t: &mut Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(unsafe { ffi::tchd_storage_alloc(t.as_mut_ptr() as *mut c_void, &mut err) }, err)
}

pub(super) fn copy_unversioned(dst: &mut Tensor, src: &Tensor) -> Result<()> {
    let mut err = ptr::null_mut();
    check(
        unsafe {
            ffi::tchd_copy_unversioned(
                dst.as_mut_ptr() as *mut c_void,
                src.as_ptr() as *const c_void,
                &mut err,
            )
        },
        err,
    )
}
