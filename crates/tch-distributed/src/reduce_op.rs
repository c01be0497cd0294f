//! How a collective combines the ranks' values: PyTorch's `ReduceOp`, below both the
//! process group, which passes it to c10d, and `debug`, which describes the calls. The
//! enum itself is pytorch-names' (one definition, shared with the lab's trace).

/// How values from all ranks are combined. [`name`](ReduceOp::name) is PyTorch's
/// (`ReduceOp.SUM`). Mean over ranks (`Avg`) is NCCL's only: with Gloo, use `Sum` and
/// divide by the world size.
pub use pytorch_names::ReduceOp;

/// c10d's number for `op` (`c10d::ReduceOp::RedOpType`).
pub(crate) fn raw(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Avg => 1,
        ReduceOp::Product => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_have_pytorchs_names_and_c10ds_numbers() {
        let named: Vec<(&str, i32)> = ReduceOp::ALL.iter().map(|op| (op.name(), raw(*op))).collect();
        assert_eq!(named, [("SUM", 0), ("AVG", 1), ("PRODUCT", 2), ("MIN", 3), ("MAX", 4)]);
        assert_eq!(ReduceOp::Avg.to_string(), "AVG");
    }
}
