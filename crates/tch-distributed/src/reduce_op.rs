//! How a collective combines the ranks' values: below both the process group, which
//! passes it to c10d, and `debug`, which describes the calls.
//!
//! The enum is the lab trace's own ([`lab_trace::ReduceOp`]): one definition, so that
//! the op a program passes is the op the checker reads, by PyTorch's name (`SUM`).
pub use lab_trace::ReduceOp;

/// `op` as c10d numbers it (`c10d::ReduceOp::RedOpType`).
pub(crate) fn c10d(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Avg => 1,
        ReduceOp::Product => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
    }
}
