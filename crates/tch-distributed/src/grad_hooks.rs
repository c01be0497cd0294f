//! Hooks on a tensor's gradient, as PyTorch names them: [`register_hook`] (the gradient
//! on its way, which the hook may replace) and [`register_post_accumulate_grad_hook`] (a
//! parameter whose `.grad` this backward has just filled), each with a
//! [`RemovableHandle`]. The pieces a hand-written DDP is made of: a post-accumulate-grad
//! hook launches a bucket's `all_reduce_async` as soon as its gradients are ready, while
//! backward goes on (`examples/bucketed_ddp.rs`).
//!
//! The hooks run inside libtorch's backward, through the shim (shim/hooks.cpp); what a
//! hook returns as an error, or a panic in it, fails that backward call (`f_backward`
//! returns it as a `TchError`, `backward` panics with it), never the process.
use std::ffi::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, PoisonError};

use tch::Tensor;

use crate::error::{check, Result};
use crate::ffi;
use crate::shim_callback::for_shim;

/// What a gradient hook is: the gradient in, `Some(replacement)` or `None` (unchanged) out.
type GradHook = Box<dyn FnMut(&Tensor) -> Result<Option<Tensor>> + Send>;
/// What a post-accumulate-grad hook is: the parameter in, its `.grad` filled.
type PostAccumulateGradHook = Box<dyn FnMut(&Tensor) -> Result<()> + Send>;

/// A hook's context in the shim: the closure, and what its errors are prefixed with.
/// Behind a mutex because autograd may call it from its own threads (a CUDA device's).
struct Hook<F> {
    what: &'static str,
    hook: Mutex<F>,
}

/// Removes the hook it was returned for, on [`remove`](Self::remove) or when dropped
/// (PyTorch's `torch.utils.hooks.RemovableHandle`, except that PyTorch keeps a hook whose
/// handle is gone: here, keep the handle as long as the hook should run).
#[must_use = "dropping the handle removes the hook at once: keep it as long as the hook should run"]
#[derive(Debug)]
pub struct RemovableHandle {
    raw: NonNull<ffi::tchd_hook_handle>,
}

// SAFETY: the shim's handle is a shared slot behind a mutex, removable from any thread.
unsafe impl Send for RemovableHandle {}

impl RemovableHandle {
    /// Removes the hook: it does not run again, and its closure is dropped (after the
    /// call in progress, if backward is running it on another thread).
    pub fn remove(self) {
        // Drop does it.
    }
}

impl Drop for RemovableHandle {
    fn drop(&mut self) {
        unsafe { ffi::tchd_hook_remove(self.raw.as_ptr()) }
    }
}

/// `tensor.register_hook(hook)`: `hook` runs each time a gradient with respect to
/// `tensor` is computed, with that gradient, before it flows on; `Ok(Some(g))` replaces
/// it with `g` (same shape and dtype), `Ok(None)` leaves it as it is. On a parameter (a
/// leaf) it runs before the gradient is accumulated into `.grad`; on any other tensor
/// that requires grad, before backward goes further back.
///
/// An `Err` returned by the hook, or a panic in it, fails the backward call with the
/// hook's message (prefixed `gradient hook:`). A tensor that does not require grad is
/// refused ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)).
///
/// ```
/// use tch::{Kind, Tensor};
/// use tch_distributed as dist;
///
/// let w = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
/// let double = dist::register_hook(&w, |grad| Ok(Some(grad * 2.0)))?;
/// (&w * &w).sum(Kind::Float).backward();
/// assert_eq!(Vec::<f32>::try_from(w.grad())?, [4.0, 8.0]); // 2w, doubled
/// double.remove();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn register_hook<F>(tensor: &Tensor, hook: F) -> Result<RemovableHandle>
where
    F: FnMut(&Tensor) -> Result<Option<Tensor>> + Send + 'static,
{
    let raw = add_grad_hook(tensor, "gradient hook", Box::new(hook), true)?;
    Ok(RemovableHandle { raw: raw.expect("the shim fills the handle it is asked for") })
}

