//! DistributedDataParallel over a tch `VarStore`, driven by libtorch's own
//! `c10d::Reducer` (the engine behind PyTorch's DDP).
//!
//! What happens, as in PyTorch:
//! - construction checks every rank holds the same model, then broadcasts every
//!   parameter and buffer from rank 0, so replicas start identical whatever their seed;
//! - the Reducer hooks each parameter's gradient accumulator; during `backward()` it
//!   all-reduces gradients bucket by bucket (1 MiB first bucket, then 25 MiB) while the
//!   rest of the backward pass still runs, and averages them: when `backward()`
//!   returns, every rank holds the same averaged gradients;
//! - buffers (BatchNorm running statistics) are broadcast from rank 0 before each
//!   training forward pass;
//! - [`DistributedDataParallel::no_sync`] skips the all-reduce for gradient accumulation.
//!
//! Parameters are taken from the VarStore sorted by name: VarStore keeps them in a
//! hash map, and every rank must hand the Reducer the same order.
use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::hash::Hasher;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use tch::nn::{ModuleT, VarStore};
use tch::{Device, Tensor};

use crate::error::{check, DistError, ErrorKind, Result};
use crate::ffi;
use crate::group::{ProcessGroup, ReduceOp};

/// Chunk size for broadcasting model state (PyTorch uses the same 250 MiB).
const BROADCAST_BUCKET_BYTES: i64 = 250 * 1024 * 1024;

/// Options of [`DistributedDataParallel`], with PyTorch's defaults.
#[derive(Debug, Clone)]
pub struct DdpOptions {
    /// Gradient bucket size in MiB (PyTorch's `bucket_cap_mb`, 25).
    pub bucket_cap_mb: f64,
    /// Size of the first bucket in MiB (1): small, so communication starts early.
    pub first_bucket_cap_mb: f64,
    /// Search the forward outputs' graph for parameters that get no gradient, and mark
    /// them ready so reduction can finish. Costs a graph walk per iteration.
    pub find_unused_parameters: bool,
    /// Broadcast buffers (BatchNorm running stats) from rank 0 before each forward.
    pub broadcast_buffers: bool,
    /// Let gradients be views into the communication buckets (saves a copy and memory).
    pub gradient_as_bucket_view: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        Self {
            bucket_cap_mb: 25.0,
            first_bucket_cap_mb: 1.0,
            find_unused_parameters: false,
            broadcast_buffers: true,
            gradient_as_bucket_view: false,
        }
    }
}

/// A model wrapped for data-parallel training: `DistributedDataParallel::new(model, &vs, opts)`
/// is the Rust form of `model = DDP(model)`. Run the forward pass through it
/// ([`ModuleT::forward_t`] or [`try_forward_t`](Self::try_forward_t)), then backward and
/// step the optimizer as usual.
pub struct DistributedDataParallel<M> {
    module: M,
    group: Arc<ProcessGroup>,
    reducer: NonNull<ffi::tchd_reducer>,
    params: Vec<(String, Tensor)>,
    buffers: Vec<(String, Tensor)>,
    opts: DdpOptions,
    // PyTorch's `require_backward_grad_sync` (false inside no_sync) and
    // `require_forward_param_sync` (the last forward was a synchronised training one).
    backward_sync: Cell<bool>,
    forward_sync: Cell<bool>,
}

// SAFETY: the Reducer is not tied to a thread (autograd already calls into it from
// engine threads); the Cells make the wrapper !Sync, as forward bookkeeping requires.
unsafe impl<M: Send> Send for DistributedDataParallel<M> {}

impl<M: ModuleT> DistributedDataParallel<M> {
    /// Wraps `module`, whose variables live in `vs`, over the default process group.
    pub fn new(module: M, vs: &VarStore, opts: DdpOptions) -> Result<Self> {
        Self::with_group(module, vs, crate::default_group()?, opts)
    }

