//! The checks of a call's arguments (tensors, reduce op, ranks) before it reaches c10d.
use tch::{Device, Tensor};

use super::{Backend, ProcessGroup};
use crate::error::{DistError, ErrorKind, Result};
use crate::reduce_op::ReduceOp;

impl ProcessGroup {
    pub(super) fn check_tensor(&self, t: &Tensor, what: &str) -> Result<()> {
        if !t.defined() {
            return Err(DistError::invalid(format!("{what}: the tensor is undefined")));
        }
        match (self.backend, t.device()) {
            (Backend::Nccl, Device::Cuda(_)) | (Backend::Gloo, Device::Cpu | Device::Cuda(_)) => {}
            (Backend::Nccl, d) => {
                return Err(DistError::invalid(format!(
                    "{what}: the NCCL backend works on CUDA tensors but this one is on {d:?}: move it with .to_device(Device::Cuda(local_rank)), or use Backend::Gloo for CPU tensors"
                )))
            }
            (Backend::Gloo, d) => {
                return Err(DistError::invalid(format!("{what}: Gloo works on CPU or CUDA tensors, not on {d:?}")))
            }
        }
        if !t.is_contiguous() {
            return Err(DistError::invalid(format!(
                "{what}: the tensor is not contiguous: collectives write in place into dense memory; call .contiguous() first"
            )));
        }
        Ok(())
    }

    pub(super) fn check_op(&self, op: ReduceOp, what: &str) -> Result<()> {
        if op == ReduceOp::Avg && self.backend == Backend::Gloo {
            return Err(DistError::new(
                ErrorKind::Unsupported,
                format!("{what}: ReduceOp::Avg is not supported by the Gloo backend (as in PyTorch): reduce with ReduceOp::Sum, then divide by the world size"),
            ));
        }
        Ok(())
    }

    /// `big` must hold world size times `small`'s elements, of the same dtype and device.
    pub(super) fn check_scattered(
        &self,
        big: &Tensor,
        big_name: &str,
        small: &Tensor,
        small_name: &str,
        what: &str,
    ) -> Result<()> {
        if big.kind() != small.kind() || big.device() != small.device() {
            return Err(DistError::invalid(format!(
                "{what}: the {big_name} is {:?} on {:?} but the {small_name} is {:?} on {:?}: both must have the same dtype and device",
                big.kind(),
                big.device(),
                small.kind(),
                small.device()
            )));
        }
        let want = small.numel() as i64 * self.world_size as i64;
        if big.numel() as i64 != want {
            return Err(DistError::invalid(format!(
                "{what}: the {big_name} has {} elements ({:?}) but must have world size x {small_name} = {} x {} = {want} (e.g. shape [{}, ...] for a {small_name} of shape {:?})",
                big.numel(),
                big.size(),
                self.world_size,
                small.numel(),
                small.size().first().copied().unwrap_or(1) * self.world_size as i64,
                small.size()
            )));
        }
        Ok(())
    }

    pub(super) fn check_peer(&self, peer: usize, what: &str, role: &str) -> Result<()> {
        if peer >= self.world_size {
            return Err(DistError::invalid(format!(
                "{what}: {role} rank {peer} does not exist: the group has ranks 0..{}",
                self.world_size
            )));
        }
        Ok(())
    }
}
