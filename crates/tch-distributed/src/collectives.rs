//! The collectives of `torch.distributed` that take no group: each runs on the default
//! group.
use tch::Tensor;

use crate::default_group::default_group;
use crate::error::Result;
use crate::group::Work;
use crate::reduce_op::ReduceOp;

/// [`ProcessGroup::all_reduce`](crate::ProcessGroup::all_reduce) on the default group.
#[track_caller]
pub fn all_reduce(tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
    default_group()?.all_reduce(tensor, op)
}

/// [`ProcessGroup::all_reduce_async`](crate::ProcessGroup::all_reduce_async) on the default group.
#[track_caller]
pub fn all_reduce_async(tensor: &mut Tensor, op: ReduceOp) -> Result<Work> {
    default_group()?.all_reduce_async(tensor, op)
}

/// [`ProcessGroup::reduce`](crate::ProcessGroup::reduce) on the default group.
#[track_caller]
pub fn reduce(tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<()> {
    default_group()?.reduce(tensor, dst, op)
}

/// [`ProcessGroup::reduce_async`](crate::ProcessGroup::reduce_async) on the default group.
#[track_caller]
pub fn reduce_async(tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<Work> {
    default_group()?.reduce_async(tensor, dst, op)
}

/// [`ProcessGroup::broadcast`](crate::ProcessGroup::broadcast) on the default group.
#[track_caller]
pub fn broadcast(tensor: &mut Tensor, src: usize) -> Result<()> {
    default_group()?.broadcast(tensor, src)
}

/// [`ProcessGroup::broadcast_async`](crate::ProcessGroup::broadcast_async) on the default group.
#[track_caller]
pub fn broadcast_async(tensor: &mut Tensor, src: usize) -> Result<Work> {
    default_group()?.broadcast_async(tensor, src)
}

/// [`ProcessGroup::all_gather`](crate::ProcessGroup::all_gather) on the default group.
#[track_caller]
pub fn all_gather(outputs: &mut [Tensor], input: &Tensor) -> Result<()> {
    default_group()?.all_gather(outputs, input)
}

/// [`ProcessGroup::all_gather_async`](crate::ProcessGroup::all_gather_async) on the default group.
#[track_caller]
pub fn all_gather_async(outputs: &mut [Tensor], input: &Tensor) -> Result<Work> {
    default_group()?.all_gather_async(outputs, input)
}

/// [`ProcessGroup::barrier`](crate::ProcessGroup::barrier) on the default group.
#[track_caller]
pub fn barrier() -> Result<()> {
    default_group()?.barrier()
}

/// [`ProcessGroup::barrier_async`](crate::ProcessGroup::barrier_async) on the default group.
#[track_caller]
pub fn barrier_async() -> Result<Work> {
    default_group()?.barrier_async()
}

/// [`ProcessGroup::all_gather_into_tensor`](crate::ProcessGroup::all_gather_into_tensor) on the default group.
#[track_caller]
pub fn all_gather_into_tensor(output: &mut Tensor, input: &Tensor) -> Result<()> {
    default_group()?.all_gather_into_tensor(output, input)
}

/// [`ProcessGroup::all_gather_into_tensor_async`](crate::ProcessGroup::all_gather_into_tensor_async) on the default group.
#[track_caller]
pub fn all_gather_into_tensor_async(output: &mut Tensor, input: &Tensor) -> Result<Work> {
    default_group()?.all_gather_into_tensor_async(output, input)
}

/// [`ProcessGroup::reduce_scatter_tensor`](crate::ProcessGroup::reduce_scatter_tensor) on the default group.
#[track_caller]
pub fn reduce_scatter_tensor(output: &mut Tensor, input: &Tensor, op: ReduceOp) -> Result<()> {
    default_group()?.reduce_scatter_tensor(output, input, op)
}

/// [`ProcessGroup::reduce_scatter_tensor_async`](crate::ProcessGroup::reduce_scatter_tensor_async) on the default group.
#[track_caller]
pub fn reduce_scatter_tensor_async(output: &mut Tensor, input: &Tensor, op: ReduceOp) -> Result<Work> {
    default_group()?.reduce_scatter_tensor_async(output, input, op)
}

/// [`ProcessGroup::send`](crate::ProcessGroup::send) on the default group.
#[track_caller]
pub fn send(tensor: &Tensor, dst: usize, tag: i32) -> Result<()> {
    default_group()?.send(tensor, dst, tag)
}

/// [`ProcessGroup::isend`](crate::ProcessGroup::isend) on the default group.
#[track_caller]
pub fn isend(tensor: &Tensor, dst: usize, tag: i32) -> Result<Work> {
    default_group()?.isend(tensor, dst, tag)
}

/// [`ProcessGroup::recv`](crate::ProcessGroup::recv) on the default group.
#[track_caller]
pub fn recv(tensor: &mut Tensor, src: usize, tag: i32) -> Result<()> {
    default_group()?.recv(tensor, src, tag)
}

/// [`ProcessGroup::irecv`](crate::ProcessGroup::irecv) on the default group.
#[track_caller]
pub fn irecv(tensor: &mut Tensor, src: usize, tag: i32) -> Result<Work> {
    default_group()?.irecv(tensor, src, tag)
}

/// [`ProcessGroup::recv_any_source`](crate::ProcessGroup::recv_any_source) on the default group.
#[track_caller]
pub fn recv_any_source(tensor: &mut Tensor, tag: i32) -> Result<usize> {
    default_group()?.recv_any_source(tensor, tag)
}