    /// Wraps `module` over an explicit group.
    pub fn with_group(module: M, vs: &VarStore, group: Arc<ProcessGroup>, opts: DdpOptions) -> Result<Self> {
        if !(opts.bucket_cap_mb > 0.0 && opts.first_bucket_cap_mb > 0.0) {
            return Err(DistError::invalid(
                "DDP bucket sizes must be positive (bucket_cap_mb, first_bucket_cap_mb)",
            ));
        }
        let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        if vars.is_empty() {
            return Err(DistError::invalid("DDP needs a model with parameters, but the VarStore is empty"));
        }
        verify_same_model(&group, &vars)?;

        // Every replica starts from rank 0's parameters and buffers.
        let mut all: Vec<Tensor> = vars.iter().map(|(_, t)| t.shallow_clone()).collect();
        broadcast_coalesced(&group, &mut all)?;

        let (params, buffers): (Vec<_>, Vec<_>) =
            vars.into_iter().map(|(n, t)| (n, t.shallow_clone())).partition(|(_, t)| t.requires_grad());
        if params.is_empty() {
            return Err(DistError::invalid("DDP found no trainable parameter (none requires grad)"));
        }
        let names: Vec<CString> =
            params.iter().map(|(n, _)| CString::new(n.as_str()).unwrap_or_default()).collect();
        let name_ptrs: Vec<*const std::ffi::c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut param_ptrs: Vec<*mut c_void> =
            params.iter().map(|(_, t)| t.as_ptr() as *mut c_void).collect();
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_reducer_new(
                group.raw(),
                param_ptrs.as_mut_ptr(),
                name_ptrs.as_ptr(),
                param_ptrs.len(),
                mib(opts.bucket_cap_mb),
                mib(opts.first_bucket_cap_mb),
                opts.find_unused_parameters as i32,
                opts.gradient_as_bucket_view as i32,
                &mut out,
                &mut err,
            )
        };
        check(status, err).map_err(|e| e.context("creating the DDP reducer"))?;
        Ok(Self {
            module,
            group,
            reducer: NonNull::new(out).expect("shim returned a null reducer"),
            params,
            buffers,
            opts,
            backward_sync: Cell::new(true),
            forward_sync: Cell::new(true),
        })
    }

    /// The forward pass, with DDP's bookkeeping before and after it.
    pub fn try_forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        let grad = unsafe { ffi::tchd_grad_enabled() } != 0;
        let sync_backward = grad && self.backward_sync.get();
        if sync_backward {
            let mut err = ptr::null_mut();
            check(unsafe { ffi::tchd_reducer_prepare_for_forward(self.reducer.as_ptr(), &mut err) }, err)
                .map_err(|e| e.context("DDP forward"))?;
        }
        if self.forward_sync.get() && self.opts.broadcast_buffers && self.group.world_size() > 1 {
            self.sync_buffers()?;
        }
        let out = self.module.forward_t(xs, train);
        if sync_backward {
            let outputs: Vec<*mut c_void> =
                if self.opts.find_unused_parameters { vec![out.as_ptr() as *mut c_void] } else { Vec::new() };
            let mut err = ptr::null_mut();
            let status = unsafe {
                ffi::tchd_reducer_prepare_for_backward(
                    self.reducer.as_ptr(),
                    outputs.as_ptr(),
                    outputs.len(),
                    &mut err,
                )
            };
            check(status, err).map_err(|e| e.context("DDP forward"))?;
        }
        self.forward_sync.set(sync_backward);
        Ok(out)
    }

    /// Runs `f` (forward and backward passes) without all-reducing gradients: they
    /// accumulate locally, and the first synchronised backward afterwards reduces the
    /// sum. PyTorch's `with model.no_sync():`.
    pub fn no_sync<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = self.backward_sync.replace(false);
        let result = f();
        self.backward_sync.set(before);
        result
    }

    /// Broadcasts buffers (e.g. BatchNorm running statistics) from rank 0.
    pub fn sync_buffers(&self) -> Result<()> {
        if self.buffers.is_empty() {
            return Ok(());
        }
        let mut bufs: Vec<Tensor> = self.buffers.iter().map(|(_, t)| t.shallow_clone()).collect();
        broadcast_coalesced(&self.group, &mut bufs)
    }

    /// The wrapped model (PyTorch's `model.module`).
    pub fn module(&self) -> &M {
        &self.module
    }

    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    /// Trainable parameters in the order the Reducer sees them (sorted by name).
    pub fn parameters(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// Non-trainable variables (buffers), sorted by name.
    pub fn buffers(&self) -> &[(String, Tensor)] {
        &self.buffers
    }

    /// How many parameters each gradient bucket holds, in reduction order.
    pub fn bucket_sizes(&self) -> Result<Vec<usize>> {
        let mut counts = vec![0i64; self.params.len().max(1)];
        let mut n = 0usize;
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_reducer_bucket_sizes(
                self.reducer.as_ptr(),
                counts.as_mut_ptr(),
                counts.len(),
                &mut n,
                &mut err,
            )
        };
        check(status, err)?;
        Ok(counts.into_iter().take(n).map(|c| c as usize).collect())
    }
}

