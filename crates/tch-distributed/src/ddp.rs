//! DistributedDataParallel over a tch `VarStore`, driven by libtorch's own
//! `c10d::Reducer` (the engine behind PyTorch's DDP).
//!
//! What happens, as in PyTorch:
//! - construction checks every rank holds the same model (c10d's
//!   `verify_params_across_processes`, PyTorch DDP's own check), then broadcasts every
//!   parameter and buffer from rank 0, so replicas start identical whatever their seed;
//! - the Reducer hooks each parameter's gradient accumulator; during `backward()` it
//!   all-reduces gradients bucket by bucket (caps of 1 MiB for the first bucket, then
//!   25 MiB, as PyTorch's; a bucket closes once it reaches its cap, so with the lab's
//!   large convolutions the buckets hold 28, 25 and 12 MiB: see
//!   [`DistributedDataParallel::buckets`]) while the rest of the backward pass still
//!   runs, and averages them: when `backward()`
//!   returns, every rank holds the same averaged gradients;
//! - buffers (BatchNorm running statistics) are broadcast from rank 0 before each
//!   training forward pass;
//! - [`DistributedDataParallel::no_sync`] skips the all-reduce for gradient accumulation.
//!
//! Variables are taken in PyTorch's `named_parameters()` / `named_buffers()` order for
//! a model built the same way: modules in the order they created their parameters;
//! within a module `weight`, then `bias` (tch's linear and conv create the bias
//! first), then the rest as created. Buffers, for which tch keeps no creation order,
//! follow their module, by name (for BatchNorm: `running_mean`, `running_var`, as
//! PyTorch lists them). Same order, same collectives: a PyTorch rank can train in the
//! same group.
use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use tch::nn::{ModuleT, VarStore};
use tch::Tensor;

use crate::debug::CollectiveOp;
use crate::error::{check, DistError, ErrorKind, Result};
use crate::ffi;
use crate::group::ProcessGroup;
use crate::spans;

/// Chunk size for broadcasting model state (PyTorch uses the same 250 MiB).
const BROADCAST_BUCKET_BYTES: i64 = 250 * 1024 * 1024;

/// Options of [`DistributedDataParallel`], with PyTorch's defaults.
#[derive(Debug, Clone)]
pub struct DdpOptions {
    /// Gradient bucket size in MiB (PyTorch's `bucket_cap_mb`, 25).
    pub bucket_cap_mb: f64,
    /// Cap of the first bucket in MiB (1): small, so communication can start early
    /// (a bucket closes once it reaches its cap, so one large tensor still fills it).
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
        let (params, buffers) = in_module_order(vs);
        if params.is_empty() && buffers.is_empty() {
            return Err(DistError::invalid("DDP needs a model with parameters, but the VarStore is empty"));
        }
        // PyTorch's DDP: the parameters that get gradients go to the Reducer; frozen
        // ones are broadcast with the rest of the state, never reduced.
        let (params, frozen): (Vec<_>, Vec<_>) = params.into_iter().partition(|(_, t)| t.requires_grad());
        if params.is_empty() {
            return Err(DistError::invalid("DDP found no trainable parameter (none requires grad)"));
        }
        verify_same_model(&group, &params)?;