/// A [`register_hook`] that stays as long as the tensor (FSDP's pre-backward hook on a
/// block's output); its errors are prefixed with `what`.
pub(crate) fn register_lasting_hook<F>(tensor: &Tensor, what: &'static str, hook: F) -> Result<()>
where
    F: FnMut(&Tensor) -> Result<Option<Tensor>> + Send + 'static,
{
    add_grad_hook(tensor, what, Box::new(hook), false).map(|_| ())
}

fn add_grad_hook(
    tensor: &Tensor,
    what: &'static str,
    hook: GradHook,
    removable: bool,
) -> Result<Option<NonNull<ffi::tchd_hook_handle>>> {
    let ctx = Box::into_raw(Box::new(Hook { what, hook: Mutex::new(hook) })) as *mut c_void;
    let mut tensor = tensor.shallow_clone();
    let mut handle = ptr::null_mut();
    let mut err = ptr::null_mut();
    check(
        unsafe {
            ffi::tchd_register_grad_hook(
                tensor.as_mut_ptr() as *mut c_void,
                run_grad_hook,
                drop_hook::<GradHook>,
                ctx,
                if removable { &mut handle } else { ptr::null_mut() },
                &mut err,
            )
        },
        err,
    )?;
    Ok(NonNull::new(handle))
}

/// `param.register_post_accumulate_grad_hook(hook)`: `hook` runs with `param` once its
/// `.grad` holds this backward's gradient, accumulated (PyTorch's hook for work that
/// should start as soon as a parameter's gradient is final: an optimizer step, or a
/// bucket's all-reduce). It runs once per backward for each parameter that got a
/// gradient (none for a parameter the loss does not depend on), in the order backward
/// reaches them: roughly the reverse of the forward's.
///
/// Only leaves that require grad (parameters) have a `.grad`; any other tensor is
/// refused ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)). An `Err`
/// returned by the hook, or a panic in it, fails the backward call with the hook's
/// message (prefixed `post-accumulate-grad hook:`).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use tch::{Kind, Tensor};
/// use tch_distributed as dist;
///
/// let w = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let record = seen.clone();
/// let _handle = dist::register_post_accumulate_grad_hook(&w, move |param| {
///     record.lock().unwrap().push(Vec::<f32>::try_from(param.grad())?);
///     Ok(())
/// })?;
/// (&w * &w).sum(Kind::Float).backward();
/// (&w * &w).sum(Kind::Float).backward(); // accumulates: 2w + 2w
/// assert_eq!(*seen.lock().unwrap(), [vec![2.0, 4.0], vec![4.0, 8.0]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn register_post_accumulate_grad_hook<F>(param: &Tensor, hook: F) -> Result<RemovableHandle>
where
    F: FnMut(&Tensor) -> Result<()> + Send + 'static,
{
    let hook: PostAccumulateGradHook = Box::new(hook);
    let ctx = Box::into_raw(Box::new(Hook { what: "post-accumulate-grad hook", hook: Mutex::new(hook) }))
        as *mut c_void;
    let mut param = param.shallow_clone();
    let mut handle = ptr::null_mut();
    let mut err = ptr::null_mut();
    check(
        unsafe {
            ffi::tchd_register_post_accumulate_grad_hook(
                param.as_mut_ptr() as *mut c_void,
                run_post_accumulate_grad_hook,
                drop_hook::<PostAccumulateGradHook>,
                ctx,
                &mut handle,
                &mut err,
            )
        },
        err,
    )?;
    Ok(RemovableHandle { raw: NonNull::new(handle).expect("the shim fills the handle it is asked for") })
}

/// An owned `at::Tensor*` from the shim, as tch's tensor (which frees it).
///
/// SAFETY: `p` is a non-null `at::Tensor*` the shim allocated for us.
unsafe fn owned_tensor(p: *mut c_void) -> Tensor {
    Tensor::from_ptr(p as *mut torch_sys::C_tensor)
}

extern "C" fn drop_hook<F>(ctx: *mut c_void) {
    // SAFETY: every hook context is a Box<Hook<F>> from Box::into_raw, of this F.
    drop(unsafe { Box::from_raw(ctx as *mut Hook<F>) });
}

extern "C" fn run_grad_hook(
    ctx: *mut c_void,
    grad: *mut c_void,
    replacement: *mut *mut c_void,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: the hook's context, alive while the shim calls it; the gradient is ours.
    let hook = unsafe { &*(ctx as *const Hook<GradHook>) };
    let grad = unsafe { owned_tensor(grad) };
    for_shim(err, hook.what, || {
        // A hook that panicked before may be called again: its state is the user's.
        let mut f = hook.hook.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut new) = f(&grad)? {
            // Ownership goes to the shim, which frees the handle.
            unsafe { *replacement = new.as_mut_ptr() as *mut c_void };
            std::mem::forget(new);
        }
        Ok(())
    })
}

extern "C" fn run_post_accumulate_grad_hook(
    ctx: *mut c_void,
    param: *mut c_void,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: as in run_grad_hook.
    let hook = unsafe { &*(ctx as *const Hook<PostAccumulateGradHook>) };
    let param = unsafe { owned_tensor(param) };
    for_shim(err, hook.what, || {
        let mut f = hook.hook.lock().unwrap_or_else(PoisonError::into_inner);
        f(&param)
    })
}