impl<M: ModuleT> ModuleT for DistributedDataParallel<M> {
    /// Panics on a distributed error (ModuleT cannot return one); use
    /// [`try_forward_t`](DistributedDataParallel::try_forward_t) to handle it.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.try_forward_t(xs, train).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl<M> Drop for DistributedDataParallel<M> {
    fn drop(&mut self) {
        // Removes the Reducer's gradient hooks from the parameters.
        unsafe { ffi::tchd_reducer_free(self.reducer.as_ptr()) }
    }
}

impl<M> std::fmt::Debug for DistributedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedDataParallel")
            .field("group", &self.group)
            .field("parameters", &self.params.len())
            .field("buffers", &self.buffers.len())
            .field("opts", &self.opts)
            .finish()
    }
}

/// Broadcasts `tensors` from rank 0 in place, in flattened chunks.
pub fn broadcast_coalesced(group: &ProcessGroup, tensors: &mut [Tensor]) -> Result<()> {
    if group.world_size() == 1 || tensors.is_empty() {
        return Ok(());
    }
    group.observe_tensors("broadcast_coalesced", None, Some(0), tensors);
    let ptrs: Vec<*mut c_void> = tensors.iter_mut().map(|t| t.as_mut_ptr() as *mut c_void).collect();
    let mut err = ptr::null_mut();
    let status = unsafe {
        ffi::tchd_broadcast_coalesced(
            group.raw(),
            ptrs.as_ptr(),
            ptrs.len(),
            BROADCAST_BUCKET_BYTES,
            0,
            &mut err,
        )
    };
    check(status, err)
        .map_err(|e| e.context(format!("broadcasting model state from rank 0 (rank {})", group.rank())))
}

/// Every rank must wrap the same model: compare a fingerprint of names and shapes with
/// rank 0's before any state is broadcast (mismatched broadcasts corrupt or hang).
fn verify_same_model(group: &ProcessGroup, vars: &[(String, Tensor)]) -> Result<()> {
    let mut fingerprint = fnv::FnvHasher::default();
    let mut numel = 0i64;
    for (name, t) in vars {
        fingerprint.write(name.as_bytes());
        for d in t.size() {
            fingerprint.write(&d.to_le_bytes());
        }
        fingerprint.write(format!("{:?}", t.kind()).as_bytes());
        numel += t.numel() as i64;
    }
    // Two i64 words; hash split to stay exact through the collective.
    let hash = fingerprint.finish();
    let mine = [vars.len() as i64, numel, (hash >> 32) as i64, (hash & 0xffff_ffff) as i64];
    let device = vars[0].1.device();
    let device = if group.backend() == crate::Backend::Nccl { device } else { Device::Cpu };
    let mut theirs = Tensor::from_slice(&mine).to_device(device);
    group.broadcast(&mut theirs, 0)?;
    let rank0: Vec<i64> = Vec::<i64>::try_from(theirs.to_device(Device::Cpu)).unwrap_or_default();
    // Agree on the verdict, so that no rank goes on to broadcast alone and hang.
    let mut all_match = Tensor::from_slice(&[(rank0 == mine) as i64]).to_device(device);
    group.all_reduce(&mut all_match, ReduceOp::Min)?;
    if all_match.int64_value(&[0]) == 1 {
        return Ok(());
    }
    let detail = if rank0 == mine {
        "this rank matches rank 0, another one does not".to_string()
    } else {
        format!(
            "{} variables / {} values here, {} / {} on rank 0, or different names or shapes",
            mine[0],
            mine[1],
            rank0.first().copied().unwrap_or(-1),
            rank0.get(1).copied().unwrap_or(-1)
        )
    };
    Err(DistError::new(
        ErrorKind::InvalidArgument,
        format!(
            "DDP on rank {}: the ranks do not all hold the same model ({detail}): every rank must build the same model before wrapping it",
            group.rank()
        ),
    ))
}

fn mib(mb: f64) -> i64 {
    (mb * 1024.0 * 1024.0) as i64
}
