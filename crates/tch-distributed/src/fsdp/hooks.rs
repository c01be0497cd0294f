//! How a unit hooks into the forward and backward passes (FSDP2's `FSDPState` hooks):
//! its pre- and post-forward, and the shim's callbacks from autograd into it (its
//! pre-backward hook is a gradient hook of crate::grad_hooks).
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Arc;

use tch::Tensor;

use super::unit::{lock, Unit};
use crate::error::{check, Result};
use crate::ffi;
use crate::grad_hooks::register_lasting_hook;
use crate::shim_callback::for_shim;

impl Unit {
    pub(super) fn pre_forward(self: &Arc<Self>) -> Result<()> {
        let mut state = lock(&self.state);
        // Always gathered afresh: the optimizer may have stepped since the last time.
        self.unshard(&mut state)?;
        if grad_enabled() && !state.params.is_empty() {
            let mut fulls: Vec<*mut c_void> =
                state.params.iter_mut().map(|p| p.full.as_mut_ptr() as *mut c_void).collect();
            let mut shards: Vec<*mut c_void> =
                state.params.iter_mut().map(|p| p.shard.as_mut_ptr() as *mut c_void).collect();
            let ctx = Arc::into_raw(self.clone()) as *mut c_void;
            let mut err = ptr::null_mut();
            check(
                unsafe {
                    ffi::tchd_fsdp_attach(
                        fulls.as_mut_ptr(),
                        fulls.len(),
                        shards.as_mut_ptr(),
                        shards.len(),
                        reduce_scatter_gradients,
                        drop_unit,
                        ctx,
                        &mut err,
                    )
                },
                err,
            )
            .map_err(|e| e.context(&self.name))?;
        }
        Ok(())
    }

    pub(super) fn post_forward(self: &Arc<Self>, out: &Tensor) -> Result<()> {
        let recorded = grad_enabled() && out.requires_grad();
        let mut state = lock(&self.state);
        if self.reshard_after_forward || !recorded {
            self.reshard(&mut state)?;
        }
        if recorded && !state.params.is_empty() {
            // Before the block's backward: its parameters again.
            let unit = self.clone();
            register_lasting_hook(out, "FSDP", move |_| {
                unit.pre_backward().map_err(|e| e.context(&unit.name))?;
                Ok(None)
            })
            .map_err(|e| e.context(&self.name))?;
        }
        Ok(())
    }
}

fn grad_enabled() -> bool {
    unsafe { ffi::tchd_grad_enabled() != 0 }
}

extern "C" fn drop_unit(ctx: *mut c_void) {
    // SAFETY: every context handed to the shim is an Arc<Unit> from Arc::into_raw.
    drop(unsafe { Arc::from_raw(ctx as *const Unit) });
}

extern "C" fn reduce_scatter_gradients(
    ctx: *mut c_void,
    grads: *const *mut c_void,
    n: usize,
    shard_grads: *mut *mut c_void,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: the node's context, alive until drop_unit; the gradients are owned
    // `at::Tensor*`s the shim made for us (or null).
    let unit = unsafe { &*(ctx as *const Unit) };
    let grads: Vec<Option<Tensor>> = (0..n)
        .map(|i| {
            let p = unsafe { *grads.add(i) };
            (!p.is_null()).then(|| unsafe { Tensor::from_ptr(p as *mut torch_sys::C_tensor) })
        })
        .collect();
    for_shim(err, "FSDP", || {
        let out = unit.post_backward(grads).map_err(|e| e.context(&unit.name))?;
        for (i, mut t) in out.into_iter().enumerate() {
            // Ownership goes to the shim, which frees the handle.
            unsafe { *shard_grads.add(i) = t.as_mut_ptr() as *mut c_void };
            std::mem::forget(t);
        }
        Ok(())
    })
}
