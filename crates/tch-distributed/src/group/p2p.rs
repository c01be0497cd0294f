//! Point-to-point: `send` and `recv` (and their forms without waiting) between two ranks
//! of a group.
use std::ffi::c_void;
use std::panic::Location;
use std::sync::atomic::Ordering;

use tch::Tensor;

use super::{Backend, ProcessGroup, Work};
use crate::debug::CollectiveOp;
use crate::error::{DistError, ErrorKind, Result};
use crate::ffi;

impl ProcessGroup {
    /// Sends `tensor` to rank `dst`, which must [`recv`](Self::recv) a tensor of the same
    /// shape and dtype with the same `tag` (`torch.distributed.send`). Returns once the
    /// tensor has been handed over: with Gloo, when `dst` has received it.
    ///
    /// Only the two ranks take part, so the other ranks issue nothing; two ranks that
    /// both send to each other first wait for ever: use [`isend`](Self::isend) and
    /// [`irecv`](Self::irecv) for exchanges.
    #[track_caller]
    pub fn send(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<()> {
        self.isend(tensor, dst, tag)?.wait()
    }

    /// [`ProcessGroup::send`] without waiting (`torch.distributed.isend`): the tensor must
    /// not change until [`Work::wait`] returned.
    #[track_caller]
    pub fn isend(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::Send;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        self.check_point_to_point(dst, tag, WHAT, "destination")?;
        let span = self.observe_point_to_point(OP, dst, tensor);
        // c10d only reads what it sends; the shim's signature is not const-correct.
        let ptr = tensor.as_ptr() as *mut c_void;
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_send(self.raw.as_ptr(), ptr, dst as i32, tag, out, err)
        })
    }

    /// Receives into `tensor` what rank `src` [`send`](Self::send)s with the same `tag`
    /// (`torch.distributed.recv`); the shapes and dtypes must agree.
    #[track_caller]
    pub fn recv(&self, tensor: &mut Tensor, src: usize, tag: i32) -> Result<()> {
        self.irecv(tensor, src, tag)?.wait()
    }

    /// [`ProcessGroup::recv`] without waiting (`torch.distributed.irecv`): `tensor`
    /// holds the data once [`Work::wait`] returned.
    #[track_caller]
    pub fn irecv(&self, tensor: &mut Tensor, src: usize, tag: i32) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::Recv;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        self.check_point_to_point(src, tag, WHAT, "source")?;
        let span = self.observe_point_to_point(OP, src, tensor);
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_recv(self.raw.as_ptr(), ptr, src as i32, tag, out, err)
        })
    }

    /// Receives into `tensor` from whichever rank sends first with `tag`, and returns
    /// that rank (`torch.distributed.recv` with `src=None`). Gloo only: NCCL has no
    /// receive from any source.
    #[track_caller]
    pub fn recv_any_source(&self, tensor: &mut Tensor, tag: i32) -> Result<usize> {
        const OP: CollectiveOp = CollectiveOp::Recv;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        check_tag(tag, WHAT)?;
        if self.backend == Backend::Nccl {
            return Err(DistError::new(
                ErrorKind::Unsupported,
                "recv from any source: NCCL cannot receive from an unnamed rank (neither can PyTorch's): name the source rank",
            ));
        }
        let seq = self.p2p_issued.fetch_add(1, Ordering::SeqCst);
        let span =
            self.describe_call(OP, None, None, std::slice::from_ref(tensor), seq, Some(Location::caller()));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        let work = self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_recv(self.raw.as_ptr(), ptr, -1, tag, out, err)
        })?;
        work.wait_for_source()
    }

    fn check_point_to_point(&self, peer: usize, tag: i32, what: &str, role: &str) -> Result<()> {
        self.check_peer(peer, what, role)?;
        if peer == self.rank {
            return Err(DistError::invalid(format!(
                "{what}: the {role} rank {peer} is this rank itself: a rank cannot {what} to or from itself (as in PyTorch); name another rank of 0..{}",
                self.world_size
            )));
        }
        check_tag(tag, what)
    }
}

/// Tags tell apart several messages between the same two ranks; Gloo refuses
/// negative ones.
fn check_tag(tag: i32, what: &str) -> Result<()> {
    if tag < 0 {
        return Err(DistError::invalid(format!(
            "{what}: tag {tag} is negative: tags are 0 or more (0 by default)"
        )));
    }
    Ok(())
}
