//! What a program asks of the library, call by call: PyTorch's
//! `TORCH_DISTRIBUTED_DEBUG=DETAIL` for the collectives issued through this crate.
//!
//! Each collective a [`ProcessGroup`](crate::ProcessGroup) starts is described by a
//! [`CollectiveCall`]: the operation, its reduce op and root, the tensor's dtype and
//! element count, and the group's sequence number (every rank of a group numbers its
//! collectives the same way, so the same number on two ranks must be the same call).
//!
//! - `TORCH_DISTRIBUTED_DEBUG=DETAIL` in the environment prints one line per call on
//!   standard error, as PyTorch logs them.
//! - [`set_collective_observer`] hands every call to a function: the lab's trace uses
//!   it so that the checker can judge what a program asked for, not only what one
//!   backend happened to leave in a buffer (Gloo's `reduce` leaves the sum on every
//!   rank; NCCL's does not).
//!
//! - [`set_group_observer`] hands every group this process makes (or numbers without
//!   joining: [`new_group`](crate::new_group) numbers a group on every rank) to a
//!   function, so that a reader of the collectives can tell which ranks a group number
//!   stands for, and which mesh dimension it is.
//!
//! The collectives DDP's Reducer runs inside backward are c10d's own and are not
//! described here.
use std::sync::OnceLock;

use tch::{Kind, Tensor};

use crate::reduce_op::ReduceOp;

/// Tensors up to this many elements have their values copied into
/// [`CollectiveCall::values`] (only while an observer is installed: on a GPU the copy
/// waits for the device).
pub const OBSERVED_VALUES_MAX: i64 = 16;

/// A collective issued through this crate, by PyTorch's name ([`name`](CollectiveOp::name):
/// `all_reduce`): the program's own calls ([`all_reduce`](crate::all_reduce),
/// [`send`](crate::send), ...) and those DDP and FSDP make on their own
/// ([`broadcast_coalesced`](crate::broadcast_coalesced), `all_gather_into_tensor`, ...).
/// The enum is pytorch-names', shared with the lab's trace.
pub use pytorch_names::CollectiveOp;

/// One collective as the program issued it.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveCall {
    /// Which collective: the program's (`all_reduce`, `barrier`, the point-to-point
    /// `send` and `recv`, ...) or DDP's and FSDP's own (`broadcast_coalesced`,
    /// `all_gather_into_tensor`, ...).
    pub op: CollectiveOp,
    /// The reduction of `all_reduce`, `reduce` and `reduce_scatter_tensor` (`None` for
    /// the others).
    pub reduce_op: Option<ReduceOp>,
    /// The destination of `reduce`, the source of `broadcast`; the other rank of a
    /// `send` (its destination) or a `recv` (its source; `None` from any source).
    pub root: Option<usize>,
    /// The input tensor's element type (`None` for a barrier).
    pub dtype: Option<Kind>,
    /// Elements in the input tensor (0 for a barrier): for `all_gather_into_tensor` the
    /// rank's shard, for `reduce_scatter_tensor` the whole input (world size times the
    /// output); for `recv` the tensor received into.
    pub numel: i64,
    /// The group's own count of collectives issued through this crate, from 0.
    /// `send` and `recv` are numbered apart, in their own count from 0 (as NCCL numbers
    /// its point-to-point calls): only two ranks of the group take part in each, so a
    /// reader matching calls across ranks by number must leave them out
    /// ([`CollectiveOp::is_point_to_point`]).
    pub seq: u64,
    /// Which group of this process, in creation order (0: the first, usually the default).
    pub group: u64,
    /// The caller's rank in the group.
    pub rank: usize,
    /// The group's size.
    pub world_size: usize,
    /// The input's values before the call, when an observer is installed and the tensor
    /// has at most [`OBSERVED_VALUES_MAX`] elements.
    pub values: Option<Vec<f64>>,
    /// The line that issued it: the program's call of `dist::reduce(...)` or
    /// `group.barrier()` (the collectives are `#[track_caller]`), so that a report can
    /// point at the line to fix. `None` for the calls DDP makes on its own.
    pub site: Option<&'static std::panic::Location<'static>>,
}

impl CollectiveCall {
    /// e.g. `reduce(op=SUM, root=1) Double[1]` or `send(dst=1) Float[4]`, in the words
    /// PyTorch's logs and arguments use.
    pub fn describe(&self) -> String {
        let dtype = self.dtype.map(|kind| format!("{kind:?}"));
        pytorch_names::describe(self.op, self.reduce_op, self.root, dtype.as_deref().map(|d| (d, self.numel)))
    }
}

