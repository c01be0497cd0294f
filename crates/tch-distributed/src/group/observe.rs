//! What a group tells of each call it issues: its number, its description for `debug`
//! and `mismatch`, and its span.
use std::panic::Location;
use std::sync::atomic::Ordering;

use tch::Tensor;

use super::ProcessGroup;
use crate::debug::CollectiveOp;
use crate::reduce_op::ReduceOp;
use crate::spans;

impl ProcessGroup {
    /// Numbers every collective (as every rank numbers the same calls), describes it
    /// to [`crate::debug`] when someone listens, and starts timing it for the
    /// [`spans`] when that is on.
    #[track_caller]
    pub(super) fn observe(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        input: Option<&Tensor>,
    ) -> spans::Span {
        let seq = self.issued.fetch_add(1, Ordering::SeqCst);
        let tensors = input.map(std::slice::from_ref).unwrap_or_default();
        self.describe_call(op, reduce_op, root, tensors, seq, Some(Location::caller()))
    }

    /// [`observe`](Self::observe) for a call over several tensors (DDP's coalesced
    /// broadcast): their total element count, the first one's dtype; values only of one.
    pub(crate) fn observe_tensors(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        tensors: &[Tensor],
    ) -> spans::Span {
        let seq = self.issued.fetch_add(1, Ordering::SeqCst);
        self.describe_call(op, reduce_op, root, tensors, seq, None)
    }

    /// [`observe`](Self::observe) for a send or a receive: `peer` is the other rank, and
    /// the number is the group's count of sends and receives, not of collectives.
    #[track_caller]
    pub(super) fn observe_point_to_point(
        &self,
        op: CollectiveOp,
        peer: usize,
        tensor: &Tensor,
    ) -> spans::Span {
        let seq = self.p2p_issued.fetch_add(1, Ordering::SeqCst);
        self.describe_call(op, None, Some(peer), std::slice::from_ref(tensor), seq, Some(Location::caller()))
    }
    pub(super) fn describe_call(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        tensors: &[Tensor],
        seq: u64,
        site: Option<&'static Location<'static>>,
    ) -> spans::Span {
        let numel: i64 = tensors.iter().map(|t| t.numel() as i64).sum();
        let bytes: i64 = tensors.iter().map(|t| t.numel() as i64 * t.kind().elt_size_in_bytes() as i64).sum();
        let mut span = spans::span(op.name(), "collective", spans::Lane::Collectives);
        if span.is_timed() {
            span = span
                .arg("seq", spans::Arg::Int(seq as i64))
                .arg("group", spans::Arg::Int(self.id as i64))
                .arg("numel", spans::Arg::Int(numel))
                .arg("bytes", spans::Arg::Int(bytes));
            if let Some(op) = reduce_op {
                span = span.arg("reduce_op", spans::Arg::Text(op.name().into()));
            }
            if let Some(root) = root {
                let key = if op.is_point_to_point() { "peer" } else { "root" };
                span = span.arg(key, spans::Arg::Int(root as i64));
            }
        }
        let call = crate::debug::CollectiveCall {
            op,
            reduce_op,
            root,
            dtype: tensors.first().map(Tensor::kind),
            numel,
            seq,
            group: self.id,
            rank: self.rank,
            world_size: self.world_size,
            values: None,
            site,
        };
        crate::mismatch::remember(&call);
        if crate::debug::wanted() {
            let input = match tensors {
                [one] => Some(one),
                _ => None,
            };
            crate::debug::issued(call, input);
        }
        span
    }
}
