//! Tensor parallelism's region operators: Megatron's conjugate pair, as autograd nodes
//! whose collectives go through this crate's groups (traced, numbered and checked like
//! every other).
//!
//! - [`copy_to_region`] (Megatron's *f*): identity forward; backward all-reduces the
//!   gradient over the TP group. It goes where a replicated activation enters a
//!   column-parallel layer: each rank's layer only sees part of the output, so each
//!   rank's gradient of the input is partial and the sum over the group is the whole.
//! - [`reduce_from_region`] (Megatron's *g*): forward all-reduces over the TP group;
//!   backward passes the gradient on unchanged. It goes after a row-parallel layer, whose
//!   ranks each computed a partial sum of the output.
//!
//! PyTorch's autograd-aware `all_reduce` (functional collectives) would not do as *g*:
//! its backward all-reduces the gradient again, which scales every earlier gradient by
//! the group's size.
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;

use tch::Tensor;

use crate::error::{check, Result};
use crate::ffi;
use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;

/// Megatron's *f*: `x` unchanged in forward; in backward its gradient all-reduced (summed)
/// over `group`. Every rank of the group must call it at the same point of its forward.
///
/// ```no_run
/// # fn f(mesh: &tch_distributed::DeviceMesh, x: &tch::Tensor) -> tch_distributed::Result<()> {
/// let tp = mesh.get_group("tp")?;
/// let x = tch_distributed::copy_to_region(x, &tp)?; // then a column-parallel layer
/// # Ok(()) }
/// ```
pub fn copy_to_region(x: &Tensor, group: &Arc<ProcessGroup>) -> Result<Tensor> {
    // A copy, not an alias: the output gets its own autograd history, and an in-place
    // operation on it must not bump the version of the input autograd may have saved.
    let out = x.detach().copy();
    attach(x, out, Region::AllReduceBackward(group.clone()))
}

/// Megatron's *g*: `x` all-reduced (summed) over `group` in forward; in backward the
/// gradient passed on unchanged. Every rank of the group must call it at the same point.
pub fn reduce_from_region(x: &Tensor, group: &Arc<ProcessGroup>) -> Result<Tensor> {
    let mut out = x.detach().copy();
    group.all_reduce(&mut out, ReduceOp::Sum)?;
    attach(x, out, Region::IdentityBackward)
}

/// What a region node does with the gradient in backward.
enum Region {
    /// All-reduce it over the group (*f*).
    AllReduceBackward(Arc<ProcessGroup>),
    /// Pass it on as it is (*g*).
    IdentityBackward,
}

impl Region {
    fn node_name(&self) -> &'static str {
        match self {
            Region::AllReduceBackward(_) => "CopyToTensorParallelRegionBackward",
            Region::IdentityBackward => "ReduceFromTensorParallelRegionBackward",
        }
    }

    fn backward(&self, grad: Tensor) -> Result<Tensor> {
        match self {
            Region::AllReduceBackward(group) => {
                // A tensor of its own: the incoming gradient may be shared with other uses.
                let mut grad = grad.copy();
                group.all_reduce(&mut grad, ReduceOp::Sum)?;
                Ok(grad)
            }
            Region::IdentityBackward => Ok(grad),
        }
    }
}

/// `out` (computed without autograd) made the output of a node whose input is `x`;
/// nothing to attach when `x` needs no gradient.
fn attach(x: &Tensor, mut out: Tensor, region: Region) -> Result<Tensor> {
    if !x.requires_grad() || !grad_enabled() {
        return Ok(out);
    }
    let mut input = x.shallow_clone();
    let name = CString::new(region.node_name()).expect("no NUL in a node name");
    let outputs = [out.as_mut_ptr() as *mut c_void];
    let inputs = [input.as_mut_ptr() as *mut c_void];
    let ctx = Box::into_raw(Box::new(region)) as *mut c_void;
    let mut err = ptr::null_mut();
    check(
        unsafe {
            ffi::tchd_attach_backward(
                outputs.as_ptr(),
                1,
                inputs.as_ptr(),
                1,
                name.as_ptr(),
                region_backward,
                drop_region,
                ctx,
                &mut err,
            )
        },
        err,
    )?;
    Ok(out)
}

fn grad_enabled() -> bool {
    unsafe { ffi::tchd_grad_enabled() != 0 }
}

extern "C" fn drop_region(ctx: *mut c_void) {
    // SAFETY: every context handed to the shim here is a Box<Region> from Box::into_raw.
    drop(unsafe { Box::from_raw(ctx as *mut Region) });
}

extern "C" fn region_backward(
    ctx: *mut c_void,
    grads: *const *mut c_void,
    n: usize,
    input_grads: *mut *mut c_void,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: the node's context, alive until drop_region; the gradient is an owned
    // `at::Tensor*` the shim made for us (or null when none arrived).
    let region = unsafe { &*(ctx as *const Region) };
    let grad = (n == 1)
        .then(|| unsafe { *grads })
        .filter(|p| !p.is_null())
        .map(|p| unsafe { Tensor::from_ptr(p as *mut torch_sys::C_tensor) });
    let Some(grad) = grad else { return ffi::TCHD_OK };
    let outcome = catch_unwind(AssertUnwindSafe(|| region.backward(grad)));
    let message = match outcome {
        Ok(Ok(mut t)) => {
            // Ownership goes to the shim, which frees the handle.
            unsafe { *input_grads = t.as_mut_ptr() as *mut c_void };
            std::mem::forget(t);
            return ffi::TCHD_OK;
        }
        Ok(Err(e)) => format!("{}: {e}", region.node_name()),
        Err(_) => format!("{}: a panic in backward", region.node_name()),
    };
    if !err.is_null() {
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        unsafe { *err = libc::strdup(text.as_ptr()) };
    }
    ffi::TCHD_ERR_OTHER
}