        // Every replica starts from rank 0's parameters (and buffers, when they are
        // broadcast at all), in named_parameters() then named_buffers() order.
        let mut state: Vec<Tensor> = params.iter().chain(&frozen).map(|(_, t)| t.shallow_clone()).collect();
        if opts.broadcast_buffers {
            state.extend(buffers.iter().map(|(_, t)| t.shallow_clone()));
        }
        broadcast_coalesced(&group, &mut state)?;
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
        let ddp = Self {
            module,
            group,
            reducer: NonNull::new(out).expect("shim returned a null reducer"),
            params,
            buffers,
            opts,
            backward_sync: Cell::new(true),
            forward_sync: Cell::new(true),
        };
        if spans::is_recording() {
            // The timeline times each bucket's all-reduce through a communication hook
            // that computes what the Reducer computes without one.
            let mut err = ptr::null_mut();
            let status = unsafe {
                ffi::tchd_reducer_time_buckets(
                    ddp.reducer.as_ptr(),
                    ddp.group.raw(),
                    spans::bucket_reduced,
                    &mut err,
                )
            };
            check(status, err).map_err(|e| e.context("timing DDP's gradient buckets"))?;
            ddp.record_buckets();
        }
        Ok(ddp)
    }

    /// Puts the current bucket layout on the timeline (an instant on the first bucket's
    /// lane): how many buckets, and per bucket its parameters and bytes.
    fn record_buckets(&self) {
        let Ok(buckets) = self.buckets() else { return };
        let bytes: Vec<String> = buckets
            .iter()
            .map(|b| {
                let n: usize = b
                    .iter()
                    .map(|&i| self.params[i].1.numel() * self.params[i].1.kind().elt_size_in_bytes())
                    .sum();
                n.to_string()
            })
            .collect();
        let params: Vec<String> = buckets.iter().map(|b| b.len().to_string()).collect();
        spans::instant("DDP buckets", "ddp", spans::Lane::Bucket(0))
            .arg("buckets", spans::Arg::Int(buckets.len() as i64))
            .arg("params", spans::Arg::Text(params.join(",")))
            .arg("bytes", spans::Arg::Text(bytes.join(",")))
            .record();
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
        if grad {
            // As PyTorch's forward: whenever grad is on, inside no_sync too.
            let mut err = ptr::null_mut();
            let mut rebuilt = 0;
            check(
                unsafe { ffi::tchd_reducer_rebuild_buckets(self.reducer.as_ptr(), &mut rebuilt, &mut err) },
                err,
            )
            .map_err(|e| e.context("DDP forward"))?;
            if rebuilt != 0 && spans::is_recording() {
                self.record_buckets();
            }
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

    /// The process group the gradients are averaged over (PyTorch's `process_group`).
    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    /// Trainable parameters in the order the Reducer sees them (creation order).
    pub fn parameters(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// Non-trainable variables (buffers), in module order.
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

    /// Which parameters each gradient bucket holds, as indices into
    /// [`parameters`](Self::parameters), bucket by bucket in reduction order. The
    /// buckets are regrouped once, in the first forward pass after a synchronised
    /// backward, in the order that backward produced the gradients.
    pub fn buckets(&self) -> Result<Vec<Vec<usize>>> {
        let counts = self.bucket_sizes()?;
        let mut flat = vec![0i64; self.params.len()];
        let mut n = 0usize;
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_reducer_bucket_params(
                self.reducer.as_ptr(),
                flat.as_mut_ptr(),
                flat.len(),
                &mut n,
                &mut err,
            )
        };
        check(status, err)?;
        let mut indices = flat.into_iter().take(n).map(|i| i as usize);
        Ok(counts.into_iter().map(|c| indices.by_ref().take(c).collect()).collect())
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
    let _span = group.observe_tensors(CollectiveOp::BroadcastCoalesced, None, Some(0), tensors);
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
    check(status, err).map_err(|e| match e.kind() {
        ErrorKind::Mismatch => group.explain(e, "DDP's broadcast of the model's state from rank 0"),
        _ => e.context(format!("broadcasting model state from rank 0 (rank {})", group.rank())),
    })
}

/// Variables with their names.
type Named = Vec<(String, Tensor)>;

/// The VarStore's parameters and buffers in PyTorch's order (see the module docs),
/// each with its name.
fn in_module_order(vs: &VarStore) -> (Named, Named) {
    let mut named = vs.variables();
    let mut created = Vec::new();
    for t in vs.trainable_variables() {
        // VarStore lists trainable variables in creation order, without names.
        let name = named.iter().find(|(_, v)| v.data_ptr() == t.data_ptr()).map(|(n, _)| n.clone());
        if let Some(name) = name {
            named.remove(&name);
            created.push((name, t));
        }
    }
    let module_of = |name: &str| name.rsplit_once('.').map_or(String::new(), |(m, _)| m.to_string());
    // Modules in the order they created their first parameter.
    let mut modules: Vec<String> = Vec::new();
    for (name, _) in &created {
        let module = module_of(name);
        if !modules.contains(&module) {
            modules.push(module);
        }
    }
    let module_place = |name: &str| {
        let module = module_of(name);
        modules.iter().position(|m| *m == module).unwrap_or(modules.len())
    };
    // Within a module, PyTorch's layers register `weight` before `bias`, while tch's
    // linear and conv layers create the bias first.
    let in_module = |name: &str, created_at: usize| match name.rsplit('.').next() {
        Some("weight") => 0,
        Some("bias") => 1,
        _ => 2 + created_at,
    };
    let mut params: Vec<(usize, usize, String, Tensor)> = created
        .into_iter()
        .enumerate()
        .map(|(i, (n, t))| (module_place(&n), in_module(&n, i), n, t))
        .collect();
    params.sort_by_key(|p| (p.0, p.1));
    let mut buffers: Vec<(usize, String, Tensor)> =
        named.into_iter().map(|(n, t)| (module_place(&n), n, t)).collect();
    buffers.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    (
        params.into_iter().map(|(_, _, n, t)| (n, t)).collect(),
        buffers.into_iter().map(|(_, n, t)| (n, t)).collect(),
    )
}

/// Every rank must wrap the same model: PyTorch DDP's check, c10d's
/// `verify_params_across_processes` (an all-gather of the parameter counts, then rank
/// 0's sizes and strides broadcast). A rank whose model differs fails here with
/// [`ErrorKind::InvalidArgument`]; as in PyTorch, a rank that matches rank 0 goes on,
/// and learns of the mismatch when the other rank leaves the group.
fn verify_same_model(group: &ProcessGroup, params: &[(String, Tensor)]) -> Result<()> {
    if group.world_size() == 1 {
        return Ok(());
    }
    let _span = group.observe_tensors(CollectiveOp::VerifyParamsAcrossProcesses, None, Some(0), &[]);
    let ptrs: Vec<*mut c_void> = params.iter().map(|(_, t)| t.as_ptr() as *mut c_void).collect();
    let mut err = ptr::null_mut();
    let status = unsafe { ffi::tchd_verify_params(group.raw(), ptrs.as_ptr(), ptrs.len(), &mut err) };
    check(status, err).map_err(|e| {
        if e.kind() == ErrorKind::Mismatch {
            return group.explain(e, "DDP's check that every rank holds the same model");
        }
        if e.kind() == ErrorKind::InvalidArgument {
            DistError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "DDP on rank {}: the ranks do not all hold the same model ({}): every rank must build the same model before wrapping it",
                    group.rank(),
                    e.message()
                ),
            )
        } else {
            e.context("DDP checking that every rank holds the same model")
        }
    })
}

fn mib(mb: f64) -> i64 {
    (mb * 1024.0 * 1024.0) as i64
}
