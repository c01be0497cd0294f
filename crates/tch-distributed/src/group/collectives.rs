//! The collectives a group runs: `all_reduce`, `reduce`, `broadcast`, the all-gathers,
//! `reduce_scatter_tensor` and `barrier`, each also without waiting.
use std::ffi::c_void;

use tch::Tensor;

use super::{ProcessGroup, Work};
use crate::debug::CollectiveOp;
use crate::error::{DistError, Result};
use crate::ffi;
use crate::reduce_op::ReduceOp;

impl ProcessGroup {
    /// Combines `tensor` across all ranks with `op`; every rank ends with the result.
    #[track_caller]
    pub fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(tensor, op)?.wait()
    }

    /// [`ProcessGroup::all_reduce`] without waiting: [`Work::wait`] finishes it
    /// (PyTorch's `async_op=True`).
    #[track_caller]
    pub fn all_reduce_async(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<Work> {
        self.check_tensor(tensor, "all_reduce")?;
        self.check_op(op, "all_reduce")?;
        let span = self.observe(CollectiveOp::AllReduce, Some(op), None, Some(tensor));
        let ptrs = [tensor.as_mut_ptr() as *mut c_void];
        self.start("all_reduce", span, |out, err| unsafe {
            ffi::tchd_all_reduce(self.raw.as_ptr(), ptrs.as_ptr(), 1, crate::reduce_op::raw(op), out, err)
        })
    }

    /// Like [`all_reduce`](Self::all_reduce), but only rank `dst` is guaranteed the result.
    #[track_caller]
    pub fn reduce(&self, tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<()> {
        self.reduce_async(tensor, dst, op)?.wait()
    }

    /// [`ProcessGroup::reduce`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn reduce_async(&self, tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<Work> {
        self.check_tensor(tensor, "reduce")?;
        self.check_op(op, "reduce")?;
        self.check_peer(dst, "reduce", "destination")?;
        let span = self.observe(CollectiveOp::Reduce, Some(op), Some(dst), Some(tensor));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start("reduce", span, |out, err| unsafe {
            ffi::tchd_reduce(self.raw.as_ptr(), ptr, dst as i32, crate::reduce_op::raw(op), out, err)
        })
    }

    /// Copies rank `src`'s `tensor` into every other rank's `tensor`.
    #[track_caller]
    pub fn broadcast(&self, tensor: &mut Tensor, src: usize) -> Result<()> {
        self.broadcast_async(tensor, src)?.wait()
    }

    /// [`ProcessGroup::broadcast`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn broadcast_async(&self, tensor: &mut Tensor, src: usize) -> Result<Work> {
        self.check_tensor(tensor, "broadcast")?;
        self.check_peer(src, "broadcast", "source")?;
        let span = self.observe(CollectiveOp::Broadcast, None, Some(src), Some(tensor));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start("broadcast", span, |out, err| unsafe {
            ffi::tchd_broadcast(self.raw.as_ptr(), ptr, src as i32, out, err)
        })
    }

    /// Gathers every rank's `input` into `outputs[rank]` on every rank
    /// (`outputs.len()` == world size, each shaped like `input`).
    #[track_caller]
    pub fn all_gather(&self, outputs: &mut [Tensor], input: &Tensor) -> Result<()> {
        self.all_gather_async(outputs, input)?.wait()
    }

    /// [`ProcessGroup::all_gather`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn all_gather_async(&self, outputs: &mut [Tensor], input: &Tensor) -> Result<Work> {
        self.check_tensor(input, "all_gather")?;
        if outputs.len() != self.world_size {
            return Err(DistError::invalid(format!(
                "all_gather needs one output tensor per rank: got {}, world size is {}",
                outputs.len(),
                self.world_size
            )));
        }
        for (i, out) in outputs.iter().enumerate() {
            self.check_tensor(out, "all_gather")?;
            if out.size() != input.size() || out.kind() != input.kind() || out.device() != input.device() {
                return Err(DistError::invalid(format!(
                    "all_gather output {i} is {:?} {:?} on {:?} but the input is {:?} {:?} on {:?}: each output must match the input",
                    out.size(),
                    out.kind(),
                    out.device(),
                    input.size(),
                    input.kind(),
                    input.device()
                )));
            }
        }
        let span = self.observe(CollectiveOp::AllGather, None, None, Some(input));
        let ptrs: Vec<*mut c_void> = outputs.iter_mut().map(|t| t.as_mut_ptr() as *mut c_void).collect();
        // c10d only reads the input; the shim's signature is not const-correct.
        let input_ptr = input.as_ptr() as *mut c_void;
        self.start("all_gather", span, |out, err| unsafe {
            ffi::tchd_all_gather(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), input_ptr, out, err)
        })
    }

    /// Convenience form of [`all_gather`](Self::all_gather) that allocates the outputs.
    #[track_caller]
    pub fn all_gather_to_vec(&self, input: &Tensor) -> Result<Vec<Tensor>> {
        let mut outputs: Vec<Tensor> = (0..self.world_size).map(|_| input.empty_like()).collect();
        self.all_gather(&mut outputs, input)?;
        Ok(outputs)
    }

    /// Gathers every rank's `input` into one tensor: `output` holds world size times
    /// `input`'s elements, rank r's at `[r * n, (r + 1) * n)` of the flattened output
    /// (`torch.distributed.all_gather_into_tensor`; c10d's `_allgather_base`). `output`
    /// may be shaped `[world_size * d0, ...]` (concatenated along dim 0) or
    /// `[world_size, d0, ...]` (stacked): only the element count and order matter.
    ///
    /// This is FSDP's unshard: every rank holds one shard of a parameter, and this call
    /// puts the whole parameter on every rank.
    ///
    /// ```no_run
    /// # use tch::{Device, Kind, Tensor};
    /// # fn main() -> tch_distributed::Result<()> {
    /// let group = tch_distributed::default_group()?;
    /// let shard = Tensor::full([2, 3], group.rank() as f64, (Kind::Float, Device::Cpu));
    /// let mut full = Tensor::zeros([2 * group.world_size() as i64, 3], (Kind::Float, Device::Cpu));
    /// group.all_gather_into_tensor(&mut full, &shard)?;
    /// // Rows 2r and 2r + 1 hold rank r's shard.
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn all_gather_into_tensor(&self, output: &mut Tensor, input: &Tensor) -> Result<()> {
        self.all_gather_into_tensor_async(output, input)?.wait()
    }

    /// [`ProcessGroup::all_gather_into_tensor`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn all_gather_into_tensor_async(&self, output: &mut Tensor, input: &Tensor) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::AllGatherIntoTensor;
        const WHAT: &str = OP.name();
        self.check_tensor(input, WHAT)?;
        self.check_tensor(output, WHAT)?;
        self.check_scattered(output, "output", input, "input", WHAT)?;
        let span = self.observe(OP, None, None, Some(input));
        // Flat views of the same memory: Gloo wants the output as the inputs concatenated
        // along dim 0, and this accepts the stacked form (and scalars) as PyTorch does.
        let (mut flat_out, flat_in) = (output.view([-1]), input.view([-1]));
        let (out_ptr, in_ptr) = (flat_out.as_mut_ptr() as *mut c_void, flat_in.as_ptr() as *mut c_void);
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_all_gather_into_tensor(self.raw.as_ptr(), out_ptr, in_ptr, out, err)
        })
    }

    /// Reduces `input` over the ranks with `op` and leaves chunk r of the result on rank
    /// r: `input` holds world size times `output`'s elements, and rank r's `output` is
    /// the reduction over every rank of `input[r * n .. (r + 1) * n]` (flattened)
    /// (`torch.distributed.reduce_scatter_tensor`; c10d's `_reduce_scatter_base`).
    ///
    /// This is FSDP's gradient step: every rank computed the gradient of the whole
    /// parameter, and each keeps the sum over ranks of its own shard's part. Gloo has no
    /// [`ReduceOp::Avg`] (as in PyTorch): for the average, as DDP takes it, reduce with
    /// `Sum` and divide by the world size, as FSDP2 does on Gloo.
    #[track_caller]
    pub fn reduce_scatter_tensor(&self, output: &mut Tensor, input: &Tensor, op: ReduceOp) -> Result<()> {
        self.reduce_scatter_tensor_async(output, input, op)?.wait()
    }

    /// [`ProcessGroup::reduce_scatter_tensor`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn reduce_scatter_tensor_async(
        &self,
        output: &mut Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::ReduceScatterTensor;
        const WHAT: &str = OP.name();
        self.check_tensor(input, WHAT)?;
        self.check_tensor(output, WHAT)?;
        self.check_op(op, WHAT)?;
        self.check_scattered(input, "input", output, "output", WHAT)?;
        let span = self.observe(OP, Some(op), None, Some(input));
        // Flat views, as in all_gather_into_tensor: any shapes of the right sizes.
        let (mut flat_out, flat_in) = (output.view([-1]), input.view([-1]));
        let (out_ptr, in_ptr) = (flat_out.as_mut_ptr() as *mut c_void, flat_in.as_ptr() as *mut c_void);
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_reduce_scatter_tensor(
                self.raw.as_ptr(),
                out_ptr,
                in_ptr,
                crate::reduce_op::raw(op),
                out,
                err,
            )
        })
    }

    /// Waits until every rank of the group has reached this point.
    #[track_caller]
    pub fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait()
    }

    /// [`ProcessGroup::barrier`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn barrier_async(&self) -> Result<Work> {
        let span = self.observe(CollectiveOp::Barrier, None, None, None);
        self.start("barrier", span, |out, err| unsafe { ffi::tchd_barrier(self.raw.as_ptr(), out, err) })
    }
}
