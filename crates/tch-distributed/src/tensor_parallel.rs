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
//! - [`gather_from_region`] (Megatron's `gather_from_tensor_model_parallel_region`):
//!   forward all-gathers every rank's slice and concatenates them along a dimension;
//!   backward keeps this rank's slice of the gradient. It turns a column-parallel
//!   layer's split output back into the whole one (Megatron's `gather_output=True`).
//! - [`scatter_to_region`] (Megatron's `scatter_to_tensor_model_parallel_region`):
//!   forward keeps this rank's slice along a dimension; backward all-gathers the
//!   gradient's slices into the whole. It feeds a row-parallel layer from a replicated
//!   activation (Megatron's `input_is_parallel=False`).
//!
//! PyTorch's autograd-aware `all_reduce` (functional collectives) would not do as *g*:
//! its backward all-reduces the gradient again, which scales every earlier gradient by
//! the group's size.
//!
//! [`parallelize_module`] splits a model's layers over the group as a plan says
//! ([`ParallelStyle::Colwise`], [`ParallelStyle::Rowwise`]), from TP rank 0's weights.
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::sync::Arc;

use tch::{nn, Tensor};

use crate::error::{check, DistError, Result};
use crate::ffi;
use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;
use crate::shim_callback::for_shim;

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
    attach(x, out, Region::AllReduce(group.clone()))
}

/// Megatron's *g*: `x` all-reduced (summed) over `group` in forward; in backward the
/// gradient passed on unchanged. Every rank of the group must call it at the same point.
pub fn reduce_from_region(x: &Tensor, group: &Arc<ProcessGroup>) -> Result<Tensor> {
    let mut out = x.detach().copy();
    group.all_reduce(&mut out, ReduceOp::Sum)?;
    attach(x, out, Region::Identity)
}

/// Megatron's gather: every rank's `x` concatenated along `dim` (negative counts from the
/// end: `-1` is Megatron's last dimension) in rank order, with one `all_gather_into_tensor`
/// over `group`; in backward, this rank's slice of the gradient (no collective). Every
/// rank of the group must call it at the same point, with `x` of the same shape.
///
/// ```no_run
/// # fn f(tp: &std::sync::Arc<tch_distributed::ProcessGroup>, x: &tch::Tensor) -> tch_distributed::Result<()> {
/// // A column-parallel layer's [batch, features / T] output, whole again: [batch, features].
/// let whole = tch_distributed::gather_from_region(x, -1, tp)?;
/// # Ok(()) }
/// ```
pub fn gather_from_region(x: &Tensor, dim: i64, group: &Arc<ProcessGroup>) -> Result<Tensor> {
    let dim = region_dim(x, dim, "gather_from_region")?;
    let out = all_gather_along(&x.detach(), dim, group)?;
    attach(x, out, Region::Slice { group: group.clone(), dim })
}

/// Megatron's scatter: this rank's slice of `x` along `dim` (the group's size splits it
/// into equal parts, rank r keeps part r; negative counts from the end), with no
/// collective; in backward, every rank's slice of the gradient all-gathered into the
/// whole over `group`. A dimension the group's size does not divide is an error.
pub fn scatter_to_region(x: &Tensor, dim: i64, group: &Arc<ProcessGroup>) -> Result<Tensor> {
    let dim = region_dim(x, dim, "scatter_to_region")?;
    let (len, size) = (x.size()[dim], group.world_size() as i64);
    if len % size != 0 {
        return Err(DistError::invalid(format!(
            "scatter_to_region: dimension {dim} of the input {:?} has {len}, which {size} ranks cannot split evenly; pick a dimension (or a width) that is a multiple of the group's size",
            x.size()
        )));
    }
    let out = own_slice(&x.detach(), dim, group);
    attach(x, out, Region::AllGather { group: group.clone(), dim })
}

/// `dim` of `x` as a non-negative index, or an error naming the operator.
fn region_dim(x: &Tensor, dim: i64, what: &str) -> Result<usize> {
    let rank = x.dim() as i64;
    let index = if dim < 0 { dim + rank } else { dim };
    if !(0..rank).contains(&index) {
        return Err(DistError::invalid(format!(
            "{what}: dimension {dim} is out of range for a tensor of shape {:?} (valid: {} to {})",
            x.size(),
            -rank,
            rank - 1
        )));
    }
    Ok(index as usize)
}

/// This rank's equal part of `x` along `dim`, in memory of its own (a collective may
/// later write into it, and the caller's tensor must not change).
fn own_slice(x: &Tensor, dim: usize, group: &ProcessGroup) -> Tensor {
    let part = x.size()[dim] / group.world_size() as i64;
    x.narrow(dim as i64, group.rank() as i64 * part, part).contiguous()
}

/// Every rank's `x` concatenated along `dim`: gathered along dim 0 (what Gloo's
/// all-gather lays out), then the parts moved to `dim`, as Megatron's
/// `_gather_along_last_dim` does.
fn all_gather_along(x: &Tensor, dim: usize, group: &ProcessGroup) -> Result<Tensor> {
    let input = x.contiguous();
    let mut shape = input.size();
    shape[0] *= group.world_size() as i64;
    let mut gathered = Tensor::empty(&shape, (input.kind(), input.device()));
    group.all_gather_into_tensor(&mut gathered, &input)?;
    if dim == 0 {
        return Ok(gathered);
    }
    let parts = gathered.chunk(group.world_size() as i64, 0);
    Ok(Tensor::cat(&parts, dim as i64))
}

