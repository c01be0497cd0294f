//! The WideResNet split over a TP group (step 15, `WideResNet::tensor_parallel`): what
//! TP rank 0 prints of it, and what the trace records of its slices after each epoch.
use std::collections::BTreeMap;
use std::sync::Arc;

use lab_trace::event;
use tch::{nn, Tensor};
use tch_distributed as dist;

use crate::trace;

/// Every variable's shape in `vs`, before the model is split.
pub(crate) fn shapes(vs: &nn::VarStore) -> BTreeMap<String, Vec<i64>> {
    vs.variables().into_iter().map(|(name, t)| (name, t.size())).collect()
}

/// A model split over a TP group: its variables (as split) and their unsplit shapes.
#[derive(Debug)]
pub(crate) struct SplitModel {
    group: Arc<dist::ProcessGroup>,
    variables: BTreeMap<String, Tensor>,
    whole: BTreeMap<String, Vec<i64>>,
}

impl SplitModel {
    pub(crate) fn new(
        vs: &nn::VarStore,
        group: &Arc<dist::ProcessGroup>,
        whole: BTreeMap<String, Vec<i64>>,
    ) -> SplitModel {
        SplitModel { group: group.clone(), variables: vs.variables().into_iter().collect(), whole }
    }

    /// The trainable values this rank holds, and the unsplit model's.
    pub(crate) fn held(&self) -> (i64, i64) {
        let trainable = self.variables.iter().filter(|(_, t)| t.requires_grad());
        trainable.fold((0, 0), |(held, whole), (name, t)| {
            let full = self.whole.get(name).map_or(t.numel() as i64, |s| s.iter().product());
            (held + t.numel() as i64, whole + full)
        })
    }

    /// What TP rank 0 prints once the model is split.
    pub(crate) fn describe(&self) -> String {
        let (held, whole) = self.held();
        describe(self.group.rank(), self.group.world_size(), held, whole)
    }

    /// Records this rank's slices ([`event::TensorSlices`]) and, on TP rank 0, the
    /// trainable parameters gathered whole from every rank's slice
    /// ([`event::ParameterValues`], `sharded`). Collective: every TP rank calls it,
    /// the variables in name order.
    pub(crate) fn record(&self, epoch: usize) -> dist::Result<()> {
        let (rank, size) = (self.group.rank(), self.group.world_size());
        let mut slices = Vec::new();
        let mut gathered = Vec::new();
        let _no_grad = tch::no_grad_guard();
        for (name, tensor) in &self.variables {
            let shape = tensor.size();
            let whole = self.whole.get(name).cloned().unwrap_or_else(|| shape.clone());
            // The split dimension is the one this rank holds less of.
            let dim = (0..shape.len()).find(|&d| shape.get(d) != whole.get(d));
            let (offset, length) = match dim {
                Some(d) => (rank as i64 * shape[d], shape[d]),
                None => (0, shape.first().copied().unwrap_or(1)),
            };
            let digest = trace::fingerprint(&[tensor.shallow_clone()]).digest;
            slices.push(event::ParameterSlice {
                name: name.clone(),
                shape,
                whole,
                dim,
                offset,
                length,
                digest,
            });
            if tensor.requires_grad() {
                let value = match dim {
                    Some(d) => dist::gather_from_region(tensor, d as i64, &self.group)?,
                    None => tensor.shallow_clone(),
                };
                gathered.push((name.clone(), value));
            }
        }
        // The name c10d gives a group is its number in creation order.
        let group = self.group.group_name().parse().unwrap_or(u64::MAX);
        trace::record(event::TensorSlices { epoch, tp_rank: rank, tp_size: size, group, parameters: slices });
        if rank == 0 {
            trace::record_parameter_values(epoch, true, &gathered);
        }
        Ok(())
    }
}

/// "tensor parallel over 2 ranks: rank 0 holds 91,234 of the model's 173,778 parameters
/// (52.5%; the split layers' 1/2 and the replicated ones whole)".
fn describe(rank: usize, size: usize, held: i64, whole: i64) -> String {
    format!(
        "tensor parallel over {size} ranks: rank {rank} holds {} of the model's {} parameters ({:.1}%; the split layers' 1/{size} and the replicated ones whole)",
        crate::report::grouped(held),
        crate::report::grouped(whole),
        100.0 * held as f64 / whole.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_0_says_what_it_holds_of_the_whole_model() {
        assert_eq!(
            describe(0, 2, 88_000, 176_000),
            "tensor parallel over 2 ranks: rank 0 holds 88,000 of the model's 176,000 parameters (50.0%; the split layers' 1/2 and the replicated ones whole)"
        );
    }
}
