//! SyncBatchNorm: a drop-in replacement for tch's `nn::batch_norm2d` whose training
//! statistics cover the batches of every rank in a process group, as PyTorch's
//! `torch.nn.SyncBatchNorm` does.
//!
//! The math lives in the shim (shim/sync_batch_norm.cpp, a `torch::autograd::Function`):
//! forward all-reduces per-channel `[sum(x) | sum(x²) | count]` once, normalises with the
//! global mean and biased variance and updates the running statistics with the global
//! unbiased variance; backward all-reduces `[sum(dy) | sum(dy·(x-mean))]` once and gives
//! each rank its slice of the global-batch input gradient.
//!
//! # Gradients of `weight` and `bias`
//!
//! These are each rank's *local* sums, as in PyTorch: summed over the ranks they equal
//! the gradients of the global batch. Because the backward pass all-reduces the
//! statistics of the input gradient, every gradient a rank computes (these and those of
//! the layers before) is that rank's share of the gradient of the *sum of all ranks'
//! losses*. The data-parallel wrapper (DDP) then all-reduces and averages every
//! parameter gradient, giving all parameters alike the gradient of the mean of the ranks'
//! losses. Reducing `weight`/`bias` gradients here as well would make them `world_size`
//! times too large after DDP. Without DDP, average them across ranks like every other
//! gradient (`ReduceOp::Sum`, then divide by the world size).
//!
//! Unlike PyTorch's module this also runs on CPU tensors (Gloo), since the lab trains
//! with CPU ranks. Eval mode uses the running statistics and never communicates; with no
//! process group (or a group of one rank) the layer is exactly tch's batch norm.
use std::borrow::Borrow;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use tch::nn::{self, BatchNormConfig};
use tch::{Device, Tensor};

use crate::error::{check, DistError, Result};
use crate::ffi;
use crate::group::{Backend, ProcessGroup};

/// Batch normalisation over (N, C, H, W) with statistics synchronised across ranks.
///
/// Its variables have the names tch's `nn::batch_norm2d` gives them (`weight`, `bias`,
/// `running_mean`, `running_var`), created in the same order, so checkpoints and
/// initial values are interchangeable with a plain `BatchNorm`.
#[derive(Debug)]
pub struct SyncBatchNorm {
    config: BatchNormConfig,
    group: Option<Arc<ProcessGroup>>,
    /// The running mean, averaged over every rank's batches while training.
    pub running_mean: Tensor,
    /// The running variance, over every rank's batches while training.
    pub running_var: Tensor,
    /// `weight` (None unless `config.affine`).
    pub ws: Option<Tensor>,
    /// `bias` (None unless `config.affine`).
    pub bs: Option<Tensor>,
}

/// Like tch's `nn::batch_norm2d`, synchronised over the default process group (when one
/// is initialised at the time of each forward pass; plain batch norm otherwise).
pub fn sync_batch_norm2d<'a, T: Borrow<nn::Path<'a>>>(
    vs: T,
    num_features: i64,
    config: BatchNormConfig,
) -> SyncBatchNorm {
    SyncBatchNorm::new(vs, num_features, config, None)
}

impl SyncBatchNorm {
    /// Creates the layer's variables under `vs`. `group`: the ranks to synchronise with;
    /// `None` means the default group as it is at each forward pass (none initialised:
    /// plain local batch norm).
    ///
    /// Panics if `num_features` is not positive (as a configuration error).
    pub fn new<'a, T: Borrow<nn::Path<'a>>>(
        vs: T,
        num_features: i64,
        config: BatchNormConfig,
        group: Option<Arc<ProcessGroup>>,
    ) -> SyncBatchNorm {
        assert!(num_features > 0, "SyncBatchNorm needs at least one feature (channel), got {num_features}");
        let vs = vs.borrow();
        // Same names, shapes, initialisers and order as tch's batch_norm2d.
        let (ws, bs) = if config.affine {
            let ws = vs.var("weight", &[num_features], config.ws_init);
            let bs = vs.var("bias", &[num_features], config.bs_init);
            (Some(ws), Some(bs))
        } else {
            (None, None)
        };
        SyncBatchNorm {
            config,
            group,
            running_mean: vs.zeros_no_train("running_mean", &[num_features]),
            running_var: vs.ones_no_train("running_var", &[num_features]),
            ws,
            bs,
        }
    }