/// How [`parallelize_module`] splits one layer's parameters over the TP group, as
/// PyTorch's `ParallelStyle`s do; the same for a `Linear` (weight `[out, in]`) and a
/// `Conv2d` (weight `[out_channels, in_channels, kh, kw]`), whose channels split as a
/// `Linear`'s features (PyTorch's own styles cover `Linear` and `Embedding` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelStyle {
    /// `ColwiseParallel`: the weight split along dim 0 (outputs, output channels), the
    /// bias with it. The layer's input goes through [`copy_to_region`]; its output is
    /// this rank's slice of the outputs. On a per-channel layer after such a conv (a
    /// BatchNorm), every tensor splits along dim 0: its weight, bias and running
    /// statistics follow the channels this rank holds.
    Colwise,
    /// `RowwiseParallel`: the weight split along dim 1 (inputs, input channels); the bias
    /// stays whole (replicated). The layer computes its partial sum without the bias,
    /// [`reduce_from_region`] sums it, then the bias is added once.
    Rowwise,
}

/// `parallelize_module(model, tp_mesh, plan, src_data_rank=0)`: every parameter of `vs`
/// under a path of `plan` (`"block1.conv1"` covers `block1.conv1.weight` and `.bias`)
/// becomes this rank's slice of TP rank 0's tensor, in place, so that the model's layers
/// compute with their slices. Every rank of `group` calls it with the same plan, after
/// building the whole model (any initial values: rank 0's are taken) and before the
/// optimizer. The model's forward puts [`copy_to_region`] before each column-parallel
/// layer and [`reduce_from_region`] after each row-parallel one (then that layer's bias).
///
/// A path that names no parameter, one under two entries, a Rowwise parameter other
/// than a weight or a bias, or a dimension the group's size does not divide is an error
/// (nothing is split then).
pub fn parallelize_module(
    vs: &nn::VarStore,
    group: &Arc<ProcessGroup>,
    plan: &[(&str, ParallelStyle)],
) -> Result<()> {
    let size = group.world_size() as i64;
    let rank = group.rank() as i64;
    let variables = vs.variables();
    // Sorted: the broadcasts below are collectives, in the same order on every rank.
    let mut names: Vec<&String> = variables.keys().collect();
    names.sort();
    let mut splits = Vec::new();
    for (path, style) in plan {
        let under: Vec<&&String> =
            names.iter().filter(|n| n.as_str() == *path || n.starts_with(&format!("{path}."))).collect();
        if under.is_empty() {
            return Err(DistError::invalid(format!(
                "parallelize_module: no parameter under \"{path}\"; the model's parameters are {names:?}"
            )));
        }
        for name in under {
            let tensor = &variables[name.as_str()];
            let dim = match (style, name.rsplit('.').next()) {
                (ParallelStyle::Colwise, _) => Some(0),
                (ParallelStyle::Rowwise, Some("weight")) => Some(1),
                (ParallelStyle::Rowwise, Some("bias")) => None,
                (ParallelStyle::Rowwise, _) => {
                    return Err(DistError::invalid(format!(
                        "parallelize_module: \"{name}\" is neither a weight nor a bias; a Rowwise plan entry splits a Linear's or a Conv2d's"
                    )))
                }
            };
            if let Some(dim) = dim {
                let len = tensor.size().get(dim as usize).copied().unwrap_or(0);
                if len == 0 || len % size != 0 {
                    return Err(DistError::invalid(format!(
                        "parallelize_module: \"{name}\" has {len} along dimension {dim}, which {size} ranks cannot split evenly"
                    )));
                }
            }
            if splits.iter().any(|(seen, _)| seen == *name) {
                return Err(DistError::invalid(format!(
                    "parallelize_module: \"{name}\" is under two entries of the plan; name each layer once"
                )));
            }
            splits.push((name.to_string(), dim));
        }
    }
    let _no_grad = tch::no_grad_guard();
    for (name, dim) in splits {
        let mut tensor = variables[&name].shallow_clone();
        let mut full = tensor.detach().copy();
        group.broadcast(&mut full, 0)?;
        let mine = match dim {
            Some(dim) => full.chunk(size, dim)[rank as usize].contiguous(),
            None => full,
        };
        // In place: every holder of the variable (the layer, the store) sees the slice.
        tensor.set_data(&mine);
    }
    Ok(())
}

/// What a region node does with the gradient in backward.
enum Region {
    /// All-reduce it over the group (*f*).
    AllReduce(Arc<ProcessGroup>),
    /// Pass it on as it is (*g*).
    Identity,
    /// Keep this rank's slice along `dim` (gather's backward).
    Slice { group: Arc<ProcessGroup>, dim: usize },
    /// All-gather the slices along `dim` (scatter's backward).
    AllGather { group: Arc<ProcessGroup>, dim: usize },
}

impl Region {
    fn node_name(&self) -> &'static str {
        match self {
            Region::AllReduce(_) => "CopyToTensorParallelRegionBackward",
            Region::Identity => "ReduceFromTensorParallelRegionBackward",
            Region::Slice { .. } => "GatherFromTensorParallelRegionBackward",
            Region::AllGather { .. } => "ScatterToTensorParallelRegionBackward",
        }
    }

    fn backward(&self, grad: Tensor) -> Result<Tensor> {
        match self {
            Region::AllReduce(group) => {
                // A tensor of its own: the incoming gradient may be shared with other uses.
                let mut grad = grad.copy();
                group.all_reduce(&mut grad, ReduceOp::Sum)?;
                Ok(grad)
            }
            Region::Identity => Ok(grad),
            Region::Slice { group, dim } => Ok(own_slice(&grad, *dim, group)),
            Region::AllGather { group, dim } => all_gather_along(&grad, *dim, group),
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
    for_shim(err, region.node_name(), || {
        let mut t = region.backward(grad)?;
        // Ownership goes to the shim, which frees the handle.
        unsafe { *input_grads = t.as_mut_ptr() as *mut c_void };
        std::mem::forget(t);
        Ok(())
    })
}
