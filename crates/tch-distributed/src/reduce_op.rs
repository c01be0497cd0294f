//! How a collective combines the ranks' values: below both the process group, which
//! passes it to c10d, and `debug`, which describes the calls.

/// How values from all ranks are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum over ranks.
    Sum,
    /// Mean over ranks. NCCL only: with Gloo, use `Sum` and divide by the world size.
    Avg,
    /// The product over ranks.
    Product,
    /// The smallest value, element by element.
    Min,
    /// The largest value, element by element.
    Max,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> i32 {
        // Same numbering as c10d::ReduceOp::RedOpType.
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Product => 2,
            ReduceOp::Min => 3,
            ReduceOp::Max => 4,
        }
    }
}