    /// How many channels it normalises: as many as its running statistics hold, which
    /// [`parallelize_module`](crate::parallelize_module) may have cut to this rank's
    /// channels (a BatchNorm after a column-parallel conv) since it was built.
    pub fn num_features(&self) -> i64 {
        self.running_mean.size()[0]
    }

    /// Its configuration (epsilon, momentum, affine, ...).
    pub fn config(&self) -> &BatchNormConfig {
        &self.config
    }

    /// The group a forward pass would synchronise over now, if any.
    pub fn group(&self) -> Option<Arc<ProcessGroup>> {
        self.group.clone().or_else(|| crate::default_group().ok())
    }

    /// The forward pass, with bad input or a failed collective as an error instead of a
    /// panic. `train`: normalise with (synchronised) batch statistics and update the
    /// running ones; otherwise use the running statistics, without communicating.
    ///
    /// Every rank of the group must call this together when training, as with any
    /// collective; so must they call `backward` on anything computed from the output.
    pub fn try_forward(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        self.check_input(xs)?;
        let group = if train { self.group() } else { None };
        if let Some(g) = &group {
            if g.world_size() > 1 && g.backend() == Backend::Nccl && !matches!(xs.device(), Device::Cuda(_)) {
                return Err(DistError::invalid(format!(
                    "SyncBatchNorm: the group uses NCCL, which needs CUDA tensors, but the input is on {:?}: move the model and data to the GPU, or use a Gloo group",
                    xs.device()
                )));
            }
        }
        let opt_ptr = |t: &Option<Tensor>| t.as_ref().map_or(ptr::null(), |t| t.as_ptr() as *const c_void);
        // The shim updates the running statistics' storage in place (as tch's own batch
        // norm does through a shared reference); the tensor handles themselves are unchanged.
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_sync_batch_norm(
                group.as_ref().map_or(ptr::null_mut(), |g| g.raw()),
                xs.as_ptr() as *const c_void,
                opt_ptr(&self.ws),
                opt_ptr(&self.bs),
                self.running_mean.as_ptr() as *mut c_void,
                self.running_var.as_ptr() as *mut c_void,
                train as i32,
                self.config.momentum,
                self.config.eps,
                self.config.cudnn_enabled as i32,
                &mut out,
                &mut err,
            )
        };
        check(status, err).map_err(|e| match &group {
            Some(g) if g.world_size() > 1 => {
                e.context(format!("SyncBatchNorm forward on rank {} of {}", g.rank(), g.world_size()))
            }
            _ => e.context("SyncBatchNorm forward"),
        })?;
        assert!(!out.is_null(), "the shim returned no output tensor");
        // SAFETY: on success the shim hands over a heap `at::Tensor*` made with `new`,
        // which tch's Drop frees with `delete` (at_free).
        Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
    }

    fn check_input(&self, xs: &Tensor) -> Result<()> {
        if !xs.defined() {
            return Err(DistError::invalid("SyncBatchNorm: the input tensor is undefined"));
        }
        let size = xs.size();
        if size.len() != 4 {
            return Err(DistError::invalid(format!(
                "SyncBatchNorm expects a 4-D input (N, C, H, W) like nn::batch_norm2d, got shape {size:?}"
            )));
        }
        if size[1] != self.num_features() {
            return Err(DistError::invalid(format!(
                "SyncBatchNorm was built for {} channels but the input has {} (shape {size:?}, channels are dimension 1)",
                self.num_features(),
                size[1]
            )));
        }
        if !xs.is_floating_point() {
            return Err(DistError::invalid(format!(
                "SyncBatchNorm expects a floating-point input, got {:?}",
                xs.kind()
            )));
        }
        Ok(())
    }
}

impl nn::ModuleT for SyncBatchNorm {
    /// Panics with the error's message where [`SyncBatchNorm::try_forward`] would fail.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.try_forward(xs, train).unwrap_or_else(|e| panic!("{e}"))
    }
}