impl CollectiveCall {
    /// The bytes of the tensor(s) [`numel`](Self::numel) counts.
    pub fn bytes(&self) -> i64 {
        self.numel * self.dtype.map_or(0, |kind| kind.elt_size_in_bytes() as i64)
    }
}

/// A process group this process made or numbered: the default group,
/// [`new_group`](crate::new_group)'s (on every rank, member or not, as every rank
/// numbers it), and each dimension of [`init_device_mesh`](crate::init_device_mesh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCreation {
    /// Its number in this process, in creation order: [`CollectiveCall::group`].
    pub group: u64,
    /// Its members' global ranks, in the order of their ranks in it.
    pub ranks: Vec<usize>,
    /// This process's rank in it; `None` when this process is not a member.
    pub rank: Option<usize>,
    /// The name of the mesh dimension it is this rank's group of, when
    /// [`init_device_mesh`](crate::init_device_mesh) made it. A dimension that spans the
    /// whole world uses the default group and reports it once more, with that name.
    pub mesh_dim: Option<String>,
}

type Observer = Box<dyn Fn(&CollectiveCall) + Send + Sync>;
type GroupObserver = Box<dyn Fn(&GroupCreation) + Send + Sync>;

static GROUP_OBSERVER: OnceLock<GroupObserver> = OnceLock::new();

/// Hands every group this process makes or numbers from now on to `observer`, once
/// each is made (before its first collective). One observer per process: a second call
/// is refused (returns false) and the first stays.
pub fn set_group_observer(observer: impl Fn(&GroupCreation) + Send + Sync + 'static) -> bool {
    GROUP_OBSERVER.set(Box::new(observer)).is_ok()
}

/// Called where a group is made or numbered.
pub(crate) fn group_created(creation: impl FnOnce() -> GroupCreation) {
    if let Some(observe) = GROUP_OBSERVER.get() {
        observe(&creation());
    }
}

static OBSERVER: OnceLock<Observer> = OnceLock::new();

/// Hands every collective this process issues from now on to `observer`, before the
/// collective starts. One observer per process: a second call is refused (returns
/// false) and the first stays.
pub fn set_collective_observer(observer: impl Fn(&CollectiveCall) + Send + Sync + 'static) -> bool {
    OBSERVER.set(Box::new(observer)).is_ok()
}

pub(crate) fn detail_logging() -> bool {
    static DETAIL: OnceLock<bool> = OnceLock::new();
    *DETAIL.get_or_init(|| {
        std::env::var("TORCH_DISTRIBUTED_DEBUG").is_ok_and(|v| v.trim().eq_ignore_ascii_case("detail"))
    })
}

/// Whether anyone listens: the group skips building a description otherwise.
pub(crate) fn wanted() -> bool {
    OBSERVER.get().is_some() || detail_logging()
}

/// Called by the group before it starts a collective.
pub(crate) fn issued(mut call: CollectiveCall, input: Option<&Tensor>) {
    let observer = OBSERVER.get();
    if observer.is_some() {
        call.values = input.filter(|t| (t.numel() as i64) <= OBSERVED_VALUES_MAX).and_then(|t| {
            let flat = t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Double).flatten(0, -1);
            Vec::<f64>::try_from(&flat).ok()
        });
    }
    if detail_logging() {
        let site = call.site.map(|at| format!(" at {at}")).unwrap_or_default();
        eprintln!(
            "[rank {}] TORCH_DISTRIBUTED_DEBUG: group {} collective #{}: {}{site}",
            call.rank,
            call.group,
            call.seq,
            call.describe()
        );
    }
    if let Some(observe) = observer {
        observe(&call);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_calls_in_pytorchs_words() {
        let call = CollectiveCall {
            op: CollectiveOp::Reduce,
            reduce_op: Some(ReduceOp::Sum),
            root: Some(1),
            dtype: Some(Kind::Double),
            numel: 1,
            seq: 3,
            group: 0,
            rank: 0,
            world_size: 2,
            values: None,
            site: None,
        };
        assert_eq!(call.describe(), "reduce(op=SUM, root=1) Double[1]");
        let barrier = CollectiveCall {
            op: CollectiveOp::Barrier,
            reduce_op: None,
            root: None,
            dtype: None,
            numel: 0,
            ..call
        };
        assert_eq!(barrier.describe(), "barrier()");
    }

    #[test]
    fn sends_and_receives_are_the_point_to_point_calls() {
        let p2p: Vec<CollectiveOp> =
            CollectiveOp::ALL.iter().copied().filter(|op| op.is_point_to_point()).collect();
        assert_eq!(p2p, [CollectiveOp::Send, CollectiveOp::Recv]);
        assert_eq!(CollectiveOp::AllGatherIntoTensor.to_string(), "all_gather_into_tensor");
    }
}
