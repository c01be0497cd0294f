//! How a collective combines the ranks' values: below both the process group, which
//! passes it to c10d, and `debug`, which describes the calls.

crate::named::pytorch_named! {
    /// How values from all ranks are combined. [`name`](Self::name) is PyTorch's
    /// (`ReduceOp.SUM`).
    pub enum ReduceOp {
        /// The sum over ranks.
        Sum = "SUM",
        /// Mean over ranks. NCCL only: with Gloo, use `Sum` and divide by the world size.
        Avg = "AVG",
        /// The product over ranks.
        Product = "PRODUCT",
        /// The smallest value, element by element.
        Min = "MIN",
        /// The largest value, element by element.
        Max = "MAX",
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_have_pytorchs_names_and_c10ds_numbers() {
        let named: Vec<(&str, i32)> = ReduceOp::ALL.iter().map(|op| (op.name(), op.raw())).collect();
        assert_eq!(named, [("SUM", 0), ("AVG", 1), ("PRODUCT", 2), ("MIN", 3), ("MAX", 4)]);
        assert_eq!(ReduceOp::Avg.to_string(), "AVG");
    }
}
